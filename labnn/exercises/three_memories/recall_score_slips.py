"""Slips of notebook 05's exercise 3 (accuracy by distance), named for
`labnn.exercises.three_memories.recall_score`: a prediction scored against the label one
position away (the next-token habit), the max values taken for the predicted tokens,
positions beyond `max_distance` counted in the last entry (or the sequence cut there), the
distances counted down the batch (dim 0), and a prediction that reads other positions'
logits (an argmax over time).

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import IGNORE
from labnn.exercises.grading import close, fail, guarded


DTYPE_HINT = ("Count in whatever dtype you like (integer counts are exact; a bfloat16 "
              "count stops growing at 256), then return the accuracies in the logits' "
              "dtype: .to(logits.dtype) at the end.")


def by_distance(hits: torch.Tensor, labelled: torch.Tensor, dist: torch.Tensor,
                max_d: int) -> torch.Tensor:
    """The mean of `hits` over the labelled positions at each distance 1..max_d (NaN
    where there is none)."""
    out = torch.full((max_d,), float("nan"), dtype=torch.double)
    for d in range(1, max_d + 1):
        sel = labelled & (dist == d)
        if sel.any():
            out[d - 1] = hits[sel].double().mean()
    return out


def distances(y: torch.Tensor) -> torch.Tensor:
    """Each labelled position's distance to its value (0 where unlabelled), `[N, T]`."""
    labelled = y != IGNORE
    return labelled.long().cumsum(1) * labelled


def shifted_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int, fn: Callable
                  ) -> list[tuple[torch.Tensor, object]]:
    """The accuracies with a prediction and a label one position apart, with the diagnosis:
    the prediction of t - 1 scored against `y[:, t]`, that of t against `y[:, t + 1]` at
    t's distance (or each row's last position left out: the same on labels equal within a
    row, told apart by a rerun), that of t + 1 against `y[:, t]` at t + 1's distance, or at
    t's distance rolled (`roll(-1, 1)`: the last position reads t = 0) or with the last
    position kept (`cat([logits[:, 1:], logits[:, -1:]], 1)`). (That of t + 1 at t's
    distance gives the accuracy of distance d + 1 at entry d - 1: the check names it with
    that off-by-one.)"""
    pred, labelled, dist = logits.argmax(-1), y != IGNORE, distances(y)
    a, b = slice(None, -1), slice(1, None)
    aligned = ("y is already aligned with logits (y[:, t] is the label of logits[:, t]): "
               "compare logits.argmax(-1) == y without a shift.")
    return [(by_distance((pred[:, a] == y[:, b]).double(), labelled[:, b], dist[:, b], max_d),
             "you scored the previous position's prediction (logits[:, t - 1], the "
             "next-token habit) against y[:, t]: " + aligned),
            (by_distance((pred[:, a] == y[:, b]).double(), labelled[:, a], dist[:, a], max_d),
             lambda: _next_label(fn, logits, y, max_d, aligned)),
            (by_distance((pred[:, b] == y[:, a]).double(), labelled[:, b], dist[:, b], max_d),
             "you scored logits[:, t] against the label before it, y[:, t - 1] "
             "(logits[:, 1:] with y[:, :-1]), IGNORE before the first labelled position, "
             "which is never right: " + aligned),
            *((by_distance((torch.cat([pred[:, b], last], 1) == y).double(), labelled, dist,
                           max_d),
               f"you scored the next position's prediction ({how}) against y[:, t]: " + aligned)
              for last, how in ((pred[:, :1], "argmax(-1).roll(-1, 1): logits[:, t + 1], the "
                                 "last position wrapped to t = 0"),
                                (pred[:, -1:], "logits[:, t + 1], the last position "
                                 "scored by its own prediction")))]


