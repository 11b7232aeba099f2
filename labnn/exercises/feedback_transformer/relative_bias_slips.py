"""Mistakes in notebook 03's relative position bias exercise (`relative_bias(table, s)`),
recomputed so that `check_relative_bias` can name the one a learner made (the distances
mistaken, `distance_slips`; an index error diagnosed, distances in a small integer dtype
tried at s = 200 and 300, in a half dtype or clamped at a number at 2100, an index in a
bfloat16 table's dtype at 300 columns), and the package's functions that compute the
bias, refused by name."""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.grading.sizes import expect_same, randn
from labnn.exercises.grading.slips import gives
from labnn.exercises.feedback_transformer import weight_transforms
from labnn.exercises.feedback_transformer.feedback_attention_slips import (distances_from_zero,
                                                                           float_index_error)
from labnn.exercises.feedback_transformer.memory_vector_slips import gather_rank, one_head_for_all
from labnn.feedback.layer import RelativeBias

# what computes the bias for the learner, refused by name: every method of RelativeBias, so
# that one added later (as `_at` was, for the ring step) is refused too
BIAS_REFERENCES = {f: f"labnn.feedback.layer.RelativeBias.{name}" for name, f in (
    (name, getattr(RelativeBias, name)) for name in vars(RelativeBias)
    if not name.startswith("__") and callable(getattr(RelativeBias, name)))}


