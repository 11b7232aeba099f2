"""Checker for notebook 05's Exercise 3: a model's recall accuracy at each distance.

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.

`check_accuracy_by_distance` scores seeded logits with the learner's function and with
`labnn.data.recall.accuracy_by_distance`; when they differ it recomputes the typical
mistakes (a distance off by one, counts instead of fractions, zeros instead of NaN where
no position lies at a distance, unlabelled positions counted, ...) to say which one
was made.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import IGNORE, accuracy_by_distance, make_recall
from labnn.exercises.grading import (call, close, exercise, expect_any_device, expect_close,
                                     expect_like, expect_own_code, expect_tensor,
                                     expect_unchanged, fail, first_line, snapshot)
from labnn.exercises.grading.relations import distinct_digits
from labnn.exercises.grading.slips import float64_round
from labnn.exercises.three_memories import fresh_calls, other_sizes
from labnn.exercises.three_memories import recall_score_rounds as rounds
from labnn.exercises.three_memories import recall_score_inputs as inputs
from labnn.exercises.three_memories.recall_score_slips import (
    DTYPE_HINT, by_distance, cumulative_slips, denominator_slips, expect_indices_not_values,
    expect_last_scored, expect_length, expect_own_position, far_crash, far_slips,
    gives_where_defined, mask_slips, one_late, rows_slips, shifted_slips)


def _accuracy_inputs() -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(7)
    n, t, v = 6, 8, 5
    filler = torch.randint(3, v, (n, t), generator=g)
    values = torch.randint(0, 3, (n,), generator=g)
    positions = torch.tensor([0, 1, 3, 0, 2, 5])
    _, y = make_recall(filler, values, positions)
    logits = torch.randn(n, t, v, generator=g)
    right = torch.rand(n, t, generator=g) < 0.6  # about 60% right, the rest wrong
    target = torch.where(right, y.clamp(min=0), (y.clamp(min=0) + 1) % 3)
    logits.scatter_(2, target[..., None], 10.0)
    return logits, y, t + 2  # distances T - 1 .. T + 2 occur nowhere: NaN there


@exercise("accuracy by distance",
          refuse={accuracy_by_distance: "labnn.data.recall.accuracy_by_distance"})
def check_accuracy_by_distance(fn: Callable) -> None:
    """`fn(logits, y, max_distance)` -> `[max_distance]`, entry `d - 1` the accuracy at
    distance `d` (NaN if none)."""
    fresh_calls.other_exercise(fn, "accuracy_by_distance")
    logits, y, max_d = _accuracy_inputs()
    expect_own_code(
        fn,
        "accuracy_by_distance(logits, y, max_distance)",
        accuracy_by_distance=accuracy_by_distance,
    )
    before = snapshot(logits=logits, y=y)
    what = "accuracy_by_distance(logits, y, max_distance)"
    over_time, floored = _argmax_over_time(fn), rounds.integer_division(fn, logits, y, max_d)
    kept = rounds.kept_axis(*y.shape)
    got = expect_tensor(call(fn, what, logits, y, max_d,
                             diagnose=lambda err: (floored(err), over_time(err), kept(err))), what)
    inputs.expect_labels_kept(before, what, y)  # int labels: no autograd, no .clamp_
    expect_unchanged(before, what, logits=logits, y=y)
    want = accuracy_by_distance(logits, y, max_d)
    expect_length(got, max_d, y.size(1), what)
    expect_like(got, want, what, DTYPE_HINT)
    got = got.double()
    empty = torch.isnan(want)
    stand_in = empty & ((got == 0) | (got < 0) | (got > 1))  # no accuracy: 0 or a sentinel
    if stand_in.any():
        d = int(stand_in.nonzero()[0]) + 1
        fail(f"{what} gives {got[d - 1].item():g} at d={d}, where no position lies that far "
             f"from its value: an accuracy of {got[d - 1].item():g} there would read as "
             + ("'always wrong'" if got[d - 1] == 0 else "a result") + ". Return NaN for "
             "distances that occur nowhere (0 / 0).")
    labelled = y != IGNORE
    n, t = y.shape
    hits = (logits.argmax(-1) == y) & labelled
    dist = labelled.long().cumsum(1) * labelled
    counts, at_d = (torch.zeros(max_d + 1, dtype=torch.double).index_add_(
        0, dist.flatten(), h.flatten().double())[1:] for h in (hits, labelled))
    # the distance from the start of the sequence: the position t itself, or t + 1
    by_t, by_t1 = (by_distance(hits.double(), labelled, torch.arange(t).expand(n, t) + c,
                               max_d) for c in (0, 1))
    from_end = [(t - torch.arange(t)).expand(n, t), (t - 1 - torch.arange(t)).expand(n, t)]
    by_end = [by_distance(hits.double(), labelled & (e >= 1), e, max_d) for e in from_end]
    fin = ~empty

    def same(wrong: torch.Tensor) -> bool:
        ok = ~torch.isnan(wrong) & fin
        return bool(ok.any()) and close(got[ok], wrong[ok].double(), atol=1e-6)

    mistakes = [
        (1 - want.double(), "that is the error rate (1 - accuracy): count the positions "
                            "where argmax == y."),
        (counts, "those are counts of correct positions per distance: divide by how many"
                 " positions have that distance."),
        (torch.cat([want[1:], want[-1:]]).double(), lambda: one_late(fn, logits, y, max_d)),
        (torch.cat([want[:1], want[:-1]]).double(), "off by one: entry d - 1 is distance d, "
         "the position right after the value being distance 1 (not 0)."),
        (hits.sum() / at_d, "each entry counts the hits at every distance (hits.sum()), not "
         "only at d: count hits[at].sum(), the hits where d == k, over at.sum()."),
        (1 / want.double(), "your accuracies are upside down (positions / hits): divide the "
                            "hits at distance d by the positions there."),
        (by_distance((logits.argmin(-1) == y).double(), labelled, dist, max_d),
         "your prediction is the class with the LOWEST logit (an argmin, or the argmax of "
         "-logits): the model predicts the class it scores highest, logits.argmax(-1)."),
        (by_t1, FROM_START.format("d = t + 1, the position counted from 1")),
        *[(wrong, "the distance is measured from the end of the sequence: measure it "
                  "from the value, t - p, where p is the value's position (the first "
                  "labelled position is at distance 1).") for wrong in by_end],
        (torch.cat([torch.zeros(1), want[:-1]]).double(),
         "entry 0 holds distance 0, the unlabelled positions (the cumsum is 0 there): "
         "distances start at 1, and entry d - 1 is distance d."),
        # after the zeros: entry 0 left NaN, not 0
        (torch.cat([torch.full((1,), float("nan")), want[:-1]]).double(),
         "your result is one entry late (entry 0 is left NaN): either d is one too high "
         "(d = t - p + 1?) or distance d is stored at entry d. Use d = t - p (distance 1 "
         "is right after the value) and store distance d at entry d - 1."),
        (counts / n, f"you divided by the number of rows N = {n}: divide the hits at "
                     "each distance by the number of positions at that distance."),
        (want.double().floor(), rounds.FLOOR),
        (accuracy_by_distance(logits[:1], y[:1], max_d).double(),
         f"only row 0 of the batch is scored (logits[0], y[0]): rows 1..{n - 1} are "
         "left out; score every row, the hits at each distance over all N rows."),
        (torch.full_like(want, (hits.sum() / labelled.sum()).item()).double(),
         "that is the overall accuracy repeated: score each distance separately."),
        (by_distance(logits.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0],
                     labelled, dist, max_d),
         "you averaged the softmax probability of the answer: a position is right (1) "
         "when logits.argmax(-1) == y, else 0."),
        *shifted_slips(logits, y, max_d, fn),
        *rows_slips(logits, y, max_d),
        *denominator_slips(logits, y, max_d),
        *mask_slips(logits, y, max_d),
        *cumulative_slips(logits, y, max_d),
        *rounds.averaging_slips(logits, y, max_d),
    ]
    if same(by_t) and not same(want.double()):
        _start_or_shared_p(fn, logits, y, max_d)
    for wrong, message in mistakes:
        if same(wrong) and not same(want.double()):
            fail(message() if callable(message) else message)
    if not same(want.double()):
        expect_indices_not_values(fn, logits, y, max_d)
        expect_own_position(fn, logits, y, max_d)
    if torch.isnan(got[fin]).any():
        d = int((torch.isnan(got) & fin).nonzero()[0]) + 1
        k = int((dist == d).sum())
        fail(f"{what} is NaN at d={d}, though {k} labelled positions lie at that distance "
             "from their value (d = t - p, p the value's position; p + 1 is at d=1): all "
             "must count there. Check how you compute each distance (from its own row's "
             "p) and which positions you count (the labelled ones, y != IGNORE).")
    inputs.expect_exact(got, logits, y, max_d, what, named_only=True)  # an eps
    if not same(want.double()):  # a count with unlabelled positions: |t - p|, say
        rounds.unlabelled_counted(fn, logits, y, max_d)
    expect_close(
        got[fin], want[fin].double(), what + " (distances that occur)", atol=1e-6
    )
    inputs.expect_exact(got, logits, y, max_d, what)
    later = fresh_calls.accuracy_anew(fn, logits, y, max_d, got)  # kept between calls
    _expect_unlabelled_rows_ignored(fn, logits, y, max_d)
    short = 3  # distances up to T - 1 = 7 occur: entries for 4..7 must be left out
    what = f"accuracy_by_distance(logits, y, max_distance={short})"
    got = expect_tensor(call(fn, what, logits, y, short,
                             diagnose=far_crash(fn, logits, y, short)), what)
    if got.dim() == 1 and got.numel() == max_d != short:
        fail(f"{what}: with max_distance = {short} you return {max_d} entries, as with "
             f"max_distance = {max_d} before: use max_distance, not a number.")
    if got.dim() == 1 and got.numel() > short:
        fail(
            f"accuracy_by_distance(logits, y, max_distance={short}) returns"
            f" {got.numel()} entries, though distances up to {y.size(1) - 1} occur: the"
            " result has exactly max_distance entries, and positions farther away are"
            " left out. (torch.bincount's minlength is a minimum: it grows past it;"
            " slice the result [:max_distance] or drop those positions first.)"
        )
    want = accuracy_by_distance(logits, y, short)
    expect_length(got, short, y.size(1), what)
    expect_like(got, want, what, DTYPE_HINT)
    expect_last_scored(got, want, what)
    for wrong, message in far_slips(logits, y, short):
        if not close(got.double(), want.double(), atol=1e-6) and close(got.double(), wrong,
                                                                        atol=1e-6):
            fail(f"{what}: {message}")
    expect_close(got.double(), want.double(), what, atol=1e-6)
    float64_round(fn, what, (logits.double(), y, short),
                  accuracy_by_distance(logits.double(), y, short),
                  "Build it with dtype=logits.dtype, device=logits.device, or "
                  "logits.new_zeros(n) (torch.zeros(n) alone gives float32, on the CPU).",
                  precise=False)
    what = "accuracy_by_distance(logits, y, max_distance) with float64 logits"
    got = expect_tensor(call(fn, what, logits.double(), y, max_d), what)
    inputs.expect_exact(got, logits.double(), y, max_d, what)
    other_sizes.rounded_argmax(fn)
    other_sizes.untrained_scores(fn)
    other_sizes.near_ties(fn)
    other_sizes.many_positions(fn)
    rounds.max_distance_one(fn, logits, y)
    rounds.ties(fn)
    rounds.whole_vocabulary(fn)
    rounds.wide_vocabulary(fn)
    rounds.confident(fn)  # logits of 20 and 25: a sigmoid's argmax ties them
    inputs.one_row(fn)
    inputs.many_distances(fn)
    inputs.far_distances(fn)
    other_sizes.many_positions(fn, torch.float16)
    inputs.exact_counts(fn)  # thousands of positions in float32, bfloat16, float16
    for m in (max_d, short):  # a model's logits: on a GPU; empty distances, far ones
        expect_any_device(fn, f"accuracy_by_distance(logits, y, {m})", logits, y, m)
    for fails in later:  # a difference the fresh calls found, no round named
        fails()


FROM_START = ("your distance is measured from the start of the sequence ({}): measure "
              "it from the value's position p instead, d = t - p (p + 1, the first "
              "labelled position, is at distance 1).")


def _start_or_shared_p(fn: Callable, logits: torch.Tensor, y: torch.Tensor,
                       max_d: int) -> None:
    """Distances from the start (d = t) and one p shared by the batch (row 0's, or the
    first labelled column's) agree where that p is 0: rerun on the rows whose value is not
    at 0, the largest p first, and name the slip the answer makes there, if either."""
    p = (y != IGNORE).int().argmax(1) - 1
    rows = p.argsort(descending=True)[: int((p > 0).sum())]
    logits, y, p = logits[rows], y[rows], p[rows]
    labelled = y != IGNORE
    hits = ((logits.argmax(-1) == y) & labelled).double()
    ts = torch.arange(y.size(1)).expand_as(y)
    for q in sorted(set(p.tolist()), key=lambda q: (q != p[0], q != p.min())):
        if gives_where_defined(fn, (logits, y, max_d), by_distance(hits, labelled, ts - q,
                                                                   max_d)):
            whose = ("is taken from row 0 for every row" if q == p[0] else "is taken from the "
                     "batch's first labelled column" if q == p.min() else "is one p for all rows")
            fail(f"each row has its own value position p: yours {whose}, one p for the "
                 "whole batch. Compute p per row, e.g. p = (y != IGNORE).int().argmax(1) - 1, "
                 "and the distance t - p[:, None].")
    if gives_where_defined(fn, (logits, y, max_d), by_distance(hits, labelled, ts, max_d)):
        fail(FROM_START.format("d = t, the position itself"))


def _argmax_over_time(fn: Callable) -> Callable[[Exception], None]:
    """The diagnosis of an error: retried with N = T = V, where `logits.argmax(1) == y`
    and `logits.argmax(0) == y` run, does the answer take the argmax over time (dim 1) or
    over the batch (dim 0)?"""

    def diagnose(err: Exception) -> None:
        if not isinstance(err, RuntimeError):
            return
        logits, y, max_d = _accuracy_inputs()
        n = y.size(0)  # the first n positions (a row may keep no label: it counts nowhere)
        logits, y = logits[:, :n], y[:, :n]
        logits = torch.cat([logits, torch.zeros(n, n, n - logits.size(2))], dim=2)
        labelled = y != IGNORE
        dist = labelled.long().cumsum(1) * labelled
        try:
            got = fn(logits, y, max_d)
        except Exception:
            return
        for dim, axis, shape in ((1, "time", "[N, V]"), (0, "the batch", "[T, V]")):
            wrong = by_distance((logits.argmax(dim) == y).double(), labelled, dist, max_d)
            if isinstance(got, torch.Tensor) and got.shape == wrong.shape and torch.allclose(
                    got.double(), wrong, equal_nan=True):
                fail(f"accuracy_by_distance(logits, y, max_distance) takes the argmax over "
                     f"{axis} (dim {dim} of logits [N, T, V]): that gives {shape}, which "
                     "cannot be compared with y [N, T] (it raised: the shapes differ). The "
                     "prediction at each position is the argmax over the vocabulary, the "
                     "last axis: logits.argmax(-1), [N, T].")

    return diagnose


def _expect_unlabelled_rows_ignored(
    fn: Callable, logits: torch.Tensor, y: torch.Tensor, max_d: int
) -> None:
    """The same inputs plus a row with no labels at all (all IGNORE), which changes no
    accuracy: a denominator that counts unlabelled positions shows only there, and so do
    hits counted where IGNORE was made a label (`torch.where(y != IGNORE, y, 0)`), the
    row's model predicting id 0 everywhere."""
    g = torch.Generator().manual_seed(8)
    row = torch.randn(1, *logits.shape[1:], generator=g)
    row[..., 0] += 20  # id 0 everywhere: what an IGNORE replaced by 0 would match
    logits = torch.cat([logits, row.to(logits.dtype)])
    y = torch.cat([y, torch.full_like(y[:1], IGNORE)])
    what = "accuracy_by_distance(logits, y, max_distance) with a row with no labels"

    def no_first(err: Exception) -> None:
        if isinstance(err, IndexError):
            fail(f"{what}: your function looks up each row's first label, which this row "
                 f"lacks ({first_line(err)}): a row with no label counts nowhere; work on "
                 "all rows at once with y != IGNORE, or skip such a row.")
    got = expect_tensor(call(fn, what, logits, y, max_d, diagnose=no_first), what)
    want = accuracy_by_distance(logits, y, max_d)
    expect_length(got, max_d, y.size(1), what)
    expect_like(got, want, what, DTYPE_HINT)
    got = got.double()
    differs = ~torch.isclose(got, want.double(), atol=1e-6, equal_nan=True)
    if not differs.any():
        return
    d = int(differs.nonzero()[0]) + 1
    yours, expected = distinct_digits(got[d - 1].item(), want[d - 1].item())
    hits = got[d - 1] > want.double()[d - 1]  # more right than there are: IGNORE as 0
    fail(
        f"{what} (its last row, y all IGNORE) changes your result, e.g. at d={d}"
        f" {yours} instead of {expected}: your "
        + ("hits count positions with no label (IGNORE made id 0, which this row's "
           "model predicts?)" if hits else "denominator counts unlabelled positions")
        + ": count only the labelled ones, y != IGNORE, in both."
    )
