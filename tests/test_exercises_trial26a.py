"""Learner trial 26a (issue 28): notebooks 01 (attention) and 02 (Transformer-XL)."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 01 Exercise 1
def weights_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_log_softmax(q, k):  # log of the weights
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def weights_shape2(q, k):  # d from axis 2: right on 3-D, T on 4-D heads
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[2])).softmax(dim=-1)


def weights_bmm(q, k):  # bmm: 3-D only
    return (torch.bmm(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))).softmax(-1)


RIGHT["weights"] = (check_attention_weights, weights_right)
case("weights_log_softmax", check_attention_weights, weights_log_softmax,
     r"(?i)log")
case("weights_shape2", check_attention_weights, weights_shape2,
     r"(?i)(4-D|heads).*(sqrt|scale|d\b|width)|(sqrt|scale|width).*(4-D|heads|axis 2)")
case("weights_bmm", check_attention_weights, weights_bmm,
     r"(?i)(torch\.)?bmm\b.*(3-D|matmul|@)")

def weights_max_queries(q, k):  # "stable" softmax, the max taken over the queries
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s - s.max(dim=-2, keepdim=True).values
    return s.exp() / s.exp().sum(dim=-2, keepdim=True)


case("weights_max_queries", check_attention_weights, weights_max_queries,
     r"(?i)(dim=-2|over the queries|columns|rows? .*sum to 1|keys)")

def weights_inplace(q, k):  # q scaled in place: the caller's q changes
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(dim=-1)


case("weights_inplace", check_attention_weights, weights_inplace,
     r"(?i)(in[- ]place|/=|changed|modif|mutat)")


# ---------------------------------------------------------------- 01 Exercise 2
def attention_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def attention_finite_fill(q, k, v, mask=None):  # -1e9: an empty row averages all values
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def attention_mask_after(q, k, v, mask=None):  # mask multiplied in after the softmax
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def attention_value_width(q, k, v, mask=None):  # sqrt of the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


RIGHT["attention"] = (check_attention, attention_right)
case("attention_finite_fill", check_attention, attention_finite_fill,
     r"(?i)(no (True|allowed|key)|all[- ]False|empty).*(zero|mean|average|uniform)")
case("attention_mask_after", check_attention, attention_mask_after,
     r"(?i)(after the softmax|before the softmax|renormali|sum to 1|don't sum)")
case("attention_value_width", check_attention, attention_value_width,
     r"(?i)(value|D_v|v\.size).*(sqrt|scale|width)|(sqrt|scale).*(value|D_v)")

def attention_one_minus(q, k, v, mask=None):  # 1 - mask on a bool mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill((1 - mask).bool(), float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


case("attention_one_minus", check_attention, attention_one_minus,
     r"(?i)1 - mask")

def attention_nan_times_zero(q, k, v, mask=None):  # NaN rows multiplied by 0: still NaN
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w * mask.any(dim=-1, keepdim=True)
    return w @ v


case("attention_nan_times_zero", check_attention, attention_nan_times_zero,
     r"(?i)NaN.*(0|zero|multipl|\*|masked_fill|where)")


# ---------------------------------------------------------------- 01 Exercise 3
def causal_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def causal_float(t):  # a float mask of 1s and 0s
    return torch.ones(t, t).tril()


def causal_strict(t):  # the strict past: no token sees itself
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def causal_batched(t):  # with a leading batch axis
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


RIGHT["causal"] = (check_causal_mask, causal_right)
case("causal_float", check_causal_mask, causal_float, r"(?i)(bool|dtype|float)")
case("causal_strict", check_causal_mask, causal_strict,
     r"(?i)(diagonal|itself|own position|j\s*(<=|≤|=)\s*i)")
case("causal_batched", check_causal_mask, causal_batched,
     r"(?i)(extra|leading|batch|\[1, \d+, \d+\]|3-D|\[t, t\])")

def causal_one_ahead(t):  # diagonal=1: each token also sees the next one
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


case("causal_one_ahead", check_causal_mask, causal_one_ahead,
     r"(?i)(future|next|diagonal|j\s*(<=|≤)\s*i)")

def causal_fixed4(t):  # the notebook's example size, t ignored
    return torch.ones(4, 4, dtype=torch.bool).tril()


case("causal_fixed4", check_causal_mask, causal_fixed4,
     r"(?i)(\bt\b.*(ignor|fixed|hard)|(ignor|fixed|hard).*\bt\b|\[t, t\])")


# ---------------------------------------------------------------- 01 Exercise 4
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_permute_last(x, n_heads):  # [B, H, D_h, T]: tokens and features swapped
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, -1).permute(0, 2, 3, 1)


def merge_permute_last(x):  # its inverse, so the round trip works
    b, h, dh, t = x.shape
    return x.permute(0, 3, 1, 2).reshape(b, t, h * dh)


def merge_view(x):  # view after transpose: not contiguous
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def split_stack(x, n_heads):  # [H, B, T, D_h]: the head axis first
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def merge_stack(x):
    return torch.cat(list(x.unbind(0)), dim=-1)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("heads_permute_last", check_heads, (split_permute_last, merge_permute_last),
     r"(?i)(D_h.*T\b|token.*(feature|width|last)|permute|transpos)")
case("heads_merge_view", check_heads, (split_right, merge_view),
     r"(?i)(contiguous|reshape)")
case("heads_stack_first", check_heads, (split_stack, merge_stack),
     r"(?i)(head axis|heads? (first|before)|\[H, B|batch.*(first|axis 0))")


# ---------------------------------------------------------------- 01 Exercise 5
def mha_right(x, mha, mask=None):
    h = mha.n_heads
    q, k, v = (split_right(t, h) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_qvk(x, mha, mask=None):  # chunks read in the order q, v, k
    h = mha.n_heads
    q, v, k = (split_right(t, h) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_interleaved(x, mha, mask=None):  # qkv viewed as [B, T, H, 3, D_h]
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = mha.qkv(x).view(b, t, h, 3, d // h).unbind(3)
    y = attention_right(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)
    return mha.out_proj(merge_right(y))


def mha_no_out_bias(x, mha, mask=None):  # W^O without its bias
    h = mha.n_heads
    q, k, v = (split_right(t, h) for t in mha.qkv(x).chunk(3, dim=-1))
    return merge_right(attention_right(q, k, v, mask)) @ mha.out_proj.weight.T


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("mha_qvk", check_multi_head_attention, mha_qvk,
     r"(?i)(order|swapp|q, k, v|chunk).*(k|v)|(keys?.*values?|values?.*keys?) swapped")
case("mha_interleaved", check_multi_head_attention, mha_interleaved,
     r"(?i)(chunk|side by side|interleav|\[B, T, H, 3|per head)")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias,
     r"(?i)bias")

def mha_mask_axis(x, mha, mask=None):  # mask[:, None]: [T, 1, T] against [B, H, T, T]
    h = mha.n_heads
    q, k, v = (split_right(t, h) for t in mha.qkv(x).chunk(3, dim=-1))
    m = None if mask is None else mask[:, None]
    return mha.out_proj(merge_right(attention_right(q, k, v, m)))


case("mha_mask_axis", check_multi_head_attention, mha_mask_axis,
     r"(?i)(mask\[:, None\]|\[T, 1, T\]|mask.*(axis|broadcast|head))")

def mha_call_module(x, mha, mask=None):  # the module's whole return value
    return mha(x, mask)


case("mha_call_module", check_multi_head_attention, mha_call_module,
     r"(?i)tuple")


# ---------------------------------------------------------------- 02 Exercise 1
def update_right(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def update_cat_batch(mem, h, mem_len):  # torch.cat's default dim=0: the batch axis
    full = h if mem is None else torch.cat([mem, h])
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def update_first(mem, h, mem_len):  # keeps the FIRST mem_len states
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, :mem_len].detach()


def update_h_only(mem, h, mem_len):  # the last mem_len states of h, old memory dropped
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


RIGHT["update"] = (check_update_memory, update_right)
case("update_cat_batch", check_update_memory, update_cat_batch,
     r"(?i)(batch|dim=?0|axis 0|along time|dim=1)")
case("update_first", check_update_memory, update_first,
     r"(?i)(first|oldest|last mem_len|most recent|newest)")
case("update_h_only", check_update_memory, update_h_only,
     r"(?i)(old memory|previous memory|mem\b.*(dropped|ignored|missing)|without the memory)")

def update_h_first(mem, h, mem_len):  # the new states put before the memory
    full = h if mem is None else torch.cat([h, mem], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


case("update_h_first", check_update_memory, update_h_first,
     r"(?i)(order|\[mem, h\]|cat\(\[mem, h\]|before|after|older)")


# ---------------------------------------------------------------- 02 Exercise 2
def segmask_right(n, seg_len, mem_len):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = i // seg_len * seg_len
    return (j >= start - mem_len) & (j <= i)


def segmask_no_causal(n, seg_len, mem_len):  # the upper bound j <= i forgotten
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return j >= i // seg_len * seg_len - mem_len


def segmask_sliding(n, seg_len, mem_len):  # start(i) read as i: a sliding window
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= i - mem_len) & (j <= i)


def segmask_long(n, seg_len, mem_len):  # the two conditions multiplied as integers
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = i // seg_len * seg_len
    return (j >= start - mem_len).long() * (j <= i).long()


RIGHT["segmask"] = (check_segment_mask, segmask_right)
case("segmask_no_causal", check_segment_mask, segmask_no_causal,
     r"(?i)(future|j\s*(<=|≤)\s*i|causal|after (the )?query)")
case("segmask_sliding", check_segment_mask, segmask_sliding,
     r"(?i)(segment start|start\(i\)|sliding|i - mem_len|segment'?s? first)")
case("segmask_long", check_segment_mask, segmask_long, r"(?i)(bool|dtype)")

def segmask_one_based(n, seg_len, mem_len):  # positions numbered from 1
    i = torch.arange(1, n + 1)[:, None]
    j = torch.arange(1, n + 1)[None, :]
    start = i // seg_len * seg_len
    return (j >= start - mem_len) & (j <= i)


case("segmask_one_based", check_segment_mask, segmask_one_based,
     r"(?i)(from 1|1-based|one-based|arange\(1|start\(i\)|segment start|from 0)")


# ---------------------------------------------------------------- 02 Exercise 3
def dist_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_abs(t, m):  # |i - j|: future keys positive
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


def dist_clamped(t, m):  # future keys clamped to 0, as the model's table would
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).clamp(min=0)


def dist_float(t, m):  # float aranges
    i = torch.arange(t, dtype=torch.float32)[:, None]
    return m + i - torch.arange(m + t, dtype=torch.float32)[None, :]


RIGHT["dist"] = (check_relative_distances, dist_right)
case("dist_abs", check_relative_distances, dist_abs,
     r"(?i)(negative|abs|future)")
case("dist_clamped", check_relative_distances, dist_clamped,
     r"(?i)(negative|clamp|future)")
case("dist_float", check_relative_distances, dist_float,
     r"(?i)(long|int|dtype|float)")

def dist_no_m(t, m):  # the query at position i, not m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_keys_t(t, m):  # only the t keys of the segment
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


case("dist_no_m", check_relative_distances, dist_no_m,
     r"(?i)(m \+ i|offset|memory|by m\b)")
case("dist_keys_t", check_relative_distances, dist_keys_t,
     r"(?i)(m \+ t|memory keys|S = m|\[T, S\]|keys)")


# ---------------------------------------------------------------- 02 Exercise 4
def shift_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_pad_right(x):  # the zero column padded at the end
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_drop_last(x):  # the last row dropped instead of the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def shift_2d(x):  # leading dimensions lost in the reshape
    t, s = x.shape[-2:]
    padded = F.pad(x, (1, 0))
    return padded.reshape(s + 1, t)[1:].reshape(t, s)


RIGHT["shift"] = (check_relative_shift, shift_right)
case("shift_pad_right", check_relative_shift, shift_pad_right,
     r"(?i)(pad.*(front|left|end|right)|(front|left).*pad|zero column)")
case("shift_drop_last", check_relative_shift, shift_drop_last,
     r"(?i)(first row|last row|drop)")
case("shift_2d", check_relative_shift, shift_2d,
     r"(?i)(leading|batch|\[B, H|4-D|\.\.\.|dimensions)")

def shift_flip(x):  # the distance columns reversed: ascending distance, no per-row slide
    return x.flip(-1)


case("shift_flip", check_relative_shift, shift_flip,
     r"(?i)(flip|revers|slide|per[- ]row)")

def shift_pad_rows(x):  # the zero padded as a row on top, not a column in front
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 0, 1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


case("shift_pad_rows", check_relative_shift, shift_pad_rows,
     r"(?i)(column|row|\(1, 0\)|last (axis|dim))")


# ---------------------------------------------------------------- 02 Exercise 5
def scores_right(q, k, r, u, v):
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_uv_swapped(q, k, r, u, v):  # v with the content keys, u with the positions
    ac = (q + v[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + u[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_r_reshaped(q, k, r, u, v):  # r [S, H, D_h] reshaped, not permuted, to heads
    s, h, dh = r.shape
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = (q + v[:, None]) @ r.reshape(h, s, dh).transpose(-2, -1)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_no_shift(q, k, r, u, v):  # position scores added by distance, not shifted
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + bd) / math.sqrt(q.size(-1))


def scores_bias_unbroadcast(q, k, r, u, v):  # q + u: [H, D_h] lined up with [T, D_h]
    ac = (q + u) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


RIGHT["scores"] = (check_relative_scores, scores_right)
case("scores_uv_swapped", check_relative_scores, scores_uv_swapped,
     r"(?i)(u and v|v and u|swapp)")
case("scores_r_reshaped", check_relative_scores, scores_r_reshaped,
     r"(?i)(head|permute|reshape|mix)")
case("scores_no_shift", check_relative_scores, scores_no_shift,
     r"(?i)(shift|by distance)")
case("scores_bias_unbroadcast", check_relative_scores, scores_bias_unbroadcast,
     r"(?i)(u\[:, None\]|broadcast|\[H, 1, D_h\]|per head|head axis)")

def scores_scale_ac_only(q, k, r, u, v):  # only the content scores divided by sqrt(d_h)
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac / math.sqrt(q.size(-1)) + relative_shift(bd)


case("scores_scale_ac_only", check_relative_scores, scores_scale_ac_only,
     r"(?i)(position (scores|terms?).*(sqrt|scale|divid)"
     r"|(sqrt|scale|divid).*(whole|sum|all four|both|position))")

def scores_r_flipped(q, k, r, u, v):  # r read as distances 0 .. S-1, flipped first
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r.flip(0))
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("scores_r_flipped", check_relative_scores, scores_r_flipped,
     r"(?i)(flip|revers|S - 1 \.\. 0|descending|order of (the )?distances)")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
