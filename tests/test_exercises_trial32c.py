"""Learner trial 32 (c): notebooks 01 and 02. A `.squeeze()` (or `.squeeze(0)`) that drops
an axis of size 1 (B = 1, H = 1, or T = 1, Transformer-XL's one-token step); a finite
fill (-10 to -100) that allowed scores far below it defeat; a softmax stabilised with
the max of the whole tensor; a scale a little off (+1e-3) taken for half precision; a
global module, tensor or size from another cell; an undefined helper under mask=None;
a causal mask that fails at t = 0; and the right answers these checks must accept."""
import math

import pytest
import torch
import torch.nn.functional as F
from checker_helpers import fails_with, trial_case, trial_tests

from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.grading.sizes import expect_same

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_update_memory)
from labnn.nn.attention import MultiHeadAttention

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

# the notebooks' globals a learner's answer may read by mistake
narrow = MultiHeadAttention(128, 4)  # notebook 01, section 8
scores = torch.randn(1, 4, 4)  # notebook 01's demonstration scores
T_, M_ = 3, 2  # notebook 02's shift demonstration
S_ = M_ + T_


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


SQUEEZED = r"(?s)^(?!.*right at the check's sizes).*B = 1.*\.squeeze\(\)"


# ---- notebook 01, Exercise 1: attention_weights ----
def aw_squeeze(q, k):
    return _scores(q, k).softmax(dim=-1).squeeze()


def aw_squeeze_0(q, k):
    return _scores(q.squeeze(0), k.squeeze(0)).softmax(dim=-1)


def aw_global_max(q, k):
    s = _scores(q, k)
    e = torch.exp(s - s.max())
    return e / e.sum(dim=-1, keepdim=True)


def aw_eps_scale(q, k):
    return (q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) + 1e-3)).softmax(dim=-1)


def aw_right_row_max(q, k):
    s = _scores(q, k)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def aw_right_squeeze_dim(q, k):  # a squeeze of a named axis, one it added itself
    return (q.unsqueeze(-2) @ k.unsqueeze(-3).transpose(-2, -1)).squeeze(-2).div(
        math.sqrt(q.size(-1))).softmax(-1)


RIGHT["aw_row_max"] = (check_attention_weights, aw_right_row_max)
RIGHT["aw_squeeze_dim"] = (check_attention_weights, aw_right_squeeze_dim)
case("aw_squeeze", check_attention_weights, aw_squeeze, SQUEEZED)
case("aw_squeeze_0", check_attention_weights, aw_squeeze_0, r"B = 1.*squeeze")
case("aw_global_max", check_attention_weights, aw_global_max,
     r"max of the whole tensor.*s\.max\(-1, keepdim=True\)")
case("aw_eps_scale", check_attention_weights, aw_eps_scale,
     r"^(?!.*half-precision).*divided by .*4\.89[0-9]*.*not .*sqrt\(24\)")


# ---- notebook 01, Exercise 2: attention ----
def _fill(value, zero_rows=True):
    """Attention whose masked scores get the finite `value`; empty rows zeroed."""
    def attention(q, k, v, mask=None):
        s = _scores(q, k)
        if mask is None:
            return s.softmax(-1) @ v
        w = s.masked_fill(~mask, value).softmax(-1) * mask.any(-1, keepdim=True)
        return w @ v
    return attention


def at_squeeze(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1).nan_to_num(0.0) @ v).squeeze()


def at_none_undefined(q, k, v, mask=None):
    if mask is None:
        return attention_weights_ex1(q, k) @ v  # noqa: F821 -- the Ex. 1 cell never ran
    s = _scores(q, k).masked_fill(mask.logical_not(), -math.inf)
    return s.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0) @ v


def at_none_global_scores(q, k, v, mask=None):
    if mask is None:
        return scores.softmax(-1) @ v  # the notebook's global, not the function's own
    s = _scores(q, k).masked_fill(mask.logical_not(), -math.inf)
    return s.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0) @ v


def at_right_finfo(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    return (w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0.0)) @ v


