"""Trial 66, notebook 03 (a learner's trial and fix). A token loop that runs no layer at
step t = 0 (the memory is empty, so it passed the embedding on, or only its feed-forward)
was told "your first layer read 1 memory key: the memory starts empty", which it had not
done (the feed-forward-only loop even passed the first model, whose attention biases are
zero, and was then told it "keeps something between calls"). A memory vector right at step
0 only (weights that change with t, a running mean of the memory vectors, the previous
step's outputs mixed) got "differ from step t = 1 on" (or "never calls model.mix"). A mix
reduced with amax, or put through a layer norm, got "differs from the reference" in
`memory_vector` and "differ from step t = 1 on" or "never calls model.mix" in the loop;
relu(w) as weights was told the layers had "no weight"; weights summing to 1.004 were said
to "sum to 1, not one"; exp(w) patched with nan_to_num got "differs" with large logits. In
the attention, head 0's bias added to every head got "differs", a mean over the keys "a
constant factor". A feedback cache of 2·(L + 1)·D numbers per token (a key and a value per
entry of the mix) got only "got ..., expected ...". A `cache_bytes` that returns NumPy
integers is right: the sizes are whole numbers of bytes (`expect_two_ints`), and it stays
accepted.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mix(weights, layers):
    return torch.einsum("l,lbd->bd", weights, layers)


# Exercise 1: the mix reduced or normalised otherwise, other weights
case("memory_vector_amax", check_memory_vector,
     lambda xs, w: (w.softmax(0)[:, None, None] * xs).amax(0), r"amax.*SUM")
case("memory_vector_layer_norm", check_memory_vector,
     lambda xs, w: F.layer_norm(_mix(w.softmax(0), xs), xs.shape[-1:]), r"layer norm")
case("memory_vector_relu_weights", check_memory_vector, lambda xs, w: _mix(w.relu(), xs),
     r"^(?!.*no weight).*relu\(w\)")
case("memory_vector_softmax_plus_eps", check_memory_vector,
     lambda xs, w: _mix(w.softmax(0) + 1e-3, xs), r"sum to 1\.00\d+, not one")
case("memory_vector_exp_nan_to_num", check_memory_vector,
     lambda xs, w: _mix(torch.nan_to_num(w.exp() / w.exp().sum()), xs),
     r"large logits.*overflow.*nan_to_num")


# Exercise 4: a step 0 without layers, the memory vector reduced otherwise
def _step0(first):
    return feedback_token_loop(lambda model, outs: model.mix(torch.stack(outs)),
                               lambda layer, t, h, k, v: first(layer, h) if t == 0 else
                               layer(h, k, v))


STEP0 = r"^(?!.*read 1 memory key)(?!.*between calls).*no layer at step t = 0"
case("token_loop_step0_layers_skipped", check_token_loop, _step0(lambda layer, h: h), STEP0)
case("token_loop_step0_feed_forward_only", check_token_loop,
     _step0(lambda layer, h: h + layer.ff(layer.norm_ff(h))), STEP0)
_loop = feedback_token_loop
case("token_loop_mix_amax", check_token_loop, _loop(lambda model, outs: (
    model.mix.logits.softmax(0)[:, None, None] * torch.stack(outs)).amax(0)), r"amax.*SUM")
case("token_loop_mix_layer_norm", check_token_loop, _loop(lambda model, outs: F.layer_norm(
    model.mix(torch.stack(outs)), outs[0].shape[-1:])), r"layer norm.*model\.norm_mem")
case("token_loop_mix_relu", check_token_loop, _loop(lambda model, outs: _mix(
    model.mix.logits.relu(), torch.stack(outs))), r"^(?!.*no weight).*relu\(model\.mix\.logits")



def _per_step(mix):  # the memory vector of step t from its outputs and the earlier ones'
    def token_loop(model, tokens):
        written = []
        return feedback_token_loop(lambda model, outs: written.append(outs) or mix(
            model, written))(model, tokens)
    return token_loop


case("token_loop_mix_weights_change_with_t", check_token_loop, _per_step(
    lambda model, steps: _mix((model.mix.logits * len(steps)).softmax(0),
                              torch.stack(steps[-1]))),
     r"m_1 \(m_0 is right\).*softmax\(model\.mix\.logits \* 2\).*not at every step")
case("token_loop_memory_running_mean", check_token_loop, _per_step(
    lambda model, steps: torch.stack([model.mix(torch.stack(o)) for o in steps]).mean(0)),
     r"m_1 .*no mix of step 1's own outputs, whatever the weights.*running mean")
case("token_loop_memory_of_previous_step", check_token_loop, _per_step(
    lambda model, steps: model.mix(torch.stack(steps[-2 if len(steps) > 1 else -1]))),
     r"m_1 .*no mix of step 1's own outputs")


# Exercise 3: one head's bias for every head
def _attention(head_bias):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + head_bias(bias)
        return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)
    return feedback_attention


case("feedback_attention_head0_bias", check_feedback_attention,
     _attention(lambda bias: bias[0]), r"head 0's bias")


def _mean_over_keys(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return (s.softmax(-1)[..., None] * v).mean(2)


case("feedback_attention_mean_over_keys", check_feedback_attention, _mean_over_keys,
     r"averaged the weighted values over the keys.*SUM over the keys")

# Exercise 5: a key and a value for each entry of the mix; NumPy integers are whole numbers of bytes
case("cache_bytes_feedback_per_mixed_entry", check_cache_bytes,
     lambda n_layers, d, n, b: (2 * n_layers * d * n * b, 2 * (n_layers + 1) * d * n * b),
     r"2·\(n_layers \+ 1\)·d_model numbers per token")
RIGHT["cache_bytes_numpy_int64"] = (check_cache_bytes, lambda n_layers, d, n, b: (
    np.int64(2 * n_layers * d * n * b), np.int64(2 * d * n * b)))
RIGHT["cache_bytes_numpy_prod"] = (check_cache_bytes, lambda n_layers, d, n, b: (
    np.prod([2, n_layers, d, n, b], dtype=np.int64), np.prod([2, d, n, b], dtype=np.int64)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
