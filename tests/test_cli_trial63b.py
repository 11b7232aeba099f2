"""The command line and trainer after stop 63's second trial, each test written failing
first: a bad `--set` value exited 2 when it did not parse (`mem_len=null`) but 1 when the
config refused it (`mem_len=-1`); the Trainer's memory refusal said "lower batch_size or
seq_len" when the model's memory (`mem_len`) or its parameters made the step too large."""

import pytest
import torch

from test_cli import TINY, cli, one_line_error

import labnn.training.config
from labnn.training.config import TrainConfig
from labnn.training.trainer import Trainer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig


@pytest.mark.parametrize("model, pair, needle", [
    ("xl", "mem_len=null", "expected an int"),  # does not parse as the field's type
    ("xl", "mem_len=-1", "non-negative"),  # parses; the config refuses it
    ("transformer", "d_ff=-4", "positive"),
    ("transformer", "positions=rotary", "learned"),
    ("feedback-kv", "shared_kv=false", "True"),
])
def test_a_bad_set_value_exits_2_whichever_way_it_is_wrong(capsys, tmp_path, model, pair,
                                                           needle):
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", "--model", model, "--iters", "1", *TINY,
                       "--set", pair, "--out", str(out))
    line = one_line_error(code, err, f"--set {pair}", needle)
    assert code == 2, (code, line)
    assert not out.exists()


def test_sizes_the_config_refuses_exit_2_as_argparse_refusals_do(capsys, tmp_path):
    """`--d-model 0` is argparse's (2); `--d-model 30 --n-heads 4` the config's: the same."""
    flags = [*TINY, "--d-model", "30", "--n-heads", "4"]
    code, _, err = cli(capsys, "train", "--iters", "1", *flags, "--out", str(tmp_path / "m"))
    line = one_line_error(code, err, "--d-model 30", "--n-heads 4")
    assert code == 2, (code, line)


IDS = torch.arange(4000) % 65
SMALL = dict(d_model=16, n_heads=2, n_layers=1)


def refusal(monkeypatch, model, available, **train):
    monkeypatch.setattr(labnn.training.config, "available_memory", lambda device: available)
    config = TrainConfig(device="cpu", show_progress=False, **train)
    with pytest.raises(ValueError, match="one training step") as caught:
        Trainer(model, IDS, IDS, config)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    return message, message.partition(": lower ")[2]


def test_a_memory_too_large_for_the_trainer_names_the_model_configs_mem_len(monkeypatch):
    model = TransformerXL(XLConfig(65, mem_len=10**8, **SMALL))
    message, lower = refusal(monkeypatch, model, 16 * 2**30, batch_size=4, seq_len=16)
    assert "mem_len=100000000" in message and "attention scores" in message, message
    assert lower == "the model config's mem_len", message


def test_parameters_too_large_for_the_trainer_name_the_models_size(monkeypatch):
    model = TransformerLM(TransformerConfig(65, seq_len=8, d_model=64, n_heads=2, n_layers=2))
    message, lower = refusal(monkeypatch, model, 2**20, batch_size=1, seq_len=8)
    assert "d_model=64 and n_layers=2" in message and "parameters" in message, message
    assert lower == "the model config's d_model or n_layers", message


def test_a_batch_too_large_for_the_trainer_still_names_batch_size_and_seq_len(monkeypatch):
    model = TransformerXL(XLConfig(65, mem_len=8, d_ff=4096, **SMALL))
    message, lower = refusal(monkeypatch, model, 2**30, batch_size=512, seq_len=256)
    assert message.startswith("batch_size=512, seq_len=256 and the model config's d_ff=4096 "
                              "need at least"), message
    assert lower == "batch_size, seq_len or the model config's d_ff", message


def test_small_amounts_are_not_written_as_0_gib(monkeypatch):
    """1 MiB free used to read "0.0 GiB available" (trial 63): amounts under 1 GiB are in MiB."""
    model = TransformerLM(TransformerConfig(65, seq_len=8, d_model=64, n_heads=2, n_layers=2))
    message, _ = refusal(monkeypatch, model, 2**20, batch_size=1, seq_len=8)
    assert "0.0 GiB" not in message and "1.0 MiB available" in message, message
