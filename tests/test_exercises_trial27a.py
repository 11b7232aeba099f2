"""Learner trial 27a (issue 28): notebooks 01 (attention) and 02 (Transformer-XL), every exercise.

Three new wrong answers per exercise (plus a few extras that probe the 4-D reuse of Ex. 1 / 2),
one right answer each. Patterns are what a message naming the mistake should match.
"""
import math
import torch
import torch.nn.functional as F
from labnn.nn import causal_mask
from labnn.xl import relative_shift
from checker_helpers import trial_case, trial_tests
from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")

# ---------- NB1 Ex1 attention_weights
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
def aw_shape2(q, k):  # width read as q.shape[2]: D for 3-D, T for 4-D heads
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[2])).softmax(dim=-1)
def aw_dim2(q, k):  # softmax(dim=2): the keys for 3-D, the queries for 4-D
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=2)
def aw_sigmoid(q, k):  # sigmoid instead of softmax
    return torch.sigmoid(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))

# ---------- NB1 Ex2 attention
def at_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.nan_to_num(0.0)
    return w @ v
def at_big_neg(q, k, v, mask=None):  # -1e9: empty rows get uniform weights, not zeros
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v
def at_mul_after(q, k, v, mask=None):  # mask multiplied in after the softmax, no renormalising
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
    return w @ v
def at_where0(q, k, v, mask=None):  # masked scores set to 0 instead of -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = torch.where(mask, s, torch.zeros_like(s))
    return s.softmax(-1) @ v

# ---------- NB1 Ex3 causal mask
def cm_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()
def cm_float(t):  # float 0/1 mask, not bool
    return torch.ones(t, t).tril()
def cm_batched(t):  # an extra leading axis [1, t, t]
    return torch.ones(t, t, dtype=torch.bool).tril()[None]
def cm_no_self(t):  # strict past: the token may not see itself
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)

# ---------- NB1 Ex4 heads
def sp_right(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)
def mg_right(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)
def sp_interleaved(x, n_heads):  # head h owns features h, h+H, ... (view [T, D_h, H])
    B, T, D = x.shape
    return x.view(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)
def mg_interleaved(x):
    B, H, T, Dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)
def mg_view(x):  # .view on the transposed (non-contiguous) tensor
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).view(B, T, H * Dh)
def sp_stack0(x, n_heads):  # chunks stacked on a new axis 0: [H, B, T, D_h]
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)

# ---------- NB1 Ex5 multi-head attention
def _mha(x, mha, mask, proj, causal_default=False, sdpa=False):
    B, T, D = x.shape
    H = mha.n_heads
    q, k, v = (sp_right(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    if mask is None and causal_default:
        mask = causal_mask(T)
    if sdpa:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        o = at_right(q, k, v, mask)
    return proj(mg_right(o))
def mha_right(x, mha, mask=None):
    return _mha(x, mha, mask, mha.out_proj)
def mha_no_bias(x, mha, mask=None):  # out_proj weight without its bias
    return _mha(x, mha, mask, lambda m: m @ mha.out_proj.weight.T)
def mha_causal_default(x, mha, mask=None):  # mask=None read as "causal"
    return _mha(x, mha, mask, mha.out_proj, causal_default=True)
def mha_sdpa(x, mha, mask=None):  # torch's fused kernel: all-False rows give NaN
    return _mha(x, mha, mask, mha.out_proj, sdpa=True)

# ---------- NB2 Ex1 update_memory
def um_right(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, cat.size(1) - min(cat.size(1), mem_len):].detach()
def um_first(mem, h, mem_len):  # keeps the FIRST mem_len states
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, :mem_len].detach()
def um_h_only(mem, h, mem_len):  # old memory dropped: right only when T >= mem_len
    return h[:, max(0, h.size(1) - mem_len):].detach()
def um_clone(mem, h, mem_len):  # clone() instead of detach(): still in the graph
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, cat.size(1) - min(cat.size(1), mem_len):].clone()

# ---------- NB2 Ex2 segment mask
def sm_right(n, seg_len, mem_len):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j <= i)
def sm_index(n, seg_len, mem_len):  # start = i // seg_len: segment number, not position
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= i // seg_len - mem_len) & (j <= i)
def sm_block(n, seg_len, mem_len):  # whole own segment visible (no j <= i)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) & (j < start + seg_len)
def sm_or(n, seg_len, mem_len):  # | instead of &
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j >= start - mem_len) | (j <= i)

