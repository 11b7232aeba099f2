import pytest
import torch

from labnn.training.trainer import TrainConfig, Trainer, TrainingDiverged, evaluate
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


def test_evaluation_leaves_every_module_s_mode_as_it_was_even_on_an_error():
    """`model.train(was_training)` set every submodule to the top module's mode, and an
    error in the middle left the model in eval mode."""
    from labnn.training.evaluate import stream_loss

    tr, va = data()
    m = make(dropout=0.1)
    m.blocks[0].eval()  # a mixed state, as a user may leave it
    evaluate(m, va, cfg())
    stream_loss(m, va, batch_size=2, seq_len=8, max_batches=2)
    assert m.training and not m.blocks[0].training and m.norm.training

    def fails(*args, **kwargs):
        raise RuntimeError("out of memory")

    m.forward = m.forward_checked_ids = fails  # an error inside the evaluation loop
    with pytest.raises(RuntimeError, match="out of memory"):
        evaluate(m, va, cfg())
    assert m.training and not m.blocks[0].training and m.norm.training


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", float("nan"), "lr must be a finite number > 0, got nan"),
        ("lr", float("inf"), "lr must be a finite number > 0, got inf"),
        ("lr", "1e-3", "lr must be a finite number > 0, got '1e-3'"),
        ("max_iters", True, "max_iters must be a positive int, got True"),
        ("batch_size", 4.0, "batch_size must be a positive int, got 4.0"),
        ("eval_iters", 0, "eval_iters must be a positive int, got 0"),
        ("warmup_iters", 1.5, "warmup_iters must be an int >= 0, got 1.5"),
        ("min_lr", -1e-4, "min_lr must be a finite number >= 0 and <= lr"),
        ("min_lr", 1.0, "min_lr must be a finite number >= 0 and <= lr"),
        ("weight_decay", float("nan"), "weight_decay must be a finite number >= 0, got nan"),
        ("grad_clip", float("nan"), "grad_clip must be a finite number >= 0 .0 disables., got nan"),
        ("betas", (0.9, 1.0), r"betas must be two numbers in \[0, 1\), got \(0.9, 1.0\)"),
        ("betas", 0.9, r"betas must be two numbers in \[0, 1\), got 0.9"),
        ("seed", -1, "seed must be a non-negative int, got -1"),
        ("seed", 2**64, r"seed must be below 2\*\*64 .torch's seeds are 64-bit., got 1844674407"),
        ("stream", "yes", "stream must be True or False, got 'yes'"),
        ("show_progress", 1, "show_progress must be True or False, got 1"),
        ("checkpoint", 3, "checkpoint must be a path .str or os.PathLike. or None, got 3"),
    ],
)
def test_every_bad_config_value_is_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("field", ["device", "checkpoint"])
def test_a_value_of_the_wrong_type_is_a_type_error(field):
    """A number for a device name or a path is a wrong type: TypeError, as for the flags
    (and a ValueError still, for code that catches that)."""
    with pytest.raises(TypeError, match=f"{field} must be a"):
        TrainConfig(**{field: 3})


def test_a_checkpoint_path_may_be_a_path(tmp_path):
    assert TrainConfig(checkpoint=tmp_path / "a.pt").checkpoint == str(tmp_path / "a.pt")


def test_data_too_short_for_a_batch_is_refused_before_training():
    tr, va = data()
    with pytest.raises(ValueError, match="val_ids hold 400 tokens, too few for seq_len=500"):
        Trainer(make(), tr, va, cfg(seq_len=500))
    with pytest.raises(ValueError, match="val_ids hold 400 tokens: too few for 100 streams of seq_len=16"):
        Trainer(make(), tr, va, cfg(stream=True, batch_size=100))


def test_bad_ids_are_refused_before_training():
    tr, va = data()
    with pytest.raises(TypeError, match="train_ids must be a 1-D integer tensor, got torch.float32"):
        Trainer(make(), tr.float(), va, cfg())
    with pytest.raises(TypeError, match=r"val_ids must be a 1-D integer tensor, got torch.int64 \[2, 200\]"):
        Trainer(make(), tr, va.view(2, -1), cfg())
    with pytest.raises(ValueError, match=r"train_ids hold ids in \[1, 13\], outside the model's vocabulary \[0, 13\)"):
        Trainer(make(), tr + 1, va, cfg())


def test_a_device_that_is_not_there_is_refused():
    from labnn.training.trainer import pick_device

    with pytest.raises(ValueError, match="device 'gpu' is not a device name"):
        pick_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' was asked for, but CUDA is not available"):
            pick_device("cuda")


