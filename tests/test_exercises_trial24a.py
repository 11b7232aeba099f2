"""Learner trial 24a (issue 28): new wrong answers for 01_attention and 02_transformer_xl."""
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
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 01 Ex1: attention weights
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_by_d(q, k):  # divides by d, not by its square root
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def aw_log_softmax(q, k):  # log_softmax for softmax
    return F.log_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)


def aw_d_from_tokens(q, k):  # d read from axis 1 (the queries), not the width
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(1))).softmax(dim=-1)


RIGHT["aw"] = (check_attention_weights, aw_right)


# ---------------------------------------------------------------- 01 Ex2: attention with a mask
def att_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def att_big_negative(q, k, v, mask=None):  # -1e9 for -inf, empty rows not handled
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def att_scores_times_mask(q, k, v, mask=None):  # multiplies scores by the mask (0, not -inf)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(dim=-1) @ v


def att_mask_after_softmax(q, k, v, mask=None):  # mask applied after softmax, no renormalising
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


RIGHT["att"] = (check_attention, att_right)


# ---------------------------------------------------------------- 01 Ex3: causal mask
def cm_right(t):
    return torch.arange(t)[:, None] >= torch.arange(t)[None, :]


def cm_float(t):  # a float 0/1 mask, not bool
    return torch.ones(t, t).tril()


def cm_strict(t):  # diagonal excluded: a token may not see itself
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def cm_numpy(t):  # a numpy array, not a tensor
    return np.tril(np.ones((t, t), dtype=bool))


RIGHT["cm"] = (check_causal_mask, cm_right)


# ---------------------------------------------------------------- 01 Ex4: split/merge heads
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_interleaved(x, n_heads):  # head h gets features h, h+H, ... (consistent merge)
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_heads_first(x, n_heads):  # stacks the heads in front of the batch: [H, B, T, D_h]
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def merge_heads_first(x):
    return torch.cat(x.unbind(0), dim=-1)


def merge_view(x):  # view on the transposed (non-contiguous) tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


RIGHT["heads"] = (check_heads, split_right, merge_right)


# ---------------------------------------------------------------- 01 Ex5: multi-head attention
def _mha(x, mha, mask, scale=None, swap_qk=False, out_bias=True, causal_default=False):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    if swap_qk:
        k, q, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_right(z, mha.n_heads) for z in (q, k, v))
    if mask is None and causal_default:
        mask = cm_right(x.size(1))
    d = scale if scale is not None else q.size(-1)
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    y = merge_right(w @ v)
    if out_bias:
        return mha.out_proj(y)
    return y @ mha.out_proj.weight.T


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_sqrt_model_width(x, mha, mask=None):  # sqrt(D) of the model, not of a head
    return _mha(x, mha, mask, scale=x.size(-1))


def mha_k_q_swapped(x, mha, mask=None):  # chunk read as k, q, v
    return _mha(x, mha, mask, swap_qk=True)


def mha_no_out_bias(x, mha, mask=None):  # out_proj's weight only, bias forgotten
    return _mha(x, mha, mask, out_bias=False)


def mha_causal_default(x, mha, mask=None):  # mask=None read as "causal"
    return _mha(x, mha, mask, causal_default=True)


RIGHT["mha"] = (check_multi_head_attention, mha_right)


# ---------------------------------------------------------------- 02 Ex1: update_memory
def um_right(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    start = max(cat.size(1) - mem_len, 0)
    return cat[:, start:].detach()


def um_new_first(mem, h, mem_len):  # new states put before the old memory
    cat = h if mem is None else torch.cat([h, mem], dim=1)
    start = max(cat.size(1) - mem_len, 0)
    return cat[:, start:].detach()


def um_oldest_kept(mem, h, mem_len):  # keeps the first mem_len states, not the last
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, :mem_len].detach()


def um_batch_axis(mem, h, mem_len):  # concatenated along the batch axis
    cat = h if mem is None else torch.cat([mem, h], dim=0)
    start = max(cat.size(1) - mem_len, 0)
    return cat[:, start:].detach()


RIGHT["um"] = (check_update_memory, um_right)


