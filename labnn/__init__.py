"""labnn: build, run and understand how transformers remember.

Models: multi-head attention and a causal transformer LM (`labnn.transformer`), Transformer-XL
(`labnn.xl`), the Feedback Transformer (`labnn.feedback`) and its key/value-sharing stack
(`labnn.feedback_kv`, `labnn.stack`). Data, a trainer, plots and exercise checkers come with them.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__version__ = "0.1.0"


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (every device) and return a CPU generator seeded the same way.

    Args:
        seed: any non-negative integer.

    Returns:
        A `torch.Generator` seeded with `seed`, for code that wants its own random stream.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def fast_mode() -> bool:
    """True when the environment asks for shrunken training (`LABNN_FAST=1`, as in CI)."""
    return os.environ.get("LABNN_FAST", "").strip().lower() not in ("", "0", "false", "no")
