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
SAME_SHAPE = ("the shape is right, the values not: does your code branch on a size (if "
              "q.size(0) > 1) or write a number where a size belongs? Compute the same way "
              "at every size")


def _fix(run: Callable[[], object], want: torch.Tensor) -> str:
    """What to do where an axis has size 1: keep it (`KEEP_ONES`), unless `run()` already
    gives `want`'s shape (`SAME_SHAPE`: no axis was dropped)."""
    try:
        got = run()
    except Exception:  # named by expect_same's own call
        return KEEP_ONES
    ok = isinstance(got, torch.Tensor) and got.shape == want.shape
    return SAME_SHAPE if ok else KEEP_ONES


def relative_shift_(fn: Callable, b: int = B, h: int = H, t: int = T, m: int = M,
                    label: str = "", fix: str | None = None) -> None:
    """`fn(x)` with x `[3, 2, 5, 7]` (or `[b, h, t, m + t]`, `label` saying why, `fix`
    what to do; by default, where an axis has size 1, `_fix`'s)."""
    x = randn(b, h, t, m + t, seed=41)
    want = relative_shift(x)
    fix = fix or (_fix(lambda: fn(x.clone()), want) if label else "")
    expect_same(f"relative_shift(x) with x [{b}, {h}, {t}, {m + t}]" + label,
                lambda: fn(x.clone()), want,
                fix if label else f"read T and S from x.shape, never a number ({OWN})",
                where=causal_mask(t, m + t), dims="B H T S")


def score_inputs(b: int = B, h: int = H, t: int = T, m: int = M) -> tuple[tuple, torch.Tensor]:
    """`(q, k, r, u, v)` with `D_h = 6` and `S = m + t`, and the reference scores."""
    s = m + t
    q, k = randn(b, h, t, D_H, seed=42), randn(b, h, s, D_H, seed=43)
    r, u, v = randn(s, h, D_H, seed=44), randn(h, D_H, seed=45), randn(h, D_H, seed=46)
    attn = RelativeMultiHeadAttention(h * D_H, h)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
        return (q, k, r, u, v), attn.scores(q, k, r)


def relative_scores(fn: Callable, b: int = B, h: int = H, t: int = T, m: int = M,
                    label: str = "", fix: str | None = None) -> None:
    """`fn(q, k, r, u, v)` with `B = 3`, `H = 2`, `T = 5`, `S = 7`, `D_h = 6` (or `b`,
    `h`, `t`, `S = m + t`, `label` saying why; `fix` as in `relative_shift_`)."""
    s = m + t
    inputs, want = score_inputs(b, h, t, m)
    run = lambda: fn(*(x.clone() for x in inputs))  # noqa: E731
    own = ("no size written as a number: read them from q (H = q.size(1), the scale "
           f"sqrt(q.size(-1))) ({OWN})")
    expect_same(f"relative_scores(q, k, r, u, v) with q [{b}, {h}, {t}, {D_H}], k "
                f"[{b}, {h}, {s}, {D_H}]" + label, run, want, (fix or _fix(run, want))
                if label else own,
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


EMPTY_FROM_H = ("make the empty memory from h, h[:, :0] (or h.new_zeros(h.size(0), 0, "
                "h.size(2))), never with the check's B = 2, D = 8")


def memory_size_one(fn: Callable) -> None:
    """`fn(mem, h, mem_len)` with `B = 1`, then for one new token (`T = 1`), with and
    without a memory, keeping one state or more; last `mem_len = 0` where B and D differ
    from the check's (an empty memory written with its sizes)."""
    d = D_H
    for b, m, t, mem_len, label in ((1, 5, 4, 6, "B = 1"), (2, 5, 1, 1, "T = 1, mem_len = 1"),
                                    (2, 0, 1, 6, "T = 1, no memory yet"),
                                    (3, 2, 4, 0, "mem_len = 0, B = 3, D = 6")):
        mem = randn(b, m, d, seed=47) if m else None
        h = randn(b, t, d, seed=48)
        said = f"mem [{b}, {m}, {d}]" if m else "mem=None"
        expect_same(f"update_memory(mem, h, {mem_len}) with {said}, h [{b}, {t}, {d}] "
                    f"({label})", lambda: fn(None if mem is None else mem.clone(), h.clone(),
                                             mem_len),
                    update_memory(mem, h, mem_len), EMPTY_FROM_H if mem_len == 0 else
                    _fix(lambda: fn(None if mem is None else mem.clone(), h.clone(), mem_len),
                         update_memory(mem, h, mem_len)), dims="B M D")
