"""Tests of the delayed-recall task: labels follow the value, distances, the scorer, errors."""

import pytest
import torch

from labnn.data.recall import (IGNORE, RecallVocab, accuracy_by_distance, make_recall, recall_batch,
                               value_distances)


def test_value_written_and_labelled_after_it():
    filler = torch.full((2, 6), 9)
    x, y = make_recall(filler, torch.tensor([3, 1]), torch.tensor([0, 3]))
    assert x.tolist() == [[3, 9, 9, 9, 9, 9], [9, 9, 9, 1, 9, 9]]
    assert y.tolist() == [[IGNORE, 3, 3, 3, 3, 3], [IGNORE] * 4 + [1, 1]]
    assert filler.eq(9).all(), "the filler passed in must not change"


def test_distances_count_from_the_value():
    _, y = make_recall(torch.full((1, 6), 9), torch.tensor([0]), torch.tensor([2]))
    assert value_distances(y).tolist() == [[0, 0, 0, 1, 2, 3]]


def test_recall_batch_seeded_and_in_vocabulary():
    vocab = RecallVocab(n_values=4, n_filler=3)
    pos = torch.tensor([0, 5, 8])
    a = recall_batch(pos, 10, vocab, generator=torch.Generator().manual_seed(1))
    b = recall_batch(pos, 10, vocab, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    x, y = a
    assert x.max() < vocab.vocab_size and x.min() >= 0
    # exactly one value token per row, at its position; everything else is filler
    assert (x < vocab.n_values).sum(1).tolist() == [1, 1, 1]
    assert x[torch.arange(3), pos].lt(vocab.n_values).all()
    assert torch.equal(y[torch.arange(3), pos + 1], x[torch.arange(3), pos])
    assert vocab.chance == 0.25


def test_accuracy_by_distance_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    x, y = recall_batch(torch.randint(0, 11, (40,), generator=g), 12, generator=g)
    logits = torch.randn(40, 12, 16, generator=g)
    logits[..., :8] += 3 * torch.nn.functional.one_hot(y.clamp(min=0), 16)[..., :8] * (torch.rand(40, 12, 1, generator=g) < 0.5)
    got = accuracy_by_distance(logits, y, 13)
    d = value_distances(y)
    for k in range(1, 14):
        sel = d == k
        want = (logits.argmax(-1) == y)[sel].float().mean() if sel.any() else torch.tensor(float("nan"))
        torch.testing.assert_close(got[k - 1], want, equal_nan=True)
    assert torch.isnan(got[11:]).all()  # a value at position 0 is at most 11 positions back


def test_perfect_and_constant_predictions():
    x, y = recall_batch(torch.zeros(16, dtype=torch.long), 8, generator=torch.Generator().manual_seed(0))
    perfect = torch.nn.functional.one_hot(y.clamp(min=0), 16).float()
    assert accuracy_by_distance(perfect, y, 7).eq(1).all()


@pytest.mark.parametrize("call, match", [
    (lambda: make_recall(torch.zeros(2, 5), torch.tensor([1, 2]), torch.tensor([0, 1])), "filler must be a 2-D integer"),
    (lambda: make_recall(torch.zeros(2, 5, dtype=torch.long), torch.tensor([1]), torch.tensor([0, 1])), r"values \[1\]"),
    (lambda: make_recall(torch.zeros(2, 5, dtype=torch.long), torch.tensor([1, 2]), torch.tensor([0, 4])), "got 4"),
    (lambda: recall_batch(torch.tensor([0]), 1), "seq_len must be an int >= 2"),
    (lambda: RecallVocab(n_values=0), "n_values must be a positive int, got 0"),
    (lambda: accuracy_by_distance(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long), 2), r"logits \[N, T, V\]"),
    (lambda: accuracy_by_distance(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), 0), "max_distance"),
])
def test_bad_input_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
