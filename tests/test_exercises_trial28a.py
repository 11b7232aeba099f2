"""Learner trial 28 (a): notebooks 01_attention and 02_transformer_xl."""
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


# ---- 01 Exercise 1: attention_weights ----
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def aw_log_softmax(q, k):
    return F.log_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)


def aw_scale_after(q, k):
    return (q @ k.transpose(-2, -1)).softmax(-1) / math.sqrt(q.size(-1))


def aw_div_d(q, k):
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1)


RIGHT["aw"] = (check_attention_weights, aw_right)
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"(?i)log")
case("aw_scale_after", check_attention_weights, aw_scale_after,
     r"(?i)(before|after) the softmax|sum to 1")
case("aw_div_d", check_attention_weights, aw_div_d, r"(?i)sqrt|√")


# ---- 01 Exercise 2: attention ----
def att_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.nan_to_num(0.0)
    return w @ v


def att_finite_fill(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def att_mask_after(q, k, v, mask=None):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
    return w @ v


def att_dv(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


RIGHT["att"] = (check_attention, att_right)
case("att_finite_fill", check_attention, att_finite_fill,
     r"(?i)(all False|no True|empty).*zero|zero.*(all False|no True|empty)")
case("att_mask_after", check_attention, att_mask_after,
     r"(?i)before the softmax|renormali|sum to 1")
case("att_dv", check_attention, att_dv, r"(?i)(D_v|values).*width|width of the values|q\.size")


# ---- 01 Exercise 3: causal mask ----
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_strict(t):
    return torch.ones(t, t, dtype=torch.bool).tril(-1)


def cm_float(t):
    return torch.tril(torch.ones(t, t))


def cm_batched(t):
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


RIGHT["cm"] = (check_causal_mask, cm_right)
case("cm_strict", check_causal_mask, cm_strict, r"(?i)diagonal|itself")
case("cm_float", check_causal_mask, cm_float, r"(?i)bool")
case("cm_batched", check_causal_mask, cm_batched, r"(?i)\[t, t\]|extra.*(axis|dim)|3-D|2-D")


# ---- 01 Exercise 4: split / merge heads ----
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_no_move(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads)


def merge_no_flatten(x):
    return x.transpose(1, 2)


def split_stack0(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def merge_stack0(x):
    return torch.cat(list(x.unbind(0)), dim=-1)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("heads_split_no_move", check_heads, (split_no_move, merge_right),
     r"(?i)head axis|transpose|\[B, H, T")
case("heads_merge_no_flatten", check_heads, (split_right, merge_no_flatten),
     r"(?i)(H \* D_h|flatten|reshape|\[B, T, D\]|3-D)")
case("heads_stack0", check_heads, (split_stack0, merge_stack0),
     r"(?i)(batch|head) axis.*(first|0)|\[H, B|stack")


# ---- 01 Exercise 5: multi-head attention ----
def _mha(x, mha, mask, order=(0, 1, 2), causal_default=False, bias=True):
    b, t, d = x.shape
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_right(parts[i], mha.n_heads) for i in order)
    if mask is None and causal_default:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    o = merge_right(att_right(q, k, v, mask))
    return mha.out_proj(o) if bias else F.linear(o, mha.out_proj.weight)


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_qk_swapped(x, mha, mask=None):
    return _mha(x, mha, mask, order=(1, 0, 2))


def mha_causal_default(x, mha, mask=None):
    return _mha(x, mha, mask, causal_default=True)


def mha_no_bias(x, mha, mask=None):
    return _mha(x, mha, mask, bias=False)


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("mha_qk_swapped", check_multi_head_attention, mha_qk_swapped,
     r"(?i)(q|queries).*(k|keys).*(swap|order)|chunk.*order|order of.*chunk")
case("mha_causal_default", check_multi_head_attention, mha_causal_default,
     r"(?i)mask=None|no mask.*(causal|every key)|causal.*None")
case("mha_no_bias", check_multi_head_attention, mha_no_bias, r"(?i)bias|out_proj")


# ---- 02 Exercise 1: update_memory ----
def um_right(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], 1)
    return cat[:, max(0, cat.size(1) - mem_len):].detach()


def um_first(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], 1)
    return cat[:, :mem_len].detach()


