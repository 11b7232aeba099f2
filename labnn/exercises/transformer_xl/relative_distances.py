"""Checker for notebook 02's Exercise 3, the relative distances, and the sizes and inputs
of all its relative-attention checkers (`labnn.exercises.transformer_xl.relative_scores`).

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries (segment), `M`
memory, `S = M + T` keys, `D_h` head width. Every size differs, so that axes show in
shapes, and `T != M`, so that offsets show. Positions are reported in the tensor's own
dimensions (`i` query, `j` key).
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.nn.attention import causal_mask
from labnn.exercises.grading import (call, close, describe_shape, exercise, expect_close,
                                     expect_like, expect_new_each_call, expect_shape,
                                     expect_tensor, fail)
from labnn.exercises.transformer_xl import other_sizes
from labnn.exercises.transformer_xl.many_queries import many_distances
from labnn.exercises.transformer_xl.more_inputs import (far_distances, linear_distances,
                                                        other_distances)
from labnn.exercises.transformer_xl.shift_column_slips import (column_offset, read_columns,
                                                              same_slide)

B, H, T, M, D_H = 2, 3, 4, 5, 8
S = M + T
# all sizes differ, so that axes show in shapes
SIZES = {"B": B, "H": H, "T": T, "S": S, "S + 1": S + 1, "D_h": D_H}
# [T, S]: the (query, key) entries the reference defines, j <= M + i
VISIBLE = causal_mask(T, S)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _visible_close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """`close` on the entries a query may see (`j <= M + i`) only."""
    return close(got[..., VISIBLE], want[..., VISIBLE])


@exercise("relative distances")
def check_relative_distances(fn: Callable) -> None:
    """`fn(t, m)` -> LongTensor `[T, M + T]` with entry `(i, j)` = `m + i - j` (query
    `i` is at position `m + i`)."""
    what = f"relative_distances({T}, {M})"
    got = expect_tensor(call(fn, what, T, M, diagnose=_same_axis), what)
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    want = M + i - j
    if tuple(got.shape) == (S, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [S, T]: rows are the T "
             "queries and columns the S = m + t keys; make i a column (arange(t)[:, "
             "None]) and j a row (arange(m + t)[None, :]).")
    if tuple(got.shape) == (T, M):
        fail(f"{what} has shape {describe_shape(got.shape)} = [T, M]: the keys are the "
             "memory AND the segment, S = m + t of them (j in arange(m + t)).")
    if tuple(got.shape) == (T, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [T, T]: the keys include "
             "the m memory positions in front of the segment, S = m + t of them.")
    if tuple(got.shape) == (S, S):
        fail(f"{what} has shape {describe_shape(got.shape)} = [M + T, M + T]: a row for "
             f"every key; the rows are the T = t = {T} queries only (i = arange(t)[:, "
             f"None]), the columns the M + T = {S} keys (j = arange(m + t)[None, :]).")
    if tuple(got.shape) == (M, S) and _silent_equal(fn, (M, T), want):
        fail(f"{what} has shape [{M}, {S}]: your result has T = m rows: the arguments "
             "are (t, m) in that order, relative_distances(t, m).")
    if tuple(got.shape) != tuple(want.shape):
        fail(f"{what} has shape {describe_shape(got.shape)}, expected [T, M + T] = "
             f"{describe_shape(want.shape)}: a row for each of the T = t queries, a "
             "column for each of the M + T keys (memory, then segment).")
    if got.is_floating_point() or got.dtype == torch.bool:
        fail(f"{what} has dtype {got.dtype}: distances index a table of encodings, so they must"
             " be a LongTensor (torch.int64). " + ("A comparison gives bools (a mask's j <= m + "
             "i?): return m + i - j itself." if got.dtype == torch.bool else "torch.arange of "
             "ints gives one; drop the float conversion (or call .long())."))
    expect_like(got, want, what, "Distances must be torch.long (int64), torch.arange's "
                "default: drop the dtype= argument (or call .long()).")
    values = got.long()
    if torch.equal(values, i - j):
        fail("you computed i - j: query i sits after the memory, at key position m + "
             "i, so use m + i - j.")
    if torch.equal(values, j - i):
        fail("you computed j - i: the sign is flipped and m is missing; query i sits after "
             "the memory, at key position m + i, and a key in the past is at a positive "
             "distance: m + i - j.")
    if torch.equal(values, i - j - M):
        fail("you subtracted m (i - j - m): query i sits after the memory, at key "
             "position m + i, so add m: the distance is m + i - j.")
    if torch.equal(values, -want):
        fail("the sign is flipped: the distance to a key in the past must be positive "
             "(m + i - j).")
    if torch.equal(values, want.clamp(min=0)):
        fail("the keys after the query (j > m + i) get 0: keep their negative "
             "distances (m + i - j), so that they can be told apart from the query's "
             "own key.")
    if torch.equal(values, want.abs()):
        fail("you took the absolute value: a key after the query (j > m + i) must get "
             "a negative distance, so that it can be told apart from the key as far "
             "in the past.")
    _expect_uses_m(fn, values)
    c, t2, m2 = _offset(values, T), 2, 9  # m2 - t2 is far from +-1
    second = _silent(fn, (t2, m2))
    c2 = _offset(second, t2) if isinstance(second, torch.Tensor) else None
    if c == T and c2 == t2:
        fail("you used t where m belongs (t + i - j): query i sits at key position m + i "
             "(after the m memory keys), so the distance is m + i - j.")
    if c in (M - 1, M + 1) and c2 is not None and c2 - m2 == c - M:
        fail(f"{what} is off by one: query i sits at key position m + i exactly (query "
             "0 right after the m memory keys, at distance 0 from itself).")
    if torch.equal(values, want + M):
        fail(f"{what} numbers the keys from -m (2m + i - j): key j sits at position j, "
             "query i at m + i, so the distance is m + i - j.")
    if bool((values == values[:1]).all()):  # every query's row the same
        said = next((name for name, row in (("S - 1 - j", S - 1 - j), ("j, the key's index", j))
                     if torch.equal(values[:1], row)), f"each row {values[0].tolist()}")
        fail(f"{what} depends on the key only ({said}): the distance is from query i "
             "at position m + i, m + i - j.")
    if torch.equal(values, torch.cat([want[:, :M].flip(-1), want[:, M:]], -1)):
        fail(f"{what}: the memory keys' distances run the wrong way: memory key j = 0 is the "
             "oldest, at distance m + i, not i + 1 (the memory numbered from its newest "
             "state): use m + i - j for every key, the memory's too (the segment's are right).")
    if torch.equal(values, torch.where(j < M, M - j, want)):
        fail(f"{what} gives memory key j the distance m - j, from the segment's start, for every "
             "query: query i sits i keys later, so it is m + i - j (as for the segment's keys).")
    if torch.equal(values, S - 1 - want):
        fail(f"{what} is the column of r that holds each distance, S - 1 - (m + i - j), not "
             "the distance: return m + i - j itself (r's row S - 1 - d holds distance d).")
    if torch.equal(values, want % 256):
        fail(f"{what} gives the keys after the query 256 - d, not -d: distances in uint8, "
             "which has no negatives (0..255), wrap around; keep torch.arange's int64.")
    linear_distances(values, what)
    expect_close(got, want, what, dims="i j")
    _expect_uses_m(fn, values, final=True)
    other_sizes.distances_size_one(fn)
    other_distances(fn)
    far_distances(fn)
    many_distances(fn)  # t = 300: an int8 query index, an int16 flat index
    for sizes in ((4, 5), (4, 0), (1, 3)):  # with no memory, and one query, too
        expect_new_each_call(fn, f"relative_distances{sizes}", *sizes,
                             fix="Compute it afresh at every call, whatever the sizes.")


def _silent(fn: Callable, args: tuple):
    """`fn(*args)`, or None when it raises."""
    try:
        return fn(*args)
    except Exception:
        return None


def _silent_equal(fn: Callable, args: tuple, want: torch.Tensor) -> bool:
    got = _silent(fn, args)
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(
        got.long(), want)


def _same_axis(err: Exception) -> None:
    """i (T) and j (M + T) broadcast along the same axis: both columns, rows or 1-D."""
    if isinstance(err, RuntimeError) and re.search(
            rf"size of tensor a \(({T}|{S})\) must match the size of tensor b \(({T}|{S})\)",
            str(err)):
        fail(f"relative_distances({T}, {M}): i (T = {T}) and j (M + T = {S}) lie along the "
             "same axis: one must be a column [T, 1] and the other a row [1, M + T]: "
             "i[:, None] - j[None, :] (or unsqueeze(1) on i, unsqueeze(0) on j).")


def _offset(values: torch.Tensor, t: int) -> int | None:
    """`c` when `values` `[t, ...]` is `c + i - j` everywhere, else None."""
    if values.dim() != 2 or values.size(0) != t or values.numel() == 0:
        return None
    i, j = torch.arange(t)[:, None], torch.arange(values.size(1))[None, :]
    offset = values.long() - (i - j)
    return int(offset[0, 0]) if bool((offset == offset[0, 0]).all()) else None


def _expect_uses_m(fn: Callable, values: torch.Tensor, final: bool = False) -> None:
    """Fail when `fn(t, m)` gives `c + i - j` for the same `c` at two values of m (m
    hard-coded). Before the final comparison, only for a wrong `c` (the second call is
    silent); after it (`final`), the second call is one more check of its own."""
    c = _offset(values, T)
    if c is None or (c == M) != final:
        return
    t, m = T - 1, M + 2
    what = f"relative_distances({t}, {m})"
    if final:
        second = expect_tensor(call(fn, what, t, m), what)
    else:
        try:
            second = fn(t, m)
        except Exception:
            return
    if isinstance(second, torch.Tensor) and _offset(second, t) == c:
        fail(f"relative_distances({T}, {M}) and {what} both give {c} + i - j: your result "
             f"does not change with m (hard-coded m = {c}?); use the argument m: m + i - j.")
    if final:
        want = m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]
        expect_shape(second, want.shape, what)
        expect_close(second, want, what, dims="i j")


def _shift_rows(x: torch.Tensor, amount: Callable[[int], int]) -> torch.Tensor:
    """Row `i` of `[..., T, S]` rolled left by `amount(i)`: the loop a learner might
    write."""
    rows = [x[..., i, :].roll(-amount(i), dims=-1) for i in range(x.size(-2))]
    return torch.stack(rows, dim=-2)


def _more_shift_mistakes(x: torch.Tensor, got: torch.Tensor, fn: Callable | None = None) -> list:
    """More `(wrong result, message)` pairs for `check_relative_shift` (`fn` the answer,
    `got` = `fn(x)`), the last one `got` itself when it reads columns a constant `k` off
    (`column_offset`)."""
    offset = column_offset(x, got, fn)
    flipped = [(got, "each row of yours reads x backwards (x.flip(-1), then rolled), so the "
                     "distance grows with the key j; it must fall, M + i - j, the order x "
                     "already has (column r holds distance S - 1 - r): don't flip, roll "
                     "row i of x left by T - 1 - i.")] if _flipped_rolls(x, got) else []
    return _by_i(x, got) + [(_shift_rows(x, lambda i: -(i + 1)),
             "row i slides RIGHT by i + 1 (roll(i + 1), the same as roll(-(S - 1 - i)): "
             "S - 1 - i forgets the M memory keys): it must slide LEFT by T - 1 - i: "
             "x[..., i, :].roll(-(T - 1 - i), dims=-1).")] + ([(got, offset)] if offset
                                                             else []) + flipped + [
        (x.roll(k, -1), f"every row is shifted by the same amount (torch.roll(x, {k}, -1)?): "
                        "row i must slide left by its own amount, T - 1 - i (in a loop: "
                        "x[..., i, :].roll(-(T - 1 - i), dims=-1)).") for k in range(1, S)
    ] + same_slide(x, got)


def _by_i(x: torch.Tensor, got: torch.Tensor) -> list:
    """`[(got, message)]` when entry (i, j) reads column `j + i` of row `i` wherever that
    column exists (a gather of x[..., i, j + i], clamped or rolled at the end), else []."""
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    inside = VISIBLE & (j + i < S)
    if not bool((read_columns(got, x) == j + i)[..., inside].all()):
        return []
    return [(got, "row i slides left by i (entry (i, j) reads x[..., i, j + i]): it must "
                  "slide left by T - 1 - i, so that column j holds distance M + i - j "
                  "(x[..., i, j + T - 1 - i]; the last query, i = T - 1, stays in place).")]


def _flipped_rolls(x: torch.Tensor, got: torch.Tensor) -> bool:
    """Whether each row of `got` is, on the visible entries, a roll of the same row of
    `x.flip(-1)`: entry (i, j) reads column `c` with `(c + j) % S` fixed per row."""
    cols = read_columns(got, x)
    if bool(((cols < 0) & VISIBLE).any()):
        return False
    key = (cols + torch.arange(S)) % S
    return all(bool((key[..., i, VISIBLE[i]] == key[0, 0, i, 0]).all()) for i in range(T))


def _expect_any_lead(fn: Callable, x: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """`fn` on `x[0, 0]` `[T, S]`, `x[0]` `[H, T, S]` and a 5-D x `[2, B, H, T, S]` (no
    axis of size 1, which a `.squeeze()` would drop) matches `want` there."""
    five, five_want = torch.stack([x, -x]), torch.stack([want, -want])
    for sub, dims, ref in ((x[0, 0], "[T, S]", want[0, 0]), (x[0], "[H, T, S]", want[0]),
                           (five, describe_shape(five.shape), five_want)):
        try:
            works = _visible_close(fn(sub.clone()), ref)
        except Exception:
            works = False
        if not works:
            fail(f"{what} must work for any leading dimensions (here {dims}): use "
                 "x.shape[:-2] (*lead) instead of unpacking four sizes.")


def _no_zero_column(x: torch.Tensor, err: Exception, what: str) -> None:
    """Name a shift that raised on x `[B, H, T, S]` because its zero column is missing
    (the reshape to `[..., S + 1, T]` or back to `[..., T, S]` does not fit) or lacks
    x's leading dimensions (torch.cat of a `[T, 1]` column and a 4-D x)."""
    text = str(err)
    lead, (t, s) = x.shape[:-2], x.shape[-2:]
    if "Tensors must have same number of dimensions" in text:  # torch.cat's words
        fail(f"{what}: torch.cat got a zero column of another rank than x "
             f"{describe_shape(x.shape)} = [B, H, T, S] (torch said: "
             f"{text.splitlines()[0]}); the zero column is [*lead, T, 1]: "
             "x.new_zeros(*lead, t, 1), or F.pad(x, (1, 0)).")
    missing = (f"is invalid for input of size {lead.numel() * (s - 1) * t}",
               f"[{', '.join(map(str, (*lead, s + 1, t)))}]' is invalid for input of size "
               f"{x.numel()}")
    if f"is invalid for input of size {lead.numel() * (t + 1) * s}" in text:
        fail(f"{what} padded a row, not a column: F.pad's pairs run from the last axis, "
             "so (1, 0) pads a zero column on the left of S; (0, 0, 1, 0) pads a row "
             "on top of T. Use F.pad(x, (1, 0)), then read as [..., S + 1, T].")
    if any(m in text for m in missing):
        fail(f"{what} has no zero column: pad one zero column first, F.pad(x, (1, 0)): "
             "[*lead, T, S + 1] has (S + 1) * T entries, read as [..., S + 1, T]; drop its "
             "first row and the T * S left read back as [..., T, S].")


