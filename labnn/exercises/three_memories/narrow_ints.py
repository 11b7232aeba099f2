"""Notebook 05's answers that keep positions, distances or counts in a narrow dtype: right on
the checks' short sequences and few positions, wrong past 127 (int8), 255 (uint8) or 256
(bfloat16), where such a number wraps around or rounds. Each is found by recomputing the
reference's result with the number passed through that dtype, and named only where that
recomputation is what the answer gave: `long_recall` runs `make_recall` on a sequence of
300 tokens; `wrapped_distances` and `wrapped_counts` name Exercise 3's distances, or its
hits and counts, kept in int8 or uint8. Past 2,048 (float16) or 32,767 (int16) no check's
sequence reaches: `kept_exact`, a dtype rule, reruns an answer recording its torch calls
and names numbers above 1 held in float16, int16 or uint16, whatever the sizes tried.

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import IGNORE
from labnn.data.recall import make_recall as _reference
from labnn.exercises.grading import call, fail
from labnn.exercises.grading.sizes import EXACT_UP_TO, kept_in

WRAPS = ((torch.uint8, "uint8", 255), (torch.int8, "int8", 127))
NARROW = "uint8 or int8 (they wrap around past 255 and 127)"
TIME = WRAPS + ((torch.bfloat16, "bfloat16", 256),)
EXACT = (torch.float16, torch.int16, torch.uint16)  # exact up to 2,048, 32,767, 65,535
TIME_FIX = ("Keep positions torch.long: torch.arange(T, device=filler.device) > "
            "positions[:, None].")


def _through(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` (integers) passed through `dtype` and back to int64: wrapped or rounded."""
    return x.to(dtype).long()


def long_recall(fn: Callable) -> None:
    """`fn(filler, values, positions)` with filler `[2, 300]` and a value at 259: labels
    compared with a time axis or positions in int8, uint8 or bfloat16 (`torch.arange(T,
    dtype=torch.uint8)`) are named."""
    filler = torch.randint(4, 8, (2, 300), generator=torch.Generator().manual_seed(65))
    values, positions = torch.tensor([1, 2]), torch.tensor([259, 3])
    what = "make_recall(filler, values, positions) with filler [2, 300], positions [259, 3]"
    out = call(fn, what, filler.clone(), values.clone(), positions.clone())
    x, y = _reference(filler, values, positions)
    if not isinstance(out, (tuple, list)) or len(out) != 2 or not all(
            isinstance(o, torch.Tensor) and o.shape == x.shape for o in out):
        return  # the rounds before name a wrong type or shape
    if torch.equal(out[1].long(), y):  # right up to 300: positions in float16 or int16?
        kept_exact(lambda: fn(filler.clone(), values.clone(), positions.clone()),
                   "make_recall(filler, values, positions)", TIME_FIX)
        return
    t = torch.arange(300)
    for dtype, name, top in TIME:
        after = _through(t, dtype) > _through(positions, dtype)[:, None]
        if torch.equal(out[1].long(), torch.where(after, values[:, None], IGNORE)):
            how = "rounds" if dtype.is_floating_point else "wraps around"
            fail(f"{what}: y is wrong past t = {top}: your time axis (or positions) went "
                 f"through {name}, which {how} past {top}. " + TIME_FIX)


def kept_exact(rerun: Callable[[], object], what: str, fix: str) -> None:
    """The dtype rule: rerun the learner's call (`rerun`) recording its torch calls, and
    fail when a result in float16, int16 or uint16 holds a number above 1 (positions,
    distances or counts: a mask holds none). Right at every size a check tries, such a
    number stops being exact past 2,048, 32,767 or 65,535."""
    seen = kept_in(rerun, EXACT)
    if seen is not None:
        name = str(seen)[6:]
        how = "rounds" if seen.is_floating_point else "wraps around"
        fail(f"{what} is right at every size tried, but keeps numbers in {name} "
             f"(dtype=torch.{name}, .to(torch.{name})), exact only up to "
             f"{EXACT_UP_TO[seen]:,}: a position, distance or count past that {how}. " + fix)


def _counts(logits: torch.Tensor, y: torch.Tensor, max_d: int, dist: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The hits and the labelled positions at each distance 1..max_d (int64), with each
    position's distance `dist` (`[N, T]`, values outside 1..max_d left out)."""
    keep = (y != IGNORE) & (dist >= 1) & (dist <= max_d)
    hits = (logits.argmax(-1) == y) & keep
    count = torch.zeros(max_d + 1, dtype=torch.long).index_add_(0, dist[keep], keep[keep].long())
    right = torch.zeros(max_d + 1, dtype=torch.long).index_add_(0, dist[keep], hits[keep].long())
    return right[1:], count[1:]


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether `got` is `want` (float64) to the logits' rounding, NaN equal to NaN."""
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(
        got.detach().cpu().double(), want, rtol=1e-2, atol=1e-3, equal_nan=True)


def wrapped_distances(got, logits: torch.Tensor, y: torch.Tensor, max_d: int,
                      what: str) -> None:
    """Fail, naming it, when `got` is the accuracy with each distance kept in uint8 or
    int8 (`d.to(torch.uint8)`): past 255 (127) it wraps to small (or negative) numbers."""
    labelled = y != IGNORE
    dist = labelled.long().cumsum(1) * labelled
    # uint8 and int8 give the same accuracies at d <= 127, however the answer scores
    right, count = _counts(logits, y, max_d, _through(dist, torch.uint8))
    near = slice(0, min(127, max_d))
    if isinstance(got, torch.Tensor) and got.shape == count.shape and _same(
            got[near], right[near].double() / count[near].double()):
        fail(f"{what} is wrong at small distances: your distances were kept in {NARROW}, "
             "so a far position (256 becomes 0, 257 becomes 1) is scored as a near one. "
             "Count them in int64: labelled.long().cumsum(1).")


def wrapped_counts(got, logits: torch.Tensor, y: torch.Tensor, max_d: int,
                   what: str) -> None:
    """Fail, naming it, when `got` is the accuracy with the hits, or the hits and the
    counts, added up in uint8 or int8 (`torch.zeros(n, dtype=torch.uint8)`): a count
    past 255 (127) wraps around."""
    labelled = y != IGNORE
    right, count = _counts(logits, y, max_d, labelled.long().cumsum(1) * labelled)
    for dtype, _, _ in WRAPS:  # at these counts (up to 3,000) the two may agree: name both
        for below in (_through(count, dtype).double(), count.double()):
            if _same(got, _through(right, dtype).double() / below):
                fail(f"{what}: your counts were kept in {NARROW}: with {int(count.max()):,} "
                     "positions at a distance, the hits or the count start again from 0. "
                     "Count in int64 (a bool tensor's .sum(), torch.zeros(n, "
                     "dtype=torch.long)) and divide at the end.")
