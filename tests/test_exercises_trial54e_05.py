"""Trial 54e, notebook 05: answers that keep state between calls (a systematic probe).

Wrong answers that passed: make_recall and accuracy_by_distance cached by the inputs' `id()`
or `data_ptr()` (the same tensors refilled in place get the old result); accuracy_by_distance
copied into one output buffer per shape, or written into a NaN-filled result kept per
max_distance and never reset; cache_bytes kept by `id(cache)` or stored on the cache
(`cache._nbytes`): a cache grown in place kept its old count. Misleading: make_recall's
IGNORE-filled y kept per shape ("right with the check's small ids"), cache_bytes keyed on the
shapes without the dtype ("assumes 4 bytes per number"). Right: the notebook's solutions, a
kept constant cloned, `functools.lru_cache` on a pure function of ints.
"""
import functools
import math

import torch
from checker_helpers import trial_case, trial_tests
from kept_state_variants import variants

from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)
from labnn.feedback import KVState
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100
EARLIER = r"(earlier|first) call.*kept between calls"
REFILLED = r"refilled in place.*id\(\) or data_ptr\(\)"
BUFFER = r"overwr.*buffer"


VARIANTS = variants(EARLIER, REFILLED, BUFFER)


def make_recall(filler, values, positions):
    x = filler.clone()
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


def accuracy_by_distance(logits, y, max_distance, out=None):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hits = (logits.argmax(-1) == y).to(logits.dtype)
    out = logits.new_full((max_distance,), float("nan")) if out is None else out
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


for name, (wrap, said) in VARIANTS.items():
    case(f"mr_{name}", check_make_recall, wrap(make_recall), said)
    case(f"abd_{name}", check_accuracy_by_distance, wrap(accuracy_by_distance), said)


def _mr_y_kept():  # e3: an IGNORE-filled y kept per shape, written into, never reset
    kept = {}

    def mr(filler, values, positions):
        y = kept.setdefault((tuple(filler.shape), filler.device), torch.full_like(filler,
                                                                                  IGNORE))
        after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
        y[after] = values[:, None].expand_as(y)[after]
        return make_recall(filler, values, positions)[0], y
    return mr


def _abd_nan_kept(clone):  # e: a NaN-filled result kept per max_distance, never reset
    kept = {}

    def abd(logits, y, max_distance):
        out = kept.setdefault((max_distance, logits.dtype, logits.device),
                              logits.new_full((max_distance,), float("nan")))
        out = accuracy_by_distance(logits, y, max_distance, out)
        return out.clone() if clone else out
    return abd


case("mr_e3_y_kept", check_make_recall, _mr_y_kept(),
     r"earlier call.*y is a tensor kept between calls")
case("abd_e_nan_kept", check_accuracy_by_distance, _abd_nan_kept(False), BUFFER)
case("abd_e_nan_kept_cloned", check_accuracy_by_distance, _abd_nan_kept(True),
     r"NaN.*an earlier call.*kept between calls")


def cache_bytes(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return sum(k.nbytes + v.nbytes for k, v in pairs)


def _shapes(cache):
    if isinstance(cache, KVState):
        return ("kv", tuple(cache.kv.shape))
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return (type(cache).__name__, len(pairs), tuple(pairs[0][0].shape) if pairs else ())


def _cb_kept(key):
    kept = {}
    return lambda cache: kept.setdefault(key(cache), cache_bytes(cache))


def cb_on_cache(cache):  # g: the count stored on the cache object
    if not hasattr(cache, "_nbytes"):
        try:
            cache._nbytes = cache_bytes(cache)
        except AttributeError:
            return cache_bytes(cache)
    return cache._nbytes


case("cb_a_by_shapes", check_cache_bytes, _cb_kept(_shapes),
     r"same sizes.*kept between calls.*keyed on the shapes")
case("cb_c_by_id", check_cache_bytes, _cb_kept(id), r"grown in place.*before it grew.*id\(")
case("cb_g_on_cache", check_cache_bytes, cb_on_cache, r"grown in place.*cache\._nbytes")


def _mr_arange_kept():  # e2: an arange kept by shape (a constant): harmless
    kept = {}

    def mr(filler, values, positions):
        t = kept.setdefault((filler.size(1), filler.device),
                            torch.arange(filler.size(1), device=filler.device))
        x = filler.clone()
        x[torch.arange(filler.size(0), device=filler.device), positions] = values
        return x, torch.where(t > positions[:, None], values[:, None], IGNORE)
    return mr


def _abd_nan_template():  # a NaN template kept per length, filled in a clone: harmless
    kept = {}

    def abd(logits, y, max_distance):
        nan = kept.setdefault(max_distance, torch.full((max_distance,), float("nan")))
        return accuracy_by_distance(logits, y, max_distance,
                                    nan.clone().to(logits.dtype).to(logits.device))
    return abd


@functools.lru_cache(maxsize=None)
def _reach(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position}.get(memory, math.inf)


@functools.lru_cache(maxsize=None)
def _size(dtype):  # a pure function of the dtype
    return torch.empty(0, dtype=dtype).element_size()


def _cb_lru_size(cache):
    if isinstance(cache, KVState):
        return cache.kv.numel() * _size(cache.kv.dtype)
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return sum((k.numel() + v.numel()) * _size(k.dtype) for k, v in pairs)


RIGHT["mr_right"] = (check_make_recall, make_recall)
RIGHT["mr_arange_kept"] = (check_make_recall, _mr_arange_kept())
RIGHT["abd_right"] = (check_accuracy_by_distance, accuracy_by_distance)
RIGHT["abd_nan_template_cloned"] = (check_accuracy_by_distance, _abd_nan_template())
RIGHT["reach_lru_cache"] = (check_reach, _reach)
RIGHT["cb_right"] = (check_cache_bytes, cache_bytes)
RIGHT["cb_lru_element_size"] = (check_cache_bytes, _cb_lru_size)
RIGHT["cb_kept_by_shapes_and_dtype"] = (check_cache_bytes, _cb_kept(  # bytes follow them
    lambda c: (_shapes(c), (c.kv if isinstance(c, KVState) else tuple(c.kv[0]) if isinstance(
        c, XLCache) else c[0])[0].dtype)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
