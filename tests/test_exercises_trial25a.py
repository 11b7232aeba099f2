"""Learner trial 25a (issue 28): notebooks 01_attention and 02_transformer_xl."""
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
case = trial_case(CASES, XFAIL)   # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 01 Exercise 1: weights
def weights_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_log_softmax(q, k):  # log-probabilities instead of weights
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


def weights_over_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def weights_sqrt_t(q, k):  # q.size(1) (the query count T) taken for the width
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(1))).softmax(dim=-1)


def weights_sum_normalised(q, k):  # "weights that sum to one" without the exp
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s / s.sum(dim=-1, keepdim=True)


RIGHT["weights"] = (check_attention_weights, weights_right)
case("w_log_softmax", check_attention_weights, weights_log_softmax, r"log.?softmax|log")
case("w_over_d", check_attention_weights, weights_over_d, r"sqrt|√|square root")
case("w_sqrt_t", check_attention_weights, weights_sqrt_t,
     r"(q\.size\(-1\)|width).*(T|quer|size\(1\))|(T|quer|size\(1\)).*(width|size\(-1\))")
case("w_sum_no_exp", check_attention_weights, weights_sum_normalised, r"exp|softmax")


# ---------------------------------------------------------------- 01 Exercise 2: attention
def attention_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
    return w @ v


def attention_big_negative(q, k, v, mask=None):  # -1e9 fill: an empty row gets uniform weights
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def attention_mask_after_softmax(q, k, v, mask=None):  # masked after the softmax, not renormalised
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def attention_sqrt_dv(q, k, v, mask=None):  # scaled by the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(s.softmax(dim=-1))
    return w @ v


RIGHT["attention"] = (check_attention, attention_right)
case("a_big_negative", check_attention, attention_big_negative,
     r"(all.False|no True|empty|attend(s)? no|masked row).*(zero|uniform|average)")
case("a_mask_after_softmax", check_attention, attention_mask_after_softmax,
     r"(before the softmax|after the softmax|renormali|sum to 1)")
case("a_sqrt_dv", check_attention, attention_sqrt_dv,
     r"(value|D_v|v\.size).*(width|sqrt|√)|(sqrt|√).*(value|D_v|v\.size)")


# ---------------------------------------------------------------- 01 Exercise 3: causal mask
def causal_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def causal_strict(t):  # the diagonal left out: a token may not attend itself
    return torch.ones(t, t).tril(diagonal=-1).bool()


def causal_float(t):  # 0/1 floats instead of booleans
    return torch.ones(t, t).tril()


def causal_additive(t):  # nn.Transformer's additive float mask (0 / -inf)
    return torch.zeros(t, t).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))


RIGHT["causal"] = (check_causal_mask, causal_right)
case("c_strict", check_causal_mask, causal_strict, r"diagonal|itself|j <= i|j ≤ i")
case("c_float", check_causal_mask, causal_float, r"bool|dtype")
case("c_additive", check_causal_mask, causal_additive, r"(bool|True).*(additive|-inf|float)|"
     r"(additive|-inf).*(bool|True)")


# ---------------------------------------------------------------- 01 Exercise 4: heads
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_interleaved(x, n_heads):  # head h owns features h, h + H, ... (and merge undoes it)
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_chunk_tokens(x, n_heads):  # chunks the token axis instead of the features
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)


def merge_in_place(x):  # transpose_ changes the caller's tensor
    b, h, t, dh = x.shape
    return x.transpose_(1, 2).reshape(b, t, h * dh)


def split_heads_as_width(x, n_heads):  # n_heads read as the head width
    b, t, d = x.shape
    return x.view(b, t, -1, n_heads).transpose(1, 2)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("h_interleaved", check_heads, (split_interleaved, merge_interleaved),
     r"(interleav|h \* D_h|h\*D_h|contiguous|slice|owns).*|stride")
case("h_chunk_tokens", check_heads, (split_chunk_tokens, merge_right),
     r"(token|T).*(feature|last axis|D)|(feature|last axis).*(token|T)")
case("h_merge_in_place", check_heads, (split_right, merge_in_place),
     r"in.place|transpose_|changed (its|the) input|modif")
case("h_heads_as_width", check_heads, (split_heads_as_width, merge_right),
     r"n_heads.*(width|D_h)|(width|D_h).*n_heads|head count")


# ---------------------------------------------------------------- 01 Exercise 5: MHA
def mha_right(x, mha, mask=None):
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    out = attention_right(q, k, v, mask)
    return mha.out_proj(merge_right(out))


