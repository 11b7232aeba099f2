"""General crash hints of labnn.exercises.grading.operator_slips (issue 28, trial 24a)."""

import pytest
import torch

from labnn.exercises.grading import ExerciseError
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask


def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def test_or_between_comparisons_without_parentheses_is_named():
    def mask(n, seg_len, mem_len):
        i, j = _ij(n)
        return ~(j < i // seg_len * seg_len - mem_len | j > i)

    with pytest.raises(ExerciseError, match=r"`\|` binds tighter.*\(j < i // seg_len"):
        check_segment_mask(mask)


def test_parenthesised_comparisons_are_accepted():
    def mask(n, seg_len, mem_len):
        i, j = _ij(n)
        return (j >= i // seg_len * seg_len - mem_len) & (j <= i)

    check_segment_mask(mask)


def test_requires_grad_false_on_a_leaf_copy_is_not_blamed():
    x = torch.ones(2, requires_grad=True) * 2
    try:
        x.requires_grad_(False)
    except RuntimeError as err:
        from labnn.exercises.grading.operator_slips import requires_grad_on_result
        import ast
        assert requires_grad_on_result(err, ast.parse("x + 1", mode="eval").body, {}) is None
