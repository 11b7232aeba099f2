"""Learner trial 18 (a): notebooks 01 (attention) and 02 (Transformer-XL), issue 28."""

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

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 01 · Exercise 1: weights
def weights_ok(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_sqrt_s(q, k):  # scale by the number of keys
    return (q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))).softmax(dim=-1)


def weights_log_softmax(q, k):  # log_softmax in place of softmax
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def weights_scale_after(q, k):  # scale after the softmax
    return (q @ k.transpose(-2, -1)).softmax(dim=-1) / math.sqrt(q.size(-1))


def weights_by_d(q, k):  # divide by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


RIGHT["weights"] = (check_attention_weights, weights_ok)
case("w_sqrt_s", check_attention_weights, weights_sqrt_s, r"(?i)scal|sqrt|√")
case("w_log_softmax", check_attention_weights, weights_log_softmax,
     r"(?i)log.?softmax|sum to 1|negative")
case("w_scale_after", check_attention_weights, weights_scale_after,
     r"(?i)(before|after) the softmax|sum to 1")
case("w_by_d", check_attention_weights, weights_by_d, r"(?i)sqrt|√|square root")


# ---------------------------------------------------------------- 01 · Exercise 2: attention
def attention_ok(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1).nan_to_num(0.0)
    return w @ v


def attention_mask_zero(q, k, v, mask=None):  # masked scores set to 0, not -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    return s.softmax(dim=-1) @ v


def attention_mask_after(q, k, v, mask=None):  # mask multiplied after the softmax
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def attention_big_negative(q, k, v, mask=None):  # -1e9: an all-False row gets a uniform average
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def attention_sqrt_dv(q, k, v, mask=None):  # scaled by the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(dim=-1).nan_to_num(0.0) @ v


RIGHT["attention"] = (check_attention, attention_ok)
case("a_mask_zero", check_attention, attention_mask_zero,
     r"(?i)-inf|masked (scores|keys)|0 instead")
case("a_mask_after", check_attention, attention_mask_after,
     r"(?i)before the softmax|sum to 1|renormal")
case("a_big_negative", check_attention, attention_big_negative,
     r"(?i)all.?False|no True|zeros|uniform|-1e9")
case("a_sqrt_dv", check_attention, attention_sqrt_dv,
     r"(?i)q\.size\(-1\)|values' width|D_v|width of (the )?values")


# ---------------------------------------------------------------- 01 · Exercise 3: causal mask
def causal_ok(t):
    i = torch.arange(t)
    return i[None, :] <= i[:, None]


def causal_float(t):  # a float tensor of ones and zeros
    return torch.ones(t, t).tril()


def causal_strict(t):  # the token itself excluded
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def causal_batched(t):  # an extra batch axis
    return causal_ok(t)[None]


def causal_uint8(t):  # uint8 instead of bool
    return torch.ones(t, t, dtype=torch.uint8).tril()


RIGHT["causal"] = (check_causal_mask, causal_ok)
case("c_float", check_causal_mask, causal_float, r"(?i)bool")
case("c_strict", check_causal_mask, causal_strict, r"(?i)diagonal|itself|j <= i|j ≤ i")
case("c_batched", check_causal_mask, causal_batched, r"(?i)\[t, t\]|extra|batch|two axes|2-D|2 dim")
case("c_uint8", check_causal_mask, causal_uint8, r"(?i)bool")


