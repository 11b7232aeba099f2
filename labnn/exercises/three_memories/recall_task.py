"""Checker for notebook 05's Exercise 2 (three memories, one budget): building the
delayed-recall task.

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.

Each checker runs the learner's function on seeded inputs, compares it with
`labnn.data.recall` and, when it differs, recomputes the typical mistakes (labels that
start one position early, zeros where nothing is to be predicted, a distance off by one,
counts instead of fractions, ...) to say which one was made. The score's checker is in
`labnn.exercises.three_memories.recall_score`, the reach and cache-size checkers in
`labnn.exercises.three_memories.memory_limits`.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import IGNORE, make_recall
from labnn.exercises.grading import (call, exercise, expect_any_device, expect_close,
                                     expect_like, expect_no_alias, expect_unchanged, fail,
                                     shares_memory, snapshot)
from labnn.exercises.grading.slips import expect_every_row
from labnn.exercises.three_memories import fresh_calls, other_sizes
from labnn.exercises.three_memories.recall_task_slips import (
    exactly_one_of as _diagnose, expect_filler_around, expect_filler_kept, expect_no_number,
    label_slips, misplaced, one_label_for_all, scatter_src_rank, unwritten)

X_HINT = "Token ids index an embedding table: keep them integers (torch.long)."
Y_HINT = "Labels are class indices, which cross_entropy takes as torch.long (int64)."


def _recall_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    n, t, n_values = 5, 9, 4
    filler = torch.randint(n_values, 2 * n_values, (n, t), generator=g)
    values = torch.tensor([0, 3, 1, 2, 3])
    # the last position that leaves a label is T - 2 = 7
    positions = torch.tensor([0, 2, 7, 4, 1])
    return filler, values, positions


def _batch_and_time_swapped(fn: Callable) -> Callable[[Exception], None]:
    """The diagnosis of an IndexError: retried on a square filler (N = T), where
    `x[positions, rows]` runs, is the value written at [positions[n], n]?"""

    def diagnose(err: Exception) -> None:
        broadcast = isinstance(err, RuntimeError) and "must match the size" in str(err)
        bounds = isinstance(err, RuntimeError) and "out of bounds" in str(err)
        if not isinstance(err, IndexError) and not broadcast and not bounds:
            return
        n = 6
        filler = torch.randint(4, 8, (n, n), generator=torch.Generator().manual_seed(6))
        values, positions = torch.tensor([0, 3, 1, 2, 3, 1]), torch.tensor([0, 2, 5, 4, 1, 3])
        swapped = filler.clone()
        swapped[positions, torch.arange(n)] = values
        try:
            out = fn(filler.clone(), values, positions)
        except Exception:
            return
        x = out[0] if isinstance(out, (tuple, list)) and out else out
        y = out[1] if isinstance(out, (tuple, list)) and len(out) == 2 else None
        later = torch.arange(n) > positions[:, None]
        rows = torch.full((n, n), IGNORE)
        rows[positions] = values[:, None]
        if broadcast and _equal(y, torch.where(torch.arange(n) > positions, values[:, None],
                                               IGNORE)):
            fail("torch.arange(T) > positions lines positions [N] up with the time axis: "
                 "make it a column, positions[:, None] ([N, 1]), to compare each row's "
                 "position with every time step ([N, T]). "
                 f"(torch said: {str(err).strip().splitlines()[0]})")
        if broadcast and _equal(y, torch.where(later, values, IGNORE)):
            fail("values [N] lines up with the time axis of y [N, T], the last one: make "
                 "it a column, values[:, None] ([N, 1]), so that row n gets values[n]. "
                 f"(torch said: {str(err).strip().splitlines()[0]})")
        if broadcast and _equal(y, torch.where(later.T, values[:, None], IGNORE)):
            fail("your labels' comparison is a [T, N] grid, time down and rows across "
                 "(arange(T)[:, None] > positions[None, :]): y is [N, T]: compare "
                 "arange(T) with positions[:, None] ([N, 1]). (torch said: "
                 f"{str(err).strip().splitlines()[0]})")
        if isinstance(err, IndexError) and _equal(y, rows):
            fail("y[positions] = ... selects the rows (examples) positions[n], not the "
                 "time steps of row n: torch.where(torch.arange(T) > positions[:, None], "
                 f"values[:, None], IGNORE). (torch said: {err})")
        x_swapped = _equal(x, swapped)
        if (x_swapped or _equal(x, filler.scatter(0, positions[:, None], values[:, None]))) \
                and "out of bounds for dimension 0" in str(err) and not isinstance(err, IndexError):
            fail("positions index the time axis, dim 1, but x got values[n] in row "
                 "positions[n], on the batch axis (dim 0: N = 5 rows here, positions up to "
                 "7): x.scatter_(1, positions[:, None], values[:, None]), or "
                 f"x[torch.arange(N), positions] = values. (torch said: {err})")
        if not isinstance(err, IndexError):
            return
        if x_swapped:
            fail("make_recall(filler, values, positions) raised an IndexError because it "
                 "indexes x with batch and time swapped: x[positions, rows] puts each "
                 "position on the batch axis (N = 5 rows here, positions up to 7). Row "
                 "n gets its value at column positions[n]: x[rows, positions] = values, "
                 f"with rows = torch.arange(N). (torch said: {err})")

    return diagnose


def _one_value_per_row(err: Exception, n: int, labelled: int) -> None:
    """Torch's "shape mismatch" of `y[after] = values`: `n` values, one per row, for the
    `labelled` positions the mask selects (several per row)."""
    said = str(err)
    if "shape mismatch" in said and f"shape [{n}]" in said and f"[{labelled}]" in said:
        fail(f"y[after] = values gives one value per row (values [N], {n} here) to the "
             f"{labelled} positions the mask selects, several per row: spread each row's "
             "value over its row, y[after] = values[:, None].expand_as(y)[after], or "
             "y = torch.where(after, values[:, None], IGNORE).")


def _sliced_by_positions(err: Exception) -> None:
    """Torch's TypeError of a slice whose bound is the [N] positions (`y[:, positions + 1:]`)."""
    if isinstance(err, TypeError) and "single element can be converted" in str(err):
        fail("a slice's bound is one number, and positions holds one per row ([N]): "
             "y[:, positions + 1:] cannot slice each row at its own place. Compare: after = "
             "torch.arange(T, device=filler.device) > positions[:, None] ([N, T]); y = "
             "torch.where(after, values[:, None], IGNORE).")