def _padded_row(fn: Callable, x: torch.Tensor, err: Exception, what: str) -> None:
    """Name a view that failed after `F.pad` padded a row (`[..., T + 1, S]`): `fn` is
    rerun silently with `F.pad` recording the shapes it returns."""
    if not isinstance(err, RuntimeError) or "is invalid for input of size" not in str(err):
        return
    functional, shapes = torch.nn.functional, []
    pad = functional.pad

    def recording(*args, **kwargs):
        out = pad(*args, **kwargs)
        shapes.append(tuple(out.shape))
        return out
    functional.pad = recording
    try:
        fn(x.clone())
    except Exception:
        pass
    finally:
        functional.pad = pad
    if (*x.shape[:-2], x.size(-2) + 1, x.size(-1)) in shapes:
        fail(f"{what}: your F.pad gives [..., T + 1, S], a ROW (F.pad's pairs run from the "
             "last axis: (0, 0, 1, 0) pads the second-to-last, T); the trick pads one "
             "COLUMN on the left of the key axis: F.pad(x, (1, 0)).")


def _visible(scores: torch.Tensor) -> torch.Tensor:
    """`scores` on the entries a query may see, 0 elsewhere (the future entries are left
    unspecified, so no gradient flows from them)."""
    return torch.where(VISIBLE, scores, torch.zeros((), dtype=scores.dtype))
