"""Slips of notebook 05's `make_recall`, named for `labnn.exercises.three_memories.recall_task`: a
`scatter_` whose `src` has one axis fewer than its index (values `[N]` with an index
`[N, 1]`), found by rerunning the learner's function and recording the torch call that
raised; an `x` into which no value was written, the values added to the filler or written
one position off, an `x` started from zeros instead of the filler; labels of one id for
every row; the
filler written into (through `x = filler`, `filler.detach()`, a call that gives filler back
such as `filler.contiguous()`, or `copy.copy`); a size written as a number.

Dimension letters: `N` sequences, `T` tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.data.recall import IGNORE
from labnn.exercises.grading.outcomes import fail


class _LastCall(TorchFunctionMode):
    """Records the last torch function called (the one that raised, after an error)."""

    def __init__(self, watched: torch.Tensor | None = None) -> None:
        super().__init__()
        self.last, self.watched, self.called = None, watched, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.last = (getattr(func, "__name__", ""), args, kwargs)
        if args and args[0] is self.watched:  # the names of the calls on `watched`
            self.called.append(self.last[0])
        return func(*args, **kwargs)


def label_slips(y, want: torch.Tensor, x, values: torch.Tensor) -> None:
    """Name labels `y` that turn a value 0 into IGNORE (`mask * values`, then 0 ->
    IGNORE), that hold the token before each labelled position (`x[:, t - 1]`), or that
    hold the next token (`y[:, :-1] = x[:, 1:]`)."""
    if not isinstance(y, torch.Tensor) or y.shape != want.shape:
        return
    zero = (values == 0).nonzero()
    if len(zero) and torch.equal(y.long(), want.masked_fill(want == 0, IGNORE)):
        n = int(zero[0])
        fail(f"y is IGNORE after positions[{n}] though values[{n}] = 0: a value of 0 "
             "became IGNORE (0 is a value id, not 'no label'; e.g. mask * values, then 0 -> "
             "IGNORE). Build y with torch.where(after, values[:, None], IGNORE).")
    if not isinstance(x, torch.Tensor) or x.shape != y.shape:
        return
    after = want != IGNORE
    before = torch.cat([x[:, :1], x[:, :-1]], 1)  # x[:, t - 1]; t = 0 is never labelled
    if not torch.equal(y.long(), want) and torch.equal(y[after].long(), before[after]):
        fail("after the value, y holds the token before each position, x[:, t - 1] (right "
             "only at positions[n] + 1, where that token is the value): the label is the "
             "value itself, values[n], at every t > positions[n]: torch.where(after, "
             "values[:, None], IGNORE).")
    if torch.equal(y[:, :-1], x[:, 1:]):
        fail("y holds the next token, x[:, 1:] (a language-model habit): here y holds the "
             "value after positions[n] (values[n] at every t > positions[n]), IGNORE "
             "elsewhere: torch.where(after, values[:, None], IGNORE).")


_COMPARE = {"gt", "lt", "ge", "le", "__gt__", "__lt__", "__ge__", "__le__", "greater", "less"}


def scatter_src_rank(err: Exception, fn: Callable, *inputs: torch.Tensor) -> None:
    """Name the torch call that raised, rerunning `fn` on copies of `inputs` (filler,
    values, positions): a `scatter_` whose src or index lacks the column axis, or a
    comparison of a `[T]` tensor with positions `[N]` (no `[:, None]`)."""
    if not isinstance(err, (IndexError, RuntimeError)):
        return
    mode = _LastCall()
    try:
        with mode:
            fn(*(t.clone() for t in inputs))
    except Exception:
        pass
    name, args, kwargs = mode.last or ("", (), {})
    said = str(err).strip().splitlines()[0]
    pair = [a for a in args if isinstance(a, torch.Tensor)]
    if name in _COMPARE and len(pair) == 2 and pair[0].dim() == pair[1].dim() == 1 and (
            "must match the size" in said):
        a, b = (f"positions [N={len(t)}]" if t.shape == inputs[2].shape and torch.equal(
            t, inputs[2]) else f"a [{'T=' * (len(t) == inputs[0].size(-1))}{len(t)}] tensor"
                for t in pair)
        fail(f"a comparison ({name}) lines {a} up with {b}, element by element: make positions a "
             "column, positions[:, None] ([N, 1]), to compare each row's own position with "
             f"every time step, torch.arange(T): a mask [N, T]. (torch said: {said})")
    if name not in ("scatter", "scatter_") or len(args) < 3:
        return
    index, src = args[2], args[3] if len(args) > 3 else kwargs.get("src")
    if isinstance(index, torch.Tensor) and index.dim() == 1 and getattr(args[0], "ndim", 0) == 2:
        fail(f"{name}(1, index, src) on x [N, T]: index and src need x's two axes, the "
             f"column axis too: positions[:, None], values[:, None] ([N, 1] each, index "
             f"now {list(index.shape)}). (torch said: {said})")
    if isinstance(src, torch.Tensor) and isinstance(index, torch.Tensor) and (
            index.dim() == 2 and index.size(1) == 1 and src.shape == index.shape[:1]):
        fail(f"{name}(dim, index, src): src must have index's shape: index is "
             f"{list(index.shape)} = [N, 1], src {list(src.shape)} = [N]: give values its "
             f"column axis, values[:, None]. (torch said: {said})")


def unwritten(filler: torch.Tensor, values: torch.Tensor,
              positions: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The `x` of three slips that never write the values, each with its diagnosis: the
    filler returned unchanged, `x[rows, values] = positions` (index and value swapped),
    and the values added to the filler's tokens (`+=`, `accumulate=True`)."""
    rows = torch.arange(len(values))
    swapped, added = filler.clone(), filler.index_put((rows, positions), values, accumulate=True)
    swapped[rows, values] = positions
    fix = "x[torch.arange(N), positions] = values writes values[n] at positions[n] of row n"
    return [(filler, "x is the filler unchanged: no value was written into it (an "
                     "assignment through two brackets, x[rows][positions] = values, writes "
                     f"into a copy; {fix})."),
            (swapped, "x[rows, values] = positions swaps the index and the value: the "
                      f"positions say where, the values what ({fix})."),
            (added, "x adds values[n] to the filler token at positions[n] (x[...] += values, "
                    "or index_put_(..., accumulate=True)): the value replaces that token; "
                    f"assign it ({fix}).")]


