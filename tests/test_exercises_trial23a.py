"""Learner trial 23a (issue 28): notebooks 01 (attention) and 02 (Transformer-XL)."""
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
from labnn.nn import causal_mask
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- 01 Exercise 1: attention_weights ------------------------------------------------
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_by_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def aw_log_softmax(q, k):  # log_softmax for softmax
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def aw_sigmoid(q, k):  # sigmoid attention: rows do not sum to 1
    return torch.sigmoid(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))


RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_by_d", check_attention_weights, aw_by_d, r"(?i)sqrt|√|square root")
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"(?i)log|negative|sum to 1")
case("aw_sigmoid", check_attention_weights, aw_sigmoid, r"(?i)sum to 1|softmax|sigmoid")


# ---- 01 Exercise 2: attention with a mask --------------------------------------------
def att_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def att_big_negative(q, k, v, mask=None):  # -1e9, no care for empty rows: uniform there
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def att_mask_after(q, k, v, mask=None):  # mask multiplied in after the softmax
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def att_sqrt_dv(q, k, v, mask=None):  # scale by the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


RIGHT["attention"] = (check_attention, att_right)
case("att_big_negative", check_attention, att_big_negative,
     r"(?i)(all[- ]False|no (True|key)|empty|fully masked).*(zero|uniform|mean|average)")
case("att_mask_after", check_attention, att_mask_after,
     r"(?i)after the softmax|before the softmax|sum to 1|renormali")
case("att_sqrt_dv", check_attention, att_sqrt_dv,
     r"(?i)(D_v|width of the values|values' width|v\.size)")


# ---- 01 Exercise 3: causal mask ------------------------------------------------------
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_float(t):  # tril of float ones: 0./1. floats, not bool
    return torch.ones(t, t).tril()


def cm_strict(t):  # diagonal excluded: a token cannot see itself
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def cm_batched(t):  # an extra leading axis "so that it broadcasts"
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_float", check_causal_mask, cm_float, r"(?i)bool|dtype")
case("cm_strict", check_causal_mask, cm_strict, r"(?i)diagonal|itself")
case("cm_batched", check_causal_mask, cm_batched, r"(?i)\[t, t\]|leading|extra|batch|shape")


