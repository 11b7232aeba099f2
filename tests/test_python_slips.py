"""Issue 28, trial 8: the Python slips named from a crash of the learner's code, for every
exercise (`labnn.exercises.grading.python_slips`), and no hint where the error and the
expression do not make it certain."""

import math

import pytest
import torch

from labnn.exercises.grading import ExerciseFailed, running
from labnn.exercises.grading.python_slips import name_python_slip

X = torch.randn(2, 5, 24)


def hint(fn, *args):
    """The message `name_python_slip` gives for the error `fn(*args)` raises (None: no
    hint)."""
    try:
        fn(*args)
    except Exception as err:  # the learner's error
        try:
            name_python_slip(err)
        except ExerciseFailed as named:
            return str(named)
        return None
    raise AssertionError("fn did not raise")


def test_a_size_computed_with_true_division_is_named_with_its_fix():
    message = hint(lambda x, h: x.view(2, 5, h, x.size(-1) / h), X, 4)
    assert "`x.size(-1) / h` is a float" in message and "`x.size(-1) // h`" in message


def test_a_float_name_as_a_size_is_named_by_its_value():
    def split(x, h):
        width = x.size(-1) / h
        return x.reshape(2, 5, h, width)
    assert "`width` is a float (6.0)" in hint(split, X, 4)


def test_a_division_inside_a_call_that_returned_is_not_blamed():
    # int(24 / 4) is an int: the float is elsewhere, so no `/` is named
    assert hint(lambda x: x.view(2, 5, int(24 / 4), 4.0), X) is None


def test_a_tuple_of_tensors_in_arithmetic_is_named_with_its_unpacking():
    saved = (X,)
    message = hint(lambda g: 2 * saved * g, X)
    assert "`saved` is a tuple of 1 tensor, not a tensor" in message
    assert "`x, = saved`" in message


def test_a_method_used_without_its_call_is_named():
    message = hint(lambda t: t.numel() * t.element_size, X)
    assert "`t.element_size` is a method, not its value: call it, `t.element_size()`" in message


def test_a_reduction_that_drops_its_axis_is_named_when_keepdim_fixes_it():
    s = torch.randn(2, 5, 7)
    message = hint(lambda s: s.exp() / s.exp().sum(-1), s)
    assert "`s.exp().sum(-1, keepdim=True)`" in message


def test_a_reduction_whose_keepdim_would_not_fix_the_clash_is_not_named():
    # the clash is the other operand's, not the reduced axis: keepdim=True fails too
    assert hint(lambda s, t: t / s.sum(-1), torch.randn(2, 5, 7), torch.randn(3, 4)) is None


def test_other_errors_keep_no_hint():
    assert hint(lambda x: x @ x, X) is None
    assert hint(lambda x: math.sqrt(x.size()), X) is None


def test_running_names_the_slip_instead_of_the_bare_error(capsys):
    with pytest.raises(ExerciseFailed, match=r"call it, `t.element_size\(\)`"):
        with running("cache_bytes(cache)"):
            t = X
            t.numel() * t.element_size


def test_the_check_of_a_fix_runs_nothing_in_place():
    s = torch.ones(2, 5, 7)
    # confirming keepdim=True would run s.add_(1) again: no hint, and s is left alone
    assert hint(lambda s: s / s.add_(1).sum(-1), s) is None
    assert torch.equal(s, torch.full((2, 5, 7), 2.0))


def test_a_reduction_through_a_torch_function_is_confirmed():
    s = torch.randn(2, 5, 7)
    assert "keepdim=True" in hint(lambda s: torch.exp(s) / torch.exp(s).sum(dim=-1), s)


def test_a_learners_error_is_shown_from_the_learners_code_on():
    """Learner trial of stop 40: a crash in the learner's function showed three frames of
    the checker (the decorator, the checker, `call`) before the learner's own line. The
    traceback now goes from the decorator's frame (which IPython and pytest hide,
    `__tracebackhide__`) straight to the learner's function; the error keeps its type."""
    import traceback

    from labnn.exercises.three_memories.recall_task import check_make_recall

    def stacked(filler, values, positions):
        return torch.stack([filler, values]), positions  # [5, 9] and [5]

    with pytest.raises(RuntimeError, match="stack expects each tensor") as raised:
        check_make_recall(stacked)
    names = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert names[names.index("run") + 1:] == ["stacked"]
    assert "__tracebackhide__" in raised.traceback[1].frame.f_locals


def test_an_assignment_through_two_subscripts_is_named():
    """Learner trial of stop 40: `x[rows][positions] = values` raised torch's shape mismatch
    with no word on why: the first subscript makes a copy."""
    def chained(x, rows, positions, values):
        x[rows][positions] = values

    said = hint(chained, torch.zeros(5, 9), torch.arange(5), torch.arange(5), torch.ones(5))
    assert said.startswith("x[rows][positions] = ... indexes twice: x[rows] with a tensor "
                           "index is a new tensor (a copy)")
    assert "x[rows, positions] = ..." in said and "torch said: shape mismatch" in said
    assert hint(lambda x: x[0][1] + torch.ones(3), torch.zeros(2, 2, 2)) is None  # a read


def test_a_python_int_given_to_torch_sqrt_is_sent_to_math():
    # a number's square root, not a tensor built from a size (the causal mask's advice)
    def scaled(x):
        d = x.size(-1)
        return x / torch.sqrt(d)

    message = hint(scaled, X)
    assert "`d` is a Python int (24)" in message and "math.sqrt(d) or d ** 0.5" in message
    assert "torch.ones" not in message
