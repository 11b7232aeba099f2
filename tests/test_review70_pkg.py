"""Review 70 of the package, each test written failing first."""

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.training.evaluate import stream_loss
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig
from test_host_sync import count_reads  # noqa: F401 (a fixture)

V = 11
SIZE = dict(d_model=16, n_heads=2, n_layers=2)
MODELS = {
    "transformer": lambda: TransformerLM(TransformerConfig(V, seq_len=16, **SIZE)),
    "xl": lambda: TransformerXL(XLConfig(V, mem_len=8, **SIZE)),
    "feedback": lambda: FeedbackTransformer(FeedbackConfig(V, attn_len=4, **SIZE)),
    "kv": lambda: FeedbackTransformerKV(FeedbackKVConfig(V, attn_len=4, **SIZE)),
}
STREAMING = ["xl", "feedback", "kv"]


def recall_model():
    from labnn.data.recall import RecallVocab

    return FeedbackTransformer(FeedbackConfig(RecallVocab().vocab_size, attn_len=4, **SIZE))


def ids(n=600):
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(0))


# 1. stream_logits checks its ids at its door; stream_loss calls past it

@pytest.mark.parametrize("name", STREAMING)
def test_stream_logits_refuses_an_id_outside_the_vocabulary(name):
    """`stream_logits` called the model past its door: an id outside the vocabulary was
    an IndexError deep in the embedding on a CPU (a device-side assert on a GPU)."""
    model = MODELS[name]().eval()
    x = ids()[:16].view(2, 8).clone()
    x[1, 3] = V
    with pytest.raises(ValueError, match=r"tokens contains id 11, outside the vocabulary "
                                         r"\[0, 11\)"):
        model.stream_logits(x)
    with pytest.raises(ValueError, match="contains id -1, outside"):
        model.stream_logits(x.clamp(max=V - 1) - 1)


@pytest.mark.parametrize("name", STREAMING)
def test_stream_logits_reads_once_per_call_and_stream_loss_once_per_corpus(name,
                                                                           count_reads):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x = ids()[:32].view(2, 16)
    count_reads["n"] = 0
    logits, state = model.stream_logits(x[:, :8])
    assert count_reads["n"] == 1
    past = model.stream_logits_checked_ids(x[:, :8])[0]
    torch.testing.assert_close(past, logits, rtol=0, atol=0)
    count_reads["n"] = 0
    model.stream_logits(x[:, 8:], state)
    assert count_reads["n"] == 1
    count_reads["n"] = 0
    stream_loss(model, ids(), batch_size=2, seq_len=8, max_batches=5)
    assert count_reads["n"] == 2  # the corpus's check, the mean of the losses


def test_stream_loss_still_calls_a_learners_own_stream_logits():
    calls = []

    class Mine(TransformerXL):
        def stream_logits(self, tokens, mems=None, *, mem_len=None):
            calls.append(tokens.shape)
            return super().stream_logits(tokens, mems, mem_len=mem_len)

    model = Mine(XLConfig(V, mem_len=8, **SIZE))
    stream_loss(model, ids(), batch_size=2, seq_len=8, max_batches=3)
    assert calls == [torch.Size([2, 8])] * 3

