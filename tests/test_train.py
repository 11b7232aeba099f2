import pytest
import torch

from labnn.train import TrainConfig, Trainer, evaluate
from labnn.transformer import TransformerConfig, TransformerLM


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return TransformerLM(TransformerConfig(vocab_size=13, seq_len=16, d_model=16, n_heads=2, n_layers=1, **kw))


def data():
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 13, (40,), generator=g)
    ids = base.repeat(60)  # periodic: learnable
    return ids[:2000], ids[2000:]


def cfg(tmp_path=None, **kw):
    base = dict(max_iters=20, batch_size=4, seq_len=16, lr=3e-3, warmup_iters=4, eval_interval=5, eval_iters=3, device="cpu", show_progress=False)
    if tmp_path is not None:
        base["checkpoint"] = str(tmp_path / "ckpt.pt")
    return TrainConfig(**{**base, **kw})


def test_loss_goes_down_and_history_is_recorded():
    tr, va = data()
    h = Trainer(make(), tr, va, cfg(max_iters=60, eval_interval=20)).fit()
    assert h["iter"] == [0, 20, 40, 60]
    assert h["val_loss"][-1] < h["val_loss"][0] < 2.7
    assert len(h["lr"]) == len(h["time"]) == 4


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_resume_after_a_crash_continues_exactly(tmp_path, monkeypatch, dropout):
    tr, va = data()
    straight = make(dropout=dropout)
    Trainer(straight, tr, va, cfg()).fit()

    crashing = Trainer(make(dropout=dropout), tr, va, cfg(tmp_path))
    step = crashing.train_step

    def crash_at_12():
        if crashing.iter == 12:
            raise KeyboardInterrupt  # the last checkpoint is from iteration 10
        return step()

    monkeypatch.setattr(crashing, "train_step", crash_at_12)
    with pytest.raises(KeyboardInterrupt):
        crashing.fit()
    resumed = make(seed=99, dropout=dropout)  # another init: everything must come from the checkpoint
    torch.manual_seed(123)  # a disturbed global RNG must not matter either
    h = Trainer(resumed, tr, va, cfg(tmp_path)).fit(resume=True)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert h["iter"] == [0, 5, 10, 15, 20]


def test_checkpoint_from_another_config_is_refused(tmp_path):
    tr, va = data()
    Trainer(make(), tr, va, cfg(tmp_path, max_iters=5)).fit()
    other = TransformerLM(TransformerConfig(vocab_size=13, seq_len=16, d_model=32, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="another TransformerLM config — d_ff.*d_model: checkpoint 16 vs model 32"):
        Trainer(other, tr, va, cfg(tmp_path)).fit(resume=True)


def test_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    tr, va = data()
    trainer = Trainer(make(), tr, va, cfg(tmp_path, max_iters=5))
    trainer.fit()
    before = (tmp_path / "ckpt.pt").read_bytes()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        trainer.save(tmp_path / "ckpt.pt")
    assert (tmp_path / "ckpt.pt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


class Counter(torch.nn.Module):
    """A stand-in stream model: its state counts the batches it has seen since the last reset."""

    def __init__(self):
        super().__init__()
        self.config = TransformerConfig(vocab_size=13)
        self.emb = torch.nn.Embedding(13, 13)
        self.seen = []

    def forward(self, x, state=None):
        n = 0 if state is None else state
        self.seen.append(n)
        return self.emb(x), n + 1


def test_stream_mode_carries_state_and_resets_at_the_start_of_each_pass():
    tr, va = torch.arange(1000) % 13, torch.arange(200) % 13
    model = Counter()
    Trainer(model, tr, va, cfg(max_iters=40, stream=True, batch_size=4, seq_len=16, eval_interval=100, eval_iters=2)).fit()
    per_pass = (999 // 4) // 16  # 15 batches per pass
    train_seen = model.seen[4:][: per_pass + 1]  # after the 2 + 2 evaluation batches at step 0
    assert train_seen[:per_pass] == list(range(per_pass))
    assert train_seen[per_pass] == 0  # reset at the stream boundary


def test_config_errors_and_schedule():
    with pytest.raises(ValueError, match="max_iters must be a positive int, got 0"):
        TrainConfig(max_iters=0)
    c = TrainConfig(max_iters=100, lr=1.0, min_lr=0.1, warmup_iters=10)
    assert c.lr_at(0) == pytest.approx(0.1) and c.lr_at(9) == pytest.approx(1.0)
    assert c.lr_at(100) == pytest.approx(0.1) and c.lr_at(55) == pytest.approx(0.55)


def test_evaluate_is_deterministic():
    tr, va = data()
    m = make()
    assert evaluate(m, va, cfg()) == evaluate(m, va, cfg())
