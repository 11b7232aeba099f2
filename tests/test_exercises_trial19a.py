"""Learner trial 19 (a): notebooks 01_attention and 02_transformer_xl, new wrong answers."""

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
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


def scores_of(q, k):
    return q @ k.transpose(-2, -1)


# --- 01 Exercise 1: attention weights ---------------------------------------------------

def aw_right(q, k):
    return (scores_of(q, k) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_div_d(q, k):  # divides by d, not sqrt(d)
    return (scores_of(q, k) / q.size(-1)).softmax(dim=-1)


def aw_softmax_first(q, k):  # scales after the softmax
    return scores_of(q, k).softmax(dim=-1) / math.sqrt(q.size(-1))


def aw_mul(q, k):  # multiplies by sqrt(d)
    return (scores_of(q, k) * math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_precedence(q, k):  # d ** 1/2 is d / 2
    return (scores_of(q, k) / q.size(-1) ** 1/2).softmax(dim=-1)


def aw_inplace(q, k):  # scales the caller's q in place
    q /= math.sqrt(q.size(-1))
    return scores_of(q, k).softmax(dim=-1)


def aw_einsum_keys_first(q, k):  # einsum output letters in the wrong order: [B, S, T]
    return torch.einsum("btd,bsd->bst", q, k).div(math.sqrt(q.size(-1))).softmax(dim=-1)


RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_div_d", check_attention_weights, aw_div_d, r"divided .* by d\b.*sqrt")
case("aw_softmax_first", check_attention_weights, aw_softmax_first, r"softmax.*last")
case("aw_mul", check_attention_weights, aw_mul, r"multiplied .*sqrt\(d\).*divide")
case("aw_precedence", check_attention_weights, aw_precedence, r"\*\* binds tighter|2d")
case("aw_inplace", check_attention_weights, aw_inplace, r"in place")
case("aw_einsum_keys_first", check_attention_weights, aw_einsum_keys_first,
     r"\[B, S, T\].*rows must be queries")

def aw_scale_both(q, k):  # scales q's scores and the keys: divides by d overall
    k = k / math.sqrt(k.size(-1))
    return (scores_of(q, k) / math.sqrt(q.size(-1))).softmax(dim=-1)


case("aw_scale_both", check_attention_weights, aw_scale_both, r"divided .* by d\b")


# --- 01 Exercise 2: attention with a mask -----------------------------------------------

def at_right(q, k, v, mask=None):
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def at_mask_after_softmax(q, k, v, mask=None):  # weights * mask, not renormalised
    w = (scores_of(q, k) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def at_big_negative(q, k, v, mask=None):  # -1e9: an all-False row gets uniform weights
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def at_any_over_queries(q, k, v, mask=None):  # "no key allowed" computed over queries
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    return w @ v


def at_additive_bool(q, k, v, mask=None):  # adds the bool mask like an additive mask
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + mask
    return s.softmax(dim=-1) @ v


def at_row_axis_in_front(q, k, v, mask=None):  # any(-1)[:, None]: right for [T, S] only
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1)[:, None], 0.0)
    return w @ v


RIGHT["attention"] = (check_attention, at_right)
case("at_mask_after_softmax", check_attention, at_mask_after_softmax,
     r"after the softmax.*before the softmax")
case("at_big_negative", check_attention, at_big_negative, r"large negative fill.*zeros")
case("at_any_over_queries", check_attention, at_any_over_queries, r"dim=-2")
case("at_additive_bool", check_attention, at_additive_bool, r"added the boolean mask")
case("at_row_axis_in_front", check_attention, at_row_axis_in_front,
     r"keepdim|\[:, None\]|axis of the keys|last axis")


# --- 01 Exercise 3: causal mask ---------------------------------------------------------

def cm_right(t):
    return torch.arange(t)[:, None] >= torch.arange(t)[None, :]


def cm_strict(t):  # excludes the diagonal
    return torch.ones(t, t, dtype=torch.bool).tril(-1)


def cm_fixed_size(t):  # right only for t == 8
    return torch.ones(8, 8, dtype=torch.bool).tril()


def cm_batch_axis(t):  # an extra leading axis
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


def cm_uint8(t):  # a byte mask, not bool
    return torch.ones(t, t).tril().to(torch.uint8)


RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_strict", check_causal_mask, cm_strict, r"diagonal.*itself")
case("cm_fixed_size", check_causal_mask, cm_fixed_size, r"fixed size")
case("cm_batch_axis", check_causal_mask, cm_batch_axis, r"extra axis")
case("cm_uint8", check_causal_mask, cm_uint8, r"uint8.*bool")

def cm_next_token(t):  # tril(1): sees the next token
    return torch.ones(t, t, dtype=torch.bool).tril(1)


case("cm_next_token", check_causal_mask, cm_next_token, r"i \+ 1.*j <= i")


# --- 01 Exercise 4: split and merge heads -----------------------------------------------

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


def split_no_transpose(x, n_heads):  # stops at [B, T, H, D_h]
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads)


