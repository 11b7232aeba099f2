"""`RelativeMultiHeadAttention.relative_keys(s, later)` and `key_table(n)`, which notebook 02
calls by hand, check their counts at the door: a negative count failed deep in
`torch.arange` ("upper bound and lower bound inconsistent with step sign"), and a negative
`later` returned a table of `s + later` rows silently, distances its docstring does not
promise."""

import argparse

import pytest
import torch

from labnn.xl.relative_attention import RelativeMultiHeadAttention


@pytest.fixture
def attn():
    torch.manual_seed(0)
    return RelativeMultiHeadAttention(8, 2)


@pytest.mark.parametrize("call, message", [
    (lambda a: a.relative_keys(-1), r"s must be a non-negative int, got -1"),
    (lambda a: a.relative_keys(3, -2), r"later must be a non-negative int, got -2"),
    (lambda a: a.relative_keys(2.0), r"s must be a non-negative int, got 2.0"),
    (lambda a: a.relative_keys(True), r"s must be a non-negative int, got True"),
    (lambda a: a.key_table(-3), r"n must be a non-negative int, got -3"),
])
def test_a_bad_count_is_named_at_the_door(attn, call, message):
    with pytest.raises((ValueError, TypeError, argparse.ArgumentTypeError), match=message):
        call(attn)


def test_good_counts_keep_their_shapes(attn):
    assert attn.relative_keys(0).shape == (0, 2, 4)
    assert attn.relative_keys(3, 2).shape == (5, 2, 4)
    assert attn.key_table(4).shape == (2, 4, 4)