# ---------------------------------------------------------------- 02 Ex2: segment mask
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_no_causal(n, seg_len, mem_len):  # forgets j <= i: the future of the segment is seen
    i, j = _ij(n)
    return j >= (i // seg_len) * seg_len - mem_len


def sm_whole_prev_segment(n, seg_len, mem_len):  # memory = the whole previous segment
    i, j = _ij(n)
    return (j <= i) & (j // seg_len >= i // seg_len - 1)


def sm_sliding(n, seg_len, mem_len):  # window from the query, i - mem_len, not the start
    i, j = _ij(n)
    return (j <= i) & (j >= i - mem_len)


RIGHT["sm"] = (check_segment_mask, sm_right)


# ---------------------------------------------------------------- 02 Ex3: relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_no_offset(t, m):  # query i taken at key position i, not m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_no_memory_keys(t, m):  # only the segment's t keys
    return torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_clamped(t, m):  # future keys clamped to distance 0
    return rd_right(t, m).clamp(min=0)


RIGHT["rd"] = (check_relative_distances, rd_right)


# ---------------------------------------------------------------- 02 Ex4: relative shift
def rs_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):  # zero column padded on the right
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_transpose(x):  # "read as [S + 1, T]" done with a transpose
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.transpose(-2, -1)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last_row(x):  # drops the last row instead of the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


RIGHT["rs"] = (check_relative_shift, rs_right)


# ---------------------------------------------------------------- 02 Ex5: relative scores
def _rel(q, k, r, u, v, swap=False, shift_all=False, scale_pos=True, flip=False):
    if swap:
        u, v = v, u
    if flip:
        r = r.flip(0)
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    d = math.sqrt(q.size(-1))
    if shift_all:
        return relative_shift(ac + bd) / d
    return ac / d + relative_shift(bd) / (d if scale_pos else 1.0)


def rel_right(q, k, r, u, v):
    return _rel(q, k, r, u, v)


def rel_biases_swapped(q, k, r, u, v):  # u with the position keys, v with the content keys
    return _rel(q, k, r, u, v, swap=True)


def rel_shift_both(q, k, r, u, v):  # shifts the content term as well
    return _rel(q, k, r, u, v, shift_all=True)


def rel_pos_unscaled(q, k, r, u, v):  # only the content term divided by sqrt(d_h)
    return _rel(q, k, r, u, v, scale_pos=False)


def rel_r_flipped(q, k, r, u, v):  # r reversed to distances 0 .. S-1
    return _rel(q, k, r, u, v, flip=True)


RIGHT["rel"] = (check_relative_scores, rel_right)


# ---------------------------------------------------------------- more wrong answers
def aw_implicit_dim(q, k):  # F.softmax without dim: torch picks dim=0 (the batch) for 3-D
    return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))


def aw_inplace(q, k):  # scales the caller's q in place
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(-1)


def aw_double_scale(q, k):  # q and k each divided by sqrt(d)
    d = math.sqrt(q.size(-1))
    return ((q / d) @ (k / d).transpose(-2, -1)).softmax(-1)


def aw_precedence(q, k):  # d ** 1 / 2 is d / 2
    return (q @ k.mT / q.size(-1) ** 1 / 2).softmax(-1)


def att_inplace(q, k, v, mask=None):  # q.mul_ changes the caller's q
    q.mul_(1 / math.sqrt(q.size(-1)))
    return _att_unscaled(q, k, v, mask)


def _att_unscaled(q, k, v, mask):
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def att_mul_empty(q, k, v, mask=None):  # empty rows zeroed by multiplying (NaN * 0 = NaN)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w * mask.any(-1, keepdim=True)
    return w @ v


def att_precedence(q, k, v, mask=None):  # d ** 1 / 2 is d / 2
    return _att_unscaled(q / (q.size(-1) ** 1 / 2), k, v, mask)


_M8 = torch.ones(8, 8, dtype=torch.bool).tril()


def cm_cached8(t):  # a fixed 8 x 8 mask cut to t
    return _M8[:t, :t]


def cm_one_future(t):  # tril(diagonal=1): one future token allowed
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


def cm_list(t):  # nested Python lists
    return [[j <= i for j in range(t)] for i in range(t)]


def split_tok_last(x, n_heads):  # permute to [B, H, D_h, T]
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).permute(0, 2, 3, 1)


def merge_tok_last(x):
    b, h, dh, t = x.shape
    return x.permute(0, 3, 1, 2).reshape(b, t, h * dh)


def merge_no_transpose(x):  # reshape straight to [B, T, D]
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def merge_last2(x):  # transpose(-2, -1), the habit of q @ k^T
    b, h, t, dh = x.shape
    return x.transpose(-2, -1).reshape(b, t, h * dh)


