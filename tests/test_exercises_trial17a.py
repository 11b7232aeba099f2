"""Learner trial 17 (a): wrong answers for notebooks 01 and 02's checkers (issue 28)."""
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
from labnn.xl.relative_attention import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 01 Ex1: attention weights
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_scale_after_softmax(q, k):  # scales the weights, not the scores
    return (q @ k.transpose(-2, -1)).softmax(dim=-1) / math.sqrt(q.size(-1))


def aw_divide_by_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def aw_sqrt_of_key_count(q, k):  # d read as the number of keys S
    return (q @ k.transpose(-2, -1) / math.sqrt(k.size(1))).softmax(dim=-1)


RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_scale_after_softmax", check_attention_weights, aw_scale_after_softmax,
     r"(?i)(after the softmax|before the softmax|rows? .*sum)")
case("aw_divide_by_d", check_attention_weights, aw_divide_by_d,
     r"(?i)(sqrt|√|square root)")
case("aw_sqrt_of_key_count", check_attention_weights, aw_sqrt_of_key_count,
     r"(?i)(number of keys|width of (the )?quer|q\.size\(-1\)|S instead of D)")


# ---------------------------------------------------------------- 01 Ex2: attention
def at_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def at_fill_minus_1e4(q, k, v, mask=None):  # big negative, no special all-False rows
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e4)
    return s.softmax(dim=-1) @ v


def at_mask_after_softmax(q, k, v, mask=None):  # zeroes weights after softmax, no renorm
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def at_empty_rows_wrong_axis(q, k, v, mask=None):  # `any` over the queries, not the keys
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    return w @ v


RIGHT["attention"] = (check_attention, at_right)
case("at_fill_minus_1e4", check_attention, at_fill_minus_1e4,
     r"(?i)(all[- ]False|no key|nothing).*(zero|uniform|average)")
case("at_mask_after_softmax", check_attention, at_mask_after_softmax,
     r"(?i)(after the softmax|before the softmax|sum to 1|renormal)")
case("at_empty_rows_wrong_axis", check_attention, at_empty_rows_wrong_axis,
     r"(?i)(all[- ]False|empty|no key).*(row|quer|axis|keys)")


# ---------------------------------------------------------------- 01 Ex3: causal mask
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_pytorch_convention(t):  # True = masked out (nn.Transformer's convention)
    return torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)


def cm_float(t):  # right pattern, float dtype
    return torch.tril(torch.ones(t, t))


def cm_no_diagonal(t):  # strictly lower triangle: a token cannot see itself
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_pytorch_convention", check_causal_mask, cm_pytorch_convention,
     r"(?i)(invert|True = may attend|convention|~)")
case("cm_float", check_causal_mask, cm_float, r"(?i)(bool|dtype)")
case("cm_no_diagonal", check_causal_mask, cm_no_diagonal,
     r"(?i)(diagonal|itself)")


# ---------------------------------------------------------------- 01 Ex4: heads
def sh_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def mh_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def sh_interleaved(x, n_heads):  # H and D_h swapped in the view: head h gets h, h+H, ...
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def mh_interleaved(x):  # its exact inverse, so the round trip is fine
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def mh_flatten_from_1(x):  # flatten(1) also flattens the tokens
    return x.transpose(1, 2).flatten(1)


def mh_view(x):  # view on a non-contiguous tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


RIGHT["heads"] = (check_heads, sh_right, mh_right)
case("hd_interleaved", check_heads, (sh_interleaved, mh_interleaved),
     r"(?i)(features? .*h\s*\*?\s*D_h|interleav|strided|view\(B, T, H, D_h\)|slices?)")
case("hd_merge_flatten_1", check_heads, (sh_right, mh_flatten_from_1),
     r"(?i)(flatten|tokens?).*(\[B, T, H \* D_h\]|\[B, T, D\])|\[B, T\*H\*D_h\]")
case("hd_merge_view", check_heads, (sh_right, mh_view),
     r"(?i)(reshape|contiguous)")


