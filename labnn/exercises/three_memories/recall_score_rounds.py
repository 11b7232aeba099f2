"""Rounds of notebook 05's Exercise 3 (accuracy by distance) that the checks' first
inputs cannot tell apart, run once an answer passes there: `max_distance = 1` (a
`.squeeze()` drops the result's one axis), tied logits scored for each tied label (a
tie counted as a hit scores both) and a vocabulary larger than the values'
ids, as in the notebook (an argmax over the values' ids only is named), and one of 64
ids (an argmax over `logits[..., :16]`, a vocabulary size written as a number, is named),
a confident model's logits (an argmax of their sigmoid or tanh, which ties them, is named);
logits that predict every label (a count that takes in unlabelled positions scores below 1,
`unlabelled_counted`); and the diagnoses of an integer division that met a count of 0
(`integer_division`) and of a prediction kept `[N, T, 1]` compared with y (`kept_axis`).
`averaging_slips` adds to the first inputs' table a hit within the top k, whole columns
averaged and a mean or median of the accuracies of chunks of rows.

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.data.recall import IGNORE
from labnn.data.recall import accuracy_by_distance as _accuracy
from labnn.data.recall import make_recall
from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor, fail,
                                     first_line, guarded)
from labnn.exercises.grading.sizes import expect_kept_ones
from labnn.exercises.three_memories.recall_score_slips import (
    DTYPE_HINT, by_distance, distances, gives_where_defined)

FLOOR = ("integer division (//, or rounding_mode='floor') floors each accuracy to 0 or 1: "
         "divide as floats, hits.float().sum() / count (or .float().mean()).")


def averaging_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
                    ) -> list[tuple[torch.Tensor, str]]:
    """The accuracies with a hit counted when y is among the top 2 or 3 logits, taken over
    whole columns of `[N, T]` (over all N rows or the column's labelled ones) and read where
    a distance lies, or the mean (or nanmean) of the accuracies of chunks of 2 .. N - 1 rows
    (a mean of means), or their median (over chunks of 1 .. N - 1 rows: of 1, the median of
    the 0/1 hits; `torch.median`, which gives NaN where a chunk has none, is tried over
    chunks only: over rows it leaves too few distances to tell), each with its diagnosis."""
    labelled, dist = y != IGNORE, distances(y)
    slips = [(by_distance((logits.topk(k, -1).indices == y[..., None]).any(-1), labelled, dist,
                          max_d),
              f"a position counts as right when y is among the {k} largest logits "
              f"(topk({k}).indices == y): it is right only when the largest one is y, "
              "logits.argmax(-1) == y.")
             for k in (2, 3)]
    hits = ((logits.argmax(-1) == y) & labelled).double()
    for column in (hits.mean(0), hits.sum(0) / labelled.sum(0)):
        slips.append((torch.stack([column[(dist == d).any(0)].mean() for d in range(
            1, max_d + 1)]), "you took the accuracies of whole columns t of [N, T] (.mean(0)) "
            "where distance d lies: a column mixes rows whose value lies elsewhere (other "
            "distances, or no label); count by position: at = d == k, hits[at].sum() / "
            "at.sum()."))
    pool = "pool them: the hits at d over all N rows / the positions at d over all N rows."
    medians = []
    for size in range(1, y.size(0)):
        parts = torch.stack([_accuracy(*chunk, max_d).double() for chunk in zip(
            logits.split(size), y.split(size))])
        slips += [(mean(parts, 0), f"a mean of the accuracies of chunks of {size} rows (a "
                   "mean of means): a chunk with few positions at distance d weighs as much "
                   "as a full one, and one with none makes a NaN or is left out; " + pool)
                  for mean in (torch.nanmean, torch.mean) if size > 1]
        for median in (torch.nanmedian, torch.median)[: 1 + (size > 1)]:
            wrong = median(parts, 0).values
            told = wrong[~wrong.isnan()]  # a few entries, or one number, tell no median
            medians += [(wrong, f"a median of the accuracies of chunks of {size} rows: the "
                         "accuracy at d is a mean over all its positions; " + pool if size > 1
                         else "a median of the 0/1 hits at d (over its positions, or rows): "
                         "it is 0 or 1; the accuracy is their mean, hits[at].sum() / at.sum().")
                        ] * (told.numel() > 2 and bool((told != told[0]).any()))
    return slips + medians  # a mean first, where a median of two chunks is one


def integer_division(fn: Callable, logits: torch.Tensor, y: torch.Tensor,
                     max_d: int) -> Callable[[Exception], None]:
    """The diagnosis of torch's `RuntimeError: ZeroDivisionError`, an integer tensor
    divided by 0 (a count at a distance no position lies at): rerun with `max_distance`
    the farthest distance that occurs, where no count is 0, to confirm the floored
    accuracies; the integer division is named either way."""

    def diagnose(err: Exception) -> None:
        if not (isinstance(err, RuntimeError) and "ZeroDivisionError" in str(err)):
            return
        far = int(distances(y).max())
        if gives_where_defined(fn, (logits, y, far), _accuracy(logits, y, far).double()
                               .floor()):
            fail(f"your function raised ZeroDivisionError at max_distance = {max_d}, where "
                 f"distances {far + 1}..{max_d} have no position (a count of 0); at "
                 f"max_distance = {far} it runs, and its " + FLOOR)
        fail(f"your function raised torch's ZeroDivisionError: an integer division (// or "
             "torch.div(..., rounding_mode='floor')) by a count of 0, at distances "
             f"{far + 1}..{max_d} where no position lies. Divide as floats: "
             "hits.float().sum() / count gives NaN for 0 / 0, and fractions, not 0 or 1.")

    return diagnose


def kept_axis(n: int, t: int) -> Callable[[Exception], None]:
    """The diagnosis of broadcasting's error where T meets N (y `[n, t]`, n != t) at dim 1:
    a prediction kept `[N, T, 1]` (`keepdim=True`) compared with `[N, T]`, right-aligned."""

    def diagnose(err: Exception) -> None:
        sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b "
                          r"\((\d+)\) at non-singleton dimension 1", str(err))
        if sizes and {int(sizes[1]), int(sizes[2])} == {n, t}:
            fail("your function combines an [N, T, 1] tensor with an [N, T] one (logits"
                 ".argmax(-1, keepdim=True) == y, or y[..., None]?): broadcasting aligns "
                 f"them, [N, T, 1] with [1, N, T], T against N ({first_line(err, 90)}). "
                 "Compare two [N, T] tensors: logits.argmax(-1) == y.")

    return diagnose


def unlabelled_counted(fn: Callable, logits: torch.Tensor, y: torch.Tensor, max_d: int) -> None:
    """Rerun on logits that predict every label (and a filler at the unlabelled positions):
    every distance that occurs scores 1, unless the count there takes in positions with no
    label, where no prediction is right (a distance |t - p|, or one given to the value's
    own position): count / yours is then a whole number larger than the count."""
    labelled, d = y != IGNORE, distances(y)
    target = torch.where(labelled, y, logits.size(-1) - 1)
    perfect = torch.zeros_like(logits).scatter_(-1, target[..., None], 1.0)
    try:
        with guarded("accuracy_by_distance(logits, y, max_distance)"):
            got = fn(perfect, y.clone(), max_d)
    except Exception:
        return
    if not isinstance(got, torch.Tensor) or got.shape != (max_d,):
        return
    count = torch.bincount(d[labelled & (d <= max_d)] - 1, minlength=max_d).double()
    whole = count / got.detach().double().cpu()
    for k in ((count > 0) & (whole > count + 0.5) & ((whole - whole.round()).abs() < 1e-3)
              ).nonzero().flatten().tolist():
        fail(f"with logits that predict every label right, your accuracy at d={k + 1} is "
             f"{got[k].item():.4g}, not 1: you count {round(whole[k].item())} positions "
             f"there, {int(count[k])} of them labelled. The others have no label (before the "
             "value or at it, e.g. a distance |t - p|): count only y != IGNORE.")


def max_distance_one(fn: Callable, logits: torch.Tensor, y: torch.Tensor) -> None:
    """`fn(logits, y, 1)`: a `[1]` result, not a 0-d one (`.squeeze()`)."""
    what = "accuracy_by_distance(logits, y, max_distance=1)"
    want = _accuracy(logits, y, 1)
    got = expect_tensor(call(fn, what, logits, y, 1), what)
    if got.shape != want.shape:
        expect_kept_ones(what, got, want, "max_distance")
    expect_like(got, want, what, DTYPE_HINT)
    expect_close(got.double(), want.double(), what, atol=1e-6)


def _tie_logits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Logits `[8, 10, 6]` whose largest value, 2, is held by two values a and b in each
    row, at every position; the labels `y` of the values a and `y2` of the values b."""
    g = torch.Generator().manual_seed(61)
    n, t, v = 8, 10, 6
    a, b = torch.tensor([0, 2, 1, 0, 2, 1, 0, 1]), torch.tensor([1, 0, 2, 2, 1, 0, 2, 2])
    filler, positions = (torch.randint(3, v, (n, t), generator=g),
                         torch.tensor([0, 3, 1, 5, 2, 0, 4, 1]))
    logits = (0.1 * torch.rand(n, t, v, generator=g)).scatter(  # below 2: no other tie
        -1, torch.stack([a, b], 1)[:, None].expand(n, t, 2), 2.0)
    return (logits, make_recall(filler, a, positions)[1], make_recall(filler, b, positions)[1],
            5)


def ties(fn: Callable) -> None:
    """`fn` on `_tie_logits`, with `y` and with `y2`: one class is predicted at a tie,
    so the two accuracies add up to 1 at each distance. Two hits (a tie counted as a
    hit) or two misses are named; which tied class wins is left free (argmax takes the
    first, topk either)."""
    logits, y, y2, max_d = _tie_logits()
    what = (f"accuracy_by_distance(logits, y, {max_d}) on logits where two classes tie for "
            "the largest, scored with y labelled by the one, then by the other")
    want = _accuracy(logits, y, max_d)
    got = [expect_like(expect_tensor(call(fn, what, logits, labels, max_d), what), want,
                       what, DTYPE_HINT).double() for labels in (y, y2)]
    both = got[0] + got[1]
    defined = ~torch.isnan(want)
    if close(both[defined], torch.ones_like(both[defined]), atol=1e-6):
        return
    if bool((both[defined] > 1 + 1e-6).any()):
        fail(f"{what}: yours scores both right, a tie counted as a hit (the label's logit "
             "equal to the max). A prediction is one class, logits.argmax(-1), the first "
             "id of a tie: compare it with y.")
    if not torch.isnan(both[defined]).any():
        fail(f"{what}: yours scores a tie as a miss for both labels, though the prediction "
             "is one of the tied classes: logits.argmax(-1) picks one (the first): compare "
             "it with y.")
    expect_close(got[0], want.double(), what, atol=1e-6)


def values_only_slips(logits: torch.Tensor, y: torch.Tensor, max_d: int
                      ) -> list[tuple[torch.Tensor, str]]:
    """The accuracies of an argmax over the first `k` ids only (`logits[..., :k]`), for
    every `k` from the largest label + 1 to `V - 1`, with the diagnosis."""
    v, labelled, d = logits.size(-1), y != IGNORE, distances(y)
    return [(by_distance((logits[..., :k].argmax(-1) == y).double(), labelled, d, max_d),
             f"your argmax runs over logits[..., :{k}] only: where an id from {k} to "
             f"{v - 1} (a filler) has the largest logit, the model predicts that id, a "
             "miss. Take the argmax over the whole vocabulary, logits.argmax(-1) (all V = "
             f"{v} ids).") for k in range(int(y.max()) + 1, v)]


def _vocabulary_logits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """Logits `[8, 12, 16]`, the notebook's vocabulary: values 0..7, fillers 8..15. The
    label beats the other values at every labelled position, and a filler beats it at
    every third one."""
    g = torch.Generator().manual_seed(63)
    n, t, v = 8, 12, 16
    _, y = make_recall(torch.randint(8, v, (n, t), generator=g),
                       torch.tensor([7, 0, 3, 5, 7, 1, 6, 2]),
                       torch.tensor([0, 4, 1, 2, 6, 0, 3, 5]))
    label = y.clamp(min=0)
    k = torch.arange(t) + torch.arange(n)[:, None]
    logits = torch.randn(n, t, v, generator=g)
    logits.scatter_(-1, label[..., None], 5.0)
    filler = 8 + (k % 8)
    return torch.where((k % 3 == 0)[..., None], logits.scatter(-1, filler[..., None], 7.0),
                       logits), y, 8


def whole_vocabulary(fn: Callable) -> None:
    """`fn` on `_vocabulary_logits` equals the reference: an argmax over the values' ids
    only is named."""
    logits, y, max_d = _vocabulary_logits()
    what = (f"accuracy_by_distance(logits, y, {max_d}) with V = 16 (values 0..7, fillers "
            "8..15, as in the notebook)")
    want = _accuracy(logits, y, max_d)
    got = expect_like(expect_tensor(call(fn, what, logits, y, max_d), what), want, what,
                      DTYPE_HINT)
    if not close(got.double(), want.double(), atol=1e-6):
        for wrong, message in values_only_slips(logits, y, max_d):
            if close(got.double(), wrong, atol=1e-6):
                fail(f"{what}: {message}")
    expect_close(got.double(), want.double(), what, atol=1e-6)


def _wide_logits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """Logits `[64, 12, 64]`, one row per label 0..63 (an argmax over `logits[..., :k]`
    gives its own accuracies for each k): the label has the largest logit at two positions
    of three, a random other id at the third."""
    g = torch.Generator().manual_seed(67)
    n, t, v = 64, 12, 64
    _, y = make_recall(torch.randint(0, v, (n, t), generator=g), torch.randperm(v, generator=g),
                       torch.randint(0, t - 1, (n,), generator=g))
    k = torch.arange(t) + torch.arange(n)[:, None]
    logits = torch.randn(n, t, v, generator=g).scatter(-1, y.clamp(min=0)[..., None], 5.0)
    other = torch.randint(0, v, (n, t, 1), generator=g)
    return torch.where((k % 3 == 0)[..., None], logits.scatter(-1, other, 7.0), logits), y, 8


def wide_vocabulary(fn: Callable) -> None:
    """`fn` on `_wide_logits` (V = 64, labels past 16) equals the reference: an argmax over
    the first `k` ids only (`logits[..., :16]`, the notebook's V written as a number) is
    named."""
    logits, y, max_d = _wide_logits()
    what = f"accuracy_by_distance(logits, y, {max_d}) with V = 64 (labels 0..63)"
    want = _accuracy(logits, y, max_d)
    got = expect_like(expect_tensor(call(fn, what, logits, y, max_d), what), want, what,
                      DTYPE_HINT).double()
    labelled, d = y != IGNORE, distances(y)
    for k in range(1, logits.size(-1)):
        if not close(got, want.double(), atol=1e-6) and close(got, by_distance(
                (logits[..., :k].argmax(-1) == y).double(), labelled, d, max_d), atol=1e-6):
            fail(f"{what}: yours takes the argmax over logits[..., :{k}] only, a vocabulary "
                 "size written as a number: take the argmax over the whole last axis, "
                 "logits.argmax(-1) (V = logits.size(-1)).")
    expect_close(got, want.double(), what, atol=1e-6)


def _confident_logits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """A trained model's confident logits `[8, 10, 8]` (float32): at each position two ids
    stand out, at 25 and 20 (the label the larger one at two positions of three), the rest
    near 0; squashed by a sigmoid (or tanh), both become 1.0."""
    g = torch.Generator().manual_seed(65)
    n, t, v = 8, 10, 8
    _, y = make_recall(torch.randint(0, v, (n, t), generator=g), torch.randperm(v, generator=g),
                       torch.randint(0, t - 1, (n,), generator=g))
    label = y.clamp(min=0)[..., None]
    other = (label + torch.randint(1, v, (n, t, 1), generator=g)) % v
    wins = (torch.arange(t) + torch.arange(n)[:, None])[..., None] % 3 != 0
    logits = torch.randn(n, t, v, generator=g)
    logits = logits.scatter(-1, label, torch.where(wins, 25.0, 20.0))
    return logits.scatter(-1, other, torch.where(wins, 20.0, 25.0)), y, 8


def confident(fn: Callable) -> None:
    """`fn` on `_confident_logits` equals the reference: an argmax of the logits squashed
    by a sigmoid or tanh (in float32 every logit past ~17, or ~9, is 1.0: a tie) is named."""
    logits, y, max_d = _confident_logits()
    what = f"accuracy_by_distance(logits, y, {max_d}) with a confident model's logits (20, 25)"
    want = _accuracy(logits, y, max_d)
    got = expect_like(expect_tensor(call(fn, what, logits, y, max_d), what), want, what,
                      DTYPE_HINT).double()
    squashed = logits.sigmoid().argmax(-1) == y  # tanh ties the same pairs
    if not close(got, want.double(), atol=1e-6) and close(got, by_distance(
            squashed.double(), y != IGNORE, distances(y), max_d), atol=1e-6):
        fail(f"{what}: your argmax is of squashed logits (logits.sigmoid() or .tanh()): in "
             "float32 they round every large logit to 1.0, so a confident model's best "
             "classes tie and the first id wins. Take logits.argmax(-1) (softmax keeps the "
             "order too).")
    expect_close(got, want.double(), what, atol=1e-6)