class Exploding(torch.nn.Module):
    """A stand-in model whose loss turns NaN (or whose gradients do) from a given call on."""

    def __init__(self, at, where="loss"):
        super().__init__()
        self.config = TransformerConfig(vocab_size=13)
        self.emb = torch.nn.Embedding(13, 13)
        self.calls, self.at, self.where = 0, at, where

    def forward(self, x, state=None):
        if self.training:
            self.calls += 1
        logits = self.emb(x)
        if self.training and self.calls >= self.at:
            if self.where == "loss":
                logits = logits * float("nan")
            else:
                logits.register_hook(lambda g: g * float("inf"))
        return logits, None


@pytest.mark.parametrize("where", ["loss", "grad"])
def test_a_diverging_run_stops_with_a_clear_error_and_keeps_the_last_good_checkpoint(tmp_path, where):
    tr, va = data()
    model = Exploding(at=8, where=where)
    trainer = Trainer(model, tr, va, cfg(tmp_path, max_iters=20, eval_interval=5))
    what = "loss" if where == "loss" else "gradient norm"
    with pytest.raises(FloatingPointError, match=f"the {what} is (nan|inf) at iteration 7.*lower lr.*iteration 5") as info:
        trainer.fit()
    # the advice is data (the command line names its own options from it, never rewrites the words)
    err = info.value
    assert isinstance(err, TrainingDiverged)
    assert (err.iteration, err.saved_iter, err.checkpoint) == (7, 5, str(tmp_path / "ckpt.pt"))
    assert err.knobs == {"lr": trainer.config.lr, "grad_clip": trainer.config.grad_clip}
    assert str(err) == err.message()
    line = err.message(names={"lr": "--lr"})
    assert f"a lower --lr (now {trainer.config.lr:g})" in line and "grad_clip" not in line, line
    assert all(torch.isfinite(p).all() for p in model.parameters())
    from labnn.training import checkpoint as ckpt

    saved = ckpt.load(tmp_path / "ckpt.pt")
    assert saved["iter"] == 5 and torch.isfinite(saved["model"]["emb.weight"]).all()


def test_a_divergence_without_clipping_or_checkpoint_says_so(tmp_path):
    tr, va = data()
    trainer = Trainer(Exploding(at=3, where="loss"), tr, va,
                      cfg(tmp_path, max_iters=20, eval_interval=10, grad_clip=0.0))
    with pytest.raises(TrainingDiverged) as info:
        trainer.fit()
    err = info.value
    assert (err.iteration, err.saved_iter, err.knobs["grad_clip"]) == (2, None, 0.0)
    assert "or a grad_clip (now 0: no clipping); no checkpoint was written" in str(err), err


def test_resuming_with_another_training_config_is_refused(tmp_path):
    tr, va = data()
    Trainer(make(), tr, va, cfg(tmp_path, max_iters=5)).fit()
    with pytest.raises(ValueError, match="was saved with another training config — batch_size: checkpoint 4 vs now 8"):
        Trainer(make(), tr, va, cfg(tmp_path, batch_size=8)).fit(resume=True)
    # a longer run (from within warm-up: the steps taken are the same), another device or progress
    # display continue it
    h = Trainer(make(), tr, va, cfg(tmp_path, max_iters=10, show_progress=False)).fit(resume=True)
    assert h["iter"] == [0, 5, 10]


def test_every_checkpoint_carries_the_extra_entries(tmp_path):
    from labnn.training import checkpoint as ckpt

    tr, va = data()
    trainer = Trainer(make(), tr, va, cfg(tmp_path, max_iters=5), extra={"tokenizer": list("abc")})
    trainer.fit()
    assert ckpt.load(tmp_path / "ckpt.pt")["tokenizer"] == list("abc")


# Safe to resume (issue 29)


@pytest.mark.parametrize(
    "first, then, outcome",
    [
        (20, 20, "resumes"),  # the same run, continued after its last checkpoint
        (5, 10, "resumes"),  # its 5 steps are warm-up and the first cosine step: the same in both
        (20, 40, "refused"),  # a 20-step run's cosine already decayed: 40 steps would restart it
        (10, 40, "refused"),
        (20, 10, "refused"),  # the checkpoint is past the end
    ],
)
def test_resuming_with_another_max_iters_equals_the_uninterrupted_run_or_is_refused(
        tmp_path, first, then, outcome):
    tr, va = data()
    straight = make()
    h_straight = Trainer(straight, tr, va, cfg(max_iters=then)).fit()
    Trainer(make(), tr, va, cfg(tmp_path, max_iters=first)).fit()
    resumed = make(seed=99)
    trainer = Trainer(resumed, tr, va, cfg(tmp_path, max_iters=then))
    if outcome == "refused":
        message = (f"iteration {first} of a run of max_iters={first}: resuming with "
                   f"max_iters={then}.*(learning-rate schedule|past its end)")
        with pytest.raises(ValueError, match=message) as err:
            trainer.fit(resume=True)
        assert "\n" not in str(err.value) and trainer.iter == 0
        return
    h = trainer.fit(resume=True)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert h["lr"] == h_straight["lr"] and h["iter"] == h_straight["iter"]


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_fit_under_no_grad_or_inference_mode_names_the_cause(tmp_path, mode):
    tr, va = data()
    trainer = Trainer(make(), tr, va, cfg(tmp_path, max_iters=2))
    needle = f"fit needs gradients.*torch.{mode.__name__}"
    with mode(), pytest.raises(RuntimeError, match=needle) as err:
        trainer.fit()
    assert "\n" not in str(err.value) and trainer.iter == 0
    assert not (tmp_path / "ckpt.pt").exists()
    assert trainer.fit()["iter"] == [0, 2]  # outside the block it trains