# ---------------------------------------------------------------- 01 Ex5: multi-head attention
def _mha_core(q, k, v, mha, mask, scale_d=None):
    h = mha.n_heads
    q, k, v = (sh_right(z, h) for z in (q, k, v))
    d = scale_d if scale_d is not None else q.size(-1)
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return mha.out_proj(mh_right(w @ v))


def mha_right(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return _mha_core(q, k, v, mha, mask)


def mha_scale_by_d_model(x, mha, mask=None):  # sqrt(D), not sqrt(D_h)
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return _mha_core(q, k, v, mha, mask, scale_d=x.size(-1))


def mha_q_k_swapped(x, mha, mask=None):  # unpacks the chunks as k, q, v
    k, q, v = mha.qkv(x).chunk(3, dim=-1)
    return _mha_core(q, k, v, mha, mask)


def mha_chunk_per_head(x, mha, mask=None):  # splits [B, T, 3D] into heads, then chunks
    h = mha.n_heads
    qkv = sh_right(mha.qkv(x), h)  # [B, H, T, 3 D_h]
    q, k, v = qkv.chunk(3, dim=-1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return mha.out_proj(mh_right(w @ v))


RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
case("mha_scale_by_d_model", check_multi_head_attention, mha_scale_by_d_model,
     r"(?i)(sqrt|√).*(D_h|head width|one head)|(D_h|head).*(sqrt|√)")
case("mha_q_k_swapped", check_multi_head_attention, mha_q_k_swapped,
     r"(?i)(q.*k.*(swap|order|exchang)|chunk.*order|queries and keys)")
case("mha_chunk_per_head", check_multi_head_attention, mha_chunk_per_head,
     r"(?i)(chunk.*(before|first)|split.*(after|each of)|heads? before chunk)")


# ---------------------------------------------------------------- 02 Ex1: update memory
def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_keep_oldest(mem, h, mem_len):  # keeps the first mem_len states
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_new_first(mem, h, mem_len):  # concatenates the new states before the memory
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_ignores_mem(mem, h, mem_len):  # right only when the segment is >= mem_len
    return h[:, max(h.size(1) - mem_len, 0):].detach()


RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_keep_oldest", check_update_memory, um_keep_oldest,
     r"(?i)(oldest|first mem_len|last mem_len|newest)")
case("um_new_first", check_update_memory, um_new_first,
     r"(?i)(order|\[mem, h\]|before|after|h first)")
case("um_ignores_mem", check_update_memory, um_ignores_mem,
     r"(?i)(old memory|mem.*(ignored|dropped|missing|concaten)|shorter than mem_len)")


# ---------------------------------------------------------------- 02 Ex2: segment mask
def sm_right(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_sliding_window(n, seg_len, mem_len):  # a window of mem_len behind each query
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i - mem_len)


def sm_no_causal(n, seg_len, mem_len):  # forgets that keys must not be in the future
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return j >= (i // seg_len) * seg_len - mem_len


def sm_one_previous_segment(n, seg_len, mem_len):  # right only when mem_len == seg_len
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (i // seg_len - j // seg_len <= 1)


RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_sliding_window", check_segment_mask, sm_sliding_window,
     r"(?i)(start\(i\)|segment start|sliding|window|i - mem_len)")
case("sm_no_causal", check_segment_mask, sm_no_causal,
     r"(?i)(future|j <= i|causal)")
case("sm_one_previous_segment", check_segment_mask, sm_one_previous_segment,
     r"(?i)(seg_len where mem_len|mem_len.*(ignored|not used)|whole previous segment)")


# ---------------------------------------------------------------- 02 Ex3: relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_float(t, m):  # float arange: right values, wrong dtype
    return m + torch.arange(t, dtype=torch.float)[:, None] - torch.arange(m + t)[None, :]


def rd_abs(t, m):  # |m + i - j|: future keys get positive distances
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


def rd_no_offset(t, m):  # i - j: forgets that query i sits at key position m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_float", check_relative_distances, rd_float, r"(?i)(long|int64|dtype|integer)")
case("rd_abs", check_relative_distances, rd_abs,
     r"(?i)(abs|negative|future|sign)")
case("rd_no_offset", check_relative_distances, rd_no_offset,
     r"(?i)(m \+ i|M \+ i|offset|memory|sits at)")


# ---------------------------------------------------------------- 02 Ex4: relative shift
def rs_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):  # zero column on the right
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_transpose(x):  # "read as [S+1, T]" done with a transpose
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0)).transpose(-2, -1)
    return padded[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last_row(x):  # drops the last row, not the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


RIGHT["relative_shift"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right, r"(?i)(left|right|pad)")
case("rs_transpose", check_relative_shift, rs_transpose,
     r"(?i)(transpose|reshape|same numbers|memory order)")
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row,
     r"(?i)(first row|last row|drop)")