# ---- 01 Exercise 4: split and merge heads --------------------------------------------
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_plain_reshape(x, n_heads):  # reshape straight to [B, H, T, D_h]
    b, t, d = x.shape
    return x.reshape(b, n_heads, t, d // n_heads)


def merge_plain_reshape(x):  # the inverse of the plain reshape
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def split_width_for_count(x, n_heads):  # n_heads read as the head width
    b, t, d = x.shape
    return x.view(b, t, -1, n_heads).transpose(1, 2)


def merge_flatten1(x):  # flatten(1) instead of flatten(2): [B, T * D]
    return x.transpose(1, 2).flatten(1)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("heads_plain_reshape", check_heads, (split_plain_reshape, merge_plain_reshape),
     r"(?i)reshape|mix(es)? (the )?features|transpose|token")
case("heads_width_for_count", check_heads, (split_width_for_count, merge_right),
     r"(?i)(n_heads|H) .*(width|D_h)|heads.*count|number of heads")
case("heads_merge_flatten1", check_heads, (split_right, merge_flatten1),
     r"(?i)\[B, T, (H \* D_h|D)\]|flatten|token axis|tokens")


# ---- 01 Exercise 5: multi-head attention ---------------------------------------------
def mha_right(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_right(t, mha.n_heads) for t in (q, k, v))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def mha_sqrt_d_model(x, mha, mask=None):  # sqrt(D) for sqrt(D_h)
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_right(t, mha.n_heads) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


def mha_per_head_interleaved(x, mha, mask=None):  # qkv read as [.., H, 3, D_h]
    b, t, d = x.shape
    h = mha.n_heads
    qkv = mha.qkv(x).view(b, t, h, 3, d // h)
    q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def mha_default_causal(x, mha, mask=None):  # mask=None taken as the causal mask
    if mask is None:
        mask = causal_mask(x.size(1))
    return mha_right(x, mha, mask)


RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
case("mha_sqrt_d_model", check_multi_head_attention, mha_sqrt_d_model,
     r"(?i)D_h|head width|width of (one|a) head|d_head")
case("mha_per_head_interleaved", check_multi_head_attention, mha_per_head_interleaved,
     r"(?i)chunk|side by side|q, k, v|qkv")
case("mha_default_causal", check_multi_head_attention, mha_default_causal,
     r"(?i)(None|no mask).*(causal|every key|future)|causal")


# ---- 02 Exercise 1: update_memory ----------------------------------------------------
def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_oldest(mem, h, mem_len):  # keeps the first mem_len states, not the last
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_cat_order(mem, h, mem_len):  # new states in front of the old memory
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_only_h(mem, h, mem_len):  # "last mem_len states" taken from h alone
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_oldest", check_update_memory, um_oldest, r"(?i)oldest|most recent|newest")
case("um_cat_order", check_update_memory, um_cat_order, r"(?i)order|\[mem, h\]|before|after")
case("um_only_h", check_update_memory, um_only_h,
     r"(?i)(old|previous) memory|mem .*(dropped|ignored|left out|not used)|M \+ T")


# ---- 02 Exercise 2: segment_mask -----------------------------------------------------
def sm_right(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_no_causal(n, seg_len, mem_len):  # lower bound only: the future is visible
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return j >= (i // seg_len) * seg_len - mem_len


def sm_sliding(n, seg_len, mem_len):  # a sliding window from the query, not the segment start
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i - mem_len)


def sm_or(n, seg_len, mem_len):  # | for &
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) | (j >= (i // seg_len) * seg_len - mem_len)


RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_no_causal", check_segment_mask, sm_no_causal, r"(?i)future|j <= i|causal")
case("sm_sliding", check_segment_mask, sm_sliding,
     r"(?i)start\(i\)|segment start|i - mem_len|sliding")
case("sm_or", check_segment_mask, sm_or, r"(?i)\||&|both|either|or\b")


# ---- 02 Exercise 3: relative_distances -----------------------------------------------
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_no_offset(t, m):  # forgets that query i sits at key position m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_keys_t(t, m):  # keys counted without the memory: [T, T]
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_clamped(t, m):  # future distances clamped to 0
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).clamp(min=0)


RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_no_offset", check_relative_distances, rd_no_offset, r"(?i)m \+ i|offset|M \+|memory")
case("rd_keys_t", check_relative_distances, rd_keys_t, r"(?i)S = m \+ t|m \+ t keys|memory")
case("rd_clamped", check_relative_distances, rd_clamped, r"(?i)negative|future|clamp")


# ---- 02 Exercise 4: relative_shift ---------------------------------------------------
def rs_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):  # zero column padded on the right
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last(x):  # drops the last row instead of the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_transpose(x):  # "read as [S+1, T]" done with a transpose
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0)).transpose(-2, -1)
    return padded[..., 1:, :].reshape(*lead, t, s)


RIGHT["relative_shift"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right, r"(?i)left|in front|right")
case("rs_drop_last", check_relative_shift, rs_drop_last, r"(?i)first row|last row")
case("rs_transpose", check_relative_shift, rs_transpose, r"(?i)transpose|reshape|read")


# ---- 02 Exercise 5: relative_scores --------------------------------------------------
def rsc_right(q, k, r, u, v):
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_biases_swapped(q, k, r, u, v):  # v with the content keys, u with the positions
    ac = torch.einsum("bhid,bhjd->bhij", q + v[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + u[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_shift_sum(q, k, r, u, v):  # shift applied to the sum, content term included
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return relative_shift(ac + bd) / math.sqrt(q.size(-1))


def rsc_inplace(q, k, r, u, v):  # q += u changes the caller's q (and v's term gets q + u + v)
    q += u[:, None]
    ac = torch.einsum("bhid,bhjd->bhij", q, k)
    q = q - u[:, None]
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, rsc_right)
case("rsc_biases_swapped", check_relative_scores, rsc_biases_swapped,
     r"(?i)(u|v|bias).*(swap|wrong|content|position)")
case("rsc_shift_sum", check_relative_scores, rsc_shift_sum,
     r"(?i)shift.*(content|\(a\)|only|position)")
case("rsc_inplace", check_relative_scores, rsc_inplace, r"(?i)in[- ]place|changed|modif|caller")


# ---- further slips, one section per exercise -----------------------------------------
case("aw_precedence", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) / q.size(-1) ** 1 / 2).softmax(-1),
     r"(?i)\*\* binds|precedence|d \*\* 0\.5")


def att_zero_before(q, k, v, mask=None):  # empty rows: scores set to 0 before the softmax
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        s = s.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return s.softmax(-1) @ v


def att_any_queries(q, k, v, mask=None):  # any over the queries, not the keys
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    return w @ v


