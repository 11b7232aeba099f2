"""Trial 53i: a second blind learner trial of notebook 01's exercises, after 53f's fixes.

Wrong answers that passed Exercise 3 (the causal mask): a buffer of 4,096 kept where the
search of globals does not look (a dict, a list, an object's attribute, 1-D positions cut
to t), silently a [4096, 4096] mask past t = 4,096; positions in uint16 (wrap past 65,535).
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_causal_mask

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
FIXED = r"fixed size, 4096, cut to t"

_C = {"m": torch.tril(torch.ones(4096, 4096, dtype=torch.bool))}
_L = [torch.tril(torch.ones(4096, 4096, dtype=torch.bool))]


class _Kept:
    buf = torch.tril(torch.ones(4096, 4096, dtype=torch.bool))


_POSITIONS = torch.arange(4096)


def cm_dict(t):
    return _C["m"][:t, :t].clone()


def cm_list(t):
    return _L[0][:t, :t].clone()


def cm_attribute(t):
    return _Kept.buf[:t, :t].clone()


def cm_positions_1d(t):
    p = _POSITIONS[:t]
    return p[:, None] >= p[None, :]


def cm_uint16(t):
    i = torch.arange(t).to(torch.uint16)
    return i[:, None].to(torch.int32) >= i[None, :].to(torch.int32)


def cm_right(t):
    i = torch.arange(t)
    return i[None, :] <= i[:, None]


for fn in (cm_dict, cm_list, cm_attribute, cm_positions_1d):
    case(fn.__name__, check_causal_mask, fn, FIXED)
case("cm_uint16", check_causal_mask, cm_uint16, r"uint16 wrap past 65,535")
RIGHT["cm_right"] = (check_causal_mask, cm_right)
RIGHT["cm_tril"] = (check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
