"""Trial 44c: a blind learner trial of notebook 05's four exercises (152 answers).

Wrong answers that passed: a `cache_bytes` that changes the cache it measures (zeroes its
keys, clears the list, resets a state's offset: never checked), which also crashed the check
with a bare StopIteration, or was told "MiB, not bytes", once the answer was called again on
the cache it had emptied; a `make_recall` whose labels stop at a hard-coded T = 32 (the check
tried T = 9 and 12 only); a reach right for two layers or more only (never one)."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.exercises.three_memories import check_cache_bytes, check_make_recall, check_reach
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100


def _layers(cache):
    return cache.kv if isinstance(cache, XLCache) else cache


def _bytes(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in _layers(cache))


def _then(change):
    """The right count, then `change(cache)`: an answer that damages what it measures."""
    def cache_bytes(cache):
        n = _bytes(cache)
        change(cache)
        return n
    return cache_bytes


def _zero(cache):
    if isinstance(cache, KVState):
        cache.kv.zero_()
    elif isinstance(cache, list):
        for k, v in cache:
            k.zero_()
            v.zero_()


def _clear(cache):
    if isinstance(cache, list):
        cache.clear()


def _offset(cache):
    if isinstance(cache, KVState):
        cache.offset = 0


def _truncate(cache):
    if isinstance(cache, KVState):
        cache.kv = cache.kv[:, :, :, :0]


CHANGED = r"(?s)^(?!.*MiB).*(chang|modif|in place|clear|damag)"
case("cb_zeroes_the_cache", check_cache_bytes, _then(_zero), CHANGED)
case("cb_clears_the_list", check_cache_bytes, _then(_clear), CHANGED)
case("cb_resets_the_offset", check_cache_bytes, _then(_offset), CHANGED)
case("cb_truncates_the_state", check_cache_bytes, _then(_truncate), CHANGED)
RIGHT["cb_right"] = (check_cache_bytes, _bytes)


def _recall(stop):
    """make_recall with each label row running to `stop` (None: the end)."""
    def make_recall(filler, values, positions):
        x = filler.clone()
        x[torch.arange(len(values)), positions] = values
        y = torch.full_like(x, IGNORE)
        for n in range(len(values)):
            y[n, positions[n] + 1 : stop] = values[n]
        return x, y
    return make_recall


case("mr_labels_stop_at_32", check_make_recall, _recall(32), r"(?i)32|T = |sequence length")
RIGHT["mr_right"] = (check_make_recall, _recall(None))


def _recall_long(filler, values, positions):
    """`x = filler.long()`: the same tensor when filler is already int64, so the write
    below changes the caller's filler."""
    x = filler.long()
    x[torch.arange(len(values)), positions] = values
    y = torch.full_like(x, IGNORE)
    for n in range(len(values)):
        y[n, positions[n] + 1 :] = values[n]
    return x, y


case("mr_long_is_the_same_tensor", check_make_recall, _recall_long,
     r"(?s)\.long\(\).*same tensor|same tensor.*\.long\(\)")


def _reach_many_layers_only(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position * (n_layers > 1)
    return math.inf


case("reach_one_layer_xl", check_reach, _reach_many_layers_only,
     r"n_layers=1.*left out the query's position")

def _reach_capped(memory, n_layers, span, position=0):
    """The window's reach capped at the tokens before the query: told it ignored n_layers
    and span (at position 0 the cap hid them)."""
    if memory == "window":
        return min(n_layers * span, position)
    return n_layers * span + position if memory == "XL" else math.inf


case("reach_window_capped_at_position", check_reach, _reach_capped,
     r"(?s)^(?!.*hard-coded).*does not depend on the query's position")

def _recall_y_is_x(filler, values, positions):
    """`y = x`, then the labels written into y: x and y are one tensor."""
    x = filler.clone()
    x[torch.arange(len(values)), positions] = values
    y = x
    y.fill_(IGNORE)
    for n in range(len(values)):
        y[n, positions[n] + 1 :] = values[n]
    return x, y


case("mr_y_is_x", check_make_recall, _recall_y_is_x, r"(?i)one tensor|same tensor")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
