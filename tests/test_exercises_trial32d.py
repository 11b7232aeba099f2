"""Learner trial 32 (d): notebook 05. Exercise 3 scored on an untrained model's nearly
flat logits: a probability threshold for the argmax, NaN where positions lie but none is
right, distance max_distance + 1 counted in the last entry, a result that leaves
bfloat16. Exercise 4 at three dtypes: a table of bytes per number without bfloat16, 2 bytes
assumed, the heads left out (both coincide with the keys alone at H = 2: every slip that
gives the number is said), the feedback cache counted per layer; numpy's integers taken as
numbers of bytes; and the right answers these checks must accept."""
import numpy as np
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scored(logits, y, max_distance, *, hit=None, far=0, nan_zero=False, out=None):
    """A learner's loop-free accuracy_by_distance, with one slip switched on."""
    n, t, _ = logits.shape
    labelled = y != IGNORE
    p = labelled.int().argmax(dim=1) - 1
    d = torch.arange(t, device=y.device)[None, :] - p[:, None]  # where y is (a GPU)
    hits = logits.argmax(-1) == y if hit is None else hit(logits, y)
    keep = labelled & (d >= 1) & (d <= max_distance + far)
    dd = d[keep].clamp(max=max_distance) - 1
    right = torch.zeros(max_distance, dtype=torch.float64, device=y.device).index_add_(
        0, dd, hits[keep].double())
    total = torch.zeros(max_distance, dtype=torch.float64, device=y.device).index_add_(
        0, dd, torch.ones(int(keep.sum()), dtype=torch.float64, device=y.device))
    acc = right / total
    if nan_zero:
        acc[right == 0] = float("nan")
    return acc.to(out or logits.dtype)


def _topk_right(logits, y, max_distance):  # re-trial 32b: ties broken unlike argmax
    return _scored(logits, y, max_distance, hit=lambda l, y: l.topk(1, -1).indices[..., 0] == y)


def _likely(logits, y):
    return logits.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0] > 0.5


RIGHT["float64_counts"] = (check_accuracy_by_distance, _scored)
RIGHT["topk"] = (check_accuracy_by_distance, _topk_right)
case("probability_threshold", check_accuracy_by_distance,
     lambda l, y, m: _scored(l, y, m, hit=_likely),
     r"right when its label is the argmax, however small its probability")
case("nan_for_no_hit", check_accuracy_by_distance,
     lambda l, y, m: _scored(l, y, m, nan_zero=True),
     r"is NaN at d=2, where \d+ labelled positions lie and none is right")
case("one_past_the_last", check_accuracy_by_distance,
     lambda l, y, m: _scored(l, y, m, far=1),
     r"distance max_distance \+ 1 = 6 were counted in the last entry")
case("float32_for_half", check_accuracy_by_distance,
     lambda l, y, m: _scored(l, y, m, out=torch.float64 if l.dtype == torch.float64
                             else torch.float32),
     r"on an untrained model's \(nearly flat\) logits, in bfloat16 has dtype torch\.float32, "
     r"expected torch\.bfloat16.*"
     r"\.to\(logits\.dtype\) at the end")



# ---- Exercise 4: cache_bytes, at float32, float64 and bfloat16 ----
def _pairs(cache):
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return cache


def _bytes(count):
    """A learner's cache_bytes counting each tensor with `count(t)`."""
    def cache_bytes(cache):
        if isinstance(cache, KVState):
            return count(cache.kv)
        return sum(count(k) + count(v) for k, v in _pairs(cache))
    return cache_bytes


SIZES = {torch.float32: 4, torch.float64: 8}


def _no_heads(cache):
    if isinstance(cache, KVState):
        two, b, h, m, dh = cache.kv.shape
        return two * b * m * dh * cache.kv.element_size()
    return sum(2 * k.size(0) * k.size(2) * k.size(3) * k.element_size()
               for k, _ in _pairs(cache))


def _per_layer(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes * 2  # the notebook's L = 2: one kv per layer
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


RIGHT["numpy_int"] = (check_cache_bytes, _bytes(lambda t: np.int64(t.numel()) * t.element_size()))
RIGHT["nbytes"] = (check_cache_bytes, _bytes(lambda t: t.nbytes))
case("dtype_table", check_cache_bytes, _bytes(lambda t: t.numel() * SIZES[t.dtype]),
     r"bfloat16 transformer cache.*KeyError: torch\.bfloat16: your table of bytes per number")
case("two_bytes", check_cache_bytes, _bytes(lambda t: t.numel() * 2),
     r"expected: it assumes 2 bytes per number")
case("heads_left_out", check_cache_bytes, _no_heads,
     r"1 / H = 1 / 5 of it: the heads are left out")
case("kv_per_layer", check_cache_bytes, _per_layer,
     r"feedback cache .*twice: .*one tensor for all layers")


# ---- Exercise 1: reach, XL's memory written as a number (told "the position adds 7 times")
def _reach_fixed_memory(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * 8 + position
    return float("inf")


case("reach_memory_number", check_reach, _reach_fixed_memory,
     r"gives 26, and 26 again with span=5: your function ignores span")


# ---- Exercise 2: make_recall, a loop one row short (told "only row 0 is computed")
def _recall_one_short(filler, values, positions):
    x, y = filler.clone(), torch.full_like(filler, IGNORE)
    for n in range(len(values) - 1):
        p = int(positions[n])
        x[n, p] = values[n]
        y[n, p + 1:] = values[n]
    return x, y


case("recall_one_short", check_make_recall, _recall_one_short,
     r"row 4 is not: row 4 is never computed \(a loop that stops one short\?\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)