def _equal(got, want: torch.Tensor) -> bool:
    """Whether `got` is a tensor equal to `want`."""
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(
        got.long(), want)


def _labels_from(
    values: torch.Tensor, t: int, keep: torch.Tensor, other: int = IGNORE
) -> torch.Tensor:
    return torch.where(keep, values[:, None], torch.full((values.numel(), t), other))


@exercise("delayed-recall examples", refuse={make_recall: "labnn.data.recall.make_recall"})
def check_make_recall(fn: Callable) -> None:
    """`fn(filler, values, positions)` -> `(x, y)`: `make_recall` (filler `[N, T]`,
    values and positions `[N]`)."""
    fresh_calls.other_exercise(fn, "make_recall")
    filler, values, positions = _recall_inputs()
    before = snapshot(filler=filler, values=values, positions=positions)
    swapped = _batch_and_time_swapped(fn)
    labelled = int((make_recall(filler, values, positions)[1] != IGNORE).sum())
    out = call(fn, "make_recall(filler, values, positions)", filler, values, positions,
               diagnose=lambda err: (_one_value_per_row(err, len(values), labelled),
                                     _sliced_by_positions(err),
                                     scatter_src_rank(err, fn, filler, values, positions),
                                     swapped(err)))
    expect_filler_kept(fn, filler, before, values, positions)
    expect_unchanged(
        before,
        "make_recall(filler, values, positions)",
        filler=filler,
        values=values,
        positions=positions,
    )
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(f"make_recall should return a pair (x, y), got {type(out).__name__}.")
    x, y = out
    tensors = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
    if tensors and not (x.is_meta or y.is_meta) and shares_memory(x, y):
        fail("x and y are one tensor (`y = x` names it again, it does not copy it): writing "
             "the labels into y overwrote the tokens. Start y from a new tensor, "
             "torch.full_like(x, IGNORE).")
    want_x, want_y = make_recall(filler, values, positions)
    expect_no_number(x, want_x, "x")
    expect_no_number(y, want_y, "y")
    expect_like(x, want_x, "x", X_HINT)
    expect_like(y, want_y, "y", Y_HINT)
    if (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == want_y.shape
        and (x == IGNORE).any()
        and not (y == IGNORE).any()
    ):
        fail(
            "the outputs are swapped: the first holds IGNORE (labels), the second none"
            " (tokens). Return (x, y): the tokens first, then the labels."
        )
    n, t = filler.shape
    expect_no_alias(x, "make_recall(filler, values, positions)", filler=filler)
    col, rows = torch.arange(t), torch.arange(n)
    columns = filler.clone()
    columns[:, positions] = values
    by_row = filler.clone()
    by_row[:, positions] = values[:, None].expand(n, n)
    _diagnose(
        x,
        [*misplaced(filler, values, positions),
         (columns, "x[:, positions] = values writes into every row at every position: "
                    "pair each row with its own, x[torch.arange(N), positions] = values."),
         (by_row, "x[:, positions] = values[:, None] writes into every row at every "
                  "position: pair each row with its own, x[torch.arange(N), positions] "
                  "= values."),
         *_value_repeated(filler, values, positions), *unwritten(filler, values, positions)],
    )
    expect_every_row(x, want_x, "x", row="row", untouched=filler,
                     fix="x[torch.arange(N), positions] = values fills all rows at once.")
    expect_filler_around(x, want_x, filler)
    expect_close(x, want_x, "x", dims="n t")
    p = positions[:, None]
    _diagnose(
        y,
        [
            (
                _labels_from(values, t, col >= p),
                (
                    "y labels the value's own position too (as a time axis counted from 1, "
                    "arange(1, T + 1), does): the value is in the input there, so the first "
                    "position to predict it is positions[n] + 1."
                ),
            ),
            (_labels_from(values, t, col > p + 1), "y starts one position late: position "
             "positions[n] + 1 (distance 1) must already be labelled with the value."),
            (_labels_from(values, t, col < p), "y labels the positions BEFORE the value (the "
             "comparison is the wrong way round): the value can only be recalled after it "
             "was seen."),
            (
                _labels_from(values[:1].expand(n), t, col > p),
                "y holds values[0] in every row: row n is labelled with its own value, "
                "values[n] (values[:, None] lines them up with the rows).",
            ),
            (
                _labels_from(values, t, col > p, 0),
                (
                    "y holds 0 where there is nothing to predict: 0 is a value id, so"
                    " the loss would teach the model to answer 0 there. Use IGNORE"
                    " (-100)."
                ),
            ),
            (_labels_from(positions, t, col > p), "y holds positions[n] after the value: "
             "the label there is the value itself, values[n] (torch.where(after, "
             "values[:, None], IGNORE))."),
            (
                x,
                (
                    "y is a copy of the tokens: the labels are the value (from"
                    " positions[n] + 1 on), not the next tokens."
                ),
            ),
        ],
    )
    label_slips(y, want_y, x, values)
    one_label_for_all(y, want_y, values)
    _explain_held(y, want_y, x, filler)
    _explain_labels(y, want_y, positions)
    other_sizes.make_recall(fn, (want_x, want_y), (x, y))
    expect_any_device(fn, "make_recall(filler, values, positions)", filler, values, positions)


