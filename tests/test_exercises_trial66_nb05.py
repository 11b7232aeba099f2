"""Trial 66, notebook 05 (a learner's trial): Exercise 2's time axis or positions in int16 or
float16 (`torch.arange(T, dtype=torch.int16) > positions[:, None]`) passed, and so did
Exercise 3's distances or counts in int16 (`d.to(torch.int16)`, `.sum(dtype=torch.int16)`):
no checked round is longer than 32,767 or 2,048 tokens. Now a dtype rule names any number
above 1 kept in int16, uint16 or float16 with the largest whole number it holds exactly.
Exercise 3's prediction compared with the label one position away, at the prediction's
distance (`logits[:, :-1].argmax(-1) == y[:, 1:]` with `d[:, :-1]`), was told that a
distance was NaN (check how you compute each distance); `logits[:, 1:]` against
`y[:, :-1]` at the later position's distance, that 1 of 7 entries differs; the argmax
rolled (`.roll(-1, 1)`: the next position's prediction), that it reads other positions'
logits as an argmax over time would; each row's last position left out (`logits[:, :-1]`
with `y[:, :-1]`), that a distance was NaN; the labels read from one column
(`argmax(-1) == y[:, -1:]`, one label per row assumed), that the distances follow the
labels' values. Exercise 4's `k.nbytes()` (a property called, as `KVState.nbytes()` is)
raised torch's "'int' object is not callable" under the check's generic notice. Each is
named now.
"""
import torch
from checker_helpers import trial_case, trial_tests
from test_exercises_trial65_nb05 import _accuracy, _accuracy_of, _counted_in, _recall

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall)
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

for kind, top in ((torch.int16, "32,767"), (torch.float16, "2,048")):
    name = str(kind)[6:]
    case(f"recall_time_axis_in_{name}", check_make_recall, _recall(kind),
         rf"{name}.*exact only up to {top}.*arange\(T, device=filler\.device\)")


def _positions_in(kind):
    """The notebook's make_recall, only the positions cast (`positions.to(kind)`)."""
    def make_recall(filler, values, positions):
        x = filler.clone()
        x[torch.arange(filler.size(0), device=filler.device), positions] = values
        t = torch.arange(filler.size(1), device=filler.device)
        return x, torch.where(t > positions.to(kind)[:, None], values[:, None], IGNORE)
    return make_recall


case("recall_positions_in_int16", check_make_recall, _positions_in(torch.int16),
     r"int16.*32,767.*wraps around")
case("recall_positions_in_half", check_make_recall, _positions_in(torch.half),
     r"float16.*2,048.*rounds")
RIGHT["recall_positions_in_int32"] = (check_make_recall, _positions_in(torch.int32))
RIGHT["recall_positions_in_float32"] = (check_make_recall, _positions_in(torch.float32))

COUNT = r"int16.*exact only up to 32,767.*long\(\)\.cumsum"
case("accuracy_distances_in_int16", check_accuracy_by_distance, _accuracy(torch.int16), COUNT)
case("accuracy_counts_in_int16", check_accuracy_by_distance, _counted_in(torch.int16), COUNT)
case("accuracy_hits_in_int16", check_accuracy_by_distance,
     _counted_in(torch.int16, hits_only=True), COUNT)
RIGHT["accuracy_counts_in_float32"] = (check_accuracy_by_distance, _counted_in(torch.float32))


def _paired(pred, label, at):
    """The notebook's loop, each position's hit `argmax(-1)[:, pred] == y[:, label]`
    scored at the distance of the positions `at` (slices over time)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = (labelled.long().cumsum(1) * labelled)[:, at]
        hits = logits.argmax(-1)[:, pred] == y[:, label]
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            if (d == k).any():
                out[k - 1] = hits[d == k].sum() / (d == k).sum()
        return out
    return accuracy_by_distance


FIRST, REST, ALL = slice(None, -1), slice(1, None), slice(None)
case("accuracy_next_label", check_accuracy_by_distance, _paired(FIRST, REST, FIRST),
     r"next label, y\[:, t \+ 1\].*without a shift")
case("accuracy_label_before", check_accuracy_by_distance, _paired(REST, FIRST, REST),
     r"label before it, y\[:, t - 1\].*never right")
case("accuracy_last_position_left_out", check_accuracy_by_distance,
     _paired(FIRST, FIRST, FIRST), r"last position is left out.*argmax\(-1\) == y")
case("accuracy_next_prediction_rolled", check_accuracy_by_distance,
     _accuracy_of(lambda logits: logits.argmax(-1).roll(-1, 1)),
     r"next position's prediction \(argmax\(-1\)\.roll\(-1, 1\).*without a shift")
RIGHT["accuracy_paired_whole"] = (check_accuracy_by_distance, _paired(ALL, ALL, ALL))



def _last_label(logits, y, max_distance):
    """The notebook's loop, every position scored against its row's last label."""
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hits = logits.argmax(-1) == y[:, -1:]
    out = logits.new_full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].sum() / (d == k).sum()
    return out


case("accuracy_row_label_from_last_column", check_accuracy_by_distance, _last_label,
     r"labels are equal.*one label per row \(y\[:, -1:\]\?\).*against y\[:, t\]")


def _bytes_called(cache):
    """The notebook's count with `.nbytes()` called, as KVState's own method is."""
    if isinstance(cache, KVState):
        return cache.kv.nbytes()
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return sum(k.nbytes() + v.nbytes() for k, v in pairs)


case("cache_bytes_property_called", check_cache_bytes, _bytes_called,
     r"not callable.*\.nbytes.*property.*t\.nbytes, no call")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
