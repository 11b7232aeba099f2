"""Learner trial of stop 41, notebook 05: the package's own make_recall,
accuracy_by_distance or cache_bytes reached through a module (or handed in) passed,
where only the bare imported name was refused; the 03 token loop's routes are in
test_exercises_trial30b.

Trial 31 (b), the cases below: numpy scalars and a list of two refused; -1 for an empty
bin, a hard-coded number of bins, L + W and (L + 1) * W, .detach() taken for a copy,
T_RECALL hard-coded, L + 1 layers, D for D_h, // 1024 and buffer.k in cache_bytes; and in
notebook 03's token loop, no_grad around project_memory, the embedding written in place,
keys and values swapped, and the whole lists handed to a layer."""
import math

import numpy as np
import torch

import labnn.data.recall as recall
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack.custom_backward import check_value_gradients

from labnn.data.recall import IGNORE
from labnn.exercises.feedback_transformer import check_token_loop
from labnn.exercises.three_memories import check_reach, memory_limits
from labnn.exercises.three_memories.memory_limits import check_cache_bytes
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
REFERENCE = r"runs {}, the reference it is checked against"

case("make_recall_module", check_make_recall, lambda f, v, p: recall.make_recall(f, v, p),
     REFERENCE.format(r"labnn\.data\.recall\.make_recall"))
case("make_recall_handed_in", check_make_recall, recall.make_recall,
     REFERENCE.format(r"labnn\.data\.recall\.make_recall"))
case("accuracy_module", check_accuracy_by_distance,
     lambda logits, y, m: recall.accuracy_by_distance(logits, y, m),
     REFERENCE.format(r"labnn\.data\.recall\.accuracy_by_distance"))
case("cache_bytes_module", check_cache_bytes, lambda cache: memory_limits.cache_bytes(cache),
     REFERENCE.format(r"labnn\.exercises\.three_memories\.memory_limits\.cache_bytes"))



# ---- notebook 05, Exercise 1: reach ----
def _reach(window=lambda n, w: n * w, to=float):
    def reach(memory, n_layers, span, position=0):
        if memory == "feedback":
            return np.inf
        if memory == "XL":
            return to(n_layers * span + position)
        return to(window(n_layers, span))
    return reach


RIGHT["reach_numpy"] = (check_reach, _reach(to=np.int64))
RIGHT["reach_numpy_float"] = (check_reach, _reach(to=np.float64))
case("reach_tensor", check_reach, _reach(to=torch.tensor), r"Python number.*\.item\(\)")
case("reach_l_plus_w", check_reach, _reach(lambda n, w: n + w),
     r"^(?!.*off by one).*L \* W.*each layer reaches W further.*not L \+ W")
case("reach_l_plus_1", check_reach, _reach(lambda n, w: (n + 1) * w),
     r"\(L \+ 1\) \* W.*embedding is not a layer that attends")
case("reach_hard_coded", check_reach, _reach(lambda n, w: 8),  # 8 = L + W at L = 3, W = 5
     r"ignores n_layers and span")


# ---- notebook 05, Exercise 2: make_recall ----
def _y(filler, values, positions, t=None):
    after = torch.arange(filler.size(1) if t is None else t, device=filler.device) > positions[:, None]
    return torch.where(after, values[:, None], IGNORE)


