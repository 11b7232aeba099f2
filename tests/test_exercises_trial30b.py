"""Learner trial of stop 41, notebook 03: the reference's loop called by another route
(`model._forward`, the unbound `FeedbackTransformer.forward`, `feedback_step`), the steps
concatenated along the batch axis, the attention weights detached, a weight turned into a
Python number."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer.memory_vector import (check_feedback_attention,
                                                                check_memory_vector)
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


def att(q, k, v, bias, detach_weights=False):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    weights = scores.softmax(-1)
    return torch.einsum("bhs,bhsd->bhd", weights.detach() if detach_weights else weights, v)


case("weights_detached", check_feedback_attention,
     lambda *a: att(*a, detach_weights=True),
     r"`q`, `k` and `bias` get no gradient.*computed from them, detached")


def mv_numbers(xs, w):  # each weight a Python number
    return sum(float(p) * xs[l] for l, p in enumerate(w.softmax(0)))


case("mv_numbers", check_memory_vector, mv_numbers, r"`w` gets no gradient.*float\(\.\.\.\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