# ---------------------------------------------------------------- 01 · Exercise 4: heads
def split_ok(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_ok(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_strided(x, n_heads):  # head h gets features h, h+H, ...
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_strided(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def merge_view(x):  # view on a non-contiguous tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def merge_dh_major(x):  # merged as [B, T, D_h, H] flattened
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_by_t(x, n_heads):  # D_h from the wrong axis (T)
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, -1)[..., : t // n_heads].transpose(1, 2)


RIGHT["heads"] = (check_heads, split_ok, merge_ok)
case("h_strided", check_heads, (split_strided, merge_strided),
     r"(?i)h\s*\*\s*D_h|contiguous slice|strided|interleav|feature")
case("h_merge_view", check_heads, (split_ok, merge_view), r"(?i)contiguous|reshape")
case("h_merge_dh_major", check_heads, (split_ok, merge_dh_major),
     r"(?i)merge.*(order|head)|head.*feature")
case("h_split_by_t", check_heads, (split_by_t, merge_ok), r"(?i)D_h.*(T|token)|D // H|x.size\(-1\)")


# ---------------------------------------------------------------- 01 · Exercise 5: MHA
def _mha(x, mha, mask, order=(0, 1, 2), scale_by=None, bias=True):
    b, t, d = x.shape
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_ok(parts[i], mha.n_heads) for i in order)
    scale = math.sqrt(scale_by if scale_by else q.size(-1))
    s = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    y = merge_ok(s.softmax(dim=-1).nan_to_num(0.0) @ v)
    return mha.out_proj(y) if bias else y @ mha.out_proj.weight.T


def mha_ok(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_kqv(x, mha, mask=None):  # q and k swapped in the chunk
    return _mha(x, mha, mask, order=(1, 0, 2))


def mha_sqrt_model(x, mha, mask=None):  # scaled by sqrt(D), not sqrt(D_h)
    return _mha(x, mha, mask, scale_by=x.size(-1))


def mha_always_causal(x, mha, mask=None):  # a causal mask added when mask is None
    if mask is None:
        mask = causal_ok(x.size(1))
    return _mha(x, mha, mask)


def mha_no_bias(x, mha, mask=None):  # out_proj's bias forgotten
    return _mha(x, mha, mask, bias=False)


RIGHT["mha"] = (check_multi_head_attention, mha_ok)
case("m_kqv", check_multi_head_attention, mha_kqv, r"(?i)(q|quer).*(k|key).*(swap|order)|chunk")
case("m_sqrt_model", check_multi_head_attention, mha_sqrt_model, r"(?i)D_h|head width|sqrt|√")
case("m_always_causal", check_multi_head_attention, mha_always_causal,
     r"(?i)(mask=)?None.*(no mask|every key)|causal")
case("m_no_bias", check_multi_head_attention, mha_no_bias, r"(?i)bias")


# ---------------------------------------------------------------- 02 · Exercise 1: memory
def mem_ok(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    start = max(full.size(1) - mem_len, 0)
    return full[:, start:].detach()


def mem_h_first(mem, h, mem_len):  # concatenated in the wrong order
    full = h if mem is None else torch.cat([h, mem], dim=1)
    return full[:, max(full.size(1) - mem_len, 0):].detach()


def mem_first_states(mem, h, mem_len):  # keeps the oldest states
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, :mem_len].detach()


def mem_none_untrimmed(mem, h, mem_len):  # no trimming when there is no memory yet
    if mem is None:
        return h.detach()
    return mem_ok(mem, h, mem_len)


def mem_segment_only(mem, h, mem_len):  # old memory dropped
    return h[:, max(h.size(1) - mem_len, 0):].detach()


RIGHT["memory"] = (check_update_memory, mem_ok)
case("u_h_first", check_update_memory, mem_h_first,
     r"(?i)order|\[mem, h\]|mem.*before|oldest first")
case("u_first_states", check_update_memory, mem_first_states, r"(?i)last|latest|oldest|first")
case("u_none_untrimmed", check_update_memory, mem_none_untrimmed,
     r"(?i)None.*mem_len|mem_len.*None|trim")
case("u_segment_only", check_update_memory, mem_segment_only,
     r"(?i)old memory|previous memory|mem\b.*(drop|ignor|lost)")


# ---------------------------------------------------------------- 02 · Exercise 2: segment mask
def seg_ok(n, seg_len, mem_len):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j <= i)


def seg_strict(n, seg_len, mem_len):  # the query's own key excluded
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= (i // seg_len) * seg_len - mem_len) & (j < i)


def seg_sliding(n, seg_len, mem_len):  # a sliding window i - mem_len, no segments
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= i - mem_len) & (j <= i)


def seg_no_causal(n, seg_len, mem_len):  # the whole segment visible
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j < start + seg_len)


def seg_float(n, seg_len, mem_len):  # a float mask
    return seg_ok(n, seg_len, mem_len).float()


RIGHT["segment"] = (check_segment_mask, seg_ok)
case("s_strict", check_segment_mask, seg_strict, r"(?i)diagonal|itself|j <= i|j ≤ i")
case("s_sliding", check_segment_mask, seg_sliding, r"(?i)start\(i\)|segment start|sliding")
case("s_no_causal", check_segment_mask, seg_no_causal, r"(?i)future|causal|j <= i|j ≤ i|j > i")
case("s_float", check_segment_mask, seg_float, r"(?i)bool")


# ---------------------------------------------------------------- 02 · Exercise 3: distances
def dist_ok(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_no_m(t, m):  # the memory offset forgotten
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_keys_m(t, m):  # only the memory keys
    return m + torch.arange(t)[:, None] - torch.arange(m)[None, :]


def dist_clamped(t, m):  # future distances clamped to 0
    return dist_ok(t, m).clamp(min=0)


def dist_int32(t, m):  # int32
    return dist_ok(t, m).int()


RIGHT["distances"] = (check_relative_distances, dist_ok)
case("d_no_m", check_relative_distances, dist_no_m, r"(?i)\bm\b|offset|memory|M \+ i")
case("d_keys_m", check_relative_distances, dist_keys_m, r"(?i)S = m \+ t|m \+ t|keys")
case("d_clamped", check_relative_distances, dist_clamped, r"(?i)negative|future|clamp")
case("d_int32", check_relative_distances, dist_int32, r"(?i)int64|long|dtype")


# ---------------------------------------------------------------- 02 · Exercise 4: shift
def shift_ok(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_pad_right(x):  # zero column padded on the right
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_drop_last(x):  # last row dropped
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def shift_flat_lead(x):  # leading axes flattened before dropping the row
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(-1, t)[1:].reshape(*lead, t, s)


def shift_transpose(x):  # transposed instead of re-read
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0)).transpose(-2, -1)
    return padded[..., 1:, :].transpose(-2, -1)


RIGHT["shift"] = (check_relative_shift, shift_ok)
case("r_pad_right", check_relative_shift, shift_pad_right, r"(?i)left|pad")
case("r_drop_last", check_relative_shift, shift_drop_last, r"(?i)first row|drop")
case("r_flat_lead", check_relative_shift, shift_flat_lead, r"(?i)leading|batch|B, H|\.\.\.")
case("r_transpose", check_relative_shift, shift_transpose, r"(?i)reshape|transpose|re-?read")


# ---------------------------------------------------------------- 02 · Exercise 5: scores
def scores_ok(q, k, r, u, v):
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + shift_ok(bd)) / math.sqrt(q.size(-1))


