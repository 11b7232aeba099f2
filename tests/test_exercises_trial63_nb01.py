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
                                            check_causal_mask, check_heads,
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


# Misnamed: Exercise 5 with the mask applied after the softmax, then renormalised with the
# sum clamped to 1e-12, was told that its fully masked row is NaN in float16 (that clamp
# is 0 there): the round whose masked key scores 200 above the allowed ones, which names
# the mask applied after the softmax (as Exercise 2 does), now runs before the float16 one.
def _after_softmax(q, k, v, mask=None):
    w = _scores(q, k, None).softmax(-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-12)
    return w @ v


def _mha_after_softmax(x, mha, mask=None):
    q, k, v = _heads(x, mha)
    return _merged(mha, _after_softmax(q, k, v, mask))


case("mha_mask_after_softmax_clamped", check_multi_head_attention, _mha_after_softmax,
     r"^(?!.*float16).*200 above.*Mask the scores before the softmax")
case("attention_mask_after_softmax_clamped", check_attention, _after_softmax,
     r"^(?!.*float16).*200 above.*Mask the scores before the softmax")


# Misnamed: a hand-written softmax that masks right, with its sum kept from 0 by an eps
# float16 cannot hold (clamp_min(1e-12), + 1e-12: both 0 there, so the empty row's 0 / 0
# is NaN), was told that a fill like -1e9 turns into -inf in float16: the eps is named.
def _by_hand(guard):
    def attention(q, k, v, mask=None):
        s = _scores(q, k, mask)
        m = s.amax(-1, keepdim=True).detach()
        e = (s - torch.where(m.isfinite(), m, torch.zeros_like(m))).exp()
        return e / guard(e.sum(-1, keepdim=True)) @ v
    return attention


def _mha_by_hand(guard):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = _heads(x, mha)
        return _merged(mha, _by_hand(guard)(q, k, v, mask))
    return multi_head_attention


HALF_EPS = r"^(?!.*-1e9).*1e-12 .*rounds to 0 in float16.*0 / 0"
case("attention_clamp_1e-12", check_attention, _by_hand(lambda z: z.clamp_min(1e-12)),
     HALF_EPS)
case("attention_plus_1e-12", check_attention, _by_hand(lambda z: z + 1e-12), HALF_EPS)
case("mha_clamp_1e-12", check_multi_head_attention,
     _mha_by_hand(lambda z: z.clamp(min=1e-12)), HALF_EPS)
case("attention_max_1e-30", check_attention,
     _by_hand(lambda z: torch.clamp(z, 1e-30)), r"1e-30 .*rounds to 0 in float16")


# ... and a constant float16 cannot hold for being too large was told of a fill: the row's
# max clamped to -1e9 (refused in float16: the floor is named), or -1e9 put in by
# torch.where and the empty row zeroed by a product (-inf there, then NaN * 0).
def _floored(q, k, v, mask=None):
    s = _scores(q, k, mask)
    e = (s - s.amax(-1, keepdim=True).clamp_min(-1e9).detach()).exp()
    z = e.sum(-1, keepdim=True)
    return e / torch.where(z == 0, torch.ones_like(z), z) @ v


def _where_1e9(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    return (torch.where(mask, s, -1e9).softmax(-1) * mask.any(-1, keepdim=True)) @ v


case("attention_max_floor_-1e9", check_attention, _floored,
     r"-1e\+09 \(in clamp_min\) does not fit float16")
case("attention_where_-1e9", check_attention, _where_1e9,
     r"-1e\+09 \(in where\) is -inf in float16.*NaN \* 0")
RIGHT["attention_clamp_1e-6"] = (check_attention, _by_hand(lambda z: z.clamp_min(1e-6)))
RIGHT["mha_where_zero"] = (check_multi_head_attention, _mha_by_hand(
    lambda z: torch.where(z == 0, torch.ones_like(z), z)))


# Misnamed: a head width written as a number (view(B, T, mha.n_heads, 6)) crashed on the
# module of 3 heads, and was told to read the head count from n_heads, which it did: the
# message now names the head width too.
def _mha_fixed_width(x, mha, mask=None):
    b, t, _ = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, 6).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))
    return _merged(mha, _by_hand(lambda z: torch.where(z == 0, torch.ones_like(z), z))(
        q, k, v, mask))


def _split_fixed_width(x, n_heads):
    return x.view(x.size(0), x.size(1), n_heads, 6).transpose(1, 2)


def _merge(x):
    return x.transpose(1, 2).flatten(2)


FIXED_WIDTH = r"with 3 heads.*head width.*D // n_heads"
case("mha_fixed_head_width", check_multi_head_attention, _mha_fixed_width, FIXED_WIDTH)
case("split_fixed_head_width", check_heads, (_split_fixed_width, _merge), FIXED_WIDTH)


# Misnamed: masked scores written by boolean indexing behind the batch axis
# (s[:, ~mask] = -inf), right for a [T, S] mask, raised a raw IndexError with the
# [B, T, S] mask the docstring allows: boolean indexing is now named, as it already was
# for a [B, 1, S] padding mask.
def _indexed(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[:, ~mask] = float("-inf")
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


case("attention_bool_index_behind_batch", check_attention, _indexed,
     r"\[B, T, S\] mask.*boolean index.*masked_fill")


# Misnamed: Python's `not` used to invert a mask (s.masked_fill(not mask, ...)) was told
# to write `if mask is not None:`, as if it were `if mask:`; and in Exercise 3,
# `not (j > i)` raised torch's raw "Boolean value of Tensor": `not` on a tensor is named,
# with ~ (elementwise) as the fix.
def _not_mask(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(not mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def _not_later(t):
    i, j = torch.arange(t)[:, None], torch.arange(t)
    return not (j > i)


NOT_TENSOR = r"^(?!.*is not None).*`not .*` asks one truth of a whole tensor.*~"
case("attention_not_mask", check_attention, _not_mask, NOT_TENSOR)
case("causal_not_later", check_causal_mask, _not_later, NOT_TENSOR)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
