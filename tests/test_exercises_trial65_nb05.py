"""Trial 65, notebook 05 (a learner's trial): Exercise 3's distances kept in uint8 or int8
(`d.to(torch.uint8)`, wrapping past 255 or 127) were told only that 44 of 299 entries differ;
its counts (or hits) kept in uint8 or int8 (`torch.zeros(n, dtype=torch.uint8).index_add_`)
were told that bfloat16 or float16 stops counting at 256 or 2,048, though neither was used; a
denominator that also counts the unlabelled positions (`(at | (y == IGNORE)).sum()`, padding
in the average) was told it adds "a small number (eps ~ 2e+01)". Exercise 2's time axis in
uint8, int8 or bfloat16 (`torch.arange(T, dtype=torch.uint8) > positions[:, None]`) passed:
no check's sequence was longer than 12. Exercise 4's `buffer[0]` of an XL cache's KVBuffer
was told that an XLCache is not a list of (k, v) pairs, though the answer read cache.kv.
Exercise 3's argmax of `logits.sigmoid()` (or `.tanh()`) passed: in float32 both round every
large logit to 1.0, so a confident model's two best classes tie; no check's logits were large.
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


def _accuracy(dtype=torch.long, denominator=None):
    """The notebook's loop over distances, the distances kept in `dtype`; `denominator(at,
    labelled)` divides the hits at each distance (`at.sum()` by default)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = (labelled.long().cumsum(1) * labelled).to(dtype)
        hits = logits.argmax(-1) == y
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                below = at.sum() if denominator is None else denominator(at, labelled)
                out[k - 1] = hits[at].sum() / below
        return out
    return accuracy_by_distance


for narrow in (torch.uint8, torch.int8):
    case(f"accuracy_distances_in_{str(narrow)[6:]}", check_accuracy_by_distance,
         _accuracy(narrow), r"distances.*uint8 or int8.*wrap.*255.*127.*long\(\)\.cumsum")
RIGHT["accuracy_distances_in_int32"] = (check_accuracy_by_distance, _accuracy(torch.int32))
case("accuracy_denominator_counts_padding", check_accuracy_by_distance,
     _accuracy(denominator=lambda at, labelled: (at | ~labelled).sum()),
     r"unlabelled positions.*IGNORE.*at\.sum\(\)")


def _counted_in(dtype, hits_only=False):
    """Hits and counts per distance added up with `index_add_` into `dtype` tensors (only
    the hits there with `hits_only`, the counts in int64)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        keep = labelled & (d <= max_distance)
        hits = ((logits.argmax(-1) == y) & keep)[keep]
        idx = d[keep] - 1
        kind = torch.long if hits_only else dtype
        zeros = dict(device=y.device)
        count = torch.zeros(max_distance, dtype=kind, **zeros).index_add_(
            0, idx, torch.ones_like(idx, dtype=kind))
        right = torch.zeros(max_distance, dtype=dtype, **zeros).index_add_(0, idx, hits.to(dtype))
        return (right / count).to(logits.dtype)
    return accuracy_by_distance


case("accuracy_counts_in_uint8", check_accuracy_by_distance, _counted_in(torch.uint8),
     r"counts.*uint8 or int8.*wrap.*int64")
case("accuracy_counts_in_int8", check_accuracy_by_distance, _counted_in(torch.int8),
     r"counts.*uint8 or int8.*wrap.*int64")
case("accuracy_hits_in_uint8", check_accuracy_by_distance,
     _counted_in(torch.uint8, hits_only=True), r"counts.*uint8 or int8.*wrap.*int64")
RIGHT["accuracy_counts_in_int64"] = (check_accuracy_by_distance, _counted_in(torch.long))


def _recall(dtype):
    """The notebook's make_recall with its time axis (and positions) in `dtype`."""
    def make_recall(filler, values, positions):
        rows = torch.arange(filler.size(0), device=filler.device)
        x = filler.clone()
        x[rows, positions] = values
        t = torch.arange(filler.size(1), device=filler.device, dtype=dtype)
        after = t > positions[:, None].to(dtype)
        return x, torch.where(after, values[:, None], IGNORE)
    return make_recall


for narrow in (torch.uint8, torch.int8, torch.bfloat16):
    case(f"recall_time_axis_in_{str(narrow)[6:]}", check_make_recall, _recall(narrow),
         rf"{str(narrow)[6:]}.*arange\(T, device=filler\.device\)")
RIGHT["recall_time_axis_in_int32"] = (check_make_recall, _recall(torch.int32))



def _bytes_keys_twice(cache):
    """Keys' bytes twice (keys and values have one shape), a KVBuffer's keys as buffer[0]."""
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    if isinstance(cache, XLCache):
        return sum(2 * buffer[0].nbytes for buffer in cache.kv)
    return sum(2 * k.nbytes for k, v in cache)


case("cache_bytes_kvbuffer_indexed", check_cache_bytes, _bytes_keys_twice,
     r"KVBuffer takes no index.*k, v = buffer")


def _accuracy_of(predict):
    """The notebook's loop over distances, the prediction `predict(logits)`."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = predict(logits) == y
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].sum() / at.sum()
        return out
    return accuracy_by_distance


SQUASHED = r"sigmoid\(\) or \.tanh\(\).*tie.*argmax\(-1\)"
case("accuracy_argmax_of_sigmoid", check_accuracy_by_distance,
     _accuracy_of(lambda logits: logits.sigmoid().argmax(-1)), SQUASHED)
case("accuracy_argmax_of_tanh", check_accuracy_by_distance,
     _accuracy_of(lambda logits: logits.tanh().argmax(-1)), SQUASHED)
RIGHT["accuracy_argmax_of_softmax"] = (check_accuracy_by_distance,
                                       _accuracy_of(lambda logits: logits.softmax(-1).argmax(-1)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
