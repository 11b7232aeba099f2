"""Learner trial 13a (issue 28): typical slips on notebooks 01 and 02, one case each."""

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


# ---- 01 / Exercise 1: attention weights ----------------------------------------------------
def weights_ok(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_sqrt_s(q, k):  # d read as the number of keys
    return (q @ k.transpose(-2, -1) / math.sqrt(k.size(-2))).softmax(dim=-1)


def weights_div_d(q, k):  # divides by d, not sqrt(d)
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1)


def weights_scale_after(q, k):  # scales after the softmax
    return (q @ k.transpose(-2, -1)).softmax(dim=-1) / math.sqrt(q.size(-1))


def weights_times_sqrt(q, k):  # multiplies by sqrt(d)
    return (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(dim=-1)


RIGHT["weights"] = (check_attention_weights, weights_ok)
case("weights_sqrt_s", check_attention_weights, weights_sqrt_s,
     r"(?i)(scal|sqrt|√).*(key|S\b|width)")
case("weights_div_d", check_attention_weights, weights_div_d,
     r"(?i)(divid|scal).*(sqrt|√|square root)")
case("weights_scale_after", check_attention_weights, weights_scale_after,
     r"(?i)(before|after).*softmax|sum.*1")
case("weights_times_sqrt", check_attention_weights, weights_times_sqrt,
     r"(?i)(multipl|divid|scal).*(sqrt|√)")


# ---- 01 / Exercise 2: attention with a mask ------------------------------------------------
def attention_ok(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def attention_sqrt_dv(q, k, v, mask=None):  # scales by the values' width
    s = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def attention_mask_after(q, k, v, mask=None):  # multiplies weights by the mask after softmax
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v


def attention_big_negative(q, k, v, mask=None):  # -1e9, so an all-False row is uniform
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(dim=-1) @ v


def attention_if_mask(q, k, v, mask=None):  # `if mask:` on a tensor
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(dim=-1)) @ v


RIGHT["attention"] = (check_attention, attention_ok)
case("attention_sqrt_dv", check_attention, attention_sqrt_dv,
     r"(?i)(sqrt|√|scal).*(value|D_v|q\.size|width of (the )?quer)")
case("attention_mask_after", check_attention, attention_mask_after,
     r"(?i)(before|after) the softmax|sum to 1|renormal")
case("attention_big_negative", check_attention, attention_big_negative,
     r"(?i)(all[- ]False|no True|nothing).*(zero|uniform)|(zero|uniform).*(all[- ]False|no True)")
case("attention_if_mask", check_attention, attention_if_mask,
     r"(?i)is not None|if mask|truth value|ambiguous")


# ---- 01 / Exercise 3: causal mask ----------------------------------------------------------
def causal_ok(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))


def causal_hide_future(t):  # the nn.Transformer convention: True = hidden
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def causal_no_self(t):  # strict lower triangle: the token cannot see itself
    return torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=-1)


def causal_float(t):  # forgets the bool dtype
    return torch.tril(torch.ones(t, t))


def causal_upper(t):  # triu: the keys after the query
    return torch.triu(torch.ones(t, t, dtype=torch.bool))


def weights_no_dim(q, k):  # F.softmax without dim: dim 0 (the batch) for a 3-D tensor
    return F.softmax(  # no dim=
        q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))


def weights_transpose01(q, k):  # transposes the first two axes of k
    return (q @ k.transpose(0, 1) / math.sqrt(q.size(-1))).softmax(dim=-1)


case("weights_no_dim", check_attention_weights, weights_no_dim, r"(?i)dim=-1|dim\b|batch")
case("weights_transpose01", check_attention_weights, weights_transpose01,
     r"(?i)transpose\(0, 1\)|first two|batch (axis|and)")


def attention_index_mask(q, k, v, mask=None):  # boolean indexing with a [T, S] mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s[~mask] = float("-inf")
    return torch.nan_to_num(s.softmax(dim=-1)) @ v


