"""Notebook 02's relative shift when it raised on the check's x `[B, H, T, S]`: a size
read from the demonstration cell's globals (`T_`, `S_`) or written as a number (one that
stays when every size of x changes: `grading.sizes.written_size`), a view as
`[..., T + 1, S]`, a column dropped instead of a row, the batch entry dropped by `[1:]`, a
2-D view, T and S read from axes 1 and 2 (`bias_mixups.sizes_from_axes_1_2`, shared with
Exercise 5), and the slips of `relative_distances` and `relative_score_slips` that a rerun
on other inputs tells apart; any other reshape of x's leading axes that torch refused gets
the trick's three shapes. Named for `labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.exercises.grading import describe_shape, fail, first_line
from labnn.exercises.grading.sizes import written_size
from labnn.exercises.self_attention.global_reads import expect_no_global_size
from labnn.exercises.transformer_xl.bias_mixups import (
    index_slips, padded_columns, sizes_from_axes_1_2)
from labnn.xl.relative_attention import relative_shift
from labnn.exercises.transformer_xl.relative_distances import (
    B, H, S, T, _no_zero_column, _padded_row, _randn, _visible_close)
from labnn.exercises.transformer_xl.relative_score_slips import (
    _rows_over_s, _t_as_s, one_matrix_only as _one_matrix)

FROM_X = "read T and S from x.shape (*lead, t, s = x.shape)"
# x [B, H, T, S] with every size, and every product of two, other than the check's
OTHER = (3, 4, 5, 11)


def shift_crash(fn: Callable, x: torch.Tensor, what: str) -> Callable[[Exception], None]:
    """A `diagnose` for `fn(x)`, x `[B, H, T, S]`, that raised."""
    def diagnose(err: Exception) -> None:
        expect_no_global_size(fn, what, FROM_X)
        written_size(err, what, lambda: fn(x.clone()), lambda: fn(_randn(*OTHER, seed=16)),
                     f"{FROM_X}, then reshape(*lead, s + 1, t) and back, (*lead, t, s).")
        if f"'[{B}, {H}, {T + 1}, {S}]' is invalid" in str(err):
            fail(f"{what} views the padded x as [..., T + 1, S]; the trick reads its "
                 "numbers as [..., S + 1, T] (view(*lead, s + 1, t)), drops the first row "
                 "and reads back as [..., T, S].")
        if f"invalid for input of size {B * H * (S + 1) * (T - 1)}" in str(err):
            fail(f"{what} drops a column of the [..., S + 1, T] view ([..., 1:]), so the "
                 "numbers no longer fill [..., T, S]: drop the first ROW, [..., 1:, :].")
        if f"invalid for input of size {(B - 1) * H * (S + 1) * T}" in str(err):
            fail(f"{what}: [1:] drops the first batch entry, not the first row (it slices "
                 "the first axis of [B, H, S + 1, T]): use [..., 1:, :].")
        _padded_row(fn, x, err, what)
        padded_columns(lambda: fn(x.clone()), err, what)
        index_slips(err, what, S)
        _no_zero_column(x, err, what)
        _one_matrix(fn, x, err, what)
        _three_axes(fn, x, what)
        sizes_from_axes_1_2(err, what, x.shape)
        _rows_over_s(fn, x, err, what)
        _t_as_s(fn, x, err, what)
        asked = re.search(r"shape '\[([-\d, ]+)\]' is invalid", str(err))
        if asked and asked[1].startswith(", ".join(map(str, x.shape[:-2])) + ","):
            b, h, t, s = x.shape
            fail(f"{what}: torch refused your reshape to [{asked[1]}] ({first_line(err)}): "
                 f"the trick reads [*lead, T, S + 1] = [{b}, {h}, {t}, {s + 1}] as [*lead, S + 1, "
                 f"T] = [{b}, {h}, {s + 1}, {t}], drops the first row and reads the rest as "
                 f"[*lead, T, S] = [{b}, {h}, {t}, {s}]; {FROM_X}.")
        two = re.search(r"shape '\[\d+, \d+\]' is invalid for input of size (\d+)", str(err))
        if two and int(two[1]) in (x.numel(), B * H * T * (S + 1)):
            fail(f"{what} views x as 2-D (torch said: {first_line(err)}), "
                 f"dropping the leading dimensions of x [B, H, T, S] = "
                 f"{describe_shape(x.shape)}: keep them, *lead, t, s = x.shape, and "
                 "reshape(*lead, ...).")

    return diagnose


def _three_axes(fn: Callable, x: torch.Tensor, what: str) -> None:
    """Name a crash on x `[B, H, T, S]` when `fn` is right on `x[0]`, `[H, T, S]`: T and S
    read from fixed axes (1 and 2) rather than the last two."""
    try:
        works = _visible_close(fn(x[0].clone()), relative_shift(x[0]))
    except Exception:
        return
    if works:
        fail(f"{what} works on a 3-D x [H, T, S] but not on [B, H, T, S] = "
             f"{describe_shape(x.shape)}: T and S are the LAST two axes, whatever comes "
             "before them: *lead, t, s = x.shape (or x.size(-2), x.size(-1)), not "
             "x.size(1), x.size(2).")