# ---------- NB2 Ex3 relative distances
def rd_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]
def rd_float(t, m):  # float positions
    return m + torch.arange(t, dtype=torch.float)[:, None] - torch.arange(m + t)[None, :]
def rd_clamp(t, m):  # future keys clamped to 0
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).clamp(min=0)
def rd_no_m(t, m):  # query placed at i, not m + i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]

# ---------- NB2 Ex4 relative shift
def rs_right(x):
    *lead, T, S = x.shape
    p = F.pad(x, (1, 0))
    return p.reshape(*lead, S + 1, T)[..., 1:, :].reshape(*lead, T, S)
def rs_flat(x):  # 2-D recipe: reshape(-1, T) merges leading axes, drops only one row in all
    *lead, T, S = x.shape
    p = F.pad(x, (1, 0))
    return p.reshape(-1, T)[1:].reshape(-1)[: x.numel()].reshape(x.shape)
def rs_right_pad(x):  # zero column padded on the right
    *lead, T, S = x.shape
    p = F.pad(x, (0, 1))
    return p.reshape(*lead, S + 1, T)[..., 1:, :].reshape(*lead, T, S)
def rs_roll_wrong(x):  # rows rolled right by T-1-i instead of left
    T = x.size(-2)
    return torch.stack([x[..., i, :].roll(T - 1 - i, dims=-1) for i in range(T)], dim=-2)

# ---------- NB2 Ex5 relative scores
def _rel(q, k, r, u, v, uv_swap=False, shift=True, scale_all=True):
    if uv_swap:
        u, v = v, u
    d = q.size(-1)
    ac = (q + u[:, None, :]) @ k.transpose(-2, -1)
    bd = (q + v[:, None, :]) @ r.permute(1, 2, 0)  # [B, H, T, S]
    if shift:
        bd = relative_shift(bd)
    if scale_all:
        return (ac + bd) / math.sqrt(d)
    return ac / math.sqrt(d) + bd
def rsc_right(q, k, r, u, v):
    return _rel(q, k, r, u, v)
def rsc_swap(q, k, r, u, v):  # u with the positions, v with the content
    return _rel(q, k, r, u, v, uv_swap=True)
def rsc_noshift(q, k, r, u, v):  # (query, distance) scores used as (query, key)
    return _rel(q, k, r, u, v, shift=False)
def rsc_content_scaled(q, k, r, u, v):  # only (a)+(c) divided by sqrt(d_h)
    return _rel(q, k, r, u, v, scale_all=False)
def mha_chunk_after_split(x, mha, mask=None):  # heads split first, then q/k/v chunked per head
    H = mha.n_heads
    q, k, v = sp_right(mha.qkv(x), H).chunk(3, dim=-1)
    return mha.out_proj(mg_right(at_right(q, k, v, mask)))
def at_vwidth(q, k, v, mask=None):  # scaled by the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v
def aw_einsum3(q, k):  # einsum written for 3-D only
    return (torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.size(-1))).softmax(-1)
def um_neg_slice(mem, h, mem_len):  # [-mem_len:] breaks for mem_len = 0
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, -mem_len:].detach()
def rd_abs(t, m):  # absolute value of the distance
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()
def at_dim2(q, k, v, mask=None):  # softmax(dim=2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(2).nan_to_num(0.0) @ v
def at_shape2(q, k, v, mask=None):  # width from q.shape[2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[2])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v
def rs_4d(x):  # written for [B, H, T, S] only
    B, H, T, S = x.shape
    p = F.pad(x, (1, 0))
    return p.view(B, H, S + 1, T)[:, :, 1:].reshape(B, H, T, S)
