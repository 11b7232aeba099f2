"""Tests of the delayed-recall task: labels follow the value, distances, the scorer, errors."""

import pytest
import torch

from labnn.data.recall import (IGNORE, RecallVocab, accuracy_by_distance, make_recall,
                               plateau_exit, recall_batch, recall_batches, value_distances)
from labnn.training.tasks import train_recall


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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_accuracy_by_distance_counts_exactly_in_half_precision(dtype):
    # trial 32c: counted in bfloat16, the hits stopped at 256 and 300 of 1,000 read 1.0
    y = torch.full((1000, 2), IGNORE)
    y[:, 1] = 0  # every row: value at 0, one labelled position at distance 1
    logits = torch.zeros(1000, 2, 3, dtype=dtype)
    logits[:300, 1, 0] = 1  # 300 right, 700 predict class 1
    logits[300:, 1, 1] = 1
    got = accuracy_by_distance(logits, y, 1)
    assert got.dtype == dtype
    assert got.item() == pytest.approx(0.3, abs=2e-3)


def test_perfect_and_constant_predictions():
    x, y = recall_batch(torch.zeros(16, dtype=torch.long), 8, generator=torch.Generator().manual_seed(0))
    perfect = torch.nn.functional.one_hot(y.clamp(min=0), 16).float()
    assert accuracy_by_distance(perfect, y, 7).eq(1).all()


def test_recall_batches_are_the_notebooks_loop():
    vocab = RecallVocab(n_values=4, n_filler=3)
    got = recall_batches(3, 5, 10, vocab, seed=7)
    g = torch.Generator().manual_seed(7)
    want = [recall_batch(torch.randint(0, 9, (5,), generator=g), 10, vocab, generator=g)
            for _ in range(3)]
    assert len(got) == 3
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, wx) and torch.equal(y, wy)
    assert not torch.equal(recall_batches(1, 5, 10, vocab, seed=8)[0][0], got[0][0])


class _Lookup(torch.nn.Module):
    """Logits at t depend on token t only: it can learn the label after a value."""

    def __init__(self, vocab_size):
        super().__init__()
        self.table = torch.nn.Embedding(vocab_size, vocab_size)

    def forward(self, x):
        return self.table(x), None

    def layer_weights(self):
        return self.table.weight[0, :3].softmax(0)


_ZEROS = torch.zeros(1, 2, dtype=torch.long)


def test_train_recall_lowers_the_loss_and_records():
    torch.manual_seed(0)
    vocab = RecallVocab(n_values=4, n_filler=2)
    batches = recall_batches(60, 16, 6, vocab, seed=0)
    model = _Lookup(vocab.vocab_size)
    r = train_recall(model, batches, lr=0.05, record_every=20)
    assert len(r["losses"]) == 60 and r["seconds_per_step"] > 0
    assert sum(r["losses"][-10:]) < sum(r["losses"][:10]), "the loss should fall"
    assert [step for step, _ in r["mix"]] == [0, 20, 40]
    assert all(w.shape == (3,) and abs(w.sum().item() - 1) < 1e-6 for _, w in r["mix"])


def test_train_recall_ignores_unlabelled_positions():
    """All labels IGNORE but one: only that position's logits get a gradient."""
    model = _Lookup(4)
    x = torch.tensor([[0, 1, 2, 3]])
    y = torch.full_like(x, IGNORE)
    y[0, 2] = 1
    before = model.table.weight.detach().clone()
    train_recall(model, [(x, y)], lr=0.1, warmup=0.0)
    changed = (model.table.weight.detach() != before).any(1)
    assert changed.tolist() == [False, False, True, False]


def test_plateau_exit_needs_a_mean_below_the_level():
    losses = [2.0] * 10 + [1.0] * 10
    # the mean of steps 8..11 is 1.5, not below; that of 9..12 is
    assert plateau_exit(losses, 1.5, width=4) == 12
    assert plateau_exit(losses, 0.5, width=4) is None
    lucky = [2.0, 0.5, 2.0, 2.0]
    assert plateau_exit(lucky, 1.5, width=3) is None, "one lucky step is not an exit"


@pytest.mark.parametrize("call, match", [
    (lambda: plateau_exit([1.0], 2.0, width=0), "width must be a positive int"),
    (lambda: recall_batches(0, 4, 8), "steps must be a positive int, got 0"),
    (lambda: train_recall(_Lookup(4), []), "batches is empty"),
    (lambda: train_recall(_Lookup(4), [(_ZEROS, _ZEROS)], lr=float("inf")), "lr must"),
    (lambda: train_recall(_Lookup(4), [(_ZEROS, _ZEROS)], warmup=2), "warmup must be"),
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


def test_train_recall_gives_back_every_module_its_mode():
    """It left the model in training mode; now each module's own mode comes back."""
    model = _Lookup(4).eval()
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append(m.training))
    train_recall(model, [(_ZEROS, _ZEROS)], lr=0.1, warmup=0.0)
    assert seen == [True] and not model.training
