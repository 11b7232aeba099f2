"""Notebook 02's answers that hold only at the checks' own sizes: the shift and the
relative scores, once they pass there, run again where every size differs
(`grading.sizes`), so that a reshape to `[..., 10, 4]` written as numbers or a scale of
`sqrt(8)` fails by name. (The distances, the mask and the memory update are checked at
several sizes already.) Only the entries a query may see, `j <= M + i`, are compared.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `M` memory,
`S = M + T` keys, `D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading.sizes import expect_same, randn
from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_shift

# each differs from the checks' own B, H, T, M, D_h = 2, 3, 4, 5, 8
B, H, T, M, D_H = 3, 2, 5, 2, 6
S = M + T
VISIBLE = causal_mask(T, S)  # True = may attend: j <= M + i
OWN = "the check's are B = 2, H = 3, T = 4, S = 9, D_h = 8"


def relative_shift_(fn: Callable) -> None:
    """`fn(x)` with x `[3, 2, 5, 7]`."""
    x = randn(B, H, T, S, seed=41)
    expect_same(f"relative_shift(x) with x [{B}, {H}, {T}, {S}]", lambda: fn(x.clone()),
                relative_shift(x), f"read T and S from x.shape, never a number ({OWN})",
                where=VISIBLE)


def relative_scores(fn: Callable) -> None:
    """`fn(q, k, r, u, v)` with `B = 3`, `H = 2`, `T = 5`, `S = 7`, `D_h = 6`."""
    q, k = randn(B, H, T, D_H, seed=42), randn(B, H, S, D_H, seed=43)
    r, u, v = randn(S, H, D_H, seed=44), randn(H, D_H, seed=45), randn(H, D_H, seed=46)
    attn = RelativeMultiHeadAttention(H * D_H, H)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
        want = attn.scores(q, k, r)
    inputs = (q, k, r, u, v)
    expect_same(f"relative_scores(q, k, r, u, v) with q [{B}, {H}, {T}, {D_H}], k "
                f"[{B}, {H}, {S}, {D_H}]", lambda: fn(*(t.clone() for t in inputs)), want,
                f"scale by sqrt(q.size(-1)), no size written as a number ({OWN})",
                where=VISIBLE)
