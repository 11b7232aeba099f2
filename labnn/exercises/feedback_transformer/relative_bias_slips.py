"""Mistakes in notebook 03's relative position bias exercise (`relative_bias(table, s)`),
recomputed so that `check_relative_bias` can name the one a learner made, and the
package's functions that compute the bias, refused by name."""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, fail
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
