"""Trial 59, notebook 02, Exercise 5 (relative scores): the sum divided by sqrt(n_heads) was
refused only as "a constant factor"; u [H, D_h] added to q without its query axis while v had
one (or the other way round) crashed with torch's broadcast error alone. Both now named. Right:
the solution's einsums, and the same with `@` and r.permute(1, 2, 0).
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import check_relative_scores
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(scale=lambda q: math.sqrt(q.size(-1)), u_axis=True, v_axis=True):
    def relative_scores(q, k, r, u, v):
        cu, cv = q + (u[:, None] if u_axis else u), q + (v[:, None] if v_axis else v)
        content = torch.einsum("bhid,bhjd->bhij", cu, k)
        position = relative_shift(torch.einsum("bhid,rhd->bhir", cv, r))
        return (content + position) / scale(q)
    return relative_scores


case("sqrt_heads", check_relative_scores, _scores(scale=lambda q: math.sqrt(q.size(1))),
     r"sqrt\(q\.size\(1\)\) = sqrt\(3\), the number of heads.*sqrt\(q\.size\(-1\)\)")
UV = r"no batch or query axis.*u\[:, None\]"
case("u_without_query_axis", check_relative_scores, _scores(u_axis=False), UV)
case("v_without_query_axis", check_relative_scores, _scores(v_axis=False), UV)
RIGHT["einsum"] = (check_relative_scores, _scores())
RIGHT["matmul"] = (check_relative_scores, lambda q, k, r, u, v: (
    (q + u[:, None]) @ k.transpose(-2, -1)
    + relative_shift((q + v[:, None]) @ r.permute(1, 2, 0))) / math.sqrt(q.size(-1)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
