"""Trial 66, notebook 01 (a learner's trial of the five exercises).

Misnamed (a generic "differs" or "an index, order or axis mixed up?"): in Exercise 5 the bias of
mha.out_proj (or of mha.qkv, or both) added a second time after calling the layer; in Exercises 4
and 5 the heads merged (or split) in another order (reversed with flip, rolled, a list of heads
reversed), or one head's output (head 0, the last) copied into every head's slot. The head order
is now read from the answer itself (Exercise 5: with mha.out_proj undone), so any permutation and
any repeated head is named. In Exercise 2, the scores scaled and then the output divided by
sqrt(d) once more got only "the reference times c = 0.2041".
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_attention, check_heads, check_multi_head_attention

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    return (w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0.0)) @ v


def _split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def _mha(merge=_merge, split=_split, qkv=lambda x, mha: mha.qkv(x),
         out=lambda y, mha: mha.out_proj(y)):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (split(z, mha.n_heads) for z in qkv(x, mha).chunk(3, dim=-1))
        return out(merge(_attention(q, k, v, mask)), mha)
    return multi_head_attention


def _bias(layer):
    return 0.0 if layer.bias is None else layer.bias


OUT_TWICE = r"mha\.out_proj\.bias is added twice: mha\.out_proj\(y\) adds it already"
case("mha_out_bias_twice", check_multi_head_attention,
     _mha(out=lambda y, mha: mha.out_proj(y) + _bias(mha.out_proj)), OUT_TWICE)
case("mha_qkv_bias_twice", check_multi_head_attention,
     _mha(qkv=lambda x, mha: mha.qkv(x) + _bias(mha.qkv)),
     r"mha\.qkv\.bias is added twice: mha\.qkv\(x\) adds it already")
case("mha_both_biases_twice", check_multi_head_attention,
     _mha(qkv=lambda x, mha: mha.qkv(x) + _bias(mha.qkv),
          out=lambda y, mha: mha.out_proj(y) + _bias(mha.out_proj)),
     r"the biases of mha\.qkv and mha\.out_proj are added twice")

ORDER = r"in the order \[{}\].*head h must fill features h\*D_h:\(h\+1\)\*D_h"
REPEATED = r"every head's slot holds head {}'s output"
case("mha_heads_flipped", check_multi_head_attention, _mha(merge=lambda y: _merge(y.flip(1))),
     ORDER.format("3, 2, 1, 0"))
case("mha_heads_rolled", check_multi_head_attention,
     _mha(merge=lambda y: _merge(y.roll(1, 1))), ORDER.format("3, 0, 1, 2"))
case("mha_split_flipped", check_multi_head_attention,
     _mha(split=lambda z, h: _split(z, h).flip(1)), ORDER.format("3, 2, 1, 0"))
case("mha_head0_repeated", check_multi_head_attention,
     _mha(merge=lambda y: y[:, 0].repeat(1, 1, y.size(1))), REPEATED.format(0))
case("mha_last_head_repeated", check_multi_head_attention,
     _mha(merge=lambda y: _merge(y[:, -1:].expand_as(y))), REPEATED.format(3))
case("heads_merge_flipped", check_heads, (_split, lambda x: _merge(x.flip(1))),
     ORDER.format("3, 2, 1, 0"))
case("heads_merge_cat_reversed", check_heads,
     (_split, lambda x: torch.cat(x.unbind(1)[::-1], -1)), ORDER.format("3, 2, 1, 0"))
case("heads_merge_head0_repeated", check_heads,
     (_split, lambda x: _merge(x[:, :1].expand_as(x))), REPEATED.format(0))
case("heads_split_flipped", check_heads, (lambda x, h: _split(x, h).flip(1), _merge),
     ORDER.format("3, 2, 1, 0"))
case("heads_split_head0_repeated", check_heads,
     (lambda x, h: _split(x, h)[:, :1].expand(-1, h, -1, -1), _merge), REPEATED.format(0))


def _scaled_twice(q, k, v, mask=None):
    return _attention(q, k, v, mask) / math.sqrt(q.size(-1))


case("attention_scaled_twice", check_attention, _scaled_twice,
     r"divided by sqrt\(d\) twice: the scores, and the output .*once")

RIGHT["mha_heads_cat_unbind"] = (check_multi_head_attention, _mha(
    merge=lambda y: torch.cat(y.unbind(1), -1)))
RIGHT["heads_stack_chunk"] = (check_heads, lambda x, h: torch.stack(x.chunk(h, -1), 1),
                              lambda x: torch.cat(x.unbind(1), -1))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
