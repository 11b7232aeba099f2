"""The slips of notebook 01's multi-head exercises that a written-out variant of the
reference shows: heads averaged instead of joined, head count and head width swapped, a
Linear's weight used untransposed. Named for `labnn.exercises.multi_head`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` tokens, `D` width
(`d_model`), `D_h` head width.
"""

from __future__ import annotations

import torch

from labnn.nn.attention import MultiHeadAttention
from labnn.exercises.grading import close, fail


def expect_heads_joined(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`got` = `merge_heads(heads)`, `heads` `[B, H, T, D_h]`: fail when a `D_h`-wide slice
    of `got` is the mean (or sum) of the heads, which merges them by averaging (or
    adding) instead of joining each head's features side by side."""
    b, h, t, dh = heads.shape
    if got.shape != (b, t, h * dh):
        return
    slices = got.detach().view(b, t, h, dh).unbind(2)
    for how, merged in (("averages", "mean"), ("adds", "sum")):
        if any(close(s, getattr(heads, merged)(1)) for s in slices):
            fail(f"{what} {how} the heads (x.{merged}(1)): concatenate them instead, each "
                 f"head keeping its own D_h = {dh} features: x.transpose(1, 2).reshape(B, "
                 "T, D).")


def mha_slips(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
              y: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """More known mistakes of multi-head attention, as `(result, message)` pairs; `y` is
    the right result before the output projection."""
    w, bias = mha.out_proj.weight, mha.out_proj.bias
    linear = ("y @ mha.out_proj.weight uses the weight untransposed: a Linear's weight is "
              "[out, in], so it computes y @ W.T + b; call mha.out_proj(y).")
    h, dh = mha.n_heads, mha.d_head
    swapped = (f"you split into mha.d_head = {dh} heads of width {h}: n_heads and d_head "
               f"are swapped; split into mha.n_heads = {h} heads of mha.d_head = {dh} "
               "features each.")
    return [(y @ w + bias, linear), (y @ w, linear),
            *[(_heads(x, mha, mask, dh, scale), swapped) for scale in (h, dh)]]


def _heads(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor, n_heads: int,
           scale: int) -> torch.Tensor:
    """Multi-head attention with `n_heads` heads of width `D / n_heads`, scores divided
    by sqrt(`scale`)."""
    b, t, d = x.shape
    q, k, v = (z.view(b, t, n_heads, d // n_heads).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    s = (q @ k.mT / scale ** 0.5).masked_fill(~mask, float("-inf"))
    return mha.out_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
