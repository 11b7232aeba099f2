"""Trial 51c: a PyTorch user building on labnn outside the notebooks. Each test was written
failing, from what the trial found: a file lost without a word, a memory dropped silently,
a message naming a file the user never chose or the wrong cause."""

import errno
from pathlib import Path

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.training import TrainConfig, Trainer, evaluate, stream_loss
from labnn.training import checkpoint as ckpt
from labnn.transformer import TransformerConfig, TransformerLM

IDS = torch.randint(7, (400,), generator=torch.Generator().manual_seed(0))


def _trainer(path, iters=2):
    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig(7, seq_len=16, d_model=8, n_heads=2, n_layers=1))
    config = TrainConfig(max_iters=iters, batch_size=2, seq_len=8, eval_interval=1,
                         eval_iters=1, checkpoint=str(path), show_progress=False,
                         device="cpu")
    return Trainer(model, IDS, IDS, config)


def test_fit_never_replaces_a_file_it_was_not_told_to(tmp_path):
    """`Trainer.fit()` replaced a file of notes at `config.checkpoint`, and a second run on
    one path without `resume=True` replaced the first run's checkpoint at its first save;
    the command line refused both."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(FileExistsError, match=r"notes.txt exists.*resume=True.*overwrite=True"):
        _trainer(notes).fit()
    assert notes.read_text() == "my notes\n"
    run = tmp_path / "run.pt"
    _trainer(run, iters=4).fit()
    with pytest.raises(FileExistsError, match=r"run.pt exists"):
        _trainer(run, iters=1).fit()
    assert ckpt.load(run)["iter"] == 4
    _trainer(run, iters=1).fit(overwrite=True)
    assert ckpt.load(run)["iter"] == 1
    with pytest.raises(ValueError, match=r"resume.*overwrite.*one of them"):
        _trainer(run).fit(resume=True, overwrite=True)


@pytest.mark.parametrize("make", [
    lambda: FeedbackTransformerKV(FeedbackKVConfig(11, d_model=16, n_heads=2, n_layers=2,
                                                   attn_len=16)),
    lambda: FeedbackTransformer(FeedbackConfig(11, d_model=16, n_heads=2, n_layers=2,
                                               attn_len=16))], ids=["kv", "feedback"])
def test_stream_loss_carries_a_feedback_models_memory(make):
    """`stream_loss` read a feedback model one segment at a time, alone, though the model
    carries its memory from segment to segment (as `evaluate` with stream=True does)."""
    torch.manual_seed(0)
    model, ids = make(), torch.randint(11, (400,))
    carried = evaluate(model, ids, TrainConfig(batch_size=2, seq_len=8, eval_iters=24,
                                               stream=True))
    assert stream_loss(model, ids, batch_size=2, seq_len=8) == pytest.approx(carried, abs=1e-6)
    with pytest.raises(ValueError, match=r"mem_len.*attn_len"):
        stream_loss(model, ids, batch_size=2, seq_len=8, mem_len=4)


def test_a_save_into_a_read_only_folder_names_the_checkpoint(tmp_path, monkeypatch):
    """On a read-only mount the cleanup of the temporary (unlink: EROFS, not 'no such
    file') replaced the wrapped error with one naming '.a.pt.<pid>.<hex>.tmp'."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".a.pt.1.ab.tmp"))

    monkeypatch.setattr(ckpt, "_write_then_rename", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(OSError, match=r"cannot save checkpoint .*a\.pt \(Read-only") as info:
        ckpt.save_atomic({"a": 1}, tmp_path / "a.pt")
    assert ".tmp" not in str(info.value)


def test_a_folder_that_cannot_be_made_names_the_checkpoint(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "sub"))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(OSError, match=r"cannot save checkpoint .*sub/a\.pt.*Read-only"):
        ckpt.save_atomic({"a": 1}, tmp_path / "sub" / "a.pt")


def test_a_mask_over_the_keys_alone_is_named():
    """A 1-D `[S]` mask was refused as 'expected one broadcastable to [B, H, T, S]', which
    it is (torch's fused kernel takes none, though): the message now says what to give."""
    from labnn.nn.attention import MultiHeadAttention

    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, 5, 16)
    for mask in (torch.ones(5, dtype=bool), torch.tensor(True)):
        with pytest.raises(ValueError, match=r"at least the two last axes \[T, S\].*mask\[None\]"):
            attn(x, mask)
    assert torch.allclose(attn(x, torch.ones(5, dtype=bool)[None])[0], attn(x)[0])


def test_a_step_cache_handed_to_xl_forward_is_named():
    """forward(x, cache) with the XLCache of `step` said 'mems must be a list of 2 tensors
    (one per layer), got 3': the 3 was the cache's fields."""
    from labnn.xl import TransformerXL, XLConfig

    model = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=2, mem_len=3)).eval()
    _, cache = model.step(torch.tensor([[1], [2]]))
    with pytest.raises(ValueError, match=r"XLCache.*step.*forward"):
        model(torch.randint(11, (2, 4)), cache)


def test_a_forged_config_value_names_where_it_is():
    """A file whose TrainConfig holds max_iters=-1 said only 'max_iters must be a positive
    int', not where in the file (a TypeError of the fields did)."""
    from labnn.training.plain_data import DATACLASS, from_plain

    forged = {DATACLASS: "labnn.training.config.TrainConfig", "max_iters": -1}
    with pytest.raises(ValueError, match=r"\['config'\].*TrainConfig.*max_iters"):
        from_plain({"config": forged}, "x.pt")


def test_split_and_decode_take_what_they_say():
    from labnn.data import CharTokenizer, train_val_split
    import numpy as np

    with pytest.raises(TypeError, match=r"ids must be a 1-D integer tensor"):
        train_val_split(torch.tensor(5))
    with pytest.raises(TypeError, match=r"ids must be a 1-D integer tensor"):
        train_val_split(torch.rand(10, 3))
    tok = CharTokenizer("ba")
    assert tok.encode("ab").tolist() == [1, 0]  # the given order, as the docstring says
    assert "given" in CharTokenizer.__doc__ and "sorted character order" not in CharTokenizer.__doc__
    assert tok.decode(np.array([1, 0])) == "ab"


def test_plots_say_what_they_cannot_draw():
    """bar_plot({'a': inf}) raised matplotlib's 'Axis limits cannot be NaN or Inf'; a line
    with fewer points than `smooth` drew no line of its own (only the faint one)."""
    import matplotlib

    matplotlib.use("Agg")
    from labnn.plot import bar_plot, line_plot

    with pytest.raises(ValueError, match=r"finite.*'a': inf"):
        bar_plot({"a": float("inf"), "b": 1.0})
    ax = line_plot([1, 2, 3], {"loss": [3.0, 2.0, 1.5]}, smooth=5)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "loss"]
    assert list(line.get_ydata()) == [3.0, 2.0, 1.5]


def test_a_second_fit_of_one_trainer_goes_on_over_its_own_file(tmp_path):
    """The refusal is of a file the run did not write: a trainer asked to fit again (a
    larger max_iters, say) goes on over the checkpoint it saved itself."""
    trainer = _trainer(tmp_path / "run.pt", iters=2)
    trainer.fit()
    trainer.fit()  # nothing left to train: no error, the file kept
    assert ckpt.load(tmp_path / "run.pt")["iter"] == 2
