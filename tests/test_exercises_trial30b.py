"""Learner trial of stop 41, notebook 03: the reference's loop called by another route
(`model._forward`, the unbound `FeedbackTransformer.forward`, `feedback_step`), the steps
concatenated along the batch axis, the attention weights detached, a weight turned into a
Python number."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import check_token_loop
from labnn.feedback.layer import feedback_step
from labnn.feedback.model import FeedbackTransformer

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
REFERENCE = r"(runs|calls) model\.(_forward|forward).*would pass without implementing"


def loop(model, tokens, logits=None, step=None):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        if step:  # the package's own step
            top, m = feedback_step(model.layers, model.mix, x[:, t], keys, values)
        else:
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], keys[i], values[i]))
            top, m = outs[-1], model.mix(torch.stack(outs))
        tops.append(top)
        new_keys, new_values = model.project_memory(m[:, None])
        keys = [torch.cat(pair, dim=2) for pair in zip(keys, new_keys)]
        values = [torch.cat(pair, dim=2) for pair in zip(values, new_values)]
    return logits(model, tops, tokens) if logits else model.head(torch.stack(tops, dim=1))


RIGHT["loop"] = (check_token_loop, loop)
case("private_forward", check_token_loop, lambda m, t: m._forward(t, None)[0], REFERENCE)
case("unbound_forward", check_token_loop,
     lambda m, t: FeedbackTransformer.forward(m, t)[0], REFERENCE)
case("unbound_private_forward", check_token_loop,
     lambda m, t: FeedbackTransformer._forward(m, t, None)[0], REFERENCE)
case("feedback_step", check_token_loop, lambda m, t: loop(m, t, step=True),
     r"runs labnn\.feedback\.layer\.feedback_step")
case("cat_steps", check_token_loop,
     lambda m, t: loop(m, t, logits=lambda m, tops, t: m.head(torch.cat(tops, 0))),
     r"no reshape undoes.*torch\.stack\(pieces, dim=1\)")
case("cat_steps_reshaped", check_token_loop,
     lambda m, t: loop(m, t, logits=lambda m, tops, t: m.head(torch.cat(tops, 0)).reshape(
         t.size(0), t.size(1), -1)), r"\(t, b\) order.*torch\.stack\(tops, dim=1\)")
case("loop_probabilities", check_token_loop,
     lambda m, t: loop(m, t, logits=lambda m, tops, t: m.head(torch.stack(tops, 1)).softmax(-1)),
     r"returns probabilities")
case("loop_head_on_embedding", check_token_loop,
     lambda m, t: loop(m, t, logits=lambda m, tops, t: m.head(m.embed(t))),
     r"model\.head reads the embeddings")


def att(q, k, v, bias, detach_weights=False, weights=None):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    w = weights(scores, bias) if weights else (scores + bias).softmax(-1)
    return torch.einsum("bhs,bhsd->bhd", w.detach() if detach_weights else w, v)


def att_untransposed(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = (q.unsqueeze(2) @ k).squeeze(2) / math.sqrt(q.size(-1)) + bias
    return (scores.softmax(-1).unsqueeze(2) @ v).squeeze(2)


def att_squeeze_all(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = (q.unsqueeze(2) @ k.transpose(-1, -2)).squeeze() / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("att_untransposed", check_feedback_attention, att_untransposed,
     r"needs the keys transposed.*k\.transpose\(-1, -2\)")
case("att_squeeze_all", check_feedback_attention, att_squeeze_all,
     r"B = 1, H = 1.*\.squeeze\(\) with no dim.*\.squeeze\(2\)")
case("att_no_softmax", check_feedback_attention,
     lambda *a: att(*a, weights=lambda s, b: s + b), r"softmax over the keys first")
case("att_log_softmax", check_feedback_attention,
     lambda *a: att(*a, weights=lambda s, b: (s + b).log_softmax(-1)), r"log_softmax")
case("att_softmax_size1", check_feedback_attention,
     lambda *a: att(*a, weights=lambda s, b: (s + b)[:, :, None].softmax(2)[:, :, 0]),
     r"every key got weight 1.*size-1 axis")
case("att_bias_times", check_feedback_attention,
     lambda *a: att(*a, weights=lambda s, b: (s * b).softmax(-1)), r"bias multiplies")


case("weights_detached", check_feedback_attention,
     lambda *a: att(*a, detach_weights=True),
     r"`q`, `k` and `bias` get no gradient.*computed from them, detached")


def mv_numbers(xs, w):  # each weight a Python number
    return sum(float(p) * xs[l] for l, p in enumerate(w.softmax(0)))


case("mv_largest_only", check_memory_vector, lambda xs, w: xs[w.argmax()],
     r"one layer of the largest weight")
case("rb_last_entry_everywhere", check_relative_bias,
     lambda table, s: table[:, -1:].expand(-1, s), r"every key gets the last entry")
case("mv_numbers", check_memory_vector, mv_numbers, r"`w` gets no gradient.*float\(\.\.\.\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
