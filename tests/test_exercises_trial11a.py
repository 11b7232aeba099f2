"""Learner trial 11a (issue 28): notebooks 01 and 02, new slips on every exercise."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests
from torch import nn

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 01 · Exercise 1: weights
def weights_right(q, k):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s.softmax(dim=-1)


def weights_times_sqrt(q, k):  # multiplies by sqrt(d) instead of dividing
    return (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_sqrt_t(q, k):  # q.shape[1] (T, the queries) taken for the width
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[1])).softmax(dim=-1)


def weights_inplace_q(q, k):  # scales the caller's q in place
    q /= math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1)).softmax(dim=-1)


def weights_no_dim(q, k):  # F.softmax without dim: the implicit dim of a 3-D tensor is 0
    return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))


def weights_floor_div(q, k):  # // instead of /
    return (q @ k.transpose(-2, -1) // math.sqrt(q.size(-1))).softmax(dim=-1)


def weights_max_queries(q, k):  # "stable" softmax, the max taken over the queries
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s - s.max(dim=1, keepdim=True).values
    return s.exp() / s.exp().sum(-1, keepdim=True)


def weights_einsum_swapped(q, k):  # einsum's output letters in the wrong order
    s = torch.einsum("btd,bsd->bst", q, k) / math.sqrt(q.size(-1))
    return s.softmax(dim=-1)


RIGHT["weights"] = (check_attention_weights, weights_right)
case("w_times_sqrt", check_attention_weights, weights_times_sqrt,
     r"(multipl|times).*sqrt|sqrt.*(multipl|divid)|scale")
case("w_sqrt_t", check_attention_weights, weights_sqrt_t,
     r"sqrt.*(T|quer|q\.size\(-1\)|width)|scale")
case("w_inplace_q", check_attention_weights, weights_inplace_q,
     r"in[- ]place|(chang|modif|overwr).*\bq\b|caller")
case("w_no_dim", check_attention_weights, weights_no_dim,
     r"dim|axis|batch|over the keys")
case("w_floor_div", check_attention_weights, weights_floor_div,
     r"//|floor|integer|round")
case("w_max_queries", check_attention_weights, weights_max_queries,
     r"max|over the quer|wrong axis|dim=1")
case("w_einsum_swapped", check_attention_weights, weights_einsum_swapped,
     r"transpos|\[B, S, T\]|swapp|keys.*quer")


# ---------------------------------------------------------------- 01 · Exercise 2: attention
def attention_right(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def attention_times_mask(q, k, v, mask=None):  # multiplies the scores by the mask (0, not -inf)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s * mask
    return s.softmax(dim=-1) @ v


def attention_if_mask(q, k, v, mask=None):  # `if mask:` instead of `if mask is not None:`
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(s.softmax(dim=-1)) @ v


def attention_none_causal(q, k, v, mask=None):  # None read as "the causal mask"
    if mask is None:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
    return attention_right(q, k, v, mask)


def attention_returns_tuple(q, k, v, mask=None):  # returns (output, weights) like labnn's
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(s.softmax(dim=-1))
    return w @ v, w


def attention_any_queries(q, k, v, mask=None):  # empty rows found with `any` over the queries
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
    return w @ v


def attention_torch_sdpa(q, k, v, mask=None):  # PyTorch's kernel: right (all-False rows: 0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def attention_one_minus(q, k, v, mask=None):  # `1 - mask` to negate a bool mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(1 - mask, float("-inf"))
    return torch.nan_to_num(s.softmax(dim=-1)) @ v


RIGHT["attention"] = (check_attention, attention_right)
# stop 41: torch's fused attention leaves an empty row to its kernel (NaN as documented)
case("attention_sdpa", check_attention, attention_torch_sdpa, r"torch's fused attention is refused")
case("a_times_mask", check_attention, attention_times_mask,
     r"-inf|(multipl|times).*mask|masked scores|before the softmax")
case("a_if_mask", check_attention, attention_if_mask,
     r"is not None|if mask|ambiguous|truth value")
case("a_none_causal", check_attention, attention_none_causal,
     r"None.*(no mask|every key|causal)|causal")
case("a_returns_tuple", check_attention, attention_returns_tuple,
     r"tuple")
case("a_any_queries", check_attention, attention_any_queries,
     r"NaN|all[- ]False|any.*(keys|dim=-1|axis)")
case("a_one_minus", check_attention, attention_one_minus,
     r"~|1 - mask|bool.*(negat|invert)|logical_not")


# ---------------------------------------------------------------- 01 · Exercise 3: causal mask
def causal_right(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def causal_nn_transformer(t):  # nn.Transformer's mask: float, -inf = masked
    return nn.Transformer.generate_square_subsequent_mask(t)


def causal_tril_indices(t):  # tril_indices gives the indices, not a mask
    return torch.tril_indices(t, t)


def causal_numpy(t):  # a NumPy array
    return np.tril(np.ones((t, t), dtype=bool))


def causal_empty(t):  # torch.empty: uninitialised memory, not True
    return torch.empty(t, t, dtype=torch.bool).tril()


def causal_diagonal_1(t):  # tril(diagonal=1): one future key too many
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=1)


RIGHT["causal"] = (check_causal_mask, causal_right)
case("c_nn_transformer", check_causal_mask, causal_nn_transformer,
     r"-inf|additive|generate_square")
case("c_tril_indices", check_causal_mask, causal_tril_indices,
     r"torch\.tril_indices|index pairs")
case("c_numpy", check_causal_mask, causal_numpy,
     r"ndarray|NumPy")
case("c_empty", check_causal_mask, causal_empty,
     r"torch\.empty|uninitiali|torch\.ones")
case("c_diagonal_1", check_causal_mask, causal_diagonal_1,
     r"i \+ 1|next token|future|j > i")


# ---------------------------------------------------------------- 01 · Exercise 4: heads
def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def merge_view(x):  # view on the transposed (non-contiguous) tensor
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def split_permute_0231(x, n_heads):  # permute to [B, H, D_h, T]
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).permute(0, 2, 3, 1)


def merge_flatten_1(x):  # flatten(1) also flattens the tokens
    return x.transpose(1, 2).flatten(1)


def split_chunk_tokens(x, n_heads):  # chunk along dim 1 (tokens), not the features
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)


def merge_sum(x):  # heads summed, not concatenated
    return x.sum(dim=1)


def split_transpose_last(x, n_heads):  # transpose(-2, -1) as in Exercise 1
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(-2, -1)


RIGHT["heads"] = (check_heads, split_right, merge_right)
case("h_merge_view", check_heads, (split_right, merge_view),
     r"reshape|contiguous|view")
case("h_split_permute_0231", check_heads, (split_permute_0231, merge_right),
     r"split.*(D_h.*T|tokens.*last|axes|order|permute)")
case("h_merge_flatten_1", check_heads, (split_right, merge_flatten_1),
     r"merge.*(\[B, T, H \* D_h\]|tokens|flatten)")
case("h_split_chunk_tokens", check_heads, (split_chunk_tokens, merge_right),
     r"split.*(tokens|features|last axis|dim)")
case("h_merge_sum", check_heads, (split_right, merge_sum),
     r"merge.*(sum|concat|H \* D_h)")
case("h_split_transpose_last", check_heads, (split_transpose_last, merge_right),
     r"split.*(transpose|tokens.*heads|axes 1 and 2|\[B, T, D_h, H\])")


# ---------------------------------------------------------------- 01 · Exercise 5: multi-head
def mha_right(x, mha, mask=None):
    q, k, v = (split_right(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_split_3(x, mha, mask=None):  # split(3): chunks OF size 3, not 3 chunks
    q, k, v = mha.qkv(x).split(3, dim=-1)
    return mha.out_proj(merge_right(attention_right(
        *(split_right(t, mha.n_heads) for t in (q, k, v)), mask)))


def mha_qvk(x, mha, mask=None):  # chunks unpacked as q, v, k
    q, v, k = (split_right(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_right(attention_right(q, k, v, mask)))


def mha_no_bias(x, mha, mask=None):  # projections written out as matmuls, biases forgotten
    qkv = x @ mha.qkv.weight.T
    q, k, v = (split_right(t, mha.n_heads) for t in qkv.chunk(3, dim=-1))
    return merge_right(attention_right(q, k, v, mask)) @ mha.out_proj.weight.T


def mha_calls_module(x, mha, mask=None):  # calls mha itself
    return mha(x, mask)[0]


def mha_is_causal(x, mha, mask=None):  # any mask taken as the causal one
    q, k, v = (split_right(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None)
    return mha.out_proj(merge_right(out))


def mha_residual(x, mha, mask=None):  # adds the residual, as a transformer block does
    return x + mha_right(x, mha, mask)


def mha_dropout(x, mha, mask=None):  # F.dropout on the weights: training=True by default
    q, k, v = (split_right(t, mha.n_heads) for t in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = F.dropout(s.softmax(dim=-1), 0.1)
    return mha.out_proj(merge_right(w @ v))


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("m_split_3", check_multi_head_attention, mha_split_3,
     r"chunk|split\(3|three")
case("m_qvk", check_multi_head_attention, mha_qvk,
     r"(order|swap).*(k|v|key|value)|q, k, v")
case("m_no_bias", check_multi_head_attention, mha_no_bias,
     r"bias")
case("m_calls_module", check_multi_head_attention, mha_calls_module,
     r"mha\(x\)|calls? .*(mha|module)|yourself")
case("m_is_causal", check_multi_head_attention, mha_is_causal,
     r"causal|mask.*(ignor|not used|given)")
case("m_residual", check_multi_head_attention, mha_residual,
     r"residual|\+ x|x \+|adds? (the )?(input|x)")
case("m_dropout", check_multi_head_attention, mha_dropout,
     r"dropout|random|differ.*(call|run)|determin")


# ---------------------------------------------------------------- 02 · Exercise 1: memory
def memory_right(mem, h, mem_len):
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):].detach()


def memory_clone(mem, h, mem_len):  # clone() instead of detach(): the graph stays
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):].clone()


def memory_zeros_init(mem, h, mem_len):  # no memory yet = mem_len zero states
    if mem is None:
        mem = torch.zeros(h.size(0), mem_len, h.size(2), dtype=h.dtype)
    return memory_right(mem, h, mem_len)


def memory_none_for_0(mem, h, mem_len):  # mem_len = 0 gives None, not [B, 0, D]
    return None if mem_len == 0 else memory_right(mem, h, mem_len)


def memory_only_h(mem, h, mem_len):  # the old memory dropped: right only when T >= mem_len
    return h[:, max(0, h.size(1) - mem_len):].detach()


def memory_stack(mem, h, mem_len):  # stack instead of cat
    cat = h if mem is None else torch.stack([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):].detach()


def memory_if_not(mem, h, mem_len):  # `if not mem:` instead of `if mem is None:`
    cat = h if not mem else torch.cat([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):].detach()


def memory_detach_inplace(mem, h, mem_len):  # detach_() cuts the caller's own h
    h.detach_()
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    return cat[:, max(0, cat.size(1) - mem_len):]


RIGHT["memory"] = (check_update_memory, memory_right)
case("u_clone", check_update_memory, memory_clone,
     r"detach|gradient|graph|requires_grad")
case("u_zeros_init", check_update_memory, memory_zeros_init,
     r"zeros|zero states|pad")
case("u_none_for_0", check_update_memory, memory_none_for_0,
     r"Tensor.*None|None.*(mem_len = 0|empty)|\[B, 0, D\]")
case("u_only_h", check_update_memory, memory_only_h,
     r"old memory|mem.*(dropped|kept|concat)|\[mem, h\]")
case("u_stack", check_update_memory, memory_stack,
     r"torch\.cat\b|concatenat")
case("u_if_not", check_update_memory, memory_if_not,
     r"is None|if not mem|ambiguous")
case("u_detach_inplace", check_update_memory, memory_detach_inplace,
     r"detach_|in[- ]place|caller|your h|changed h")


# ---------------------------------------------------------------- 02 · Exercise 2: segment mask
def segmask_right(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j <= i) & (j >= start - mem_len)


def segmask_no_multiply(n, seg_len, mem_len):  # start = i // seg_len: the segment's number
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i // seg_len - mem_len)


def segmask_mem_segments(n, seg_len, mem_len):  # mem_len read as a number of segments
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j <= i) & (j >= start - mem_len * seg_len)


def segmask_python_and(n, seg_len, mem_len):  # `and` instead of `&`
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j <= i) and (j >= start - mem_len)


def segmask_full_segments(n, seg_len, mem_len):  # loop over n // seg_len full segments only
    mask = torch.zeros(n, n, dtype=torch.bool)
    for s in range(n // seg_len):
        a, b = s * seg_len, (s + 1) * seg_len
        for i in range(a, b):
            mask[i, max(0, a - mem_len):i + 1] = True
    return mask


def segmask_strict_lower(n, seg_len, mem_len):  # j > start - mem_len: one memory key short
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j <= i) & (j > start - mem_len)


RIGHT["segmask"] = (check_segment_mask, segmask_right)
case("s_no_multiply", check_segment_mask, segmask_no_multiply,
     r"start\(i\)|multipl|\* seg_len|segment's (first|start)")
case("s_mem_segments", check_segment_mask, segmask_mem_segments,
     r"mem_len (positions|keys|states)|segments|\* seg_len")
case("s_python_and", check_segment_mask, segmask_python_and,
     r"&")
case("s_full_segments", check_segment_mask, segmask_full_segments,
     r"last.*(segment|partial)|n (is )?not a multiple|partial|incomplete")
case("s_strict_lower", check_segment_mask, segmask_strict_lower,
     r"(oldest|first) (memory )?key|>=|start\(i\) - mem_len.*(in|allowed)|one (key|position)")


# ---------------------------------------------------------------- 02 · Exercise 3: distances
def dist_right(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_no_m(t, m):  # i - j, the memory offset forgotten
    return torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def dist_sign(t, m):  # j - (m + i): key minus query
    return torch.arange(m + t)[None, :] - (m + torch.arange(t)[:, None])


def dist_memory_keys_only(t, m):  # S = m keys, the segment's own keys forgotten
    return m + torch.arange(t)[:, None] - torch.arange(m)[None, :]


def dist_abs(t, m):  # |m + i - j|: "distance" taken as always positive
    return (m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]).abs()


def dist_float(t, m):  # float aranges: the distances are floats
    f = torch.float
    return m + torch.arange(t, dtype=f)[:, None] - torch.arange(m + t, dtype=f)[None]


def dist_clamped(t, m):  # future keys clamped to 0 ("they are masked anyway")
    return dist_right(t, m).clamp(min=0)


RIGHT["distances"] = (check_relative_distances, dist_right)
case("d_no_m", check_relative_distances, dist_no_m,
     r"\bm\b|M \+|memory|offset")
case("d_sign", check_relative_distances, dist_sign,
     r"sign|negat|j - i|i - j|revers")
case("d_memory_keys_only", check_relative_distances, dist_memory_keys_only,
     r"m \+ t|S = m \+ t|segment's (own )?keys|\[T, S\]|keys")
case("d_abs", check_relative_distances, dist_abs,
     r"abs|negative|future|sign")
case("d_float", check_relative_distances, dist_float,
     r"Long|int64|dtype|float")
case("d_clamped", check_relative_distances, dist_clamped,
     r"negative|future|clamp")


# ---------------------------------------------------------------- 02 · Exercise 4: shift
def shift_right(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_drop_last(x):  # drops the last row instead of the first
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def shift_pad_row(x):  # F.pad(x, (0, 0, 1, 0)): a row on top, not a column in front
    *lead, t, s = x.shape
    padded = F.pad(x, (0, 0, 1, 0))
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_drop_first_leading(x):  # viewed[1:] as in the 2-D demo: drops a batch entry
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0))
    return padded.reshape(*lead, s + 1, t)[1:].reshape(*lead, t, s)


def shift_roll(x):  # one roll of every row by the same amount
    return torch.roll(x, shifts=1, dims=-1)


def shift_flip(x):  # reverse the columns: distances S-1 .. 0 become 0 .. S-1
    return x.flip(-1)



RIGHT["shift"] = (check_relative_shift, shift_right)
case("r_drop_last", check_relative_shift, shift_drop_last,
     r"first row|drop.*first|\[\.\.\., 1:")
case("r_pad_row", check_relative_shift, shift_pad_row,
     r"column|last axis|\(1, 0\)|pad")
case("r_drop_first_leading", check_relative_shift, shift_drop_first_leading,
     r"leading|batch|\.\.\.|first row of the last")
case("r_roll", check_relative_shift, shift_roll,
     r"roll|per row|each row|different amount")
case("r_flip", check_relative_shift, shift_flip,
     r"flip|revers|per row|each row")


# ---------------------------------------------------------------- 02 · Exercise 5: scores
def _shift(x):
    return shift_right(x)


def rel_right(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + _shift(bd)) / math.sqrt(q.size(-1))


def rel_bias_no_axis(q, k, r, u, v):  # q + u: u's head axis meets the queries' axis
    ac = torch.einsum("bhtd,bhsd->bhts", q + u, k)
    bd = torch.einsum("bhtd,shd->bhts", q + v, r)
    return (ac + _shift(bd)) / math.sqrt(q.size(-1))


def rel_inplace_q(q, k, r, u, v):  # q += u changes the caller's q
    q += u[:, None]
    ac = torch.einsum("bhtd,bhsd->bhts", q, k)
    bd = torch.einsum("bhtd,shd->bhts", q - u[:, None] + v[:, None], r)
    return (ac + _shift(bd)) / math.sqrt(q.size(-1))


def rel_shift_sum(q, k, r, u, v):  # the shift applied to the sum of both terms
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return _shift(ac + bd) / math.sqrt(q.size(-1))


def rel_shift_content(q, k, r, u, v):  # the content term shifted, the position term not
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (_shift(ac) + bd) / math.sqrt(q.size(-1))


def rel_r_flipped(q, k, r, u, v):  # r read as distances 0 .. S-1
    return rel_right(q, k, r.flip(0), u, v)


def rel_scale_precedence(q, k, r, u, v):  # ac + shift(bd) / sqrt: only one term scaled
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return ac + _shift(bd) / math.sqrt(q.size(-1))


def rel_bias_on_keys(q, k, r, u, v):  # the biases added to the keys, not the queries
    ac = torch.einsum("bhtd,bhsd->bhts", q, k + u[:, None])
    bd = torch.einsum("bhtd,shd->bhts", q, r + v)
    return (ac + _shift(bd)) / math.sqrt(q.size(-1))


RIGHT["rel_scores"] = (check_relative_scores, rel_right)
case("x_bias_no_axis", check_relative_scores, rel_bias_no_axis,
     r"u\[:, None\]|query axis|broadcast|\[H, 1, D_h\]")
case("x_inplace_q", check_relative_scores, rel_inplace_q,
     r"in[- ]place|caller|(chang|modif).*\bq\b|\+=")
case("x_shift_sum", check_relative_scores, rel_shift_sum,
     r"(only|just) .*(position|\(b\) ?\+ ?\(d\)|r)|content.*(not|shift)")
case("x_shift_content", check_relative_scores, rel_shift_content,
     r"(shift|moved?).*(position|content)|content.*shift|\(a\) ?\+ ?\(c\)")
case("x_r_flipped", check_relative_scores, rel_r_flipped,
     r"revers|flip|S - 1|order of .*distances|distances .*order")
case("x_scale_precedence", check_relative_scores, rel_scale_precedence,
     r"(both|whole|sum|all).*sqrt|sqrt.*(both|whole|sum|content|\(a\))|parenthes")
case("x_bias_on_keys", check_relative_scores, rel_bias_on_keys,
     r"(bias|u|v).*(quer|keys)|keys.*bias")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