def merge_no_transpose(x):
    b, t, h, dh = x.shape
    return x.reshape(b, t, h * dh)


def split_swap_last_two(x, n_heads):  # transposes the last two axes
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(2, 3)


def merge_unbind_tokens(x):  # unbinds the token axis instead of the head axis
    return torch.cat(x.unbind(2), dim=-1)


def merge_view(x):  # view on a non-contiguous tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("heads_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"interleaves the heads")
case("heads_no_transpose", check_heads, (split_no_transpose, merge_no_transpose),
     r"\[B, T, H, D_h\].*transpose\(1, 2\)")
case("heads_merge_dmajor", check_heads, (split_right, merge_interleaved),
     r"merge_heads.*interleaves")
case("heads_split_swap_last_two", check_heads, (split_swap_last_two, merge_right),
     r"\[B, T, D_h, H\]")
case("heads_merge_unbind_tokens", check_heads, (split_right, merge_unbind_tokens),
     r"\[B, H, T\*D_h\].*transpose\(1, 2\)")
case("heads_merge_view", check_heads, (split_right, merge_view), r"contiguous.*reshape")


# --- 01 Exercise 5: multi-head attention ------------------------------------------------

def make_mha(full_width_scale=False, swap_qk=False, no_out_bias=False,
             zero_after_out_proj=False, causal_default=False, no_qkv_bias=False):
    def multi_head_attention(x, mha, mask=None):
        h = mha.n_heads
        t = x.size(1)
        if causal_default and mask is None:
            mask = torch.ones(t, t, dtype=torch.bool).tril()
        proj = x @ mha.qkv.weight.T if no_qkv_bias else mha.qkv(x)
        q, k, v = proj.chunk(3, dim=-1)
        if swap_qk:
            q, k = k, q
        q, k, v = (split_right(z, h) for z in (q, k, v))
        d = x.size(-1) if full_width_scale else q.size(-1)
        s = scores_of(q, k) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(dim=-1)
        if mask is not None and not zero_after_out_proj:
            w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        y = merge_right(w @ v)
        y = y @ mha.out_proj.weight.T if no_out_bias else mha.out_proj(y)
        if zero_after_out_proj and mask is not None:  # zeros the final output's rows
            y = y.masked_fill(~mask.any(dim=-1)[None, :, None], 0.0)
        return y
    return multi_head_attention


RIGHT["multi_head_attention"] = (check_multi_head_attention, make_mha())
case("mha_scale_d_model", check_multi_head_attention, make_mha(full_width_scale=True),
     r"sqrt\(d_model\).*sqrt\(d_head\)")
case("mha_swap_qk", check_multi_head_attention, make_mha(swap_qk=True), r"wrong order")
case("mha_no_out_bias", check_multi_head_attention, make_mha(no_out_bias=True),
     r"bias of the output projection")
case("mha_no_qkv_bias", check_multi_head_attention, make_mha(no_qkv_bias=True),
     r"bias of the projection to q, k, v")
case("mha_causal_default", check_multi_head_attention, make_mha(causal_default=True),
     r"mask=None.*causal")
case("mha_zero_after_out_proj", check_multi_head_attention,
     make_mha(zero_after_out_proj=True), r"out_proj.*bias|before (mha\.)?out_proj")