def scores_uv_swapped(q, k, r, u, v):  # u with the position keys, v with the content keys
    return scores_ok(q, k, r, v, u)


def scores_no_shift(q, k, r, u, v):  # relative_shift forgotten
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + bd) / math.sqrt(q.size(-1))


def scores_inplace(q, k, r, u, v):  # q += u changes the caller's q
    q_u = q.add_(u[:, None])
    ac = torch.einsum("bhid,bhjd->bhij", q_u, k)
    bd = torch.einsum("bhid,jhd->bhij", q_u - u[:, None] + v[:, None], r)
    return (ac + shift_ok(bd)) / math.sqrt(q.size(-1))


def scores_u_misaligned(q, k, r, u, v):  # u[None]: u's heads meet the query axis
    ac = torch.einsum("bhid,bhjd->bhij", q + u[None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[None], r)
    return (ac + shift_ok(bd)) / math.sqrt(q.size(-1))


RIGHT["scores"] = (check_relative_scores, scores_ok)
case("x_uv_swapped", check_relative_scores, scores_uv_swapped,
     r"(?i)u.*v.*(swap|exchang)|content bias|position bias")
case("x_no_shift", check_relative_scores, scores_no_shift, r"(?i)shift")
case("x_inplace", check_relative_scores, scores_inplace, r"(?i)in.?place|changed.*q|modif")
case("x_u_misaligned", check_relative_scores, scores_u_misaligned,
     r"(?i)u\[:, None\]|query axis|head|broadcast")


# ================================================================ second round: subtler slips
def weights_no_max(q, k):  # hand-written softmax, no max subtracted
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)


