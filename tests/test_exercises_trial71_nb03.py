"""Trial 71, notebook 03 (a learner's trial and fix). Answers right on a CPU that fail on a GPU
only at a size or a value they branch on passed under LABNN_DEVICE=audit: the checks ran their
any-device rerun at their main sizes alone (and S = 0, s = 0), and an answer that special-cased
one memory key (v[:, :, 0] * torch.ones(1)), one layer, one sequence (B = 1), one token
(T = 1), one key of the bias table (s = 1) or large logits with a CPU tensor never met it.
Each checker now reruns on the meta device at those sizes too, and names the size. Weights
made as relu(w) / relu(w).sum() were named as one layer alone ('xs[w.argmax()]', 'the token's
embedding'), the checks' logits having one positive entry: a rerun with several positive
logits names the relu. cache_bytes counted in float32 passed (every size the check tried
was a few significant bits, which float32 holds): a round at (7, 1001, 12345, 3) names it; a
count in a torch int32 tensor got torch's raw 'cannot be converted to type int32' at 2**32
bytes: named. An attention returning torch.empty_like(q) for an empty memory was told 'right
at the check's sizes, not at these: no size written as a number' (fresh memory held zeros at
first), a memory vector summed into torch.empty_like(xs[0]) 'something kept between calls':
both run with empty-like tensors holding NaN (grading.fresh_values.uninitialised, moved there
from notebook 04's hidden_work) and are named.
"""
import numpy as np
import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mix(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


def _bias(table, s):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1))
    return table[:, d - 1]


def _attention(q, k, v, bias, weights=lambda w: w):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) ** 0.5 + bias
    return torch.einsum("bhs,bhsd->bhd", weights(scores.softmax(-1)), v)


_LOOP = feedback_token_loop(lambda model, outs: model.mix(torch.stack(outs)))
CPU = r"with {} mixes its inputs with a tensor made on the CPU .*by your torch\.{}\(\.\.\.\) " \
      r"without device="

# Exercise 1: a branch on one layer, one sequence or large logits, with a CPU tensor
case("memory_vector_one_layer_cpu_ones", check_memory_vector,
     lambda xs, w: xs[0] * torch.ones(1, dtype=xs.dtype) if xs.size(0) == 1 else _mix(xs, w),
     CPU.format("one layer", "ones"))
case("memory_vector_one_row_cpu_ones", check_memory_vector,
     lambda xs, w: _mix(xs, w) * torch.ones(1, 1, dtype=xs.dtype) if xs.size(1) == 1 else
     _mix(xs, w), CPU.format("B = 1", "ones"))


def _argmax_when_large(xs, w):
    if w.abs().max() > 50:  # large logits: all the weight on the largest
        p = torch.zeros(w.shape, dtype=w.dtype)
        p[w.argmax()] = 1
        return torch.einsum("l,lbd->bd", p, xs)
    return _mix(xs, w)


case("memory_vector_large_logits_cpu_one_hot", check_memory_vector, _argmax_when_large,
     CPU.format("large logits", "zeros"))
# Exercise 2: one key special-cased
case("relative_bias_one_key_cpu_ones", check_relative_bias,
     lambda table, s: table[:, :1] * torch.ones(1, 1, dtype=table.dtype) if s == 1 else
     _bias(table, s), r"relative_bias\(table, 1\) mixes its inputs with a tensor made on the "
                      r"CPU .*torch\.ones\(\.\.\.\) without device=")
RIGHT["relative_bias_cpu_index"] = (check_relative_bias, lambda table, s: table[:, torch.arange(
    s, 0, -1).clamp(max=table.size(1)) - 1])  # a CPU index of an input: a GPU takes it
# Exercise 3: one key, or one sequence of one head, special-cased
case("feedback_attention_one_key_cpu_ones", check_feedback_attention,
     lambda q, k, v, bias: v[:, :, 0] * torch.ones(1, 1, 1, dtype=v.dtype) if k.size(2) == 1
     else _attention(q, k, v, bias), CPU.format("S = 1", "ones"))
case("feedback_attention_one_key_cpu_weights", check_feedback_attention,
     lambda q, k, v, bias: _attention(q, k, v, bias, lambda p: torch.ones(
         p.shape, dtype=p.dtype) if p.size(-1) == 1 else p), CPU.format("S = 1", "ones"))
