"""Learner trial 12a (issue 28): notebooks 01 (attention) and 02 (Transformer-XL), new slips."""

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
NEG = float("-inf")


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


# ---- 01 · Exercise 1, weights
def aw_right(q, k):
    return _scores(q, k).softmax(dim=-1)


def aw_pow_precedence(q, k):  # d ** 1/2 is d / 2
    return (q @ k.transpose(-2, -1) / q.size(-1) ** 1 / 2).softmax(-1)


def aw_exp_unstable(q, k):  # hand-written softmax without subtracting the max
    e = _scores(q, k).exp()
    return e / e.sum(-1, keepdim=True)


def aw_cosine(q, k):  # section 1's cosine, scaled
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return (qn @ kn.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def aw_inplace_scale(q, k):  # scales the caller's q
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(-1)


def aw_softmax_no_dim(q, k):  # F.softmax without dim picks dim 0 on 3-D
    return F.softmax(_scores(q, k))


def aw_scale_after_softmax(q, k):
    return (q @ k.transpose(-2, -1)).softmax(-1) / math.sqrt(q.size(-1))


RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_pow_precedence", check_attention_weights, aw_pow_precedence, r"\*\* binds tighter")
case("aw_exp_unstable", check_attention_weights, aw_exp_unstable, r"overflow")
case("aw_cosine", check_attention_weights, aw_cosine, r"normali[sz]ed q and k|cosine")
case("aw_inplace_scale", check_attention_weights, aw_inplace_scale, r"in place")
case("aw_softmax_no_dim", check_attention_weights, aw_softmax_no_dim, r"over the batch")
case("aw_scale_after_softmax", check_attention_weights, aw_scale_after_softmax,
     r"softmax\(dim=-1\) last|after the softmax")


# ---- 01 · Exercise 2, masked attention
def at_right(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, NEG)
    return torch.nan_to_num(s.softmax(-1)) @ v


def at_plus_inf(q, k, v, mask=None):  # forgot the minus sign of -inf
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("inf"))
    return torch.nan_to_num(s.softmax(-1)) @ v


def at_bool_index(q, k, v, mask=None):  # s[~mask] with a [T, S] mask on [B, T, S] scores
    s = _scores(q, k)
    if mask is not None:
        s[~mask] = NEG
    return torch.nan_to_num(s.softmax(-1)) @ v


def at_empty_rows_wrong_axis(q, k, v, mask=None):  # "row all False" tested over the queries
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = s.softmax(-1)
    if mask is not None:
        w = w * mask.any(-2, keepdim=True)
    return w @ v


def at_empty_rows_all(q, k, v, mask=None):  # .all where ~.any was meant
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(mask.all(-1, keepdim=True), 0.0)
    return w @ v


def at_truthy_mask(q, k, v, mask=None):
    s = _scores(q, k)
    if mask:
        s = s.masked_fill(~mask, NEG)
    return torch.nan_to_num(s.softmax(-1)) @ v


def at_returns_weights_too(q, k, v, mask=None):  # like labnn's own function
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, NEG)
    w = torch.nan_to_num(s.softmax(-1))
    return w @ v, w


RIGHT["attention"] = (check_attention, at_right)
case("at_plus_inf", check_attention, at_plus_inf, r"\+inf|float\('inf'\)|minus sign|-inf, not")
case("at_bool_index", check_attention, at_bool_index, r"s\[~mask\]|boolean ind|masked_fill")
case("at_empty_rows_wrong_axis", check_attention, at_empty_rows_wrong_axis,
     r"any\(-2|dim=-2|over the queries|column")
case("at_empty_rows_all", check_attention, at_empty_rows_all, r"mean of the values")
case("at_truthy_mask", check_attention, at_truthy_mask, r"is not None")
case("at_returns_weights_too", check_attention, at_returns_weights_too, r"returned tuple")


# ---- 01 · Exercise 3, causal mask
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_numpy(t):
    return np.tril(np.ones((t, t), dtype=bool))


