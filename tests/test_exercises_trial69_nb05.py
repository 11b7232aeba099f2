"""Trial 69, notebook 05 (a learner's trial of its four exercises).

Told only that some entries differ before: the median of the accuracies of chunks of rows
(`nanmedian` over chunks of 2 or 4 rows; `median`, which NaN-propagates, was told instead
that a distance whose positions exist is NaN, blaming the distances), and the median of the
0/1 hits at a distance (`hits[at].float().median()`, the same as a median over rows); a
prediction kept `[N, T, 1]` (`logits.argmax(-1, keepdim=True) == y`, or `y[..., None]`) got
only broadcasting's RuntimeError. Exercise 1's XL reach counting the segment in every layer
(`L * (M + T_s)`, with or without the position; `L * (M + T_s - 1)`) was told only the two
numbers. Each is named now.
An answer that makes a tensor on the CPU (a `torch.arange`, `torch.ones(...).triu(1)`,
`torch.full` or `torch.zeros` without `device=`) was told the operation that mixed it with
the inputs, or that a result came back on the CPU, not which call made it: the device
checks (`labnn.exercises.grading.devices`) name that call now, in every notebook.
"""
import torch
from checker_helpers import (accuracy_by_distance_with, reach_with, trial_case,
                             trial_tests)

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_make_recall,
                                            check_reach)


CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _loop(hits_of=lambda lg, y: lg.argmax(-1) == y,
          at_distance=lambda h: h.sum() / h.numel()):
    """The notebook's loop with the hits `hits_of(logits, y)`, each distance's entry
    `at_distance(hits[at])` (right: their mean, the hits there over the positions there)."""
    return accuracy_by_distance_with(hits_of, lambda hits, at: at_distance(hits[at]))


_accuracy = _loop()


def _chunk_median(size, median):
    """The right accuracies of each chunk of `size` rows, then their `median` over chunks."""
    def accuracy_by_distance(logits, y, max_distance):
        parts = torch.stack([_accuracy(lg, yy, max_distance)
                             for lg, yy in zip(logits.split(size), y.split(size))])
        return median(parts, 0).values
    return accuracy_by_distance


for size in (2, 3, 4):
    for median in (torch.nanmedian, torch.median):
        case(f"accuracy_chunks_of_{size}_{median.__name__}", check_accuracy_by_distance,
             _chunk_median(size, median), rf"median of the accuracies of chunks of {size} rows")
case("accuracy_median_over_rows", check_accuracy_by_distance,
     _chunk_median(1, torch.nanmedian), r"median of the 0/1 hits.*mean")


# the median of the 0/1 hits at each distance, not their mean
_median_of_hits = _loop(at_distance=lambda h: h.float().median())


case("accuracy_median_of_hits", check_accuracy_by_distance, _median_of_hits,
     r"median of the 0/1 hits.*mean")


# the prediction kept [N, T, 1]: broadcasting's RuntimeError was the only message
KEPT = r"\[N, T, 1\] tensor with an \[N, T\] one.*keepdim=True.*logits\.argmax\(-1\) == y"
for tag, hits_of in (("argmax", lambda lg, y: lg.argmax(-1, keepdim=True) == y),
                     ("max_indices", lambda lg, y: lg.max(-1, keepdim=True).indices == y),
                     ("labels_first", lambda lg, y: y == lg.argmax(-1, keepdim=True)),
                     ("labels_unsqueezed", lambda lg, y: lg.argmax(-1) == y[..., None])):
    case(f"accuracy_prediction_kept_{tag}", check_accuracy_by_distance, _loop(hits_of), KEPT)


SEGMENT_PER_LAYER = r"segment.*every layer.*L \* M \+ i"
for tag, xl in (("segment_per_layer", lambda n, m, i: n * (m + m)),
                ("segment_per_layer_and_position", lambda n, m, i: n * (m + m) + i),
                ("segment_but_query_per_layer", lambda n, m, i: n * (2 * m - 1))):
    case(f"reach_xl_{tag}", check_reach, reach_with(xl), SEGMENT_PER_LAYER)
RIGHT["reach_xl_position_modulo_segment"] = (check_reach, reach_with(lambda n, m, i: n * m + i % m))


# Answers right on the CPU that make a tensor there (no device=): the device checks named the
# operation that mixed it with the inputs ("in `>`, torch's gt") or said a result came back on
# the CPU, never which of the learner's calls made that tensor. They name it now.


def _recall(make):
    """Exercise 2, the labels' time axis (`make(filler, positions)`, the `[N, T]` mask after
    the value)."""
    def make_recall(filler, values, positions):
        x = filler.clone()
        x[torch.arange(filler.size(0), device=filler.device), positions] = values
        return x, torch.where(make(filler, positions), values[:, None], IGNORE)
    return make_recall


case("recall_arange_on_the_cpu", check_make_recall,
     _recall(lambda f, p: torch.arange(f.size(1)) > p[:, None]),
     r"\(in `>`, torch's gt\), by your torch\.arange\(\.\.\.\) without device=.*"
     r"torch\.arange\(\.\.\., device=")
case("recall_triangle_on_the_cpu", check_make_recall,  # a row per position, of torch.ones
     _recall(lambda f, p: torch.ones(f.size(1), f.size(1), dtype=torch.bool).triu(1)[p]),
     r"\(in index\), by your torch\.ones\(\.\.\.\) without device=")


def _recall_rows(filler, values, positions):
    """Labels filled row by row into a `torch.full(...)` made on the CPU."""
    x, y = filler.clone(), torch.full(filler.shape, IGNORE)
    for n in range(filler.size(0)):
        x[n, positions[n]] = values[n]
        y[n, positions[n] + 1:] = values[n]
    return x, y


case("recall_labels_on_the_cpu", check_make_recall, _recall_rows,
     r"returns a tensor on the CPU.*made by your torch\.full\(\.\.\.\) without device=")


def _accuracy_into(zeros):
    """Exercise 3, hits and counts kept in `zeros(n)` and divided at the end."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = logits.argmax(-1) == y
        h, c = zeros(max_distance, logits), zeros(max_distance, logits)
        for k in range(1, max_distance + 1):
            h[k - 1], c[k - 1] = hits[d == k].sum(), (d == k).sum()
        return (h / c).to(logits.dtype)
    return accuracy_by_distance


case("accuracy_counts_on_the_cpu", check_accuracy_by_distance,
     _accuracy_into(lambda n, lg: torch.zeros(n)),
     r"returns a tensor on the CPU.*made by your torch\.zeros\(\.\.\.\) without device=.*"
     r"torch\.zeros\(\.\.\., device=x\.device\)")
RIGHT["accuracy_counts_where_the_logits_are"] = (
    check_accuracy_by_distance, _accuracy_into(lambda n, lg: torch.zeros(n, device=lg.device)))


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
