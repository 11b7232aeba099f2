"""Learner trial 16a (issue 28): notebooks 01_attention and 02_transformer_xl, new slips."""

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
from labnn.xl.relative_attention import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 01 Ex1: attention weights
def _scores(q, k):
    return q @ k.transpose(-2, -1)


def aw_right(q, k):
    return (_scores(q, k) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_scale_after_softmax(q, k):  # order of operations: scale the weights, not the scores
    return _scores(q, k).softmax(dim=-1) / math.sqrt(q.size(-1))


def aw_scale_q_and_k(q, k):  # "scale q and k each by sqrt(d)": divides the scores by d
    d = q.size(-1)
    return ((q / math.sqrt(d)) @ (k / math.sqrt(d)).transpose(-2, -1)).softmax(-1)


def aw_sum_all(q, k):  # hand-written softmax normalised over every entry (no dim)
    e = (_scores(q, k) / math.sqrt(q.size(-1))).exp()
    return e / e.sum()


RIGHT["aw"] = (check_attention_weights, aw_right)
case("aw_scale_after_softmax", check_attention_weights, aw_scale_after_softmax,
     r"(after the softmax|before the softmax|rows? .*sum|sum to 1)")
case("aw_scale_q_and_k", check_attention_weights, aw_scale_q_and_k,
     r"(divided (the scores )?by d\b|by d instead|sqrt\(d\) twice|√d twice"
     r"|too (small|flat))")
case("aw_sum_all", check_attention_weights, aw_sum_all,
     r"(over (all|every) (entr|element)|whole tensor|without (a )?dim|each row separately"
     r"|normali[sz]ed over)")


# ---------------------------------------------------------------- 01 Ex2: attention with a mask
def at_right(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def at_mask_after_softmax(q, k, v, mask=None):  # zero the weights after the softmax
    w = (_scores(q, k) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v


def at_big_negative(q, k, v, mask=None):  # -1e9 instead of -inf: an all-False row goes uniform
    s = _scores(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def at_scale_q_in_place(q, k, v, mask=None):  # in-place: changes the caller's q
    q /= math.sqrt(q.size(-1))
    return _at_scaled(q, k, v, mask)


def _at_scaled(q, k, v, mask):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


RIGHT["at"] = (check_attention, at_right)
case("at_mask_after_softmax", check_attention, at_mask_after_softmax,
     r"(after the softmax|before the softmax|sum to 1|renormali)")
case("at_big_negative", check_attention, at_big_negative,
     r"(all[- ]False|no True|nothing allowed|-1e9|uniform|zeros)")
case("at_scale_q_in_place", check_attention, at_scale_q_in_place,
     r"(in[- ]place|changed? (your|the caller|its) (input|q)|modif|mutat)")


# ---------------------------------------------------------------- 01 Ex3: causal mask
def cm_right(t):
    return torch.arange(t)[:, None] >= torch.arange(t)[None, :]


RIGHT["cm"] = (check_causal_mask, cm_right)
case("cm_batch_dim", check_causal_mask, lambda t: cm_right(t)[None],
     r"(\[t, t\]|extra (axis|dim)|batch|unsqueeze|\[1, )")
case("cm_blocked_convention", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).triu(1),
     r"(True = may attend|True (means|=) (masked|blocked)|invert|flip|negat|~)")
case("cm_additive_float", check_causal_mask,
     lambda t: torch.full((t, t), float("-inf")).triu(1),
     r"(additive|-inf|float|bool)")


# ---------------------------------------------------------------- 01 Ex4: split and merge heads
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_interleaved(x, n_heads):  # head h gets features h, h+H, h+2H, ...
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):  # its exact inverse, so the round trip is fine
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def merge_dh_major(x):  # merge puts D_h before H: features of the heads interleaved
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_heads_first(x, n_heads):  # stack of chunks on dim 0: [H, B, T, D_h]
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def merge_heads_first(x):
    return torch.cat(list(x), dim=-1)


RIGHT["hs"] = (check_heads, split_right, merge_right)
case("hs_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"(interleav|features? h\*?D_h|h, h ?\+ ?H|strided|slice|owns? features)")
case("hs_merge_dh_major", check_heads, (split_right, merge_dh_major),
     r"merge.*(order|interleav|D_h before H|transpose|permute|inverse)")
case("hs_heads_before_batch", check_heads, (split_heads_first, merge_heads_first),
     r"(\[H, B, T, D_h\]|head axis|heads? (before|first)|batch (axis|first))")


# ---------------------------------------------------------------- 01 Ex5: multi-head attention
def _mha(x, mha, mask, qkv_split, out):
    q, k, v = qkv_split(mha.qkv(x), mha.n_heads)
    dh = q.size(-1)
    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:  # a query that may attend nothing gets zeros
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return out(merge_right(w @ v), mha)


def _split_chunks(qkv, h):
    return (split_right(z, h) for z in qkv.chunk(3, dim=-1))


def _split_per_head(qkv, h):  # assumes [q_h k_h v_h] per head (Megatron-style layout)
    b, t, d3 = qkv.shape
    return qkv.view(b, t, h, 3, d3 // (3 * h)).permute(3, 0, 2, 1, 4).unbind(0)


def mh_right(x, mha, mask=None):
    return _mha(x, mha, mask, _split_chunks, lambda m, a: a.out_proj(m))


def mh_causal_when_none(x, mha, mask=None):  # misreading: None means "causal"
    if mask is None:
        t = x.size(1)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    return mh_right(x, mha, mask)


def mh_outproj_no_T(x, mha, mask=None):  # W without .T: [D, D] so no shape error
    return _mha(x, mha, mask, _split_chunks,
                lambda m, a: m @ a.out_proj.weight + a.out_proj.bias)


RIGHT["mh"] = (check_multi_head_attention, mh_right)
case("mh_qkv_per_head", check_multi_head_attention,
     lambda x, mha, mask=None: _mha(x, mha, mask, _split_per_head, lambda m, a: a.out_proj(m)),
     r"(chunk|side by side|q, k, v|Q, K, V|qkv)")
case("mh_causal_when_none", check_multi_head_attention, mh_causal_when_none,
     r"(mask=None|no mask|None means|causal mask (added|when))")
case("mh_outproj_no_T", check_multi_head_attention, mh_outproj_no_T,
     r"(out_proj|transpos|\.T\b|W\^?O)")


# ---------------------------------------------------------------- 02 Ex1: update memory
def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def um_keep_oldest(mem, h, mem_len):  # keeps the first mem_len states, not the last
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_h_only(mem, h, mem_len):  # drops the old memory: right whenever T >= mem_len
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def um_cat_order(mem, h, mem_len):  # new states put before the old memory
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


RIGHT["um"] = (check_update_memory, um_right)
case("um_keep_oldest", check_update_memory, um_keep_oldest,
     r"(oldest|first mem_len|last mem_len|newest|front)")
case("um_h_only", check_update_memory, um_h_only,
     r"(old memory|previous memory|mem (is )?(dropped|ignored|lost)|concat|cat)")
case("um_cat_order", check_update_memory, um_cat_order,
     r"(order|\[mem, h\]|before|after|concat)")


# ---------------------------------------------------------------- 02 Ex2: segment mask
def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_key_segment(n, seg_len, mem_len):  # start(j) compared: right when seg_len | mem_len
    i, j = _ij(n)
    return (j <= i) & ((j // seg_len) * seg_len >= (i // seg_len) * seg_len - mem_len)


def sm_start_times_mem(n, seg_len, mem_len):  # start(i) = (i // seg_len) * mem_len
    i, j = _ij(n)
    return (j <= i) & (j >= (i // seg_len) * mem_len - mem_len)


def sm_no_causal(n, seg_len, mem_len):  # forgets j <= i: sees the rest of its segment
    i, j = _ij(n)
    return (j < (i // seg_len + 1) * seg_len) & (j >= (i // seg_len) * seg_len - mem_len)


RIGHT["sm"] = (check_segment_mask, sm_right)
case("sm_key_segment", check_segment_mask, sm_key_segment,
     r"(start\(j\)|key'?s segment|whole segments?|segment of the key)")
case("sm_start_times_mem", check_segment_mask, sm_start_times_mem,
     r"(start\(i\) ?=|\* ?seg_len|multiple of seg_len|mem_len instead of seg_len)")
case("sm_no_causal", check_segment_mask, sm_no_causal,
     r"(future|j <= i|causal|after (the|its) query)")


# ---------------------------------------------------------------- 02 Ex3: relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


RIGHT["rd"] = (check_relative_distances, rd_right)
case("rd_abs", check_relative_distances, lambda t, m: rd_right(t, m).abs(),
     r"(negative|future|abs|sign)")
case("rd_clamp0", check_relative_distances, lambda t, m: rd_right(t, m).clamp(min=0),
     r"(negative|future|clamp|sign)")
case("rd_no_m", check_relative_distances,
     lambda t, m: torch.arange(t)[:, None] - torch.arange(m + t)[None, :],
     r"(m \+ i|M \+ i|memory|offset|missing m|forg[eo]t.*m\b)")


# ---------------------------------------------------------------- 02 Ex4: relative shift
def rs_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last_row(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_transpose_for_reshape(x):  # "read as [S+1, T]" done with a transpose
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(*lead, t, s)


RIGHT["rs"] = (check_relative_shift, rs_right)
case("rs_drop_last_row", check_relative_shift, rs_drop_last_row,
     r"(first row|last row|drop)")
case("rs_transpose_for_reshape", check_relative_shift, rs_transpose_for_reshape,
     r"(transpose|reshape|read .*as|not a transpose)")
case("rs_flip", check_relative_shift, lambda x: x.flip(-1),
     r"(flip|revers|per-row|slide|shift)")


# ---------------------------------------------------------------- 02 Ex5: relative scores
def _rel(q, k, r, u_c, v_p, r_einsum="bhtd,shd->bhts", shift_all=False):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u_c[:, None], k)
    bd = torch.einsum(r_einsum, q + v_p[:, None], r)
    out = relative_shift(ac + bd) if shift_all else ac + relative_shift(bd)
    return out / math.sqrt(q.size(-1))


def rsc_right(q, k, r, u, v):
    return _rel(q, k, r, u, v)


def rsc_heads_mixed(q, k, r, u, v):  # r [S, H, D_h] reshaped (not permuted) to [H, S, D_h]
    s, h, dh = r.shape
    return _rel(q, k, r.reshape(h, s, dh), u, v, r_einsum="bhtd,hsd->bhts")


RIGHT["rsc"] = (check_relative_scores, rsc_right)
case("rsc_biases_swapped", check_relative_scores,
     lambda q, k, r, u, v: _rel(q, k, r, v, u),
     r"(u and v|swap|content bias|position bias|u .*k|v .*r)")
case("rsc_shift_both", check_relative_scores,
     lambda q, k, r, u, v: _rel(q, k, r, u, v, shift_all=True),
     r"(content.*shift|shift.*(only|both|content)|\(a\) ?\+ ?\(c\))")
case("rsc_heads_mixed", check_relative_scores, rsc_heads_mixed,
     r"(head|reshape|permute|\[S, H, D_h\])")

# ================================================================ second round of slips
def aw_keys_of_all_batches(q, k):  # einsum with a different batch letter for k: sums batches
    return (torch.einsum("btd,csd->bts", q, k) / math.sqrt(q.size(-1))).softmax(-1)


case("aw_keys_of_all_batches", check_attention_weights, aw_keys_of_all_batches,
     r"(batch (entries|axis)|other batch|across (the )?batch|einsum.*letter|sum(s|med)? over b)")
case("aw_float64", check_attention_weights, lambda q, k: aw_right(q.double(), k.double()),
     r"(float64|dtype|double)")


def at_fill_zero(q, k, v, mask=None):  # fills masked scores with 0 instead of -inf
    s = _scores(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    return s.softmax(-1) @ v


def at_renormalise(q, k, v, mask=None):  # softmax, zero, renormalise: all-False rows NaN
    w = (_scores(q, k) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True)
    return w @ v


case("at_fill_zero", check_attention, at_fill_zero,
     r"(fill(ed)? .*(0|zero)|-inf|0 instead|score of 0)")
case("at_renormalise", check_attention, at_renormalise,
     r"(all[- ]False|no True|nothing allowed|NaN|0/0)")
case("cm_uint8", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.uint8).tril(),
     r"(uint8|dtype|bool)")
case("cm_numpy", check_causal_mask, lambda t: np.tril(np.ones((t, t), dtype=bool)),
     r"(numpy|ndarray|torch\.tensor|torch tensor|Tensor)")


def split_dh_as_h(x, n_heads):  # confuses H and D_h in the view
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).transpose(1, 2)


def merge_view(x):  # .view on the transposed tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


case("hs_dh_as_h", check_heads, (split_dh_as_h, merge_right),
     r"(D_h.*H|H.*D_h|n_heads|swap)")
case("hs_merge_view", check_heads, (split_right, merge_view),
     r"(view|contiguous|reshape)")


def mh_qk_swapped(x, mha, mask=None):  # k, q, v = ... chunk: the scores come out transposed
    def split(qkv, h):
        k, q, v = (split_right(z, h) for z in qkv.chunk(3, dim=-1))
        return q, k, v
    return _mha(x, mha, mask, split, lambda m, a: a.out_proj(m))


case("mh_qk_swapped", check_multi_head_attention, mh_qk_swapped,
     r"(q and k|k and q|swap|wrong order|order of .*chunk|queries .*keys)")
case("mh_no_out_bias", check_multi_head_attention,
     lambda x, mha, mask=None: _mha(x, mha, mask, _split_chunks,
                                    lambda m, a: m @ a.out_proj.weight.T),
     r"(bias|out_proj)")


def um_none_untruncated(mem, h, mem_len):  # no memory yet: returns h whole
    if mem is None:
        return h.detach()
    return um_right(mem, h, mem_len)


def um_cat_features(mem, h, mem_len):  # cat along the last axis (features), not time
    x = h if mem is None else torch.cat([mem, h], dim=-1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


case("um_none_untruncated", check_update_memory, um_none_untruncated,
     r"(mem is None|None|no memory yet|first segment)")
case("um_cat_features", check_update_memory, um_cat_features,
     r"(dim=1|time|dim=-1|features|axis)")


def sm_or(n, seg_len, mem_len):  # | instead of &
    i, j = _ij(n)
    return (j <= i) | (j >= (i // seg_len) * seg_len - mem_len)


case("sm_or", check_segment_mask, sm_or, r"(\||&|both|and)")
case("sm_int", check_segment_mask, lambda n, s, m: sm_right(n, s, m).int(),
     r"(bool|dtype|int32)")
case("rd_int32", check_relative_distances, lambda t, m: rd_right(t, m).int(),
     r"(int32|LongTensor|int64|long|dtype)")
case("rd_no_memory_keys", check_relative_distances,
     lambda t, m: m + torch.arange(t)[:, None] - torch.arange(t)[None, :],
     r"(S = m ?\+ ?t|m \+ t keys|memory keys|\[T, S\])")


def rs_pad_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (0, 1)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_2d_only(x):  # written for [T, S]: the leading dims are lost
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).reshape(s + 1, -1)[1:].reshape(x.shape)


case("rs_pad_right", check_relative_shift, rs_pad_right, r"(left|right|pad)")
case("rs_2d_only", check_relative_shift, rs_2d_only,
     r"(leading|\.\.\.|batch|\[B, H|lead)")


def rsc_inplace_q(q, k, r, u, v):  # q += ... changes the caller's q
    q0 = q.clone()
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q0 + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_scale_content_only(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k) / math.sqrt(q.size(-1))
    return ac + relative_shift(torch.einsum("bhtd,shd->bhts", q + v[:, None], r))


case("rsc_inplace_q", check_relative_scores, rsc_inplace_q,
     r"(in[- ]place|modif|mutat|caller)")
case("rsc_scale_content_only", check_relative_scores, rsc_scale_content_only,
     r"(sqrt|√|scale|divide).*(position|both|sum|\(b\))|(position|both).*(sqrt|scale|divid)")


case("rsc_r_flipped", check_relative_scores, lambda q, k, r, u, v: _rel(q, k, r.flip(0), u, v),
     r"(revers|flip|largest first|S - 1)")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