def at_eps_scale(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) + 1e-3)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


def at_global_max(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    e = torch.exp(s - s.max())
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0) @ v


def at_right_where(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is None:
        return s.softmax(-1) @ v
    w = torch.where(mask, s, float("-inf")).softmax(-1)
    return torch.where(mask.any(-1, keepdim=True), w, 0.0) @ v


RIGHT["at_where"] = (check_attention, at_right_where)
RIGHT["at_finfo_min"] = (check_attention, at_right_finfo)
# -1e9 overflows float16, which torch.autocast gives the scores (trial 46a)
case("at_fill_1e9", check_attention, _fill(-1e9), r"(?i)float16|bfloat16|half")
# -1e4 fits float16 but is finite: allowed scores below it lose to the masked (trial 48a)
case("at_fill_1e4", check_attention, _fill(-1e4), r"far below 0.*finite fill.*-inf")
case("at_squeeze", check_attention, at_squeeze, SQUEEZED)
for fill in (-30.0, -60.0, -100.0):
    case(f"at_fill_{-fill:.0f}", check_attention, _fill(fill),
         rf"^(?!.*half-precision).*fill of {fill:g}.*float\('-inf'\)")
case("at_fill_10", check_attention, _fill(-10.0),
     r"^(?!.*half-precision).*fill of -10.*float\('-inf'\)")
case("at_eps_scale", check_attention, at_eps_scale,
     r"^(?!.*half-precision).*divided by .*4\.89[0-9]*.*not .*sqrt\(24\)")
case("at_global_max", check_attention, at_global_max,
     r"max of the whole tensor.*s\.max\(-1, keepdim=True\)")
case("at_none_undefined", check_attention, at_none_undefined,
     r"(?s)^(?!.*only under `if mask is not None:`).*attention_weights_ex1.*not defined in "
     r"this session")
case("at_none_global_scores", check_attention, at_none_global_scores,
     r"(?s)^(?!.*only under `if mask is not None:`).*global `scores`.*another cell")


# ---- notebook 01, Exercise 3: causal mask ----
def causal_first_set(t):
    m = torch.ones(t, t, dtype=torch.bool).tril()
    m[0, 0] = True
    return m


def causal_right_compare(t):
    i = torch.arange(t)
    return i[None, :] <= i[:, None]


RIGHT["causal_compare"] = (check_causal_mask, causal_right_compare)
case("causal_first_set", check_causal_mask, causal_first_set, r"\(0\).*IndexError|t = 0")


# ---- notebook 01, Exercises 4-5: heads, multi-head attention ----
def split_heads(x, h):
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def merge_squeeze(x):
    return merge_heads(x).squeeze()


def _attend(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


def _mha(module, squeeze=False):
    def multi_head_attention(x, mha, mask=None):
        m = mha if module is None else module
        q, k, v = (split_heads(z, m.n_heads) for z in m.qkv(x).chunk(3, dim=-1))
        y = m.out_proj(merge_heads(_attend(q, k, v, mask)))
        return y.squeeze() if squeeze else y
    return multi_head_attention


def mha_global_narrow(x, mha, mask=None):
    q, k, v = (split_heads(z, narrow.n_heads) for z in narrow.qkv(x).chunk(3, dim=-1))
    return narrow.out_proj(merge_heads(_attend(q, k, v, mask)))


RIGHT["heads_flatten"] = (check_heads, split_heads, lambda x: x.transpose(1, 2).flatten(2))
RIGHT["mha_right"] = (check_multi_head_attention, _mha(None))
case("merge_squeeze", check_heads, (split_heads, merge_squeeze), SQUEEZED)
case("mha_squeeze", check_multi_head_attention, _mha(None, squeeze=True), SQUEEZED)
case("mha_global_narrow", check_multi_head_attention, mha_global_narrow,
     r"^(?!.*count their axes).*global `narrow`.*MultiHeadAttention\(128, 4\).*mha")


# ---- notebook 02, Exercise 1: update_memory ----
def um_squeeze(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):].detach().squeeze()


def um_right_narrow(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    n = min(mem_len, cat.size(1))
    return cat.narrow(1, cat.size(1) - n, n).detach()


RIGHT["um_narrow"] = (check_update_memory, um_right_narrow)
case("um_squeeze", check_update_memory, um_squeeze, SQUEEZED)


# ---- notebook 02, Exercise 3: relative distances ----
def rd_squeeze(t, m):
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).squeeze()


def rd_right(t, m):
    return torch.arange(m, m + t)[:, None] - torch.arange(m + t)


RIGHT["rd_shifted_arange"] = (check_relative_distances, rd_right)
case("rd_squeeze", check_relative_distances, rd_squeeze,
     r"relative_distances\(1, .*T = 1.*\.squeeze\(\)")


# ---- notebook 02, Exercises 4-5: relative shift and scores ----
def _shift(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_squeeze(x):
    return _shift(x).squeeze()


def shift_global_t(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, T_)[..., 1:, :].reshape(*lead, T_, s)


def shift_global_s(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, S_ + 1, t)[..., 1:, :].reshape(*lead, t, S_)


def _relative(squeeze=False):
    def relative_scores(q, k, r, u, v):
        ac = (q + u[:, None]) @ k.transpose(-2, -1)
        bd = torch.einsum("bhid,rhd->bhir", q + v[:, None], r)
        out = (ac + _shift(bd)) / math.sqrt(q.size(-1))
        return out.squeeze() if squeeze else out
    return relative_scores


RIGHT["shift_trick"] = (check_relative_shift, _shift)
RIGHT["scores_right"] = (check_relative_scores, _relative())
case("shift_squeeze", check_relative_shift, shift_squeeze, r"T = 1.*\.squeeze\(\)")
case("scores_squeeze", check_relative_scores, _relative(squeeze=True), r"T = 1.*\.squeeze\(\)")
case("shift_global_t", check_relative_shift, shift_global_t,
     r"global `T_` = 3.*x\.shape")
case("shift_global_s", check_relative_shift, shift_global_s,
     r"global `S_` = 5.*x\.shape")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def test_one_squeezed_axis_of_two_is_named():
    want = torch.zeros(1, 1, 5)
    with pytest.raises(ExerciseFailed, match=r"1 of the size-1 axes B = 1, H = 1 is gone.*"
                                             r"\.squeeze\(dim\)"):
        expect_same("f(x)", lambda: want[0], want, "fix", dims="B H T")


def test_another_shape_keeps_the_sizes_message():
    want = torch.zeros(1, 4, 5)
    with pytest.raises(ExerciseFailed, match=r"has shape \[4, 6\].*right at the check's sizes"):
        expect_same("f(x)", lambda: torch.zeros(4, 6), want, "fix", dims="B T S")


def test_a_mask_from_a_list_is_told_how_to_keep_two_axes_at_t_0():  # re-trial 32a
    def from_list(t):
        return torch.tensor([[j <= i for j in range(t)] for i in range(t)], dtype=torch.bool)

    fails_with(check_causal_mask, from_list,
               r"\(0\) has shape \[0\]: t = 0 .*empty \[0, 0\].*\.reshape\(t, t\)")


def test_a_small_constant_is_not_blamed_on_half_precision_alone():  # re-trial 32a
    def eps_in_denominator(q, k):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        e = (s - s.max(-1, keepdim=True).values).exp()
        return e / (e.sum(-1, keepdim=True) + 1e-3)

    fails_with(check_attention_weights, eps_in_denominator,
               r"^(?!.*only half-precision accurate).*small constant \(an eps\)")


def test_attention_divided_by_d_is_named_as_such():  # re-trial 32a: told "a global d?"
    def by_d(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / q.size(-1)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = torch.nan_to_num(s.softmax(-1))
        return w @ v

    fails_with(check_attention, by_d,
               r"^(?!.*a global d).*divided by d = q\.size\(-1\) = \d+, not by sqrt\(d\)")
