"""Trial 53c: the next engineer reading the package as its annotated pages show it, and
calling it. Each test was written failing, from what the reader found: an argument taken
silently as another value (a wrong result, no error), a raw torch error where a message
naming the argument belongs, a config changed under a run, a host read per training step
that nothing used.
"""

import dataclasses
import os
import sys

import pytest
import torch

from labnn.nn.attention import MultiHeadAttention
from labnn.nn.kv_cache import KVBuffer
from labnn.training.config import TrainConfig
from labnn.training.evaluate import stream_loss
from labnn.xl.model import TransformerXL, XLConfig
from labnn.xl.relative_attention import RelativeMultiHeadAttention


@pytest.mark.parametrize("skip", [1.5, 0.01, True, "1"])
def test_stream_loss_refuses_a_skip_that_is_not_an_int(skip):
    """`skip=1.5` scored as `skip=2`, `skip=0.01` and `skip=True` as `skip=1`."""
    model = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=1, mem_len=4))
    with pytest.raises(ValueError, match=r"skip must be a non-negative int, got"):
        stream_loss(model, torch.randint(11, (200,)), batch_size=2, seq_len=8, skip=skip)


@pytest.mark.parametrize("value", ["no", 0, 1, torch.tensor(False)])
def test_sees_later_must_be_true_false_or_none(value):
    """`sees_later='no'` was taken as True: the scores of another set of distances."""
    attn = RelativeMultiHeadAttention(8, 2).eval()
    x, full = torch.randn(1, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"sees_later must be True, False or None"):
        attn(x, full, sees_later=value)


@pytest.mark.parametrize("name, value", [("causal", 1), ("causal", "yes"),
                                         ("need_weights", "no"), ("need_weights", 0)])
def test_attention_flags_must_be_bools(name, value):
    """`causal=1` ended in torch's error about `is_causal`; `need_weights='no'` took the
    written-out path and returned weights."""
    attn = MultiHeadAttention(8, 2).eval()
    with pytest.raises(ValueError, match=rf"{name} must be True or False, got"):
        attn(torch.randn(2, 3, 8), **{name: value})


@pytest.mark.parametrize("k", [[[1.0]], None])
def test_kv_buffer_of_refuses_what_is_not_a_tensor(k):
    """`KVBuffer.of([[1.0]], [[1.0]])` failed with "'list' object has no attribute 'size'"."""
    with pytest.raises(TypeError, match=r"keys and values must be tensors, got"):
        KVBuffer.of(k, k)


def test_a_train_config_cannot_be_changed_under_its_checks():
    """`c.lr = 5e-5` left `min_lr` at a tenth of the old lr, above the new one: the cosine
    "decay" rose from 5e-5 to 1e-4 (the constructor refuses that), and `warmup_iters =
    2.5` passed. Frozen, as the model configs are; `dataclasses.replace` checks again."""
    c = TrainConfig(max_iters=100, warmup_iters=0, show_progress=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 5e-5
    with pytest.raises(ValueError, match=r"min_lr"):
        dataclasses.replace(c, lr=5e-5)
    assert dataclasses.replace(c, lr=5e-5, min_lr=None).min_lr == pytest.approx(5e-6)


def test_train_step_reads_nothing_back_that_it_does_not_use(monkeypatch):
    """`train_step` ended with `loss.item()`, a wait for the device at every step, whose
    value `fit` threw away. It returns the loss as a tensor now."""
    from labnn.training.trainer import Trainer
    from labnn.transformer import TransformerConfig, TransformerLM

    ids = torch.randint(11, (400,))
    model = TransformerLM(TransformerConfig(11, seq_len=8, d_model=16, n_heads=2,
                                            n_layers=1))
    trainer = Trainer(model, ids, ids, TrainConfig(max_iters=2, batch_size=2, seq_len=8,
                                                   show_progress=False))
    reads, real = [], torch.Tensor.item

    def item(self):  # labnn's own reads (torch's CPU AdamW reads its step counts)
        caller = sys._getframe(1).f_code.co_filename
        reads.extend([caller] if f"{os.sep}labnn{os.sep}" in caller else [])
        return real(self)

    monkeypatch.setattr(torch.Tensor, "item", item)
    loss = trainer.train_step()
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad
    assert reads == []