def _changing(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits right everywhere for labels that change at every step (t % 3), where `y` is
    labelled: a shifted comparison scores none of them."""
    y2 = torch.where(y != IGNORE, torch.arange(y.size(1)).expand_as(y) % 3, IGNORE)
    return torch.zeros_like(logits).scatter(-1, y2.clamp(min=0)[..., None], 10.0), y2


def _next_label(fn: Callable, logits: torch.Tensor, y: torch.Tensor, max_d: int,
                aligned: str) -> str:
    """Rerun on labels that change at every step and logits right everywhere: comparing
    logits[:, t] with y[:, t + 1] scores none, leaving the last position out all."""
    labelled, (logits2, y2) = y != IGNORE, _changing(logits, y)
    none = by_distance(torch.zeros_like(y2[:, :-1]).double(), labelled[:, :-1],
                       distances(y)[:, :-1], max_d)
    if gives_where_defined(fn, (logits2, y2, max_d), none):
        return ("you scored logits[:, t] against the next label, y[:, t + 1] (logits[:, :-1] "
                "with y[:, 1:], the next-token habit): " + aligned)
    return ("each row's last position is left out (logits[:, :-1] or y[:, :-1], the "
            "next-token habit?): score every position, logits.argmax(-1) == y, [N, T].")


def mask_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
               ) -> list[tuple[torch.Tensor, str]]:
    """The accuracies with the labelled positions found another way than `y != IGNORE`:
    `y > 0` (value 0 dropped) and `y != -1` (every position labelled), with the
    diagnosis."""
    hit = logits.argmax(-1) == y
    out = []
    for labelled, message in (
            (y > 0, "y > 0 drops the value 0 (a value id like any other): its rows lose "
                    f"their labels. Labelled means y != IGNORE ({IGNORE})."),
            (y != -1, f"IGNORE is {IGNORE} (labnn's IGNORE, the notebook's constant), not "
                      "-1: y != -1 counts every position as labelled. Use y != IGNORE.")):
        dist = labelled.long().cumsum(1) * labelled
        out.append((by_distance((hit & labelled).double(), labelled, dist, max_d), message))
    return out


def one_late(fn: Callable, logits: torch.Tensor, y: torch.Tensor, max_d: int) -> str:
    """Which slip gives entry d - 1 the accuracy of distance d + 1: rerun with labels that
    change at every step (t % 3) and logits right everywhere; distances one short score
    all right, the next position's prediction (logits[:, t + 1] against y[:, t]) none."""
    labelled, (logits2, y2) = y != IGNORE, _changing(logits, y)
    ref = by_distance(labelled.double(), labelled, distances(y), max_d + 1)[1:]
    nxt = ("you scored the next position's prediction, logits[:, t + 1], against y[:, t]: "
           "y is already aligned with logits; compare logits.argmax(-1) == y unshifted.")
    short = ("off by one, entry d - 1 holds distance d + 1: your distances are one short. "
             "The first labelled position (p + 1) is at distance 1: d = t - p, p the "
             "value's position (or the cumsum of y != IGNORE).")
    if gives_where_defined(fn, (logits2, y2, max_d), ref):
        return short
    if gives_where_defined(fn, (logits2, y2, max_d), ref * 0):
        return nxt
    return (short[:-1] + ". (Or you scored the next position's prediction, logits[:, t "
            "+ 1], against y[:, t], which gives the same.)")


def expect_indices_not_values(fn: Callable, logits: torch.Tensor, y: torch.Tensor,
                              max_d: int) -> None:
    """Rerun on logits whose largest entry at each position is a class id (0 to 2) other
    than its index: an answer that gives the accuracy of `logits.max(-1)[0] == y` there
    takes the max values for the predicted tokens."""
    g = torch.Generator().manual_seed(9)
    top = logits.argmax(-1, keepdim=True)
    shown = torch.randint(0, 3, top.shape, generator=g).to(logits.dtype)
    rerun = (logits - 20).scatter(-1, top, shown)  # argmax unchanged, max value 0..2
    labelled = y != IGNORE
    wrong = by_distance((shown[..., 0] == y).double(), labelled, distances(y), max_d)
    if gives_where_defined(fn, (rerun, y, max_d), wrong):
        fail("you compared y with the max values of the logits (logits.max(-1)[0], "
             ".values): the predicted token is the index of the max, logits.max(-1)[1] "
             "(.indices) or logits.argmax(-1).")


def gives_where_defined(fn: Callable, args: tuple, wrong: torch.Tensor) -> bool:
    """Whether the learner's `fn(*args)` runs and gives `wrong` at every distance where
    `wrong` has a value (not NaN): a rerun that names a slip."""
    try:
        with guarded("accuracy_by_distance(logits, y, max_distance)"):
            got = fn(*args)
    except Exception:
        return False
    ok = ~torch.isnan(wrong)
    return (isinstance(got, torch.Tensor) and got.shape == wrong.shape
            and close(got.double()[ok], wrong[ok], atol=1e-6))


def far_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
              ) -> list[tuple[torch.Tensor, str]]:
    """The accuracies with the positions beyond `max_d` counted at `max_d` (a clamped
    distance), or with the sequence cut at `max_d` (+ 1) positions, with the diagnosis."""
    hits, labelled, d = (logits.argmax(-1) == y).double(), y != IGNORE, distances(y)
    clamped = by_distance(hits, labelled, d.clamp(max=max_d), max_d)
    cut = "only positions t <= max_distance were scored (y[:, :max_distance + 1]?): it bounds"
    return [(clamped, f"positions beyond max_distance = {max_d} were counted in the last "
                      "entry (a clamped distance): leave them out, keep only the distances "
                      "1 <= d <= max_distance.")] + [
        (by_distance(hits[:, :c], labelled[:, :c], d[:, :c], max_d), f"{cut} the distance "
         "t - p, not the position t: a value at p has distance max_distance at p + "
         "max_distance.") for c in (max_d + 1, max_d)]


