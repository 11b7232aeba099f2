"""Learner trial of stop 40, notebook 03, and its like in 02 and 05: answers right only
at the checks' own sizes (a head width's square root as 2.0 or sqrt(8), zeros of
[2, 3, 4], a table width of 5, a mix of 4 layers, a loop written for 2 layers, a shift
reshaped to [..., 4, 9], recall rows arange(5)), a step that runs on the previous token,
and the right answers these checks must still accept."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.transformer_xl.relative_scores import (check_relative_scores,
                                                            check_relative_shift)
from labnn.xl.relative_attention import relative_shift

from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes, check_token_loop

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
SIZES = r"right at the check's sizes, not at these"


# --- Exercise 1, the memory vector
def mv_right(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


def mv_four_layers(xs, w):  # the mix written out for the check's L + 1 = 4
    p = w.softmax(0)
    return p[0] * xs[0] + p[1] * xs[1] + p[2] * xs[2] + p[3] * xs[3]


def mv_view(xs, w):  # the batch and width written as numbers
    return (w.softmax(0).view(4, 1, 1) * xs).sum(0).view(2, 12)


RIGHT["mv"] = (check_memory_vector, mv_right)
case("mv_four_layers", check_memory_vector, mv_four_layers, SIZES + r".*L \+ 1 = 4")
case("mv_view", check_memory_vector, mv_view, SIZES)


# --- Exercise 2, the relative bias
def rb_right(table, s):
    return table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1]


def rb_five(table, s):  # max_distance = 5 written as a number
    return table[:, torch.arange(s, 0, -1).clamp(max=5) - 1]


RIGHT["rb"] = (check_relative_bias, rb_right)
case("rb_five", check_relative_bias, rb_five, SIZES + r".*table\.size\(1\)")


# --- Exercise 3, attention over the memory
def att(q, k, v, bias, scale=None, empty=None):
    if k.size(2) == 0:
        return empty(q) if empty else torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / (scale or math.sqrt(q.size(-1)))
    return torch.einsum("bhs,bhsd->bhd", (scores + bias).softmax(-1), v)


RIGHT["att"] = (check_feedback_attention, att)
RIGHT["att_new_zeros"] = (check_feedback_attention,
                          lambda q, k, v, b: att(q, k, v, b, empty=lambda q: q.new_zeros(q.shape)))
case("att_two", check_feedback_attention, lambda q, k, v, b: att(q, k, v, b, scale=2.0),
     SIZES + r".*sqrt\(q\.size\(-1\)\)")
case("att_zeros_234", check_feedback_attention,
     lambda q, k, v, b: att(q, k, v, b, empty=lambda q: torch.zeros(2, 3, 4, dtype=q.dtype)),
     r"S = 0.*" + SIZES + r".*zeros_like")
case("att_zeros_234_float32", check_feedback_attention,
     lambda q, k, v, b: att(q, k, v, b, empty=lambda q: torch.zeros(2, 3, 4)),
     r"zeros are torch\.float32, q is torch\.float64")


# --- Exercise 4, the token loop
def loop(model, tokens, shift=0, layers=None):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t - shift]]
        for i in range(layers or len(model.layers)):
            outs.append(model.layers[i](outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        new_keys, new_values = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat(pair, dim=2) for pair in zip(keys, new_keys)]
        values = [torch.cat(pair, dim=2) for pair in zip(values, new_values)]
    return model.head(torch.stack(tops, dim=1))


RIGHT["loop"] = (check_token_loop, loop)
case("loop_two_layers", check_token_loop, lambda m, t: loop(m, t, layers=2),
     SIZES + r".*model\.layers")
case("loop_previous_token", check_token_loop, lambda m, t: loop(m, t, shift=1),
     r"previous token's embedding, x\[:, t - 1\]")


# --- Exercise 5, the bytes of the caches
def cb_list(n_layers, d_model, n_tokens, size):  # the two ints in a list: right
    return [2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size]


RIGHT["cb_list"] = (check_cache_bytes, cb_list)


# --- 02, Exercises 4 and 5: the shift and the relative scores
def shift(x, t=None, s=None):
    *lead, t0, s0 = x.shape
    t, s = t or t0, s or s0
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def scores(q, k, r, u, v, d_h=None):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    position = relative_shift(torch.einsum("bhid,rhd->bhir", q + v[:, None], r))
    return (content + position) / math.sqrt(d_h or q.size(-1))


RIGHT["shift"] = (check_relative_shift, shift)
RIGHT["scores"] = (check_relative_scores, scores)
case("shift_4_9", check_relative_shift, lambda x: shift(x, 4, 9), SIZES + r".*x\.shape")
case("scores_sqrt8", check_relative_scores, lambda *a: scores(*a, d_h=8),
     SIZES + r".*sqrt\(q\.size\(-1\)\)")


# --- 05, Exercise 2: the delayed-recall examples
def recall(filler, values, positions, n=None, t=None):
    x = filler.clone()
    x[torch.arange(n or filler.size(0), device=filler.device), positions] = values
    after = torch.arange(t or filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


RIGHT["recall"] = (check_make_recall, recall)
case("recall_5_9", check_make_recall, lambda *a: recall(*a, n=5, t=9), SIZES + r".*N and T")
case("recall_t9", check_make_recall, lambda *a: recall(*a, t=9), r"y of make_recall.*" + SIZES)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
