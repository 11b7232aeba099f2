"""Trial 53f: a blind learner trial of notebook 01's exercises (271 answers).

Wrong answers that passed: an allowed score of exactly 0 taken for a masked key
(`s = s * mask; s.masked_fill(s == 0, -inf)`; Exercise 5 blamed a softmax over every key);
torch's fused attention with its empty rows zeroed afterwards (`.nan_to_num(0)`,
`torch.where(mask.any(-1, keepdim=True), o, 0)`), now refused in Exercises 2 and 5 as in
Exercise 1; labnn's own `masked_softmax` (2, 5) and `MultiHeadAttention.split_heads` (4, 5);
causal masks of int16 positions (wrap past 32,767) or of
`torch.nn.Transformer.generate_square_subsequent_mask`; a one-key shortcut that ignores
the mask; a finite fill of -1e9 through `torch.where`. A per-batch loop handing the whole
`[B, T, S]` mask to each batch element was told of a `mask.unsqueeze(1)` it did not write.
"""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

import labnn.nn.attention as A
from labnn.exercises.self_attention import (check_attention, check_causal_mask, check_heads,
                                            check_multi_head_attention)
from labnn.nn.attention import MultiHeadAttention, masked_softmax

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def att(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def split(x, h):
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)


def merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def _mha(attention, splitter=None):
    def mha_fn(x, mha, mask=None):
        q, k, v = mha.qkv(x).chunk(3, -1)
        heads = [splitter(mha, z) if splitter else split(z, mha.n_heads) for z in (q, k, v)]
        return mha.out_proj(merge(attention(*heads, mask)))
    return mha_fn


def at_zero_as_masked(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s * mask
        s = s.masked_fill(s == 0, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


ZERO = r"score of 0 is not a masked key.*masked_fill\(~mask"
case("ex2_zero_score_as_masked", check_attention, at_zero_as_masked, ZERO)
case("ex5_zero_score_as_masked", check_multi_head_attention, _mha(at_zero_as_masked), ZERO)


def at_sdpa_nan_to_num(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)


def at_sdpa_where(q, k, v, mask=None):
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return o if mask is None else torch.where(mask.any(-1, keepdim=True), o, 0.0)


def at_aten_sdpa(q, k, v, mask=None):
    bias = None if mask is None else torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
    bias = None if mask is None else bias.masked_fill(~mask, -torch.inf)
    o = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=bias)[0]
    return o if mask is None else torch.where(mask.any(-1, keepdim=True), o, 0.0)


EX2_SDPA = r"Exercise 2 asks you to write the masking: torch's fused attention is refused"
EX5_SDPA = r"Exercise 5 asks .*torch's fused attention is refused"
case("ex2_sdpa_nan_to_num", check_attention, at_sdpa_nan_to_num, EX2_SDPA)
case("ex2_sdpa_where_zeroed", check_attention, at_sdpa_where, EX2_SDPA)
case("ex2_aten_sdpa_zeroed", check_attention, at_aten_sdpa, EX2_SDPA)
case("ex5_sdpa_nan_to_num", check_multi_head_attention, _mha(at_sdpa_nan_to_num), EX5_SDPA)


def at_masked_softmax(q, k, v, mask=None):
    return masked_softmax(_scores(q, k), mask) @ v


def at_module_masked_softmax(q, k, v, mask=None):
    return A.masked_softmax(_scores(q, k), mask) @ v


def _own_split(mha, z):
    return mha.split_heads(z)


OWN = r"masked_softmax"
case("ex2_labnn_masked_softmax", check_attention, at_masked_softmax, OWN)
case("ex2_labnn_masked_softmax_attribute", check_attention, at_module_masked_softmax, OWN)
case("ex5_labnn_split_heads_and_masked_softmax", check_multi_head_attention,
     _mha(at_masked_softmax, _own_split), r"split_heads|masked_softmax")
case("ex5_labnn_split_heads", check_multi_head_attention, _mha(att, _own_split),
     r"split_heads.*Exercises? 2 and 4")
case("ex4_labnn_split_heads", check_heads,
     (lambda x, h: MultiHeadAttention(x.size(-1), h).split_heads(x), merge),
     r"MultiHeadAttention\.split_heads")


def cm_int16(t):
    i = torch.arange(t, dtype=torch.int16)
    return i[None, :] <= i[:, None]


def cm_to_int16(t):
    i = torch.arange(t).to(torch.int16)
    return i[None, :] <= i[:, None]


INT16 = r"int16 wrap past 32,767: keep torch\.arange's int64"
case("ex3_int16_positions", check_causal_mask, cm_int16, INT16)
case("ex3_to_int16_positions", check_causal_mask, cm_to_int16, INT16)
TORCH_MASK = r"generate_square_subsequent_mask.*build the mask yourself"
case("ex3_torch_square_subsequent_eq0", check_causal_mask,
     lambda t: torch.nn.Transformer.generate_square_subsequent_mask(t) == 0, TORCH_MASK)
case("ex3_torch_square_subsequent_isinf", check_causal_mask,
     lambda t: ~torch.nn.Transformer.generate_square_subsequent_mask(t).isinf(), TORCH_MASK)


def at_one_key_shortcut(q, k, v, mask=None):
    if k.size(-2) == 1:
        return v.expand(*q.shape[:-1], v.size(-1))
    return att(q, k, v, mask)


case("ex2_one_key_shortcut", check_attention, at_one_key_shortcut, r"S = 1.*zeros")


def at_where_1e9(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = torch.where(mask, s, -1e9)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


case("ex2_where_fill_1e9", check_attention, at_where_1e9, r"finite fill.*float\('-inf'\)")


def at_loop_whole_mask(q, k, v, mask=None):
    return torch.stack([att(q[b], k[b], v[b], mask) for b in range(q.size(0))])


case("ex2_loop_whole_mask", check_attention, at_loop_whole_mask,
     r"\[B, B, T, D\].*mask\[b\]")


def at_loop_mask_b(q, k, v, mask=None):
    outs = []
    for b in range(q.size(0)):
        m = mask if mask is None or mask.dim() == 2 else mask[b]
        outs.append(att(q[b], k[b], v[b], m))
    return torch.stack(outs)


def at_where_inf(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = torch.where(mask, s, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = torch.where(mask.any(-1, keepdim=True), w, 0.0)
    return w @ v


def at_finfo_min(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    if mask is not None:
        w = w * mask.any(-1, keepdim=True)
    return w @ v


RIGHT["ex2_right"] = (check_attention, att)
RIGHT["ex2_loop_mask_b"] = (check_attention, at_loop_mask_b)
RIGHT["ex2_where_inf"] = (check_attention, at_where_inf)
RIGHT["ex2_finfo_min"] = (check_attention, at_finfo_min)
RIGHT["ex3_right"] = (check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril())
RIGHT["ex3_aranges"] = (check_causal_mask,
                        lambda t: torch.arange(t)[None, :] <= torch.arange(t)[:, None])
RIGHT["ex4_right"] = (check_heads, split, merge)
RIGHT["ex5_right"] = (check_multi_head_attention, _mha(att))
RIGHT["ex5_where_inf"] = (check_multi_head_attention, _mha(at_where_inf))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
