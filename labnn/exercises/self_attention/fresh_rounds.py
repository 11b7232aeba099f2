"""State kept between calls in notebook 01's answers (`labnn.exercises.grading.fresh_values`):
a result cached by the inputs' shapes, `id()` or `data_ptr()`, or one output buffer per
shape, which every other round passes (each differs from the earlier calls in its sizes,
dtype or requires_grad); and a result that a later call overwrote before the check compared
it, or the same tensor handed out by two calls on different inputs.

Every round runs right after the check's first call is found right, at its small sizes.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, expect_close, expect_tensor, fail, fresh_values


def expect_fresh(fn: Callable, what: str, args: tuple, reference: Callable,
                 dims: str) -> None:
    """`fresh_values.expect_fresh` for a function returning one tensor, compared with
    `close`, told apart by `expect_close` where it differs; a result sharing memory with
    an earlier call's (not with its own inputs) is named too.

    Args:
        fn, what, args: as in `fresh_values.expect_fresh` (tensors are cloned here).
        reference: the package's version, called on detached inputs (without gradients).
        dims: the names of the result's dimensions, for `expect_close`.
    """
    def differs(got: object, want: torch.Tensor, said: str) -> None:
        expect_close(expect_tensor(got, said), want, said, dims=dims)

    def plain(*inputs):
        with torch.no_grad():
            return reference(*inputs)

    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    results = fresh_values.expect_fresh(
        fn, what, args, plain, lambda got, want: close(got, want), differs)
    expect_apart(results[0], results[1], what)


def expect_apart(first: torch.Tensor, second: torch.Tensor, what: str) -> None:
    """Fail when two results of `fn` on different inputs share memory (a kept tensor, or
    views of one kept buffer: a caller's in-place edit of one changes the other)."""
    if (first.numel() and second.numel() and first.untyped_storage().data_ptr()
            == second.untyped_storage().data_ptr()):
        fail(f"{what} returns the same tensor (or views of one kept tensor) at two calls "
             "on different input tensors: a caller that edits one result in place changes "
             "the other; compute it afresh at every call.")


def expect_not_overwritten(got: torch.Tensor, copy: torch.Tensor, what: str) -> None:
    """Fail when `got`, whose values were `copy` when `fn` returned it, changed since:
    only later calls of `fn` ran in between, so they wrote into it."""
    if not close(got.detach(), copy, 0.0, 0.0):
        fail(f"{what}: a later call, with other inputs of the same sizes, overwrote what this "
             "call returned: an output buffer kept between calls; return a new tensor at "
             "every call.")
