"""Mistakes in notebook 03's relative position bias exercise (`relative_bias(table, s)`),
recomputed so that `check_relative_bias` can name the one a learner made (an index error
diagnosed, distances in a small integer dtype tried at s = 200), and the package's
functions that compute the bias, refused by name."""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.grading.sizes import expect_same, randn
from labnn.exercises.grading.slips import gives
from labnn.exercises.feedback_transformer.feedback_attention_slips import float_index_error
from labnn.exercises.feedback_transformer.memory_vector_slips import gather_rank
from labnn.feedback.layer import RelativeBias

# what computes the bias for the learner: refused by name
BIAS_REFERENCES = {f: f"labnn.feedback.layer.RelativeBias.{f.__name__}" for f in (
    RelativeBias.lookup, RelativeBias.at, RelativeBias.forward)}


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


def long_distances(fn: Callable) -> None:
    """`fn(table, 200)` with a table of 64 columns: distances past 127 overflow int8 (a
    `dtype=torch.int8` arange wraps to negative numbers); named when `s = 127` is right."""
    table = randn(2, 64, seed=39)
    what = "relative_bias(table, 200) with table [2, 64]"
    try:
        got = fn(table.clone(), 200)
        right = isinstance(got, torch.Tensor) and close(got, RelativeBias.lookup(table, 200))
    except Exception:  # noqa: BLE001 (expect_same names it)
        right = False
    if not right and gives(fn, table.clone(), 127, RelativeBias.lookup(table, 127)):
        fail(f"{what} is wrong though s = 127 is right: distances past 127 overflow int8 "
             "(dtype=torch.int8 wraps 128 to -128): keep torch.arange's default dtype, "
             "int64, for the distances and the index.")
    expect_same(what, lambda: fn(table.clone(), 200), RelativeBias.lookup(table, 200),
                "the distances s - j run up to s = 200 here: clamp them at table.size(1) "
                "and keep them int64, torch.arange's default")
