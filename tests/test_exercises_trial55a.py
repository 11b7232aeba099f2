"""Trial 55a: a learner working through notebook 02 in a fresh kernel (about 70 wrong
answers, none passed). The one raw error: a shift through `.numpy()` got torch's own
"Can't call numpy() on Tensor that requires grad" (the check's first `x` requires grad),
where the meta-device round names numpy; any learner error that mentions numpy now gets
that diagnosis, whichever round raised it.
"""
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_attention_weights
from labnn.exercises.transformer_xl import check_relative_shift, check_update_memory

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
NUMPY = r"goes through numpy \(\.numpy\(\)\).*CPU tensors only"


def rs_numpy(x):
    *lead, t, s = x.shape
    flat = torch.from_numpy(F.pad(x, (1, 0)).numpy())
    return flat.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def update_numpy(mem, h, mem_len):
    both = h if mem is None else torch.cat([mem, h], dim=1)
    return torch.from_numpy(both.numpy()[:, both.size(1) - mem_len:]).detach()


def weights_numpy(q, k):
    s = torch.from_numpy(q.numpy() @ k.numpy().swapaxes(-1, -2)) / q.size(-1) ** 0.5
    return s.softmax(-1)


case("shift_through_numpy", check_relative_shift, rs_numpy, NUMPY)
case("memory_through_numpy", check_update_memory, update_numpy, NUMPY)
case("weights_through_numpy", check_attention_weights, weights_numpy, NUMPY)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