def attention_tuple(q, k, v, mask=None):  # returns (output, weights), like labnn's
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))
    if mask is not None:
        w = w.masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(w.softmax(dim=-1))
    return w @ v, w


case("attention_index_mask", check_attention, attention_index_mask,
     r"(?i)masked_fill|broadcast|index")
case("attention_tuple", check_attention, attention_tuple, r"(?i)tuple|only the output|weights")

def weights_elementwise(q, k):  # q * k summed: one score per position, not per pair
    return ((q * k).sum(-1, keepdim=True) / math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_log_softmax(q, k):  # log_softmax, not softmax
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(dim=-1)


case("weights_elementwise", check_attention_weights, weights_elementwise,
     r"(?i)@|matmul|matrix product|every (query, key )?pair")
case("weights_log_softmax", check_attention_weights, weights_log_softmax, r"(?i)log_?softmax|log")


def attention_fill_zero(q, k, v, mask=None):  # masked scores set to 0, not -inf
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    return s.softmax(dim=-1) @ v


case("attention_fill_zero", check_attention, attention_fill_zero, r"(?i)-inf|minus infinity|-∞")


def weights_half(q, k):  # half precision "to save memory"
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).half().softmax(dim=-1)


def weights_inplace_q(q, k):  # scales the caller's q in place
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(dim=-1)


case("weights_half", check_attention_weights, weights_half, r"(?i)float16|half|dtype")
case("weights_inplace_q", check_attention_weights, weights_inplace_q,
     r"(?i)in[- ]place|caller|modif")


def attention_nan_rows(q, k, v, mask=None):  # no special case for all-False rows
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(dim=-1) @ v


case("attention_nan_rows", check_attention, attention_nan_rows,
     r"(?i)all[- ]False.*NaN|NaN.*all[- ]False")


def weights_pow_precedence(q, k):  # d ** 1/2 is (d ** 1) / 2
    return (q @ k.transpose(-2, -1) / q.size(-1) ** 1 / 2).softmax(dim=-1)


case("weights_pow_precedence", check_attention_weights, weights_pow_precedence,
     r"(?i)d ?/ ?2|\*\* ?1 ?/ ?2|precedence|bracket|\*\* ?0\.5")


def weights_cosine(q, k):  # cosine similarity instead of the scaled dot product
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return (qn @ kn.transpose(-2, -1)).softmax(dim=-1)


case("weights_cosine", check_attention_weights, weights_cosine, r"(?i)normali[sz]|cosine|length")


def attention_unsqueeze1(q, k, v, mask=None):  # treats the mask as a key-padding mask [B, S]
    if mask is not None:
        mask = mask.unsqueeze(1)
    return attention_ok(q, k, v, mask)


case("attention_unsqueeze1", check_attention, attention_unsqueeze1,
     r"(?i)unsqueeze|\[T, S\]|already|extra axis|key.padding")


