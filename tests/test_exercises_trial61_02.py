"""Trial 61, notebook 02 (a learner's trial, 214 answers): Exercise 1's update_memory that
detaches the caller's `mem` in place (`mem.detach_()`, `mem.requires_grad_(False)`) passed,
though the same on `h` was named: no `mem` the check passed was in a graph. A result buffer
kept by its shape was told of a dtype conversion it never made.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import check_update_memory

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _update(cut):
    def update_memory(mem, h, mem_len):
        if mem is not None:
            cut(mem)
        states = h if mem is None else torch.cat([mem, h], dim=1)
        start = states.size(1) - min(mem_len, states.size(1))
        return states[:, start:].detach()
    return update_memory


DETACHED = r"detached its input `mem` in place"
case("mem_detach_", check_update_memory, _update(lambda m: m.detach_()), DETACHED)
case("mem_requires_grad_false", check_update_memory,
     _update(lambda m: m.requires_grad_(False) if m.is_leaf else m.detach_()), DETACHED)

def _kept_buffer():
    buffers = {}

    def update_memory(mem, h, mem_len):
        states = h if mem is None else torch.cat([mem, h], dim=1)
        out = states[:, states.size(1) - min(mem_len, states.size(1)):].detach()
        kept = buffers.setdefault(tuple(out.shape), torch.empty_like(out))
        return kept.copy_(out)
    return update_memory


case("buffer_kept_by_shape", check_update_memory, _kept_buffer(),
     r"returns the tensor an earlier call of the same shape returned.*kept between calls")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
