"""Trial 67, notebook 05 (a learner's trial): Exercise 3's score that also counts the
positions before each value (a distance `(t - p).abs()`, so that the query positions before
the value sit at distances too) was told only that 5 of 7 entries differ; Exercise 4's count
of one position too many or too few per layer (`(S + 1)` or `(S - 1)` times the bytes of a
position) was told only the two numbers; Exercise 2's value written one position early
(`positions - 1`, the last token where the position is 0) and its x started from zeros
(`torch.zeros_like(filler)`) instead of the filler were told that x differs at some
entries; labels that hold one id for the whole batch (`values.max()`) that one entry holds
3, expected 0; a time axis counted from 1 (`torch.arange(1, T + 1)`) that the value's own
position is labelled, without the cause; the sequence cut at max_distance (`y[:,
:max_distance + 1]`, the bound taken for one on the position) that 3 of 3 entries differ.
Each is named now.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall)
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _recall(x_of=None, time=lambda t: t, label=lambda values: values[:, None]):
    """The notebook's make_recall; `x_of(filler)` the tensor the values are written into
    (a clone by default), `time(t)` the time axis compared with the positions, `label`
    the labels after the value."""
    def make_recall(filler, values, positions, shift=0):
        x = filler.clone() if x_of is None else x_of(filler)
        rows = torch.arange(filler.size(0), device=filler.device)
        x[rows, positions + shift] = values
        t = time(torch.arange(filler.size(1), device=filler.device))
        return x, torch.where(t > positions[:, None], label(values), IGNORE)
    return make_recall


def _early(filler, values, positions):
    """The value written at positions[n] - 1 (position 0: the last token)."""
    return _recall()(filler, values, positions, shift=-1)


case("recall_value_one_early", check_make_recall, _early,
     r"one position too early.*positions\[n\] - 1.*x\[torch\.arange\(N\), positions\]")
for tag, start in (("zeros", torch.zeros_like), ("new_zeros", lambda f: f.new_zeros(f.shape))):
    case(f"recall_x_from_{tag}", check_make_recall, _recall(x_of=start),
         r"not the filler elsewhere.*filler\.clone\(\)")
case("recall_time_from_one", check_make_recall, _recall(time=lambda t: t + 1),
     r"own position.*arange\(1, T \+ 1\)")
for tag, one in (("max", lambda v: v.max()), ("last", lambda v: v[-1]),
                 ("sum", lambda v: v.sum())):
    case(f"recall_one_label_for_all_rows_{tag}", check_make_recall, _recall(label=one),
         r"same id.*every row.*values\[:, None\]")


def _recall_loop(filler, values, positions):
    """A loop over rows, labels through a slice."""
    x, y = filler.clone(), torch.full_like(filler, IGNORE)
    for n in range(filler.size(0)):
        x[n, positions[n]] = values[n]
        y[n, positions[n] + 1:] = values[n]
    return x, y


RIGHT["recall_loop_over_rows"] = (check_make_recall, _recall_loop)


def _accuracy(distance):
    """The notebook's loop, each position's distance `distance(t, p)` from its row's p,
    every position at distances 1..max_distance counted (the labelled ones are those)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        t = torch.arange(y.size(1), device=y.device)
        p = torch.where(labelled.any(1), labelled.int().argmax(1) - 1, y.size(1))
        d = torch.where(labelled.any(1, keepdim=True), distance(t, p[:, None]), 0)
        hits = logits.argmax(-1) == y
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].sum() / at.sum()
        return out
    return accuracy_by_distance


UNLABELLED = r"every label right.*no label.*before the value.*y != IGNORE"
case("accuracy_distance_both_ways", check_accuracy_by_distance,
     _accuracy(lambda t, p: (t - p).abs()), UNLABELLED)
case("accuracy_value_position_at_one", check_accuracy_by_distance,
     _accuracy(lambda t, p: t - p + (t <= p)), UNLABELLED)
RIGHT["accuracy_signed_distance"] = (check_accuracy_by_distance, _accuracy(lambda t, p: t - p))


def _grid_mean(logits, y, max_distance):
    """Each row's hit at each distance in an [N, max_distance] grid, NaN where the row has
    none, then nanmean over the rows."""
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    keep = labelled & (d <= max_distance)
    grid = torch.full((y.size(0), max_distance), float("nan"), device=y.device)
    r, t = keep.nonzero(as_tuple=True)
    grid[r, d[r, t] - 1] = (logits.argmax(-1) == y)[r, t].float()
    return grid.nanmean(0).to(logits.dtype)


RIGHT["accuracy_grid_nanmean"] = (check_accuracy_by_distance, _grid_mean)


def _cut_at(extra):
    """The grid answer on the first `max_distance + extra` positions only (the bound taken
    for one on the position)."""
    def accuracy_by_distance(logits, y, max_distance):
        return _grid_mean(logits[:, :max_distance + extra], y[:, :max_distance + extra],
                          max_distance)
    return accuracy_by_distance


for extra in (0, 1):
    case(f"accuracy_sequence_cut_at_max_distance_plus_{extra}", check_accuracy_by_distance,
         _cut_at(extra), r"only positions t <= max_distance.*distance t - p, not the position")


def _bytes_by_shape(extra):
    """Bytes from each tensor's shape, `extra` positions added to the M axis."""
    def size(t, axis):
        shape = list(t.shape)
        shape[axis] += extra
        return torch.Size(shape).numel() * t.element_size()

    def cache_bytes(cache):
        if isinstance(cache, KVState):
            return size(cache.kv, -2)
        pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
        return sum(size(k, 2) + size(v, 2) for k, v in pairs)
    return cache_bytes


case("cache_bytes_one_position_more", check_cache_bytes, _bytes_by_shape(1),
     r"one position too many.*M \+ 1.*t\.nbytes")
case("cache_bytes_one_position_fewer", check_cache_bytes, _bytes_by_shape(-1),
     r"one position too few.*M - 1.*t\.nbytes")
RIGHT["cache_bytes_by_shape"] = (check_cache_bytes, _bytes_by_shape(0))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