def far_crash(fn: Callable, logits: torch.Tensor, y: torch.Tensor,
              max_d: int) -> Callable[[Exception], None]:
    """The diagnosis of an index (or `one_hot`) error with positions beyond `max_d` in
    `y`: rerun quietly with those positions unlabelled; right then, it indexed by d - 1
    without leaving the far positions out."""

    def diagnose(err: Exception) -> None:
        text = str(err).lower()
        far = int(distances(y).max())
        if not isinstance(err, (IndexError, RuntimeError)) or far <= max_d or not any(
                w in text for w in ("index", "out of", "scatter", "num_classes")):
            return
        near = torch.where(distances(y) > max_d, IGNORE, y)
        labelled = near != IGNORE
        want = by_distance(((logits.argmax(-1) == near) & labelled).double(), labelled,
                           distances(near), max_d)
        if gives_where_defined(fn, (logits, near, max_d), want):
            fail(f"your function raised {type(err).__name__}: positions farther than "
                 f"max_distance = {max_d} (distances up to {far} here) must be left out before"
                 " you index by d - 1 (or one_hot d): keep only 1 <= d <= max_distance.")

    return diagnose


def rows_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
               ) -> list[tuple[torch.Tensor, str]]:
    """The accuracies with the distances counted down the batch, `cumsum(0)` over the rows
    instead of `cumsum(1)` over time, with the diagnosis."""
    hits, labelled = (logits.argmax(-1) == y).double(), y != IGNORE
    return [(by_distance(hits, labelled, labelled.long().cumsum(0), max_d),
             "your distances count labelled positions down the batch, cumsum(0) over the "
             "rows N of y [N, T]: count them along time in each row, "
             "(y != IGNORE).long().cumsum(1) (dim 1, T).")]


def denominator_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
                      ) -> list[tuple[torch.Tensor, str]]:
    """The hits at each distance divided by all labelled positions (or all those with
    1 <= d <= max_d), by T or by N * T instead of those at that distance, with the
    diagnosis."""
    hits, labelled = (logits.argmax(-1) == y).double(), y != IGNORE
    dist = distances(y)
    counts = torch.stack([(hits * (labelled & (dist == d))).sum()
                          for d in range(1, max_d + 1)])
    message = ("each entry must divide the hits at distance d by the number of positions at "
               "distance d; yours divides by all labelled positions (the wrong denominator).")
    inside = labelled & (dist >= 1) & (dist <= max_d)
    rows, steps = y.shape
    sizes = [(steps, f"T = {steps}, the sequence length"),
             (rows * steps, f"N * T = {rows * steps}, every position of the [N, T] grid "
                            "(at.numel()?)")]
    return [(counts / max(int(n.sum()), 1), message) for n in (labelled, inside)] + [
        (counts / size, f"you divided the hits at each distance by {said}: divide them by "
                        "the number of positions at that distance, at.sum().")
        for size, said in sizes]


