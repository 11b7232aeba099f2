"""Slips of notebook 02's relative shift (Exercise 4) read from the columns of x an answer
takes: a gather or index loop whose column is off by a constant `k` from the right one,
`T - 1 - i + j`: the memory forgotten (`k = M`), M written where T belongs (`k = M - T`,
told apart from a plain offset by a rerun where `M - T` is another number), M where T - 1
belongs (`k = M - T + 1`, told apart the same way), or off by `k`; and a shift right at
the segment's keys only (`memory_columns`: the memory's columns left as they were).
Named for `labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `T` queries, `M` memory, `S = M + T` keys; x is
`[..., T, S]`, its column `r` holding distance `S - 1 - r`. The sizes are read from x.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift


def read_columns(got: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """For each entry `(i, j)` of `got [..., T, S]`, the column of row `i` of `x` that
    holds exactly its value (x is random: at most one does), or -1 where none does."""
    equal = got[..., :, :, None] == x[..., :, None, :]
    return torch.where(equal.any(-1), equal.to(torch.uint8).argmax(-1), -1)


def _offset(x: torch.Tensor, got: torch.Tensor) -> int | None:
    """The `k != 0` when the visible entries `(i, j)` of `got` read column `T - 1 - i + j
    + k` of row `i` of `x` wherever that column exists (outside `[0, S)` an entry may hold
    anything: clamped, masked); None when they read no such columns."""
    t, s = x.shape[-2:]
    visible = causal_mask(t, s)
    i, j = torch.arange(t)[:, None], torch.arange(s)[None, :]
    right = (t - 1 - i + j)[visible]
    cols = read_columns(got, x)[..., visible]
    found = (cols - right)[cols >= 0]
    if found.numel() == 0:
        return None
    k = int(found.mode().values.item())
    inside = (right + k >= 0) & (right + k < s)
    if k == 0 or inside.float().mean() < 0.25 or ((cols - right - k).abs() == s).any():
        return None  # right, too few entries to tell, or wrapped around (a roll)
    return k if bool((cols == right + k)[..., inside].all()) else None


def _m_for_t(fn: Callable, extra: int = 0) -> bool:
    """Whether `fn`, rerun with `T = 5`, `M = 2`, reads columns `M - T + extra` off too."""
    x = torch.randn(3, 2, 5, 7, generator=torch.Generator().manual_seed(47))
    try:
        got = fn(x.clone())
    except Exception:
        return False
    return isinstance(got, torch.Tensor) and got.shape == x.shape and _offset(
        x, got.detach()) == 2 - 5 + extra


def memory_columns(x: torch.Tensor, got: torch.Tensor) -> str | None:
    """What is wrong when `got [..., T, S]` equals `relative_shift(x)` at the segment's keys
    (`j >= M`, where a query may see them) and `x` itself at the memory's (`j < M`): the
    memory's columns left unshifted; else None."""
    t, s = x.shape[-2:]
    m, want = s - t, relative_shift(x)
    seen = causal_mask(t, s)[:, m:]
    close = lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-4)  # noqa: E731
    if not m or not close(got[..., m:][..., seen], want[..., m:][..., seen]) or not close(
            got[..., :m], x[..., :m]):
        return None
    return (f"right at the segment's T keys (j >= M), but the M = {m} memory columns are "
            "as they were in x (x[..., :M] unshifted): the shift moves every column, the "
            "memory's too (row i of the whole [..., T, S] slides left by T - 1 - i): shift all "
            "of x, not x[..., M:].")


def column_offset(x: torch.Tensor, got: torch.Tensor, fn: Callable | None = None) -> str | None:
    """What is wrong when `got` = `fn(x)` reads columns a constant `k` off the right ones
    (`_offset`), leaves the memory's columns unshifted (`memory_columns`), or keeps x's
    columns in place with zeros in front of each row; None when none of these."""
    memory = memory_columns(x, got)
    if memory:
        return memory
    t, s = x.shape[-2:]
    visible, j = causal_mask(t, s), torch.arange(s)
    if bool(((read_columns(got, x) == j) | (got == 0))[..., visible].all()):
        return ("your rows keep x's numbers in their own columns, with zeros in front (torch."
                "cat([zeros, x[..., i, T - 1 - i:]]) rebuilds the row as it was): put the slid "
                "part first, the zeros after: torch.cat([x[..., i, T - 1 - i:], zeros], -1).")
    k = _offset(x, got)
    if k is None:
        return None
    t, s = x.shape[-2:]
    if k == s - t:
        return ("entry (i, j) reads column S - 1 - (i - j) of x, the distance i - j: the "
                "M memory keys in front of the segment are forgotten. Query i sits at key "
                "position M + i, so its distance to key j is M + i - j, in column "
                "S - 1 - (M + i - j) = T - 1 - i + j.")
    if fn is not None and k == s - 2 * t and _m_for_t(fn):
        return ("entry (i, j) reads column M - 1 - i + j of x: M where T belongs. Column r "
                "holds distance S - 1 - r, and key j of query i is at distance M + i - j, in "
                "column T - 1 - i + j.")
    if fn is not None and k == s - 2 * t + 1 and _m_for_t(fn, 1):
        return ("entry (i, j) reads column M - i + j of x: M where T - 1 belongs. Column r "
                "holds distance S - 1 - r, and key j of query i is at distance M + i - j, in "
                "column T - 1 - i + j.")
    return (f"entry (i, j) reads column T - 1 - i + j {'+-'[k < 0]} {abs(k)} of x, "
            f"{abs(k)} too far {'right' if k > 0 else 'left'}: column r holds distance "
            "S - 1 - r, and key j of query i is at distance M + i - j, in column "
            "T - 1 - i + j.")


def same_slide(x: torch.Tensor, got: torch.Tensor) -> list:
    """`[(got, message)]` when every visible entry `(i, j)` of `got` reads column `j + a` of
    row `i` of `x`, one `a` for every row, wherever that column exists (clamped or masked
    past the end), on two rows or more; else []."""
    t, s = x.shape[-2:]
    visible, j, cols = causal_mask(t, s), torch.arange(s), read_columns(got, x)
    for a in range(1, s):
        inside = visible & (j + a < s)
        if inside.any(-1).sum() > 1 and bool((cols == j + a)[..., inside].all()):
            row0 = ", row 0's amount, T - 1, for all" if a == t - 1 else ""
            return [(got, f"every row slides left by the same {a} places (entry (i, j) reads "
                          f"x[..., i, j + {a}]{row0}): row i slides by its own amount, "
                          "T - 1 - i, so that column j holds distance M + i - j.")]
    return []
