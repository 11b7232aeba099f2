"""Notebook 02's answers that hold only at the checks' own sizes: the shift and the
relative scores, once they pass there, run again where every size differs
(`grading.sizes`), so that a reshape to `[..., 10, 4]` written as numbers or a scale of
`sqrt(8)` fails by name. (The distances, the mask and the memory update are checked at
several sizes already.) Only the entries a query may see, `j <= M + i`, are compared.
Last, the memory update, the distances, the shift and the scores run where an axis has
size 1 (`T = 1`, the one-token step of generation; `B = 1`), so that a `.squeeze()`
that drops it fails by name.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `M` memory,
`S = M + T` keys, `D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading.sizes import expect_same, randn
from labnn.nn.attention import causal_mask
from labnn.xl.memory import update_memory
from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_shift

# each differs from the checks' own B, H, T, M, D_h = 2, 3, 4, 5, 8
B, H, T, M, D_H = 3, 2, 5, 2, 6
S = M + T
OWN = "the check's are B = 2, H = 3, T = 4, S = 9, D_h = 8"


# (B, H, T, M, label): rounds where an axis has size 1
ONES = ((2, 3, 1, 5, "T = 1, the one-token step"), (1, 1, 4, 5, "B = H = 1"))
KEEP_ONES = "keep every axis, even one of size 1 (no .squeeze() without a dim)"


def relative_shift_(fn: Callable, b: int = B, h: int = H, t: int = T, m: int = M,
                    label: str = "", fix: str = KEEP_ONES) -> None:
    """`fn(x)` with x `[3, 2, 5, 7]` (or `[b, h, t, m + t]`, `label` saying why, `fix`
    what to do)."""
    x = randn(b, h, t, m + t, seed=41)
    expect_same(f"relative_shift(x) with x [{b}, {h}, {t}, {m + t}]" + label,
                lambda: fn(x.clone()), relative_shift(x),
                fix if label else f"read T and S from x.shape, never a number ({OWN})",
                where=causal_mask(t, m + t), dims="B H T S")


def relative_scores(fn: Callable, b: int = B, h: int = H, t: int = T, m: int = M,
                    label: str = "", fix: str = KEEP_ONES) -> None:
    """`fn(q, k, r, u, v)` with `B = 3`, `H = 2`, `T = 5`, `S = 7`, `D_h = 6` (or `b`,
    `h`, `t`, `S = m + t`, `label` saying why)."""
    s = m + t
    q, k = randn(b, h, t, D_H, seed=42), randn(b, h, s, D_H, seed=43)
    r, u, v = randn(s, h, D_H, seed=44), randn(h, D_H, seed=45), randn(h, D_H, seed=46)
    attn = RelativeMultiHeadAttention(h * D_H, h)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
        want = attn.scores(q, k, r)
    inputs = (q, k, r, u, v)
    expect_same(f"relative_scores(q, k, r, u, v) with q [{b}, {h}, {t}, {D_H}], k "
                f"[{b}, {h}, {s}, {D_H}]" + label, lambda: fn(*(x.clone() for x in inputs)),
                want, fix if label else
                f"scale by sqrt(q.size(-1)), no size written as a number ({OWN})",
                where=causal_mask(t, s), dims="B H T S")


def shift_size_one(fn: Callable) -> None:
    """`relative_shift_` where an axis has size 1 (`ONES`)."""
    for b, h, t, m, label in ONES:
        relative_shift_(fn, b, h, t, m, f" ({label})")


def scores_size_one(fn: Callable) -> None:
    """`relative_scores` where an axis has size 1 (`ONES`)."""
    for b, h, t, m, label in ONES:
        relative_scores(fn, b, h, t, m, f" ({label})")


# no memory yet (the first segment, or a model with mem_len = 0): S = T, M = 0
NO_MEMORY = " (S = T: no memory yet, M = 0)"
SHIFT_ANYWAY = ("without memory the position term is by distance all the same (column r "
                "holds distance S - 1 - r): row i still slides left by T - 1 - i")


def shift_no_memory(fn: Callable) -> None:
    """`relative_shift_` with `S = T` (`M = 0`)."""
    relative_shift_(fn, m=0, label=NO_MEMORY, fix=SHIFT_ANYWAY)


def scores_no_memory(fn: Callable) -> None:
    """`relative_scores` with `S = T` (`M = 0`)."""
    relative_scores(fn, m=0, label=NO_MEMORY, fix=SHIFT_ANYWAY + ": apply relative_shift")


def distances_size_one(fn: Callable) -> None:
    """`fn(1, M)` with M = 2: the distances of one query, `[1, M + 1]`."""
    want = M - torch.arange(M + 1)[None, :]
    expect_same(f"relative_distances(1, {M}) (T = 1, the one-token step)",
                lambda: fn(1, M), want, KEEP_ONES, dims="T S")


def memory_size_one(fn: Callable) -> None:
    """`fn(mem, h, mem_len)` with `B = 1`, then for one new token (`T = 1`), with and
    without a memory, keeping one state or more."""
    d = D_H
    for b, m, t, mem_len, label in ((1, 5, 4, 6, "B = 1"), (2, 5, 1, 1, "T = 1, mem_len = 1"),
                                    (2, 0, 1, 6, "T = 1, no memory yet")):
        mem = randn(b, m, d, seed=47) if m else None
        h = randn(b, t, d, seed=48)
        said = f"mem [{b}, {m}, {d}]" if m else "mem=None"
        expect_same(f"update_memory(mem, h, {mem_len}) with {said}, h [{b}, {t}, {d}] "
                    f"({label})", lambda: fn(None if mem is None else mem.clone(), h.clone(),
                                             mem_len),
                    update_memory(mem, h, mem_len), KEEP_ONES, dims="B M D")
