"""Trial 64, notebook 01 (a learner's trial of the five exercises).

Accepted wrong: Exercise 2 with the masked scores filled with -inf and then clamped to
-1e4 (`clamp(min=-1e4)`) passed: the round whose allowed scores lie near -1e5 (float64)
returned quietly when no finite fill explained the difference. That round now compares,
and a clamp of the scores is named there and in the rounds of large scores.
Misnamed (a generic "differs" or the wrong mistake): scores clamped to [-50, 50] instead of
masked; the mask of query 0 (`mask[0]`) used for every query; the mask cut to its lower
triangle (`mask.tril()`) in Exercise 2; multi-head scores divided by sqrt(D) / H; a causal
mask built as `~...tril(-1)`, told only that it is transposed; the strict triangle
`mask.tril(-1)` was told the softmax ran before the mask. Also named now: another query's
row (`mask[-1]`), the upper triangle (`mask.triu()`), the softmax of minus the scores.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_causal_mask, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _heads(x, mha):
    b, t, _ = x.shape
    return (z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))


def _merged(mha, y):
    b, _, t, _ = y.shape
    return mha.out_proj(y.transpose(1, 2).reshape(b, t, -1))


def _attention(mask_of=lambda mask: mask, clamp=None, scale=lambda q: q.size(-1) ** 0.5):
    """Exercise 2's attention with the mask changed by `mask_of`, the filled scores
    clamped to `clamp` (lo, hi) and the scores divided by `scale(q)`."""
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / scale(q)
        m = None if mask is None else mask_of(mask)
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        if clamp is not None:
            s = s.clamp(*clamp)
        w = s.softmax(-1)
        if m is not None:
            w = w.masked_fill(~m.any(-1, keepdim=True), 0.0)
        return w @ v
    return attention


def _mha(attention):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = _heads(x, mha)
        return _merged(mha, attention(q, k, v, mask))
    return multi_head_attention


CLAMPED = r"clamped scores \(clamp\(-50, 50\)"
case("attention_clamp_50", check_attention, _attention(clamp=(-50, 50)), CLAMPED)
FAR_CLAMP = r"clamped scores \(clamp\(-c, c\) or clamp\(min=-c\), any c from 5 to"
case("mha_clamp_50", check_multi_head_attention, _mha(_attention(clamp=(-50, 50))), FAR_CLAMP)
case("attention_clamp_min_1e4", check_attention, _attention(clamp=(-1e4, None)), FAR_CLAMP)
case("mha_clamp_min_1e4", check_multi_head_attention, _mha(_attention(clamp=(-1e4, None))),
     FAR_CLAMP)


def _clamped_when_masked(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    s = s.masked_fill(~mask, float("-inf")).clamp(min=-1e4)
    return s.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0) @ v


case("attention_clamp_min_1e4_masked", check_attention, _clamped_when_masked,
     r"far below 0.*clamped scores \(.*clamp\(min=-c\), any c from 200 to")
ROW0 = r"mask\[0\].*query 0.*every query"
case("attention_mask_row_0", check_attention, _attention(mask_of=lambda m: m[0]), ROW0)
case("mha_mask_row_0", check_multi_head_attention, _mha(_attention(mask_of=lambda m: m[0])),
     ROW0)
case("attention_mask_tril", check_attention, _attention(mask_of=lambda m: m.tril()),
     r"combined with a causal mask.*as it is")
case("attention_mask_row_last", check_attention, _attention(mask_of=lambda m: m[-1]),
     r"mask\[4\], the mask row of query 4, for every query")
case("attention_mask_strict_tril", check_attention, _attention(mask_of=lambda m: m.tril(-1)),
     r"combined with a causal mask \(mask\.tril\(-1\)")
case("attention_mask_triu", check_attention, _attention(mask_of=lambda m: m.triu()),
     r"upper triangle \(mask\.triu\(\)\)")
case("weights_negated", check_attention_weights,
     lambda q, k: (-(q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))).softmax(-1),
     r"minus the scores")
case("mha_sqrt_d_over_h", check_multi_head_attention,
     _mha(_attention(scale=lambda q: math.sqrt(q.size(-1) * 4) / 4)),
     r"sqrt\(d_model\) / n_heads.*sqrt\(d_model / n_heads\)")
case("causal_not_strict_tril", check_causal_mask,
     lambda t: ~torch.ones(t, t, dtype=torch.bool).tril(-1), r"transposed.*~.*tril\(-1\)")


def _clamped_to_finfo(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")).clamp(min=torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


RIGHT["attention_clamp_finfo_min"] = (check_attention, _clamped_to_finfo)
RIGHT["mha_clamp_finfo_min"] = (check_multi_head_attention, _mha(_clamped_to_finfo))



# Misnamed: Exercise 5 with the mask added to the scores as -inf (s + where(mask, 0, -inf)),
# empty rows zeroed right after the softmax, was told to zero them right after the softmax
# (Exercise 2 names the additive -inf); heads split feature-major (view(B, T, D_h, H)) got
# only "differs" (Exercise 4 names them).
def _mha_added_inf(x, mha, mask=None):
    q, k, v = _heads(x, mha)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + torch.where(mask, 0.0, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return _merged(mha, w @ v)


def _mha_feature_major(merge):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, -1, mha.n_heads).permute(0, 3, 1, 2)
                   for z in mha.qkv(x).chunk(3, -1))
        y = _attention()(q, k, v, mask)
        return mha.out_proj(merge(y).reshape(b, t, d))
    return multi_head_attention


case("mha_added_inf", check_multi_head_attention, _mha_added_inf,
     r"gradient of x is NaN.*adding log\(mask\) \(or -inf\)")
case("mha_split_feature_major", check_multi_head_attention,
     _mha_feature_major(lambda y: y.transpose(1, 2)), r"split feature-major.*h, h \+ H")
case("mha_split_merge_feature_major", check_multi_head_attention,
     _mha_feature_major(lambda y: y.permute(0, 2, 3, 1)), r"split feature-major.*merge back")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
