"""Mistakes in notebook 03's relative position bias exercise (`relative_bias(table, s)`),
recomputed so that `check_relative_bias` can name the one a learner made."""

from __future__ import annotations

import torch


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