def mha_per_head_qkv(x, mha, mask=None):  # fused projection read as per-head [q|k|v]
    b, t, d = x.shape
    q, k, v = mha.qkv(x).view(b, t, mha.n_heads, 3, d // mha.n_heads).permute(3, 0, 2, 1, 4)
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def mha_qkv_no_bias(x, mha, mask=None):  # qkv weight only, bias forgotten
    q, k, v = (split_right(z, mha.n_heads) for z in (x @ mha.qkv.weight.T).chunk(3, -1))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def _mha_scores(x, mha, mask, m):
    q, k, v = (split_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, -1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~m, float("-inf"))
    return s, v


def mha_implicit_softmax(x, mha, mask=None):  # F.softmax without dim: dim=1, the heads, for 4-D
    s, v = _mha_scores(x, mha, mask, mask)
    w = F.softmax(s)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


def mha_mask_unsq1(x, mha, mask=None):  # mask.unsqueeze(1): [T, 1, T]
    m = None if mask is None else mask.unsqueeze(1)
    s, v = _mha_scores(x, mha, mask, m)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~m.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


def mha_residual(x, mha, mask=None):  # adds the residual connection
    return x + mha_right(x, mha, mask)


def um_none_not_detached(mem, h, mem_len):  # first segment returned without detach
    if mem is None:
        return h[:, max(h.size(1) - mem_len, 0):]
    return um_right(mem, h, mem_len)


def um_requires_grad(mem, h, mem_len):  # requires_grad_(False) for detach()
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, max(cat.size(1) - mem_len, 0):].requires_grad_(False)


def um_only_h(mem, h, mem_len):  # the old memory dropped: only h's last states
    return h[:, max(h.size(1) - mem_len, 0):].detach()


def um_none_untruncated(mem, h, mem_len):  # first segment kept whole
    if mem is None:
        return h.detach()
    return um_right(mem, h, mem_len)


def sm_from_end(n, seg_len, mem_len):  # memory counted back from the segment's end
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len + 1) * seg_len - mem_len)


def sm_int(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).int()


def sm_precedence(n, seg_len, mem_len):  # & binds tighter than >= and <=
    i, j = _ij(n)
    return j >= i // seg_len * seg_len - mem_len & j <= i


def rd_float(t, m):
    return m + torch.arange(t, dtype=torch.float32)[:, None] - torch.arange(m + t)[None, :]


def rd_int32(t, m):
    return rd_right(t, m).int()


def rd_distance_layout(t, m):  # the r layout S-1 .. 0 for every query
    s = m + t
    return torch.arange(s - 1, -1, -1)[None, :].expand(t, s)


def rd_abs(t, m):
    return rd_right(t, m).abs()


def rd_one_based(t, m):  # queries numbered from 1
    return m + torch.arange(1, t + 1)[:, None] - torch.arange(m + t)[None, :]


def rs_4d_only(x):  # unpacks B, H, T, S
    b, h, t, s = x.shape
    return F.pad(x, (1, 0)).view(b, h, s + 1, t)[:, :, 1:].reshape(b, h, t, s)


def rs_drop_first_col(x):  # [..., 1:] drops a column, not the first row
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:].reshape(*lead, t, s)


