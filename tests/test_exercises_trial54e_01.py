"""Trial 54e, notebook 01: answers that keep state between calls (a systematic probe).

Wrong answers that passed, or were named as another mistake: a result cached in a dict keyed
on the inputs' shapes (with or without `.clone()`) or by `functools.lru_cache` on that key
(Exercise 4: "as_strided?"; Exercise 5: "the mask argument is ignored"); a result cached by
the inputs' `id()` or `data_ptr()` (passed everywhere: the same tensors refilled in place get
the old result); one output buffer per shape that every call overwrites (passed Exercise 4;
Exercise 1: "differs"; Exercise 5: "backward raised"); Exercise 2's zeros of a fully masked
call kept by shape and handed out as the same tensor; its mask kept by shape ("differs").
Right: the notebook's solutions, a view of v for a single key, a kept constant cloned.
"""
import functools
import math

import torch
from checker_helpers import trial_case, trial_tests
from kept_state_variants import EARLIER, VARIANTS

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_causal_mask, check_heads,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)




def attention_weights(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v


def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, d_head = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d_head)


def multi_head_attention(x, mha, mask=None):
    q, k, v = (split_heads(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_heads(attention(q, k, v, mask)))


for name, (wrap, said) in VARIANTS.items():
    case(f"aw_{name}", check_attention_weights, wrap(attention_weights), said)
    case(f"att_{name}", check_attention, wrap(attention), said)
    case(f"mha_{name}", check_multi_head_attention, wrap(multi_head_attention), said)
    case(f"merge_{name}", check_heads, (split_heads, wrap(merge_heads)), said)
    if not name.startswith("c_"):  # a cached view of the same tensor has its new values
        case(f"split_{name}", check_heads, (wrap(split_heads), merge_heads), said)


def _zeros_kept(clone):
    kept = {}

    def att(q, k, v, mask=None):
        if mask is not None and not bool(mask.any()):
            key = (q.shape[:-1] + v.shape[-1:], v.dtype, v.device)
            if key not in kept:
                kept[key] = torch.zeros(*key[0], dtype=v.dtype, device=v.device)
            return kept[key].clone() if clone else kept[key]
        return attention(q, k, v, mask)
    return att


def _mask_kept():
    kept = {}

    def att(q, k, v, mask=None):
        if mask is None:
            return attention(q, k, v)
        key = (tuple(mask.shape), mask.device)
        if key not in kept:
            kept[key] = (~mask, ~mask.any(dim=-1, keepdim=True))
        hidden, empty = kept[key]
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(hidden, -math.inf)
        return scores.softmax(-1).masked_fill(empty, 0.0) @ v
    return att


def _mha_global():
    kept = {}

    def mha_fn(x, mha, mask=None):
        key = (id(mha), tuple(x.shape))
        if key not in kept:
            kept[key] = multi_head_attention(x, mha, mask)
        return kept[key]
    return mha_fn


case("att_e_zeros_kept", check_attention, _zeros_kept(False), r"same tensor.*afresh")
case("att_e2_mask_kept", check_attention, _mask_kept(), r"earlier call's mask.*kept between calls")
case("mha_g2_global_by_id", check_multi_head_attention, _mha_global(), EARLIER)


@functools.lru_cache(maxsize=None)
def _inv_sqrt(d):  # lru_cache on a pure function of an int
    return 1 / math.sqrt(d)


def _v_view(q, k, v, mask=None):  # one key, nothing masked: the output is v, a view
    if k.size(-2) == 1 and (mask is None or bool(mask.all())):
        return v.expand(*v.shape[:-2], q.size(-2), v.size(-1))
    return attention(q, k, v, mask)


@functools.lru_cache(maxsize=None)
def _tril(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


RIGHT["aw_lru_scale"] = (check_attention_weights,
                         lambda q, k: (q @ k.transpose(-2, -1) * _inv_sqrt(q.size(-1))).softmax(-1))
RIGHT["att_right"] = (check_attention, attention)
RIGHT["att_view_of_v"] = (check_attention, _v_view)
RIGHT["att_zeros_kept_cloned"] = (check_attention, _zeros_kept(True))
RIGHT["cm_kept_cloned"] = (check_causal_mask, lambda t: _tril(t).clone())
RIGHT["heads_right"] = (check_heads, split_heads, merge_heads)
RIGHT["mha_right"] = (check_multi_head_attention, multi_head_attention)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