def weights_times_sqrt(q, k):  # multiplied by sqrt(d)
    return (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(dim=-1)


case("w_no_max", check_attention_weights, weights_no_max, r"(?i)overflow|max|inf|nan|large")
case("w_times_sqrt", check_attention_weights, weights_times_sqrt, r"(?i)multipl|divide")


def attention_tuple(q, k, v, mask=None):  # returns (output, weights) like labnn's function
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1).nan_to_num(0.0)
    return w @ v, w


def attention_additive(q, k, v, mask=None):  # the bool mask added to the scores
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + mask.float()
    return s.softmax(dim=-1) @ v


def attention_index_fill(q, k, v, mask=None):  # s[~mask] = -inf with a [T, S] mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[~mask] = float("-inf")
    return s.softmax(dim=-1).nan_to_num(0.0) @ v


case("a_tuple", check_attention, attention_tuple, r"(?i)tuple|output only|weights too|two")
case("a_additive", check_attention, attention_additive, r"(?i)add(ed)?.*mask|-inf|masked_fill")
case("a_index_fill", check_attention, attention_index_fill,
     r"(?i)broadcast|\[T, S\]|masked_fill|batch")


def causal_numpy(t):  # a numpy array
    import numpy as np
    return np.tril(np.ones((t, t), dtype=bool))


def causal_transposed(t):  # key by query: triu
    return torch.ones(t, t, dtype=torch.bool).triu()


case("c_numpy", check_causal_mask, causal_numpy, r"(?i)numpy|torch\.Tensor|tensor")
case("c_transposed", check_causal_mask, causal_transposed, r"(?i)transpos|triu|future|j <= i|j > i")


def split_no_transpose(x, n_heads):  # [B, T, H, D_h], head axis not moved
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads)


def merge_no_transpose(x):
    b, t, h, dh = x.shape
    return x.reshape(b, t, h * dh)


def split_stack(x, n_heads):  # right: chunks stacked
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def merge_cat(x):  # right: heads concatenated
    return torch.cat(x.unbind(1), dim=-1)


RIGHT["heads_stack"] = (check_heads, split_stack, merge_cat)
case("h_no_transpose", check_heads, (split_no_transpose, merge_no_transpose),
     r"(?i)transpose|head axis|\[B, T, H, D_h\]")


def mha_fused_layout(x, mha, mask=None):  # qkv viewed as [B, T, H, 3, D_h]
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = mha.qkv(x).view(b, t, h, 3, d // h).unbind(3)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge_ok(s.softmax(dim=-1).nan_to_num(0.0) @ v))


def mha_nan_rows(x, mha, mask=None):  # fully masked rows left as NaN
    b, t, d = x.shape
    q, k, v = (split_ok(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge_ok(s.softmax(dim=-1) @ v))


case("m_fused_layout", check_multi_head_attention, mha_fused_layout,
     r"(?i)chunk|side by side|\[Q, K, V\]|layout")
case("m_nan_rows", check_multi_head_attention, mha_nan_rows, r"(?i)NaN|all False|zeros")


def mem_negative_start(mem, h, mem_len):  # start = size - mem_len without max(., 0)
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - mem_len:].detach()


def mem_clone(mem, h, mem_len):  # clone instead of detach
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, max(full.size(1) - mem_len, 0):].clone()


case("u_negative_start", check_update_memory, mem_negative_start,
     r"(?i)max\(0|negative|fewer|shorter")
