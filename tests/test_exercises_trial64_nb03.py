"""Trial 64, notebook 03 (a learner's trial): four mistakes known from earlier trials got only
a generic message: q·k divided by log(d_head) instead of sqrt(d_head) ("differs from the
reference"), an einsum that gives the batch axis of k (or q, or v) its own letter and so
sums over it, a cache_bytes counting n_layers + 2 layers, and, in the token loop, the layer
logits passed through exp() before their softmax ("your loop never calls model.mix").
Misnamed: q·k divided by log2(d_head) or by d ** 1/2 (Python reads (d ** 1) / 2), both equal
to sqrt(d_head) at the check's D_h = 4, were told "no size written as a number" at D_h = 9;
2·sqrt(d_head) was told "you divided q·k by d_head" (4 at D_h = 4) and sqrt(d_head - 1) "by
sqrt(H)" (sqrt(3)). An einsum that swaps the batch and head letters of k or v
('bhd,hbsd->bhs') crashed with torch's bare error (the check never has B = H). A feedback
cache of a fixed 4·D numbers per token was told "you counted L keys and one value" (L + 1 =
4 at the check's L = 3). Unnamed: a relative bias of table.exp(), a memory vector with
softmax(-w), or with softmax applied twice, sigmoid attention weights, a reshape where a
permute was meant, a token loop whose memory is averaged over the batch rows.
"""
import math

import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(scale=math.sqrt, scores="bhd,bhsd->bhs", mix="bhs,bhsd->bhd"):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum(scores, q, k) / scale(q.size(-1)) + bias
        return torch.einsum(mix, s.softmax(-1), v)
    return feedback_attention


# Exercise 3: the scale a function of d_head other than its square root
case("feedback_attention_log_scale", check_feedback_attention, _attention(math.log),
     r"divided q·k by log\(d_head\)")
case("feedback_attention_log_scale_tensor", check_feedback_attention, _attention(
    lambda d: torch.tensor(float(d), dtype=torch.float64).log().item()),
     r"divided q·k by log\(d_head\)")
case("feedback_attention_log2_scale", check_feedback_attention, _attention(math.log2),
     r"^(?!.*written as a number).*log2\(d_head\)")
case("feedback_attention_log10_scale", check_feedback_attention, _attention(math.log10),
     r"log10\(d_head\)")
case("feedback_attention_power_precedence", check_feedback_attention,
     _attention(lambda d: d ** 1 / 2),
     r"^(?!.*written as a number).*d_head / 2.*d \*\* 0\.5")
case("feedback_attention_twice_sqrt", check_feedback_attention,
     _attention(lambda d: 2 * math.sqrt(d)), r"^(?!.*by d_head:).*2·sqrt\(d_head\)")
case("feedback_attention_sqrt_d_minus_1", check_feedback_attention,
     _attention(lambda d: math.sqrt(d - 1)), r"^(?!.*sqrt\(H\)).*sqrt\(d_head - 1\)")
RIGHT["feedback_attention_rsqrt_times"] = (check_feedback_attention, _attention(
    lambda d: 1 / (1 / math.sqrt(d))))


# Exercise 3: an einsum with a letter of its own for a batch axis, which it sums over
case("feedback_attention_keys_batch_summed", check_feedback_attention,
     _attention(scores="bhd,chsd->bhs"),
     r"sums the keys k over the batch.*'bhd,chsd->bhs'.*'bhd,bhsd->bhs'")
case("feedback_attention_query_batch_summed", check_feedback_attention,
     _attention(scores="chd,bhsd->bhs"),
     r"sums the query q over the batch.*'chd,bhsd->bhs'.*'bhd,bhsd->bhs'")
case("feedback_attention_values_batch_summed", check_feedback_attention,
     _attention(mix="bhs,chsd->bhd"),
     r"sums the values v over the batch.*'bhs,chsd->bhd'.*'bhs,bhsd->bhd'")


