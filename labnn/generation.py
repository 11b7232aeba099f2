"""Sampling the next token from a language model's logits.

Dimension letters: `B` batch, `V` vocabulary size.
"""

from __future__ import annotations

import torch


def check_sampling(temperature: float, top_k: int | None) -> None:
    """Raise a clear error for a negative temperature or a non-positive `top_k`."""
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")


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
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.float().softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
