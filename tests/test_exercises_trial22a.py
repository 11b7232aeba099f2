"""Learner trial 22a: new wrong answers for notebooks 01 and 02 (issue 28)."""
import math

import numpy as np
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
case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 01 / Exercise 1
def attention_weights(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_log_softmax(q, k):  # log_softmax for softmax
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def aw_divide_by_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def aw_d_is_tokens(q, k):  # d read as q.size(1), the number of queries
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(1))).softmax(dim=-1)


RIGHT["attention_weights"] = (check_attention_weights, attention_weights)


# ---------------------------------------------------------------- 01 / Exercise 2
def attention(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def att_fill_minus_1e9(q, k, v, mask=None):  # -1e9: an all-False row becomes uniform
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def att_fill_zero(q, k, v, mask=None):  # masked scores set to 0, not -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    return s.softmax(dim=-1) @ v


def att_mask_after_softmax(q, k, v, mask=None):  # weights * mask, not renormalised
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


RIGHT["attention"] = (check_attention, attention)


# ---------------------------------------------------------------- 01 / Exercise 3
def causal_mask_mine(t):
    return torch.arange(t)[None, :] <= torch.arange(t)[:, None]


def cm_float(t):  # float 0/1 instead of bool
    return torch.ones(t, t).tril()


def cm_batched(t):  # an extra batch axis: [1, t, t]
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


def cm_numpy(t):  # a numpy array, not a tensor
    return np.tri(t, dtype=bool)


RIGHT["causal_mask"] = (check_causal_mask, causal_mask_mine)


# ---------------------------------------------------------------- 01 / Exercise 4
def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_interleaved(x, n_heads):  # head h gets features h, h+H, ... (strided)
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def merge_view(x):  # view of a transposed (non-contiguous) tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def merge_cat_batch(x):  # list(x) iterates over the batch, not the heads
    return torch.cat(list(x), dim=-1)


RIGHT["heads"] = (check_heads, split_heads, merge_heads)


# ---------------------------------------------------------------- 01 / Exercise 5
def multi_head_attention(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    o = attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), mask)
    return mha.out_proj(merge_heads(o))


def mha_kqv_order(x, mha, mask=None):  # chunk read as k, q, v
    k, q, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    o = attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), mask)
    return mha.out_proj(merge_heads(o))


def mha_no_out_bias(x, mha, mask=None):  # out_proj by its weight only, bias forgotten
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    o = attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), mask)
    return merge_heads(o) @ mha.out_proj.weight.T


def mha_scale_by_d_model(x, mha, mask=None):  # sqrt(D) instead of sqrt(D_h)
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    qh, kh, vh = split_heads(q, h), split_heads(k, h), split_heads(v, h)
    s = qh @ kh.transpose(-2, -1) / math.sqrt(x.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_heads(w @ vh))


RIGHT["multi_head_attention"] = (check_multi_head_attention, multi_head_attention)