def att_bool_index(q, k, v, mask=None):  # boolean indexing: breaks on [B, 1, S] masks
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[..., ~mask] = float("-inf")
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def att_tuple(q, k, v, mask=None):  # returns (output, weights) like the library's
    return att_right(q, k, v, mask), None


case("att_zero_before", check_attention, att_zero_before,
     r"(?i)before the softmax|zeroed (its|the) scores|scores (set )?to 0|softmax of zeros")
case("att_any_queries", check_attention, att_any_queries, r"(?i)dim=-2|over the keys")
case("att_bool_index", check_attention, att_bool_index, r"(?i)boolean indexing|masked_fill")
case("att_tuple", check_attention, att_tuple, r"(?i)tuple")

case("cm_additive", check_causal_mask,
     lambda t: torch.triu(torch.full((t, t), float("-inf")), 1),
     r"(?i)additive|-inf")
case("cm_numpy", check_causal_mask,
     lambda t: __import__("numpy").tril(__import__("numpy").ones((t, t), dtype=bool)),
     r"(?i)torch\.Tensor|ndarray|numpy")


def merge_view(x):  # .view on the transposed (non-contiguous) heads
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def split_stack2(x, n_heads):  # heads stacked after the tokens: [B, T, H, D_h]
    return torch.stack(x.chunk(n_heads, -1), dim=2)


def merge_unbind2(x):
    return torch.cat(x.unbind(2), -1)


def split_keys_layout(x, n_heads):  # [B, H, D_h, T], as if for k^T
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).permute(0, 2, 3, 1)


def merge_keys_layout(x):
    b, h, dh, t = x.shape
    return x.permute(0, 3, 1, 2).reshape(b, t, h * dh)


case("heads_merge_view", check_heads, (split_right, merge_view), r"(?i)contiguous|reshape")
case("heads_stack_dim2", check_heads, (split_stack2, merge_unbind2),
     r"(?i)\[B, T, H, D_h\]|transpose")
case("heads_keys_layout", check_heads, (split_keys_layout, merge_keys_layout),
     r"\[B, H, D_h, T\]")


def mha_no_bias(x, mha, mask=None):  # x @ W^T: the qkv bias left out
    q, k, v = (x @ mha.qkv.weight.T).chunk(3, dim=-1)
    q, k, v = (split_right(t, mha.n_heads) for t in (q, k, v))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def mha_fixed_heads(n):  # a hard-coded head count
    def answer(x, mha, mask=None):
        q, k, v = mha.qkv(x).chunk(3, dim=-1)
        q, k, v = (split_right(t, n) for t in (q, k, v))
        return mha.out_proj(merge_right(att_right(q, k, v, mask)))
    return answer


def mha_single_head(x, mha, mask=None):  # one head of width D
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return mha.out_proj(att_right(q, k, v, mask))


case("mha_no_bias", check_multi_head_attention, mha_no_bias, r"(?i)bias")
case("mha_fixed_4_heads", check_multi_head_attention, mha_fixed_heads(4),
     r"(?i)n_heads.*(ignored|fixed|hard)")
case("mha_fixed_2_heads", check_multi_head_attention, mha_fixed_heads(2),
     r"(?i)n_heads.*(ignored|fixed|hard)|2 heads")
case("mha_single_head", check_multi_head_attention, mha_single_head, r"(?i)single head")
case("mha_calls_mha", check_multi_head_attention, lambda x, mha, mask=None: mha(x, mask)[0],
     r"(?i)calls the module|mha\(x")


def um_negslice(mem, h, mem_len):  # x[:, -mem_len:]: keeps everything at mem_len = 0
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, -mem_len:].detach()


def um_dim0(mem, h, mem_len):  # torch.cat's default dim=0
    x = h if mem is None else torch.cat([mem, h])
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_first_untruncated(mem, h, mem_len):  # the first segment kept whole
    if mem is None:
        return h.detach()
    return um_right(mem, h, mem_len)


case("um_negslice", check_update_memory, um_negslice, r"(?i)-0|mem_len = 0")
case("um_dim0", check_update_memory, um_dim0, r"(?i)batch axis|dim=1")
case("um_first_untruncated", check_update_memory, um_first_untruncated,
     r"(?i)first segment|mem=None|None")


