"""What stop 53 noticed and left alone in the checkers, now handled.

Notebook 04, Exercise 1: a fresh `nn.LayerNorm` made inside the learner's function (float32,
weight 1 and bias 0) met the check's float64 modules and was blamed on a `.float()`.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import check_shared_kv

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _heads(y, h):
    k, v = y.chunk(2, -1)
    return k.reshape(y.size(0), h, -1), v.reshape(y.size(0), h, -1)


def _fresh_norm(m, norm, kv, h):
    return _heads(kv(torch.nn.LayerNorm(m.size(-1), eps=norm.eps)(m)), h)


def _fresh_norm_cast(m, norm, kv, h):
    fresh = torch.nn.LayerNorm(m.size(-1), eps=norm.eps).to(m.dtype)
    return _heads(kv(fresh(m)), h)


FRESH = r"fresh LayerNorm.*use the given `norm`"
case("kv_fresh_layer_norm", check_shared_kv, _fresh_norm, FRESH)
case("kv_fresh_layer_norm_cast", check_shared_kv, _fresh_norm_cast, r"fresh layer_?norm")
case("kv_m_float", check_shared_kv, lambda m, norm, kv, h: _heads(kv(norm(m.float())), h),
     r"a float32 tensor met the float64 modules")
RIGHT["kv_given_norm"] = (check_shared_kv, lambda m, norm, kv, h: _heads(kv(norm(m)), h))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