def expect_own_position(fn: Callable, logits: torch.Tensor, y: torch.Tensor,
                        max_d: int) -> None:
    """Rerun with new logits at the unlabelled positions only (no accuracy changes): an
    answer that changes reads other positions' logits for a prediction, e.g. an argmax
    over time (dim 1) instead of over the vocabulary."""
    noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(10)) * 20
    rerun = torch.where((y == IGNORE)[..., None], noise.to(logits.dtype), logits)
    try:
        with guarded("accuracy_by_distance(logits, y, max_distance)"):
            a, b = fn(logits.clone(), y.clone(), max_d), fn(rerun, y.clone(), max_d)
    except Exception:
        return
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and not torch.allclose(a.double(), b.double(), atol=1e-6, equal_nan=True):
        fail("your result changes when only the logits at unlabelled positions change: "
             "the prediction at position t must come from logits[:, t] alone, the argmax "
             "over the vocabulary, the last axis: logits.argmax(-1), [N, T] "
             "(argmax(1) runs over time).")


def expect_length(got: torch.Tensor, max_d: int, t: int, what: str) -> None:
    """Name a 1-D result whose length is not `max_distance`, with the axis labelled: one
    entry per distance up to `T - 1` (those that occur), or one short."""
    k = got.numel()
    if got.dim() != 1 or k == max_d:
        return
    why = {max_d - 1: f"; yours has max_distance - 1 = {k}: distance max_distance is "
                      "missing (range(1, max_distance + 1) includes it)",
           t - 1: f"; yours has T - 1 = {k} (the distances that occur in y): keep the "
                  "entries beyond, as NaN"}.get(k, f"; yours has {k}")
    fail(f"{what} has shape [{k}], expected [max_distance = {max_d}] entries, one per "
         f"distance 1..max_distance{why}.")


def expect_last_scored(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Name a result right up to its last entry, left NaN though positions lie at distance
    max_distance: the loop `range(1, max_distance)` stops one short, or a comparison
    `d < max_distance` drops that distance."""
    ok = torch.isnan(want) == torch.isnan(got)
    if got.shape == want.shape and torch.isnan(got[-1]) and not torch.isnan(want[-1]) \
            and bool(ok[:-1].all()) and close(got[:-1][ok[:-1]].double(),
                                              want[:-1][ok[:-1]].double(), atol=1e-6):
        fail(f"{what} leaves the last entry NaN though positions lie at that distance: "
             f"distance max_distance = {want.numel()} is never scored. Count it: keep "
             "d <= max_distance (not d < max_distance), and loop over range(1, "
             "max_distance + 1).")


def cumulative_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
                     ) -> list[tuple[torch.Tensor, str]]:
    """The accuracy at every distance UP TO d (`dist <= d`) in entry d - 1: pooled over
    all positions, or one accuracy per row averaged over the rows (those with a position
    at distance d, or with any up to d); NaN where no position lies at exactly d."""
    labelled = y != IGNORE
    dist = distances(y)
    hits = ((logits.argmax(-1) == y) & labelled).double()
    pooled, rows_at_d, rows_upto = (torch.full((max_d,), float("nan"), dtype=torch.double)
                                    for _ in range(3))
    for d in range(1, max_d + 1):
        if not (labelled & (dist == d)).any():
            continue
        upto = labelled & (dist <= d)
        pooled[d - 1] = hits[upto].mean()
        per_row = (hits * upto).sum(1) / upto.sum(1)
        rows_at_d[d - 1] = per_row[(labelled & (dist == d)).any(1)].mean()
        rows_upto[d - 1] = per_row[upto.any(1)].mean()
    message = ("your entry d pools every distance up to d (a cumulative accuracy): each "
               "entry counts only the positions at exactly distance d (dist == d).")
    return [(wrong, message) for wrong in (pooled, rows_at_d, rows_upto)]


def expect_nan_where_empty(got: torch.Tensor, want: torch.Tensor, y: torch.Tensor,
                           what: str) -> None:
    """Name a NaN at a distance where labelled positions lie (a distance scored only from
    some count on, `if at.sum() > 1:`): NaN is for a count of 0 alone."""
    if got.shape != want.shape:
        return
    bad = torch.isnan(got.detach().cpu()) & ~torch.isnan(want.cpu())
    if bool(bad.any()):
        d = int(bad.nonzero()[0]) + 1
        k = int((distances(y).cpu() == d).sum())
        fail(f"{what} is NaN at d={d}, where {k} labelled position" + ("s lie" if k != 1 else
             " lies") + ": NaN belongs only where no position lies (a count of 0, 0 / 0); "
             "any count, a single position too, gives an accuracy, hits / count. Check what "
             "makes your function skip a distance.")