def sm_strict(n, seg_len, mem_len):  # > for >= at the far end
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j > (i // seg_len) * seg_len - mem_len)


def sm_float(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).float()


def sm_key_segment(n, seg_len, mem_len):  # bound from the key's segment end, not the query's start
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (i < (j // seg_len) * seg_len + seg_len + mem_len)


def sm_start_plus1(n, seg_len, mem_len):  # start(i) from i + 1
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= ((i + 1) // seg_len) * seg_len - mem_len)


case("sm_strict", check_segment_mask, sm_strict, r"(?i)off by one|included|>=")
case("sm_float", check_segment_mask, sm_float, r"(?i)bool|dtype")
case("sm_key_segment", check_segment_mask, sm_key_segment,
     r"(?i)key'?s segment|segment of (the key|j)|start\(i\)")
case("sm_start_plus1", check_segment_mask, sm_start_plus1, r"(?i)start\(i\)|starting at")

case("rd_float", check_relative_distances,
     lambda t, m: m + torch.arange(0.0, t)[:, None] - torch.arange(0.0, m + t)[None],
     r"(?i)LongTensor|int64|long")
case("rd_ST", check_relative_distances,
     lambda t, m: m + torch.arange(t)[None] - torch.arange(m + t)[:, None],
     r"\[S, T\]")


def rs_4d_only(x):  # unpacks exactly four sizes
    b, h, t, s = x.shape
    return F.pad(x, (1, 0)).view(b, h, s + 1, t)[:, :, 1:].reshape(b, h, t, s)


def rs_2d_only(x):  # reshape(s + 1, t): the leading dimensions forgotten
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).reshape(s + 1, t)[1:].reshape(t, s)


def rs_roll_right(x):  # per-row roll, the wrong way
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(t - 1 - i, -1) for i in range(t)], -2)


case("rs_4d_only", check_relative_shift, rs_4d_only, r"(?i)leading dimensions|\*lead")
case("rs_2d_only", check_relative_shift, rs_2d_only, r"(?i)leading dimensions|\*lead")
case("rs_roll_right", check_relative_shift, rs_roll_right, r"(?i)slide (right|left)|LEFT")


def rsc_scale_content_only(q, k, r, u, v):  # only (a) + (c) divided by sqrt(d_head)
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k) / math.sqrt(q.size(-1))
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return ac + relative_shift(bd)


def rsc_no_u(q, k, r, u, v):  # term (c) missing
    ac = torch.einsum("bhid,bhjd->bhij", q, k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_no_shift(q, k, r, u, v):
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (ac + bd) / math.sqrt(q.size(-1))


case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"(?i)only the content term")
case("rsc_no_u", check_relative_scores, rsc_no_u, r"(?i)\(c\)|content bias")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"(?i)relative_shift")
case("rsc_r_flipped", check_relative_scores,
     lambda q, k, r, u, v: rsc_right(q, k, r.flip(0), u, v), r"(?i)revers|flip")
case("rsc_sqrt_d_model", check_relative_scores,
     lambda q, k, r, u, v: rsc_right(q, k, r, u, v) / math.sqrt(q.size(1)),
     r"(?i)d_model|d_head")


# ---- a third round -------------------------------------------------------------------
def aw_inplace_q(q, k):  # q /= sqrt(d): changes the caller's q
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(-1)


def att_scores_times_mask(q, k, v, mask=None):  # masked scores multiplied to 0, not -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(-1) @ v


def split_torch_split(x, n_heads):  # torch.split takes a piece's size, not a count
    return torch.stack(torch.split(x, n_heads, dim=-1), dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(1), -1)


def mha_split3(x, mha, mask=None):  # .split(3) for .chunk(3)
    q, k, v = mha.qkv(x).split(3, dim=-1)
    q, k, v = (split_right(t, mha.n_heads) for t in (q, k, v))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


case("aw_inplace_q", check_attention_weights, aw_inplace_q, r"(?i)in place")
case("att_scores_times_mask", check_attention, att_scores_times_mask, r"(?i)with 0|-inf")
case("cm_tril1", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril(1),
     r"(?i)next token|i \+ 1")
case("heads_torch_split", check_heads, (split_torch_split, merge_cat),
     r"(?i)swapped|torch\.split|size of each piece")
case("mha_split3", check_multi_head_attention, mha_split3, r"(?i)split takes|chunk")


def um_detach_inplace(mem, h, mem_len):  # .detach_() on a slice (a view)
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach_()


def um_steady_state(mem, h, mem_len):  # drops T states of mem: right only once mem is full
    if mem is None:
        return um_right(mem, h, mem_len)
    return torch.cat([mem[:, h.size(1):], h], 1).detach()