def cm_batch_axis(t):  # "so it broadcasts over the batch"
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


def cm_geq(t):  # i and j swapped in the comparison
    i = torch.arange(t)
    return i[None, :] >= i[:, None]


def cm_tril_diag1(t):
    return torch.ones(t, t, dtype=torch.bool).tril(1)


def cm_not_triu(t):  # ~triu also drops the diagonal
    return ~torch.ones(t, t, dtype=torch.bool).triu()


RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_numpy", check_causal_mask, cm_numpy, r"torch\.Tensor.*ndarray")
case("cm_batch_axis", check_causal_mask, cm_batch_axis, r"extra axis")
case("cm_geq", check_causal_mask, cm_geq, r"transposed")
case("cm_tril_diag1", check_causal_mask, cm_tril_diag1, r"next token")
case("cm_not_triu", check_causal_mask, cm_not_triu, r"diagonal")


# ---- 01 · Exercise 4, heads
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_hard4(x, n_heads):  # the notebook's n_heads = 4 hard-coded
    b, t, d = x.shape
    return x.view(b, t, 4, d // 4).transpose(1, 2)


def merge_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def split_interleaved(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def merge_cat_dim1(x):
    return torch.cat(x.unbind(1), dim=1)


def split_unflatten_swapped(x, n_heads):
    return x.unflatten(-1, (-1, n_heads)).transpose(1, 2)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("heads_hard_coded_4", check_heads, (split_hard4, merge_right), r"n_heads|hard")
case("heads_merge_view", check_heads, (split_right, merge_view), r"not contiguous")
case("heads_interleaved_pair", check_heads, (split_interleaved, merge_interleaved),
     r"interleaves")
case("heads_merge_cat_dim1", check_heads, (split_right, merge_cat_dim1),
     r"along the positions")
case("heads_unflatten_swapped", check_heads, (split_unflatten_swapped, merge_right),
     r"swapped")


# ---- 01 · Exercise 5, MHA
def _mha(x, mha, mask, n_heads, qkv=None):
    q, k, v = (mha.qkv(x) if qkv is None else qkv).chunk(3, dim=-1)
    heads = [split_right(t, n_heads) for t in (q, k, v)]
    return mha.out_proj(merge_right(at_right(*heads, mask)))


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask, mha.n_heads)


def mha_chunk_no_dim(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3)
    heads = [split_right(t, mha.n_heads) for t in (q, k, v)]
    return mha.out_proj(merge_right(at_right(*heads, mask)))


def mha_no_qkv_bias(x, mha, mask=None):
    return _mha(x, mha, mask, mha.n_heads, qkv=x @ mha.qkv.weight.T)


def mha_per_head_layout(x, mha, mask=None):  # [H, 3, D_h] layout of other codebases
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = mha.qkv(x).view(b, t, h, 3, d // h).permute(3, 0, 2, 1, 4)
    return mha.out_proj(merge_right(at_right(q, k, v, mask)))


def mha_hard4(x, mha, mask=None):  # n_heads = 4 as in the notebook's cell
    return _mha(x, mha, mask, 4)


def mha_mask_unsqueezed(x, mha, mask=None):  # mask[:, None] "for the heads"
    return _mha(x, mha, None if mask is None else mask[:, None], mha.n_heads)


def mha_out_untransposed(x, mha, mask=None):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    heads = [split_right(t, mha.n_heads) for t in (q, k, v)]
    y = merge_right(at_right(*heads, mask))
    return y @ mha.out_proj.weight + mha.out_proj.bias


RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
case("mha_chunk_no_dim", check_multi_head_attention, mha_chunk_no_dim, r"along the batch")
case("mha_no_qkv_bias", check_multi_head_attention, mha_no_qkv_bias, r"bias .*missing")
case("mha_per_head_layout", check_multi_head_attention, mha_per_head_layout, r"cut per head")
case("mha_hard4", check_multi_head_attention, mha_hard4, r"n_heads|hard")
case("mha_mask_unsqueezed", check_multi_head_attention, mha_mask_unsqueezed,
     r"mask\[:, None")
case("mha_out_untransposed", check_multi_head_attention, mha_out_untransposed,
     r"untransposed")


# ---- 02 · Exercise 1, memory
def um_right(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach()


def um_len_of_batch(mem, h, mem_len):  # len(c) is B, not the time axis
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, len(c) - mem_len:].detach() if mem_len else c[:, :0].detach()


def um_narrow(mem, h, mem_len):  # narrow with length mem_len even when fewer states
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c.narrow(1, max(0, c.size(1) - mem_len), mem_len).detach()


def um_none_for_zero(mem, h, mem_len):
    if mem_len == 0:
        return None
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, -mem_len:].detach()


def um_detach_inplace(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach_()


def um_zeros_init(mem, h, mem_len):  # first memory = mem_len zero states
    if mem is None:
        mem = h.new_zeros(h.size(0), mem_len, h.size(2))
    c = torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach()


def um_truthy(mem, h, mem_len):
    c = h if not mem else torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach()


RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_len_of_batch", check_update_memory, um_len_of_batch, r"len\(|batch")
case("um_narrow", check_update_memory, um_narrow, r"narrow|fewer states|min\(mem_len")
case("um_none_for_zero", check_update_memory, um_none_for_zero, r"returned NoneType")
case("um_detach_inplace", check_update_memory, um_detach_inplace, r"detach\(\) instead|detach_")
case("um_zeros_init", check_update_memory, um_zeros_init, r"not mem_len zeros")
case("um_truthy", check_update_memory, um_truthy, r"mem is None")


# ---- 02 · Exercise 2, segment mask
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def seg_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j >= (i // seg_len) * seg_len - mem_len) & (j <= i)


def seg_number_as_start(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j >= i // seg_len - mem_len) & (j <= i)


def seg_fixed_window(n, seg_len, mem_len):  # "context = segment + memory" window
    i, j = _ij(n)
    return (i - j < seg_len + mem_len) & (j <= i)


def seg_ij_swapped(n, seg_len, mem_len):
    j, i = _ij(n)
    return (j >= (i // seg_len) * seg_len - mem_len) & (j <= i)


def seg_key_segment(n, seg_len, mem_len):
    i, j = _ij(n)
    return ((j // seg_len) * seg_len >= (i // seg_len) * seg_len - mem_len) & (j <= i)


def seg_whole_segment(n, seg_len, mem_len):  # sees its whole segment, future included
    i, j = _ij(n)
    return (j >= (i // seg_len) * seg_len - mem_len) & (j < (i // seg_len + 1) * seg_len)


RIGHT["segment_mask"] = (check_segment_mask, seg_right)
case("seg_number_as_start", check_segment_mask, seg_number_as_start, r"segment's number")
case("seg_fixed_window", check_segment_mask, seg_fixed_window,
     r"sliding window|seg_len \+ mem_len|fixed")
case("seg_ij_swapped", check_segment_mask, seg_ij_swapped, r"transposed")
case("seg_key_segment", check_segment_mask, seg_key_segment, r"key's segment start")
case("seg_whole_segment", check_segment_mask, seg_whole_segment, r"future key")


# ---- 02 · Exercise 3, distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None]


def rd_minus_m(t, m):  # i - j - m: the memory taken off instead of added
    return torch.arange(t)[:, None] - torch.arange(m + t)[None] - m


def rd_clamped(t, m):  # "a distance cannot be negative"
    return rd_right(t, m).clamp(min=0)


def rd_one_based(t, m):
    return m + torch.arange(1, t + 1)[:, None] - torch.arange(m + t)[None]


def rd_segment_keys_only(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(t)[None]


def rd_int32(t, m):
    return rd_right(t, m).int()


RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_minus_m", check_relative_distances, rd_minus_m, r"- m|minus m|add(ed)? m|\+ m")
case("rd_clamped", check_relative_distances, rd_clamped, r"get 0")
case("rd_one_based", check_relative_distances, rd_one_based, r"off by one")
case("rd_segment_keys_only", check_relative_distances, rd_segment_keys_only, r"memory")
case("rd_int32", check_relative_distances, rd_int32, r"int32")


# ---- 02 · Exercise 4, shift
def rs_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last_row(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_view_t1_s(x):  # [T + 1, S] where the trick reads [S + 1, T]
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).view(*lead, t + 1, s)[..., 1:, :].reshape(*lead, t, s)


def rs_flip(x):
    return x.flip(-1)


def rs_loop_too_far(x):  # slides row i by T - i
    t, s = x.shape[-2:]
    out = torch.zeros_like(x)
    for i in range(t):
        out[..., i, : s - (t - i)] = x[..., i, t - i:]
    return out


def rs_gather_off(x):
    t, s = x.shape[-2:]
    i, j = torch.arange(t)[:, None], torch.arange(s)[None]
    return x.gather(-1, (t - i + j).clamp(max=s - 1).expand_as(x))


RIGHT["relative_shift"] = (check_relative_shift, rs_right)
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row, r"last row")
case("rs_view_t1_s", check_relative_shift, rs_view_t1_s, r"S \+ 1, T|s \+ 1, t|T \+ 1")
case("rs_flip", check_relative_shift, rs_flip, r"flipped")
case("rs_loop_too_far", check_relative_shift, rs_loop_too_far, r"one place too far")
case("rs_gather_off", check_relative_shift, rs_gather_off, r"1 too far right")


# ---- 02 · Exercise 5, scores
def _ac(q, k, u):
    return torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)


def _bd(q, r, v):
    return torch.einsum("bhtd,shd->bhts", q + v[:, None], r)


def rsc_right(q, k, r, u, v):
    return (_ac(q, k, u) + relative_shift(_bd(q, r, v))) / math.sqrt(q.size(-1))


def rsc_shift_sum(q, k, r, u, v):
    return relative_shift(_ac(q, k, u) + _bd(q, r, v)) / math.sqrt(q.size(-1))


def rsc_scale_content_only(q, k, r, u, v):
    return _ac(q, k, u) / math.sqrt(q.size(-1)) + relative_shift(_bd(q, r, v))


def rsc_r_reshaped_T(q, k, r, u, v):  # r^T per head with reshape instead of transpose
    s, h, dh = r.shape
    rt = r.permute(1, 0, 2).reshape(h, dh, s)
    return (_ac(q, k, u) + relative_shift((q + v[:, None]) @ rt)) / math.sqrt(q.size(-1))


def rsc_v_term_unshifted(q, k, r, u, v):  # (d) added as if it did not depend on distance
    b = torch.einsum("bhtd,shd->bhts", q, r)
    d = torch.einsum("hd,shd->hs", v, r)[None, :, None]
    return (_ac(q, k, u) + relative_shift(b) + d) / math.sqrt(q.size(-1))


def rsc_u_no_axis(q, k, r, u, v):
    ac = (q + u) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_r_flipped(q, k, r, u, v):
    return (_ac(q, k, u) + relative_shift(_bd(q, r.flip(0), v))) / math.sqrt(q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, rsc_right)
case("rsc_shift_sum", check_relative_scores, rsc_shift_sum, r"shifted the sum")
case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"only the content term")
case("rsc_r_reshaped_T", check_relative_scores, rsc_r_reshaped_T, r"reshape|transpose")
case("rsc_v_term_unshifted", check_relative_scores, rsc_v_term_unshifted,
     r"\(d\).*(shift|distance)|v.*shift|position bias.*shift")
case("rsc_u_no_axis", check_relative_scores, rsc_u_no_axis, r"u\[:, None\]")
case("rsc_r_flipped", check_relative_scores, rsc_r_flipped, r"reversed")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
