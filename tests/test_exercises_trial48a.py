"""Trial 48a: a blind learner trial of notebook 01's five exercises (198 new answers).

Wrong answers that passed: a causal mask cut from a fixed-size buffer (1024; the largest t
tried was 300), or built from positions in float16 (wrong past 2048); a cached mask
(`functools.lru_cache`, a dict of views of one grown buffer) that every call returns
again, so that a caller's in-place edit changes the next call's; a `merge_heads` that
reshapes to the width the last `split_heads` call saved; a multi-head attention that
clones the module's weights once and reuses them after a training step; a finite fill of
-1e4 or -65504 (the float16 round refuses -1e9, not these). Messages: Exercise 5 gave
torch's raw error for `q *= scale` on a view of the chunks (under advice about transposes),
Exercise 2 torch's broadcast error for `(~mask.any(1)).unsqueeze(-1)`, Exercise 4 torch's
"cannot resize variables that require grad" for a `resize_` in `merge_heads`."""
import functools
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (
    check_attention, check_causal_mask, check_heads, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- Exercise 3: the causal mask ----
_BUF = torch.tril(torch.ones(1024, 1024, dtype=torch.bool))


def mask_buffer_1024(t):
    return _BUF[:t, :t]


def mask_arange_f16(t):
    r = torch.arange(t, dtype=torch.half)
    return r[None, :] <= r[:, None]


def mask_cumsum_f16(t):
    c = torch.ones(t, t, dtype=torch.half).cumsum(1)
    return c <= c.diagonal()[:, None] if t else torch.zeros(0, 0, dtype=torch.bool)


@functools.lru_cache(maxsize=None)
def mask_lru_cache(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


_GROWN = {"m": torch.ones(0, 0, dtype=torch.bool)}


def mask_grown_buffer(t):
    if _GROWN["m"].size(0) < t:
        _GROWN["m"] = torch.ones(t, t, dtype=torch.bool).tril()
    return _GROWN["m"][:t, :t]


def mask_rows_loop(t):  # one row at a time: slow in Python, right
    m = torch.zeros(t, t, dtype=torch.bool)
    for i in range(t):
        m[i, :i + 1] = True
    return m


def mask_fresh_clone(t):  # a cached buffer, cloned on every call: right
    if _GROWN["m"].size(0) < t:
        _GROWN["m"] = torch.ones(t, t, dtype=torch.bool).tril()
    return _GROWN["m"][:t, :t].clone()


RIGHT["mask_float32_arange"] = (
    check_causal_mask, lambda t: (lambda r: r[None, :] <= r[:, None])(torch.arange(t).float()))
RIGHT["mask_rows_loop"] = (check_causal_mask, mask_rows_loop)
RIGHT["mask_fresh_clone"] = (check_causal_mask, mask_fresh_clone)
case("mask_buffer_1024", check_causal_mask, mask_buffer_1024,
     r"fixed size, 1024, cut to t.*too small for t > 1024")
case("mask_arange_f16", check_causal_mask, mask_arange_f16, r"float16.*2048.*int64")
case("mask_cumsum_f16", check_causal_mask, mask_cumsum_f16, r"float16.*2048.*int64")
case("mask_lru_cache", check_causal_mask, mask_lru_cache,
     r"same tensor.*edits.*next call.*new mask on every call")
case("mask_grown_buffer", check_causal_mask, mask_grown_buffer,
     r"same tensor.*edits.*next call.*new mask on every call")


# ---- Exercise 4: split and merge heads ----
_SAVED = [None]


def split_saving_width(x, n_heads):
    b, t, d = x.shape
    _SAVED[0] = d
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_saved_width(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, _SAVED[0])


def split_right(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_resize(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).contiguous().resize_(b, t, h * dh)


def merge_right(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


case("merge_saved_width", check_heads, (split_saving_width, merge_saved_width),
     r"size saved by the last split_heads.*x\.shape")
case("merge_resize", check_heads, (split_right, merge_resize),
     r"resize_.*requires grad.*reshape")


# ---- Exercise 2: attention with a mask ----
def _attention(fill, empty=lambda mask: ~mask.any(-1, keepdim=True), where=False):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            return s.softmax(-1) @ v
        s = torch.where(mask, s, fill) if where else s.masked_fill(~mask, fill)
        return s.softmax(-1).masked_fill(empty(mask), 0.0) @ v
    return attention


RIGHT["attention_finfo_min"] = (check_attention, lambda q, k, v, mask=None: _attention(
    torch.finfo(q.dtype).min)(q, k, v, mask))
case("attention_fill_m1e4", check_attention, _attention(-1e4),
     r"far below 0.*finite fill lies above those scores.*-inf")
case("attention_fill_m1e4_where", check_attention, _attention(-1e4, where=True),
     r"far below 0.*finite fill lies above those scores.*-inf")
case("attention_fill_f16_min", check_attention, _attention(-65504.0),
     r"far below 0.*finite fill lies above those scores.*-inf")
case("attention_any1_no_keepdim", check_attention,
     _attention(float("-inf"), empty=lambda mask: (~mask.any(1)).unsqueeze(-1)),
     r"mask\.any\(1\).*queries of a \[B, T, S\].*any\(dim=-1, keepdim=True\)")


# ---- Exercise 5: multi-head attention ----
def _attend(q, k, v, mask, fill=float("-inf")):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v


def _mha(fill=float("-inf")):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (split_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        return mha.out_proj(merge_right(_attend(q, k, v, mask, fill)))
    return multi_head_attention


_KEPT = {}


def mha_weights_kept(x, mha, mask=None):
    if mha not in _KEPT:
        b = mha.qkv.bias
        _KEPT[mha] = [w.clone() for w in mha.qkv.weight.chunk(3, 0)] + [
            None if b is None else b.clone()]
    wq, wk, wv, b = _KEPT[mha]
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    q, k, v = (split_right(F.linear(x, w, c), mha.n_heads)
               for w, c in ((wq, bq), (wk, bk), (wv, bv)))
    return mha.out_proj(merge_right(_attend(q, k, v, mask)))


def mha_scale_in_place(x, mha, mask=None):
    q, k, v = (split_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    q *= mha.d_head ** -0.5
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


def mha_scale_out_of_place(x, mha, mask=None):
    q, k, v = (split_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    q = q * mha.d_head ** -0.5
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


RIGHT["mha_scale_out_of_place"] = (check_multi_head_attention, mha_scale_out_of_place)
RIGHT["mha_finfo_min"] = (check_multi_head_attention,
                          lambda x, mha, mask=None: _mha(torch.finfo(x.dtype).min)(x, mha, mask))
case("mha_weights_kept", check_multi_head_attention, mha_weights_kept,
     r"weights changed in place.*old weights.*between calls")
case("mha_fill_m1e4", check_multi_head_attention, _mha(-1e4),
     r"finite fill.*above those scores.*-inf")
case("mha_fill_f16_min", check_multi_head_attention, _mha(-65504.0),
     r"finite fill.*above those scores.*-inf")
case("mha_fill_m5e4", check_multi_head_attention, _mha(-5e4),  # a fill the round does not list
     r"finite fill.*above those scores.*-inf")


def mha_scores_clamped(x, mha, mask=None):  # scores held above -1e4: right on ordinary ones
    q, k, v = (split_right(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).clamp(min=-1e4)
    if mask is None:
        return mha.out_proj(merge_right(s.softmax(-1) @ v))
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(merge_right(w @ v))


case("mha_scores_clamped", check_multi_head_attention, mha_scores_clamped,
     r"shifted by -1e5.*clamped scores \(clamp\(-c, c\) or clamp\(min=-c\)")
case("mha_scale_in_place", check_multi_head_attention, mha_scale_in_place,
     r"in place.*view.*chunks.*q = q \*")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
