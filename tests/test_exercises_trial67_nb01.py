"""Trial 67, notebook 01 (a learner's trial of the five exercises).

Misnamed: in Exercise 5, the mask applied to head 0's scores only (`s[:, 0] = ...`), and
the heads of only one or two of q, k, v flipped or rolled, got a generic "differs"; each
slot of the answer's heads is now matched to the q, k and v heads (and mask) it attends
with. In Exercise 3, a sliding window of 2048 (or 256) keys was blamed on positions kept in
float16 (bfloat16); the dtype is now named only when every wrong entry lies near the
diagonal, where rounded positions meet, and a window is named as such. In Exercises 1 and
2, q scored against itself (`q @ q.transpose(-2, -1)`, as `x @ x.T` in section 1) got a
bare shape message, or in Exercise 2 a crash notice saying that mask=None must be handled;
in Exercise 5 a generic "differs". In Exercises 2 and 5, mask=None turned into an all-False
mask (zeros, as an additive mask of no masking) or an inverted causal one (triu(1)) got a
generic "differs" too.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_causal_mask, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(q, k, v, mask=None, heads_masked=None, self_scored=False):
    s = q @ (q if self_scored else k).transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None and heads_masked is None:
        s = s.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        s[:, heads_masked] = s[:, heads_masked].masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    return (w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0.0)) @ v


def _split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _mha(heads=lambda q, k, v: (q, k, v), **options):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = heads(*(_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1)))
        y = _attention(q, k, v, mask, **options)
        return mha.out_proj(y.transpose(1, 2).reshape(x.shape))
    return multi_head_attention


PAIRS = r"pairs the heads of q, k and v wrongly.*a {}, b {}, c {}"
IDS = r"\[0, 1, 2, 3\]"
case("mha_q_heads_flipped", check_multi_head_attention,
     _mha(lambda q, k, v: (q.flip(1), k, v)), PAIRS.format(r"\[3, 2, 1, 0\]", IDS, IDS))
case("mha_kv_heads_flipped", check_multi_head_attention,
     _mha(lambda q, k, v: (q, k.flip(1), v.flip(1))),
     PAIRS.format(IDS, r"\[3, 2, 1, 0\]", r"\[3, 2, 1, 0\]"))
case("mha_k_heads_rolled", check_multi_head_attention,
     _mha(lambda q, k, v: (q, k.roll(1, 1), v)), PAIRS.format(IDS, r"\[3, 0, 1, 2\]", IDS))
case("mha_mask_head0_only", check_multi_head_attention, _mha(heads_masked=0),
     r"masks the scores of head\(s\) \[0\] only.*every head")
case("mha_mask_two_heads", check_multi_head_attention, _mha(heads_masked=slice(0, 2)),
     r"masks the scores of head\(s\) \[0, 1\] only")


def _window(w, name="causal_mask_mine"):
    def causal(t):
        ones = torch.ones(t, t, dtype=torch.bool)
        return ones.tril() & ones.triu(1 - w)
    causal.__name__ = name
    return causal


WINDOW = r"attend only the last {} keys.*sliding window.*all of its past"
case("causal_window_2048", check_causal_mask, _window(2048), WINDOW.format(2048))
case("causal_window_256", check_causal_mask, _window(256), WINDOW.format(256))
case("causal_window_4096", check_causal_mask, _window(4096), WINDOW.format(4096))
case("causal_window_64", check_causal_mask, _window(64), WINDOW.format(64))


def _weights_self(q, k):
    return (q @ q.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)


def _weights_keys_self(q, k):
    return (k @ k.transpose(-2, -1)).softmax(-1)


SELF = r"{} is scored against itself .*q @ k\.transpose\(-2, -1\)"
case("weights_q_self", check_attention_weights, _weights_self, SELF.format("q"))
case("weights_k_self_unscaled", check_attention_weights, _weights_keys_self, SELF.format("k"))
case("attention_q_self", check_attention,
     lambda q, k, v, mask=None: _attention(q, k, v, mask, self_scored=True), SELF.format("q"))

case("mha_q_self", check_multi_head_attention, _mha(self_scored=True),
     r"scores q against itself .*q @ k\.transpose\(-2, -1\) in every head")


def _default(make):
    def attention(q, k, v, mask=None):
        if mask is None:
            mask = make(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device))
        return _attention(q, k, v, mask)
    return attention


def _mha_default(make):
    def multi_head_attention(x, mha, mask=None):
        t = x.size(1)
        if mask is None:
            mask = make(torch.ones(t, t, dtype=torch.bool, device=x.device))
        return _mha()(x, mha, mask)
    return multi_head_attention


DEFAULT = r"with mask=None your answer attends as {}.*mask=None means no mask"
for tag, make, said in (("zeros", lambda ones: ~ones, r"a mask of all False"),
                        ("triu", lambda ones: ones.triu(1), r"a causal mask inverted")):
    case(f"attention_default_{tag}", check_attention, _default(make), DEFAULT.format(said))
    case(f"mha_default_{tag}", check_multi_head_attention, _mha_default(make),
         DEFAULT.format(said))


def _half_positions(t):
    p = torch.arange(t).half()
    return (p[:, None] - p[None, :]) >= 0


RIGHT["causal_window_past_t"] = (check_causal_mask, _window(10**9))
RIGHT["mha_all_heads_masked"] = (check_multi_head_attention, _mha())
CASES["causal_half_difference"] = (check_causal_mask, (_half_positions,),
                                   r"float16 holds integers exactly only up to 2048")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