def test_a_model_built_under_inference_mode_is_named():
    tr, va = data()
    with torch.inference_mode():
        model = make()
    trainer = Trainer(model, tr, va, cfg(max_iters=2))
    with pytest.raises(RuntimeError, match=r"parameters of the model .* torch.inference_mode\(\)"):
        trainer.fit()


def test_resuming_from_what_is_not_a_training_state_names_what_it_lacks(tmp_path):
    from labnn.training import checkpoint as ckpt

    tr, va = data()
    ckpt.save_atomic({"model": make().state_dict()}, tmp_path / "ckpt.pt")  # weights only
    trainer = Trainer(make(), tr, va, cfg(tmp_path))
    needle = "ckpt.pt was not written by Trainer.save: it has no model_class, model_config"
    with pytest.raises(ValueError, match=needle):
        trainer.fit(resume=True)
    assert trainer.iter == 0


def test_the_meta_device_is_refused_before_training():
    tr, va = data()
    with pytest.raises(ValueError, match="device 'meta' holds shapes but no values"):
        Trainer(make(), tr, va, cfg(device="meta"))


def test_a_run_that_cannot_fit_in_memory_is_refused_before_allocating():
    import time

    from labnn.xl.model import TransformerXL, XLConfig

    ids = torch.arange(200_002) % 13
    model = TransformerXL(XLConfig(vocab_size=13, d_model=16, n_heads=2, n_layers=1, mem_len=8))
    start = time.perf_counter()  # its relative attention holds [B, H, T, S] scores: 1.2 TiB
    needle = (r"batch_size=4 and seq_len=100000 need at least [\d.]+ [GT]iB .*attention scores.*"
              r"more than the [\d.]+ [GMT]iB available on cpu")
    with pytest.raises(ValueError, match=needle) as err:
        Trainer(model, ids, ids, cfg(seq_len=100_000))
    assert "\n" not in str(err.value) and time.perf_counter() - start < 10


def test_the_memory_estimate_refuses_no_normal_size():
    from labnn.training.config import training_bytes
    from labnn.xl.model import TransformerXL, XLConfig

    sizes = dict(vocab_size=65, d_model=128, n_heads=4, n_layers=4)
    notebook = TransformerLM(TransformerConfig(seq_len=256, **sizes))  # the notebooks' largest
    xl = TransformerXL(XLConfig(mem_len=256, **sizes))
    for model in (notebook, xl):
        assert 1e6 < training_bytes(model, TrainConfig(batch_size=64, seq_len=256)) < 2**31
    tiny = make()  # the tests' sizes
    assert training_bytes(tiny, cfg()) < 2**20


def test_a_forged_iteration_count_is_named():
    import tempfile

    from labnn.training import checkpoint as ckpt

    tr, va = data()
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/ckpt.pt"
        Trainer(make(), tr, va, cfg(checkpoint=path, max_iters=5)).fit()
        for bad in ("seven", -1, 2.5, True):
            ckpt.save_atomic({**ckpt.load(path), "iter": bad}, f"{folder}/bad.pt")
            trainer = Trainer(make(), tr, va, cfg(checkpoint=f"{folder}/bad.pt", max_iters=5))
            with pytest.raises(ValueError, match=f"bad.pt: its iter is {bad!r}, not an int >= 0"):
                trainer.fit(resume=True)


def test_available_memory_without_psutil_or_proc(monkeypatch):
    import os
    import sys

    import labnn.training.config as tc

    monkeypatch.setitem(sys.modules, "psutil", None)  # not installed: /proc/meminfo
    assert tc.available_memory(torch.device("cpu")) > 2**20
    monkeypatch.setattr(tc, "_read", lambda path: None)  # no /proc: free pages
    assert tc.available_memory(torch.device("cpu")) > 2**20
    monkeypatch.delattr(os, "sysconf")  # neither (Windows): unknown, nothing is refused
    assert tc.available_memory(torch.device("cpu")) is None
    assert tc.available_memory(torch.device("meta")) is None


