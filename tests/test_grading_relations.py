"""The generic messages of `compare` name a simple relation between a wrong answer and the
reference when one holds exactly, and add nothing otherwise (`grading.relations`)."""

import math
import re

import pytest
import torch

from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.grading.compare import expect_close, expect_like, expect_shape
from labnn.exercises.grading.relations import append, shape_relation, value_relation

GENERIC = r"differs from the reference at \d+ of \d+ entries compared; the largest difference"


def close_message(got, want, **kwargs):
    """The message `expect_close` fails with."""
    with pytest.raises(ExerciseFailed) as info:
        expect_close(got, want, "f(x)", **kwargs)
    message = str(info.value)
    assert re.search(GENERIC, message), message
    assert len(message) < 400, message
    return message


@pytest.fixture
def want():
    return torch.randn(2, 4, 4, 5, generator=torch.Generator().manual_seed(0))


def test_minus(want):
    assert "minus the reference: a sign flipped" in close_message(-want, want)


def test_constant_factor(want):
    message = close_message(0.5 * want, want)
    assert "times c = 0.5: a constant factor (a scale or a count?)" in message


def test_constant_offset(want):
    assert "plus c = 3: a constant offset" in close_message(want + 3, want)


def test_swapped_axes_named_by_dims(want):
    message = close_message(want.transpose(1, 2), want, dims="b h i j")
    assert "with axes h and i swapped: a transpose?" in message
    assert "axes 1 and 2 swapped" in close_message(want.transpose(1, 2), want)


@pytest.mark.parametrize("step, sign", [(1, "-"), (-1, "+")])
def test_shifted_by_one(want, step, sign):
    message = close_message(want.roll(step, 3), want, dims="b h i j")
    assert "shifted by one along axis j" in message
    assert f"holds the expected at k {sign} 1" in message


@pytest.mark.parametrize("dim, named", [(0, "b (dim 0)"), (3, "j (dim 3)")])
def test_reversed_along_an_axis(want, dim, named):
    """A tensor reversed along one axis (batch or tokens flipped, trial 68) names the axis."""
    message = close_message(want.flip(dim), want, dims="b h i j")
    assert f"reversed along axis {named}: a .flip({dim}), a [::-1]" in message
    assert "reversed along axis 2:" in close_message(want.flip(2), want)


def test_right_values_wrong_places(want):
    perm = torch.randperm(want.numel(), generator=torch.Generator().manual_seed(1))
    got = want.flatten()[perm].reshape(want.shape)
    assert "the right values in the wrong places" in close_message(got, want)


def test_only_compared_entries_count(want):
    keep = torch.zeros(want.shape, dtype=torch.bool)
    keep[0] = True
    got = torch.where(keep, 2 * want, torch.randn(want.shape))
    assert "times c = 2" in close_message(got, want, where=keep)


def test_nothing_added_when_no_relation_holds(want):
    got = want + 0.1 * torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
    message = close_message(got, want)
    assert message.endswith(")."), message
    assert value_relation(got, want, torch.ones(want.shape, dtype=torch.bool)) == ""


def test_no_relation_that_the_reference_itself_satisfies():
    want = torch.ones(3, 3)  # symmetric and constant: a swap or a shift would say nothing
    got = torch.full((3, 3), 2.0)
    sentence = value_relation(got, want, torch.ones(3, 3, dtype=torch.bool))
    assert "swapped" not in sentence and "shifted" not in sentence
    assert "times c = 2" in sentence


def test_sentence_dropped_past_400_characters(want):
    what = "f(" + "x" * 250 + ")"
    with pytest.raises(ExerciseFailed) as info:
        expect_close(-want, want, what)
    message = str(info.value)
    assert len(message) < 400 and "minus" not in message and message.endswith(").")
    assert append("a" * 390, "b" * 20) == "a" * 390
    assert append("abc.", "") == "abc."