def mha_sqrt_d_model(x, mha, mask=None):  # scores divided by sqrt(D), not sqrt(D_h)
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    q = q * math.sqrt(q.size(-1)) / math.sqrt(x.size(-1))
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_heads_then_chunk(x, mha, mask=None):  # split into heads first, then q/k/v per head
    h = mha.n_heads
    q, k, v = split_right(mha.qkv(x), h).chunk(3, dim=-1)
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_causal_default(x, mha, mask=None):  # None read as "causal"
    if mask is None:
        mask = causal_mask(x.size(1))
    return mha_right(x, mha, mask)


def mha_no_out_bias(x, mha, mask=None):  # out_proj's weight only, its bias forgotten
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    return merge_right(attention_right(q, k, v, mask)) @ mha.out_proj.weight.T


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("m_sqrt_d_model", check_multi_head_attention, mha_sqrt_d_model,
     r"(D_h|d_head|head width|per head).*(sqrt|√)|(sqrt|√).*(D_h|d_head|head('s)? width)")
case("m_heads_then_chunk", check_multi_head_attention, mha_heads_then_chunk,
     r"chunk.*(before|first)|(before|first).*(split|chunk)|Q, K, V side by side")
case("m_causal_default", check_multi_head_attention, mha_causal_default,
     r"(None|no mask).*(causal|every key)|causal.*(None|no mask)")
case("m_no_out_bias", check_multi_head_attention, mha_no_out_bias, r"bias")


# ---------------------------------------------------------------- 02 Exercise 1: update_memory
def update_right(mem, h, mem_len):
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def update_swapped(mem, h, mem_len):  # [h, mem] instead of [mem, h]
    full = h if mem is None else torch.cat([h, mem], dim=1)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


def update_first(mem, h, mem_len):  # keeps the first mem_len states, the oldest
    full = h if mem is None else torch.cat([mem, h], dim=1)
    return full[:, :mem_len].detach()


def update_h_only(mem, h, mem_len):  # the old memory ignored (right when T >= mem_len)
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def update_cat_batch(mem, h, mem_len):  # concatenated along the batch axis
    full = h if mem is None else torch.cat([mem, h], dim=0)
    return full[:, full.size(1) - min(mem_len, full.size(1)):].detach()


RIGHT["update"] = (check_update_memory, update_right)
case("u_swapped", check_update_memory, update_swapped, r"order|\[mem, h\]|before|oldest|first")
case("u_first", check_update_memory, update_first, r"last|latest|newest|oldest|first mem_len")
case("u_h_only", check_update_memory, update_h_only,
     r"(old|previous) memory|mem\b.*(ignor|drop|kept)")
case("u_cat_batch", check_update_memory, update_cat_batch,
     r"(time|dim=1|axis 1).*batch|batch.*(time|dim=1)")


# ---------------------------------------------------------------- 02 Exercise 2: segment_mask
def segmask_right(n, seg_len, mem_len):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j <= i)


def segmask_no_causal(n, seg_len, mem_len):  # the whole own segment, future included
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j < start + seg_len)


def segmask_sliding(n, seg_len, mem_len):  # a sliding window of mem_len back from i
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (i - j <= mem_len) & (j <= i)


def segmask_previous_segment(n, seg_len, mem_len):  # start of the previous segment: mem_len ignored
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= (i // seg_len - 1) * seg_len) & (j <= i)


RIGHT["segmask"] = (check_segment_mask, segmask_right)
case("s_no_causal", check_segment_mask, segmask_no_causal,
     r"future|j <= i|j ≤ i|later key|causal")
case("s_sliding", check_segment_mask, segmask_sliding,
     r"start\(i\)|segment('s)? (start|first)|sliding")
case("s_prev_segment", check_segment_mask, segmask_previous_segment, r"mem_len")


# ---------------------------------------------------------------- 02 Exercise 3: distances
def dist_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_no_m(t, m):  # query i taken at key position i, not m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_clamped(t, m):  # future keys clamped to distance 0
    return dist_right(t, m).clamp(min=0)


def dist_abs(t, m):  # |i - j|: a distance taken as non-negative
    return dist_right(t, m).abs()


def dist_transposed(t, m):  # [S, T]: keys as rows
    return m + torch.arange(t)[None, :] - torch.arange(m + t)[:, None]


RIGHT["dist"] = (check_relative_distances, dist_right)
case("d_no_m", check_relative_distances, dist_no_m, r"m \+ i|offset|memory|by m\b")
case("d_clamped", check_relative_distances, dist_clamped, r"negative|future|clamp")
case("d_abs", check_relative_distances, dist_abs, r"negative|abs|sign|future")
case("d_transposed", check_relative_distances, dist_transposed, r"transpos|\[T, S\]|rows? .*quer")


# ---------------------------------------------------------------- 02 Exercise 4: shift
def shift_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(x.shape)


def shift_pad_right(x):  # the zero column appended at the end
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 1))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(x.shape)