# ---------------------------------------------------------------- 02 / Exercise 1
def my_update_memory(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_new_first(mem, h, mem_len):  # [h, mem]: the new states put before the old
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_keep_oldest(mem, h, mem_len):  # keeps the first mem_len states
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_first_untruncated(mem, h, mem_len):  # no memory yet: h returned whole
    if mem is None:
        return h.detach()
    x = torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


RIGHT["update_memory"] = (check_update_memory, my_update_memory)


# ---------------------------------------------------------------- 02 / Exercise 2
def my_segment_mask(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_start_not_multiplied(n, seg_len, mem_len):  # start(i) = i // seg_len
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i // seg_len - mem_len)


def sm_previous_segment(n, seg_len, mem_len):  # whole previous segment, mem_len unused
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j // seg_len >= i // seg_len - 1)


def sm_sliding_window(n, seg_len, mem_len):  # window of mem_len before i, not before start
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i - mem_len)


RIGHT["segment_mask"] = (check_segment_mask, my_segment_mask)


# ---------------------------------------------------------------- 02 / Exercise 3
def relative_distances(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_float(t, m):  # float arange
    return m + torch.arange(t, dtype=torch.float)[:, None] - torch.arange(m + t)[None, :]


def rd_no_memory_offset(t, m):  # query i placed at key position i, not m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_abs(t, m):  # absolute value: future keys positive
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


RIGHT["relative_distances"] = (check_relative_distances, relative_distances)


# ---------------------------------------------------------------- 02 / Exercise 4
def my_relative_shift(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):  # zero column on the right
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_flip(x):  # the shift read as reversing the columns
    return x.flip(-1)


def rs_drop_last_row(x):  # drops the last row of [S + 1, T], not the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


RIGHT["relative_shift"] = (check_relative_shift, my_relative_shift)


# ---------------------------------------------------------------- 02 / Exercise 5
def relative_scores(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_biases_swapped(q, k, r, u, v):  # v with the content keys, u with the positions
    ac = torch.einsum("bhtd,bhsd->bhts", q + v[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + u[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_in_place(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    q += (v - u)[:, None]
    bd = torch.einsum("bhtd,shd->bhts", q, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_bias_wrong_axis(q, k, r, u, v):  # u[None]: [1, H, D_h] lines H up with T
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, relative_scores)


# ---------------------------------------------------------------- more wrong answers
def aw_einsum_bst(q, k):  # einsum output letters in the wrong order: [B, S, T]
    return (torch.einsum("btd,bsd->bst", q, k) / math.sqrt(q.size(-1))).softmax(-1)


def att_if_mask(q, k, v, mask=None):  # `if mask:` for `if mask is not None:`
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def att_bool_index(q, k, v, mask=None):  # boolean indexing: fails on a [B, 1, S] mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[..., ~mask] = float("-inf")
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def cm_library(t):  # labnn's own causal_mask
    return causal_mask(t)


def cm_int32(t):  # int32 0/1
    return (torch.arange(t)[None, :] <= torch.arange(t)[:, None]).int()


def split_stack_heads_first(x, n_heads):  # stacked heads on axis 0: [H, B, T, D_h]
    return torch.stack(x.chunk(n_heads, -1), dim=0)


def merge_unstack(x):
    return torch.cat(list(x), dim=-1)


def mha_torch_sdpa(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    qh, kh, vh = split_heads(q, h), split_heads(k, h), split_heads(v, h)
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)  # torch's: a right answer
    return mha.out_proj(merge_heads(o))


def mha_chunk_tokens(x, mha, mask=None):  # chunk along the tokens
    q, k, v = mha.qkv(x).chunk(3, dim=1)
    h = mha.n_heads
    o = attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), mask)
    return mha.out_proj(merge_heads(o))


def um_cat_dim0(mem, h, mem_len):  # torch.cat's default dim=0, the batch
    x = h if mem is None else torch.cat([mem, h])
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def sm_start_mod(n, seg_len, mem_len):  # start(i) read as i % seg_len
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i % seg_len - mem_len)


def rd_int32(t, m):  # int32, not int64
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).int()


def rd_memory_only(t, m):  # keys: the memory only, [T, M]
    return m + torch.arange(t)[:, None] - torch.arange(m)[None, :]


def rs_2d_only(x):  # reshape(s + 1, t): one matrix only
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).reshape(s + 1, t)[1:].reshape(t, s)


def rs_first_axes(x):  # T, S taken from axes 0 and 1
    t, s = x.size(0), x.size(1)
    lead = x.shape[:-2]
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rsc_no_shift(q, k, r, u, v):  # position term left by distance
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + bd) / math.sqrt(q.size(-1))


def rsc_no_v(q, k, r, u, v):  # the position bias v forgotten: term (d) missing
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_scale_content_only(q, k, r, u, v):  # only the content term scaled
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac / math.sqrt(q.size(-1)) + relative_shift(bd)


def aw_double(q, k):  # computed in float64 for float32 inputs
    return (q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def mha_always_causal(x, mha, mask=None):  # a causal mask added when mask is None
    if mask is None:
        mask = causal_mask(x.size(1))
    return multi_head_attention(x, mha, mask)


def um_none_for_zero(mem, h, mem_len):  # None for mem_len = 0, not an empty [B, 0, D]
    if mem_len == 0:
        return None
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, -mem_len:].detach()


def um_no_clamp(mem, h, mem_len):  # start x.size(1) - mem_len without max(0, ...)
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - mem_len:].detach()


def rs_gather(x):  # a right answer by gather (zeros right of the diagonal)
    *lead, t, s = x.shape
    m = s - t
    i = torch.arange(t, device=x.device)[:, None]; j = torch.arange(s, device=x.device)[None, :]
    col = t - 1 - i + j
    ok = j <= m + i
    idx = col.clamp(max=s - 1).expand(*lead, t, s)
    return torch.gather(x, -1, idx).masked_fill(~ok, 0.0)


def rsc_r_reversed(q, k, r, u, v):  # r flipped: distances read as 0 .. S-1
    return relative_scores(q, k, r.flip(0), u, v)

# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("mha_torch_sdpa", check_multi_head_attention, mha_torch_sdpa, r"torch's fused attention is refused")
RIGHT["relative_shift_gather"] = (check_relative_shift, rs_gather)

# ---------------------------------------------------------------- cases
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"log[_ ]?softmax|negative")
case("aw_divide_by_d", check_attention_weights, aw_divide_by_d, r"sqrt|√")
case("aw_d_is_tokens", check_attention_weights, aw_d_is_tokens, r"q\.size\(-1\)|width|T\b.*queries")
case("att_fill_minus_1e9", check_attention, att_fill_minus_1e9, r"-1e9|finite|uniform|all[- ]False")
case("att_fill_zero", check_attention, att_fill_zero, r"-inf|0 instead|zero.*score|score.*0")
case("att_mask_after_softmax", check_attention, att_mask_after_softmax,
     r"before the softmax|after the softmax|sum to 1|renormal")
