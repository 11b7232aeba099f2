"""Review 64 of labnn.training: arguments of the task loops that passed as something else
(`True` as a learning rate of 1, a fraction 0.5 as `record_every`)."""

import pytest
import torch

from labnn.data.recall import recall_batches
from labnn.feedback import FeedbackConfig, FeedbackTransformer
from labnn.training.tasks import train_recall, warmup_cosine


@pytest.fixture
def model():
    torch.manual_seed(0)
    return FeedbackTransformer(FeedbackConfig(16, d_model=8, n_heads=2, n_layers=1))


@pytest.mark.parametrize("name, value", [("lr", True), ("warmup", True), ("warmup", "0.1")])
def test_train_recall_refuses_a_bool_rate_or_warmup(model, name, value):
    # lr=True trained at a rate of 1 (the loss went from 2.7 to 36), silently
    with pytest.raises(TypeError, match=name):
        train_recall(model, recall_batches(1, 2, 6), **{name: value})


@pytest.mark.parametrize("value", [-1, 0.5, True])
def test_train_recall_refuses_a_record_every_that_is_not_a_count(model, value):
    # -1 and 0.5 recorded the mix at every step (i % -1 == 0, i % 0.5 == 0)
    with pytest.raises((TypeError, ValueError), match="record_every"):
        train_recall(model, recall_batches(3, 2, 6), record_every=value)


def test_train_recall_records_every_second_step(model):
    out = train_recall(model, recall_batches(4, 2, 6), record_every=2)
    assert [i for i, _ in out["mix"]] == [0, 2]


def test_warmup_cosine_refuses_a_negative_step():
    # step -5 of 10 gave the rate -1.0: an ascent
    with pytest.raises(ValueError, match="i must be a non-negative int"):
        warmup_cosine(-5, 10, 1.0, 2)
