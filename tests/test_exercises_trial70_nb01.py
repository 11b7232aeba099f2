"""Trial 70, notebook 01 (a learner's trial of the five exercises).

Accepted wrong: in Exercises 2 and 5, an answer that special-cases a batch of pure padding
(`if not mask.any(): return torch.zeros(...)`, or `mha.out_proj` of such zeros) made the
zeros on the CPU with no `device=`: on a GPU it returns a CPU tensor, or fails in out_proj;
the check ran the all-False mask on the CPU only, and now also with the inputs on another
device. Misnamed: weights made without the softmax's exp of the scores (`sigmoid`, sigmoid
over its row's sum, the softmax of `scores.abs()`, the squared scores over their sum) got
"differs" (or, for the plain sigmoid, "apply softmax last") in Exercises 1, 2 and 5; each is
now named. In Exercise 3, a mask built from counts kept in uint8 or int8 (a `cumsum` with
`dtype=torch.uint8`, `.to(torch.int8)`), which wrap past 255 or 127, was told only where it
is wrong; it is now named as positions arange'd in that dtype were, and a difference of
uint8 positions (`i - j >= 0`, never negative) is named beside "lets every query see every
key". In Exercise 5, weights kept from the first call (a global holding a copy of
`mha.qkv`'s weight, or the first module itself) were told to read the head count from
`mha.n_heads`: the round with another head count now names the first module's layers kept.
Exercise 5 also named none of the weight slips Exercises 1 and 2 name: the scale applied
after the softmax (to the weights or v: "divided by 1"), a base-2 exp ("divided by 3.534"),
the softmax of minus the scores or taken twice, the ReLU over its sum ("differs").
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_causal_mask, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k):
    return q @ k.mT / math.sqrt(q.size(-1))


def _softmax(s, mask=None):
    if mask is None:
        return s.softmax(-1)
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def _normed(w):
    return w / w.sum(-1, keepdim=True)


def _keep(w, mask):  # the masked keys' weights zeroed, as a learner masks a sigmoid
    return w if mask is None else w * mask


# the weights of scaled scores `s` (masked with `mask`, True = may attend) without a softmax
NOT_SOFTMAX = {
    "sigmoid": (lambda s, mask: _keep(s.sigmoid(), mask), r"sigmoid\(scores\).*sum to 1"),
    "sigmoid_normed": (lambda s, mask: _normed(_keep(s.sigmoid(), mask)),
                       r"sigmoid\(scores\) over (its|their) row's sum"),
    "abs": (lambda s, mask: _softmax(s.abs(), mask), r"softmax of \|scores\| \(\.abs\(\)\)"),
    "squared": (lambda s, mask: _normed(_keep(s ** 2, mask)),
                r"squared scores over their row's sum"),
}


def _mha(weigh):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        y = weigh(_scores(q, k), mask) @ v
        return mha.out_proj(y.transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


for tag, (weigh, pattern) in NOT_SOFTMAX.items():
    case(f"weights_{tag}", check_attention_weights,
         lambda q, k, weigh=weigh: weigh(_scores(q, k), None), pattern)
    case(f"attention_{tag}", check_attention,
         lambda q, k, v, mask=None, weigh=weigh: weigh(_scores(q, k), mask) @ v, pattern)
    case(f"mha_{tag}", check_multi_head_attention, _mha(weigh), pattern)


def _attention_padding_cpu(made):  # a batch of pure padding special-cased, on the CPU
    def attention(q, k, v, mask=None):
        if mask is not None and not mask.any():
            return made(q, k, v)
        return _softmax(_scores(q, k), mask) @ v
    return attention


CPU = r"(on|made on) the CPU.*torch\.zeros\(\.\.\.\)"
case("attention_padding_cpu_zeros", check_attention, _attention_padding_cpu(
    lambda q, k, v: torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)), CPU)
case("attention_padding_cpu_weights", check_attention, _attention_padding_cpu(
    lambda q, k, v: torch.zeros(*q.shape[:-1], k.size(-2), dtype=q.dtype) @ v), CPU)
RIGHT["attention_padding_new_zeros"] = (check_attention, _attention_padding_cpu(
    lambda q, k, v: q.new_zeros(*q.shape[:-1], v.size(-1))))


def _mha_padding_cpu(x, mha, mask=None):
    if mask is not None and not mask.any():
        return mha.out_proj(torch.zeros(x.shape, dtype=x.dtype))
    return _mha(_softmax)(x, mha, mask)


case("mha_padding_cpu_zeros", check_multi_head_attention, _mha_padding_cpu, CPU)
RIGHT["mha_softmax"] = (check_multi_head_attention, _mha(_softmax))
RIGHT["attention_softmax"] = (check_attention, lambda q, k, v, mask=None:
                              _softmax(_scores(q, k), mask) @ v)


def _counted(dtype, convert=False):  # positions counted with cumsum, kept in `dtype`
    def causal_mask_mine(t):
        ones = torch.ones(t, t, dtype=dtype)
        rows, cols = ((ones.cumsum(a).to(dtype) if convert else ones.cumsum(a, dtype=dtype))
                      for a in (0, 1))
        return cols <= rows
    return causal_mask_mine


NARROW = r"right up to position {} .*counts or positions in {}.*wrap"
case("causal_cumsum_uint8", check_causal_mask, _counted(torch.uint8),
     NARROW.format(254, "uint8"))
case("causal_cumsum_to_uint8", check_causal_mask, _counted(torch.uint8, convert=True),
     NARROW.format(254, "uint8"))
case("causal_cumsum_int8", check_causal_mask, _counted(torch.int8),
     NARROW.format(126, "int8"))
RIGHT["causal_cumsum_of_uint8"] = (check_causal_mask, lambda t: torch.ones(
    t, t, dtype=torch.uint8).cumsum(1) <= torch.ones(t, t, dtype=torch.uint8).cumsum(0))
RIGHT["causal_uint8_tril"] = (check_causal_mask,
                              lambda t: torch.ones(t, t, dtype=torch.uint8).tril().bool())


def _mha_kept(keep):  # what `keep(mha)` returns is kept from the first call (a global)
    kept = []

    def multi_head_attention(x, mha, mask=None):
        if not kept:
            kept.append(keep(mha))
        return _mha(_softmax)(x, kept[0](mha), mask)
    return multi_head_attention


def _with(mha, qkv):  # `mha` with the fused projection `qkv`
    class Parts:
        n_heads, out_proj = mha.n_heads, mha.out_proj
    Parts.qkv = qkv
    return Parts


KEPT = r"a new module, gives the result of the first module's {}: .*keeps them between calls"
case("mha_kept_qkv_weight", check_multi_head_attention, _mha_kept(lambda first: (
    lambda w, b: lambda mha: _with(mha, lambda x: torch.nn.functional.linear(x, w, b)))(
        first.qkv.weight.detach().clone(), first.qkv.bias.detach().clone())),
    KEPT.format(r"mha\.qkv"))
case("mha_kept_module", check_multi_head_attention, _mha_kept(lambda first: lambda mha: first),
     KEPT.format(r"mha\.qkv and mha\.out_proj"))


def _unsigned_differences(t):  # i - j >= 0 of positions in uint8: never negative
    i = torch.arange(t, dtype=torch.uint8)
    return (i[:, None] - i[None, :]) >= 0


case("causal_uint8_differences", check_causal_mask, _unsigned_differences,
     r"every key: its positions are uint8, where i - j is never negative")


def _mha_weighed(weigh):  # Exercise 5's weights from the heads' scaled scores `s`
    return _mha(lambda s, mask: weigh(s, torch.ones_like(s, dtype=torch.bool) if mask is None
                                      else mask))


def _masked(s, mask):
    return s.masked_fill(~mask, float("-inf"))


def _relu_normed(s, mask):
    r = s.relu() * mask
    return r / r.sum(-1, keepdim=True).clamp_min(1e-12)


SLIP = "multi-head attention: .*{}"
for tag, weigh, pattern in (
        ("scale_after_softmax", lambda s, m: _masked(s * math.sqrt(6), m).softmax(-1)
         / math.sqrt(6), r"divided by sqrt\(d_head\) after the softmax"),
        ("exp2", lambda s, m: (lambda e: e / e.sum(-1, keepdim=True))(
            torch.exp2(_masked(s, m) - s.amax(-1, keepdim=True))), r"base-2 exponential"),
        ("softmax_neg", lambda s, m: _masked(-s, m).softmax(-1), r"softmax of minus the scores"),
        ("softmax_twice", lambda s, m: _masked(_masked(s, m).softmax(-1), m).softmax(-1),
         r"softmax twice"),
        ("relu_normed", _relu_normed, r"scores' ReLU over its row's sum")):
    case(f"mha_{tag}", check_multi_head_attention, _mha_weighed(weigh), SLIP.format(pattern))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