def recall_list(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    return [x, _y(filler, values, positions)]


def recall_detach(filler, values, positions):
    x = filler.detach()
    x[torch.arange(len(x), device=filler.device), positions] = values
    return x, _y(filler, values, positions)


def recall_t32(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    return x, _y(filler, values, positions, t=32)


RIGHT["recall_list"] = (check_make_recall, recall_list)
case("recall_detach", check_make_recall, recall_detach,
     r"^(?!.*`x = filler`).*\.detach\(\).*shares.*storage.*\.clone\(\)")
case("recall_t32", check_make_recall, recall_t32,
     r"y has shape \[5, 32\].*number.*T = filler\.size\(1\)")


# ---- notebook 05, Exercise 3: accuracy_by_distance ----
def _accuracy(empty=math.nan, bins=None):
    def accuracy(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1)
        hits = (logits.argmax(-1) == y).to(logits.dtype)
        n = max_distance if bins is None else bins
        out = torch.full((n,), empty, dtype=logits.dtype)
        for k in range(1, n + 1):
            at = (d == k) & labelled
            if at.any():
                out[k - 1] = hits[at].mean()
        return out
    return accuracy


case("accuracy_minus_one", check_accuracy_by_distance, _accuracy(empty=-1.0),
     r"^(?!.*denominator).*-1.*no position lies that far.*NaN")
case("accuracy_ten_bins", check_accuracy_by_distance, _accuracy(bins=10),
     r"^(?!.*bincount).*max_distance = 3.*10 entries.*use max_distance, not a number")


# ---- notebook 05, Exercise 4: cache_bytes ----
def _layers(cache):
    return [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache


def _cache_bytes(per_layer=lambda k, v: k.nbytes + v.nbytes, extra=0, feedback=None):
    def cache_bytes(cache):
        if isinstance(cache, KVState):
            return cache.kv.nbytes if feedback is None else feedback(cache.kv)
        pairs = _layers(cache)
        return sum(per_layer(k, v) for k, v in pairs) + extra * per_layer(*pairs[0])
    return cache_bytes


def bytes_as_d(cache):
    return sum(2 * k.nbytes * k.size(1) for k, _ in _layers(cache))


def bytes_kib(cache):
    return _cache_bytes()(cache) // 1024


def bytes_buffer_k(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    if isinstance(cache, XLCache):
        return sum(b.k.nbytes + b.v.nbytes for b in cache.kv)
    return sum(k.nbytes + v.nbytes for k, v in cache)


case("bytes_l_plus_1", check_cache_bytes, _cache_bytes(extra=1), r"L \+ 1 layers.*embedding")
case("bytes_d", check_cache_bytes, bytes_as_d, r"D_h.*not D\b")
case("bytes_kib_int", check_cache_bytes, bytes_kib, r"KiB.*\(no division by 1,024\)")
case("bytes_feedback_fallback", check_cache_bytes,
     _cache_bytes(feedback=lambda kv: kv.nbytes + 8),
     r"^(?!.*every layer).*feedback.*one key and one value.*shared by all layers")
case("bytes_buffer_k", check_cache_bytes, bytes_buffer_k,
     r"KVBuffer has no \.k.*k, v = buffer.*keys_t.*values")


# ---- notebook 03, Exercise 4: the token loop ----
def _token_loop(project=None, swap=False, whole=False, in_place=False):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = map(list, model.project_memory(x[:, :0]))
        tops = []
        for t in range(tokens.size(1)):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                k, v = (keys, values) if whole else (keys[i], values[i])
                outs.append(layer(outs[-1], *((v, k) if swap else (k, v))))
            if in_place:
                x[:, t] = outs[-1]
            tops.append(outs[-1])
            m = model.mix(torch.stack(outs))
            nk, nv = (project or model.project_memory)(m[:, None])
            keys = [torch.cat(pair, 2) for pair in zip(keys, nk)]
            values = [torch.cat(pair, 2) for pair in zip(values, nv)]
        return model.head(torch.stack(tops, 1))
    return token_loop


def _no_grad_projection(model):
    def project(m):
        with torch.no_grad():
            return model.project_memory(m)
    return project


case("loop_no_grad", check_token_loop,
     lambda model, tokens: _token_loop(_no_grad_projection(model))(model, tokens),
     r"`model\.[\w.]+` and 6 more get no gradient")
case("loop_in_place", check_token_loop, _token_loop(in_place=True),
     r"x\[:, t\].*overwritten in place.*outs.*don't write into x")
case("loop_swapped", check_token_loop, _token_loop(swap=True),
     r"keys and values (are )?swapped")
case("loop_whole_lists", check_token_loop, _token_loop(whole=True),
     r"model\.layers\[0\] got the list.*keys\[i\], values\[i\]")

def value_gradients_short(read_grads):  # each read added one row short, out[:t]
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[:t] += g
    return total


case("value_gradients_short", check_value_gradients, value_gradients_short,
     r"t \+ 1 rows.*out\[:t \+ 1\]")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
