"""Rounds of notebook 01's Exercise 5 (multi-head attention) with other modules and dtypes
than the check's float32 `MultiHeadAttention(D, H)`: float64 (the one dtype rule), float16
and bfloat16 (a finite fill of the masked scores that does not fit them), a module whose
queries and keys make a future key score 200 above the allowed ones (the mask applied
after the softmax, then renormalised), and a module without biases (`bias=False`, as
`TransformerConfig(bias=False)` builds it).

Dimension letters (the package legend): `B` batch, `T` tokens, `D` width, `H` heads,
`D_h` head width; masks `[T, T]`, True = may attend.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     fail, first_line, first_position)
from labnn.exercises.self_attention.far_scores import expect_fill_fits
from labnn.exercises.self_attention.multi_head_order_slips import expect_mha_float64
from labnn.nn.attention import MultiHeadAttention

WHAT = "multi_head_attention(x, mha, mask)"


def expect_more_rounds(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                       mask: torch.Tensor) -> None:
    """The rounds of this module, in the order above, for an answer right on the check's
    float32 module."""
    expect_mha_float64(fn, mha, x, mask)
    expect_fill_fits(fn, WHAT, lambda dtype: (x.detach().to(dtype),
                                              copy.deepcopy(mha).to(dtype), mask.clone()))
    expect_future_far_above(fn, mha, x, mask)
    expect_without_bias(fn, mha, x, mask)


def expect_future_far_above(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                            mask: torch.Tensor) -> None:
    """Run `fn` with a copy of `mha` whose every head scores the last token 200 above the
    others for every query (its queries a constant, its keys feature 0 of x, which only
    the last token has): with a causal mask the last token is masked for all queries
    but itself, and a softmax taken before masking (then renormalised) keeps nothing of
    the allowed keys there."""
    d, dh = x.size(-1), mha.d_head
    far = copy.deepcopy(mha)
    x2 = x.detach().clone()
    x2[..., 0] = 0.0
    x2[:, -1, 0] = 1.0
    with torch.no_grad():
        far.qkv.weight[: 2 * d].zero_()
        far.qkv.bias[: 2 * d].zero_()
        far.qkv.bias[0:d:dh] = 10.0  # every head's query: 10 in its first feature
        far.qkv.weight[d:2 * d:dh, 0] = 20.0 * math.sqrt(dh)  # its key: 20 sqrt(D_h) x_0
        want = far(x2, mask)[0]
    what = f"{WHAT} with the last token scoring 200 above the others (masked for them)"
    got = expect_tensor(call(fn, what, x2.clone(), far, mask.clone()), WHAT)
    expect_like(got, want, what)
    if close(got.detach(), want):
        return
    off = ~torch.isclose(got.detach(), want, atol=1e-5, rtol=1e-4)
    fail(f"{what} gives other values (at {first_position(off, 'b i d')}): a softmax over "
         "every key (or one max for the whole tensor) loses the allowed keys there, their "
         "exp underflowing next to the masked key's. Mask the scores before the softmax: "
         "masked_fill(~mask, float('-inf')).")


def expect_without_bias(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                        mask: torch.Tensor) -> None:
    """Run `fn` with a `MultiHeadAttention(D, H, bias=False)`: its `qkv.bias` and
    `out_proj.bias` are None, which an answer adding them by hand cannot take."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        plain = MultiHeadAttention(x.size(-1), mha.n_heads, bias=False).eval()
    with torch.no_grad():
        want = plain(x, mask)[0]
    what = f"{WHAT} with mha = MultiHeadAttention({x.size(-1)}, {mha.n_heads}, bias=False)"

    def no_bias(err: Exception) -> None:
        if isinstance(err, TypeError) and "NoneType" in str(err):
            fail(f"{what} raised {type(err).__name__} ({first_line(err, 70)}): a module built "
                 "with bias=False has mha.qkv.bias = None; call the layers, mha.qkv(x) and "
                 "mha.out_proj(y) (or F.linear(x, w, b), which takes b = None).")

    got = expect_tensor(call(fn, what, x.detach().clone(), plain, mask.clone(),
                             diagnose=no_bias), WHAT)
    expect_like(got, want, what)
    expect_close(got, want, what, dims="b i d")