def weights_manual_max_axis(q, k):  # hand-written softmax, max taken over the queries
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = (s - s.max(dim=1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)


case("weights_manual_max_axis", check_attention_weights, weights_manual_max_axis,
     r"(?i)max.*(dim=-1|row|keys)|(row|each query).*max")


def attention_mul_scores(q, k, v, mask=None):  # multiplies the scores by the mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(dim=-1) @ v


case("attention_mul_scores", check_attention, attention_mul_scores,
     r"(?i)-inf|multipl|exp\(0\)")


RIGHT["causal"] = (check_causal_mask, causal_ok)
case("causal_hide_future", check_causal_mask, causal_hide_future,
     r"(?i)invert|True = may attend|negat|flip")
case("causal_no_self", check_causal_mask, causal_no_self, r"(?i)diagonal|itself")
case("causal_float", check_causal_mask, causal_float, r"(?i)bool")
case("causal_upper", check_causal_mask, causal_upper, r"(?i)upper|transpos|future|j > i|tril")


# ---- 01 / Exercise 4: split and merge heads ------------------------------------------------
def split_ok(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_ok(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def split_strided(x, n_heads):  # head h gets features h, h+H, h+2H, ...
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)


def merge_strided(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def merge_no_transpose(x):  # reshape straight from [B, H, T, D_h]
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def merge_view(x):  # view on the transposed (non-contiguous) tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def split_transpose_last(x, n_heads):  # transposes the tokens with D_h, not with the heads
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 3)


def causal_4d(t):  # [1, 1, t, t], ready to broadcast, as in GPT code
    return torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]


case("causal_4d", check_causal_mask, causal_4d, r"(?i)\[t, t\]|\[4, 4\]|extra|\[1, 1")

def causal_numpy(t):  # numpy's tril
    import numpy as np
    return np.tril(np.ones((t, t), dtype=bool))


case("causal_numpy", check_causal_mask, causal_numpy, r"(?i)numpy|ndarray|torch\.")


RIGHT["heads"] = (check_heads, split_ok, merge_ok)
case("heads_strided", check_heads, (split_strided, merge_strided),
     r"(?i)(feature|slice).*(h ?\* ?D_h|contiguous|strid|interleav)|h\*D_h")
case("heads_merge_no_transpose", check_heads, (split_ok, merge_no_transpose),
     r"(?i)merge.*(transpos|mix|order)|transpose.*before")
case("heads_merge_view", check_heads, (split_ok, merge_view), r"(?i)reshape|contiguous")
case("heads_split_swapped", check_heads, (split_transpose_last, merge_ok),
     r"(?i)split.*(transpos|order|axes)|D_h, H, T\]")


# ---- 01 / Exercise 5: multi-head attention -------------------------------------------------
def _mha(x, mha, mask, scale_heads=True, out=True, merge=merge_ok, sdpa_float=False):
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_ok(z, mha.n_heads) for z in (q, k, v))
    if sdpa_float:
        m = None if mask is None else mask.float()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    else:
        y = attention_ok(q, k, v, mask)
    y = merge(y)
    return mha.out_proj(y) if out else y


def mha_ok(x, mha, mask=None):
    return _mha(x, mha, mask)


def mha_no_out_proj(x, mha, mask=None):  # forgets W^O
    return _mha(x, mha, mask, out=False)


def mha_float_mask(x, mha, mask=None):  # float mask to F.sdpa: added, not masking
    return _mha(x, mha, mask, sdpa_float=True)


def mha_causal_default(x, mha, mask=None):  # adds a causal mask when mask is None
    t = x.size(1)
    if mask is None:
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    return _mha(x, mha, mask)


def mha_merge_mixed(x, mha, mask=None):  # merges without moving the head axis back
    return _mha(x, mha, mask, merge=merge_no_transpose)


def merge_no_reshape(x):  # stops at [B, T, H, D_h]
    return x.transpose(1, 2)


case("heads_merge_no_reshape", check_heads, (split_ok, merge_no_reshape),
     r"(?i)reshape|H \* D_h|\[B, T, D\]")

def merge_cat_dim1(x):  # joins the heads along the tokens
    return torch.cat(x.unbind(1), dim=1)


