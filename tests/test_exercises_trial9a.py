"""Issue 28, ninth trial (a: notebooks 01 and 02, every exercise): a fresh learner's wrong
answers, one case each, with the regex a message naming the mistake would match; cases the
checkers do not name today are strict xfails with their class (ACCEPTED, MISLEADING, VAGUE,
TOO LONG), and one right answer per exercise."""
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
from labnn.xl.relative_attention import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}


case = trial_case(CASES, XFAIL)


# ---- 01 Ex1 attention_weights
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def aw_scale_by_keys(q, k):  # divide by sqrt(S), the number of keys
    return (q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))).softmax(-1)


def aw_scale_after_softmax(q, k):  # scale applied after the softmax
    return (q @ k.transpose(-2, -1)).softmax(-1) / math.sqrt(q.size(-1))


def aw_divide_by_d(q, k):  # divide by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1)


# ---- 01 Ex2 attention
def _att(q, k, v, mask, fill=float("-inf"), empty=None, scale=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1) if scale is None else scale)
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    w = s.softmax(-1)
    if mask is not None:
        keep = mask.any(-1, keepdim=True) if empty is None else empty(mask)
        w = w.masked_fill(~keep, 0.0)
    return w @ v


def at_right(q, k, v, mask=None):
    return _att(q, k, v, mask)


def at_finite_fill(q, k, v, mask=None):  # -1e9 fill, no empty-row fix
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def at_empty_all(q, k, v, mask=None):  # zeroes rows where ALL allowed (any/all flip)
    return _att(q, k, v, mask, empty=lambda m: ~m.all(-1, keepdim=True))


def at_inplace_q(q, k, v, mask=None):  # scales the caller's q in place
    q.div_(math.sqrt(q.size(-1)))
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def at_mask_unsqueeze1(q, k, v, mask=None):  # mask[:, None] thinking of a batch axis
    return _att(q, k, v, None if mask is None else mask.unsqueeze(1))


# ---- 01 Ex3 causal mask
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def cm_uint8(t):
    return torch.tril(torch.ones(t, t, dtype=torch.uint8))


def cm_batch_axis(t):  # [1, t, t]
    return torch.ones(t, t, dtype=torch.bool).tril()[None]


def cm_fixed_size(t):  # built once for 16 tokens and cut
    return torch.ones(16, 16, dtype=torch.bool).tril()[:t, :t]


def cm_transposed(t):  # j >= i: the upper triangle, axes swapped
    i = torch.arange(t)
    return i[:, None] <= i[None, :]


# ---- 01 Ex4 heads
def sh_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def mh_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def sh_interleaved(x, n_heads):  # head h gets features h, h+H, ... (strided)
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def mh_interleaved(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def mh_inplace(x):  # transpose_ changes the caller's tensor
    b, h, t, dh = x.shape
    return x.transpose_(1, 2).reshape(b, t, h * dh)


def mh_no_flatten(x):  # forgot to flatten the heads
    return x.transpose(1, 2)


# ---- 01 Ex5 MHA
def _mha(x, mha, mask=None, order=(0, 1, 2), scale=None, out=True, causal=False):
    b, t, d = x.shape
    h = mha.n_heads
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (sh_right(parts[i], h) for i in order)
    dh = d // h
    s = q @ k.transpose(-2, -1) / math.sqrt(dh if scale is None else scale)
    if mask is None and causal:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    y = mh_right(w @ v)
    return mha.out_proj(y) if out else y


def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_kq_swapped(x, mha, mask=None):  # k, q, v = chunk(...)
    return _mha(x, mha, mask, order=(1, 0, 2))


def mha_scale_D(x, mha, mask=None):  # sqrt(D) instead of sqrt(D_h)
    return _mha(x, mha, mask, scale=x.size(-1))


def mha_causal_default(x, mha, mask=None):  # adds a causal mask when mask is None
    return _mha(x, mha, mask, causal=True)


def mha_no_out_proj(x, mha, mask=None):
    return _mha(x, mha, mask, out=False)


# ---- 02 Ex1 update memory
def um_right(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, cat.size(1) - min(mem_len, cat.size(1)):].detach()


def um_reversed(mem, h, mem_len):  # [h, mem]: newest first
    cat = h if mem is None else torch.cat([h, mem], dim=1)
    return cat[:, cat.size(1) - min(mem_len, cat.size(1)):].detach()


def um_oldest(mem, h, mem_len):  # keeps the first mem_len states
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, :mem_len].detach()