def _value_repeated(filler: torch.Tensor, values: torch.Tensor,
                    positions: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """x with values[n] written after positions[n] too, or only after it: (x, message)."""
    later = torch.arange(filler.size(1)) > positions[:, None]
    after = torch.where(later, values[:, None], filler)
    fix = ("x holds the value only at positions[n]; the rest stays filler (only y repeats "
           "it): x[torch.arange(N), positions] = values.")
    return [(after.index_put((torch.arange(len(values)), positions), values),
             "x repeats values[n] at every position after positions[n]: " + fix),
            (after, "x holds values[n] after positions[n], not at it: " + fix)]


def _explain_held(y: torch.Tensor, want: torch.Tensor, x: torch.Tensor,
                  filler: torch.Tensor) -> None:
    """Fail naming what y holds where nothing is to be predicted (never IGNORE), or where
    the value is (the tokens instead of the value)."""
    none = want == IGNORE
    held = y[none]
    if none.any() and not (held == IGNORE).any():
        what = ("the filler tokens" if torch.equal(held, filler[none]) else "the tokens x"
                if torch.equal(held, x[none]) else f"{held[0].item()}"
                if (held == held[0]).all() else None)
        if what is not None:
            fail(f"y holds {what} where there is nothing to predict (up to and at the "
                 f"value): those positions hold IGNORE ({IGNORE}, the label cross_entropy "
                 f"skips), not {what}.")
    labelled = ~none
    if labelled.any() and torch.equal(y[labelled], x[labelled]):
        fail("y holds the input tokens x after the value: the label there is the value "
             "itself, values[n], at every position after positions[n].")


def _explain_labels(
    y: torch.Tensor, want: torch.Tensor, positions: torch.Tensor
) -> None:
    """Fail naming, in `[n, t]`, the first position labelled that should not be, left
    out, or holding a wrong id."""
    t_last = y.size(1) - 1
    extra = (y != IGNORE) & (want == IGNORE)
    missing = (y == IGNORE) & (want != IGNORE)
    wrong = (y != IGNORE) & (want != IGNORE) & (y != want)
    problems = []
    if extra.any():
        n, t = extra.nonzero()[0].tolist()
        problems.append(
            f"y labels [n={n}, t={t}], at or before the value (positions[{n}] = "
            f"{positions[n].item()}): only positions AFTER the value are labelled"
        )
    if missing.any():
        n, t = missing.nonzero()[0].tolist()
        problems.append(
            f"y leaves [n={n}, t={t}] unlabelled (IGNORE), though it comes after the"
            f" value (positions[{n}] = {positions[n].item()}): every position after it"
            f" is labelled, up to the last one (t = {t_last})"
        )
    if wrong.any():
        n, t = wrong.nonzero()[0].tolist()
        problems.append(
            f"y holds {y[n, t].item()} at [n={n}, t={t}], expected values[{n}] ="
            f" {want[n, t].item()}"
        )
    if problems:
        fail("; ".join(problems) + ".")
