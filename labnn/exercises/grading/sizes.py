"""Answers that hold only at a check's own sizes.

A check runs the learner's function at one set of sizes; an answer that writes one of
them as a number (`.view(2, 5, 3, 8)`, `/ 2.0` for the square root of a head width of
4, `torch.zeros(2, 3, 4)`, a loop over `range(2)` layers) passes there and is wrong
everywhere else. After a check has passed at its own sizes it calls `expect_same` once
more on inputs where every size differs, and the answer fails by name.

Likewise positions or counts kept in a narrow dtype are right at every size a check can
afford and wrong past the largest whole number that dtype holds (`EXACT_UP_TO`):
`kept_in` reruns the answer and names the dtype it kept them in. An answer whose reshape
torch refuses at the check's sizes, with a number that stays when every size changes, is
named by `written_size`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading.compare import close
from labnn.exercises.grading.outcomes import fail, first_line


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normal numbers of `shape` from their own generator, seeded: the same inputs at every
    run, whatever the learner's session has drawn."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def expect_same(what: str, run: Callable[[], object], want: torch.Tensor, fix: str,
                where: torch.Tensor | None = None, dims: str | None = None) -> None:
    """Fail unless `run()` gives `want`: same shape, dtype kind and values.

    Args:
        what: the call as the learner would write it, at the other sizes, e.g.
            ``"memory_vector(xs, w) with xs [6, 3, 5]"``.
        run: calls the learner's function on those inputs.
        want: the reference's result on the same inputs.
        fix: what to do, e.g. ``"read every size from the inputs (xs.shape), never a
            number: the check's own sizes are L + 1 = 4, B = 2, D = 12"``.
        where: boolean, broadcast against `want`: True where the values are compared
            (the entries a query may see, where the rest is left unspecified); None
            compares every entry.
        dims: the names of `want`'s axes, e.g. ``"B H T S"``: an axis of size 1 missing
            from the result (a `.squeeze()`) is then named.

    Raises:
        ExerciseFailed: `run()` raised, or its result is not `want`; the message says
            that the answer is right at the check's sizes and wrong at these.
    """
    try:
        got = run()
    except Exception as err:  # the learner's code, at sizes it was not written for
        line = first_line(err, 100)
        fail(f"{what} raised {type(err).__name__} ({line}): right at the check's sizes, "
             f"not at these: {fix}.")
    if not isinstance(got, torch.Tensor):
        fail(f"{what} returned {type(got).__name__}, not a tensor: right at the check's "
             f"sizes, not at these: {fix}.")
    if got.shape != want.shape:
        expect_kept_ones(what, got, want, dims, where)
        fail(f"{what} has shape {list(got.shape)}, expected {list(want.shape)}: right at "
             f"the check's sizes, not at these: {fix}.")
    if where is not None:
        got, want = got.detach().masked_fill(~where, 0), want.masked_fill(~where, 0)
    if not close(got.detach(), want):
        expect_unclipped(got, want, what)  # a .clamp() the check's values stayed within
        fail(f"{what} differs from the reference: right at the check's sizes, not at "
             f"these: {fix}.")


def dropped_ones(got: torch.Size, want: torch.Size) -> list[int] | None:
    """The axes of `want`, all of size 1, whose removal gives `got` (leftmost first), or
    None when `got` is not `want` less some of its size-1 axes."""
    dropped, i = [], 0
    for axis, size in enumerate(want):
        if i < len(got) and got[i] == size:
            i += 1
        elif size == 1:
            dropped.append(axis)
        else:
            return None
    return dropped if i == len(got) and dropped else None


def expect_kept_ones(what: str, got: torch.Tensor, want: torch.Tensor,
                     dims: str | None = None, where: torch.Tensor | None = None) -> None:
    """Fail by name when `got` is `want` less some of its axes of size 1: a `.squeeze()`
    with no dim (every such axis gone), or one of a size-1 axis (`.squeeze(0)`, `[0]`);
    `dims` names `want`'s axes, `where` (as in `expect_same`) the entries compared."""
    dropped = dropped_ones(got.shape, want.shape)
    if dropped is None:
        return
    names = dims.split() if dims and len(dims.split()) == want.dim() else None
    ones = [a for a, n in enumerate(want.shape) if n == 1]

    def said(axes: list[int]) -> str:
        return ", ".join(f"{names[a]} = 1" if names else f"axis {a}" for a in axes)

    if len(dropped) == len(ones):
        gone = (f"the size-1 axis {said(ones)} is gone" if len(ones) == 1
                else f"the size-1 axes {said(ones)} are gone")
        how = "a .squeeze() with no dim drops every axis of size 1 (.squeeze(0) the first)"
    else:
        verb = "is" if len(dropped) == 1 else "are"
        gone = f"{len(dropped)} of the size-1 axes {said(ones)} {verb} gone"
        how = "a .squeeze(dim) (or an index [0]) drops one"
    keep = (torch.ones_like(want, dtype=torch.bool) if where is None
            else where.expand(want.shape)).reshape(got.shape)
    same = close(got.detach().masked_fill(~keep, 0), want.reshape(got.shape).masked_fill(
        ~keep, 0))
    fail(f"{what} has shape {list(got.shape)}, expected {list(want.shape)}"
         + (f" = [{', '.join(names)}]" if names else "") + f": {gone}"
         + ("" if same else " (and values differ)") + f": {how}. Keep every axis, even "
         "of size 1: no .squeeze() (squeeze only an axis you added yourself).")