def test_the_progress_bar_shows_the_losses_the_history_records(capsys):
    """The bar ended with `loss=` of the last batch (training mode, one batch) beside `val=`,
    and notebook 01 then printed another "training loss" (the evaluated one) below it: two
    training losses for one model. The bar shows the history's own two figures."""
    torch.manual_seed(0)
    tr, va = torch.randint(0, 20, (600,)), torch.randint(0, 20, (300,))
    model = TransformerLM(TransformerConfig(vocab_size=20, seq_len=16, d_model=16, n_heads=2,
                                            n_layers=1))
    h = Trainer(model, tr, va, cfg(max_iters=10, show_progress=True)).fit()
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert bar.endswith(f"train={h['train_loss'][-1]:.3f}, val={h['val_loss'][-1]:.3f}]"), bar


def test_the_progress_bar_shows_the_starting_losses_before_the_first_evaluation(monkeypatch):
    """The bar showed no loss until the first evaluation (250 steps by default in the CLI),
    though the history held the losses of iteration 0: now they are on the bar from the
    start (and a resumed run's last evaluated ones)."""
    import labnn.training.trainer as trainer

    shown = []

    class Bar:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            shown.append(("update", n))

        def set_postfix(self, **losses):
            shown.append(("losses", losses))

    monkeypatch.setattr(trainer, "progress", Bar)
    tr, va = data()
    h = Trainer(make(), tr, va, cfg(max_iters=3, eval_interval=2)).fit()
    first = f"{h['train_loss'][0]:.3f}", f"{h['val_loss'][0]:.3f}"
    assert shown[0] == ("losses", dict(train=first[0], val=first[1])), shown
    assert [kind for kind, _ in shown] == ["losses", "update", "update", "losses", "update",
                                           "losses"]


def test_extra_entries_may_not_replace_the_training_state(tmp_path):
    """A package reader's finding: `extra={"iter": 0}` replaced the saved iteration, and a
    resumed run trained again from 0 (`model_config` could be replaced the same way)."""
    tr, va = data()
    with pytest.raises(ValueError, match=r"extra entries \['iter'\] would replace the "
                                         r"checkpoint's training state"):
        Trainer(make(), tr, va, cfg(tmp_path), extra={"iter": 0, "note": "mine"})
    trainer = Trainer(make(), tr, va, cfg(tmp_path, max_iters=2), extra={"note": "mine"})
    trainer.fit()
    with pytest.raises(ValueError, match=r"\['model_config'\] would replace"):
        trainer.save(tmp_path / "other.pt", model_config={})
    assert not (tmp_path / "other.pt").exists()


def test_a_device_given_as_torch_device_is_saved_by_its_name(tmp_path):
    """`TrainConfig(device=torch.device("cpu"))` trained, then the first save failed: "a
    torch.device" is not checkpoint data. The config keeps the device's name."""
    tr, va = data()
    config = cfg(tmp_path, max_iters=2, eval_interval=2, device=torch.device("cpu"))
    assert config.device == "cpu"
    Trainer(make(), tr, va, config).fit()
    assert (tmp_path / "ckpt.pt").exists()


def test_bool_ids_are_refused_at_the_door():
    """`ids > 5` (bool) passed `Trainer(...)` and failed in `fit()` naming `ids`."""
    tr, va = data()
    with pytest.raises(TypeError, match=r"train_ids must be a 1-D integer tensor, got torch.bool"):
        Trainer(make(), tr > 5, va, cfg())


@pytest.mark.parametrize("first", ["save a snapshot elsewhere", "load another file"])
def test_a_file_elsewhere_does_not_license_replacing_the_checkpoint(tmp_path, first):
    """`fit()` goes on over the checkpoint its own trainer wrote or read; it took any save or
    load as that, so a trainer that had saved a snapshot, or loaded weights, from another file
    replaced an earlier run's checkpoint at its first save, without resume or overwrite."""
    from labnn.training import checkpoint as ckpt

    train, val = data()
    earlier = Trainer(make(), train, val, cfg(tmp_path, max_iters=6))
    earlier.fit()
    other = tmp_path / "other.pt"
    earlier.save(other)
    trainer = Trainer(make(), train, val, cfg(tmp_path, max_iters=6))
    trainer.save(tmp_path / "snapshot.pt") if first.startswith("save") else trainer.load(other)
    with pytest.raises(FileExistsError):
        trainer.fit()
    assert ckpt.load(trainer.config.checkpoint)["iter"] == 6