# ---------------------------------------------------------------- 02 Ex5: relative scores
def rsc_right(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_biases_swapped(q, k, r, u, v):  # v with the content keys, u with the position keys
    return rsc_right(q, k, r, v, u)


def rsc_scale_content_only(q, k, r, u, v):  # divides only (a) + (c) by sqrt(d_h)
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k) / math.sqrt(q.size(-1))
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac + relative_shift(bd)


def rsc_inplace_bias(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q - u[:, None] + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, rsc_right)
case("rsc_biases_swapped", check_relative_scores, rsc_biases_swapped,
     r"(?i)(u and v|swap|content bias.*position|position bias.*content)")
case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"(?i)(sqrt|√).*(both|position|\(b\)|whole|sum)")
case("rsc_inplace_bias", check_relative_scores, rsc_inplace_bias,
     r"(?i)(in[- ]place|changed|modif|caller)")


# ---------------------------------------------------------------- second round, harder slips
def aw_log_softmax(q, k):  # log_softmax by autocomplete
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def aw_float64(q, k):  # computes in double "for accuracy" and returns float64
    return aw_right(q.double(), k.double())


case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"(?i)log[_ ]?softmax")
case("aw_float64", check_attention_weights, aw_float64, r"(?i)(float64|double|dtype)")


def at_additive_mask(q, k, v, mask=None):  # (~mask) * -inf: 0 * -inf is NaN where allowed
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + (~mask) * float("-inf")
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def at_returns_weights_too(q, k, v, mask=None):  # returns (out, weights) like labnn's sdpa
    w = attention_weights_masked(q, k, mask)
    return w @ v, w


def attention_weights_masked(q, k, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w


case("at_additive_mask", check_attention, at_additive_mask,
     r"(?i)(0 \* -inf|0 \* inf|inf \* 0|multipl\w* .*-inf|masked_fill)")
case("at_returns_weights_too", check_attention, at_returns_weights_too,
     r"(?i)(tuple|weights too|only the output|two values)")


def cm_with_batch_axis(t):  # [1, t, t]: "anything that broadcasts"
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


case("cm_with_batch_axis", check_causal_mask, cm_with_batch_axis,
     r"(?i)(\[1, 4, 4\]|extra|leading|\[t, t\]).*")


def sh_split_not_chunk(x, n_heads):  # split(n) cuts pieces of SIZE n, chunk(n) n pieces
    return torch.stack(x.split(n_heads, dim=-1), dim=1)


def mh_cat_heads(x):
    return torch.cat(x.unbind(1), dim=-1)


case("hd_split_not_chunk", check_heads, (sh_split_not_chunk, mh_cat_heads),
     r"(?i)(split\(|chunk|pieces of size|width n_heads|D_h = )")


def mha_ignores_mask(x, mha, mask=None):  # forgets to pass the mask on
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return _mha_core(q, k, v, mha, None)


def mha_no_out_bias(x, mha, mask=None):  # out_proj's weight only, bias forgotten
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    h = mha.n_heads
    q, k, v = (sh_right(z, h) for z in (q, k, v))
    w = attention_weights_masked(q, k, mask)
    return mh_right(w @ v) @ mha.out_proj.weight.T


case("mha_ignores_mask", check_multi_head_attention, mha_ignores_mask,
     r"(?i)mask.*(ignor|not (used|applied|passed)|forgot)")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias, r"(?i)bias")


def um_none_for_zero(mem, h, mem_len):  # no memory at all -> None
    if mem_len == 0:
        return None
    return um_right(mem, h, mem_len)