case("u_clone", check_update_memory, mem_clone, r"(?i)detach|gradient|SG|stop")


def seg_transposed(n, seg_len, mem_len):  # key by query
    return seg_ok(n, seg_len, mem_len).T


def seg_from_one(n, seg_len, mem_len):  # segments counted from position 1
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = ((i + 1) // seg_len) * seg_len
    return (j >= start - mem_len) & (j <= i)


case("s_transposed", check_segment_mask, seg_transposed, r"(?i)transpos|query i.*row|\.T\b")
case("s_from_one", check_segment_mask, seg_from_one,
     r"(?i)start\(i\)|i // seg_len|\+ 1|off by one|segment starting at")


def dist_transposed(t, m):  # [S, T]
    return dist_ok(t, m).T


def dist_plus_one(t, m):  # distances counted from 1
    return dist_ok(t, m) + 1


def dist_float(t, m):  # float distances
    return dist_ok(t, m).float()


case("d_transposed", check_relative_distances, dist_transposed, r"(?i)transpos|\[T, S\]|\[S, T\]")
case("d_plus_one", check_relative_distances, dist_plus_one,
     r"(?i)\+ 1|own key.*0|off by one|one too")
case("d_float", check_relative_distances, dist_float, r"(?i)long|int64|dtype")


def shift_t_s_swapped(x):  # reads padded as [T, S + 1]: the same shape, no slide
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, t, s + 1)[..., :, 1:].reshape(*lead, t, s)


def shift_flip(x):  # flips the columns: distance to key by reversal only
    return x.flip(-1)


case("r_t_s_swapped", check_relative_shift, shift_t_s_swapped,
     r"(?i)\[(\.\.\., )?T, S \+ 1\]|t, s \+ 1|first column|T and S")
case("r_flip", check_relative_shift, shift_flip, r"(?i)flip|revers|slide|shift")


def scores_no_position(q, k, r, u, v):  # terms (b) and (d) left out
    return torch.einsum("bhid,bhjd->bhij", q + u[:, None], k) / math.sqrt(q.size(-1))


def scores_scale_content_only(q, k, r, u, v):  # only the content term scaled
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k) / math.sqrt(q.size(-1))
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return ac + shift_ok(bd)


def scores_shift_sum(q, k, r, u, v):  # shift applied to the sum
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return shift_ok(ac + bd) / math.sqrt(q.size(-1))


case("x_no_position", check_relative_scores, scores_no_position, r"(?i)position|\(b\)|\(d\)|\br\b")
case("x_scale_content_only", check_relative_scores, scores_scale_content_only,
     r"(?i)both|sum.*sqrt|whole|position.*(scal|divid)")
case("x_shift_sum", check_relative_scores, scores_shift_sum,
     r"(?i)shift.*(only|position)|content.*shift")



# ================================================================ third round
def mha_qkv_no_bias(x, mha, mask=None):  # qkv by hand, its bias left out
    q, k, v = (split_ok(z, mha.n_heads) for z in (x @ mha.qkv.weight.T).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge_ok(s.softmax(dim=-1).nan_to_num(0.0) @ v))


case("m_qkv_no_bias", check_multi_head_attention, mha_qkv_no_bias, r"(?i)qkv.*bias|bias.*qkv")


def shift_square(x):  # T taken from the last axis: right only when T == S
    *lead, _, s = x.shape
    t = s
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, -1, t)[..., 1:, :].reshape(*lead, -1, s)[..., -x.size(-2):, :]


case("r_square", check_relative_shift, shift_square,
     r"(?i)T = x\.size\(-2\)|T != S|T ≠ S|size\(-2\)")


def scores_sqrt_s(q, k, r, u, v):  # divided by sqrt(S), the number of keys
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + shift_ok(bd)) / math.sqrt(k.size(-2))


case("x_sqrt_s", check_relative_scores, scores_sqrt_s, r"(?i)d_head|D_h|head width|number of keys")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