def shift_drop_last(x):  # the last row dropped, not the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(x.shape)


def shift_roll_right(x):  # a loop that rolls each row right instead of left
    t = x.size(-2)
    return torch.stack([x[..., i, :].roll(t - 1 - i, dims=-1) for i in range(t)], dim=-2)


def shift_mixed_batch(x):  # the leading axes folded into the [S + 1, T] view
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(s + 1, -1)[1:].reshape(x.shape)


RIGHT["shift"] = (check_relative_shift, shift_right)
case("sh_pad_right", check_relative_shift, shift_pad_right,
     r"(front|left|before).*(pad|zero)|pad.*(front|left)")
case("sh_drop_last", check_relative_shift, shift_drop_last, r"first row|drop")
case("sh_roll_right", check_relative_shift, shift_roll_right, r"left|right|direction|T - 1 - i")
case("sh_mixed_batch", check_relative_shift, shift_mixed_batch, r"leading|batch|mix")


# ---------------------------------------------------------------- 02 Exercise 5: scores
def scores_right(q, k, r, u, v):
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_bias_broadcast(q, k, r, u, v):  # u, v added without the token axis
    ac = (q + u) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v, r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_unshifted(q, k, r, u, v):  # (b) + (d) left by distance
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + bd) / math.sqrt(q.size(-1))


def scores_scale_content_only(q, k, r, u, v):  # only (a) + (c) divided by sqrt(d_h)
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac / math.sqrt(q.size(-1)) + relative_shift(bd)


def scores_r_flipped(q, k, r, u, v):  # r read as distances 0 .. S-1
    return scores_right(q, k, r.flip(0), u, v)


RIGHT["scores"] = (check_relative_scores, scores_right)
case("r_bias_broadcast", check_relative_scores, scores_bias_broadcast,
     r"u\[:, None\]|broadcast|token axis|\[H, 1, D_h\]")
case("r_unshifted", check_relative_scores, scores_unshifted, r"shift")
case("r_scale_content_only", check_relative_scores, scores_scale_content_only,
     r"(all|every|four|whole).*(sqrt|√)|(sqrt|√).*(all|both|four|sum)")
case("r_flipped", check_relative_scores, scores_r_flipped, r"S - 1|order|revers|flip|descending")


# ---------------------------------------------------------------- second round: subtler slips
D_GLOBAL = 1024  # the notebook's `d` after section 5's loop (for d in widths)


def weights_global_d(q, k):  # the notebook's global d (1024 after section 5) instead of q.size(-1)
    return (q @ k.transpose(-2, -1) / math.sqrt(D_GLOBAL)).softmax(dim=-1)


def weights_float64(q, k):  # softmax(dtype=float64): float32 inputs give float64 weights
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1, dtype=torch.float64)


case("w_global_d", check_attention_weights, weights_global_d,
     r"1024|global|q\.size\(-1\)")
case("w_float64", check_attention_weights, weights_float64, r"dtype|float64|float32")


def attention_scores_times_mask(q, k, v, mask=None):  # masked scores set to 0, not -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(dim=-1) @ v


def attention_mask_in_place(q, k, v, mask=None):  # logical_not_ flips the caller's mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        hidden = mask.logical_not_()
        s = s.masked_fill(hidden, float("-inf"))
        w = s.softmax(dim=-1).masked_fill(hidden.all(dim=-1, keepdim=True), 0.0)
        return w @ v
    return s.softmax(dim=-1) @ v


case("a_scores_times_mask", check_attention, attention_scores_times_mask,
     r"-inf|0 (is|still)|multipl|\* mask")
case("a_mask_in_place", check_attention, attention_mask_in_place,
     r"in.place|logical_not_|modif|changed")


def causal_uint8(t):  # the legacy byte mask
    return torch.ones(t, t, dtype=torch.uint8).tril()


def causal_numpy(t):  # numpy instead of torch
    import numpy as np
    return np.tril(np.ones((t, t), dtype=bool))


