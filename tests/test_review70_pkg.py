"""Review 70 of the package, each test written failing first."""

import pytest
import torch

from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.training.evaluate import stream_loss
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig
from test_host_sync import count_reads  # noqa: F401 (a fixture)
from test_review69_pkg import MODELS, SIZE, V, ids  # the same four models and corpus

STREAMING = ["xl", "feedback", "kv"]


def recall_model():
    from labnn.data.recall import RecallVocab

    return FeedbackTransformer(FeedbackConfig(RecallVocab().vocab_size, attn_len=4, **SIZE))


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


# 2. the task loops read the device at an interval, not at every step

@pytest.fixture
def device_reads(monkeypatch):
    """Host reads (`READS`) of tensors on the accelerator, under the device audit
    (`labnn.training.device_audit`: `cpu:0` stands for a GPU); host tensors' reads, which
    wait for nothing, are not counted."""
    from torch import nn

    from labnn.training import device_audit as audit
    from test_host_sync import READS

    monkeypatch.setattr(nn.Module, "to", audit._module_to(nn.Module.to))
    counts, depth = {"n": 0}, [0]
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            counts["n"] += audit.on_accelerator(self) and not depth[0]  # the audit's own
            depth[0] += 1  # call of the method, inside its mode, is the same read
            try:
                return _original(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(torch.Tensor, name, counted)
    with audit.DeviceAudit():
        yield counts


def recall_reads(n, counts):
    from labnn.data.recall import recall_batches
    from labnn.training import device_audit as audit
    from labnn.training.tasks import train_recall

    torch.manual_seed(0)
    model = recall_model().to(audit.ACCELERATOR)
    batches = recall_batches(n, 2, 6)
    counts["n"] = 0
    result = train_recall(model, batches, lr=1e-3, record_every=3)
    return counts["n"], result


def program_reads(n, counts):
    from labnn.data.programs import program_task
    from labnn.training import device_audit as audit
    from labnn.training.tasks import train_on_programs

    torch.manual_seed(0)
    train, test, tok = program_task(n_train=64, n_test=16, n_statements=3, seed=0)
    model = TransformerLM(TransformerConfig(tok.vocab_size, seq_len=64, **SIZE))
    model.to(audit.ACCELERATOR)
    counts["n"] = 0
    train_on_programs(model, train, test, iters=n, batch_size=4, eval_programs=16)
    return counts["n"]


def test_train_recall_reads_the_device_at_an_interval(device_reads):
    """`train_recall` read the loss (`loss.item()`) and the divergence check of `update`
    back at every step: two waits for the GPU per step (12 reads for 6 steps, 80 for 40).
    The losses stay on the device until the end, the check is a flag read every
    `CHECK_EVERY` steps."""
    few, _ = recall_reads(6, device_reads)
    many, _ = recall_reads(40, device_reads)
    assert (few, many) == (2, 2)  # the flag after the last step, the losses


def test_train_on_programs_reads_the_device_at_an_interval(device_reads):
    few, many = program_reads(4, device_reads), program_reads(30, device_reads)
    assert (few, many) == (2, 2)  # the flag after the last step, the last loss


def test_the_task_loops_still_stop_on_a_divergence_and_say_where(monkeypatch):
    from labnn.data.recall import recall_batches
    from labnn.training import tasks
    from labnn.training.optim import Diverged

    monkeypatch.setattr(tasks, "CHECK_EVERY", 4)
    batches = recall_batches(10, 2, 6)
    steps = []

    def logits(model, x):  # NaN from the third step on
        steps.append(1)
        out = model(x)[0]
        return out * float("nan") if len(steps) >= 3 else out

    with pytest.raises(Diverged, match=r"NaN or infinite at step 2 of 10: training diverged"):
        tasks.train_recall(recall_model(), batches, logits_fn=logits)
    assert len(steps) == 4  # read at the interval
    steps.clear()
    with pytest.raises(Diverged, match=r"at step 2 of 3: .* try a lower lr \(now 0.001\)"):
        tasks.train_recall(recall_model(), batches[:3], logits_fn=logits)


# 3. a corpus is checked once, not at every evaluation

@pytest.mark.parametrize("stream", [False, True])
def test_the_trainers_evaluations_do_not_rescan_its_corpus(stream, count_reads):
    """`Trainer.record` called `evaluate`, whose door scanned each split again (a pass
    over the whole corpus per split per evaluation, ids the Trainer had checked): 4 reads
    per evaluation, 2 now (the mean of each split's losses)."""
    from labnn.training import TrainConfig, Trainer

    config = TrainConfig(batch_size=2, seq_len=8, max_iters=4, eval_iters=3, stream=stream,
                         device="cpu", show_progress=False)
    trainer = Trainer(MODELS["xl"](), ids()[:400], ids()[400:], config)
    count_reads["n"] = 0
    trainer.record()
    assert count_reads["n"] == 2


@pytest.mark.parametrize("stream", [False, True])
def test_evaluate_still_names_a_corpus_that_is_not_ids(stream):
    from labnn.training import TrainConfig
    from labnn.training.evaluate import evaluate

    config = TrainConfig(batch_size=2, seq_len=8, eval_iters=3, stream=stream, device="cpu")
    model = MODELS["xl"]()
    with pytest.raises(TypeError, match=r"ids must be a 1-D integer tensor, got list"):
        evaluate(model, ids().tolist(), config)
    with pytest.raises(TypeError, match=r"ids must be a 1-D integer tensor, got "
                                        r"torch.int64 \[2, 300\]"):
        evaluate(model, ids().view(2, 300), config)
    bad = ids().clone()
    bad[5] = -1
    with pytest.raises(ValueError, match=r"ids hold ids in \[-1, 10\], outside the model's "
                                         r"vocabulary \[0, 11\)"):
        evaluate(model, bad, config)


def test_a_model_of_ones_own_still_gets_the_inputs_it_takes():
    """The task loops' door (`check_inputs`) checks ids against `model.config.vocab_size`;
    a module without one is called as before, on whatever inputs it takes."""
    from labnn.training.tasks import train_recall

    class Floats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(1, 3)

        def forward(self, x):
            return self.w(x[..., None]), None

    x = torch.rand(2, 4)
    assert len(train_recall(Floats(), [(x, torch.zeros(2, 4, dtype=torch.long))])["losses"]) == 1
