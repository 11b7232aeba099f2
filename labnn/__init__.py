"""labnn: build, run and understand how transformers remember.

Models: multi-head attention and a causal transformer LM (`labnn.transformer`),
Transformer-XL (`labnn.xl.model`), the Feedback Transformer (`labnn.feedback.model`) and its
key/value-sharing stack (`labnn.feedback.kv`, `labnn.feedback.stack`); compiled generation for
the transformer, XL and the KV feedback model (`labnn.compiled`). Data, a trainer, plots and
exercise checkers come with them.

One legend of dimension letters holds for the whole package (each module lists the
letters it uses):

| letter | meaning |
|---|---|
| `B` | batch: sequences processed side by side |
| `T` | tokens read in this call (a segment, a block) |
| `M` | positions remembered from earlier calls (a memory, cache or state) |
| `S` | keys one query attends to (at most `M + T`, or the window `W`) |
| `W` | attention window (`attn_len`) |
| `C` | capacity of a preallocated buffer (`Stack`, `KVBuffer`, a ring cache) |
| `H`, `D`, `D_h` | heads, model width, head width `D / H` |
| `F` | feed-forward width (`d_ff`) |
| `L` | layers |
| `V` | vocabulary size |
| `N` | items of a dataset: examples, programs, or the ids of a corpus |
| `P` | processes training one model together under `torchrun` (`labnn.training.distributed`) |

A module may also name a size of its own from these, and says so where it does: `T0` the
tokens of a prompt, `S_max` the most keys any step attends to, `R` the distances in a
table of relative keys (Transformer-XL), `E` the shape of one value pushed onto a `Stack`,
`D_in` and `D_out` the input and output width of a `StepLinear`, `K` and `N` those of one
product in a kernel.

Tensors are batch-first: `[B, T, D]`, heads `[B, H, T, D_h]`, memories `[B, M, D]`.
Boolean masks mean True = may attend.
"""

from __future__ import annotations

import importlib
import os
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__version__ = "0.1.0"

# The root imports neither torch nor a sub-package, so that `python -m labnn` can answer
# a Ctrl-C pressed while torch loads (a second or two) with one line (`labnn.__main__`).
# `labnn.nn`, `labnn.xl`, ... load on first use, as `import labnn.nn` would load them.
_SUBMODULES = ("cli", "compiled", "data", "exercises", "feedback", "nn", "plot", "training",
               "transformer", "xl")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES])


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (every device) and return a CPU generator seeded
    the same way.

    Args:
        seed: any non-negative integer.

    Returns:
        A `torch.Generator` seeded with `seed`, for code that wants its own random stream.
    """
    import numpy as np
    import torch

    from labnn.nn.arguments import check_int

    check_int("seed", seed, low=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def fast_mode() -> bool:
    """True when the environment asks for shrunken training (`LABNN_FAST=1`, as in CI)."""
    value = os.environ.get("LABNN_FAST", "").strip().lower()
    return value not in ("", "0", "false", "no")