case("um_detach_inplace", check_update_memory, um_detach_inplace,
     r"⚠️[^\n]*(detach_|in place|in-place)")
case("um_steady_state", check_update_memory, um_steady_state,
     r"(?i)mem_len|not full|fewer than|M \+ T|\[B, M, D\]")


def sm_whole_segment(n, seg_len, mem_len):  # the whole own segment visible, no causality
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j < start + seg_len) & (j >= start - mem_len)


case("sm_whole_segment", check_segment_mask, sm_whole_segment, r"(?i)future|j <= i")
case("rd_last_query_only", check_relative_distances,
     lambda t, m: (m + t - 1 - torch.arange(m + t)).expand(t, -1),
     r"(?i)key only|query i")


def rsc_softmax(q, k, r, u, v):  # returns the weights, not the scores
    return rsc_right(q, k, r, u, v).softmax(-1)


def rsc_bhji(q, k, r, u, v):  # position product laid out [B, H, S, T]
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,jhd->bhji", q + v[:, None], r)
    return (ac + relative_shift(bd).transpose(-2, -1)) / math.sqrt(q.size(-1))


def rsc_head0_bias(q, k, r, u, v):  # head 0's biases used for every head
    ac = torch.einsum("bhid,bhjd->bhij", q + u[0], k)
    bd = torch.einsum("bhid,jhd->bhij", q + v[0], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_r_reshape(q, k, r, u, v):  # r [S, H, D_h] reshaped, not transposed, to [H, S, D_h]
    s, h, d = r.shape
    ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    bd = torch.einsum("bhid,hjd->bhij", q + v[:, None], r.reshape(h, s, d))
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("rsc_softmax", check_relative_scores, rsc_softmax, r"(?i)softmax")
case("rsc_bhji", check_relative_scores, rsc_bhji, r"\[B, H, S, T\]")
case("rsc_head0_bias", check_relative_scores, rsc_head0_bias,
     r"(?i)(head 0|every head|each head|per head|u\[0\])")
case("rsc_r_reshape", check_relative_scores, rsc_r_reshape, r"(?i)reshape")


# ---- a fourth round ------------------------------------------------------------------
def att_mean_not_sum(q, k, v, mask=None):  # weighted values averaged over keys, not summed
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return (w[..., None] * v[:, None]).mean(-2)


def mha_avg_heads(x, mha, mask=None):  # merged heads divided by H ("mixing" read as a mean)
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_right(t, mha.n_heads) for t in (q, k, v))
    return mha.out_proj(merge_right(att_right(q, k, v, mask)) / mha.n_heads)


def um_trunc_before_cat(mem, h, mem_len):  # cuts the old memory, then appends all of h
    if mem is None:
        return um_right(None, h, mem_len)
    m = mem[:, mem.size(1) - min(mem_len, mem.size(1)):]
    return torch.cat([m, h], 1).detach()


def sm_prev_segment(n, seg_len, mem_len):  # memory read as "the previous segment"
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j // seg_len >= i // seg_len - 1)


def rs_roll_off_by_one(x):  # rows rolled left by T - i
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(-(t - i), -1) for i in range(t)], -2)


def rsc_bias_on_keys(q, k, r, u, v):  # biases added to the keys, not the queries
    ac = torch.einsum("bhid,bhjd->bhij", q, k + u[:, None])
    bd = torch.einsum("bhid,jhd->bhij", q, r + v)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("aw_cosine", check_attention_weights,
     lambda q, k: (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
                   / math.sqrt(q.size(-1))).softmax(-1),
     r"(?i)normali[sz]ed|cosine")
case("att_mean_not_sum", check_attention, att_mean_not_sum,
     r"(?i)mean|average|sum (over|of) the (keys|values)")
case("mha_avg_heads", check_multi_head_attention, mha_avg_heads,
     r"(?i)n_heads|divided|average|mean")
case("um_trunc_before_cat", check_update_memory, um_trunc_before_cat,
     r"(?i)before the concatenation|concatenate first")
case("sm_prev_segment", check_segment_mask, sm_prev_segment, r"(?i)seg_len.*mem_len")
case("rd_plus1", check_relative_distances,
     lambda t, m: m + 1 + torch.arange(t)[:, None] - torch.arange(m + t)[None],
     r"(?i)off by one|distance 0 from itself")
case("rs_roll_off_by_one", check_relative_shift, rs_roll_off_by_one, r"(?i)one place too far")
case("rsc_bias_on_keys", check_relative_scores, rsc_bias_on_keys, r"(?i)query-side|to the keys")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
