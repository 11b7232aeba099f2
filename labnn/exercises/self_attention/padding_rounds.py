"""A batch of pure padding in notebook 01's Exercises 2 and 5: an all-False mask, where no
query may attend any key. Every output row is then zeros (Exercise 5: `mha.out_proj` of
zeros), and so is every gradient; an answer that skips the mask when no key is allowed at
all (`if mask is not None and mask.any(): ...`) gives the unmasked attention there, named,
as are zeros kept by shape and handed out again by a second call, zeros made for it on
the CPU (`torch.zeros(...)` without `device=`), and mask=None turned into a mask that
forbids keys.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True =
may attend.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_any_device, expect_close, expect_like,
                                     expect_tensor, fail)
from labnn.exercises.self_attention.backward_rounds import expect_backward_of
from labnn.exercises.self_attention.fresh_rounds import expect_apart
from labnn.exercises.self_attention.recorded_slips import expect_mha_finite_backward
from labnn.nn.attention import MultiHeadAttention, scaled_dot_product_attention

SKIPPED = ("{what} (no query may attend any key: a batch of pure padding) gives the unmasked "
           "attention, not zeros: your masking is skipped when no key is allowed at all "
           "(if mask.any(): ...?). Apply the mask whenever one is given, then zero the rows "
           "with no allowed key.")


def expect_none_unmasked(got: torch.Tensor, attend: Callable, t: int, s: int) -> None:
    """`got` what mask=None gave: fail when a default mask `[t, s]` that forbids keys gives
    it, all False (zeros, as an additive mask of no masking) or the causal mask inverted
    (`triu(1)`); `attend(mask)` is the right attention with that mask."""
    ones = torch.ones(t, s, dtype=torch.bool)
    for mask, name in ((~ones, "a mask of all False (torch.zeros)"),
                       (ones.triu(1), "a causal mask inverted (triu(1))")):
        if close(got, attend(mask)):
            fail(f"with mask=None your answer attends as {name} would: mask=None means no "
                 "mask, every query attends every key: mask only under `if mask is not "
                 "None:`.")


def _expect_zeros(got: torch.Tensor, want: torch.Tensor, unmasked: torch.Tensor,
                  what: str, dims: str) -> None:
    """`got` on an all-False mask: `want`, else named when it is the unmasked `unmasked`."""
    expect_like(got, want, what)
    if not close(got, want) and close(got, unmasked):
        fail(SKIPPED.format(what=what))
    expect_close(got, want, what, dims=dims)


def expect_all_false_attention(fn: Callable, q: torch.Tensor, k: torch.Tensor,
                               v: torch.Tensor) -> None:
    """Exercise 2: `fn(q, k, v, mask)` with an all-False `[T, S]` mask gives zeros, and
    zero gradients (compared with `labnn.nn.attention`'s)."""
    none = torch.zeros(q.size(-2), k.size(-2), dtype=torch.bool)
    what = "attention(q, k, v, mask) with an all-False mask"
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    got = expect_tensor(call(fn, f"{what} (a batch of pure padding)", *mine, none.clone()),
                        what)
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    want = scaled_dot_product_attention(*(t[:, None] for t in theirs), none)[0][:, 0]
    unmasked = scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[0][:, 0]
    _expect_zeros(got.detach(), want.detach(), unmasked, what, "b i d")
    again = call(fn, f"{what}, called again", *(t.clone() for t in (q, k, v)), none.clone())
    if isinstance(again, torch.Tensor):  # zeros kept by shape, handed out again
        expect_apart(got, again, what)
    if got.requires_grad:  # zeros that need no gradient (a new tensor) are right too
        expect_backward_of(got, want, what, dict(zip("qkv", zip(mine, theirs))),
                           dims={"q": "b i d", "k": "b j d", "v": "b j d"})
    expect_any_device(fn, what, q, k, v, none)  # zeros made for it on the CPU


def expect_all_false_mha(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor) -> None:
    """Exercise 5: `fn(x, mha, mask)` with an all-False `[T, T]` mask gives
    `mha.out_proj` of zeros, with the gradients of `mha(x, mask)[0]`."""
    none = torch.zeros(x.size(-2), x.size(-2), dtype=torch.bool)
    what = "multi_head_attention(x, mha, mask) with an all-False mask"
    mine, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = expect_tensor(call(fn, f"{what} (a batch of pure padding)", mine, mha,
                             none.clone()), what)
    want = mha(theirs, none)[0]
    with torch.no_grad():
        unmasked = mha(x, None)[0]
    _expect_zeros(got.detach(), want.detach(), unmasked, what, "b i d")
    expect_mha_finite_backward(fn, x, mha, none)  # NaN of an additive -inf, named
    if got.requires_grad:
        pairs = {"x": (mine, theirs)}
        pairs.update({f"mha.{n}": (p, p) for n, p in mha.named_parameters()})
        expect_backward_of(got, want, what, pairs, dims={"x": "b i d"})
    expect_any_device(fn, what, x, mha, none)  # zeros made for it on the CPU