def mha_shape2(x, mha, mask=None):  # heads scaled by sqrt(q.shape[2]) = sqrt(T)
    H = mha.n_heads
    q, k, v = (sp_right(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(at_shape2(q, k, v, mask)))
def mha_dim2(x, mha, mask=None):  # Ex. 1's softmax(dim=2) reused: over the queries on heads
    H = mha.n_heads
    q, k, v = (sp_right(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(at_dim2(q, k, v, mask)))
def mha_bigneg(x, mha, mask=None):  # -1e9 fill: empty rows get the mean of the values
    H = mha.n_heads
    q, k, v = (sp_right(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_right(at_big_neg(q, k, v, mask)))


# ---------------------------------------------------------------- extras
def at_bool_index(q, k, v, mask=None):  # s[~mask] = -inf: boolean indexing with a [T, S] mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[~mask] = float("-inf")
    return s.softmax(-1).nan_to_num(0.0) @ v
def sp_nheads_as_width(x, n_heads):  # n_heads read as the head width
    B, T, D = x.shape
    return x.view(B, T, -1, n_heads).transpose(1, 2)
def mha_residual(x, mha, mask=None):  # residual added as in a block
    H = mha.n_heads
    q, k, v = (sp_right(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    return x + mha.out_proj(mg_right(at_right(q, k, v, mask)))
def um_h_first(mem, h, mem_len):  # [h, mem]: order reversed
    cat = h if mem is None else torch.cat([h, mem], dim=1)
    return cat[:, cat.size(1) - min(cat.size(1), mem_len):].detach()
def sm_strict_lower(n, seg_len, mem_len):  # j > start - mem_len
    i = torch.arange(n)[:, None]; j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j > start - mem_len) & (j <= i)
def rd_transposed(t, m):  # [S, T]
    return m + torch.arange(t)[None, :] - torch.arange(m + t)[:, None]
def rs_drop_last(x):  # last row dropped instead of first
    *lead, T, S = x.shape
    p = F.pad(x, (1, 0))
    return p.reshape(*lead, S + 1, T)[..., :-1, :].reshape(*lead, T, S)
def rs_drop_pad_col(x):  # pad then drop the pad column: nothing moves
    return F.pad(x, (1, 0))[..., 1:]
def rsc_r_flipped(q, k, r, u, v):  # r flipped to distances 0..S-1
    return _rel(q, k, r.flip(0), u, v)
def rsc_bias_no_head_axis(q, k, r, u, v):  # q + u without u[:, None]
    d = q.size(-1)
    ac = (q + u) @ k.transpose(-2, -1)
    bd = relative_shift((q + v) @ r.permute(1, 2, 0))
    return (ac + bd) / math.sqrt(d)
def at_any_dim1(q, k, v, mask=None):  # empty rows found with mask.any(dim=1): from the front
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    w = w.masked_fill(~mask.any(dim=1, keepdim=True), 0.0)
    return w @ v
def aw_size3(q, k):  # width as q.size(3): written for the 4-D heads
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(3))).softmax(-1)
def mha_interleaved(x, mha, mask=None):  # interleaved split/merge pair (consistent, wrong layout)
    H = mha.n_heads
    q, k, v = (sp_interleaved(t, H) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(mg_interleaved(at_right(q, k, v, mask)))


# ---------------------------------------------------------------- cases
RIGHT["attention_weights"] = (check_attention_weights, aw_right)
case("aw_width_shape2", check_attention_weights, aw_shape2,
     r"shape\[2\]|size\(2\)|sqrt\(T\)|number of (tokens|queries)")
case("aw_softmax_dim2", check_attention_weights, aw_dim2,
     r"dim=2|over the queries")
case("aw_sigmoid", check_attention_weights, aw_sigmoid, r"sum to 1.*softmax")

RIGHT["attention"] = (check_attention, at_right)
case("at_fill_minus_1e9", check_attention, at_big_neg, r"large negative fill")
case("at_mask_mul_after_softmax", check_attention, at_mul_after, r"after the softmax")
case("at_masked_scores_zero", check_attention, at_where0, r"filled the masked scores with 0")
case("at_softmax_dim2", check_attention, at_dim2, r"dim=2|over the queries")
case("at_width_shape2", check_attention, at_shape2,
     r"shape\[2\]|size\(2\)|sqrt\(T\)|number of (tokens|queries)")

RIGHT["causal_mask"] = (check_causal_mask, cm_right)
case("cm_float_mask", check_causal_mask, cm_float, r"float32.*bool")
case("cm_leading_axis", check_causal_mask, cm_batched, r"extra axis")
case("cm_no_self", check_causal_mask, cm_no_self, r"itself")

RIGHT["heads"] = (check_heads, sp_right, mg_right)
case("hd_interleaved_split", check_heads, (sp_interleaved, mg_interleaved), r"interleaves")
case("hd_merge_view", check_heads, (sp_right, mg_view), r"contiguous")
case("hd_split_stack0", check_heads, (sp_stack0, mg_right), r"\[H, B, T, D_h\]")

RIGHT["multi_head_attention"] = (check_multi_head_attention, mha_right)
# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("multi_head_attention_sdpa", check_multi_head_attention, mha_sdpa, r"torch's fused attention is refused")
case("mha_out_proj_no_bias", check_multi_head_attention, mha_no_bias, r"bias")
case("mha_none_as_causal", check_multi_head_attention, mha_causal_default, r"causal")
case("mha_chunk_after_split", check_multi_head_attention, mha_chunk_after_split,
     r"cut per head|chunk\(3, dim=-1\) first")
case("mha_width_shape2", check_multi_head_attention, mha_shape2,
     r"sqrt\(T\)|shape\[2\]|size\(2\)|head width|d_head|D_h")

RIGHT["update_memory"] = (check_update_memory, um_right)
case("um_first_states", check_update_memory, um_first, r"oldest")
case("um_h_only", check_update_memory, um_h_only, r"dropped the old memory")
case("um_clone", check_update_memory, um_clone, r"detach")

RIGHT["segment_mask"] = (check_segment_mask, sm_right)
case("sm_segment_index", check_segment_mask, sm_index, r"segment's number")
case("sm_whole_segment", check_segment_mask, sm_block, r"future key.*j <= i")
case("sm_or", check_segment_mask, sm_or, r"\| \(or\)")

RIGHT["relative_distances"] = (check_relative_distances, rd_right)
case("rd_float", check_relative_distances, rd_float, r"float32.*Long")
case("rd_clamped", check_relative_distances, rd_clamp, r"get 0.*negative")
case("rd_no_m", check_relative_distances, rd_no_m, r"i - j.*m \+ i - j")

RIGHT["relative_shift"] = (check_relative_shift, rs_right)
case("rs_flat_rows", check_relative_shift, rs_flat, r"flattened the whole tensor")
case("rs_pad_right", check_relative_shift, rs_right_pad, r"padded on the right")
case("rs_roll_right", check_relative_shift, rs_roll_wrong, r"slide right")

RIGHT["relative_scores"] = (check_relative_scores, rsc_right)
case("rsc_u_v_swapped", check_relative_scores, rsc_swap, r"swapped")
case("rsc_no_shift", check_relative_scores, rsc_noshift, r"relative_shift")
case("rsc_content_only_scaled", check_relative_scores, rsc_content_scaled,
     r"only the content term")

# ---------------------------------------------------------------- extra cases
case("aw_width_size3", check_attention_weights, aw_size3, r"size\(-1\)|from the end")
case("at_bool_index", check_attention, at_bool_index, r"boolean indexing.*masked_fill")
case("at_any_dim1", check_attention, at_any_dim1, r"wrong axis.*dim=-1")
case("hd_nheads_as_width", check_heads, (sp_nheads_as_width, mg_right), r"swapped")
case("mha_residual", check_multi_head_attention, mha_residual, r"residual")
case("mha_interleaved_heads", check_multi_head_attention, mha_interleaved,
     r"interleav|contiguous slice|h ?\* ?D_h|\[B, T, H, D_h\]")
case("um_h_before_mem", check_update_memory, um_h_first, r"wrong order")
case("sm_lower_strict", check_segment_mask, sm_strict_lower, r"off by one.*>=")
case("rd_transposed", check_relative_distances, rd_transposed, r"\[S, T\]")
case("rs_drop_last_row", check_relative_shift, rs_drop_last, r"dropped the last row")
case("rs_pad_col_dropped", check_relative_shift, rs_drop_pad_col, r"unshifted")
case("rsc_r_flipped", check_relative_scores, rsc_r_flipped, r"reversed")
case("rsc_bias_no_head_axis", check_relative_scores, rsc_bias_no_head_axis, r"u\[:, None\]")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