def mha_nan_to_num_output(x, mha, mask=None):  # NaN rows zeroed after out_proj, not before
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    s = scores_of(q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge_right(s.softmax(dim=-1) @ v)).nan_to_num(0.0)


def mha_heads_interleaved(x, mha, mask=None):  # merges heads feature-major
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_interleaved(at_right(q, k, v, mask)))


case("mha_nan_to_num_output", check_multi_head_attention, mha_nan_to_num_output,
     r"NaN|nan_to_num|before (mha\.)?out_proj")
case("mha_heads_interleaved", check_multi_head_attention, mha_heads_interleaved,
     r"interleave|merge")


# --- 02 Exercise 1: memory update -------------------------------------------------------

def um_right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_new_first(mem, h, mem_len):  # [h, mem]
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_oldest(mem, h, mem_len):  # keeps the front of the queue
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def um_first_segment_untrimmed(mem, h, mem_len):  # mem=None returns all of h
    if mem is None:
        return h.detach()
    x = torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def um_detach_mem_only(mem, h, mem_len):  # detaches the old memory, not the new states
    x = h if mem is None else torch.cat([mem.detach(), h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):]


def um_h_only(mem, h, mem_len):  # right only when T >= mem_len
    return h[:, max(h.size(1) - mem_len, 0):].detach()


RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_new_first", check_update_memory, um_new_first, r"wrong order")
case("um_oldest", check_update_memory, um_oldest, r"oldest")
case("um_first_segment_untrimmed", check_update_memory, um_first_segment_untrimmed,
     r"mem=None.*cut")
case("um_detach_mem_only", check_update_memory, um_detach_mem_only,
     r"attached to the graph|detach")
case("um_h_only", check_update_memory, um_h_only, r"dropped the old memory")

def um_none_for_zero(mem, h, mem_len):  # returns None for mem_len = 0
    if mem_len == 0:
        return None
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, -mem_len:].detach()


case("um_none_for_zero", check_update_memory, um_none_for_zero, r"returned NoneType")


# --- 02 Exercise 2: segment mask --------------------------------------------------------

