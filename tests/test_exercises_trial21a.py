# flake8: noqa: E501
"""Learner trial 21a (issue 28): new wrong answers for notebooks 01 and 02."""
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


# ---- 01 Exercise 1: attention weights ----
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def aw_div_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1)


def aw_log_softmax(q, k):  # log-weights
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(-1)


def aw_sum_norm(q, k):  # normalised by the row sum, no exp
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s / s.sum(-1, keepdim=True)


RIGHT["aw"] = (check_attention_weights, aw_right)
case("aw_div_d", check_attention_weights, aw_div_d, r"sqrt|√|scale")
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"log|negative|sum to 1")
case("aw_sum_norm", check_attention_weights, aw_sum_norm, r"softmax|exp|negative")


# ---- 01 Exercise 2: attention with a mask ----
def at_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def at_big_negative(q, k, v, mask=None):  # -1e9: an all-False row averages v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def at_all_rows(q, k, v, mask=None):  # all() for any(): partly masked rows zeroed too
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.all(-1, keepdim=True), 0.0)
    return w @ v


def at_torch_sdpa(q, k, v, mask=None):  # torch's built-in instead of writing it
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


RIGHT["at"] = (check_attention, at_right)
case("at_big_negative", check_attention, at_big_negative,
     r"(all[- ]False|no True|fully masked).*(zero|0)|zero.*(all[- ]False|no True)")
case("at_all_rows", check_attention, at_all_rows, r"mask\.all|\.all\(|\bany\b")
# torch's own attention computes what the exercise asks (zeros for an all-False row on
# torch 2.13): a right answer, as in trial 17a. Found MISLEADING in the trial's session, where
# labnn's function was imported under the same name: the door read `F.<name>` as that global.
# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("at_torch_sdpa", check_attention, at_torch_sdpa, r"torch's fused attention is refused")


# ---- 01 Exercise 3: causal mask ----
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_one_future(t):  # diagonal=1: one future key too
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


def cm_uint8(t):  # a uint8 mask
    return torch.ones(t, t, dtype=torch.uint8).tril()


def cm_batch_axis(t):  # [1, t, t]
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


RIGHT["cm"] = (check_causal_mask, cm_right)
case("cm_one_future", check_causal_mask, cm_one_future, r"future|j > i|above the diagonal|next")
case("cm_uint8", check_causal_mask, cm_uint8, r"bool")
case("cm_batch_axis", check_causal_mask, cm_batch_axis,
     r"\[t, t\]|extra|leading|2-D|two axes|\[1, ")


# ---- 01 Exercise 4: split and merge heads ----
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_interleaved(x, n_heads):  # head h gets features h, h + H, ...
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_stack_dim0(x, n_heads):  # [H, B, T, D_h]
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def merge_stack_dim0(x):
    return torch.cat(x.unbind(0), dim=-1)


def merge_no_transpose(x):  # reshape straight from [B, H, T, D_h]
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


