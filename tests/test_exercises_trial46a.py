"""Trial 46a: a blind learner trial of notebook 01's five exercises (277 answers).

Wrong answers that passed: a finite fill of the masked scores (-1e9, the float32 minimum),
which float16 cannot hold (masked_fill raises; the float32 minimum fails in bfloat16 too),
where labnn's attention runs under autocast; in multi-head attention, the mask applied after
the softmax and the weights renormalised (right until a masked key scores some 100 above
the allowed ones: Exercise 2 tries that, Exercise 5 did not); a `split_heads` by
`as_strided`, wrong on the chunks of `mha.qkv(x)` that Exercise 5 splits (every input of the
check was contiguous); a multi-head attention that adds `mha.qkv.bias` whatever it is, which
fails for `MultiHeadAttention(..., bias=False)` (every module of the check had biases).
Messages: Exercise 5 gave torch's bare dtype error for an `x.float()`; Exercise 2 told an
answer that never zeroes an empty row about products and the wrong axis it did not use; an
in-place change of `mha` got 425 characters."""
import math

import pytest
from checker_helpers import trial_case, trial_tests

import torch
import torch.nn.functional as F

from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.self_attention import (
    check_attention, check_heads, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(fill):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, fill)
        w = s.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ v
    return attention


def _heads(x, mha):
    b, t, d = x.shape
    return [z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1)]


def _mha(fill=float("-inf"), after=False, cast=False):
    def multi_head_attention(x, mha, mask=None):
        if cast:
            x = x.float()
        b, t, d = x.shape
        q, k, v = _heads(x, mha)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None and not after:
            s = s.masked_fill(~mask, fill)
        w = s.softmax(-1)
        if mask is not None and after:  # masked after the softmax, then renormalised
            w = w * mask
            total = w.sum(-1, keepdim=True)
            w = w / torch.where(total > 0, total, torch.ones_like(total))
        elif mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


def _by_hand(project, out):
    """Multi-head attention with the projections written out: `project(x, mha)` gives the
    fused q, k, v, `out(y, mha)` the output projection."""
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        qkv = project(x, mha)
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in qkv.chunk(3, -1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return out((w @ v).transpose(1, 2).reshape(b, t, d), mha)
    return multi_head_attention


# the biases added whatever they are: None + tensor for a module built with bias=False
mha_biases_always = _by_hand(lambda x, m: x @ m.qkv.weight.T + m.qkv.bias,
                             lambda y, m: y @ m.out_proj.weight.T + m.out_proj.bias)
mha_biases_if_any = _by_hand(lambda x, m: F.linear(x, m.qkv.weight, m.qkv.bias),
                             lambda y, m: F.linear(y, m.out_proj.weight, m.out_proj.bias))


def split_as_strided(x, n_heads):  # right only for a contiguous x
    b, t, d = x.shape
    dh = d // n_heads
    return x.as_strided((b, n_heads, t, dh), (t * d, dh, d, 1))


def split_view(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def split_reshape(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(-3, -2)


def merge(x):
    return x.transpose(1, 2).flatten(2)


HALF = r"(?i)float16|half|-inf|finfo"
case("attention_fill_minus_1e9", check_attention, _attention(-1e9), HALF)
case("attention_fill_float32_min", check_attention,
     _attention(torch.finfo(torch.float32).min), HALF)
case("mha_fill_minus_1e9", check_multi_head_attention, _mha(fill=-1e9), HALF)
case("mha_masked_after_softmax_renormalised", check_multi_head_attention, _mha(after=True),
     r"(?i)before the softmax")
case("heads_as_strided", check_heads, (split_as_strided, merge),
     r"(?i)contiguous|as_strided|chunk|view")
case("mha_biases_always_added", check_multi_head_attention, mha_biases_always,
     r"(?i)bias=False|bias is None|without bias")
case("mha_cast_to_float32", check_multi_head_attention, _mha(cast=True), r"\.float\(\)")

RIGHT["attention_fill_minus_inf"] = (check_attention, _attention(float("-inf")))
RIGHT["mha_right"] = (check_multi_head_attention, _mha())
RIGHT["mha_biases_if_any"] = (check_multi_head_attention, mha_biases_if_any)
RIGHT["heads_view"] = (check_heads, split_view, merge)
RIGHT["heads_unflatten"] = (check_heads, split_reshape, merge)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def attention_never_zeroes(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def test_an_empty_row_never_zeroed_is_told_so_and_not_about_other_slips():
    """The answer zeroes nothing: the message blamed a product by the mask (`multiplying by a
    mask leaves NaN`) before saying to zero the rows; it now says to zero them first, and
    how (the product and the axis as how to, not as what the answer did)."""
    with pytest.raises(ExerciseFailed) as err:
        check_attention(attention_never_zeroes)
    text = str(err.value)
    assert "masked_fill" in text and "NaN" in text
    assert text.index("zero such rows") < text.index("not a product"), text
    assert "multiplying by a mask leaves" not in text, text
    assert len(text) < 400, text


def mha_changes_the_module(x, mha, mask=None):
    b, t, d = x.shape
    with torch.no_grad():  # the scale folded into the module's own weights
        mha.qkv.weight[:d] /= math.sqrt(mha.d_head)
        mha.qkv.bias[:d] /= math.sqrt(mha.d_head)
    q, k, v = _heads(x, mha)
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1).nan_to_num(0.0)
    return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))


def test_a_module_changed_in_place_is_told_so_briefly():
    with pytest.raises(ExerciseFailed) as err:
        check_multi_head_attention(mha_changes_the_module)
    text = str(err.value)
    assert "mha" in text and len(text) < 400, f"{len(text)}: {text}"