def um_cat_none(mem, h, mem_len):  # forgets the first segment, where mem is None
    x = torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_cat_batch(mem, h, mem_len):  # concatenates along dim 0
    x = h if mem is None else torch.cat([mem, h], dim=0)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


case("um_none_for_zero", check_update_memory, um_none_for_zero,
     r"(?i)(None|\[B, 0, D\]|empty)")
case("um_cat_none", check_update_memory, um_cat_none, r"(?i)(mem is None|None)")
case("um_cat_batch", check_update_memory, um_cat_batch,
     r"(?i)(dim=?1|time|dim 0|batch)")


def sm_transposed(n, seg_len, mem_len):  # rows are keys, columns queries
    return sm_right(n, seg_len, mem_len).T


def sm_start_of_key(n, seg_len, mem_len):  # start(j) instead of start(i)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (j // seg_len) * seg_len - mem_len)


case("sm_transposed", check_segment_mask, sm_transposed,
     r"(?i)(transpos|rows? .*quer|\[i, j\]|query.*key.*swap)")
case("sm_start_of_key", check_segment_mask, sm_start_of_key,
     r"(?i)(start\(j\)|key's segment|segment of the key|start\(i\))")


def rd_segment_keys_only(t, m):  # forgets the memory keys: [T, T]
    return torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_int32(t, m):
    return rd_right(t, m).int()


case("rd_segment_keys_only", check_relative_distances, rd_segment_keys_only,
     r"(?i)(memory keys|S = m \+ t|m \+ t keys|\[T, S\])")
case("rd_int32", check_relative_distances, rd_int32, r"(?i)(int64|long|int32)")


def rs_2d_only(x):  # right for a [T, S] matrix, not for [B, H, T, S]
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).reshape(s + 1, t)[1:].reshape(t, s)


def rs_flip(x):  # reverses the distances instead of shifting
    return x.flip(-1)


def rs_roll_rows(x):  # each row rolled left by T - 1 - i: the visible entries are right
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(-(t - 1 - i), dims=-1) for i in range(t)], dim=-2)


case("rs_2d_only", check_relative_shift, rs_2d_only,
     r"(?i)(leading|\[B, H|\*lead|any leading|batch)")
case("rs_flip", check_relative_shift, rs_flip, r"(?i)(flip|revers)")
RIGHT["relative_shift_roll"] = (check_relative_shift, rs_roll_rows)


def rsc_shift_both(q, k, r, u, v):  # shifts the content term as well
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return relative_shift(ac + bd) / math.sqrt(q.size(-1))


def rsc_bias_no_query_axis(q, k, r, u, v):  # u[None]: [1, H, D_h] lines H up with T
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_r_reversed(q, k, r, u, v):  # reads row delta of r as distance delta
    return rsc_right(q, k, r.flip(0), u, v)


case("rsc_shift_both", check_relative_scores, rsc_shift_both,
     r"(?i)(only the position|content term.*(not|no) shift|shift.*only)")
case("rsc_bias_no_query_axis", check_relative_scores, rsc_bias_no_query_axis,
     r"(?i)(u\[:, None\]|query axis|axis for the queries|broadcast)")
case("rsc_r_reversed", check_relative_scores, rsc_r_reversed,
     r"(?i)(S - 1|largest distance first|revers|flip)")


# ---------------------------------------------------------------- third round
def at_mask_unsqueeze0(q, k, v, mask=None):  # always adds a batch axis to the mask
    return at_right(q, k, v, None if mask is None else mask[None])


def at_inplace_scale(q, k, v, mask=None):  # q /= sqrt(d) changes the caller's q
    q /= math.sqrt(q.size(-1))
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


case("at_mask_unsqueeze0", check_attention, at_mask_unsqueeze0,
     r"(?i)(mask\[None\]|unsqueez\w* the mask|mask (already )?has (a|the|its) batch"
     r"|axis to the mask|mask .{0,15}extra axis)")
case("at_inplace_scale", check_attention, at_inplace_scale,
     r"(?i)(in[- ]place|caller|modif)")


def mh_head_minor(x):  # merges with the head axis last: features interleaved
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


