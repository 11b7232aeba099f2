"""Trial 68, notebook 01 (a learner's trial of the five exercises).

Misnamed: in Exercise 1, a causal mask made with zeros (`.tril()` of the weights, in an
exercise with no mask) and the scores centred by their mean over the queries got a generic
"differs". In Exercise 2, empty rows found with an extra reduction over the batch of a
[B, T, S] mask were blamed on dim 1; the values reversed along the keys, and a causal mask
for mask=None applied as `softmax(s).tril()` (the rows not renormalised) got "differs". In
Exercise 4, tokens or batch reversed by merge_heads got a message that named no axis. In
Exercise 5, the heads summed then repeated, and a causal mask or-ed into the padding mask,
got "differs". Near misses tried beside them (each now named) and right alternatives follow.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_heads, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k):
    return q @ k.mT / math.sqrt(q.size(-1))


def _weights_tril(q, k):
    return _scores(q, k).tril().softmax(-1)


def _weights_query_mean(q, k):
    s = _scores(q, k)
    return (s - s.mean(-2, keepdim=True)).softmax(-1)


case("weights_tril_zeros", check_attention_weights, _weights_tril,
     r"tril.*no mask|no mask.*tril")
case("weights_query_mean", check_attention_weights, _weights_query_mean,
     r"mean over the queries|mean\(-2")


def _attention(q, k, v, mask=None, empty=lambda m: m.any(-1, keepdim=True),
               values=lambda v: v, none=None):
    s = _scores(q, k)
    if mask is None:
        w = s.softmax(-1) if none is None else none(s)
        return w @ values(v)
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return w.masked_fill(~empty(mask), 0) @ values(v)


def _batch_any(mask):  # the learner's reduction for a [B, T, S] mask: over the batch too
    rows = mask.any(-1, keepdim=True)
    return rows.any(0, keepdim=True) if mask.dim() == 3 else rows


case("attention_empty_batch_any", check_attention,
     lambda q, k, v, mask=None: _attention(q, k, v, mask, empty=_batch_any),
     r"reduces over the batch too \(dim 0.*mask\.any\(dim=-1, keepdim=True\)")
case("attention_values_flipped", check_attention,
     lambda q, k, v, mask=None: _attention(q, k, v, mask, values=lambda v: v.flip(-2)),
     r"values reversed along the keys")
case("attention_none_tril_after", check_attention,
     lambda q, k, v, mask=None: _attention(q, k, v, mask, none=lambda s: s.softmax(-1).tril()),
     r"mask=None.*causal|causal.*mask=None")


def _split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


case("merge_tokens_flipped", check_heads, (_split, lambda x: _merge(x.flip(2))),
     r"reversed along axis i \(dim 1\)")
case("merge_batch_flipped", check_heads, (_split, lambda x: _merge(x).flip(0)),
     r"reversed along axis b \(dim 0\)")


def _mha(attend=None, merge=None):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        s = _scores(q, k)
        m = mask if attend is None or mask is None else attend(mask, x.size(1), x.device)
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        w = s.softmax(-1)
        if m is not None:
            w = w.masked_fill(~m.any(-1, keepdim=True), 0.0)
        y = w @ v
        if merge is not None:
            return mha.out_proj(merge(y, mha.n_heads))
        return mha.out_proj(_merge(y))
    return multi_head_attention


def _or_causal(mask, t, device):
    return mask | torch.ones(t, t, dtype=torch.bool, device=device).tril()


case("mha_heads_summed_repeated", check_multi_head_attention,
     _mha(merge=lambda y, h: y.sum(1).repeat(1, 1, h)), r"sum")
case("mha_mask_or_causal", check_multi_head_attention, _mha(attend=_or_causal),
     r"causal")

# near misses tried beside the trial's (each named), and right alternatives (accepted)
NO_MASK = r"causal.*this exercise has no mask"
case("weights_causal_inf", check_attention_weights, lambda q, k: _scores(q, k).masked_fill(
    ~torch.ones(q.size(1), k.size(1), dtype=torch.bool).tril(), float("-inf")).softmax(-1),
     NO_MASK)
case("weights_tril_after", check_attention_weights,
     lambda q, k: _scores(q, k).softmax(-1).tril(), r"after the softmax.*no mask")
case("weights_batch_mean", check_attention_weights,
     lambda q, k: (_scores(q, k) - _scores(q, k).mean(0, keepdim=True)).softmax(-1),
     r"mean over the batch")
case("attention_weights_flipped", check_attention,
     lambda q, k, v, mask=None: _scores(q, k).softmax(-1).flip(-1) @ v,
     r"values reversed along the keys.*w\.flip\(-1\)")
case("attention_none_tril_scores", check_attention,
     lambda q, k, v, mask=None: _attention(q, k, v, mask, none=lambda s: s.tril().softmax(-1)),
     r"made with zeros.*mask=None means no mask")
case("attention_mask_or_causal", check_attention,
     lambda q, k, v, mask=None: _attention(
         q, k, v, None if mask is None else mask | torch.ones_like(mask).tril()),
     r"mask \| causal")
case("split_tokens_flipped", check_heads, (lambda x, h: _split(x, h).flip(2), _merge),
     r"reversed along axis i \(dim 2\)")
case("mha_heads_mean_interleaved", check_multi_head_attention,
     _mha(merge=lambda y, h: y.mean(1).repeat_interleave(h, -1)), r"mean over dim 1")

RIGHT["weights_key_mean"] = (check_attention_weights, lambda q, k: (
    _scores(q, k) - _scores(q, k).mean(-1, keepdim=True)).softmax(-1))
RIGHT["merge_permute_flatten"] = (check_heads, _split, lambda x: x.permute(0, 2, 1, 3).flatten(2))
RIGHT["mha_plain"] = (check_multi_head_attention, _mha())
RIGHT["merge_plain"] = (check_heads, _split, _merge)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
