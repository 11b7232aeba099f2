"""Notebook 02's memory update, shift and scores (Exercises 1, 4 and 5) against state kept
between calls (`labnn.exercises.grading.fresh_values`), with their own comparison: a tensor,
close on the entries a query may see, told apart by `expect_close` where it differs.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import expect_close, expect_tensor
from labnn.exercises.grading import fresh_values


def expect_fresh(fn: Callable, what: str, args: tuple, reference: Callable,
                 same: Callable[[torch.Tensor, torch.Tensor], bool], dims: str,
                 where: torch.Tensor | None = None) -> list[torch.Tensor]:
    """`fresh_values.expect_fresh` for a function returning one tensor.

    Args:
        fn, what, args, reference: as in `fresh_values.expect_fresh`.
        same: whether a result tensor matches (e.g. on the entries a query may see only).
        dims: the names of the result's dimensions, for `expect_close`.
        where: the entries `expect_close` compares (all when None).

    Returns:
        The three results.
    """
    def differs(got: object, want: torch.Tensor, said: str) -> None:
        expect_close(expect_tensor(got, said), want, said, dims=dims, where=where)

    return fresh_values.expect_fresh(
        fn, what, args, reference,
        lambda got, want: isinstance(got, torch.Tensor) and same(got, want), differs)
