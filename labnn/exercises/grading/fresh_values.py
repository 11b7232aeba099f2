"""State kept between calls, which no other round of a check shows: every other call of a
check differs from the earlier ones in its sizes, dtype or requires_grad, so a result kept
by those (a dict keyed on the shapes, `functools.lru_cache`), by the inputs' `id()` or
`data_ptr()`, or one output buffer per shape that every call overwrites, passes them.

`expect_fresh` calls the learner's function on the check's first values, then on new tensors
of the same sizes, dtype, device and requires_grad but other values (a cache by the shapes
returns the first result; an output buffer overwrites it), then once more on those same
tensors refilled in place with new values (a cache by `id()` or `data_ptr()` finds them). A
result that is a view of its input (the copy-free relative shift) passes: the first result
is compared with its copy only after a call on other tensors, and the refilled call with
the reference of the new values.

Results may be a tensor, or a tuple or list of them (`(k, v)`); `same(got, want)` says
whether a result is right (the caller's tolerance, entries and types).

Values never written, which no round shows where fresh memory happens to hold zeros: in a
block run `uninitialised()`, every `torch.empty`-like tensor holds NaN, and
`expect_initialised` names the call that made it where NaN comes out.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading.outcomes import fail

AFRESH = "compute it afresh at every call."
OTHER = "called again with other values of the same sizes (and dtype, device, requires_grad)"
REFILLED = "called again on the same input tensors refilled in place with new values"


def other_values(a: object, seed: int) -> object:
    """A tensor of `a`'s sizes, dtype, device and requires_grad with other values (`a`
    itself when it is not a floating-point tensor)."""
    if not isinstance(a, torch.Tensor) or not a.is_floating_point():
        return a
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(a.shape, generator=g).to(device=a.device, dtype=a.dtype)
    return values.requires_grad_(a.requires_grad)


def _plain(args: tuple) -> tuple:
    """`args` with every tensor detached, for the reference."""
    return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)


def _copy(result: object) -> object:
    """A detached copy of a tensor, or of each tensor in a tuple or list."""
    if isinstance(result, torch.Tensor):
        return result.detach().clone()
    if isinstance(result, (tuple, list)):
        return type(result)(_copy(r) for r in result)
    return result


def _again(fn: Callable, said: str, args: tuple, reference: Callable, same: Callable,
           differs: Callable, kept: object, stale: str, by_identity: bool = False) -> object:
    """`fn(*args)`, which must match the reference: one that matches `kept` instead (an
    earlier result) fails with `stale`, any other with the check's diagnosis (`differs`).
    With `by_identity`, `stale` is said only if copies of `args` get the right result: a
    cache keyed on the tensors themselves, not an answer blind to the values changed."""
    from labnn.exercises.grading import call  # the package's door; imports this module

    got = call(fn, said, *args)
    want = reference(*_plain(args))
    if not same(got, want):
        copies = tuple(a.detach().clone().requires_grad_(a.requires_grad)
                       if isinstance(a, torch.Tensor) else a for a in args)
        if same(got, kept) and (not by_identity or same(
                call(fn, f"{said} (on copies of them)", *copies), want)):
            fail(f"{said}, {stale}")
        expect_unclipped(got, want, said)  # a .clamp() the first values stayed within
        differs(got, want, said)
    return got


def expect_fresh(fn: Callable, what: str, args: tuple, reference: Callable,
                 same: Callable[[object, object], bool],
                 differs: Callable[[object, object, str], None]) -> list:
    """Fail when `fn` keeps a result, or its output buffer, between calls.

    Args:
        fn: the learner's function.
        what: the call as the learner writes it, e.g. ``"relative_shift(x)"``.
        args: fresh inputs holding the values of the check's first call (which `fn` got
            right), of the sizes, dtype and requires_grad to try.
        reference: the package's version, called on detached inputs.
        same: whether a result matches (e.g. on the entries a query may see only).
        differs: called as `differs(got, want, call)` when a result matches neither the
            reference nor an earlier result: it fails with the check's own diagnosis.

    Returns:
        The three results, for further checks by the caller (e.g. requires_grad).
    """
    from labnn.exercises.grading import call  # the package's door; imports this module

    first = call(fn, f"{what} with the check's first values", *args)
    kept = _copy(first)
    if not same(first, reference(*_plain(args))):
        fail(f"{what} gave another result than at its first call on the same values: "
             "something kept between calls (a cache keyed on the shapes, id() or "
             f"data_ptr(), a buffer); {AFRESH}")
    other = tuple(other_values(a, 101) for a in args)
    second = _again(fn, f"{what}, {OTHER}", other, reference, same, differs, kept,
                    "returned the result of an earlier call: a result kept between calls "
                    f"(a cache keyed on the shapes, id() or data_ptr()); {AFRESH}")
    if not same(first, kept):
        fail(f"{what}: a second call, with other inputs of the same sizes, overwrote what "
             "the first returned: an output buffer kept between calls; return a new tensor "
             "at every call.")
    kept = _copy(second)  # before the refill, which a view of an input follows
    with torch.no_grad():
        for a in other:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                a.copy_(other_values(a, 202))
    third = _again(fn, f"{what}, {REFILLED}", other, reference, same, differs, kept,
                   "returned the earlier result: a result kept between calls, "
                   f"keyed on the tensors themselves (id() or data_ptr()); {AFRESH}",
                   by_identity=True)
    return [first, second, third]


_EMPTY = {getattr(torch.ops.aten, name) for name in (
    "empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided")}


class _Uninitialised(TorchDispatchMode):
    """Fills every floating tensor made by an `empty`-like operation with NaN, and records
    which operation made it."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func.overloadpacket in _EMPTY and isinstance(out, torch.Tensor)
                and out.is_floating_point()):
            out.fill_(float("nan"))
            self.made.append(func.overloadpacket.__name__)
        return out


def uninitialised() -> _Uninitialised:
    """A block (`with uninitialised() as mode:`) whose `torch.empty`-like tensors hold NaN;
    pass `mode` to `expect_initialised` after it."""
    return _Uninitialised()


def expect_initialised(mode: _Uninitialised, got: torch.Tensor, what: str, fix: str) -> None:
    """Fail when `got`, from a block run under `uninitialised`, holds NaN where an `empty`
    tensor was made: a result started from memory never written."""
    if mode.made and got.is_floating_point() and got.isnan().any():
        made = mode.made[0]
        made = f"x.{made}(...)" if made.startswith("new_") else f"torch.{made}"
        fail(f"{what} starts from {made}: its memory holds whatever was "
             f"there (NaN here, so NaN came out), and what comes of it keeps that; {fix}.")
