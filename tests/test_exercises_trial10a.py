"""Learner trial 10a (issue 28): new slips on notebooks 01 and 02's exercises.

Each case is a wrong answer a learner plausibly writes; its pattern is what a message NAMING the
mistake should match. Cases not named today are strict xfails, with the class and the reason.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.nn import causal_mask
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
INF = float("-inf")


case = trial_case(CASES, XFAIL)


def _scores(q, k, d=None):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1) if d is None else d)


# ---------------------------------------------------------------- 01 · Exercise 1: weights
def aw_right(q, k):
    return _scores(q, k).softmax(-1)


def aw_pow_precedence(q, k):  # d ** 1 / 2 is d / 2, not sqrt(d)
    d = q.size(-1)
    return (q @ k.transpose(-2, -1) / d ** 1 / 2).softmax(-1)


def aw_inplace_q(q, k):
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(-1)


def aw_mul_scale(q, k):
    return (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(-1)


def aw_log_softmax(q, k):
    return _scores(q, k).log_softmax(-1)


def aw_softmax_no_dim(q, k):  # implicit dim of a 3-D tensor is 0
    return F.softmax(_scores(q, k))


def aw_float32(q, k):
    return _scores(q.float(), k.float()).softmax(-1)


def aw_batch_d(q, k):  # d taken from the batch axis
    return _scores(q, k, q.size(0)).softmax(-1)


def aw_no_exp(q, k):
    s = _scores(q, k)
    return s / s.sum(-1, keepdim=True)


RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_pow_precedence", check_attention_weights, aw_pow_precedence,
     r"d ?\*\* ?1 ?/ ?2|precedence|d / 2|divided .*by d/2|half")
case("aw_inplace_q", check_attention_weights, aw_inplace_q, r"in place")
case("aw_mul_scale", check_attention_weights, aw_mul_scale, r"multipl")
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"log_softmax")
case("aw_softmax_no_dim", check_attention_weights, aw_softmax_no_dim, r"batch.*dim=-1")
case("aw_float32", check_attention_weights, aw_float32, r"float64.*float32|dtype")
case("aw_batch_d", check_attention_weights, aw_batch_d,
     r"q\.size\(0\).*batch")
case("aw_no_exp", check_attention_weights, aw_no_exp, r"no exp|softmax")


# ---------------------------------------------------------------- 01 · Exercise 2: masked
def at_right(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, INF)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v


def at_fill_zero(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    return s.softmax(-1) @ v


def at_mul_after(q, k, v, mask=None):
    w = _scores(q, k).softmax(-1)
    return (w * mask if mask is not None else w) @ v


def at_additive(q, k, v, mask=None):
    s = _scores(q, k)
    return (s + mask.float() if mask is not None else s).softmax(-1) @ v


def at_if_mask(q, k, v, mask=None):
    s = _scores(q, k)
    if mask:
        s = s.masked_fill(~mask, INF)
    return s.softmax(-1).nan_to_num() @ v


def at_nan_times_zero(q, k, v, mask=None):  # NaN * 0 is still NaN
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, INF)
    w = s.softmax(-1)
    if mask is not None:
        w = w * mask.any(-1, keepdim=True)
    return w @ v


def at_value_width(q, k, v, mask=None):
    s = _scores(q, k, v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, INF)
    return s.softmax(-1).nan_to_num() @ v


def at_tuple(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, INF)
    w = s.softmax(-1).nan_to_num()
    return w @ v, w


def at_unsqueeze_heads(q, k, v, mask=None):  # a [B, T, S] mask given a head axis
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~(mask.unsqueeze(1) if mask.dim() == 3 else mask), INF)
    return s.softmax(-1).nan_to_num() @ v


def at_uniform_rows(q, k, v, mask=None):  # empty rows' scores reset to 0: uniform weights
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, INF).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return s.softmax(-1) @ v


RIGHT["attention"] = (check_attention, at_right)
case("at_fill_zero", check_attention, at_fill_zero, r"filled .*with 0")
case("at_mul_after", check_attention, at_mul_after, r"after the softmax")
case("at_additive", check_attention, at_additive, r"added the boolean mask")
case("at_if_mask", check_attention, at_if_mask, r"if mask is not None")
case("at_nan_times_zero", check_attention, at_nan_times_zero,
     r"NaN ?\* ?0|multipl|times 0|0 \* NaN")
case("at_value_width", check_attention, at_value_width, r"width of the values")
case("at_tuple", check_attention, at_tuple, r"return a torch\.Tensor.*tuple")
case("at_unsqueeze_heads", check_attention, at_unsqueeze_heads,
     r"head|unsqueeze|extra axis|\[B, T, S\] mask .*as it is")
case("at_uniform_rows", check_attention, at_uniform_rows, r"mean of the values|uniform")


# ---------------------------------------------------------------- 01 · Exercise 3: causal
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_strict(t):
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def cm_diag_plus1(t):
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


def cm_true_forbidden(t):  # nn.Transformer's convention: True = masked out
    return torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)


def cm_batched(t):
    return cm_right(t)[None]


def cm_numpy(t):
    return np.tri(t, dtype=bool)


def cm_zeros(t):  # zeros where ones were meant
    return torch.zeros(t, t, dtype=torch.bool).tril()


RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_strict", check_causal_mask, cm_strict, r"diagonal|itself")
case("cm_diag_plus1", check_causal_mask, cm_diag_plus1, r"i \+ 1|next token")
case("cm_true_forbidden", check_causal_mask, cm_true_forbidden, r"inverted")
case("cm_batched", check_causal_mask, cm_batched, r"extra axis")
case("cm_numpy", check_causal_mask, cm_numpy, r"torch\.Tensor.*ndarray")
case("cm_zeros", check_causal_mask, cm_zeros,
     r"all False|no True|only False|torch\.zeros|torch\.ones")


# ---------------------------------------------------------------- 01 · Exercise 4: heads
def sh_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def mh_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def sh_chunk_stack(x, n_heads):  # right, another way
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def mh_no_transpose(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def mh_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def mh_permute(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


D_MODEL = 128  # the notebook's global d_model


def mh_global_width(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, D_MODEL)


def sh_chunk_stack2(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=2)


def mh_cat_tokens(x):
    return torch.cat(x.unbind(1), dim=1)


def mh_transpose_last(x):
    b, h, t, dh = x.shape
    return x.transpose(-2, -1).reshape(b, t, h * dh)


def sh_transpose_last(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(-2, -1)


RIGHT["heads"] = (check_heads, sh_right, mh_right)
RIGHT["heads_chunk_stack"] = (check_heads, sh_chunk_stack, mh_right)
case("mh_no_transpose", check_heads, (sh_right, mh_no_transpose), r"transpose\(1, 2\) first")
case("mh_view", check_heads, (sh_right, mh_view), r"contiguous")
case("mh_permute", check_heads, (sh_right, mh_permute), r"interleaves")
case("mh_global_width", check_heads, (sh_right, mh_global_width),
     r"d_model|global|H \* D_h|fixed width|hard-?coded")
case("sh_chunk_stack2", check_heads, (sh_chunk_stack2, mh_right), r"\[B, T, H, D_h\]")
case("mh_cat_tokens", check_heads, (sh_right, mh_cat_tokens), r"along the positions")
case("mh_transpose_last", check_heads, (sh_right, mh_transpose_last), r"transpose\(2, 3\)")
case("sh_transpose_last", check_heads, (sh_transpose_last, mh_right), r"transpose\(-2, -1\)")


# ---------------------------------------------------------------- 01 · Exercise 5: MHA
def _split(t, h):
    return sh_right(t, h)


def _qkv(x, mha):
    return (_split(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=-1))


def mha_right(x, mha, mask=None):
    q, k, v = _qkv(x, mha)
    return mha.out_proj(mh_right(at_right(q, k, v, mask)))


def mha_causal_default(x, mha, mask=None):
    return mha_right(x, mha, causal_mask(x.size(1)) if mask is None else mask)


def mha_per_head_qkv(x, mha, mask=None):
    b, t, d = x.shape
    qkv = mha.qkv(x).view(b, t, mha.n_heads, 3 * d // mha.n_heads).transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)
    return mha.out_proj(mh_right(at_right(q, k, v, mask)))


def mha_no_out_bias(x, mha, mask=None):
    q, k, v = _qkv(x, mha)
    return F.linear(mh_right(at_right(q, k, v, mask)), mha.out_proj.weight)


def mha_weight_untransposed(x, mha, mask=None):
    q, k, v = _qkv(x, mha)
    y = mh_right(at_right(q, k, v, mask))
    return y @ mha.out_proj.weight + mha.out_proj.bias


def mha_residual(x, mha, mask=None):
    return x + mha_right(x, mha, mask)


def mha_double_scale(x, mha, mask=None):  # q pre-scaled, then attention() scales again
    q, k, v = _qkv(x, mha)
    q = q / math.sqrt(q.size(-1))
    return mha.out_proj(mh_right(at_right(q, k, v, mask)))


def mha_no_qkv_bias(x, mha, mask=None):
    q, k, v = (_split(t, mha.n_heads) for t in (x @ mha.qkv.weight.T).chunk(3, dim=-1))
    return mha.out_proj(mh_right(at_right(q, k, v, mask)))


def mha_chunk_time(x, mha, mask=None):
    q, k, v = (_split(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=1))
    return mha.out_proj(mh_right(at_right(q, k, v, mask)))


def mha_merge_reshape(x, mha, mask=None):
    q, k, v = _qkv(x, mha)
    return mha.out_proj(at_right(q, k, v, mask).reshape(x.shape))


def mha_tuple(x, mha, mask=None):  # like MultiHeadAttention.forward, (output, weights)
    q, k, v = _qkv(x, mha)
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, INF)
    w = s.softmax(-1).nan_to_num()
    return mha.out_proj(mh_right(w @ v)), w


RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
case("mha_causal_default", check_multi_head_attention, mha_causal_default, r"causal mask")
case("mha_per_head_qkv", check_multi_head_attention, mha_per_head_qkv, r"cut per head")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias, r"out_proj\.bias")
case("mha_weight_untransposed", check_multi_head_attention, mha_weight_untransposed,
     r"untransposed")
case("mha_residual", check_multi_head_attention, mha_residual, r"residual")
case("mha_double_scale", check_multi_head_attention, mha_double_scale,
     r"twice|two times|double|sqrt\(D_h\) (once|twice)|scaled .*again")
case("mha_no_qkv_bias", check_multi_head_attention, mha_no_qkv_bias, r"qkv\.bias")
case("mha_chunk_time", check_multi_head_attention, mha_chunk_time, r"along time|dim 1")
case("mha_merge_reshape", check_multi_head_attention, mha_merge_reshape, r"plain reshape")
case("mha_tuple", check_multi_head_attention, mha_tuple, r"torch\.Tensor.*tuple")


# ---------------------------------------------------------------- 02 · Exercise 1: memory
def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(0, x.size(1) - mem_len):].detach()


def um_first_untruncated(mem, h, mem_len):  # first segment: h kept whole
    if mem is None:
        return h.detach()
    return um_right(mem, h, mem_len)


def um_negative_start(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - mem_len:].detach()


def um_none_for_zero(mem, h, mem_len):
    return None if mem_len == 0 else um_right(mem, h, mem_len)


def um_batch_size(mem, h, mem_len):  # size(0), the batch, for the number of states
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(0, x.size(0) - mem_len):].detach()


def um_detach_inplace(mem, h, mem_len):
    h.detach_()
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(0, x.size(1) - mem_len):]


def um_truncate_before_cat(mem, h, mem_len):
    if mem is not None and mem_len > 0:
        mem = mem[:, -mem_len:]
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x.detach() if mem_len else x[:, :0].detach()


def um_short_not_detached(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    if x.size(1) <= mem_len:
        return x
    return x[:, x.size(1) - mem_len:].detach()


def um_h_size(mem, h, mem_len):  # h.size(1) where [mem, h] was meant
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(0, h.size(1) - mem_len):].detach()


def um_forgot_none(mem, h, mem_len):
    x = torch.cat([mem, h], dim=1)
    return x[:, max(0, x.size(1) - mem_len):].detach()


RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_first_untruncated", check_update_memory, um_first_untruncated,
     r"mem=None|mem is None|first segment")
case("um_negative_start", check_update_memory, um_negative_start, r"negative index")
case("um_none_for_zero", check_update_memory, um_none_for_zero, r"torch\.Tensor.*NoneType")
case("um_batch_size", check_update_memory, um_batch_size,
     r"size\(0\)|batch|dim(ension)? 1|time axis")
case("um_detach_inplace", check_update_memory, um_detach_inplace, r"in place")
case("um_truncate_before_cat", check_update_memory, um_truncate_before_cat,
     r"before (concatenat|the cat)|after (concatenat|the cat)|old memory")
case("um_short_not_detached", check_update_memory, um_short_not_detached, r"detach")
case("um_h_size", check_update_memory, um_h_size, r"h\.size\(1\)|\[mem, h\]|states of x")
case("um_forgot_none", check_update_memory, um_forgot_none, r"mem=None")


# ---------------------------------------------------------------- 02 · Exercise 2: band
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_segment_number(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= i // seg_len - mem_len)


def sm_key_segment(n, seg_len, mem_len):  # the key's segment start, not the key
    i, j = _ij(n)
    return (j <= i) & ((j // seg_len) * seg_len >= (i // seg_len) * seg_len - mem_len)


def sm_bidirectional(n, seg_len, mem_len):
    i, j = _ij(n)
    start = (i // seg_len) * seg_len
    return (j < start + seg_len) & (j >= start - mem_len)


def sm_round(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i / seg_len).round().long() * seg_len - mem_len)


def sm_mem_in_segments(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len * seg_len)


def sm_one_based(n, seg_len, mem_len):
    i, j = torch.arange(1, n + 1)[:, None], torch.arange(1, n + 1)[None]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_previous_segment(n, seg_len, mem_len):  # the whole previous segment, whatever mem_len
    i, j = _ij(n)
    same = (i // seg_len == j // seg_len) & (j <= i)
    return same | (j // seg_len == i // seg_len - 1) if mem_len else same


def sm_memory_one_segment(n, seg_len, mem_len):  # "the memory is the previous segment"
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - min(mem_len, seg_len))


RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_segment_number", check_segment_mask, sm_segment_number, r"segment's number")
case("sm_key_segment", check_segment_mask, sm_key_segment,
     r"key's segment|j // seg_len|segment of the key|start of j")
case("sm_bidirectional", check_segment_mask, sm_bidirectional, r"future key")
case("sm_round", check_segment_mask, sm_round, r"round|floor|//")
case("sm_mem_in_segments", check_segment_mask, sm_mem_in_segments, r"in segments")
case("sm_memory_one_segment", check_segment_mask, sm_memory_one_segment,
     r"seg_len where mem_len")
case("sm_one_based", check_segment_mask, sm_one_based, r"1-based|from 1|arange\(1|from 0")
case("sm_previous_segment", check_segment_mask, sm_previous_segment,
     r"whole (previous )?segment|previous segment|ignores mem_len|seg_len instead")


# ---------------------------------------------------------------- 02 · Exercise 3: distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None]


def rd_no_m(t, m):
    return torch.arange(t)[:, None] - torch.arange(m + t)[None]


def rd_sign(t, m):
    return torch.arange(m + t)[None] - torch.arange(t)[:, None] - m


def rd_abs(t, m):
    return rd_right(t, m).abs()


def rd_clamp(t, m):
    return rd_right(t, m).clamp(min=0)


def rd_memory_keys_only(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m)[None]


def rd_plus_one(t, m):
    return rd_right(t, m) + 1


def rd_square(t, m):  # a query for every key
    return m + torch.arange(m + t)[:, None] - torch.arange(m + t)[None]


RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_no_m", check_relative_distances, rd_no_m, r"i - j")
case("rd_sign", check_relative_distances, rd_sign, r"sign")
case("rd_abs", check_relative_distances, rd_abs, r"absolute value")
case("rd_clamp", check_relative_distances, rd_clamp, r"get 0")
case("rd_memory_keys_only", check_relative_distances, rd_memory_keys_only, r"\[T, M\]")
case("rd_plus_one", check_relative_distances, rd_plus_one, r"off by one")
case("rd_square", check_relative_distances, rd_square, r"T = t|t queries|rows .*queries")


# ---------------------------------------------------------------- 02 · Exercise 4: shift
def rs_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_roll(x):  # right too: the entries right of the diagonal are never used
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(-(t - 1 - i), -1) for i in range(t)], -2)


def rs_drop_last(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_2d_only(x):
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).reshape(s + 1, t)[1:].reshape(t, s)


def rs_transpose(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_row(x):
    *lead, t, s = x.shape
    return F.pad(x, (0, 0, 1, 0)).reshape(*lead, s, t + 1)[..., 1:].reshape(*lead, t, s)


def rs_flip(x):
    return rs_right(x.flip(-1))


def rs_back_then_drop(x):  # reads back to [T, S + 1] before dropping: undoes the trick
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t).reshape(*lead, t, s + 1)[..., 1:]


def rs_cat_zeros(x):  # a zero column made for one matrix, [T, 1]
    *lead, t, s = x.shape
    p = torch.cat([torch.zeros(t, 1), x], -1)
    return p.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_no_pad(x):
    *lead, t, s = x.shape
    return x.reshape(*lead, s, t)[..., 1:, :].reshape(*lead, t, s)


def rs_4d_only(x):
    b, h, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(b, h, s + 1, t)[:, :, 1:].reshape(b, h, t, s)


RIGHT["relative_shift"] = (check_relative_shift, rs_right)
RIGHT["relative_shift_roll"] = (check_relative_shift, rs_roll)
case("rs_drop_last", check_relative_shift, rs_drop_last, r"last row")
case("rs_2d_only", check_relative_shift, rs_2d_only, r"leading dimensions")
case("rs_transpose", check_relative_shift, rs_transpose, r"not transpose")
case("rs_pad_row", check_relative_shift, rs_pad_row, r"adds a row")
case("rs_flip", check_relative_shift, rs_flip, r"ascending")
case("rs_back_then_drop", check_relative_shift, rs_back_then_drop, r"unshifted")
case("rs_cat_zeros", check_relative_shift, rs_cat_zeros,
     r"zero column|zeros\(|torch\.cat|F\.pad")
case("rs_no_pad", check_relative_shift, rs_no_pad, r"pad|zero column")
case("rs_4d_only", check_relative_shift, rs_4d_only, r"any leading dimensions")


# ---------------------------------------------------------------- 02 · Exercise 5: scores
def _ac(q, k, u):
    return torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)


def _bd(q, r, v):
    return torch.einsum("bhtd,shd->bhts", q + v[:, None], r)


def sc_right(q, k, r, u, v):
    return (_ac(q, k, u) + relative_shift(_bd(q, r, v))) / math.sqrt(q.size(-1))


def sc_inplace(q, k, r, u, v):
    qu = q
    qu += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", qu, k)
    bd = _bd(q - u[:, None], r, v)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def sc_no_shift(q, k, r, u, v):
    return (_ac(q, k, u) + _bd(q, r, v)) / math.sqrt(q.size(-1))


def sc_bias_on_keys(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    bd = torch.einsum("bhtd,shd->bhts", q, r + v[None])
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def sc_r_reshape(q, k, r, u, v):
    s, h, d = r.shape
    bd = (q + v[:, None]) @ r.reshape(h, s, d).transpose(-2, -1)
    return (_ac(q, k, u) + relative_shift(bd)) / math.sqrt(q.size(-1))


def sc_bias_none(q, k, r, u, v):  # u[None]: [1, H, D_h] against [B, H, T, D_h]
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def sc_scale_content_only(q, k, r, u, v):
    return _ac(q, k, u) / math.sqrt(q.size(-1)) + relative_shift(_bd(q, r, v))


def sc_shift_sum(q, k, r, u, v):
    return relative_shift(_ac(q, k, u) + _bd(q, r, v)) / math.sqrt(q.size(-1))


def sc_u_both(q, k, r, u, v):
    return (_ac(q, k, u) + relative_shift(_bd(q, r, u))) / math.sqrt(q.size(-1))


def sc_r_flip(q, k, r, u, v):
    return sc_right(q, k, r.flip(0), u, v)


def sc_einsum_st(q, k, r, u, v):  # position product as [B, H, S, T]
    bd = torch.einsum("bhtd,shd->bhst", q + v[:, None], r)
    return (_ac(q, k, u) + relative_shift(bd).transpose(-2, -1)) / math.sqrt(q.size(-1))


def sc_no_u(q, k, r, u, v):
    return (_ac(q, k, torch.zeros_like(u)) + relative_shift(_bd(q, r, v))) / math.sqrt(
        q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, sc_right)
case("sc_inplace", check_relative_scores, sc_inplace, r"in place")
case("sc_no_shift", check_relative_scores, sc_no_shift, r"relative_shift")
case("sc_bias_on_keys", check_relative_scores, sc_bias_on_keys, r"query-side")
case("sc_r_reshape", check_relative_scores, sc_r_reshape, r"reshape")
case("sc_bias_none", check_relative_scores, sc_bias_none, r"u\[:, None\]")
case("sc_scale_content_only", check_relative_scores, sc_scale_content_only,
     r"only the content term")
case("sc_shift_sum", check_relative_scores, sc_shift_sum, r"shifted the sum")
case("sc_u_both", check_relative_scores, sc_u_both, r"u is added to the queries of both")
case("sc_r_flip", check_relative_scores, sc_r_flip, r"reversed")
case("sc_einsum_st", check_relative_scores, sc_einsum_st, r"\[B, H, S, T\]")
case("sc_no_u", check_relative_scores, sc_no_u, r"term \(c\)")


# a wrong answer calls softmax without dim
pytestmark = pytest.mark.filterwarnings("ignore:Implicit dimension choice for softmax")
test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
