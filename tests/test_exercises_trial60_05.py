"""Trial 60, notebook 05 (a learner's trial): Exercise 3's `p` taken from `y.argmax(1)` (the
first label only where a row's labels are equal) was blamed on counting in bfloat16; a loop
that reads each row's first label raised torch's IndexError on a row with no label; Exercise
4's right number returned as a float passed (the prose asks for an int). Right: the first
label from `y != IGNORE`, the bytes as an int (a NumPy integer too).
"""
import numpy as np
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import check_accuracy_by_distance, check_cache_bytes
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _accuracy(first_label):
    def accuracy_by_distance(logits, y, max_distance):
        p = first_label(y) - 1
        d = torch.arange(y.size(1), device=y.device)[None, :] - p[:, None]
        keep = (y != IGNORE) & (d >= 1) & (d <= max_distance)
        hits = (logits.argmax(-1) == y) & keep
        out = torch.empty(max_distance, dtype=logits.dtype, device=logits.device)
        for k in range(1, max_distance + 1):
            m = keep & (d == k)
            out[k - 1] = hits[m].sum() / m.sum()
        return out
    return accuracy_by_distance


def _per_row(logits, y, max_distance):
    hits = torch.zeros(max_distance, dtype=torch.long)
    counts = torch.zeros(max_distance, dtype=torch.long)
    for n in range(y.size(0)):
        p = int((y[n] != IGNORE).nonzero()[0]) - 1  # no guard: a row with no label
        for t in range(p + 1, min(y.size(1), p + 1 + max_distance)):
            counts[t - p - 1] += 1
            hits[t - p - 1] += int(logits[n, t].argmax() == y[n, t])
    return (hits / counts).to(logits.dtype).to(logits.device)


case("p_from_label_values", check_accuracy_by_distance, _accuracy(lambda y: y.argmax(1)),
     r"right where each row's labels are equal.*p from y\.argmax.*y != IGNORE")
case("row_without_label_unguarded", check_accuracy_by_distance, _per_row,
     r"row with no labels: your function looks up each row's first label.*counts nowhere")
RIGHT["p_from_labelled"] = (check_accuracy_by_distance, _accuracy(
    lambda y: (y != IGNORE).int().argmax(1)))


def _bytes(convert=int):
    def my_cache_bytes(cache):
        if isinstance(cache, KVState):
            return convert(cache.kv.nbytes)
        pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
        return convert(sum(k.nbytes + v.nbytes for k, v in pairs))
    return my_cache_bytes


case("bytes_as_float", check_cache_bytes, _bytes(float),
     r"gives the right number, \d+\.0, but of type float: return an int")
case("bytes_as_numpy_float", check_cache_bytes, _bytes(np.float64),
     r"gives the right number, \d+\.0, but of type float64: return an int")
RIGHT["bytes_as_int"] = (check_cache_bytes, _bytes())
RIGHT["bytes_as_numpy_int"] = (check_cache_bytes, _bytes(np.int64))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