def last_columns(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """`table[:, -s:]` (flipped or not): the table's last `s` columns, the entries for the
    largest distances, instead of one column per key; `(result, message)` pairs, only for
    `0 < s < max_distance` (beyond it the slice has the wrong width)."""
    if not 0 < s < table.size(1):  # s = max_distance: the flipped slice is right
        return []
    message = (f"{what}: table[:, -s:] takes the table's LAST s columns (entries for the "
               "largest distances), not a column per key: key j is at distance s - j, so "
               "pick column (s - j) - 1, clamped: "
               "table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1].")
    return [(table[:, -s:].flip(-1), message), (table[:, -s:], message)]


def far_first(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """Keys beyond max_distance given the table's FIRST column (distance 1's entry, as a
    `torch.where(d >= M, 0, d)` or a `table[:, :1].expand(...)` writes it) instead of the
    last; `(result, message)` pairs, only for `s > max_distance`."""
    width = table.size(1)
    if s <= width:
        return []
    d = torch.arange(s, 0, -1)
    return [(table[:, torch.where(d > width, 1, d) - 1],
             f"{what}: keys farther than max_distance = {width} get the FIRST entry, "
             "table[:, 0] (the previous step's bias): they share the LAST one, table[:, -1]: "
             "table[:, d.clamp(max=table.size(1)) - 1].")]


def heads_flipped(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """The bias flipped over the heads axis (`.flip(0)`), with the keys in the right order
    or reversed (a flip meant for the keys); `(result, message)` pairs."""
    if table.size(0) < 2:
        return []
    d = torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1
    message = (f"{what}: your bias is flipped over the heads (flip(0)): row h must be head "
               "h's; only the key order (oldest first) matters, table[:, d - 1] as it is")
    return [(table[:, d].flip(0), message + "."),
            (table[:, d.flip(0)].flip(0), message + ": flip the keys' axis, -1, if at all.")]


def clamped_at_number(fn: Callable, what: str, width: int) -> None:
    """Name distances clamped at a number written out (`.clamp(max=16)`), which indexes past
    a narrower table: rerun on a table of 40 columns and 40 keys, where the distances of a
    clamp at `k < 40` share column `k - 1`."""
    wide = torch.randn(2, 40, generator=torch.Generator().manual_seed(10))
    d = torch.arange(40, 0, -1)
    try:
        got = fn(wide.clone(), 40)
    except Exception:
        return
    for k in range(2, 40):
        if isinstance(got, torch.Tensor) and close(got, wide[:, d.clamp(max=k) - 1]):
            fail(f"{what}: you clamped the distances at {k}, a number written out (a table "
                 f"of 40 columns shows it), past the last column of this table of "
                 f"max_distance = table.size(1) = {width}: .clamp(max=table.size(1)).")


def index_error(fn: Callable, what: str, s: int, heads: int = 3,
                width: int = 5) -> Callable[[Exception], None]:
    """A `diagnose` for `fn(table, s)` on the check's table `[heads, width]`: a float index,
    `gather` with a 1-D index, `d - 1` clamped to `width` (one past the last entry), a clamp
    written as a number, distances beyond `width` not clamped."""
    def diagnose(err: Exception) -> None:
        gather_rank(err, what)
        if not isinstance(err, IndexError):
            return
        if float_index_error(err):
            fail(f"{what}: indexing the table with a float tensor fails: distances used "
                 "as indices must be a LongTensor (torch.arange with int arguments gives "
                 "one; or call .long()).")
        wide = randn(heads, s, seed=9)  # a table as long as the keys: nothing to clamp
        if s > width and f"index {width} is out" in str(err) and gives(
                fn, wide, s, wide[:, torch.arange(s - 1, -1, -1)]):
            fail(f"{what}: you clamped d - 1 to max_distance = {width}, one past the last "
                 f"entry ({err}): clamp d to max_distance first, then subtract 1: "
                 "table[:, d.clamp(max=table.size(1)) - 1].")
        clamped_at_number(fn, what, width)
        if s > width:
            fail(f"{what}: with {s} keys and max_distance = {width}, distances beyond "
                 f"{width} index past the table ({err}): clamp them, "
                 ".clamp(max=table.size(1)), so that they share the last entry.")
    return diagnose


_WRAP = ("distances kept in a small dtype wrap: int8 -128..127, uint8 0..255; use int64, "
         "torch.arange's default, for the distances and the index")


def _right_at(fn: Callable, table: torch.Tensor, s: int) -> bool:
    """Whether `fn(table, s)` runs and gives the bias."""
    try:
        got = fn(table.clone(), s)
    except Exception:  # noqa: BLE001 (expect_same names it)
        return False
    want = RelativeBias.lookup(table, s)
    return isinstance(got, torch.Tensor) and got.shape == want.shape and close(got, want)


def long_distances(fn: Callable) -> None:
    """`fn(table, 200)`, then `fn(table, 300)`, with a table of 64 columns: distances past
    127 overflow int8, past 255 uint8 (a `dtype=torch.uint8` arange wraps 256 to 0); named
    when `s = 127` (`s = 255`) is right. Then a bfloat16 table of 300 columns (`table_dtype`)."""
    table = randn(2, 64, seed=39)
    for s, fits in ((200, 127), (300, 255)):
        what = f"relative_bias(table, {s}) with table [2, 64]"
        if not _right_at(fn, table, s) and _right_at(fn, table, fits):
            fail(f"{what} is wrong though s = {fits} is right: {_WRAP}.")
        expect_same(what, lambda: fn(table.clone(), s), RelativeBias.lookup(table, s),
                    f"the distances s - j run up to s = {s} here: clamp them at table.size(1) "
                    "and keep them int64, torch.arange's default")
    table_dtype(fn)


def table_dtype(fn: Callable) -> None:
    """`fn(table, 2100)` on a float32 table of 2100 columns: distances made in a half
    dtype (bfloat16 rounds past 256, float16 past 2048: `2049 -> 2048`) or clamped at a
    number written out; then `fn(table, 300)` on a bfloat16 table of 300 columns: an index
    made in the table's dtype (`torch.arange(..., dtype=table.dtype)`) rounds past 256."""
    s, table = 2100, randn(2, 2100, seed=42)
    what = f"relative_bias(table, {s}) with a table [2, {s}] (max_distance = {s})"
    if not _right_at(fn, table, s):
        for half, past in ((torch.bfloat16, 256), (torch.float16, 2048)):
            rounded = table[:, torch.arange(s, 0, -1, dtype=half).long() - 1]
            if gives(fn, table.clone(), s, rounded):
                fail(f"{what}: your distances are {half} numbers, which round past {past} "
                     "(2049 -> 2048 in float16): indices are integers: int64, "
                     "torch.arange's default.")
        d = torch.arange(s, 0, -1)
        for k in (64, 100, 128, 200, 256, 300, 500, 512, 1000, 1024, 2000, 2048):
            if gives(fn, table.clone(), s, table[:, d.clamp(max=k) - 1]):
                fail(f"{what}: you clamped the distances at {k}, a number written out: "
                     "clamp at the width of each call's table, .clamp(max=table.size(1)).")
    expect_same(what, lambda: fn(table.clone(), s), RelativeBias.lookup(table, s),
                "index the table with int64 distances, clamped at table.size(1)")
    s, table = 300, randn(2, 300, seed=41).to(torch.bfloat16)
    what = f"relative_bias(table, {s}) with a bfloat16 table [2, {s}]"
    rounded = table[:, torch.arange(s, 0, -1, dtype=torch.bfloat16).long() - 1]
    if not _right_at(fn, table, s) and gives(fn, table.clone(), s, rounded):
        fail(f"{what}: an index made in the table's dtype rounds past 256 (bfloat16) / 2048 "
             "(float16): indices are integers: int64, torch.arange's default (no "
             "dtype=table.dtype).")
    expect_same(what, lambda: fn(table.clone(), s), RelativeBias.lookup(table, s),
                "index the table with int64 distances, clamped at table.size(1), whatever "
                "the table's dtype")


def distance_slips(t0: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """`relative_bias(t0, s)` with the distances mistaken: far keys zeroed or wrapped, the
    keys newest first, entry d for distance d (or d - 2, one distance too near), clamped
    one too early, every key given one entry (a clamp(min=...)), ...: `(result, message)`
    pairs for `check_relative_bias`."""
    m, d = t0.size(1), torch.arange(s, 0, -1)
    far = t0[:, d.clamp(max=m) - 1].masked_fill(d > m, 0)
    return [
        (far, f"{what}: keys farther than max_distance = {m} get bias 0: they "
         "share its last entry, table[:, -1]: clamp the distance, "
         "table[:, d.clamp(max=table.size(1)) - 1], instead of zeroing them."),
        (t0[:, (d - 1) % m],
         f"{what}: distances beyond max_distance = {m} wrap around (the % "
         "operator) to the first entries: clamp them instead (.clamp(max=max_distance)), "
         "so that every far key shares the LAST entry."),
        (t0[:, torch.arange(1, s + 1).clamp(max=m) - 1],
         f"{what}: the distances run the wrong way: keys are ordered oldest first, so "
         "key 0 is at distance s and the LAST key is the previous step (distance 1, "
         "entry 0)."),
        (t0[:, d.clamp(max=m - 1)],
         f"{what}: off by one: distance d uses entry d - 1 (the previous step, "
         f"distance 1, uses entry 0)."),
        (t0[:, d.clamp(max=m - 1) - 1],
         f"{what}: clamped one too early: distances of max_distance = {m} "
         f"and beyond use the LAST entry, index {m - 1} (clamp the distance "
         "to max_distance, then subtract 1)."),
        (t0[:, -d.clamp(max=m)], f"{what} indexes from the end "
         "(table[:, -d]): distance d uses entry d - 1, table[:, d - 1]."),
        *distances_from_zero(t0, s, what),
        (t0[:, torch.arange(s).clamp(max=m) - 1],
         f"{what}: the distances of the keys are s - j = s, ..., 1 "
         f"(torch.arange(s, 0, -1)), not j."),
        *last_columns(t0, s, what), *heads_flipped(t0, s, what), *far_first(t0, s, what),
        *one_head_for_all(t0, s, what), *weight_transforms.table_transformed(t0, s, what),
        (t0[:, (d - 2).clamp(0, m - 1)], f"{what}: one distance too near: your key j is "
         "at distance s - j - 1 (the last key at 0, its entry clamped): it is at s - j, the "
         "last key at 1, entry 0: table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) "
         "- 1]."),
        *[(t0[:, [c] * s], f"{what}: every key gets " + ("the last entry, table[:, -1]" if
           c == m - 1 else f"the same entry, table[:, {c}]") + " (a .clamp(min=...) for max?): "
           "key j is at distance s - j and uses entry d - 1, the distances capped with "
           ".clamp(max=table.size(1)).") for c in range(m)],
    ]
