"""Learner trial 20 (a): notebooks 01 and 02, three new wrong answers and one right per exercise."""

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


# ---- 01 Ex1: attention weights ---------------------------------------------------------
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_scale_after_softmax(q, k):
    return (q @ k.transpose(-2, -1)).softmax(dim=-1) / math.sqrt(q.size(-1))


def aw_log_softmax(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def aw_divide_by_d(q, k):
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


RIGHT["aw"] = (check_attention_weights, aw_right)
case("aw_scale_after_softmax", check_attention_weights, aw_scale_after_softmax,
     r"(?i)after the softmax|before the softmax|sum to 1")
case("aw_log_softmax", check_attention_weights, aw_log_softmax, r"(?i)log")
case("aw_divide_by_d", check_attention_weights, aw_divide_by_d,
     r"(?i)sqrt|√|square root")


# ---- 01 Ex2: attention with a mask -----------------------------------------------------
def at_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1).nan_to_num(0.0)
    return w @ v


def at_mask_multiply(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(dim=-1) @ v


def at_mask_after_softmax(q, k, v, mask=None):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def at_fill_minus_1e9(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


RIGHT["at"] = (check_attention, at_right)
case("at_mask_multiply", check_attention, at_mask_multiply,
     r"(?i)multipl|-inf|masked_fill")
case("at_mask_after_softmax", check_attention, at_mask_after_softmax,
     r"(?i)after the softmax|before the softmax|renormali")
case("at_fill_minus_1e9", check_attention, at_fill_minus_1e9,
     r"(?i)(all False|fully masked|no key).*zero|-1e9|large negative")


# ---- 01 Ex3: causal mask ---------------------------------------------------------------
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_float(t):
    return torch.tril(torch.ones(t, t))


def cm_no_diagonal(t):
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)


def cm_batched(t):
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


RIGHT["cm"] = (check_causal_mask, cm_right)
case("cm_float", check_causal_mask, cm_float, r"(?i)bool|dtype|float")
case("cm_no_diagonal", check_causal_mask, cm_no_diagonal,
     r"(?i)diagonal|itself|its own|j == i|j = i")
case("cm_batched", check_causal_mask, cm_batched,
     r"(?i)\[t, t\]|extra|leading|batch|2-D|two axes")


# ---- 01 Ex4: split and merge heads -----------------------------------------------------
def sh_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def mh_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def sh_view_dh_h(x, n_heads):  # cuts the last axis as [D_h, H]: head h gets every H-th feature
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def mh_view_noncontiguous(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def sh_n_heads_as_width(x, n_heads):  # reads n_heads as the width of a head
    b, t, d = x.shape
    return x.view(b, t, -1, n_heads).transpose(1, 2)


RIGHT["hd"] = (check_heads, sh_right, mh_right)
case("hd_split_view_dh_h", check_heads, (sh_view_dh_h, mh_right),
     r"(?i)every H-th|interleav|h ?\* ?D_h|contiguous slice|feature-major|\[B, T, D_h, H\]")
case("hd_merge_view_noncontiguous", check_heads, (sh_right, mh_view_noncontiguous),
     r"(?i)contiguous|reshape")
case("hd_split_n_heads_as_width", check_heads, (sh_n_heads_as_width, mh_right),
     r"(?i)n_heads.*(number|width)|head width|D // n_heads|D_h = D / H")


# ---- 01 Ex5: multi-head attention ------------------------------------------------------
def _mha(x, mha, mask, scale_width=None, causal_if_none=False, qkv_per_head=False):
    b, t, d = x.shape
    h = mha.n_heads
    dh = d // h
    if qkv_per_head:  # assumes [q_h, k_h, v_h] side by side for each head
        qkv = mha.qkv(x).view(b, t, h, 3 * dh).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
    else:
        q, k, v = (z.view(b, t, h, dh).transpose(1, 2) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(scale_width or dh)
    if mask is None and causal_if_none:
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    y = s.softmax(dim=-1).nan_to_num(0.0) @ v
    return mha.out_proj(y.transpose(1, 2).reshape(b, t, d))


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_scale_model_width(x, mha, mask=None):
    return _mha(x, mha, mask, scale_width=x.size(-1))


def mha_causal_when_none(x, mha, mask=None):
    return _mha(x, mha, mask, causal_if_none=True)


def mha_qkv_per_head(x, mha, mask=None):
    return _mha(x, mha, mask, qkv_per_head=True)


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("mha_scale_model_width", check_multi_head_attention, mha_scale_model_width,
     r"(?i)sqrt\(?D_h|head width|sqrt\(D\)|whole width|model width")
case("mha_causal_when_none", check_multi_head_attention, mha_causal_when_none,
     r"(?i)causal|mask=None|mask is None|no mask")
case("mha_qkv_per_head", check_multi_head_attention, mha_qkv_per_head,
     r"(?i)chunk|side by side|Q, K, V|qkv")


# ---- 02 Ex1: update memory -------------------------------------------------------------
def um_right(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):].detach()


def um_first_states(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, :mem_len].detach()


def um_h_before_mem(mem, h, mem_len):
    full = h if mem is None else torch.cat([h, mem], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):].detach()


def um_ignores_old_memory(mem, h, mem_len):
    return h[:, h.size(1) - min(h.size(1), mem_len):].detach()


RIGHT["um"] = (check_update_memory, um_right)
case("um_first_states", check_update_memory, um_first_states,
     r"(?i)first|oldest|last mem_len|newest")
case("um_h_before_mem", check_update_memory, um_h_before_mem,
     r"(?i)order|\[mem, h\]|before|after")
case("um_ignores_old_memory", check_update_memory, um_ignores_old_memory,
     r"(?i)old memory|previous memory|\bmem\b.*(ignored|missing|dropped)|concaten")


# ---- 02 Ex2: segment mask --------------------------------------------------------------
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j >= (i // seg_len) * seg_len - mem_len) & (j <= i)


def sm_sliding_window(n, seg_len, mem_len):  # ignores the segments: a window of mem_len
    i, j = _ij(n)
    return (j >= i - mem_len) & (j <= i)


def sm_no_causal(n, seg_len, mem_len):
    i, j = _ij(n)
    return j >= (i // seg_len) * seg_len - mem_len


def sm_float(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).float()


RIGHT["sm"] = (check_segment_mask, sm_right)
case("sm_sliding_window", check_segment_mask, sm_sliding_window,
     r"(?i)start\(i\)|segment start|sliding|i - mem_len")
case("sm_no_causal", check_segment_mask, sm_no_causal,
     r"(?i)future|j <= i|j ≤ i|causal|later key")
case("sm_float", check_segment_mask, sm_float, r"(?i)bool|dtype|float")


# ---- 02 Ex3: relative distances --------------------------------------------------------
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_float(t, m):
    return m + torch.arange(float(t))[:, None] - torch.arange(float(m + t))[None, :]


def rd_no_memory_offset(t, m):
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_clamped(t, m):
    return rd_right(t, m).clamp(min=0)


RIGHT["rd"] = (check_relative_distances, rd_right)
case("rd_float", check_relative_distances, rd_float, r"(?i)long|int64|dtype|float")
case("rd_no_memory_offset", check_relative_distances, rd_no_memory_offset,
     r"(?i)m \+ i|memory|offset|key position")
case("rd_clamped", check_relative_distances, rd_clamped,
     r"(?i)negative|clamp|future")


# ---- 02 Ex4: relative shift ------------------------------------------------------------
def rs_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last_row(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_flatten_leading(x):  # reads all leading dims as one long 2-D table
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(-1, t)[1:].reshape(-1)[: x.numel()].reshape(x.shape)


RIGHT["rs"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right,
     r"(?i)pad.*(front|left|first|end|right)|in front")
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row,
     r"(?i)first row|last row|drop")
case("rs_flatten_leading", check_relative_shift, rs_flatten_leading,
     r"(?i)leading|batch|head|\.\.\.|each \[T, S\]")


# ---- 02 Ex5: relative scores -----------------------------------------------------------
def _rel(q, k, r, u, v, swap=False, shift=True, scale_ac_only=False):
    if swap:
        u, v = v, u
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    if shift:
        bd = relative_shift(bd)
    sc = math.sqrt(q.size(-1))
    return ac / sc + bd if scale_ac_only else (ac + bd) / sc


def rsc_right(q, k, r, u, v):
    return _rel(q, k, r, u, v)


def rsc_u_v_swapped(q, k, r, u, v):
    return _rel(q, k, r, u, v, swap=True)


def rsc_no_shift(q, k, r, u, v):
    return _rel(q, k, r, u, v, shift=False)


def rsc_scale_content_only(q, k, r, u, v):
    return _rel(q, k, r, u, v, scale_ac_only=True)


RIGHT["rsc"] = (check_relative_scores, rsc_right)
case("rsc_u_v_swapped", check_relative_scores, rsc_u_v_swapped,
     r"(?i)swap|u and v|v and u|content_bias.*position_bias")
case("rsc_no_shift", check_relative_scores, rsc_no_shift,
     r"(?i)relative_shift|shift")
case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"(?i)(b\) ?\+ ?\(d|position term|both|all four|every term).*(sqrt|scale|divid)|"
     r"(sqrt|scale|divid).*(b\) ?\+ ?\(d|position|all four|both)")



# ======================= round 2: subtler slips =========================================
import numpy as np  # noqa: E402


def aw_scale_q_in_place(q, k):  # divides the caller's q in place
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(dim=-1)


def aw_transpose_k_wrong_axes(q, k):  # k.transpose(0, 1) on [B, S, D]
    return (q @ k.transpose(0, 1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_temperature_inverted(q, k):  # multiplies by sqrt(d)
    return (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(dim=-1)


case("aw_scale_q_in_place", check_attention_weights, aw_scale_q_in_place,
     r"(?i)in.place|modif|changed (your|the) input|/=")
case("aw_transpose_k_wrong_axes", check_attention_weights, aw_transpose_k_wrong_axes,
     r"(?i)transpose\(-2, -1\)|last two|k\.transpose|mT|batch axis")
case("aw_temperature_inverted", check_attention_weights, aw_temperature_inverted,
     r"(?i)multipl.*sqrt|divide.*sqrt")


def at_additive_bool_times_inf(q, k, v, mask=None):  # False * -inf = nan where allowed
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + (~mask) * float("-inf")
    return s.softmax(dim=-1).nan_to_num(0.0) @ v


def at_dropout(q, k, v, mask=None):  # copied F.dropout from a model (training=True)
    w = at_right_weights(q, k, mask)
    return F.dropout(w, 0.1) @ v


def at_right_weights(q, k, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(dim=-1).nan_to_num(0.0)


def at_keys_as_values(q, k, v, mask=None):  # typo: w @ k
    return at_right_weights(q, k, mask) @ k[..., : v.size(-1)]


case("at_additive_bool_times_inf", check_attention, at_additive_bool_times_inf,
     r"(?i)0 ?\* ?-?inf|nan|masked_fill|where")
case("at_dropout", check_attention, at_dropout, r"(?i)dropout|random|deterministic")
case("at_keys_as_values", check_attention, at_keys_as_values,
     r"(?i)keys? instead of (the )?values|@ k\b|average of the keys")


def cm_triu(t):
    return torch.ones(t, t).triu().bool()


def cm_numpy(t):
    return np.tril(np.ones((t, t), dtype=bool))


def cm_size_plus_one(t):
    return torch.ones(t + 1, t + 1, dtype=torch.bool).tril()


case("cm_triu", check_causal_mask, cm_triu, r"(?i)future|upper|triu|transpos|j <= i")
case("cm_numpy", check_causal_mask, cm_numpy, r"(?i)numpy|torch tensor|torch\.Tensor")
case("cm_size_plus_one", check_causal_mask, cm_size_plus_one,
     r"(?i)t \+ 1|one (row|too)|off by one")


def sh_transpose_then_reshape(x, n_heads):
    b, t, d = x.shape
    return x.transpose(1, 2).reshape(b, n_heads, t, d // n_heads)


def mh_flatten_from_1(x):
    return x.transpose(1, 2).flatten(1)


def sh_chunk_no_stack(x, n_heads):
    return x.chunk(n_heads, dim=-1)


case("hd_split_transpose_then_reshape", check_heads, (sh_transpose_then_reshape, mh_right),
     r"(?i)transpos.*(before|first)|order|mix|view as \[B, T, H, D_h\]")
case("hd_merge_flatten_from_1", check_heads, (sh_right, mh_flatten_from_1),
     r"(?i)flatten\(1\)|flatten\(2\)|start_dim|\[B, T \* H \* D_h\]|T \* D")
case("hd_split_chunk_no_stack", check_heads, (sh_chunk_no_stack, mh_right),
     r"(?i)tuple|stack")


def mha_no_out_bias(x, mha, mask=None):
    b, t, d = x.shape
    y = mha_right(x, mha, mask) - mha.out_proj.bias
    return y


def mha_scale_q_and_k(x, mha, mask=None):  # divides q and k each by sqrt(D_h)
    return _mha(x, mha, mask, scale_width=(x.size(-1) // mha.n_heads) ** 2)


def mha_no_out_proj(x, mha, mask=None):
    b, t, d = x.shape
    y = mha_right(x, mha, mask) - mha.out_proj.bias
    return torch.linalg.solve(mha.out_proj.weight, y.unsqueeze(-1)).squeeze(-1)


case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias,
     r"(?i)bias")
case("mha_scale_q_and_k", check_multi_head_attention, mha_scale_q_and_k,
     r"(?i)twice|d_head\b(?! ?\))|by d_head|sqrt.*(both|once)")
case("mha_no_out_proj", check_multi_head_attention, mha_no_out_proj, r"(?i)out_proj")


def um_detach_in_place(mem, h, mem_len):
    h.detach_()
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):]


def um_clone(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):].clone()


def um_none_untruncated(mem, h, mem_len):
    if mem is None:
        return h.detach()
    return um_right(mem, h, mem_len)


case("um_detach_in_place", check_update_memory, um_detach_in_place,
     r"(?i)in.place|detach_")
case("um_clone", check_update_memory, um_clone, r"(?i)clone|detach|grad")
case("um_none_untruncated", check_update_memory, um_none_untruncated,
     r"(?i)None.*(mem_len|truncat|last)|first (step|segment)")


def sm_previous_whole_segment(n, seg_len, mem_len):  # right only when mem_len == seg_len
    i, j = _ij(n)
    return (j // seg_len >= i // seg_len - 1) & (j <= i)


def sm_transposed(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).T


def sm_start_of_key(n, seg_len, mem_len):  # start(j) instead of start(i)
    i, j = _ij(n)
    return (j >= (j // seg_len) * seg_len - mem_len) & (j <= i)


case("sm_previous_whole_segment", check_segment_mask, sm_previous_whole_segment,
     r"(?i)mem_len.*(segment|seg_len)|whole (previous )?segment|seg_len.*mem_len")
case("sm_transposed", check_segment_mask, sm_transposed,
     r"(?i)transpos|rows? .*quer|future")
case("sm_start_of_key", check_segment_mask, sm_start_of_key,
     r"(?i)start\(j\)|start\(i\)|query's segment|key's segment")


def rd_abs(t, m):
    return rd_right(t, m).abs()


def rd_segment_keys_only(t, m):  # [T, T]: forgot the memory keys
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_descending_columns(t, m):  # the relative-shift layout: column r = distance S-1-r
    s = m + t
    return torch.arange(s - 1, -1, -1).expand(t, s).clone()


case("rd_abs", check_relative_distances, rd_abs, r"(?i)abs|negative|future")
case("rd_segment_keys_only", check_relative_distances, rd_segment_keys_only,
     r"(?i)memory keys|S = m \+ t|m \+ t keys|\[T, S\]")
case("rd_descending_columns", check_relative_distances, rd_descending_columns,
     r"(?i)by key|per query|every row|depend.*i|S - 1 - r|layout")


def rs_roll(x):  # a loop of torch.roll: the visible part is right, leftovers wrap around
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(-(t - 1 - i), -1) for i in range(t)], dim=-2)


def rs_read_as_t_s1(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, t, s + 1)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_row(x):  # pads a row on top instead of a column in front
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 0, 1, 0))
    return padded.reshape(*lead, s, t + 1)[..., 1:, :].reshape(*lead, t, s)


RIGHT["rs_roll"] = (check_relative_shift, rs_roll)
case("rs_read_as_t_s1", check_relative_shift, rs_read_as_t_s1,
     r"(?i)\[\.\.\., S \+ 1, T\]|\[S \+ 1, T\]|read as")
case("rs_pad_row", check_relative_shift, rs_pad_row,
     r"(?i)column|pad.*(last|-1|rows?)")


def rsc_r_flipped(q, k, r, u, v):
    return _rel(q, k, r.flip(0), u, v)


def rsc_bias_broadcast(q, k, r, u, v):  # u[None] instead of u[:, None]: H against T
    ac = (q + u[None]) @ k.transpose(-2, -1)
    bd = relative_shift(torch.einsum("bhtd,shd->bhts", q + v[None], r))
    return (ac + bd) / math.sqrt(q.size(-1))


def rsc_r_reshaped(q, k, r, u, v):  # r.reshape(H, D_h, S) instead of permute(1, 2, 0)
    s, h, dh = r.shape
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = relative_shift((q + v[:, None]) @ r.reshape(h, dh, s))
    return (ac + bd) / math.sqrt(dh)


case("rsc_r_flipped", check_relative_scores, rsc_r_flipped,
     r"(?i)flip|order of r|reversed|S - 1 - δ|distances S - 1")
case("rsc_bias_broadcast", check_relative_scores, rsc_bias_broadcast,
     r"(?i)u\[:, None\]|\[H, 1, D_h\]|broadcast|head")
case("rsc_r_reshaped", check_relative_scores, rsc_r_reshaped,
     r"(?i)permute|reshape|transpose")



# ======================= round 3: shortcuts and broadcasts ==============================
def aw_batch_zero_only(q, k):  # one batch entry's weights, repeated
    w = (q[0] @ k[0].T / math.sqrt(q.size(-1))).softmax(dim=-1)
    return w.expand(q.size(0), -1, -1)


def aw_einsum_swapped_output(q, k):  # 'bts' written as 'bst' then softmax over queries
    s = torch.einsum("btd,bsd->bst", q, k) / math.sqrt(q.size(-1))
    return s.softmax(dim=-2).transpose(-2, -1).softmax(dim=-1)


case("aw_batch_zero_only", check_attention_weights, aw_batch_zero_only,
     r"(?i)batch (entry )?0|every batch|same for (each|every)|batch")
case("aw_double_softmax", check_attention_weights, aw_einsum_swapped_output,
     r"(?i)twice|two softmax|softmax.*again|double")


def at_mask_as_key_padding(q, k, v, mask=None):  # mask[:, None, :] as if it were [B, S]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask[:, None, :], float("-inf"))
    return s.softmax(dim=-1).nan_to_num(0.0) @ v


def at_one_minus_mask(q, k, v, mask=None):  # int-mask habit on a bool mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(1 - mask, float("-inf"))
    return s.softmax(dim=-1).nan_to_num(0.0) @ v


case("at_mask_as_key_padding", check_attention, at_mask_as_key_padding,
     r"(?i)mask\[:, None(, :)?\]|key.padding|\[B, S\]|\[T, S\]|broadcast")
case("at_one_minus_mask", check_attention, at_one_minus_mask,
     r"(?i)~mask|logical_not|1 - mask|invert")


_BIG = torch.ones(8, 8, dtype=torch.bool).tril()


def cm_sliced_constant(t):  # right only up to t = 8
    return _BIG[:t, :t]


case("cm_sliced_constant", check_causal_mask, cm_sliced_constant,
     r"(?i)fixed|constant|t = \d\d|larger t|only up to")


def sh_fixed_heads(x, n_heads):  # ignores n_heads: 4 heads, the notebook's example
    b, t, d = x.shape
    return x.view(b, t, 4, d // 4).transpose(1, 2)


case("hd_split_fixed_heads", check_heads, (sh_fixed_heads, mh_right),
     r"(?i)n_heads|hard.?coded|H = \d")


def mha_fixed_heads(x, mha, mask=None):
    class M:
        pass
    fake = M()
    fake.qkv, fake.out_proj, fake.n_heads = mha.qkv, mha.out_proj, 4
    return _mha(x, fake, mask)


def mha_qkv_no_bias(x, mha, mask=None):
    class M:
        pass
    fake = M()
    fake.qkv = lambda z: z @ mha.qkv.weight.T
    fake.out_proj, fake.n_heads = mha.out_proj, mha.n_heads
    return _mha(x, fake, mask)


case("mha_fixed_heads", check_multi_head_attention, mha_fixed_heads,
     r"(?i)n_heads|hard.?coded|H = \d")
case("mha_qkv_no_bias", check_multi_head_attention, mha_qkv_no_bias,
     r"(?i)qkv.*bias|bias.*qkv")


def um_keeps_t_states(mem, h, mem_len):  # memory = the last segment, mem_len ignored
    return h.detach()


def um_stack(mem, h, mem_len):
    full = h if mem is None else torch.stack([mem, h], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):].detach()


case("um_keeps_t_states", check_update_memory, um_keeps_t_states,
     r"(?i)mem_len|old memory|previous memory")
case("um_stack", check_update_memory, um_stack, r"(?i)torch\.cat|stack")


def sm_mem_len_in_segments(n, seg_len, mem_len):  # mem_len read as a number of segments
    i, j = _ij(n)
    return (j >= (i // seg_len) * seg_len - mem_len * seg_len) & (j <= i)


def sm_python_max(n, seg_len, mem_len):  # max(tensor, 0): ambiguous truth value
    i, j = _ij(n)
    return (j >= max((i // seg_len) * seg_len - mem_len, 0)) & (j <= i)


case("sm_mem_len_in_segments", check_segment_mask, sm_mem_len_in_segments,
     r"(?i)mem_len (positions|states)|segments|seg_len")
case("sm_python_max", check_segment_mask, sm_python_max,
     r"(?i)max\(|clamp")


def rd_t_for_m(t, m):  # t + i - j: right only when m == t
    return t + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_int32(t, m):
    return rd_right(t, m).to(torch.int32)


case("rd_t_for_m", check_relative_distances, rd_t_for_m,
     r"(?i)t \+ i - j|t instead of m|(used|uses) t\b")
case("rd_int32", check_relative_distances, rd_int32, r"(?i)int64|long|int32")


def rs_four_dims_only(x):  # b, h, t, s = x.shape: only [B, H, T, S]
    b, h, t, s = x.shape
    return F.pad(x, (1, 0)).view(b, h, s + 1, t)[:, :, 1:].reshape(b, h, t, s)


case("rs_four_dims_only", check_relative_shift, rs_four_dims_only,
     r"(?i)leading|any number|\.\.\.|\*lead")


def rsc_no_u(q, k, r, u, v):
    return _rel(q, k, r, torch.zeros_like(u), v)


def rsc_shift_sum(q, k, r, u, v):  # shifts content and position scores together
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return relative_shift(ac + bd) / math.sqrt(q.size(-1))


case("rsc_no_u", check_relative_scores, rsc_no_u, r"(?i)\bu\b|content bias|\(c\)")
case("rsc_shift_sum", check_relative_scores, rsc_shift_sum,
     r"(?i)(only|just) the position|content.*(not|never).*shift|shift.*content")



# ======================= round 4 ========================================================
def aw_stable_max_wrong_axis(q, k):  # "stable" softmax subtracting each column's max
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = (s - s.amax(dim=-2, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True) * 0 + (s - s.amax(dim=-2, keepdim=True)).softmax(-2)


case("aw_stable_max_wrong_axis", check_attention_weights, aw_stable_max_wrong_axis,
     r"(?i)queries|dim=-2|wrong axis|over the keys")


def at_scale_output(q, k, v, mask=None):  # the 1/sqrt(d) put on the output
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(dim=-1).nan_to_num(0.0) @ v / math.sqrt(q.size(-1))


case("at_scale_output", check_attention, at_scale_output,
     r"(?i)(divide|scale) the scores|before the softmax|output.*sqrt|sqrt.*output")


def cm_one_future(t):
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


case("cm_one_future", check_causal_mask, cm_one_future,
     r"(?i)diagonal=1|next (token|key)|future|j <= i")


def mh_transpose_1_3(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 3).reshape(b, t, h * dh)


case("hd_merge_transpose_1_3", check_heads, (sh_right, mh_transpose_1_3),
     r"(?i)transpose\(1, 3\)|transpose\(1, 2\)|axes 1 and 2|\[B, D_h, T, H\]")


def mha_mask_transposed(x, mha, mask=None):  # mask read as [key, query]
    return _mha(x, mha, None if mask is None else mask.T)


case("mha_mask_transposed", check_multi_head_attention, mha_mask_transposed,
     r"(?i)transpos|mask\.T|\[T, T\].*(query|row)")


def um_detach_mem_only(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem.detach(), h], dim=1)
    return full[:, full.size(1) - min(full.size(1), mem_len):]


case("um_detach_mem_only", check_update_memory, um_detach_mem_only,
     r"(?i)detach")


def sm_band(n, seg_len, mem_len):  # a fixed band of seg_len + mem_len keys
    m = torch.ones(n, n, dtype=torch.bool)
    return m.tril() & m.triu(diagonal=-(seg_len + mem_len - 1))


case("sm_band", check_segment_mask, sm_band,
     r"(?i)sliding|band|start\(i\)|segment start")


def rd_unsqueeze_both_1(t, m):
    return m + torch.arange(t).unsqueeze(1) - torch.arange(m + t).unsqueeze(1)


case("rd_unsqueeze_both_1", check_relative_distances, rd_unsqueeze_both_1,
     r"(?i)\[None, :\]|unsqueeze\(0\)|row vector|\[T, 1\].*\[S, 1\]|\[S, 1\]")


def rs_roll_wrong_way(x):
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(t - 1 - i, -1) for i in range(t)], dim=-2)


case("rs_roll_wrong_way", check_relative_shift, rs_roll_wrong_way,
     r"(?i)right instead of left|wrong (way|direction)|slide[sd]? (right|left)")


def rsc_scale_model_width(q, k, r, u, v):
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = relative_shift(torch.einsum("bhtd,shd->bhts", q + v[:, None], r))
    return (ac + bd) / math.sqrt(q.size(1) * q.size(-1))


case("rsc_scale_model_width", check_relative_scores, rsc_scale_model_width,
     r"(?i)d_head|D_h|head width")



# ======================= round 5 ========================================================
def aw_cosine(q, k):  # normalises q and k first (section 1's cosine)
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return (qn @ kn.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


case("aw_cosine", check_attention_weights, aw_cosine, r"(?i)normali[sz]|cosine|lengths?")


def at_half_softmax(q, k, v, mask=None):  # softmax in float16 (an AMP habit)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.half().softmax(dim=-1).to(q.dtype).nan_to_num(0.0) @ v


case("at_half_softmax", check_attention, at_half_softmax,
     r"(?i)half|float16|precision")


def cm_mirror_rows(t):
    return torch.ones(t, t, dtype=torch.bool).tril().flip(0)


case("cm_mirror_rows", check_causal_mask, cm_mirror_rows,
     r"(?i)flip|revers|anti-?diagonal|upside.down")


def sh_head_width_before_tokens(x, n_heads):  # [B, H, D_h, T]
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, -1).permute(0, 2, 3, 1)


case("hd_split_dh_before_t", check_heads, (sh_head_width_before_tokens, mh_right),
     r"(?i)\[B, H, D_h, T\]|permute\(0, 2, 1, 3\)|transpose\(1, 2\)")


def mha_single_head(x, mha, mask=None):  # one head of width D, no split
    class M:
        pass
    fake = M()
    fake.qkv, fake.out_proj, fake.n_heads = mha.qkv, mha.out_proj, 1
    return _mha(x, fake, mask)


case("mha_single_head", check_multi_head_attention, mha_single_head,
     r"(?i)one head|single head|n_heads|split")


def um_cut_before_cat(mem, h, mem_len):  # cuts the old memory, then concatenates
    if mem is None:
        return h[:, h.size(1) - min(h.size(1), mem_len):].detach()
    return torch.cat([mem[:, mem.size(1) - min(mem.size(1), mem_len):], h], dim=1).detach()


case("um_cut_before_cat", check_update_memory, um_cut_before_cat,
     r"(?i)after (the )?concatenat|cut.*(after|concatenation)|at most mem_len|more than mem_len")


def sm_with_memory_columns(n, seg_len, mem_len):  # [N, mem_len + N]: memory keys in front
    i = torch.arange(n)[:, None]
    j = torch.arange(n + mem_len)[None, :] - mem_len
    return (j >= (i // seg_len) * seg_len - mem_len) & (j <= i)


case("sm_with_memory_columns", check_segment_mask, sm_with_memory_columns,
     r"(?i)n \+ mem_len|memory columns|one pass|keys of the text")


def rd_args_swapped(t, m):  # reads the arguments as (m, t)
    m, t = t, m
    return rd_right(t, m)


case("rd_args_swapped", check_relative_distances, rd_args_swapped,
     r"(?i)swap|\(t, m\)|argument|order")


def rs_no_final_reshape(x):  # returns the [..., S, T] rows read from the view
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :]


case("rs_no_final_reshape", check_relative_shift, rs_no_final_reshape,
     r"(?i)read back|\[\.\.\., T, S\]|\[S, T\]|reshape")


def rsc_u_on_keys(q, k, r, u, v):  # q (k + u)^T instead of (q + u) k^T
    ac = q @ (k + u[:, None]).transpose(-2, -1)
    bd = relative_shift(torch.einsum("bhtd,shd->bhts", q + v[:, None], r))
    return (ac + bd) / math.sqrt(q.size(-1))


case("rsc_u_on_keys", check_relative_scores, rsc_u_on_keys,
     r"(?i)u.*(to|with) (the )?(queries|q\b)|\(q \+ u\)|k \+ u")



# ======================= round 6 ========================================================
def cm_arange_vs_arange(t):  # both aranges 1-D: compares j with j
    return torch.arange(t) <= torch.arange(t)


case("cm_arange_vs_arange", check_causal_mask, cm_arange_vs_arange,
     r"(?i)1-D|\[:, None\]|column|two axes|broadcast")


def mh_cat_along_tokens(x):  # torch.cat of the heads along dim=1 (the tokens)
    return torch.cat(x.unbind(1), dim=1)


def mh_cat_heads_right(x):
    return torch.cat(x.unbind(1), dim=-1)


RIGHT["hd_cat"] = (check_heads, sh_right, mh_cat_heads_right)
case("hd_merge_cat_along_tokens", check_heads, (sh_right, mh_cat_along_tokens),
     r"(?i)dim=-1|along the features|last axis|features")


def rs_flip_columns(x):  # reads "shift" as reversing the distance columns
    return x.flip(-1)


case("rs_flip_columns", check_relative_shift, rs_flip_columns,
     r"(?i)flip|revers|slide|each row")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
