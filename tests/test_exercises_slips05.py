"""Notebook 05's slips named by `memory_limits_slips` and `recall_score_slips` beyond the
trial's own cases (test_exercises_trial8b.py): other spellings, other axes, the other shift."""
import math

import pytest
import torch

from checker_helpers import named_briefly
from labnn.data.recall import IGNORE
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache


def reach(xl="XL", window="window"):
    def my_reach(memory, n_layers, span, position=0):
        if memory == window:
            return n_layers * span
        if memory == xl:
            return n_layers * span + position
        return math.inf
    return my_reach


@pytest.mark.parametrize("fn, pattern", [
    (reach(window="Window"), r"gives inf, but 8 for 'Window'.*'window' fell through"),
    # no spelling gives the reach: the message only asks, and states the rule
    (reach(xl="Transformer-XL"), r"if 'XL' fell through.*L \* M \+ position = 16"),
])
def test_a_name_that_falls_through_is_named(fn, pattern):
    named_briefly(check_reach, (fn,), pattern)


def test_bytes_of_the_last_three_axes_are_named():
    def my_cache_bytes(cache):
        ts = [cache.kv] if isinstance(cache, KVState) else [
            t for pair in (cache.kv if isinstance(cache, XLCache) else cache) for t in pair]
        return sum(t.element_size() * math.prod(t.shape[-3:]) for t in ts)
    named_briefly(check_cache_bytes, (my_cache_bytes,),
                  r"last three axes.*\[H, M, D_h\]; \[B\] left out")


def test_the_next_positions_prediction_is_named():
    def my_accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = (labelled.long().cumsum(1) * labelled)[:, :-1]
        hits = (logits.argmax(-1)[:, 1:] == y[:, :-1]).float()
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            if (d == k).any():
                out[k - 1] = hits[d == k].mean()
        return out
    named_briefly(check_accuracy_by_distance, (my_accuracy_by_distance,),
                  r"next position's prediction.*already aligned")


def test_distances_one_short_are_not_blamed_on_the_next_position():
    def my_accuracy_by_distance(logits, y, max_distance):  # p read as the first labelled
        labelled = y != IGNORE
        p = labelled.long().argmax(1, keepdim=True)
        d = torch.arange(y.size(1))[None, :] - p
        hits = (logits.argmax(-1) == y) & labelled
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = labelled & (d == k)
            if at.any():
                out[k - 1] = hits[at].float().mean()
        return out
    named_briefly(check_accuracy_by_distance, (my_accuracy_by_distance,),
                  r"^(?!.*next position).*one short.*\(p \+ 1\) is at distance 1")