def split_plain_reshape(x, n_heads):  # the reshape the notebook warns about
    b, t, d = x.shape
    return x.reshape(b, n_heads, t, d // n_heads)


def merge_plain_reshape(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


case("heads_merge_cat_dim1", check_heads, (split_ok, merge_cat_dim1),
     r"(?i)dim=-1|last axis|features|along the tokens|\[B, T, H \* D_h\]")
case("heads_plain_reshape", check_heads, (split_plain_reshape, merge_plain_reshape),
     r"(?i)transpos|mix")


def split_bt_swapped(x, n_heads):  # B and T read in the wrong order
    b, t, d = x.shape
    return x.view(t, b, n_heads, d // n_heads).permute(1, 2, 0, 3)


case("heads_split_bt_swapped", check_heads, (split_bt_swapped, merge_ok),
     r"(?i)batch|B and T|\[B, T")


def merge_transpose_last(x):  # transpose(-2, -1) from habit: swaps T and D_h
    b, h, t, dh = x.shape
    return x.transpose(-2, -1).reshape(b, t, h * dh)


case("heads_merge_transpose_last", check_heads, (split_ok, merge_transpose_last),
     r"(?i)transpose\(1, 2\)|transpose\(-2, -1\)|D_h and T|T and D_h")


RIGHT["mha"] = (check_multi_head_attention, mha_ok)
case("mha_no_out_proj", check_multi_head_attention, mha_no_out_proj,
     r"(?i)out_proj|W\^?O|output projection")
case("mha_float_mask", check_multi_head_attention, mha_float_mask,
     r"(?i)(float|bool).*mask|mask.*(float|bool|ignored|added)")
case("mha_causal_default", check_multi_head_attention, mha_causal_default,
     r"(?i)(None|no mask).*(causal|every key)|causal")
case("mha_merge_mixed", check_multi_head_attention, mha_merge_mixed,
     r"(?i)merge|mix.*(head|token)|transpos")


# ---- 02 / Exercise 1: update memory --------------------------------------------------------
def update_ok(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def update_first(mem, h, mem_len):  # keeps the oldest states
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, :mem_len].detach()


def update_order(mem, h, mem_len):  # new states before the old ones
    x = h if mem is None else torch.cat([h, mem], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def update_h_only(mem, h, mem_len):  # the memory is the last states of h alone
    return h[:, max(h.size(1) - mem_len, 0):].detach()


def update_batch_axis(mem, h, mem_len):  # concatenates along the batch
    x = h if mem is None else torch.cat([mem, h], dim=0)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


def _mha_raw(x, mha, mask, scale, chunk_after=False):
    b, t, d = x.shape
    h = mha.n_heads
    if chunk_after:
        y = mha.qkv(x).view(b, t, h, 3 * d // h).transpose(1, 2)
        q, k, v = y.chunk(3, dim=-1)
    else:
        q, k, v = (split_ok(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge_ok(s.softmax(dim=-1) @ v))


def mha_scale_model(x, mha, mask=None):  # sqrt(D), not sqrt(D_h)
    return _mha_raw(x, mha, mask, math.sqrt(x.size(-1)))


def mha_split_then_chunk(x, mha, mask=None):  # splits heads first, then chunks q, k, v
    return _mha_raw(x, mha, mask, math.sqrt(x.size(-1) // mha.n_heads), chunk_after=True)


case("mha_scale_model", check_multi_head_attention, mha_scale_model,
     r"(?i)(sqrt|√).*(D_h|head)")
case("mha_split_then_chunk", check_multi_head_attention, mha_split_then_chunk,
     r"(?i)chunk.*(before|first)|(q, k, v|Q, K, V).*(side by side|chunk)")

def mha_ignores_mask(x, mha, mask=None):  # never passes the mask on
    return _mha(x, mha, None)


def mha_calls_module(x, mha, mask=None):  # calls the module itself
    return mha(x, mask)[0]


case("mha_ignores_mask", check_multi_head_attention, mha_ignores_mask,
     r"(?i)mask.*(ignor|not applied|unused|given)")
case("mha_calls_module", check_multi_head_attention, mha_calls_module,
     r"(?i)mha\(x\)|itself|does not count")


def mha_chunk_dim0(x, mha, mask=None):  # chunks along the batch
    q, k, v = mha.qkv(x).chunk(3, dim=0)
    return mha_ok(x, mha, mask)


def mha_out_weight_no_T(x, mha, mask=None):  # y @ W^O written out: no .T, no bias
    return _mha(x, mha, mask, out=False) @ mha.out_proj.weight


case("mha_chunk_dim0", check_multi_head_attention, mha_chunk_dim0, r"(?i)dim=-1|last axis|chunk")
case("mha_out_weight_no_T", check_multi_head_attention, mha_out_weight_no_T,
     r"(?i)weight\.T|transpos|bias|out_proj\(")


def mha_dhead_as_h(x, mha, mask=None):  # splits into d_head heads
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_ok(z, mha.d_head) for z in (q, k, v))
    return mha.out_proj(merge_ok(attention_ok(q, k, v, mask)))


def mha_is_causal(x, mha, mask=None):  # any mask taken to be the causal one
    q, k, v = (split_ok(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None)
    return mha.out_proj(merge_ok(y))


case("mha_dhead_as_h", check_multi_head_attention, mha_dhead_as_h, r"(?i)n_heads|d_head")
case("mha_is_causal", check_multi_head_attention, mha_is_causal,
     r"(?i)is_causal|mask (argument )?is ignored.*causal")


def mha_residual(x, mha, mask=None):  # adds the residual, as a block does
    return x + mha_ok(x, mha, mask)


case("mha_residual", check_multi_head_attention, mha_residual, r"(?i)residual|x \+|adds? x")


def mha_single_head(x, mha, mask=None):  # never splits into heads
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    return mha.out_proj(attention_ok(q, k, v, mask))


case("mha_single_head", check_multi_head_attention, mha_single_head,
     r"(?i)(split|one head|single head|heads)")


RIGHT["update"] = (check_update_memory, update_ok)
case("update_first", check_update_memory, update_first, r"(?i)(last|newest|oldest|first)")
case("update_order", check_update_memory, update_order, r"(?i)order|\[mem, h\]|mem.*before|after")
case("update_h_only", check_update_memory, update_h_only,
     r"(?i)(old|previous) memory|mem\b.*(ignor|drop|lost)")
case("update_batch_axis", check_update_memory, update_batch_axis, r"(?i)dim(ension)? ?1|time|batch")


# ---- 02 / Exercise 2: segment mask ---------------------------------------------------------
def segmask_ok(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = i // seg_len * seg_len
    return (j <= i) & (j >= start - mem_len)


def segmask_no_causal(n, seg_len, mem_len):  # forgets j <= i
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return j >= i // seg_len * seg_len - mem_len


def segmask_prev_segment(n, seg_len, mem_len):  # "the previous segment": right iff M == seg_len
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j // seg_len >= i // seg_len - 1)


def segmask_sliding(n, seg_len, mem_len):  # window from i, not from the segment start
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i - mem_len)


def segmask_and(n, seg_len, mem_len):  # Python `and` on tensors
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) and (j >= i // seg_len * seg_len - mem_len)


def update_neg_slice(mem, h, mem_len):  # x[:, -mem_len:] keeps everything for mem_len = 0
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, -mem_len:].detach()


case("update_neg_slice", check_update_memory, update_neg_slice, r"(?i)mem_len ?= ?0|-0")

def update_none_no_trim(mem, h, mem_len):  # no memory yet: returns h untrimmed
    if mem is None:
        return h.detach()
    x = torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].detach()


case("update_none_no_trim", check_update_memory, update_none_no_trim,
     r"(?i)mem is None|None.*(mem_len|trim|last)|no memory")


def update_negative_start(mem, h, mem_len):  # start = size - mem_len, can be negative
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, x.size(1) - mem_len:].detach()


def update_clone(mem, h, mem_len):  # clone() instead of detach(): the graph stays
    x = h if mem is None else torch.cat([mem, h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):].clone()


case("update_negative_start", check_update_memory, update_negative_start,
     r"(?i)fewer|negative|max\(|min\(")
case("update_clone", check_update_memory, update_clone, r"(?i)detach|clone|grad")


def update_none_for_zero(mem, h, mem_len):  # mem_len = 0: "no memory", None
    if mem_len == 0:
        return None
    return update_ok(mem, h, mem_len)


case("update_none_for_zero", check_update_memory, update_none_for_zero,
     r"(?i)Tensor.*None|None.*Tensor|empty")


def update_detach_mem_only(mem, h, mem_len):  # detaches the old memory, not the new states
    x = h if mem is None else torch.cat([mem.detach(), h], dim=1)
    return x[:, max(x.size(1) - mem_len, 0):]


case("update_detach_mem_only", check_update_memory, update_detach_mem_only,
     r"(?i)detach")


RIGHT["segmask"] = (check_segment_mask, segmask_ok)
case("segmask_no_causal", check_segment_mask, segmask_no_causal, r"(?i)future|j <= i|causal")
case("segmask_prev_segment", check_segment_mask, segmask_prev_segment,
     r"(?i)mem_len.*(seg_len|segment)|previous segment")
case("segmask_sliding", check_segment_mask, segmask_sliding,
     r"(?i)start\(i\)|segment start|sliding|i - mem_len")
case("segmask_and", check_segment_mask, segmask_and, r"(?i)&|\band\b|element")


# ---- 02 / Exercise 3: relative distances ---------------------------------------------------
def dist_ok(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_flipped(t, m):  # j - (m + i)
    return torch.arange(m + t)[None, :] - (m + torch.arange(t)[:, None])


def dist_no_m(t, m):  # i - j, query i taken at key position i
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_float(t, m):  # float distances
    return m + torch.arange(t, dtype=torch.float)[:, None] - torch.arange(m + t)[None, :]


def dist_abs(t, m):  # absolute value: future keys positive
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


def segmask_strict(n, seg_len, mem_len):  # start - mem_len < j
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j > i // seg_len * seg_len - mem_len)


case("segmask_strict", check_segment_mask, segmask_strict,
     r"(?i)>=|one (key|position) (short|too)|off")

def segmask_no_multiply(n, seg_len, mem_len):  # start(i) = i // seg_len: the segment number
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i // seg_len - mem_len)


case("segmask_no_multiply", check_segment_mask, segmask_no_multiply,
     r"(?i)\* ?seg_len|multipl|segment number|index of the segment")


def segmask_mod(n, seg_len, mem_len):  # start(i) = i % seg_len, the offset in the segment
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i % seg_len - mem_len)


case("segmask_mod", check_segment_mask, segmask_mod, r"(?i)%|offset|remainder")


def segmask_key_segment(n, seg_len, mem_len):  # rounds the key down to its segment too
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j // seg_len * seg_len >= i // seg_len * seg_len - mem_len)


case("segmask_key_segment", check_segment_mask, segmask_key_segment,
     r"(?i)(key|j).*(segment|round)|j >= start")


def segmask_no_self(n, seg_len, mem_len):  # j < i: not itself
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j < i) & (j >= i // seg_len * seg_len - mem_len)


case("segmask_no_self", check_segment_mask, segmask_no_self, r"(?i)itself|diagonal|j <= i")


RIGHT["dist"] = (check_relative_distances, dist_ok)
case("dist_flipped", check_relative_distances, dist_flipped, r"(?i)sign|j - i|negat")
case("dist_no_m", check_relative_distances, dist_no_m, r"(?i)\bm\b|memory|M \+ i|offset")
case("dist_float", check_relative_distances, dist_float, r"(?i)long|int|dtype")
case("dist_abs", check_relative_distances, dist_abs, r"(?i)abs|negative|future|sign")


# ---- 02 / Exercise 4: relative shift -------------------------------------------------------
def shift_ok(x):
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def shift_pad_right(x):  # pads on the right
    *lead, t, s = x.shape
    p = F.pad(x, (0, 1)).reshape(*lead, s + 1, t)
    return p[..., 1:, :].reshape(*lead, t, s)


def shift_drop_last(x):  # drops the last row
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., :-1, :].reshape(*lead, t, s)


def shift_2d_only(x):  # loses the leading dimensions
    t, s = x.shape[-2:]
    p = F.pad(x, (1, 0)).reshape(-1, s + 1, t)
    return p[:, 1:].reshape(t, s) if x.dim() == 2 else p[..., 1:, :].reshape(x.shape[0], t, s)


def shift_transpose(x):  # "read as [S+1, T]" done with a transpose
    p = F.pad(x, (1, 0)).transpose(-2, -1)
    return p[..., 1:, :].transpose(-2, -1)


def dist_keys_t(t, m):  # keys 0 .. t-1 only: forgets the memory keys
    return m + torch.arange(t)[:, None] - torch.arange(t)[None, :]


case("dist_keys_t", check_relative_distances, dist_keys_t, r"(?i)m \+ t|S = |memory keys|keys")

def dist_double_m(t, m):  # query positions m .. m+t-1, then + m again
    return m + torch.arange(m, m + t)[:, None] - torch.arange(m + t)[None, :]


case("dist_double_m", check_relative_distances, dist_double_m, r"(?i)twice|2 ?\*? ?m|double|\+ m")


def dist_transposed(t, m):  # [S, T]: keys as rows
    return m + torch.arange(t)[None, :] - torch.arange(m + t)[:, None]


case("dist_transposed", check_relative_distances, dist_transposed, r"(?i)transpos|\[T, S\]|rows")


def dist_int32(t, m):  # .int() is int32, not long
    return dist_ok(t, m).int()


case("dist_int32", check_relative_distances, dist_int32, r"(?i)int64|long")


RIGHT["shift"] = (check_relative_shift, shift_ok)
case("shift_pad_right", check_relative_shift, shift_pad_right, r"(?i)left|pad")
case("shift_drop_last", check_relative_shift, shift_drop_last, r"(?i)first row|drop")
case("shift_2d_only", check_relative_shift, shift_2d_only, r"(?i)leading|batch|\.\.\.")
case("shift_transpose", check_relative_shift, shift_transpose, r"(?i)reshape|transpos")


# ---- 02 / Exercise 5: relative scores ------------------------------------------------------
def _scores(q, k, r, u, v, shift=True, swap=False, scale_all=True, bias_axis=True):
    if swap:
        u, v = v, u
    ub, vb = (u[:, None], v[:, None]) if bias_axis else (u[None], v[None])
    ac = torch.einsum("bhtd,bhsd->bhts", q + ub, k)
    bd = torch.einsum("bhtd,shd->bhts", q + vb, r)
    if shift:
        bd = relative_shift(bd)
    d = math.sqrt(q.size(-1))
    return (ac + bd) / d if scale_all else ac + bd / d


def scores_ok(q, k, r, u, v):
    return _scores(q, k, r, u, v)


def scores_swapped(q, k, r, u, v):  # u with the position keys, v with the content keys
    return _scores(q, k, r, u, v, swap=True)


def scores_no_shift(q, k, r, u, v):  # forgets relative_shift
    return _scores(q, k, r, u, v, shift=False)


def scores_scale_bd_only(q, k, r, u, v):  # ac + bd / sqrt(d): a missing bracket
    return _scores(q, k, r, u, v, scale_all=False)


def scores_in_place(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q - u[:, None] + v[:, None], r)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


def scores_bias_axis(q, k, r, u, v):  # u[None] instead of u[:, None]
    return _scores(q, k, r, u, v, bias_axis=False)


def shift_pad_rows(x):  # F.pad(x, (0, 0, 1, 0)): a zero row on top, not a column
    *lead, t, s = x.shape
    p = F.pad(x, (0, 0, 1, 0))
    return p.reshape(*lead, s, t + 1)[..., :, 1:].reshape(*lead, t, s)


case("shift_pad_rows", check_relative_shift, shift_pad_rows, r"(?i)column|last axis|\(1, 0\)")

def shift_t1_s(x):  # reads the padded scores as [T + 1, S]
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, t + 1, s)
    return p[..., 1:, :].reshape(*lead, t, s)


case("shift_t1_s", check_relative_shift, shift_t1_s, r"(?i)S \+ 1, T|\[\.\.\., S \+ 1")


def shift_flip(x):  # reverses the columns: distances S-1..0 -> 0..S-1
    return x.flip(-1)


case("shift_flip", check_relative_shift, shift_flip, r"(?i)flip|revers|slide|per row|T - 1 - i")


def shift_drop_col(x):  # [..., 1:] drops a column, not the first row
    *lead, t, s = x.shape
    p = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return p[..., 1:].reshape(*lead, t, s)


case("shift_drop_col", check_relative_shift, shift_drop_col, r"(?i)first row|1:, :|column")


def shift_4d_only(x):  # unpacks four axes: "any leading dims" not read
    b, h, t, s = x.shape
    p = F.pad(x, (1, 0)).view(b, h, s + 1, t)
    return p[:, :, 1:].reshape(b, h, t, s)


case("shift_4d_only", check_relative_shift, shift_4d_only, r"(?i)leading|\*lead|any number")


RIGHT["scores"] = (check_relative_scores, scores_ok)
case("scores_swapped", check_relative_scores, scores_swapped, r"(?i)\bu\b.*\bv\b|swap|bias")
case("scores_no_shift", check_relative_scores, scores_no_shift, r"(?i)shift")
case("scores_scale_bd_only", check_relative_scores, scores_scale_bd_only,
     r"(?i)(scal|sqrt|√|divid).*(both|all|content|\(a\)|whole|sum)")
case("scores_in_place", check_relative_scores, scores_in_place,
     r"(?i)in[- ]place|caller|changed|modif")
case("scores_bias_axis", check_relative_scores, scores_bias_axis,
     r"(?i)(u|v|bias).*(axis|broadcast|\[H)")

def scores_r_layout(q, k, r, u, v):  # treats r as [H, S, D_h]
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,hsd->bhts", q + v[:, None], r.reshape(r.size(1), r.size(0), -1))
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("scores_r_layout", check_relative_scores, scores_r_layout, r"(?i)\[S, H, D_h\]|permute|layout")

def scores_flip_r(q, k, r, u, v):  # reverses r, taking it for distances 0 .. S-1
    return _scores(q, k, r.flip(0), u, v)


def scores_no_bias(q, k, r, u, v):  # leaves out u and v: terms (c) and (d)
    return _scores(q, k, r, torch.zeros_like(u), torch.zeros_like(v))


case("scores_flip_r", check_relative_scores, scores_flip_r, r"(?i)flip|revers|S-1 \.\. 0|order")
case("scores_no_bias", check_relative_scores, scores_no_bias, r"(?i)\bu\b|bias|\(c\)|\(d\)")


def scores_transposed(q, k, r, u, v):  # [B, H, S, T]
    return _scores(q, k, r, u, v).transpose(-2, -1)


def scores_no_scale(q, k, r, u, v):  # forgets sqrt(d_head)
    return _scores(q, k, r, u, v) * math.sqrt(q.size(-1))


case("scores_transposed", check_relative_scores, scores_transposed, r"(?i)transpos|\[B, H, T, S\]")
case("scores_no_scale", check_relative_scores, scores_no_scale, r"(?i)sqrt|√|scale|divid")


def scores_shift_both(q, k, r, u, v):  # shifts the content term too
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return relative_shift(ac + bd) / math.sqrt(q.size(-1))


case("scores_shift_both", check_relative_scores, scores_shift_both,
     r"(?i)(only|content).*(shift|position)|shift.*(only|content)")


def scores_sqrt_dmodel(q, k, r, u, v):  # sqrt(H * D_h), the model width
    return _scores(q, k, r, u, v) * math.sqrt(q.size(-1)) / math.sqrt(q.size(1) * q.size(-1))


case("scores_sqrt_dmodel", check_relative_scores, scores_sqrt_dmodel, r"(?i)d_head|D_h|head width")


def scores_bias_on_keys(q, k, r, u, v):  # q . (k + u) instead of (q + u) . k
    ac = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    bd = torch.einsum("bhtd,shd->bhts", q, r + v[None])
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))


case("scores_bias_on_keys", check_relative_scores, scores_bias_on_keys,
     r"(?i)(u|v|bias).*(quer|q \+)|q \+ u")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
