"""Notebook 04's gradient checkers run in float64: a float32 step that autograd (or the
learner) casts back is refused by name, and a learner's function that empties the list it
is given is named instead of crashing the check."""

import re

import pytest
import torch
from test_exercises_trial11b import ApRight

from labnn.exercises.kv_sharing_stack.custom_backward import check_value_gradients
from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.kv_sharing_stack.stack_append import check_append


class Ap32(ApRight):
    @staticmethod
    def backward(ctx, grad):
        return tuple(None if g is None else g.float() for g in ApRight.backward(ctx, grad))


def vg_float32(read_grads):
    out = torch.zeros(len(read_grads), read_grads[0].size(1))
    for g in read_grads:
        out[: g.size(0)] += g.float()
    return out.double()


def vg_clear(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[: g.size(0)] += g
    read_grads.clear()
    return out


@pytest.mark.parametrize("check, fn, pattern", [
    (check_append, Ap32, r"only float32-accurate.*Append\.backward"),
    (check_value_gradients, vg_float32, r"only float32-accurate.*value_gradients"),
    (check_value_gradients, vg_clear, r"changed the caller's list read_grads.*now 0"),
])
def test_named(check, fn, pattern):
    with pytest.raises(ExerciseFailed) as info:
        check(fn)
    assert re.search(pattern, str(info.value), re.S), str(info.value)
    assert len(str(info.value)) < 400