case("cm_float", check_causal_mask, cm_float, r"bool")
case("cm_batched", check_causal_mask, cm_batched, r"\[t, t\]|extra|batch|axis|unsqueeze|\[1,")
case("cm_numpy", check_causal_mask, cm_numpy, r"numpy|tensor")
case("heads_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"h ?\* ?D_h|slice|contiguous block|strided|interleav|feature")
case("merge_view", check_heads, (split_heads, merge_view), r"reshape|contiguous")
case("merge_cat_batch", check_heads, (split_heads, merge_cat_batch), r"batch")
case("mha_kqv_order", check_multi_head_attention, mha_kqv_order,
     r"order|q, k, v|swapped|queries and keys")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias, r"bias")
case("mha_scale_by_d_model", check_multi_head_attention, mha_scale_by_d_model,
     r"D_h|head width|d_head|sqrt")
case("um_new_first", check_update_memory, um_new_first, r"order|\[mem, h\]|old.*first|before")
case("um_keep_oldest", check_update_memory, um_keep_oldest, r"last|oldest|first mem_len|newest")
case("um_first_untruncated", check_update_memory, um_first_untruncated,
     r"None|no memory|truncat|first")
case("sm_start_not_multiplied", check_segment_mask, sm_start_not_multiplied,
     r"seg_len|multipl|start\(i\)")
case("sm_previous_segment", check_segment_mask, sm_previous_segment,
     r"seg_len where mem_len|mem_len.*(ignored|unused)|previous segment")
case("sm_sliding_window", check_segment_mask, sm_sliding_window,
     r"start\(i\)|segment start|sliding|i - mem_len")
case("rd_float", check_relative_distances, rd_float, r"long|int|dtype")
case("rd_no_memory_offset", check_relative_distances, rd_no_memory_offset,
     r"m \+ i|M \+ i|memory|offset")
case("rd_abs", check_relative_distances, rd_abs, r"negative|abs|future|sign")
case("rs_pad_right", check_relative_shift, rs_pad_right, r"left|right")
case("rs_flip", check_relative_shift, rs_flip, r"flip|revers|not a shift|per row")
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row, r"first row|last row")
case("rsc_biases_swapped", check_relative_scores, rsc_biases_swapped,
     r"u.*v.*swap|swapped|content_bias|position_bias|\bu\b.*\bv\b")
case("rsc_in_place", check_relative_scores, rsc_in_place, r"in[- ]place|changed|modif|q \+=")
case("rsc_bias_wrong_axis", check_relative_scores, rsc_bias_wrong_axis,
     r"u\[:, None\]|broadcast|axis|queries")

case("aw_einsum_bst", check_attention_weights, aw_einsum_bst,
     r"\[B, S, T\]|rows must be queries")
case("att_if_mask", check_attention, att_if_mask, r"is not None")
case("att_bool_index", check_attention, att_bool_index, r"boolean indexing|masked_fill")
case("cm_library", check_causal_mask, cm_library, r"labnn's own|yourself")
case("cm_int32", check_causal_mask, cm_int32, r"bool")
case("split_stack_heads_first", check_heads, (split_stack_heads_first, merge_unstack),
     r"\[H, B, T, D_h\]")
case("mha_chunk_tokens", check_multi_head_attention, mha_chunk_tokens, r"along time|dim=-1")
case("mha_always_causal", check_multi_head_attention, mha_always_causal, r"causal")
case("um_cat_dim0", check_update_memory, um_cat_dim0, r"batch axis|dim=1")
case("um_none_for_zero", check_update_memory, um_none_for_zero, r"\[B, 0, D\]|empty")
case("um_no_clamp", check_update_memory, um_no_clamp, r"negative|max\(0")
case("sm_start_mod", check_segment_mask, sm_start_mod, r"i % seg_len|offset")
case("rd_int32", check_relative_distances, rd_int32, r"int64|long")
case("rd_memory_only", check_relative_distances, rd_memory_only, r"m \+ t|AND the segment")
case("rs_2d_only", check_relative_shift, rs_2d_only, r"leading dim")
case("rs_first_axes", check_relative_shift, rs_first_axes,
     r"size\(0\)|first two axes|x\.shape\[-2:\]|last two axes")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"relative_shift")
case("rsc_no_v", check_relative_scores, rsc_no_v, r"position bias v|term \(d\)")
case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"only the content term|sum of both")
case("rsc_r_reversed", check_relative_scores, rsc_r_reversed, r"reversed|flip")
case("aw_double", check_attention_weights, aw_double, r"float64|dtype")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
