"""Trial 50a: a blind learner trial of notebook 01's five exercises (264 checker runs).

Wrong answers that passed: in Exercises 2 and 5, anything in float16 and bfloat16, whose
results no round compared (only a fill that overflows was named): NaN for a query with no
allowed key in half precision only (no zeroing there, or `s * m + (1 - m) * -1e9`, whose
-1e9 is -inf in float16, then `w * mask.any(-1, keepdim=True)`: NaN * 0 is NaN), zeros, a
float32 result for float16 inputs (scores upcast, never cast back); torch's
`F.scaled_dot_product_attention` in Exercise 1 (the weights read out with v = an identity
matrix). Messages: Exercise 5 prefaced an AttributeError (`mha.head_dim`) and a missing
`mask` parameter with advice about 4-D heads; Exercise 1 called a scale cached by the first
call "written as a number", and said only "differs" of a result cached by the shapes;
Exercise 5 only "differs" of a scale by `math.sqrt(128 // 4)`.
"""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
HALF = (torch.float16, torch.bfloat16)


def _split(x, h):
    return x.unflatten(-1, (h, -1)).transpose(1, 2)


def _merge(x):
    return x.transpose(1, 2).flatten(-2)


def _attention(zero_half=True, fill=float("-inf")):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, fill if fill is not None else torch.finfo(s.dtype).min)
        w = s.softmax(-1)
        if mask is not None and (zero_half or q.dtype not in HALF):
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ v
    return attention


def at_float_mask_1e9(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        m = mask.to(s.dtype)
        s = s * m + (1 - m) * -1e9
    w = s.softmax(-1)
    if mask is not None:
        w = w * mask.any(-1, keepdim=True)
    return w @ v


def at_zeros_in_half(q, k, v, mask=None):
    if q.dtype in HALF:
        return torch.zeros_like(q[..., :1]) * v.sum() + 0 * k.sum() * q
    return _attention()(q, k, v, mask)


def _upcast(cast_back):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s.to(torch.promote_types(s.dtype, torch.float32))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return (w @ v.to(w.dtype)).to(q.dtype) if cast_back else w @ v.to(w.dtype)
    return attention


def _mha(attention, cast_out=False):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (_split(t, mha.n_heads) for t in mha.qkv(x).chunk(3, -1))
        y = _merge(attention(q, k, v, mask))
        if cast_out:  # the float32 heads through float16 weights: cast the weights up
            return F.linear(y, mha.out_proj.weight.to(y.dtype),
                            None if mha.out_proj.bias is None else mha.out_proj.bias.to(y.dtype))
        return mha.out_proj(y)
    return multi_head_attention


EMPTY_NAN = r"(float16|bfloat16).*NaN.*(no (allowed )?key|all[- ]False|i=1|i=2)"
case("ex2h_no_zeroing_in_half", check_attention, _attention(zero_half=False), EMPTY_NAN)
case("ex2b_float_mask_arith_1e9", check_attention, at_float_mask_1e9, EMPTY_NAN)
case("ex2h_zeros_in_half", check_attention, at_zeros_in_half,
     r"float16.*(differs|other values)")
case("ex2_upcast_half_no_castback", check_attention, _upcast(False),
     r"float16.*float32.*(keep|cast)")
RIGHT["ex2_upcast_cast_back"] = (check_attention, _upcast(True))
RIGHT["ex2_finfo_min_fill"] = (check_attention, _attention(fill=None))
RIGHT["ex2_right"] = (check_attention, _attention())

case("ex5h_no_zeroing_in_half", check_multi_head_attention, _mha(_attention(zero_half=False)),
     EMPTY_NAN)
case("ex5h_float_mask_arith_1e9", check_multi_head_attention, _mha(at_float_mask_1e9), EMPTY_NAN)
case("ex5h_zeros_in_half", check_multi_head_attention, _mha(at_zeros_in_half),
     r"float16.*(differs|other values)")
case("ex5_upcast_half_no_castback", check_multi_head_attention, _mha(_upcast(False), True),
     r"float16.*float32.*(keep|cast)")
RIGHT["ex5_upcast_cast_back"] = (check_multi_head_attention, _mha(_upcast(True)))
RIGHT["ex5_finfo_min_fill"] = (check_multi_head_attention, _mha(_attention(fill=None)))
RIGHT["ex5_right"] = (check_multi_head_attention, _mha(_attention()))


# ---- F2: torch's own attention ----
def aw_torch_sdpa_eye(q, k):
    eye = torch.eye(k.size(-2), dtype=q.dtype, device=q.device).expand(*k.shape[:-1], k.size(-2))
    return F.scaled_dot_product_attention(q, k, eye)


def at_torch_sdpa_zeroed(q, k, v, mask=None):
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return o if mask is None else o.masked_fill(~mask.any(-1, keepdim=True), 0.0)


TORCH_SDPA = r"runs torch.nn.functional.scaled_dot_product_attention"
case("ex1_torch_sdpa_trick", check_attention_weights, aw_torch_sdpa_eye, TORCH_SDPA)
# Exercise 2's point is the mask and the query that may attend nothing: torch's fused kernel
# with that row zeroed stays a right answer there (test_exercises_attention, trials 11a-21a);
# Exercise 1 has nothing else to write.
case("ex2_torch_sdpa_zero_after", check_attention, at_torch_sdpa_zeroed,
     r"torch's fused attention is refused")  # refused since trial 53f


# ---- M1: Exercise 5's preface before an error that is not about heads ----
NOT_4D = r"^(?!.*4-D heads)"
case("ex5x_attr_error", check_multi_head_attention,
     lambda x, mha, mask=None: mha.out_proj(mha.qkv(x)[..., :x.size(-1)] * mha.head_dim),
     NOT_4D + r".*head_dim.*d_head.*n_heads")
case("ex5x_no_mask_param", check_multi_head_attention, lambda x, mha: mha.out_proj(x),
     NOT_4D + r".*mask=None")


# ---- M2, M3: state kept between calls, a scale written as a number ----
STATE = r"(?i)between calls|kept|cache"
_SCALE = {}


def aw_cache_scale(q, k):
    if "s" not in _SCALE:
        _SCALE["s"] = math.sqrt(q.size(-1))
    return (q @ k.transpose(-2, -1) / _SCALE["s"]).softmax(-1)


def _cache_by_shape():
    cache = {}

    def attention_weights(q, k):
        key = tuple(q.shape)
        if key not in cache:
            cache[key] = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return cache[key]
    return attention_weights


def _scale_global_dh(x, mha, mask=None):
    q, k, v = (_split(t, mha.n_heads) for t in mha.qkv(x).chunk(3, -1))
    s = q @ k.transpose(-2, -1) / math.sqrt(128 // 4)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(_merge(w @ v))


case("ex1b_cache_scale", check_attention_weights, aw_cache_scale, STATE)
case("ex1b_cache_by_shape", check_attention_weights, _cache_by_shape(), STATE)
case("ex5_scale_notebook_global_dh", check_multi_head_attention, _scale_global_dh,
     r"sqrt\(32\).*(number|another cell)")
case("ex1b_scale_written_24", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(24)).softmax(-1), r"written as a number")
RIGHT["aw_right"] = (check_attention_weights,
                     lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
