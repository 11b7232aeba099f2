"""A slip of notebook 01's masked attention (Exercises 2 and 5) that scores of about 1
never show: the mask applied through the values (`s = s * mask`, then
`s.masked_fill(s == 0, -inf)`), which takes an allowed key whose score is exactly 0 (a zero
key vector, a zero query) for a masked one. Exercise 2 gets a round where key 0, allowed
for every query, is all zeros; Exercise 5 meets such scores in `mha_rounds`' far round,
whose keys are zero but for the last token's.

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys, `D` width; masks `[T, S]`,
True = may attend.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.nn.attention import MultiHeadAttention, scaled_dot_product_attention

ZERO_SCORE = ("{what} gives other values (key j=0, allowed, scores exactly 0 there): a score "
              "of 0 is not a masked key: mask with the mask itself (masked_fill(~mask, "
              "-inf)), not with the values (s * mask, then s == 0).")


def zero_as_masked(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The weights of `scores` masked through their values: every score that is 0 after
    `scores * mask` filled with -inf (empty rows of `mask` zeroed)."""
    s = scores * mask
    w = s.masked_fill(s == 0, float("-inf")).softmax(-1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def expect_zero_score_allowed(fn: Callable, what: str, q: torch.Tensor, k: torch.Tensor,
                              v: torch.Tensor, mask: torch.Tensor) -> None:
    """Rerun `fn(q, k, v, mask)` with key 0 (allowed for every query) all zeros, its scores
    exactly 0: an answer that takes a score of 0 for a masked key is named."""
    k0 = k.detach().clone()
    k0[:, 0] = 0.0
    try:
        got = fn(q.clone(), k0.clone(), v.clone(), mask.clone())
    except Exception:
        return  # the learner's code, rerun: the rounds that follow report it
    want = scaled_dot_product_attention(q[:, None], k0[:, None], v[:, None], mask)[0][:, 0]
    if not isinstance(got, torch.Tensor) or close(got, want):
        return
    wrong = zero_as_masked(q @ k0.transpose(-2, -1) / math.sqrt(q.size(-1)), mask) @ v
    if close(got, wrong):
        fail(ZERO_SCORE.format(what=f"{what} with key j=0 all zeros"))


def expect_mha_zero_score(got: torch.Tensor, what: str, x: torch.Tensor,
                          mha: MultiHeadAttention, mask: torch.Tensor) -> None:
    """`got` = `fn(x, mha, mask)` for a module whose keys are 0 but for some tokens': fail
    with `ZERO_SCORE` when it is what masking through the values gives."""
    b, t, d = x.shape
    with torch.no_grad():
        q, k, v = (z.view(b, t, mha.n_heads, mha.d_head).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        w = zero_as_masked(q @ k.transpose(-2, -1) / math.sqrt(mha.d_head), mask)
        wrong = mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))
    if close(got.detach(), wrong):
        fail(ZERO_SCORE.format(what=what).replace("key j=0, allowed", "keys allowed"))
