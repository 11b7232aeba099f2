"""Trial 63, notebook 01 (a learner's trial of the five exercises).

Misnamed: a hand-written softmax whose sum, kept in a name without keepdim=True
(`den = e.sum(-1)`, then `e / den`), raised a raw broadcast error in Exercise 2, and in
Exercise 5 the notice blamed axes counted from the front on the 4-D heads: an operand
shaped like the other without one axis is now named, with keepdim=True as the fix.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def _heads(x, mha):
    b, t, _ = x.shape
    return (z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))


def _merged(mha, y):
    b, _, t, _ = y.shape
    return mha.out_proj(y.transpose(1, 2).reshape(b, t, -1))


def _sum_in_a_name(q, k, v, mask=None):
    e = (_scores(q, k, mask) - _scores(q, k, mask).amax(-1, keepdim=True)).exp()
    den = e.sum(-1)
    return (e / den).nan_to_num(0.0) @ v


def _weights_sum_in_a_name(q, k):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = (s - s.amax(-1, keepdim=True)).exp()
    total = e.sum(dim=-1)
    return e / total


def _mha_sum_in_a_name(x, mha, mask=None):
    q, k, v = _heads(x, mha)
    return _merged(mha, _sum_in_a_name(q, k, v, mask))


def _max_in_a_name(q, k, v, mask=None):
    s = _scores(q, k, mask)
    m = s.max(dim=-1).values
    e = (s - m).exp()
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0) @ v


KEEPDIM = r"`(den|total|m)` has shape .* without its last axis.*keepdim=True"
case("attention_sum_in_a_name", check_attention, _sum_in_a_name, KEEPDIM)
case("weights_sum_in_a_name", check_attention_weights, _weights_sum_in_a_name, KEEPDIM)
case("mha_sum_in_a_name", check_multi_head_attention, _mha_sum_in_a_name,
     r"^(?!.*count their axes).*`den` has shape .* without its last axis.*keepdim=True")
case("attention_max_in_a_name", check_attention, _max_in_a_name, KEEPDIM)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