case("c_uint8", check_causal_mask, causal_uint8, r"bool|uint8|dtype")
case("c_numpy", check_causal_mask, causal_numpy, r"numpy|ndarray|torch\.(Tensor|tensor|ones)")


def merge_view(x):  # .view on the transposed (non-contiguous) tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


case("h_merge_view", check_heads, (split_right, merge_view), r"contiguous|reshape")


def mha_v_is_x(x, mha, mask=None):  # the values taken from x, the value projection skipped
    h = mha.n_heads
    q, k, _ = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_right(q, k, split_right(x, h), mask)))


case("m_v_is_x", check_multi_head_attention, mha_v_is_x, r"value|\bv\b.*(projection|chunk|qkv)")


def update_ring_in_place(mem, h, mem_len):  # a ring-buffer update that writes into mem
    if mem is None or mem.size(1) < mem_len or h.size(1) >= mem_len:
        return update_right(mem, h, mem_len)
    t = h.size(1)
    mem[:, :-t] = mem[:, t:].clone()
    mem[:, -t:] = h.detach()
    return mem


case("u_ring_in_place", check_update_memory, update_ring_in_place,
     r"in.place|modif|changed|clone")


def segmask_block_tril(n, seg_len, mem_len):  # per-segment blocks, tril() without its offset
    mask = torch.zeros(n, n, dtype=torch.bool)
    for s in range(0, n, seg_len):
        e, a = min(s + seg_len, n), max(0, s - mem_len)
        mask[s:e, a:e] = torch.ones(e - s, e - a, dtype=torch.bool).tril()
    return mask


case("s_block_tril", check_segment_mask, segmask_block_tril,
     r"tril|diagonal|offset|memory keys|start\(i\) - mem_len")


def dist_int32(t, m):  # int32 instead of a LongTensor
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).int()


case("d_int32", check_relative_distances, dist_int32, r"int64|long|dtype|int32")


def shift_flip(x):  # "shift" read as reversing the distance axis
    return x.flip(-1)


def shift_in_place(x):  # row by row, written back into x
    t = x.size(-2)
    for i in range(t):
        x[..., i, :] = x[..., i, :].roll(-(t - 1 - i), dims=-1)
    return x


def shift_as_strided(x):  # strides that assume a contiguous x
    *lead, t, s = x.shape
    strides, acc = [], t * s
    for n in reversed(lead):
        strides.insert(0, acc)
        acc *= n
    return x.as_strided(x.shape, (*strides, s - 1, 1), x.storage_offset() + t - 1)


case("sh_flip", check_relative_shift, shift_flip, r"flip|revers|slide|shift")
case("sh_in_place", check_relative_shift, shift_in_place, r"in.place|modif|changed|clone")
case("sh_as_strided", check_relative_shift, shift_as_strided, r"contiguous|stride")


def scores_u_v_swapped(q, k, r, u, v):  # u with the positions, v with the content
    return scores_right(q, k, r, v, u)


def scores_r_reshaped(q, k, r, u, v):  # r [S, H, D_h] reshaped, not transposed, to [H, S, D_h]
    s, h, dh = r.shape
    return scores_right(q, k, r.reshape(h, s, dh).transpose(0, 1), u, v)


def scores_no_u(q, k, r, u, v):  # the content bias (c) left out
    return scores_right(q, k, r, torch.zeros_like(u), v)


case("r_u_v_swapped", check_relative_scores, scores_u_v_swapped, r"swap|u .*content|v .*position")
case("r_r_reshaped", check_relative_scores, scores_r_reshaped, r"transpose|permute|reshape|mix")
case("r_no_u", check_relative_scores, scores_no_u, r"\(c\)|\bu\b|content bias")



def scores_own_strided_shift(q, k, r, u, v):  # Ex. 4's as_strided shift, on einsum's output
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + shift_as_strided(bd)) / math.sqrt(q.size(-1))


case("r_own_strided_shift", check_relative_scores, scores_own_strided_shift,
     r"contiguous|stride|(your|the) shift")



def attention_3d_only(q, k, v, mask=None):  # transpose(1, 2): right (and accepted) on 3-D only
    s = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
    return w @ v


def mha_reuse_3d_attention(x, mha, mask=None):  # Ex. 2's accepted 3-D answer reused on 4-D heads
    h = mha.n_heads
    q, k, v = (split_right(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_3d_only(q, k, v, mask)))


case("m_reuse_3d_attention", check_multi_head_attention, mha_reuse_3d_attention,
     r"transpose\(1, 2\)|transpose\(-2, -1\)|4-D|\[B, H, T, D_h\]")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