case("feedback_attention_keys_batch_head_swapped", check_feedback_attention,
     _attention(scores="bhd,hbsd->bhs"), r"reads k as \[H, B, S, D_h\].*'bhd,bhsd->bhs'")
case("feedback_attention_values_batch_head_swapped", check_feedback_attention,
     _attention(mix="bhs,hbsd->bhd"), r"reads v as \[H, B, S, D_h\].*'bhs,bhsd->bhd'")


# Exercise 5: a layer count off by more than one
case("cache_bytes_l_plus_2_layers", check_cache_bytes,
     lambda n_layers, d, n, b: (2 * (n_layers + 2) * d * n * b, 2 * d * n * b),
     r"n_layers \+ 2 = 5 layers")
case("cache_bytes_l_plus_2_no_factor_2", check_cache_bytes,
     lambda n_layers, d, n, b: ((n_layers + 2) * d * n * b, 2 * d * n * b),
     r"\(n_layers \+ 2\)·d_model = 5·128 numbers per token")
case("cache_bytes_l_plus_3_layers", check_cache_bytes,
     lambda n_layers, d, n, b: (2 * (n_layers + 3) * d * n * b, 2 * d * n * b),
     r"n_layers \+ 3 = 6 layers.*also with n_layers = 6")


case("cache_bytes_feedback_4d_fixed", check_cache_bytes,
     lambda n_layers, d, n, b: (2 * n_layers * d * n * b, 4 * d * n * b),
     r"^(?!.*L keys and one value).*4·d_model numbers per token.*also with n_layers = 6")


# Exercise 2 and 1: a table or logits transformed before use
def _bias(table, s):
    return table[:, torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)) - 1]


case("relative_bias_table_exp", check_relative_bias, lambda table, s: _bias(table.exp(), s),
     r"exp\(\).*the table holds the biases themselves")
case("memory_vector_softmax_of_minus_w", check_memory_vector,
     lambda xs, w: torch.einsum("l,lbd->bd", (-w).softmax(0), xs), r"softmax\(-w\)")
case("memory_vector_softmax_twice", check_memory_vector,
     lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(0).softmax(0), xs),
     r"softmax twice")
RIGHT["memory_vector_softmax_then_exp_normalised"] = (check_memory_vector, lambda xs, w: (
    torch.einsum("l,lbd->bd", (w - w.max()).exp() / (w - w.max()).exp().sum(), xs)))


# Exercise 4: the layer logits through exp() before their softmax, in the token loop
def _loop(weights=lambda w: w.softmax(0)):
    return feedback_token_loop(lambda model, outs: torch.einsum(
        "l,lbd->bd", weights(model.mix.logits), torch.stack(outs)))


case("token_loop_mix_logits_exp", check_token_loop,
     _loop(lambda w: w.exp().softmax(0)),
     r"exp\(\) before the softmax.*model\.mix\(torch\.stack\(outs\)\)")
RIGHT["token_loop_own_mix"] = (check_token_loop, _loop())


# Exercise 4: a memory vector averaged over the batch rows
_batch_mean = feedback_token_loop(
    lambda model, outs: model.mix(torch.stack(outs)).mean(0, keepdim=True).expand_as(outs[0]))


case("token_loop_memory_mean_over_batch", check_token_loop, _batch_mean,
     r"row 0 change when only the tokens of the other rows do")


# Exercise 3 and 1: sigmoid weights; a reshape where a permute was meant
case("feedback_attention_sigmoid_weights", check_feedback_attention,
     lambda q, k, v, bias: torch.zeros_like(q) if k.size(2) == 0 else torch.einsum(
         "bhs,bhsd->bhd", (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
                           + bias).sigmoid(), v),
     r"sigmoid.*do not sum to one.*softmax")
case("memory_vector_reshape_for_permute", check_memory_vector,
     lambda xs, w: (xs.reshape(xs.size(1), xs.size(0), -1) * w.softmax(0)[:, None]).sum(1),
     r"reshape.*permute")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
