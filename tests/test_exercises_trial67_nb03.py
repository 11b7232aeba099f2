"""Trial 67, notebook 03 (a learner's trial and fix). Dropout on the mix weights was told
"the embedding, layer 3 no weight" in `memory_vector` and, in the token loop, that the loop
"mixes the batch rows"; dropout on the attention weights got "differs": each is named as
something random now. Mix weights computed per batch row from its content (a softmax of
w plus a score of each layer's output) got "differs" in `memory_vector` and "keeps
something between calls" in the loop; a logsumexp over the layers "differs" or "never calls
model.mix". A memory vector written before the top layer ran (its entry the layer below)
was said only not to be the stack of the outputs. In the attention, the bias regrouped with
bias.reshape(S, H).T and q added to the output (a residual) got "differs"; a relative bias
one distance too near (entry d - 2, clamped at 0) got "differs".
"""
import math

import torch
import torch.nn.functional as F
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_feedback_attention, check_memory_vector,
                                                  check_relative_bias, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mix(weights, layers):
    return torch.einsum("l,lbd->bd", weights, layers)


def _content(w, xs):  # each row's weights from its own layers: w plus a score of each
    return (w[:, None] + torch.einsum("lbd,bd->lb", xs, xs[-1]) / xs.size(-1) ** 0.5).softmax(0)


RANDOM = r"random.*dropout"
CONTENT = r"differ between the batch rows.*softmax\(.*\) alone"
# Exercise 1: dropout on the weights, weights from each row's content, a logsumexp
case("memory_vector_dropout", check_memory_vector,
     lambda xs, w: _mix(F.dropout(w.softmax(0), 0.1), xs), RANDOM)
case("memory_vector_content_weights", check_memory_vector,
     lambda xs, w: (_content(w, xs)[..., None] * xs).sum(0), CONTENT)
case("memory_vector_logsumexp", check_memory_vector,
     lambda xs, w: torch.logsumexp(w[:, None, None] + xs, 0), r"logsumexp.*weighted SUM")
case("memory_vector_logsumexp_log_softmax", check_memory_vector,
     lambda xs, w: torch.logsumexp(w.log_softmax(0)[:, None, None] + xs, 0),
     r"logsumexp.*weighted SUM")
case("memory_vector_minus_mean", check_memory_vector,  # bounds nothing: was told exp(w)
     lambda xs, w: _mix((w - w.mean()).exp() / (w - w.mean()).exp().sum(), xs),
     r"exp\(w - w\.mean\(\)\).*inf.*subtracts the max")
RIGHT["memory_vector_dropout_eval"] = (check_memory_vector, lambda xs, w: _mix(
    F.dropout(w.softmax(0), 0.1, training=False), xs))


# Exercise 2: one distance too near
def _near(table, s):
    d = torch.arange(s, 0, -1, device=table.device) - 1  # s - 1 - j: the last key at 0
    return table[:, (d - 1).clamp(min=0, max=table.size(1) - 1)]


case("relative_bias_one_too_near", check_relative_bias, _near, r"distance s - j - 1")


# Exercise 3: dropout on the weights, the bias regrouped, a residual
def _attention(weights=lambda s: s.softmax(-1), bias_as=lambda b: b, out=lambda o, q: o):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias_as(bias)
        return out(torch.einsum("bhs,bhsd->bhd", weights(s), v), q)
    return feedback_attention


case("feedback_attention_dropout", check_feedback_attention,
     _attention(weights=lambda s: F.dropout(s.softmax(-1), 0.1)), RANDOM)
case("feedback_attention_bias_reshape_t", check_feedback_attention,
     _attention(bias_as=lambda b: b.reshape(b.size(1), b.size(0)).T), r"reshape\(S, H\)\.T")
case("feedback_attention_plus_q", check_feedback_attention,
     _attention(out=lambda o, q: o + q), r"adds q.*residual")


# Exercise 4: dropout on the mix weights, weights from the content, m before the top layer
case("token_loop_mix_dropout", check_token_loop, feedback_token_loop(lambda model, outs: _mix(
    F.dropout(model.mix.logits.softmax(0), 0.1), torch.stack(outs))), RANDOM)
case("token_loop_content_weights", check_token_loop, feedback_token_loop(
    lambda model, outs: (_content(model.mix.logits, torch.stack(outs))[..., None]
                         * torch.stack(outs)).sum(0)), CONTENT)
case("token_loop_logsumexp", check_token_loop, feedback_token_loop(
    lambda model, outs: torch.logsumexp(model.mix.logits[:, None, None] + torch.stack(outs), 0)),
     r"logsumexp.*weighted SUM")
case("token_loop_mix_before_top_layer", check_token_loop, feedback_token_loop(
    lambda model, outs: model.mix(torch.stack(outs[:-1] + outs[-2:-1]))),
     r"last entry.*layer L - 1.*before the top layer ran")


# memory vectors are now checked where the logits pass: a memory projected anew each step is right
def _reprojected(model, tokens):
    x = model.embed(tokens)
    memory = x[:, :0]
    keys, values = model.project_memory(memory)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        m = _mix(model.mix.logits.softmax(0), torch.stack(outs))
        memory = torch.cat([memory, m[:, None]], 1)
        keys, values = model.project_memory(memory)
    return model.head(torch.stack(tops, 1))


RIGHT["token_loop_memory_reprojected"] = (check_token_loop, _reprojected)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
