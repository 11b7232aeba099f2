"""Trial 64, notebook 05 (a learner's trial): Exercise 4's bytes read through NumPy
(`t.numpy().nbytes`) crashed on the bfloat16 cache with NumPy's own TypeError only; a
KVState's bytes counted for its `offset` (the tokens it has seen) instead of the positions it
holds were told only that the numbers differ; Exercise 2's values added to the filler
(`x[rows, positions] += values`, or `index_put_(..., accumulate=True)`) were told only that x
differs, and a "copy" that gives back filler itself (`filler.contiguous()`,
`torch.as_tensor(filler)`) or a tensor on its storage (`copy.copy(filler)`) was told of
`x = filler`. Exercise 3's distances counted in float16 (`labelled.half().cumsum(1)`) passed:
its whole numbers are exact only up to 2,048, and no check's sequence was that long.
"""
import copy

import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall)
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _pairs(cache):
    return [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache


def _bytes_through_numpy(cache):
    if isinstance(cache, KVState):
        return cache.kv.numpy().nbytes
    return sum(k.numpy().nbytes + v.numpy().nbytes for k, v in _pairs(cache))


def _bytes_of_offset_positions(cache):
    if isinstance(cache, KVState):  # M taken as the tokens seen
        _, b, h, _, d_h = cache.kv.shape
        return 2 * b * h * cache.offset * d_h * cache.kv.element_size()
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


case("cache_bytes_numpy_bfloat16", check_cache_bytes, _bytes_through_numpy,
     r"NumPy has no bfloat16.*nbytes")
case("cache_bytes_kvstate_offset", check_cache_bytes, _bytes_of_offset_positions,
     r"offset.*tokens.*seen.*kv\.nbytes")


def _recall(start, add=False):
    """x from `start(filler)`, each value written (or added) at its position."""
    def make_recall(filler, values, positions):
        x = start(filler)
        rows = torch.arange(filler.size(0), device=filler.device)
        if add:
            x[rows, positions] += values
        else:
            x[rows, positions] = values
        after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
        return x, torch.where(after, values[:, None], IGNORE)
    return make_recall


def _recall_accumulated(filler, values, positions):
    rows = torch.arange(filler.size(0), device=filler.device)
    x = filler.clone().index_put_((rows, positions), values, accumulate=True)
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


case("recall_x_plus_equals", check_make_recall, _recall(torch.clone, add=True),
     r"adds values\[n\] to the filler.*x\[torch\.arange\(N\), positions\] = values")
case("recall_x_accumulate", check_make_recall, _recall_accumulated,
     r"adds values\[n\] to the filler.*accumulate")
case("recall_x_contiguous", check_make_recall, _recall(lambda f: f.contiguous()),
     r"filler\.contiguous\(\).*same tensor.*clone\(\)")
case("recall_x_as_tensor", check_make_recall, _recall(torch.as_tensor),
     r"torch\.as_tensor\(filler\).*same tensor.*clone\(\)")
case("recall_x_copy_copy", check_make_recall, _recall(copy.copy),
     r"copy\.copy\(filler\).*storage.*clone\(\)")
RIGHT["recall_x_deepcopy"] = (check_make_recall, _recall(copy.deepcopy))



def _accuracy(count):
    """The notebook's loop over distances, the distances counted with `count(labelled)`."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = count(labelled) * labelled
        hits = logits.argmax(-1) == y
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].sum() / at.sum()
        return out
    return accuracy_by_distance


case("accuracy_distances_in_float16", check_accuracy_by_distance,
     _accuracy(lambda labelled: labelled.half().cumsum(1)),
     r"counted in float16.*2,048.*long\(\)\.cumsum")
RIGHT["accuracy_distances_in_float32"] = (check_accuracy_by_distance,
                                          _accuracy(lambda labelled: labelled.float().cumsum(1)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