def shape_message(got_shape, want_shape, sizes=None):
    """The message `expect_like` fails with for a result of `got_shape`."""
    with pytest.raises(ExerciseFailed) as info:
        expect_like(torch.zeros(got_shape), torch.zeros(want_shape), "f(x)", sizes=sizes)
    message = str(info.value)
    assert len(message) < 400, message
    return message


def test_shape_permutation():
    message = shape_message((12, 2), (2, 12))
    assert message.startswith("f(x) has shape [12, 2], expected [2, 12].")
    assert "another order (axes 0 and 1 swapped): a transpose/permute?" in message
    message = shape_message((4, 2, 3), (2, 3, 4))
    assert "another order: a transpose/permute?" in message


def test_shape_extra_or_missing_axis_of_size_1():
    assert "An extra axis of size 1 (axis 2): find what added it" in shape_message(
        (2, 3, 1, 4), (2, 3, 4))
    assert "A missing axis of size 1 (axis 0): unsqueeze?" in shape_message((3, 4), (1, 3, 4))
    assert "Only axes of size 1 differ" in shape_relation((1, 3, 4), (3, 4, 1, 1))


def test_shape_merged_or_split_axes():
    assert "with axes 0-1 merged: reshape back?" in shape_message((6, 4, 9), (2, 3, 4, 9))
    assert "axes 0-1, 2-3 merged" in shape_relation((6, 20), (2, 3, 4, 5))
    assert "Yours has axes 1-2 where the expected shape has one" in shape_message(
        (4, 2, 3), (4, 6))


def test_shape_nothing_added_when_no_relation_holds():
    assert shape_message((2, 3, 0, 4), (2, 3, 4)).endswith("expected [2, 3, 4].")
    assert shape_relation((5, 4), (2, 10)) == ""
    assert shape_relation((2, 3), (2, 3)) == ""
    with pytest.raises(ExerciseFailed) as info:  # named axes already show the swap
        expect_shape(torch.zeros(3, 2), (2, 3), "f(x)", sizes={"B": 2, "T": 3})
    assert str(info.value).endswith("expected [2, 3] = [B, T].")


def test_expect_close_names_a_difference_beside_an_infinity_it_does_not_compare():
    """An answer with -inf where `where` says "not compared" and a wrong value where it
    does: `size * keep` made inf * 0 = NaN there, the largest difference NaN, and the check
    crashed with a bare IndexError instead of naming the wrong entry."""
    from labnn.exercises.grading import ExerciseFailed
    from labnn.exercises.grading.compare import expect_close

    want = torch.tensor([[1.0, 0.0, 0.0], [1.0, 2.0, 0.0]])
    got = torch.tensor([[1.0, -math.inf, -math.inf], [1.0, 2.5, -math.inf]])
    keep = torch.tensor([[True, False, False], [True, True, False]])
    with pytest.raises(ExerciseFailed, match=r"at 1 of 3 entries compared; the largest "
                                              r"difference, 0\.5, is at \[1, 1\]"):
        expect_close(got, want, "f(x)", where=keep)


def test_expect_unchanged_names_an_in_place_operation_that_kept_the_values():
    """`x.mul_(1.0)` leaves the values and moves the caller's version counter (autograd then
    refuses a backward through what saved x): every checker's `expect_unchanged` names it,
    for the very tensor snapshotted only (a copy handed in is not judged by its counter)."""
    from labnn.exercises.grading import expect_unchanged, snapshot

    x = torch.ones(3)
    before = snapshot(x=x)
    expect_unchanged(before, "f(x)", x=x)  # nothing done: passes
    x.mul_(1.0)
    with pytest.raises(ExerciseFailed, match=r"f\(x\) changed its input `x` in place.*version"):
        expect_unchanged(before, "f(x)", x=x)
    copy = x.clone().mul_(1.0)  # another tensor, its own counter
    expect_unchanged(snapshot(x=x), "f(x)", x=copy)
