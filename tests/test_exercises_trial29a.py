"""Learner trial 29 (a): notebook 01's scale and crash diagnoses. A crash with mask=None
that a typo causes (the learner's own error named, not mask=None), `torch.sqrt` of a Python
int, a width written as a number (`math.sqrt(24)`, `math.sqrt(6)`), multi-head attention
without its scale or with a wrong one, and the right answers these checks must accept."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (check_attention,
                                                             check_attention_weights)
from labnn.exercises.self_attention.multi_head import check_multi_head_attention

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
NOT_NONE = r"^(?!.*must handle mask=None)"  # the notice must not blame mask=None


def int_sqrt(arg):
    """`arg` (a regex) named as a Python int, with math.sqrt of it; no causal-mask talk."""
    return (rf"^(?!.*torch\.ones).*`{arg}` is a Python int.*torch\.sqrt takes tensors.*"
            rf"math\.sqrt\({arg}\)")


def _attend(q, k, v, mask, scale):
    """Attention with the scores times `scale`; an all-False mask row gives zeros."""
    s = q @ k.transpose(-2, -1) * scale
    w = (s if mask is None else s.masked_fill(~mask, float("-inf"))).softmax(dim=-1)
    return (w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0.0)) @ v


# ---- Exercise 1: attention_weights ----
def aw_right(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def aw_tensor_sqrt(q, k):  # torch.sqrt of a tensor made from d, without dtype: float32
    d = torch.tensor(q.size(-1))
    return (q @ k.transpose(-2, -1) / torch.sqrt(d)).softmax(dim=-1)


def aw_torch_sqrt_int(q, k):
    d = q.size(-1)
    return (q @ k.transpose(-2, -1) / torch.sqrt(d)).softmax(dim=-1)


def aw_int_sqrt_method(q, k):
    d = q.shape[-1]
    return (q @ k.transpose(-2, -1) / d.sqrt()).softmax(dim=-1)


def aw_24(q, k):  # the check's own width written as a number
    return (q @ k.transpose(-2, -1) / math.sqrt(24)).softmax(dim=-1)


RIGHT["aw"] = (check_attention_weights, aw_right)
# trial 44a: Exercise 1's float64 round now compares values too, as Exercises 2 and 5 do; the
# scale sqrt(d) computed in float32 is off by 2e-8 there, named as a float32 step
case("aw_tensor_sqrt", check_attention_weights, aw_tensor_sqrt,
     r"float32 step.*tensor made without dtype=")
case("aw_torch_sqrt_int", check_attention_weights, aw_torch_sqrt_int,
     int_sqrt("d") + r".*d \*\* 0\.5")
case("aw_int_sqrt_method", check_attention_weights, aw_int_sqrt_method,
     r"`d` is a Python int.*math\.sqrt\(d\)")
case("aw_24", check_attention_weights, aw_24,
     r"^(?!.*count axes).*sqrt\(24\).*number.*q\.size\(-1\)")


# ---- Exercise 2: attention ----
def att_right(q, k, v, mask=None):
    return _attend(q, k, v, mask, 1 / math.sqrt(q.size(-1)))


def att_mask_eq_0(q, k, v, mask=None):  # mask == 0 is ~mask for a bool mask: right
    s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        s = s.masked_fill(mask == 0, float("-inf"))
    w = s.softmax(-1)
    return (w if mask is None else w.masked_fill(mask.sum(-1, keepdim=True) == 0, 0.0)) @ v


def att_name_typo(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weigths @ v  # noqa: F821 (the learner's typo)


def att_attribute_typo(q, k, v, mask=None):
    scores = q @ k.tranpose(-2, -1) / math.sqrt(q.size(-1))  # the learner's typo
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def att_mask_typo(q, k, v, mask=None):  # the typo only runs with a mask
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~msk, float("-inf"))  # noqa: F821
    return scores.softmax(dim=-1) @ v


def att_none_crash(q, k, v, mask=None):  # really crashes on mask=None
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask, float("-inf"))
    return s.softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0) @ v


def att_none_unsqueeze(q, k, v, mask=None):  # mask.unsqueeze outside the `if`
    mask = mask.unsqueeze(0)
    return att_right(q, k, v, mask)


def att_torch_sqrt_int(q, k, v, mask=None):
    d = q.size(-1)
    return _attend(q, k, v, mask, 1 / torch.sqrt(d))


def att_24(q, k, v, mask=None):
    return _attend(q, k, v, mask, 1 / math.sqrt(24))


def att_softmax_no_dim(q, k, v, mask=None):  # F.softmax without dim: dim=0 on 3-D
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return F.softmax(s, 0).nan_to_num(0.0) @ v


RIGHT["att"] = (check_attention, att_right)
RIGHT["att_mask_eq_0"] = (check_attention, att_mask_eq_0)
case("att_name_typo", check_attention, att_name_typo,
     NOT_NONE + r".*raises the same error with a mask.*NameError.*weigths")
case("att_attribute_typo", check_attention, att_attribute_typo,
     NOT_NONE + r".*AttributeError.*tranpose")
case("att_mask_typo", check_attention, att_mask_typo, NOT_NONE + r".*NameError.*msk")
case("att_none_crash", check_attention, att_none_crash,
     r"must handle mask=None.*TypeError")
case("att_none_unsqueeze", check_attention, att_none_unsqueeze,
     r"must handle mask=None.*AttributeError")
case("att_torch_sqrt_int", check_attention, att_torch_sqrt_int,
     int_sqrt("d"))
case("att_24", check_attention, att_24,
     r"^(?!.*count axes).*sqrt\(24\).*number.*q\.size\(-1\)")
case("att_softmax_no_dim", check_attention, att_softmax_no_dim, r"dim=0|over the batch")


# ---- Exercise 5: multi-head attention ----
def _mha(scale):
    """Multi-head attention whose scores are multiplied by `scale(q, x, mha)`."""
    def mha_fn(x, mha, mask=None):
        b, t, d = x.shape
        h = mha.n_heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))
        y = _attend(q, k, v, mask, scale(q, x, mha))
        return mha.out_proj(y.transpose(1, 2).reshape(b, t, d))
    return mha_fn


def mha_torch_sqrt_int(x, mha, mask=None):
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))
    s = q @ k.transpose(-2, -1) / torch.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    y = s.softmax(-1).nan_to_num(0.0) @ v
    return mha.out_proj(y.transpose(1, 2).reshape(b, t, d))


RIGHT["mha"] = (check_multi_head_attention, _mha(lambda q, x, mha: q.size(-1) ** -0.5))
RIGHT["mha_d_head"] = (check_multi_head_attention,
                       _mha(lambda q, x, mha: 1 / math.sqrt(mha.d_head)))
RIGHT["mha_d_over_h"] = (check_multi_head_attention,
                         _mha(lambda q, x, mha: (x.size(-1) // mha.n_heads) ** -0.5))
case("mha_no_scale", check_multi_head_attention, _mha(lambda q, x, mha: 1.0),
     r"forgot to divide the scores by sqrt\(D_h\).*q\.size\(-1\)")
case("mha_sqrt_24", check_multi_head_attention, _mha(lambda q, x, mha: 1 / math.sqrt(24)),
     r"sqrt\(24\).*(number|d_model).*sqrt\(D_h\)")
case("mha_sqrt_d_model", check_multi_head_attention,
     _mha(lambda q, x, mha: x.size(-1) ** -0.5), r"sqrt\(d_model\) = sqrt\(24\).*sqrt\(D_h\)")
case("mha_sqrt_6", check_multi_head_attention, _mha(lambda q, x, mha: 1 / math.sqrt(6)),
     r"^(?!.*head count).*sqrt\(6\).*number.*q\.size\(-1\)")
case("mha_times_sqrt", check_multi_head_attention,
     _mha(lambda q, x, mha: math.sqrt(q.size(-1))), r"multiplied the scores by sqrt\(D_h\)")
case("mha_half", check_multi_head_attention,
     _mha(lambda q, x, mha: 1 / (q.size(-1) ** 1 / 2)), r"D_h / 2 = 3.*\*\* binds tighter")
case("mha_twice_d", check_multi_head_attention,
     _mha(lambda q, x, mha: 1 / q.size(-1) ** 1 / 2), r"2 \* D_h = 12.*\*\* binds tighter")
case("mha_d_model", check_multi_head_attention, _mha(lambda q, x, mha: 1 / x.size(-1)),
     r"divided the scores by D = 24.*sqrt\(D_h\)")
case("mha_sqrt_heads", check_multi_head_attention,
     _mha(lambda q, x, mha: mha.n_heads ** -0.5), r"sqrt\(n_heads\)")
case("mha_torch_sqrt_int", check_multi_head_attention, mha_torch_sqrt_int,
     int_sqrt(r"q\.size\(-1\)"))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
