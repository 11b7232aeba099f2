"""Trial 62, notebook 02 (a learner's trial, all findings minor): Exercise 4's zero-copy shift
by `as_strided` with strides read from x, which torch refuses on the check's transposed x (a
negative row stride), was told to use reshape, not view; Exercise 1's memory update whose
indices went through bfloat16 (299 rounds to 300) crashed with torch's out-of-bounds error
only, where int8 gets a full diagnosis; and a float64 result scaled by a constant a little
off was described as "1 + -4e-07" and told to keep every step in the inputs' dtype, which
is no fix for a constant.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_scores, check_relative_shift,
                                            check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _strided_shift(x):
    *lead, t, s = x.shape
    st = x.stride()
    return x.as_strided((*lead, t, s), (*st[:-2], st[-2] - st[-1], st[-1]),
                        x.storage_offset() + (t - 1) * st[-1])


case("shift_as_strided_negative_stride", check_relative_shift, _strided_shift,
     r"as_strided.*negative.*x\.contiguous\(\)")
RIGHT["shift_as_strided_contiguous_first"] = (
    check_relative_shift, lambda x: _strided_shift(x.contiguous()))


def _pad_shift(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


RIGHT["shift_pad_reshape"] = (check_relative_shift, _pad_shift)


def _memory_by_index(dtype):
    def update_memory(mem, h, mem_len):
        states = h if mem is None else torch.cat([mem, h], 1)
        n = states.size(1)
        idx = torch.arange(max(0, n - mem_len), n, device=states.device).to(dtype).long()
        return states.index_select(1, idx).detach()
    return update_memory


case("memory_bfloat16_index", check_update_memory, _memory_by_index(torch.bfloat16),
     r"bfloat16.*256.*int64")
RIGHT["memory_int64_index"] = (check_update_memory, _memory_by_index(torch.int64))


def _memory(mem, h, mem_len):
    states = h if mem is None else torch.cat([mem, h], 1)
    return states[:, max(0, states.size(1) - mem_len):].detach()


RIGHT["memory_slice"] = (check_update_memory, _memory)
NO_DTYPE = r"^(?!.*inputs' dtype)"
case("memory_scaled_a_little", check_update_memory,
     lambda mem, h, mem_len: _memory(mem, h, mem_len) * 1.0000001,
     NO_DTYPE + r".*scaled by ~1 \+ 1e-07 \(a constant a little off.*no eps")


def _scores(q, k, r, u, v, scale=None):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    position = torch.einsum("bhid,rhd->bhir", q + v[:, None], r)
    return (content + relative_shift(position)) / (scale or math.sqrt(q.size(-1)))


case("scores_scaled_a_little", check_relative_scores,
     lambda q, k, r, u, v: _scores(q, k, r, u, v) * (1 - 4e-7),
     NO_DTYPE + r".*scaled by ~1 - 4e-07 \(a constant a little off.*no eps")
RIGHT["scores_math_sqrt"] = (check_relative_scores, _scores)
RIGHT["scores_float32_root"] = (
    check_relative_scores,
    lambda q, k, r, u, v: _scores(q, k, r, u, v, torch.tensor(q.size(-1)).sqrt()))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
