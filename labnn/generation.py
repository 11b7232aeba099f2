"""Sampling the next token from a language model's logits.

Dimension letters: `B` batch, `V` vocabulary size.
"""

from __future__ import annotations

import math

import torch


def is_int(value) -> bool:
    """Whether `value` is a Python int and not a bool (`True` would otherwise pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_sampling(temperature: float, top_k: int | None, n: int | None = None) -> None:
    """Raise a clear error for a temperature that is not a finite number >= 0, a `top_k` that is not a
    positive int or None, or (when given) a count `n` of new tokens that is not an int >= 0."""
    number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not number or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a number >= 0 and finite (0 = greedy), got {temperature!r}")
    if top_k is not None and (not is_int(top_k) or top_k <= 0):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    if n is not None and (not is_int(n) or n < 0):
        raise ValueError(f"n must be a non-negative int, got {n!r}")


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Draw one token per row from $\mathrm{softmax}(\ell / \tau)$, restricted to the `top_k` largest logits.

    Args:
        logits: next-token logits.
        temperature: $\tau$; 0 picks the most likely token (greedy).
        top_k: keep only this many candidates (None keeps all).
        generator: random stream for the draw.

    Shape:
        logits `[B, V]` -> tokens `[B]`.
    """
    check_sampling(temperature, top_k)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.size(1) == 0:
        got = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a [B, V] tensor with V >= 1, got {got}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.float().softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