def misplaced(filler: torch.Tensor, values: torch.Tensor,
              positions: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The `x` of a value written one position late or early (`positions - 1`: the last
    token for a position 0), or at row 0's position in every row, each with its diagnosis."""
    rows, t = torch.arange(len(values)), filler.size(1)
    late, early, first = filler.clone(), filler.clone(), filler.clone()
    late[rows, (positions + 1).clamp(max=t - 1)] = values
    early[rows, positions - 1] = values
    first[rows, positions[0]] = values
    fix = "write values[n] at positions[n] itself (x[torch.arange(N), positions] = values)."
    return [(late, "x has each value one position too late: " + fix),
            (early, "x has each value one position too early (at positions[n] - 1, the last "
                    "token where positions[n] = 0): " + fix),
            (first, "x has every row's value at row 0's position, positions[0]: each row has "
                    "its own, " + fix)]


def expect_filler_around(x, want: torch.Tensor, filler: torch.Tensor) -> None:
    """Fail when `x` holds the values where they go but not the filler elsewhere (started
    from zeros, `torch.empty_like`, ...)."""
    if not isinstance(x, torch.Tensor) or x.shape != want.shape:
        return
    rest = want == filler  # the filler's own tokens (and a value that equals one)
    if torch.equal(x[~rest].long(), want[~rest]) and not torch.equal(x[rest].long(), want[rest]):
        n, t = (rest & (x.long() != want)).nonzero()[0].tolist()
        fail(f"x holds the values where they go, but not the filler elsewhere ([n={n}, "
             f"t={t}]: {x[n, t].item()}, filler {want[n, t].item()}): x is the filler with "
             "one token per row replaced, nothing else: start from filler.clone() (not "
             "torch.zeros_like or torch.empty_like) and write only values[n] at positions[n].")


def one_label_for_all(y, want: torch.Tensor, values: torch.Tensor) -> None:
    """Fail when `y` labels the right positions with one id in every row, though the rows'
    values differ (`values.max()`, `values[-1]`, a number)."""
    after = want != IGNORE
    if not isinstance(y, torch.Tensor) or y.shape != want.shape or not after.any() or (
            values == values[0]).all() or not torch.equal(y != IGNORE, after):
        return
    held = y[after]
    if (held == held[0]).all():
        fail(f"y holds the same id, {held[0].item()}, after the value in every row (one "
             "number for the batch: values.max(), values[-1]?): row n is labelled with its "
             "own value, values[n]: values[:, None] lines them up with the rows.")


def exactly_one_of(got: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first mistake `got` equals exactly (ids: no tolerance)."""
    for wrong, message in mistakes:
        if wrong.shape == got.shape and torch.equal(got.to(wrong.dtype), wrong):
            fail(message)


def expect_filler_kept(fn: Callable, filler: torch.Tensor, before: dict,
                       *inputs: torch.Tensor) -> None:
    """Fail when `fn` wrote into `filler` (`before["filler"]`, its copy): rerun on a copy,
    recording the calls on it, to name `filler.detach()` (same storage, no copy) apart from
    `x = filler` (the same tensor)."""
    kept = before["filler"]
    if filler.shape != kept.shape or torch.equal(filler, kept):
        return
    n, t = (filler != kept).nonzero()[0].tolist()
    mode = _LastCall(watched=kept.clone())
    try:
        with mode:
            fn(mode.watched, *(i.clone() for i in inputs))
    except Exception:
        pass
    views = [c for c in mode.called if c in _VIEWS]
    same = [_SAME[c] for c in mode.called if c in _SAME]
    how = ("`x = filler.detach()` shares storage with filler, it does not copy it"
           if "detach" in mode.called else f"filler.{views[0]}(...) is a view: it shares "
           "filler's storage, it does not copy it" if views else same[0] if same else "`x = "
           "filler` names the same tensor (so do `filler.long()`, `.to(torch.long)` of this "
           "int64 filler), it does not copy it")
    fail(f"make_recall(filler, values, positions) modified its input `filler` in place (first "
         f"change at [n={n}, t={t}]): {how}, so writing into it wrote into the caller's "
         "filler. Start from a copy, filler.clone(), or a new tensor (torch.full_like).")


_KEPT = "returns the same tensor when nothing changes (dtype, device, layout), not a copy"
# calls on filler that give it back, or a tensor on its storage: what each one is
_SAME = {"contiguous": f"filler.contiguous() {_KEPT}", "long": f"filler.long() {_KEPT}",
         "to": f"filler.to(...) {_KEPT}", "type": f"filler.type(...) {_KEPT}",
         "as_tensor": f"torch.as_tensor(filler) {_KEPT}",
         "requires_grad_": f"filler.requires_grad_(...) {_KEPT}",
         "untyped_storage": "copy.copy(filler) makes a new tensor on filler's own storage (a "
                            "shallow copy), not a copy of its numbers"}
_VIEWS = {"view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "flatten",
          "squeeze", "unsqueeze", "narrow", "__getitem__", "as_strided", "unflatten"}


def expect_no_number(got, want: torch.Tensor, name: str) -> None:
    """Fail naming a time axis of a size written as a number: `got` `[N, T']`, T' not T
    nor T +- 1 (the notebook's own T_RECALL = 32, say)."""
    n, t = want.shape
    if isinstance(got, torch.Tensor) and got.dim() == 2 and got.size(0) == n and abs(
            got.size(1) - t) > 1:
        fail(f"{name} has shape {list(got.shape)}, expected {list(want.shape)}: "
             f"{got.size(1)} is a size written as a number (the notebook's T?): read it from "
             "the input, T = filler.size(1).")