def grid(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def sm_right(n, seg_len, mem_len):
    i, j = grid(n)
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_not_causal(n, seg_len, mem_len):  # lower bound only
    i, j = grid(n)
    return (j >= (i // seg_len) * seg_len - mem_len).expand(n, n)


def sm_or(n, seg_len, mem_len):  # | instead of &
    i, j = grid(n)
    return (j <= i) | (j >= (i // seg_len) * seg_len - mem_len)


def sm_key_segment(n, seg_len, mem_len):  # bounds the key's segment start
    i, j = grid(n)
    return (j <= i) & ((j // seg_len) * seg_len >= (i // seg_len) * seg_len - mem_len)


def sm_previous_segment(n, seg_len, mem_len):  # memory = one previous segment
    i, j = grid(n)
    return (j <= i) & (j >= (i // seg_len - 1) * seg_len)


def sm_sliding(n, seg_len, mem_len):  # a sliding window of seg_len + mem_len
    i, j = grid(n)
    return (j <= i) & (j > i - seg_len - mem_len)


RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_not_causal", check_segment_mask, sm_not_causal, r"future key.*j <= i")
case("sm_or", check_segment_mask, sm_or, r"\| \(or\).*&")
case("sm_key_segment", check_segment_mask, sm_key_segment, r"key's segment")
case("sm_previous_segment", check_segment_mask, sm_previous_segment,
     r"seg_len where mem_len")
case("sm_sliding", check_segment_mask, sm_sliding, r"sliding window")


# --- 02 Exercise 3: relative distances --------------------------------------------------

def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_float(t, m):  # float arange
    i = torch.arange(t, dtype=torch.float)[:, None]
    return m + i - torch.arange(m + t, dtype=torch.float)[None, :]


def rd_no_offset(t, m):  # i - j
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_clamped(t, m):  # "distances are never negative"
    return rd_right(t, m).clamp(min=0)


def rd_segment_keys_only(t, m):  # forgets the memory keys: [T, T]
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_int32(t, m):
    return rd_right(t, m).int()


RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_float", check_relative_distances, rd_float, r"float32.*LongTensor")
case("rd_no_offset", check_relative_distances, rd_no_offset, r"i - j.*m \+ i - j")
case("rd_clamped", check_relative_distances, rd_clamped, r"get 0.*negative")
case("rd_segment_keys_only", check_relative_distances, rd_segment_keys_only,
     r"\[T, T\].*memory")
case("rd_int32", check_relative_distances, rd_int32, r"int32.*int64")

def rd_negated(t, m):  # j - i - m
    return torch.arange(m + t)[None, :] - torch.arange(t)[:, None] - m


case("rd_negated", check_relative_distances, rd_negated, r"sign is flipped")


# --- 02 Exercise 4: relative shift ------------------------------------------------------

def rs_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_pad_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (0, 1)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_drop_last(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def rs_transpose(x):  # transposes instead of re-reading the memory
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(*lead, t, s)


def rs_only_2d(x):  # forgets the leading dims
    t, s = x.shape[-2:]
    return F.pad(x, (1, 0)).view(s + 1, t)[1:].reshape(t, s)


def rs_roll_loop(x):  # a loop of rolls: slow, but right
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(-(t - 1 - i), -1) for i in range(t)], -2)


RIGHT["relative_shift"] = (check_relative_shift, rs_right)
RIGHT["relative_shift_roll"] = (check_relative_shift, rs_roll_loop)
case("rs_pad_right", check_relative_shift, rs_pad_right, r"padded on the right")
case("rs_drop_last", check_relative_shift, rs_drop_last, r"dropped the last row")
case("rs_transpose", check_relative_shift, rs_transpose, r"transposed.*reshape")
case("rs_only_2d", check_relative_shift, rs_only_2d, r"leading dimensions")


# --- 02 Exercise 5: relative scores -----------------------------------------------------

def make_scores(swap_biases=False, no_shift=False, scale_content_only=False,
                flip_r=False):
    def relative_scores(q, k, r, u, v):
        if swap_biases:
            u, v = v, u
        if flip_r:
            r = r.flip(0)
        content = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
        position = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
        if not no_shift:
            position = relative_shift(position)
        scale = math.sqrt(q.size(-1))
        if scale_content_only:
            return content / scale + position
        return (content + position) / scale
    return relative_scores


def rsc_bias_no_axis(q, k, r, u, v):  # q + u with u [H, D_h]: aligns H with T
    content = torch.einsum("bhtd,bhsd->bhts", q + u, k)
    position = relative_shift(torch.einsum("bhtd,shd->bhts", q + v, r))
    return (content + position) / math.sqrt(q.size(-1))


def rsc_bias_on_keys(q, k, r, u, v):  # biases added to the keys
    content = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    position = relative_shift(torch.einsum("bhtd,shd->bhts", q, r + v))
    return (content + position) / math.sqrt(q.size(-1))


RIGHT["relative_scores"] = (check_relative_scores, make_scores())
case("rsc_swap_biases", check_relative_scores, make_scores(swap_biases=True),
     r"biases are swapped")
case("rsc_no_shift", check_relative_scores, make_scores(no_shift=True),
     r"relative_shift")
case("rsc_scale_content_only", check_relative_scores,
     make_scores(scale_content_only=True), r"only the content term")
case("rsc_flip_r", check_relative_scores, make_scores(flip_r=True), r"reversed")
case("rsc_bias_no_axis", check_relative_scores, rsc_bias_no_axis, r"u\[:, None\]")
case("rsc_bias_on_keys", check_relative_scores, rsc_bias_on_keys, r"adds u to the keys")


def rsc_scale_d_model(q, k, r, u, v):  # divides by sqrt(H * D_h)
    return make_scores()(q, k, r, u, v) / math.sqrt(q.size(1))


def rsc_inplace(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    content = torch.einsum("bhtd,bhsd->bhts", q, k)
    pos_q = q - u[:, None] + v[:, None]
    position = relative_shift(torch.einsum("bhtd,shd->bhts", pos_q, r))
    return (content + position) / math.sqrt(q.size(-1))


case("rsc_scale_d_model", check_relative_scores, rsc_scale_d_model, r"sqrt\(d_head\)")
case("rsc_inplace", check_relative_scores, rsc_inplace, r"in place")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
