"""Trials 55a and 55b: learners working through notebooks 02 and 01 in a fresh kernel
(about 70 and 60 wrong answers, none passed).

02: a shift through `.numpy()` got torch's own "Can't call numpy() on Tensor that requires
grad" (the check's first `x` requires grad), where the meta-device round names numpy; any
learner error that mentions numpy now gets that diagnosis, whichever round raised it.
01: a scale made as a float32 tensor (`torch.sqrt(torch.tensor(d))`) was told of "a float32
step", which the learner did not recognise; the NaN-gradient message listed `nan_to_num` as
a way of hiding the NaN, which passes right after the softmax (it is the output's that
fails); right answers were told they were slow on a busy machine (wall time, 0.1 s).
"""
import math
import subprocess
import sys

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_causal_mask)
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



def weights_f32_root(q, k):
    return (q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(q.size(-1)))).softmax(-1)


def attention_output_cleaned(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v).nan_to_num(0.0)


def attention_weights_cleaned(q, k, v, mask=None):  # nan_to_num right after the softmax
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


case("weights_root_of_a_float32_tensor", check_attention_weights, weights_f32_root,
     r"float32-accurate.*torch\.tensor\(d\).*math\.sqrt\(d\)")
case("output_cleaned_after_v", check_attention, attention_output_cleaned,
     r"NaN.*v's gradient.*later result is cleaned.*right after the softmax")
RIGHT["weights_cleaned_after_softmax"] = (check_attention, attention_weights_cleaned)
RIGHT["causal_mask_tril"] = (check_causal_mask,
                             lambda t: torch.ones(t, t, dtype=torch.bool).tril())


def test_a_vectorised_mask_is_not_called_slow_on_a_busy_machine(capsys):
    """The check's slow path starts at 0.3 s of this process's CPU time for three calls
    at t = 300 (a loop over every entry takes 0.5 s or more on a 2-core VM): two other
    processes keeping every core busy do not count."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        check_causal_mask(lambda t: torch.ones(t, t, dtype=torch.bool).tril())
    finally:
        for p in busy:
            p.kill()
    assert "note:" not in capsys.readouterr().out


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
