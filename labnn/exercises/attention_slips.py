"""The slips of notebook 01's attention exercises that need the learner's function run
again (a mask turned into a causal one, a broadcast error that a transposed mask or a
missing `keepdim` causes): named for `labnn.exercises.masked_attention`.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True =
may attend.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.nn.attention import causal_mask, scaled_dot_product_attention
from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     fail)
from labnn.exercises.grading.slips import MASK_IGNORED, MASK_NONE_CAUSAL


def _attend(q, k, v, mask=None) -> torch.Tensor:
    """The reference attention on `[B, T, D]` inputs."""
    return scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]


def expect_no_default_mask(fn: Callable, got: torch.Tensor, q, k, v,
                           mask: torch.Tensor) -> None:
    """`got` = `fn(q, k, v)` with mask=None: fail when it is a causal attention (mask=None
    turned into a causal mask, or the mask argument always ignored for a causal one)."""
    causal = _attend(q, k, v, causal_mask(q.size(1), k.size(1)))
    if not close(got, causal) or close(causal, _attend(q, k, v)):
        return
    try:
        ignored = close(fn(q.clone(), k.clone(), v.clone(), mask.clone()), causal)
    except Exception:
        ignored = False
    fail(MASK_IGNORED if ignored else MASK_NONE_CAUSAL)


def mask_broadcast(fn: Callable, q, k, v, mask: torch.Tensor) -> Callable:
    """A `diagnose` for the call with a mask: a broadcast error between `T` and `S` is
    named when the function runs on square inputs (`S = T`) and gives the result of a
    transposed mask, or of `~mask.any(-1)` without `keepdim` (it lines up with keys)."""
    t = q.size(1)
    square = mask[:, :t].clone()
    square[1] = False  # a query that may attend nothing: zeroing it needs keepdim
    ks, vs = k[:, :t], v[:, :t]
    scores = (q @ ks.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~square, -torch.inf)
    no_keepdim = scores.softmax(-1).masked_fill(~square.any(-1), 0.0) @ vs
    slips = [
        (_attend(q, ks, vs, square.T),
         f"the mask is transposed: mask [T, S] = [{t}, {k.size(1)}] lines up with the "
         "scores [B, T, S] as it is (query, key); use mask, not mask.mT."),
        (no_keepdim,
         "~mask.any(dim=-1) without keepdim=True has shape [T] and lines up with the "
         "keys, the last axis: use mask.any(dim=-1, keepdim=True), [T, 1]."),
    ]

    def diagnose(err: Exception) -> None:
        if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
            return
        try:
            got = fn(q.clone(), ks.clone(), vs.clone(), square.clone())
        except Exception:
            return
        for wrong, message in slips:
            if isinstance(got, torch.Tensor) and close(got.detach(), wrong):
                fail(f"{message} (torch said: {str(err).strip().splitlines()[0]})")

    return diagnose


def expect_batched_mask(fn: Callable, q, k, v, mask: torch.Tensor) -> None:
    """Run `fn` with a `[B, T, S]` mask (the stub allows one), made of `mask` `[T, S]` for
    batch 0 and a different mask with one all-False row for batch 1, and name the two
    slips a `[T, S]` mask hides: the all-False-row fix reducing over dim 1 (the queries of
    a 3-D mask) and a per-batch loop that reuses `mask[0]`."""
    batched = torch.stack([mask, mask.roll(1, dims=-1)])
    batched[1, 2] = False  # batch 1, query 2 may attend nothing; batch 0 has no such row
    what = "attention(q, k, v, mask) with a [B, T, S] mask"
    want = _attend(q, k, v, batched[:, None])
    got = expect_tensor(call(fn, f"{what} (mask {list(batched.shape)} bool)", q.clone(),
                             k.clone(), v.clone(), batched.clone()), what)
    expect_like(got, want, what)
    got = got.detach()
    if torch.isnan(got[1, 2]).any() and not torch.isnan(got[0]).any():
        fail(f"{what}: the all-False row (b=1, i=2) gives NaN: the all-False-row fix "
             "reduces over the wrong axis of a [B, T, S] mask (dim 1 is the queries "
             "there): use mask.any(dim=-1, keepdim=True).")
    if close(got[:1], want[:1]) and close(got[1:], _attend(q, k, v, mask)[1:]):
        fail(f"{what}: batch row 1 is attended with batch 0's mask, mask[0]: row b uses "
             "mask[0]; use mask[b] (or pass the whole mask, which broadcasts).")
    expect_close(got, want, what, dims="b i d")