def rel_inplace(q, k, r, u, v):  # q += u changes the caller's q
    q0 = q.clone()
    q += u[:, None]
    ac = torch.einsum("bhid,bhjd->bhij", q, k)
    bd = torch.einsum("bhid,jhd->bhij", q0 + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rel_no_b(q, k, r, u, v):  # position term v.r only: term (b), q.r, missing
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("hd,jhd->hj", v, r)[None, :, None, :].expand_as(ac)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rel_sqrt_model(q, k, r, u, v):  # sqrt(H * D_h)
    return _rel(q, k, r, u, v) * math.sqrt(q.size(-1)) / math.sqrt(q.size(-1) * q.size(1))


def rel_u_none(q, k, r, u, v):  # u[None]: [1, H, D_h] lines H up with the queries
    ac = torch.einsum("bhid,bhjd->bhij", q + u[None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rel_heads_summed(q, k, r, u, v):  # einsum letter g for r's heads: summed over all heads
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jgd->bhij", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rel_u_on_k(q, k, r, u, v):  # biases added to the keys
    ac = torch.einsum("bhid,bhjd->bhij", q, k + u[:, None])
    bd = torch.einsum("bhid,jhd->bhij", q, r + v)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rel_precedence(q, k, r, u, v):  # / d ** 1 / 2 for / sqrt(d)
    return _rel(q, k, r, u, v) * math.sqrt(q.size(-1)) / (q.size(-1) ** 1 / 2)


# ---------------------------------------------------------------- cases
case("aw_by_d", check_attention_weights, aw_by_d, r"sqrt|square root|√")
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"log_softmax|log|negative")
case("aw_d_from_tokens", check_attention_weights, aw_d_from_tokens,
     r"(width|last axis|size\(-1\)).*(quer|token|axis 1|size\(1\))|"
     r"(quer|token|axis 1|size\(1\)).*(width|last axis|size\(-1\))")
case("att_big_negative", check_attention, att_big_negative,
     r"(all False|no True|empty|nothing).*(zero|0)")
case("att_scores_times_mask", check_attention, att_scores_times_mask,
     r"(multipl|\* ?mask|score.*0\b|zero).*(-inf|-∞|masked_fill)|"
     r"(-inf|-∞|masked_fill).*(multipl|zero)")
case("att_mask_after_softmax", check_attention, att_mask_after_softmax,
     r"(after|before) the softmax|renormali|sum to 1")
case("cm_float", check_causal_mask, cm_float, r"bool")
case("cm_strict", check_causal_mask, cm_strict, r"diagonal|itself")
case("cm_numpy", check_causal_mask, cm_numpy, r"tensor|numpy")
case("heads_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"(head h|head 0|contiguous|slice|features h).*(feature|D_h)|interleav|strided")
case("heads_first", check_heads, (split_heads_first, merge_heads_first),
     r"(head|H).*(before|in front of).*batch|\[H, B|batch.*(first|axis 0)")
case("heads_merge_view", check_heads, (split_right, merge_view),
     r"reshape|contiguous")
case("mha_sqrt_model_width", check_multi_head_attention, mha_sqrt_model_width,
     r"d_head|D_h|head width|width of (a|one) head|sqrt\(d_model\)")
case("mha_k_q_swapped", check_multi_head_attention, mha_k_q_swapped,
     r"(q|quer).*(k|key).*(swap|order|chunk)|chunk.*order|swap")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias, r"bias")
case("mha_causal_default", check_multi_head_attention, mha_causal_default,
     r"None.*(no mask|every key|causal)|causal.*None")
case("um_new_first", check_update_memory, um_new_first,
     r"order|(old|mem).*(before|first).*(new|h)|(new|h).*(after|end)")
case("um_oldest_kept", check_update_memory, um_oldest_kept,
     r"(last|newest|most recent).*(first|oldest)|oldest|first mem_len")
case("um_batch_axis", check_update_memory, um_batch_axis,
     r"(dim|axis).*(1|time)|batch")
case("sm_no_causal", check_segment_mask, sm_no_causal, r"future|j <= i|j ≤ i|causal")
case("sm_whole_prev_segment", check_segment_mask, sm_whole_prev_segment,
     r"mem_len.*(seg_len|segment)|(seg_len|segment).*mem_len")
case("sm_sliding", check_segment_mask, sm_sliding,
     r"(start|segment).*(not|instead).*(query|i - mem_len)|"
     r"i - mem_len|sliding|from the query")
case("rd_no_offset", check_relative_distances, rd_no_offset,
     r"(m|M) \+ i|offset|memory keys|query .*position")
case("rd_no_memory_keys", check_relative_distances, rd_no_memory_keys,
     r"(m|M) \+ t|memory.*keys|S = |\[T, S\]|m \+ t")
case("rd_clamped", check_relative_distances, rd_clamped,
     r"negative|future|clamp")
case("rs_pad_right", check_relative_shift, rs_pad_right, r"left|front|\(1, 0\)")
case("rs_transpose", check_relative_shift, rs_transpose, r"transpose|reshape|same (numbers|memory)")
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row, r"first row|last row")
case("rel_biases_swapped", check_relative_scores, rel_biases_swapped,
     r"(u|v).*(swap|position|content)|swap")
case("rel_shift_both", check_relative_scores, rel_shift_both,
     r"(content|\(a\)|k).*(shift|not)|shift.*(only|content|position term)")
case("rel_pos_unscaled", check_relative_scores, rel_pos_unscaled,
     r"(\(b\)|\(d\)|position).*(sqrt|scale|divid)|(sqrt|scale|divid).*(both|sum|position)")
case("rel_r_flipped", check_relative_scores, rel_r_flipped,
     r"flip|reverse|S-1|S - 1|descending|order")

case("aw_implicit_dim", check_attention_weights, aw_implicit_dim, r"batch|dim=0|dim=-1")
case("aw_inplace", check_attention_weights, aw_inplace, r"in place")
case("aw_double_scale", check_attention_weights, aw_double_scale,
     r"both|q and k|twice|once")
case("aw_precedence", check_attention_weights, aw_precedence, r"\*\* binds|d \*\* 0\.5")
case("att_inplace", check_attention, att_inplace, r"in place")
case("att_mul_empty", check_attention, att_mul_empty, r"NaN \* 0|multiplying")
case("att_precedence", check_attention, att_precedence, r"\*\* binds|d \*\* 0\.5")
case("cm_cached8", check_causal_mask, cm_cached8, r"fixed size")
case("cm_one_future", check_causal_mask, cm_one_future, r"i \+ 1|next token|future")
case("cm_list", check_causal_mask, cm_list, r"torch\.Tensor.*list")
case("heads_tok_last", check_heads, (split_tok_last, merge_tok_last),
     r"\[B, H, D_h, T\].*\[B, H, T, D_h\]")
case("heads_merge_no_transpose", check_heads, (split_right, merge_no_transpose),
     r"transpose\(1, 2\)")
case("heads_merge_last2", check_heads, (split_right, merge_last2),
     r"transpose\(2, 3\)|transpose\(-2, -1\)")
case("mha_per_head_qkv", check_multi_head_attention, mha_per_head_qkv,
     r"per head|all of q")
case("mha_qkv_no_bias", check_multi_head_attention, mha_qkv_no_bias, r"qkv\.bias")
case("mha_implicit_softmax", check_multi_head_attention, mha_implicit_softmax,
     r"over the heads")
case("mha_mask_unsq1", check_multi_head_attention, mha_mask_unsq1,
     r"\[T, 1, T\]|mask\[:, None")
case("mha_residual", check_multi_head_attention, mha_residual, r"residual")
case("um_none_not_detached", check_update_memory, um_none_not_detached,
     r"None.*detach|detach")
case("um_requires_grad", check_update_memory, um_requires_grad, r"requires_grad_\(False\)")
case("um_only_h", check_update_memory, um_only_h, r"dropped the old memory")
case("um_none_untruncated", check_update_memory, um_none_untruncated,
     r"mem=None.*(cut|mem_len)")
case("sm_from_end", check_segment_mask, sm_from_end,
     r"end of (the|its) segment|(start|first position).*not.*end|from the (segment's )?end|"
     r"segment's END.*START")
case("sm_int", check_segment_mask, sm_int, r"dtype torch\.int32.*bool")
case("sm_precedence", check_segment_mask, sm_precedence, r"precedence|parenthes|binds")
case("rd_float", check_relative_distances, rd_float, r"float32.*(Long|int64)")
case("rd_int32", check_relative_distances, rd_int32, r"int32.*int64")
case("rd_distance_layout", check_relative_distances, rd_distance_layout,
     r"key only|S - 1 - j")
case("rd_abs", check_relative_distances, rd_abs, r"absolute value")
case("rd_one_based", check_relative_distances, rd_one_based, r"off by one")
case("rs_4d_only", check_relative_shift, rs_4d_only, r"any leading dimensions")
case("rs_drop_first_col", check_relative_shift, rs_drop_first_col, r"column.*first ROW")
case("rel_inplace", check_relative_scores, rel_inplace, r"in place")
case("rel_no_b", check_relative_scores, rel_no_b,
     r"\(b\)|q.*r\^T|query.*position keys|content-position")
case("rel_sqrt_model", check_relative_scores, rel_sqrt_model, r"sqrt\(d_model\)")
case("rel_u_none", check_relative_scores, rel_u_none, r"u\[:, None\]")
case("rel_heads_summed", check_relative_scores, rel_heads_summed,
     r"heads?.*(summed|mix|all heads|own)|einsum.*h")
case("rel_u_on_k", check_relative_scores, rel_u_on_k, r"query-side|k \+ u")
case("rel_precedence", check_relative_scores, rel_precedence,
     r"\*\* binds|d \*\* 0\.5|d / 2")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