def um_ignore_old(mem, h, mem_len):  # only the new states
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def um_cat_batch(mem, h, mem_len):  # concatenated along the batch axis
    cat = h if mem is None else torch.cat([mem, h], dim=0)
    return cat[:, cat.size(1) - min(mem_len, cat.size(1)):].detach()


# ---- 02 Ex2 segment mask
def sm_right(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_sliding(n, seg_len, mem_len):  # every query sees seg_len + mem_len keys
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j > i - seg_len - mem_len)


def sm_mem_div(n, seg_len, mem_len):  # segments of mem_len (right when equal)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // mem_len) * mem_len - mem_len)


def sm_or(n, seg_len, mem_len):  # | instead of &
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) | (j >= (i // seg_len) * seg_len - mem_len)


def sm_transposed(n, seg_len, mem_len):  # query and key axes swapped
    j, i = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


# ---- 02 Ex3 relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def rd_int32(t, m):
    return m + torch.arange(t, dtype=torch.int32)[:, None] - torch.arange(
        m + t, dtype=torch.int32)[None, :]


def rd_clamped(t, m):  # future keys clamped to 0
    return rd_right(t, m).clamp(min=0)


def rd_square(t, m):  # only the segment's t keys
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


def rd_no_offset(t, m):  # forgot the M memory keys before query 0
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


# ---- 02 Ex4 relative shift
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


def rs_transpose(x):  # transpose instead of reading with another row length
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).transpose(-2, -1)
    return p[..., 1:, :].transpose(-2, -1)


def rs_flat_lead(x):  # leading dims flattened and not restored
    t, s = x.shape[-2:]
    p = F.pad(x, (1, 0)).reshape(-1, s + 1, t)
    return p[:, 1:, :].reshape(-1, t, s)


# ---- 02 Ex5 relative scores
def _rsc(q, k, r, u, v, shift=True, swap=False, use_v=True, rr=None):
    if swap:
        u, v = v, u
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    qv = q + v[:, None] if use_v else q
    if rr is None:
        bd = torch.einsum("bhtd,shd->bhts", qv, r)
    else:
        bd = torch.einsum("bhtd,hsd->bhts", qv, rr(r))
    if shift:
        bd = relative_shift(bd)
    return (ac + bd) / math.sqrt(q.size(-1))


def rsc_right(q, k, r, u, v):
    return _rsc(q, k, r, u, v)


def rsc_swap_uv(q, k, r, u, v):
    return _rsc(q, k, r, u, v, swap=True)


def rsc_no_shift(q, k, r, u, v):
    return _rsc(q, k, r, u, v, shift=False)


def rsc_no_v(q, k, r, u, v):  # term (d) missing
    return _rsc(q, k, r, u, v, use_v=False)


def rsc_inplace(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q - u[:, None] + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def rsc_r_reshape(q, k, r, u, v):  # r [S, H, D] read as [H, S, D] with reshape
    s, h, d = r.shape
    return _rsc(q, k, r, u, v, rr=lambda r: r.reshape(h, s, d))


def cm_fixed_size8(t):  # built once for 8 tokens and cut
    return torch.ones(8, 8, dtype=torch.bool).tril()[:t, :t]


def sm_mem_div_guarded(n, seg_len, mem_len):  # blocks of mem_len (or seg_len if 0)
    block = mem_len or seg_len
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // block) * block - mem_len)


def mha_split_then_chunk(x, mha, mask=None):  # heads split before q, k, v are separated
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = sh_right(mha.qkv(x), h).chunk(3, dim=-1)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // h)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(mh_right(s.softmax(-1) @ v))


# ---- 01 Ex1: attention_weights
RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_scale_by_keys", check_attention_weights, aw_scale_by_keys, r"number of keys")
case("aw_scale_after_softmax", check_attention_weights, aw_scale_after_softmax,
     r"softmax.{0,20} last|after the softmax")
case("aw_divide_by_d", check_attention_weights, aw_divide_by_d, r"by d\b.*sqrt")

# ---- 01 Ex2: attention
RIGHT["attention"] = (check_attention, at_right)
case("at_finite_fill", check_attention, at_finite_fill, r"large negative fill|-inf")
case("at_empty_all", check_attention, at_empty_all, r"\.any\(")
case("at_inplace_q", check_attention, at_inplace_q, r"in place")
case("at_mask_unsqueeze1", check_attention, at_mask_unsqueeze1, r"unsqueeze\(1\)")

# ---- 01 Ex3: causal mask
RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_uint8", check_causal_mask, cm_uint8, r"uint8.*bool")
case("cm_batch_axis", check_causal_mask, cm_batch_axis,
     r"extra|leading axis|batch axis|\[t, t\]")
case("cm_fixed_size", check_causal_mask, cm_fixed_size, r"fixed size|from t")
case("cm_fixed_size8", check_causal_mask, cm_fixed_size8, r"fixed size")
case("cm_transposed", check_causal_mask, cm_transposed, r"transposed")

# ---- 01 Ex4: split and merge heads
RIGHT["heads"] = (check_heads, sh_right, mh_right)
case("heads_interleaved", check_heads, (sh_interleaved, mh_interleaved), r"interleave")
case("heads_split_interleaved", check_heads, (sh_interleaved, mh_right),
     r"split_heads.*interleave")
case("heads_merge_interleaved", check_heads, (sh_right, mh_interleaved),
     r"merge_heads.*interleave")
case("heads_merge_inplace", check_heads, (sh_right, mh_inplace), r"in place")
case("heads_merge_no_flatten", check_heads, (sh_right, mh_no_flatten),
     r"not yet joined|reshape\(B, T, H \* D_h\)")

# ---- 01 Ex5: multi-head attention
RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
case("mha_kq_swapped", check_multi_head_attention, mha_kq_swapped, r"wrong order")
case("mha_scale_D", check_multi_head_attention, mha_scale_D, r"sqrt\(d_head\)")
case("mha_causal_default", check_multi_head_attention, mha_causal_default,
     r"mask=None.*causal")
case("mha_no_out_proj", check_multi_head_attention, mha_no_out_proj, r"out_proj")
case("mha_split_then_chunk", check_multi_head_attention, mha_split_then_chunk,
     r"cut per head|chunk.{0,40} first")

# ---- 02 Ex1: memory update
RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_reversed", check_update_memory, um_reversed, r"wrong order")
case("um_oldest", check_update_memory, um_oldest, r"oldest")
case("um_ignore_old", check_update_memory, um_ignore_old, r"dropped the old memory")
case("um_cat_batch", check_update_memory, um_cat_batch, r"batch axis")

# ---- 02 Ex2: segment mask
RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_sliding", check_segment_mask, sm_sliding, r"segment start|segment starting at")
case("sm_mem_div", check_segment_mask, sm_mem_div,
     r"seg_len.{0,40}not mem_len|mem_len.{0,40}instead of seg_len|segments? of seg_len")
case("sm_mem_div_guarded", check_segment_mask, sm_mem_div_guarded,
     r"seg_len.{0,40}not mem_len|mem_len.{0,40}instead of seg_len|segments? of seg_len")
case("sm_or", check_segment_mask, sm_or, r"&|both conditions|and, not or")
case("sm_transposed", check_segment_mask, sm_transposed, r"transposed")

# ---- 02 Ex3: relative distances
RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_int32", check_relative_distances, rd_int32, r"int32.*int64.*arange.s default")
case("rd_clamped", check_relative_distances, rd_clamped, r"negative")
case("rd_square", check_relative_distances, rd_square, r"memory positions|S = m \+ t")
case("rd_no_offset", check_relative_distances, rd_no_offset, r"m \+ i - j")

# ---- 02 Ex4: relative shift
RIGHT["relative_shift"] = (check_relative_shift, rs_right)
case("rs_pad_right", check_relative_shift, rs_pad_right,
     r"padded on the right|F\.pad\(x, \(1, 0\)\)")
case("rs_drop_last", check_relative_shift, rs_drop_last, r"dropped the last row")
case("rs_transpose", check_relative_shift, rs_transpose,
     r"transpose.{0,80}reshape|reshape.{0,80}transpose")
case("rs_flat_lead", check_relative_shift, rs_flat_lead, r"leading|\[B, H\]|restore")

# ---- 02 Ex5: relative scores
RIGHT["relative_scores"] = (check_relative_scores, rsc_right)
case("rsc_swap_uv", check_relative_scores, rsc_swap_uv, r"swapped")
case("rsc_no_shift", check_relative_scores, rsc_no_shift, r"relative_shift")
case("rsc_no_v", check_relative_scores, rsc_no_v, r"\(d\) is missing|position bias v")
case("rsc_inplace", check_relative_scores, rsc_inplace, r"in place")
case("rsc_r_reshape", check_relative_scores, rsc_r_reshape, r"reshape.*mixes")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
