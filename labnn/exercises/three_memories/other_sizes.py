"""Notebook 05's answers that hold only at the checks' own sizes: `make_recall`, once it
passes there, runs again where every size differs (`grading.sizes`), so that a row index
`torch.arange(5)` or a time axis `torch.arange(9)` written as numbers fails by name. (The
reach, the score and the cache sizes are checked at several sizes already.)

Dimension letters (the package legend): `N` examples, `T` tokens per example.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import make_recall as _reference
from labnn.exercises.grading.sizes import expect_same

N, T = 3, 12  # the check's own: N = 5, T = 9


def make_recall(fn: Callable) -> None:
    """`fn(filler, values, positions)` with filler `[3, 12]`: x, then y."""
    g = torch.Generator().manual_seed(51)
    filler = torch.randint(4, 8, (N, T), generator=g)
    values, positions = torch.tensor([2, 0, 3]), torch.tensor([10, 0, 6])
    want = _reference(filler, values, positions)
    for i, name in enumerate(("x", "y")):
        expect_same(f"{name} of make_recall(filler, values, positions) with filler [{N}, {T}]",
                    lambda i=i: fn(filler.clone(), values.clone(), positions.clone())[i],
                    want[i], "read N and T from filler.shape, never a number (the "
                    "check's are N = 5, T = 9)")