RIGHT["hd"] = (check_heads, split_right, merge_right)
case("hd_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"h ?\* ?D_h|contiguous|interleav|consecutive|slice")
case("hd_stack_dim0", check_heads, (split_stack_dim0, merge_stack_dim0),
     r"batch.*head|head.*batch|\[B, H")
case("hd_merge_no_transpose", check_heads, (split_right, merge_no_transpose),
     r"transpose|mixes|tokens")


# ---- 01 Exercise 5: multi-head attention ----
def _mha(x, mha, mask, qkv_fn, scale_fn, causal=False):
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = qkv_fn(mha.qkv(x), b, t, h, d)
    if causal and mask is None:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    s = q @ k.transpose(-2, -1) / scale_fn(d, h)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


def _qkv_right(z, b, t, h, d):
    return (split_right(c, h) for c in z.chunk(3, dim=-1))


def _qkv_per_head(z, b, t, h, d):  # heads first, then chunk each head's 3*D_h
    return z.view(b, t, h, 3 * (d // h)).transpose(1, 2).chunk(3, dim=-1)


def _sqrt_dh(d, h):
    return math.sqrt(d // h)


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask, _qkv_right, _sqrt_dh)


def mha_torch_sdpa(x, mha, mask=None):  # torch's built-in attention per head
    q, k, v = _qkv_right(mha.qkv(x), *x.shape[:2], mha.n_heads, x.size(-1))
    return mha.out_proj(merge_right(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))


def mha_qkv_per_head(x, mha, mask=None):
    return _mha(x, mha, mask, _qkv_per_head, _sqrt_dh)


def mha_causal_default(x, mha, mask=None):  # mask=None read as causal
    return _mha(x, mha, mask, _qkv_right, _sqrt_dh, causal=True)


RIGHT["mha"] = (check_multi_head_attention, mha_right)
# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("mha_torch_sdpa", check_multi_head_attention, mha_torch_sdpa, r"torch's fused attention is refused")
case("mha_qkv_per_head", check_multi_head_attention, mha_qkv_per_head,
     r"chunk|Q, K, V|side by side|qkv")
case("mha_causal_default", check_multi_head_attention, mha_causal_default,
     r"(None|no mask).*(every key|causal)|causal")


# ---- 02 Exercise 1: update memory ----
def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_first(mem, h, mem_len):  # keeps the oldest mem_len states
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_order(mem, h, mem_len):  # [h, mem]: the new states before the old
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_no_trim_first(mem, h, mem_len):  # first call returns all of h
    if mem is None:
        return h.detach()
    x = torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


RIGHT["um"] = (check_update_memory, um_right)
case("um_first", check_update_memory, um_first, r"last|oldest|newest|first")
case("um_order", check_update_memory, um_order, r"order|before|after|\[mem, h\]")
case("um_no_trim_first", check_update_memory, um_no_trim_first,
     r"None.*mem_len|mem_len.*None|no memory|first (call|segment)")


# ---- 02 Exercise 2: segment mask ----
def _ij(n):
    a = torch.arange(n)
    return a[:, None], a[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_no_multiply(n, seg_len, mem_len):  # start(i) = i // seg_len
    i, j = _ij(n)
    return (j <= i) & (j >= i // seg_len - mem_len)


def sm_sliding(n, seg_len, mem_len):  # i - mem_len: a sliding window
    i, j = _ij(n)
    return (j <= i) & (j >= i - mem_len)


def sm_not_causal(n, seg_len, mem_len):  # whole segment visible
    i, j = _ij(n)
    start = (i // seg_len) * seg_len
    return (j < start + seg_len) & (j >= start - mem_len)


RIGHT["sm"] = (check_segment_mask, sm_right)
case("sm_no_multiply", check_segment_mask, sm_no_multiply,
     r"\* ?seg_len|multipl|start\(i\)|segment start")
case("sm_sliding", check_segment_mask, sm_sliding, r"sliding|start\(i\)|segment start|i - mem_len")
case("sm_not_causal", check_segment_mask, sm_not_causal, r"future|j <= i|causal|later key")


# ---- 02 Exercise 3: relative distances ----
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_float(t, m):  # float distances
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).float()


def rd_no_m(t, m):  # forgot the memory offset
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_abs(t, m):  # absolute values
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


RIGHT["rd"] = (check_relative_distances, rd_right)
case("rd_float", check_relative_distances, rd_float, r"long|int64|integer")
case("rd_no_m", check_relative_distances, rd_no_m, r"\bm\b|memory|M \+ i|offset")
case("rd_abs", check_relative_distances, rd_abs, r"negative|abs|future|sign")


# ---- 02 Exercise 4: relative shift ----
def rs_right(x):
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):  # zero column on the right
    *lead, t, s = x.shape
    p = F.pad(x, (0, 1)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last(x):  # drops the last row instead of the first
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., :-1, :].reshape(*lead, t, s)


def rs_roll_i(x):  # row i rolled by i, the wrong amount and way
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(i, dims=-1) for i in range(t)], dim=-2)


RIGHT["rs"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right, r"left|right|pad")
case("rs_drop_last", check_relative_shift, rs_drop_last, r"first row|last row|drop")
case("rs_roll_i", check_relative_shift, rs_roll_i, r"T - 1 - i|slide left|direction|by i")


# ---- 02 Exercise 5: relative scores ----
def _rsc(q, k, r, u, v, bias_k, bias_r, shift=True):
    ac = torch.einsum("bhtd,bhsd->bhts", q + bias_k[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + bias_r[:, None], r)
    if shift:
        bd = relative_shift(bd)
    return (ac + bd) / math.sqrt(q.size(-1))


def rsc_right(q, k, r, u, v):
    return _rsc(q, k, r, u, v, u, v)


def rsc_swapped_biases(q, k, r, u, v):  # v with the content keys, u with r
    return _rsc(q, k, r, u, v, v, u)


def rsc_no_shift(q, k, r, u, v):  # the position term left by distance
    return _rsc(q, k, r, u, v, u, v, shift=False)


def rsc_inplace(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q - u[:, None] + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


RIGHT["rsc"] = (check_relative_scores, rsc_right)
case("rsc_swapped_biases", check_relative_scores, rsc_swapped_biases, r"\bu\b.*\bv\b|swap|bias")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"shift")
case("rsc_inplace", check_relative_scores, rsc_inplace,
     r"in[- ]place|changes? .*\bq\b|modif|caller")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