case("feedback_attention_one_head_cpu_ones", check_feedback_attention,
     lambda q, k, v, bias: _attention(q, k, v, bias) * (torch.ones(
         1, 1, 1, dtype=q.dtype) if q.size(0) == q.size(1) == 1 else 1),
     CPU.format("B = 1, H = 1", "ones"))
RIGHT["feedback_attention_one_key_cpu_number"] = (check_feedback_attention, lambda q, k, v, bias:
    v[:, :, 0] * torch.tensor(1.0, dtype=v.dtype) if k.size(2) == 1 else
    _attention(q, k, v, bias))  # a 0-dim CPU tensor: a number to a GPU
# Exercise 4: one token, or one sequence, special-cased
case("token_loop_one_token_cpu_ones", check_token_loop, lambda model, tokens: _LOOP(
    model, tokens) * (torch.ones(1, 1, 1) if tokens.size(1) == 1 else 1),
     CPU.format("T = 1", "ones"))
case("token_loop_one_row_cpu_ones", check_token_loop, lambda model, tokens: _LOOP(
    model, tokens) * (torch.ones(1, 1, 1) if tokens.size(0) == 1 else 1),
     CPU.format("B = 1", "ones"))

# relu(w) / relu(w).sum(): one positive logit in the checks' w, so one layer alone
case("memory_vector_relu_normalised", check_memory_vector, lambda xs, w: torch.einsum(
    "l,lbd->bd", w.relu() / w.relu().sum(), xs), r"relu\(w\) / relu\(w\)\.sum\(\).*softmax\(w\)")
case("token_loop_relu_normalised", check_token_loop, feedback_token_loop(
    lambda model, outs: torch.einsum("l,lbd->bd", model.mix.logits.relu()
                                     / model.mix.logits.relu().sum(), torch.stack(outs))),
     r"relu\(model\.mix\.logits\) / relu\(model\.mix\.logits\)\.sum\(\)")

# uninitialised memory: fresh memory often holds zeros, so the first call passed
case("feedback_attention_empty_like_for_no_keys", check_feedback_attention,
     lambda q, k, v, bias: torch.empty_like(q) if k.size(2) == 0 else _attention(q, k, v, bias),
     r"with no memory \(S = 0, float64\) starts from torch\.empty_like: .*torch\.zeros_like\(q\)")


def _summed_into_empty(xs, w):
    m, p = torch.empty_like(xs[0]), w.softmax(0)
    for layer in range(xs.size(0)):
        m = m + p[layer] * xs[layer]
    return m


case("memory_vector_sum_into_empty_like", check_memory_vector, _summed_into_empty,
     r"memory_vector\(xs, w\) starts from torch\.empty_like: its memory holds whatever")
RIGHT["memory_vector_written_into_empty"] = (check_memory_vector, lambda xs, w: torch.empty_like(
    xs[0]).copy_(_mix(xs, w)))

# Exercise 5: counts in float32, or in a torch int32 tensor
case("cache_bytes_numpy_float32", check_cache_bytes, lambda n, d, t, b: tuple(
    int(x) for x in np.array([2 * n * d * t * b, 2 * d * t * b], dtype=np.float32)),
     r"cache_bytes\(7, 1001, 12345, 3\) gives .*float32 rounds a whole number past 2\*\*24")
case("cache_bytes_torch_float_prod", check_cache_bytes, lambda n, d, t, b: (
    int(torch.tensor([2.0, n, d, t, b]).prod()), int(torch.tensor([2.0, d, t, b]).prod())),
     r"float32 rounds a whole number")
case("cache_bytes_torch_int32", check_cache_bytes, lambda n, d, t, b: tuple(
    int(x) for x in torch.tensor([2 * n * d * t, 2 * d * t], dtype=torch.int32) * b),
     r"your count overflows int32 .*a count in a torch int32 tensor; use Python ints")
RIGHT["cache_bytes_numpy_int64"] = (check_cache_bytes, lambda n, d, t, b: (
    np.int64(2 * n * d * t * b), np.int64(2 * d * t * b)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