def um_h_only(mem, h, mem_len):
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def um_neg_slice(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], 1)
    return cat[:, -mem_len:].detach()


RIGHT["um"] = (check_update_memory, um_right)
case("um_first", check_update_memory, um_first, r"(?i)oldest.*(recent|newest|end)")
case("um_h_only", check_update_memory, um_h_only,
     r"(?i)(old|previous) memory|\[mem, h\]|concat|mem.*dropped")
case("um_neg_slice", check_update_memory, um_neg_slice, r"(?i)mem_len\s*=\s*0|-0")


# ---- 02 Exercise 2: segment mask ----
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    start = i // seg_len * seg_len
    return (j >= start - mem_len) & (j <= i)


def sm_sliding(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j >= i - mem_len) & (j <= i)


def sm_strict_low(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j > i // seg_len * seg_len - mem_len) & (j <= i)


def sm_no_causal(n, seg_len, mem_len):
    i, j = _ij(n)
    start = i // seg_len * seg_len
    return (j >= start - mem_len) & (j < start + seg_len)


RIGHT["sm"] = (check_segment_mask, sm_right)
case("sm_sliding", check_segment_mask, sm_sliding, r"(?i)start\(i\)|segment start|sliding")
case("sm_strict_low", check_segment_mask, sm_strict_low,
     r"(?i)<=|≤|off.by.one|start\(i\) - mem_len")
case("sm_no_causal", check_segment_mask, sm_no_causal, r"(?i)future|j <= i|causal")


# ---- 02 Exercise 3: relative distances ----
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_no_m(t, m):
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_clamped(t, m):
    return rd_right(t, m).clamp(min=0)


def rd_float(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t, dtype=torch.float)[None, :]


RIGHT["rd"] = (check_relative_distances, rd_right)
case("rd_no_m", check_relative_distances, rd_no_m, r"(?i)\bm\b.*(missing|add|forgot)|m \+ i|offset")
case("rd_clamped", check_relative_distances, rd_clamped, r"(?i)negative|future|clamp")
case("rd_float", check_relative_distances, rd_float, r"(?i)long|int64|dtype|float")


# ---- 02 Exercise 4: relative shift ----
def rs_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_roll_wrong_way(x):
    t = x.size(-2)
    rows = [x[..., i, :].roll(t - 1 - i, dims=-1) for i in range(t)]
    return torch.stack(rows, dim=-2)


RIGHT["rs"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right,
     r"(?i)(pad|zero column).*(front|left|first)")
case("rs_drop_last", check_relative_shift, rs_drop_last, r"(?i)first row|drop.*row")
case("rs_roll_wrong_way", check_relative_shift, rs_roll_wrong_way,
     r"(?i)slide (right|left)|wrong direction")


# ---- 02 Exercise 5: relative scores ----
def _rel(q, k, r, u, v, swap=False, shift=True, scale_ac_only=False):
    if swap:
        u, v = v, u
    ac = (q + u[None, :, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[None, :, None], r)
    if shift:
        bd = relative_shift(bd)
    scale = math.sqrt(q.size(-1))
    return ac / scale + bd if scale_ac_only else (ac + bd) / scale


def rsc_right(q, k, r, u, v):
    return _rel(q, k, r, u, v)


def rsc_uv_swapped(q, k, r, u, v):
    return _rel(q, k, r, u, v, swap=True)


def rsc_no_shift(q, k, r, u, v):
    return _rel(q, k, r, u, v, shift=False)


def rsc_scale_ac_only(q, k, r, u, v):
    return _rel(q, k, r, u, v, scale_ac_only=True)


RIGHT["rsc"] = (check_relative_scores, rsc_right)
case("rsc_uv_swapped", check_relative_scores, rsc_uv_swapped, r"(?i)(biases|u and v).*swapped")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"(?i)relative_shift|shift")
case("rsc_scale_ac_only", check_relative_scores, rsc_scale_ac_only,
     r"(?i)(all|every|four|both).*(terms|sum).*sqrt|sqrt.*(whole|sum|all)")


# ---- extra cases, one more per exercise ----
def att_where_zero(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = torch.where(mask, s, torch.zeros(()))
    return s.softmax(-1) @ v


def cm_diag_up(t):
    return torch.ones(t, t, dtype=torch.bool).tril(1)


def merge_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def mha_qkv_no_bias(x, mha, mask=None):
    parts = F.linear(x, mha.qkv.weight).chunk(3, dim=-1)
    q, k, v = (split_right(p, mha.n_heads) for p in parts)
    return mha.out_proj(merge_right(att_right(q, k, v, mask)))


def um_cat_dim0(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h])
    return cat[:, max(0, cat.size(1) - mem_len):].detach()


def rd_segment_keys_only(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rs_view(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.view(*lead, s + 1, t)[..., 1:, :].view(*lead, t, s)


def rsc_bias_no_head_axis(q, k, r, u, v):
    ac = (q + u[None]) @ k.transpose(-2, -1)
    bd = relative_shift(torch.einsum("bhtd,shd->bhts", q + v[None], r))
    return (ac + bd) / math.sqrt(q.size(-1))


case("att_where_zero", check_attention, att_where_zero, r"(?i)-inf|(0|zero).*(score|before)")
case("cm_diag_up", check_causal_mask, cm_diag_up, r"(?i)future|j <= i|diagonal")
case("heads_merge_view", check_heads, (split_right, merge_view),
     r"(?i)contiguous|reshape")
case("mha_qkv_no_bias", check_multi_head_attention, mha_qkv_no_bias, r"(?i)qkv.*bias|bias.*qkv")
case("um_cat_dim0", check_update_memory, um_cat_dim0, r"(?i)dim=1|time axis|batch")
case("rd_segment_keys_only", check_relative_distances, rd_segment_keys_only,
     r"(?i)memory keys|m \+ t|S = m")
RIGHT["rs_view"] = (check_relative_shift, rs_view)  # .view works here: a right answer
case("rsc_bias_no_head_axis", check_relative_scores, rsc_bias_no_head_axis,
     r"(?i)u\[:, None\]|head axis|broadcast")


def att_if_mask(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


def cm_uint8(t):
    return torch.ones(t, t, dtype=torch.bool).tril().to(torch.uint8)


def rs_no_lead(x):
    t, s = x.shape[-2:]
    padded = F.pad(x, (1, 0))
    return padded.reshape(s + 1, t)[1:].reshape(t, s)


def rsc_scale_q_first(q, k, r, u, v):
    qs = q / math.sqrt(q.size(-1))
    ac = (qs + u[:, None]) @ k.transpose(-2, -1)
    bd = relative_shift(torch.einsum("bhtd,shd->bhts", qs + v[:, None], r))
    return ac + bd


case("att_if_mask", check_attention, att_if_mask, r"(?i)is not None|if mask")
case("cm_uint8", check_causal_mask, cm_uint8, r"(?i)bool")
case("rs_no_lead", check_relative_shift, rs_no_lead, r"(?i)leading|\.\.\.|batch|\*lead")
case("rsc_scale_q_first", check_relative_scores, rsc_scale_q_first,
     r"(?i)(u|v|bias).*(scaled|sqrt)|sqrt.*(bias|u|v)")


def mha_mask_wrong_axis(x, mha, mask=None):
    q, k, v = (split_right(p, mha.n_heads) for p in mha.qkv(x).chunk(3, dim=-1))
    m = None if mask is None else mask[:, None]  # meant: a head axis
    return mha.out_proj(merge_right(att_right(q, k, v, m)))


def sm_or(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j >= i // seg_len * seg_len - mem_len) | (j <= i)


case("mha_mask_wrong_axis", check_multi_head_attention, mha_mask_wrong_axis,
     r"(?i)mask.*(\[T, T\]|broadcast|head axis|None, None)")
case("sm_or", check_segment_mask, sm_or, r"(?i)\||both|&|and")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
