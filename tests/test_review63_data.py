"""Review 63 of labnn.data: results that were silently off, and errors that named the wrong
mistake."""

import pytest
import torch

from labnn.data import CharTokenizer, accuracy_by_distance, make_recall, train_val_split
from labnn.data.recall import plateau_exit


@pytest.mark.parametrize("n, fraction, train", [(10, 0.8, 2), (20, 0.9, 2), (25, 0.56, 11),
                                                (100, 0.1, 90), (1_115_394, 0.1, 1_003_854)])
def test_train_val_split_is_not_one_short_by_rounding(n, fraction, train):
    # 10 * (1 - 0.8) is 1.9999999999999996 in floats: the split gave 1 and 9, not 2 and 8
    first, second = train_val_split(torch.arange(n), fraction)
    assert (len(first), len(second)) == (train, n - train)


def test_accuracy_by_distance_refuses_integer_logits():
    # NaN (never tested) cast to the logits' integer dtype came back as -9223372036854775808
    x, y = make_recall(torch.full((2, 5), 9), torch.tensor([1, 2]), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="logits"):
        accuracy_by_distance(torch.zeros(2, 5, 10, dtype=torch.long), y, 4)


def test_plateau_exit_names_a_level_that_is_not_a_number():
    with pytest.raises(TypeError, match="level"):
        plateau_exit([1.0] * 30, None)


def test_char_tokenizer_decodes_every_integer_dtype():
    tok = CharTokenizer("ab")
    assert tok.decode(torch.tensor([0, 1], dtype=torch.uint16)) == "ab"
    with pytest.raises(TypeError, match="bool"):
        tok.decode(torch.tensor([True, False]))