def shift_rows(q: torch.Tensor, k: torch.Tensor,
               shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of q `[..., D]` and keys k `[..., D]` whose first feature is rewritten so that
    query i's scaled scores `q k^T / sqrt(D)` are those of the other features plus
    `shifts[..., i]` (broadcast like `q[..., 0]`): a constant per row, which leaves a
    right softmax unchanged and an unstable one wrong."""
    q, k = q.clone(), k.clone()
    k[..., 0] = 10.0
    q[..., 0] = shifts * q.size(-1) ** 0.5 / 10.0
    return q, k


# the largest whole number each dtype holds exactly (float) or before it wraps (int)
EXACT_UP_TO = {torch.bfloat16: 256, torch.float16: 2048, torch.int16: 32767,
               torch.uint16: 65535, torch.int8: 127, torch.uint8: 255}


class _Kept(TorchFunctionMode):
    """Records the first result of one of `dtypes` holding a value above 1 (positions or
    counts; a mask of ones and zeros holds none)."""

    def __init__(self, dtypes) -> None:
        super().__init__()
        self.dtypes, self.seen = tuple(dtypes), None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (self.seen is None and isinstance(out, torch.Tensor) and out.dtype in self.dtypes
                and out.numel() and bool(out.detach().float().abs().amax() > 1)):
            self.seen = out.dtype
        return out


def kept_in(run: Callable[[], object], dtypes) -> torch.dtype | None:
    """Rerun the learner's call `run()` recording its torch calls: the first of `dtypes`
    it keeps a number above 1 in, or None (also when the rerun raises: the learner's
    errors were named before)."""
    mode = _Kept(dtypes)
    try:
        with mode:
            run()
    except Exception:  # noqa: BLE001
        return None
    return mode.seen


class _Reshapes(TorchFunctionMode):
    """Records the sizes each reshape or view of a run asks for."""

    def __init__(self):
        super().__init__()
        self.asked: list[tuple] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        sizes = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
        if getattr(func, "__name__", "") in ("reshape", "view") and all(
                isinstance(n, int) for n in sizes):
            self.asked.append(tuple(sizes))
        return func(*args, **(kwargs or {}))


def _reshapes(run: Callable[[], object]) -> list[tuple]:
    with _Reshapes() as mode:
        try:
            run()
        except Exception:  # noqa: BLE001 (the answer's error: what it asked before counts)
            pass
    return mode.asked


def written_size(err: Exception, what: str, here: Callable[[], object],
                 there: Callable[[], object], fix: str) -> None:
    """Name a reshape or view that torch refused (`err`) whose sizes hold a number that
    stays the same when every input size changes: a size written as a number. `here`
    reruns the answer on the check's inputs, `there` on inputs where every size (and
    every product of two) differs; `fix` ends the message."""
    if "is invalid for input of size" not in str(err):
        return
    for a, b in zip(_reshapes(here), _reshapes(there)):
        same = [str(n) for n, m in zip(a, b) if n == m and n > 1] if len(a) == len(b) else []
        if same:
            fail(f"{what}: a reshape asks for {list(a)} here and {list(b)} when every size "
                 f"of the inputs changes: {', '.join(same)} "
                 f"{'stays' if len(same) == 1 else 'stay'} the same, a size written as a "
                 f"number (torch said: {first_line(err)}): {fix}")