case("hd_merge_head_minor", check_heads, (sh_right, mh_head_minor),
     r"(?i)(interleav|permute|order|transpose\(1, 2\)|head.*last)")


def mha_always_causal(x, mha, mask=None):  # adds a causal mask when none is given
    t = x.size(1)
    if mask is None:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    return mha_right(x, mha, mask)


def mha_weight_no_T(x, mha, mask=None):  # x @ W instead of x @ W.T
    q, k, v = (x @ mha.qkv.weight + mha.qkv.bias).chunk(3, dim=-1)
    return _mha_core(q, k, v, mha, mask)


case("mha_always_causal", check_multi_head_attention, mha_always_causal,
     r"(?i)(causal|no mask|mask=None|every key)")
case("mha_weight_no_T", check_multi_head_attention, mha_weight_no_T,
     r"(?i)(\.T|transpos|mha\.qkv\(x\)|call the layer)")


def um_clone_not_detach(mem, h, mem_len):  # clone copies but keeps the graph
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].clone()


case("um_clone_not_detach", check_update_memory, um_clone_not_detach,
     r"(?i)(detach|clone|grad)")


def sm_int(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).int()


case("sm_int", check_segment_mask, sm_int, r"(?i)(bool|dtype)")


def rsc_scale_d_model(q, k, r, u, v):  # sqrt(H * D_h), the model width
    return rsc_right(q, k, r, u, v) * math.sqrt(q.size(-1)) / math.sqrt(q.size(1) * q.size(-1))


def rsc_bias_on_keys(q, k, r, u, v):  # adds the biases to the keys
    ac = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    bd = torch.einsum("bhtd,shd->bhts", q, r + v[None])
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("rsc_scale_d_model", check_relative_scores, rsc_scale_d_model,
     r"(?i)(sqrt\(d_head\)|d_model|head width|H \* D_h)")
case("rsc_bias_on_keys", check_relative_scores, rsc_bias_on_keys,
     r"(?i)(to q|queries|q \+ u|keys)")


def at_torch_sdpa(q, k, v, mask=None):  # torch's fused kernel (zeros there in 2.13)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mha_torch_sdpa(x, mha, mask=None):  # the same, per head
    q, k, v = (sh_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mh_right(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))


# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("attention_torch_sdpa", check_attention, at_torch_sdpa, r"torch's fused attention is refused")
# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("multi_head_attention_torch_sdpa", check_multi_head_attention, mha_torch_sdpa, r"torch's fused attention is refused")


# ---------------------------------------------------------------- fourth round: crashes
def aw_transpose_01(q, k):  # transposes the batch and key axes of k
    return (q @ k.transpose(0, 1) / math.sqrt(q.size(-1))).softmax(dim=-1)


case("aw_transpose_01", check_attention_weights, aw_transpose_01,
     r"(?i)(transpose\(-2, -1\)|transpose\(1, 2\)|last two axes|transpose\(0, 1\))")


def cm_tril_of_int(t):  # tril wants a tensor, not the size
    return torch.tril(t).bool()


case("cm_tril_of_int", check_causal_mask, cm_tril_of_int,
     r"(?i)(torch\.ones|square of True|not the size)")


def mha_split_not_chunk(x, mha, mask=None):  # split(3): pieces of width 3, not 3 pieces
    q, k, v = mha.qkv(x).split(3, dim=-1)
    return _mha_core(q, k, v, mha, mask)


case("mha_split_not_chunk", check_multi_head_attention, mha_split_not_chunk,
     r"(?i)(chunk\(3|split\(3|three pieces|3 pieces|pieces of)")


def rs_pad_rows(x):  # F.pad's (1, 0, 0, 0) misread as (rows, ...): pads a row on top
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 0, 1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


case("rs_pad_rows", check_relative_shift, rs_pad_rows,
     r"(?i)(last axis first|F\.pad\(x, \(1, 0\)\)|pads? .*row|column)")


def rsc_r_layout(q, k, r, u, v):  # reads r as [H, S, D_h]
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,hsd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("rsc_r_layout", check_relative_scores, rsc_r_layout,
     r"(?i)(\[S, H, D_h\]|shd|r's (layout|axes)|r is \[S)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
