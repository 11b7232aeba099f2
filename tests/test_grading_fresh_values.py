"""`grading.fresh_values.expect_fresh`: which answer that keeps state between calls gets which
message, and an answer that is merely wrong gets the check's own diagnosis."""
import pytest
import torch

from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.grading.fresh_values import expect_fresh


def reference(x):
    return 2 * x


def differs(got, want, said):
    raise ExerciseFailed(f"{said}: differs")


def run(fn):
    return expect_fresh(fn, "double(x)", (torch.randn(3, 4),), reference,
                        lambda got, want: torch.equal(got, want), differs)


def test_a_right_answer_passes():
    assert len(run(lambda x: x + x)) == 3


def test_a_cache_by_the_shapes_is_named():
    cache = {}
    with pytest.raises(ExerciseFailed, match=r"result of an earlier call.*cache keyed on"):
        run(lambda x: cache.setdefault(tuple(x.shape), 2 * x))


def test_a_cache_by_data_ptr_is_named():
    cache = {}
    with pytest.raises(ExerciseFailed, match=r"refilled in place.*id\(\) or data_ptr\(\)"):
        run(lambda x: cache.setdefault(x.data_ptr(), 2 * x))


def test_an_output_buffer_is_named():
    buffer = torch.empty(3, 4)
    with pytest.raises(ExerciseFailed, match=r"overwrote what the first returned"):
        run(lambda x: buffer.copy_(2 * x))


def test_an_answer_stuck_on_a_result_whatever_its_input_gets_the_diagnosis():
    """From the third call on, the second call's result whatever the input: stale on the
    refilled tensors, but just as wrong on copies of them, so no id() cache is blamed."""
    seen = []

    def late(x):
        seen.append(x.detach().clone())
        return 2 * seen[1] if len(seen) >= 3 else 2 * x

    with pytest.raises(ExerciseFailed, match=r"refilled in place.*: differs$"):
        run(late)
