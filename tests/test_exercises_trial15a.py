"""Learner trial 15a (issue 28): notebooks 01_attention and 02_transformer_xl, new slips."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.xl.relative_attention import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 01 Ex1: attention weights
def aw_right(q, k):
    s = torch.einsum("...td,...sd->...ts", q, k) / q.size(-1) ** 0.5
    return torch.exp(s - s.amax(-1, keepdim=True)) / torch.exp(
        s - s.amax(-1, keepdim=True)).sum(-1, keepdim=True)


RIGHT["aw"] = (check_attention_weights, aw_right)
case("aw_einsum_3_axes", check_attention_weights,  # right on 3-D only: Ex. 5 passes 4-D heads
     lambda q, k: torch.einsum("btd,bsd->bts", q, k).div(q.size(-1) ** 0.5).softmax(-1),
     r"einsum\('\.\.\.td,\.\.\.sd->\.\.\.ts'")
case("aw_mul_sqrt", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(-1),
     r"(multipl|divide|scale|sqrt|√)")
case("aw_sqrt_keys", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(k.size(1))).softmax(-1),
     r"(scale|sqrt|√|width|number of keys|S)")
case("aw_scale_both", check_attention_weights,
     lambda q, k: ((q / math.sqrt(q.size(-1))) @ (k / math.sqrt(q.size(-1))).mT).softmax(-1),
     r"(scale|sqrt|√|twice|d\b)")
case("aw_log_softmax", check_attention_weights,
     lambda q, k: (q @ k.mT / math.sqrt(q.size(-1))).log_softmax(-1),
     r"(log|negative|sum to 1|softmax)")
case("aw_sum_norm", check_attention_weights,
     lambda q, k: (lambda s: s / s.sum(-1, keepdim=True))(q @ k.mT / math.sqrt(q.size(-1))),
     r"(softmax|exp|negative)")
case("aw_sqrt_batch", check_attention_weights,
     lambda q, k: (q @ k.mT / math.sqrt(q.size(0))).softmax(-1),
     r"(scale|sqrt|√|width|batch)")


# ---------------------------------------------------------------- 01 Ex2: attention with mask
def att_right(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(-1), nan=0.0) @ v


def att_1e9(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def att_if_mask(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


def att_zero_scores(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(-1) @ v


def att_all_not_any(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    w = s.softmax(-1) if mask is None else s.masked_fill(~mask, float("-inf")).softmax(-1)
    if mask is not None:
        w = w.masked_fill(mask.all(-1, keepdim=True), 0.0)
    return w @ v


def att_tuple(q, k, v, mask=None):
    w = (q @ k.mT / math.sqrt(q.size(-1)))
    if mask is not None:
        w = w.masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(w.softmax(-1))
    return w @ v, w


def att_mask_after(q, k, v, mask=None):
    w = (q @ k.mT / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
    return w @ v


RIGHT["att"] = (check_attention, att_right)
case("att_minus_1e9", check_attention, att_1e9,
     r"(all False|no True|zeros|uniform|-1e9|-inf)")
case("att_if_mask", check_attention, att_if_mask, r"(if mask|is None|ambiguous|None)")
case("att_scores_times_mask", check_attention, att_zero_scores,
     r"(-inf|-∞|masked_fill|multipl|zero.*score|score.*zero)")
case("att_all_not_any", check_attention, att_all_not_any,
     r"(any|all|NaN|nan)")
case("att_returns_tuple", check_attention, att_tuple,
     r"(tuple|output only|weights|return)")
case("att_mask_after_softmax", check_attention, att_mask_after,
     r"(before the softmax|after the softmax|sum to 1|renormal)")


# ---------------------------------------------------------------- 01 Ex3: causal mask
RIGHT["cm"] = (check_causal_mask,
               lambda t: torch.arange(t)[None, :] <= torch.arange(t)[:, None])
case("cm_nn_transformer", check_causal_mask,
     lambda t: nn.Transformer.generate_square_subsequent_mask(t),
     r"(bool|dtype|-inf|float)")
case("cm_batch_dim", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).tril()[None],
     r"(\[t, t\]|extra|batch|leading|3-D|dimension|2-D)")
case("cm_numpy", check_causal_mask,
     lambda t: np.tril(np.ones((t, t), dtype=bool)),
     r"(numpy|tensor|torch)")
case("cm_not_triu", check_causal_mask,
     lambda t: ~torch.ones(t, t, dtype=torch.bool).triu(),
     r"(diagonal|itself)")
case("cm_tril_plus1", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).tril(1),
     r"(future|next|j > i|above the diagonal|diagonal)")
case("cm_long", check_causal_mask,
     lambda t: (torch.arange(t)[None, :] <= torch.arange(t)[:, None]).long(),
     r"(bool|dtype)")


# ---------------------------------------------------------------- 01 Ex4: split / merge heads
def sp_right(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def mg_right(x):
    return torch.cat(x.unbind(1), dim=-1)


def sp_strided(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def mg_strided(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def sp_stack0(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def mg_cat_tokens(x):
    return torch.cat(x.unbind(1), dim=1)


def sp_h_dh_swapped(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, -1, n_heads).transpose(1, 2)


def mg_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


RIGHT["heads"] = (check_heads, sp_right, mg_right)
case("heads_strided_split", check_heads, (sp_strided, mg_right),
     r"(interleav|strided|slice|h\*D_h|contiguous slice|feature)")
case("heads_strided_merge", check_heads, (sp_right, mg_strided),
     r"(merge).*(order|interleav|feature|D_h.*H|H.*D_h)")
case("heads_stack_dim0", check_heads, (sp_stack0, mg_right),
     r"(head axis|\[B, H, T, D_h\]|batch.*head|axis 1|dim=1)")
case("heads_cat_tokens", check_heads, (sp_right, mg_cat_tokens),
     r"(merge).*(\[B, T, H \* D_h\]|tokens|last axis|feature)")
case("heads_h_dh_swapped", check_heads, (sp_h_dh_swapped, mg_right),
     r"(n_heads|D_h|head width|number of heads|swap)")
case("heads_merge_view", check_heads, (sp_right, mg_view),
     r"(view|reshape|contiguous)")


# ---------------------------------------------------------------- 01 Ex5: multi-head attention
def _attend(q, k, v, mask):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


def mha_right(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(_attend(q, k, v, mask)))


def mha_kqv(x, mha, mask=None):
    k, q, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(_attend(q, k, v, mask)))


def mha_adds_causal(x, mha, mask=None):
    if mask is None:
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    return mha_right(x, mha, mask)


def mha_per_head_qkv(x, mha, mask=None):
    b, t, d = x.shape
    h = mha.n_heads
    qkv = mha.qkv(x).view(b, t, h, 3 * d // h).transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)
    return mha.out_proj(mg_right(_attend(q, k, v, mask)))


def mha_no_out_bias(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mg_right(_attend(q, k, v, mask)) @ mha.out_proj.weight.T


def mha_qkv_no_bias(x, mha, mask=None):
    qkv = x @ mha.qkv.weight.T
    q, k, v = (sp_right(z, mha.n_heads) for z in qkv.chunk(3, dim=-1))
    return mha.out_proj(mg_right(_attend(q, k, v, mask)))


def mha_split_qkv_first(x, mha, mask=None):
    qkv = sp_right(mha.qkv(x), mha.n_heads)  # split the fused [B, T, 3D] into heads
    q, k, v = qkv.chunk(3, dim=-1)
    return mha.out_proj(mg_right(_attend(q, k, v, mask)))


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("mha_k_q_v_order", check_multi_head_attention, mha_kqv,
     r"(order|queries.*keys|keys.*queries|swap|chunk)")
case("mha_adds_causal", check_multi_head_attention, mha_adds_causal,
     r"(causal|mask is None|no mask|None)")
case("mha_per_head_qkv", check_multi_head_attention, mha_per_head_qkv,
     r"(chunk|q, k, v|side by side|layout|order)")
case("mha_no_out_bias", check_multi_head_attention, mha_no_out_bias,
     r"(bias|out_proj)")
case("mha_qkv_no_bias", check_multi_head_attention, mha_qkv_no_bias,
     r"(bias|qkv)")
case("mha_split_before_chunk", check_multi_head_attention, mha_split_qkv_first,
     r"(chunk|before split|split.*after|order|side by side)")


# ---------------------------------------------------------------- 02 Ex1: update memory
def um_right(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def um_if_not_mem(mem, h, mem_len):
    full = h if not mem else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def um_new_first(mem, h, mem_len):
    full = h if mem is None else torch.cat([h, mem], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def um_first_states(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, :mem_len].detach()


def um_h_only(mem, h, mem_len):
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def um_none_for_zero(mem, h, mem_len):
    if mem_len == 0:
        return None
    return um_right(mem, h, mem_len)


def um_cat_batch(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=0)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


RIGHT["um"] = (check_update_memory, um_right)
case("um_if_not_mem", check_update_memory, um_if_not_mem, r"(is None|if not|ambiguous)")
case("um_new_first", check_update_memory, um_new_first,
     r"(order|oldest|newest|\[mem, h\]|before)")
case("um_first_states", check_update_memory, um_first_states,
     r"(last|oldest|first|newest)")
case("um_h_only", check_update_memory, um_h_only,
     r"(old memory|previous memory|mem\b|dropp|ignor)")
case("um_none_for_zero", check_update_memory, um_none_for_zero,
     r"(None|empty|\[B, 0, D\]|tensor)")
case("um_cat_batch", check_update_memory, um_cat_batch,
     r"(dim 1|time|batch|dim=1|axis)")


# ---------------------------------------------------------------- 02 Ex2: segment mask
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= i - i % seg_len - mem_len)


def sm_no_multiply(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= i // seg_len - mem_len)


def sm_key_segment(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (j // seg_len) * seg_len - mem_len)


def sm_sliding(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (i - j <= mem_len)


def sm_mem_in_segments(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len * seg_len)


def sm_transposed(n, seg_len, mem_len):
    return sm_right(n, seg_len, mem_len).T.contiguous()


def sm_segment_only(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j // seg_len >= i // seg_len - int(mem_len > 0))


RIGHT["sm"] = (check_segment_mask, sm_right)
case("sm_no_multiply", check_segment_mask, sm_no_multiply,
     r"(start|multipl|seg_len|segment)")
case("sm_key_segment", check_segment_mask, sm_key_segment,
     r"(query'?s segment|key'?s segment|start\(i\)|start\(j\))")
case("sm_sliding_window", check_segment_mask, sm_sliding,
     r"(sliding|segment start|start\(i\)|start of)")
case("sm_mem_in_segments", check_segment_mask, sm_mem_in_segments,
     r"(mem_len.*(positions|segments)|seg_len \* mem_len|times)")
case("sm_transposed", check_segment_mask, sm_transposed,
     r"(transpos|rows?.*quer|quer.*rows?|future)")
case("sm_whole_prev_segment", check_segment_mask, sm_segment_only,
     r"(mem_len|whole previous segment|memory length)")


# ---------------------------------------------------------------- 02 Ex3: relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


RIGHT["rd"] = (check_relative_distances, rd_right)
case("rd_abs", check_relative_distances, lambda t, m: rd_right(t, m).abs(),
     r"(negative|abs|future|sign)")
case("rd_clamped", check_relative_distances, lambda t, m: rd_right(t, m).clamp(min=0),
     r"(negative|clamp|future)")
case("rd_float", check_relative_distances, lambda t, m: rd_right(t, m).float(),
     r"(long|int64|dtype|integer)")
case("rd_keys_only_memory", check_relative_distances,
     lambda t, m: m + torch.arange(t)[:, None] - torch.arange(m)[None, :],
     r"(S = m \+ t|m \+ t|segment keys|keys)")
case("rd_off_by_one", check_relative_distances,
     lambda t, m: m - 1 + torch.arange(t)[:, None] - torch.arange(m + t)[None, :],
     r"(off by one|\+ ?1|- ?1|itself|0 at)")
case("rd_key_minus_query", check_relative_distances,
     lambda t, m: torch.arange(m + t)[None, :] - torch.arange(t)[:, None] - m,
     r"(sign|j - i|negative|reversed|opposite)")


# ---------------------------------------------------------------- 02 Ex4: relative shift
def rs_right(x):
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):
    *lead, t, s = x.shape
    p = F.pad(x, (0, 1)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last(x):
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., :-1, :].reshape(*lead, t, s)


def rs_transpose(x):
    p = F.pad(x, (1, 0)).transpose(-2, -1)
    return p[..., 1:, :].transpose(-2, -1)


def rs_flip_first(x):
    return rs_right(x.flip(-1))


def rs_pad_row(x):
    *lead, t, s = x.shape
    p = F.pad(x, (0, 0, 1, 0)).reshape(*lead, s, t + 1)
    return p[..., 1:].reshape(*lead, t, s)


def rs_2d_only(x):
    t, s = x.shape[-2:]
    p = F.pad(x, (1, 0)).reshape(s + 1, t)
    return p[1:].reshape(t, s)


RIGHT["rs"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right, r"(left|right|pad)")
case("rs_drop_last_row", check_relative_shift, rs_drop_last, r"(first row|last row|drop)")
case("rs_transpose_not_reshape", check_relative_shift, rs_transpose,
     r"(transpose|reshape|not shifted|unchanged|no shift)")
case("rs_flip_first", check_relative_shift, rs_flip_first,
     r"(largest distance first|largest first|ascending|flip|reversed)")
case("rs_pad_row", check_relative_shift, rs_pad_row, r"(column|row|last axis|pad)")
case("rs_2d_only", check_relative_shift, rs_2d_only,
     r"(leading|batch|\[B, H|dimensions|\.\.\.)")


# ---------------------------------------------------------------- 02 Ex5: relative scores
def _rel(q, k, r, u, v, shift=True):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac + (relative_shift(bd) if shift else bd)


def rsc_right(q, k, r, u, v):
    return _rel(q, k, r, u, v) / math.sqrt(q.size(-1))


def rsc_uv_swapped(q, k, r, u, v):
    return _rel(q, k, r, v, u) / math.sqrt(q.size(-1))


def rsc_no_shift(q, k, r, u, v):
    return _rel(q, k, r, u, v, shift=False) / math.sqrt(q.size(-1))


def rsc_bias_on_keys(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    bd = torch.einsum("bhtd,shd->bhts", q, r + v)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_sqrt_model(q, k, r, u, v):
    return _rel(q, k, r, u, v) / math.sqrt(q.size(-1) * q.size(1))


def rsc_inplace(q, k, r, u, v):
    q += u[:, None]
    ac = q @ k.mT
    qv = q - u[:, None] + v[:, None]
    bd = torch.einsum("bhtd,shd->bhts", qv, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_shift_both(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return relative_shift(ac + bd) / math.sqrt(q.size(-1))


def rsc_r_view(q, k, r, u, v):
    s, h, dh = r.shape
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = (q + v[:, None]) @ r.reshape(h, s, dh).mT
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_no_biases(q, k, r, u, v):
    return _rel(q, k, r, torch.zeros_like(u), torch.zeros_like(v)) / math.sqrt(q.size(-1))


RIGHT["rsc"] = (check_relative_scores, rsc_right)
case("rsc_uv_swapped", check_relative_scores, rsc_uv_swapped, r"(u.*v|swap|content.*position)")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"(shift)")
case("rsc_bias_on_keys", check_relative_scores, rsc_bias_on_keys,
     r"(quer(y|ies).*bias|bias.*quer|q \+ u|keys)")
case("rsc_sqrt_model", check_relative_scores, rsc_sqrt_model,
     r"(sqrt|√|d_h|head width|scale)")
case("rsc_inplace_q", check_relative_scores, rsc_inplace,
     r"(in.place|changed.*q|modif|\+=)")
case("rsc_shift_both", check_relative_scores, rsc_shift_both,
     r"(shift).*(content|\(a\)|only|position)")
case("rsc_r_reshape", check_relative_scores, rsc_r_view,
     r"(\[S, H, D_h\]|reshape|permute|transpose|heads? axis|r\b)")
case("rsc_no_biases", check_relative_scores, rsc_no_biases,
     r"(u\b|v\b|bias|\(c\)|\(d\))")


# ---------------------------------------------------------------- second round: subtler slips
def _s(q, k):
    return q @ k.mT


case("aw_pow_precedence", check_attention_weights,
     lambda q, k: (_s(q, k) / q.size(-1) ** 1 / 2).softmax(-1),
     r"(precedence|\*\* ?1 ?/ ?2|d ?/ ?2|half|sqrt|√)")
case("aw_sum_all", check_attention_weights,
     lambda q, k: (lambda e: e / e.sum())((_s(q, k) / math.sqrt(q.size(-1))).exp()),
     r"(sum.*(all|every|dim)|whole|each row|row)")
case("aw_float32_cast", check_attention_weights,
     lambda q, k: (_s(q, k).float() / math.sqrt(q.size(-1))).softmax(-1),
     r"(dtype|float32|float64|cast)")


def att_sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def att_sqrt_v(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


def att_additive_bool(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + mask
    return s.softmax(-1) @ v


def att_2d_mask_only(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    w[:, ~mask.any(-1)] = 0.0
    return w @ v


def att_pow_precedence(q, k, v, mask=None):
    s = q @ k.mT / q.size(-1) ** 1 / 2
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("att_torch_sdpa", check_attention, att_sdpa, r"torch's fused attention is refused")
case("att_sqrt_values", check_attention, att_sqrt_v, r"(D_v|values|v\.size|q\.size\(-1\))")
case("att_additive_bool", check_attention, att_additive_bool,
     r"(added|additive|\+ mask|-inf|masked_fill)")
case("att_2d_mask_only", check_attention, att_2d_mask_only,
     r"(broadcast|\[B, T, S\]|batch|3-D|2-D)")
case("att_pow_precedence", check_attention, att_pow_precedence,
     r"(precedence|\*\* ?1 ?/ ?2|d ?/ ?2|half|sqrt|√)")

case("cm_uint8", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.uint8).tril(), r"(bool|dtype|uint8)")
case("cm_true_is_masked", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).triu(1),
     r"(invert|True = may attend|convention|masked|flip)")


def sp_wrong_transpose(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, -1).transpose(2, 3)


def mg_h_as_t(x):
    return x.transpose(1, 2).reshape(x.size(0), x.size(1), -1)


def mg_no_transpose(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


case("heads_split_transpose_2_3", check_heads, (sp_wrong_transpose, mg_right),
     r"(\[B, T, D_h, H\]|transpose\(1, 2\)|axes|head axis)")
case("heads_merge_size1_as_T", check_heads, (sp_right, mg_h_as_t),
     r"(size\(1\)|\[B, H, |H instead of T|size\(2\))")
case("heads_merge_no_transpose", check_heads, (sp_right, mg_no_transpose),
     r"(transpose|mixes|tokens)")


def mha_sqrt_dmodel(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.mT / math.sqrt(x.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(mg_right(s.softmax(-1) @ v))


def mha_tuple(x, mha, mask=None):
    return mha_right(x, mha, mask), None, None


def mha_heads_not_moved(x, mha, mask=None):
    b, t, d = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, -1) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.mT / math.sqrt(q.size(-1))
    y = s.softmax(-1) @ v
    return mha.out_proj(y.reshape(b, t, d))


def mha_merge_no_transpose(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(_attend(q, k, v, mask).reshape(x.shape))


case("mha_sqrt_d_model", check_multi_head_attention, mha_sqrt_dmodel,
     r"(sqrt|√|D_h|d_head|head width)")
case("mha_returns_tuple", check_multi_head_attention, mha_tuple,
     r"(tuple|Tensor|only the output)")
case("mha_heads_not_moved", check_multi_head_attention, mha_heads_not_moved,
     r"(transpose|heads.*tokens|across heads|\[B, H, T, D_h\]|head axis)")
case("mha_merge_no_transpose", check_multi_head_attention, mha_merge_no_transpose,
     r"(merge|transpose|mix)")


def um_neg_slice(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, -mem_len:].detach()


def um_no_none(mem, h, mem_len):
    full = torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def um_narrow(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full.narrow(1, full.size(1) - mem_len, mem_len).detach()


def um_len(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, max(0, len(full) - mem_len):].detach()


case("um_minus_zero_slice", check_update_memory, um_neg_slice, r"(mem_len = 0|-0|everything)")
case("um_mem_none_cat", check_update_memory, um_no_none, r"(None|first call)")
case("um_narrow_short", check_update_memory, um_narrow,
     r"(fewer|only \d+ states|min\(mem_len)")
case("um_len_is_batch", check_update_memory, um_len, r"(len|batch|size\(1\))")


def sm_true_div(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= i / seg_len * seg_len - mem_len)


def sm_or(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) | (j >= (i // seg_len) * seg_len - mem_len)


def sm_python_and(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) and (j >= (i // seg_len) * seg_len - mem_len)


case("sm_true_division", check_segment_mask, sm_true_div, r"(/|float division|//)")
case("sm_or_not_and", check_segment_mask, sm_or, r"(\||or|&|both)")
case("sm_python_and", check_segment_mask, sm_python_and, r"(\band\b|&|ambiguous)")

case("rd_transposed", check_relative_distances,
     lambda t, m: rd_right(t, m).T, r"(transpos|\[S, T\]|rows?.*quer)")
case("rd_int32", check_relative_distances,
     lambda t, m: rd_right(t, m).int(), r"(long|int64|dtype)")
case("rd_double_offset", check_relative_distances,
     lambda t, m: m + torch.arange(m, m + t)[:, None] - torch.arange(m + t)[None, :],
     r"(twice|double|m \+ i|offset)")


def rs_drop_first_col(x):
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., 1:].reshape(*lead, t, s)


def rs_gather(x):
    *lead, t, s = x.shape
    i = torch.arange(t, device=x.device)[:, None]  # where x is: a GPU's gather takes no CPU index
    j = torch.arange(s, device=x.device)[None, :]
    idx = (t - 1 - i + j).clamp(max=s - 1).expand(*lead, t, s)
    return x.gather(-1, idx).masked_fill(j > s - t + i, 0.0)


case("rs_drop_first_column", check_relative_shift, rs_drop_first_col,
     r"(first row|column|\[\.\.\., 1:, :\])")
RIGHT["rs_gather"] = (check_relative_shift, rs_gather)


def rsc_scale_one_term(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac + relative_shift(bd) / math.sqrt(q.size(-1))


def rsc_no_scale(q, k, r, u, v):
    return _rel(q, k, r, u, v)


def rsc_r_flipped(q, k, r, u, v):
    return _rel(q, k, r.flip(0), u, v) / math.sqrt(q.size(-1))


def rsc_u_none(q, k, r, u, v):
    ac = (q + u[None]) @ k.mT
    bd = torch.einsum("bhtd,shd->bhts", q + v[None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("rsc_scale_one_term", check_relative_scores, rsc_scale_one_term,
     r"(both|sum|precedence|only the position|whole)")
case("rsc_no_scale", check_relative_scores, rsc_no_scale, r"(sqrt|√|scale|divide)")
case("rsc_r_flipped", check_relative_scores, rsc_r_flipped,
     r"(flip|order|S ?- ?1|largest|ascending|reversed)")
case("rsc_u_none_axis", check_relative_scores, rsc_u_none,
     r"(u\[:, None\]|broadcast|axis|\[H, D_h\])")

# ---------------------------------------------------------------- third round
def aw_inplace(q, k):
    q /= math.sqrt(q.size(-1))
    return (q @ k.mT).softmax(-1)


def att_inplace_mask(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(mask.logical_not_(), float("-inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


def um_empty(mem, h, mem_len):
    if mem_len == 0:
        return torch.empty(0)
    return um_right(mem, h, mem_len)


def mha_out_before_merge(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mg_right(mha.out_proj(_attend(q, k, v, mask)))


def mha_mask_wrong_axis(x, mha, mask=None):
    q, k, v = (sp_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(_attend(q, k, v, None if mask is None else mask[:, None])))


case("aw_inplace_q", check_attention_weights, aw_inplace, r"(in.place|modif|/=)")
case("att_inplace_mask", check_attention, att_inplace_mask, r"(in.place|modif|logical_not_)")
case("um_empty_for_zero", check_update_memory, um_empty,
     r"(\[B, 0, D\]|empty tensor|torch\.empty|1-D)")
case("sm_float", check_segment_mask,
     lambda n, s, m: sm_right(n, s, m).float(), r"(bool|dtype)")
case("mha_out_proj_per_head", check_multi_head_attention, mha_out_before_merge,
     r"(out_proj.*(merg|after)|merge.*first|before)")
case("mha_mask_wrong_axis", check_multi_head_attention, mha_mask_wrong_axis,
     r"(mask.*(broadcast|\[T, T\]|axis)|mask\[:, None\])")

# ---------------------------------------------------------------- fourth round
def sp_reshape(x, n_heads):
    b, t, d = x.shape
    return x.reshape(b, n_heads, t, d // n_heads)


def mha_one_head(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return mha.out_proj(_attend(q, k, v, mask))


def um_cat_features(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=-1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def sm_args_swapped(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // mem_len) * mem_len - seg_len)


def rsc_u_plain(q, k, r, u, v):
    ac = (q + u) @ k.mT
    bd = torch.einsum("bhtd,shd->bhts", q + v, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def att_nan_to_num_before(q, k, v, mask=None):
    s = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        s = torch.nan_to_num(s.masked_fill(~mask, float("-inf")))
    return s.softmax(-1) @ v


case("heads_split_plain_reshape", check_heads, (sp_reshape, mg_right),
     r"(reshape|mixes|tokens|transpose)")
case("heads_merge_flatten_2", check_heads, (sp_right, lambda x: x.flatten(2)),
     r"(flatten|transpose|\[B, H, T \* D_h\]|tokens)")
case("mha_single_head", check_multi_head_attention, mha_one_head,
     r"(split|heads|one head|single head|n_heads)")
case("um_cat_features", check_update_memory, um_cat_features,
     r"(dim 1|dim=1|time|features|dim=-1|last axis)")
case("sm_args_swapped", check_segment_mask, sm_args_swapped,
     r"(swap|roles|divid\w* by mem_len|mem_len = 0.*divi)")
case("rd_key_minus_query_no_m", check_relative_distances,
     lambda t, m: torch.arange(m + t)[None, :] - torch.arange(t)[:, None],
     r"(sign|j - i|flipped|missing m|without m)")
case("rsc_u_no_axis", check_relative_scores, rsc_u_plain,
     r"(u\[:, None\]|broadcast|axis|\[H, D_h\])")
case("att_nan_to_num_before", check_attention, att_nan_to_num_before,
     r"(nan_to_num|all False|zeros|uniform|finite)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
