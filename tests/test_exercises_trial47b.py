"""Trial 47b: a blind learner trial of notebook 05's four exercises (224 answers).

Wrong answers that passed: labnn's own `memory_limits.reach` behind `reach` (check_reach
refused no reference); a tie counted as a hit in `accuracy_by_distance` (every check
avoided ties; a round now scores tied logits once for each tied label, of which one
prediction gets one right: topk, which breaks ties unlike argmax, stays right, as trial 32d
decided); an argmax over the values' ids only, `logits[..., :8]` (every check had V <= 6,
the notebook has V = 16); `.squeeze()` on the accuracies (max_distance = 1 never tried)
and on make_recall's x and y (N = 1 never tried); a `cache_bytes` that changes the cache
it measures (XL's KVBuffers turned into tuples in place, `cache.rel_keys` cleared, a
buffer's bookkeeping reset: only the keys' and values' numbers were compared); and,
cheap to add, an XL reach at a position past the notebook's segment of 8. Messages:
`ok // tot` on long counts raised torch's bare "ZeroDivisionError" before the check could
name the integer division. Left alone: make_recall's outputs following int32 inputs'
dtype (the notebook asks for no dtype, and its own solution keeps the inputs')."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import value_distances
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)
from labnn.exercises.three_memories.memory_limits import reach as _pkg_reach
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGN = -100


# ---- Exercise 1: reach ----
def reach_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def reach_labnn(memory, n_layers, span, position=0):
    return _pkg_reach(memory, n_layers, span, position)


def reach_labnn_module(memory, n_layers, span, position=0):
    import labnn.exercises.three_memories.memory_limits as ml
    return ml.reach(memory, n_layers, span, position)


def reach_segment_of_8(memory, n_layers, span, position=0):  # the notebook's T_s = 8
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + min(position, 7)
    return math.inf


RIGHT["reach"] = (check_reach, reach_right)
case("reach_labnn", check_reach, reach_labnn, r"labnn's own `reach`|runs .*memory_limits\.reach")
case("reach_labnn_module", check_reach, reach_labnn_module, r"runs .*memory_limits\.reach")
case("reach_segment_of_8", check_reach, reach_segment_of_8, r"position=(9|1\d)\).*capped at 7")


# ---- Exercise 2: make_recall ----
def recall_right(filler, values, positions):
    rows = torch.arange(filler.size(0), device=filler.device)
    x = filler.clone()
    x[rows, positions] = values
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGN)


def recall_loop(filler, values, positions):
    x, y = filler.clone(), torch.full_like(filler, IGN)
    for i in range(filler.shape[0]):
        p = int(positions[i])
        x[i, p] = values[i]
        y[i, p + 1:] = values[i]
    return x, y


def recall_scatter(filler, values, positions):
    x = filler.clone().scatter_(1, positions[:, None], values[:, None])
    idx = torch.arange(filler.size(1), device=filler.device).expand_as(filler)
    return x, values[:, None].expand_as(filler).masked_fill(idx <= positions[:, None], IGN)


def recall_squeeze(filler, values, positions):
    x, y = recall_right(filler, values, positions)
    return x.squeeze(), y.squeeze()


RIGHT["recall"] = (check_make_recall, recall_right)
RIGHT["recall_loop"] = (check_make_recall, recall_loop)
RIGHT["recall_scatter"] = (check_make_recall, recall_scatter)
case("recall_squeeze", check_make_recall, recall_squeeze, r"N = 1.*\.squeeze\(\)")


# ---- Exercise 3: accuracy_by_distance ----
def _score(hit):
    """An accuracy_by_distance whose hits are `hit(logits, y)`."""
    def accuracy_by_distance(logits, y, max_distance):
        lab = y != IGN
        d = lab.long().cumsum(1) * lab
        keep = lab & (d <= max_distance)
        tot = torch.bincount(d[keep] - 1, minlength=max_distance)
        ok = torch.bincount(d[keep] - 1, weights=hit(logits, y)[keep].double(),
                            minlength=max_distance)
        return (ok / tot).to(logits.dtype)
    return accuracy_by_distance


def acc_right(logits, y, max_distance):
    labelled = y != IGN
    d = labelled.long().cumsum(1) * labelled
    hits = (logits.argmax(-1) == y).to(logits.dtype)
    out = logits.new_full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


def acc_python_loops(logits, y, max_distance):
    n, t, _ = logits.shape
    pred = logits.argmax(dim=2)
    right = torch.zeros(max_distance, dtype=torch.long, device=logits.device)
    total = torch.zeros(max_distance, dtype=torch.long, device=logits.device)
    for i in range(n):
        labelled = (y[i] != IGN).nonzero()
        if len(labelled) == 0:
            continue
        p = labelled[0].item() - 1
        for j in range(p + 1, min(t, p + max_distance + 1)):
            total[j - p - 1] += 1
            right[j - p - 1] += int(pred[i, j] == y[i, j])
    return (right.double() / total.double()).to(logits.dtype)


def acc_scatter(logits, y, max_distance):
    lab = y != IGN
    d = lab.cumsum(-1) * lab
    hit = logits.argmax(-1).eq(y).long()
    idx = (d - 1)[lab & (d <= max_distance)]
    tot = torch.zeros(max_distance, dtype=torch.long, device=y.device).scatter_add_(
        0, idx, torch.ones_like(idx))
    ok = torch.zeros(max_distance, dtype=torch.long, device=y.device).scatter_add_(
        0, idx, hit[lab & (d <= max_distance)])
    return torch.where(tot > 0, ok.double() / tot.clamp(min=1), torch.nan).to(logits.dtype)


def acc_distances_helper(logits, y, max_distance):  # labnn's value_distances: a helper
    d = value_distances(y)
    keep = (d >= 1) & (d <= max_distance)
    tot = torch.bincount(d[keep] - 1, minlength=max_distance)
    ok = torch.bincount(d[keep] - 1, weights=(logits.argmax(-1) == y)[keep].double(),
                        minlength=max_distance)
    return (ok / tot).to(logits.dtype)


def acc_floor_div(logits, y, max_distance):  # `ok // tot` on long counts
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = (logits.argmax(-1) == y) & lab
    ok = torch.stack([(hit & (d == k)).sum() for k in range(1, max_distance + 1)])
    tot = torch.stack([(d == k).sum() for k in range(1, max_distance + 1)])
    return (ok // tot).to(logits.dtype)


def acc_div_floor(logits, y, max_distance):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    keep = lab & (d <= max_distance)
    tot = torch.bincount(d[keep] - 1, minlength=max_distance)
    ok = torch.bincount(d[keep] - 1, weights=(logits.argmax(-1) == y)[keep].long(),
                        minlength=max_distance).long()
    return torch.div(ok, tot, rounding_mode="floor").to(logits.dtype)


acc_bincount = _score(lambda logits, y: logits.argmax(-1) == y)
acc_max_indices = _score(lambda logits, y: logits.max(dim=-1).indices == y)
acc_softmax_first = _score(lambda logits, y: logits.softmax(-1).argmax(-1) == y)
acc_tie_is_hit = _score(lambda logits, y: logits.gather(-1, y.clamp(min=0)[..., None])[..., 0]
                        == logits.max(-1).values)
acc_topk = _score(lambda logits, y: logits.topk(1, dim=-1).indices[..., 0] == y)
acc_values_only = _score(lambda logits, y: logits[..., :8].argmax(-1) == y)
acc_values_upto_max = _score(lambda logits, y: logits[..., :int(y.max()) + 1].argmax(-1) == y)


def acc_squeeze(logits, y, max_distance):
    return acc_right(logits, y, max_distance).squeeze()


for tag, fn in (("acc", acc_right), ("acc_python_loops", acc_python_loops),
                ("acc_scatter", acc_scatter), ("acc_distances_helper", acc_distances_helper),
                ("acc_bincount", acc_bincount), ("acc_max_indices", acc_max_indices),
                ("acc_softmax_first", acc_softmax_first)):
    RIGHT[tag] = (check_accuracy_by_distance, fn)
case("acc_tie_is_hit", check_accuracy_by_distance, acc_tie_is_hit, r"tie.*both right.*argmax")
acc_tie_is_miss = _score(lambda logits, y: logits.gather(-1, y.clamp(min=0)[..., None])[..., 0]
                         > logits.scatter(-1, y.clamp(min=0)[..., None], -1e9).amax(-1))
# topk(1) breaks ties in no set order, unlike argmax: right all the same (trial 32d)
RIGHT["acc_topk"] = (check_accuracy_by_distance, acc_topk)
case("acc_tie_is_miss", check_accuracy_by_distance, acc_tie_is_miss,
     r"tie as a miss for both labels")
case("acc_values_only", check_accuracy_by_distance, acc_values_only,
     r"logits\[\.\.\., :8\].*whole vocabulary")
case("acc_values_upto_max", check_accuracy_by_distance, acc_values_upto_max,
     r"logits\[\.\.\., :3\].*whole vocabulary")
case("acc_squeeze", check_accuracy_by_distance, acc_squeeze, r"max_distance=1.*\.squeeze\(\)")
case("acc_floor_div", check_accuracy_by_distance, acc_floor_div, r"integer division")
case("acc_div_floor", check_accuracy_by_distance, acc_div_floor, r"integer division")


# ---- Exercise 4: cache_bytes ----
def cache_right(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return sum(k.nbytes + v.nbytes for k, v in pairs)


def cache_buffer_fields(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    if isinstance(cache, XLCache):
        return sum(b.keys.nbytes + b.values.nbytes for b in cache.kv)
    return sum(torch.cat([k, v]).nbytes for k, v in cache)


def cache_tuples_in_place(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    layers = cache.kv if isinstance(cache, XLCache) else cache
    for i, kv in enumerate(layers):  # every layer "normalised" to a (k, v) tuple, in place
        layers[i] = tuple(kv)
    return sum(k.nbytes + v.nbytes for k, v in layers)


def cache_rel_keys_cleared(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    if isinstance(cache, XLCache):
        cache.rel_keys.clear()  # "so that the table is not counted"
        cache = cache.kv
    return sum(k.nbytes + v.nbytes for k, v in cache)


def cache_filled_reset(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    if isinstance(cache, XLCache):
        for b in cache.kv:
            b._storage.filled = 0
        cache = cache.kv
    return sum(k.nbytes + v.nbytes for k, v in cache)


RIGHT["cache"] = (check_cache_bytes, cache_right)
RIGHT["cache_buffer_fields"] = (check_cache_bytes, cache_buffer_fields)
case("cache_tuples_in_place", check_cache_bytes, cache_tuples_in_place,
     r"changed the cache.*cache\.kv\[0\]: KVBuffer before, tuple after")
case("cache_rel_keys_cleared", check_cache_bytes, cache_rel_keys_cleared,
     r"changed the cache.*cache\.rel_keys")
case("cache_filled_reset", check_cache_bytes, cache_filled_reset,
     r"changed the cache.*cache\.kv\[0\]")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
