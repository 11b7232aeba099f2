"""Trial 63, notebook 05 (a learner's trial): Exercise 3's hits divided by a number the
same at every distance (`at.numel()`, all N * T positions of the grid, or a constant) were
told "your denominator adds a small number to the count (eps ~ 4e+01)"; Exercise 4's bytes
counted once per storage (the transformer's k and v are views into one fused projection, so
a learner who skips a storage already seen drops v) were told of a window of the last 6
positions written in the function; Exercise 2's labels compared on the wrong axes
(`t[:, None] > positions[None, :]`, a [T, N] grid) gave torch's broadcasting error only;
Exercise 3's hits divided by T, and Exercise 1's XL position capped at the notebook's
T_s - 1 = 7, were told only that the numbers differ.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _accuracy(denominator):
    """A loop over distances; `denominator(at)` divides the hits at each one."""
    def accuracy_by_distance(logits, y, max_distance):
        lab = y != IGNORE
        d = lab.long().cumsum(1) * lab
        hits = logits.argmax(-1) == y
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].sum() / denominator(at)
        return out
    return accuracy_by_distance


case("accuracy_over_numel", check_accuracy_by_distance, _accuracy(lambda at: at.numel()),
     r"N \* T.*at\.sum\(\)")
case("accuracy_over_constant", check_accuracy_by_distance, _accuracy(lambda at: 1000),
     r"1000 at every distance.*at\.sum\(\)")
case("accuracy_over_t", check_accuracy_by_distance, _accuracy(lambda at: at.size(1)),
     r"T = \d+, the sequence length.*at\.sum\(\)")
case("accuracy_count_plus_tiny", check_accuracy_by_distance,
     _accuracy(lambda at: at.sum() + 1e-3), r"adds a small number")
RIGHT["accuracy_count"] = (check_accuracy_by_distance, _accuracy(lambda at: at.sum()))


def _pairs(cache):
    return [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache


def _bytes_once_per_storage(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    seen, total = set(), 0
    for k, v in _pairs(cache):
        for t in (k, v):
            if t.untyped_storage().data_ptr() not in seen:  # meant: not counted twice
                seen.add(t.untyped_storage().data_ptr())
                total += t.nbytes
    return total


def _bytes_once_per_pointer(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    seen, total = set(), 0
    for k, v in _pairs(cache):
        for t in (k, v):
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.nbytes
    return total


case("cache_bytes_once_per_storage", check_cache_bytes, _bytes_once_per_storage,
     r"one storage.*k\.nbytes \+ v\.nbytes")
case("cache_bytes_keys_only", check_cache_bytes, lambda cache: (
    cache.kv.nbytes if isinstance(cache, KVState) else sum(k.nbytes for k, _ in _pairs(cache))),
     r"keys only")
RIGHT["cache_bytes_once_per_pointer"] = (check_cache_bytes, _bytes_once_per_pointer)


def _recall_wrong_axes(filler, values, positions):
    x = filler.clone()
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    t = torch.arange(filler.size(1), device=filler.device)
    after = t[:, None] > positions[None, :]  # [T, N]: time down, rows across
    return x, torch.where(after, values[:, None], IGNORE)


case("recall_after_wrong_axes", check_make_recall, _recall_wrong_axes,
     r"positions\[:, None\]")

def _reach_position_capped(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + min(position, 7)  # the notebook's SEG - 1
    return math.inf


case("reach_position_capped_at_7", check_reach, _reach_position_capped,
     r"capped at 7.*L \* M \+ position")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
