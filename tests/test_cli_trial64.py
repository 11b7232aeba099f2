"""The command line after a reader's trial (stop 64), each test written failing first:
`train --resume` with other model options printed the parameter count of a model that was
then refused; `--eval-iters` had no upper bound; under torchrun the memory check ran only
after the model was built."""

import pytest

from test_cli import TINY, cli, one_line_error

from labnn.training.trainer import Trainer


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a model was trained")

    monkeypatch.setattr(Trainer, "fit", refuse)


@pytest.fixture
def saved(capsys, tmp_path):
    """A transformer checkpoint of `train` (TINY, 2 iterations)."""
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "2", "--out", str(out))
    assert code == 0, err
    return out


@pytest.mark.parametrize("options, needle", [
    (["--d-model", "32"], "--d-model 16 (not 32)"),
    (["--model", "xl"], "--model transformer (not xl)"),
    (["--set", "d_ff=40"], "--set d_ff=64 (not 40)"),
])
def test_resume_with_other_model_options_prints_no_parameter_count(capsys, saved, no_training,
                                                                   options, needle):
    code, out, err = cli(capsys, "train", *TINY, "--iters", "4", *options, "--resume",
                         "--out", str(saved))
    one_line_error(code, err, f"--resume: {saved} was trained with other model options",
                   needle)
    assert "parameters" not in out, out


def test_resume_with_the_same_options_prints_the_resumed_models_count(capsys, saved):
    code, out, err = cli(capsys, "train", *TINY, "--iters", "4", "--resume", "--out",
                         str(saved))
    assert code == 0, err
    assert "transformer: " in out and "parameters" in out, out


@pytest.mark.parametrize("value", [str(10**9), str(2**16)])
def test_eval_iters_has_an_upper_bound_named_in_one_line(capsys, tmp_path, no_training, value):
    code, _, err = cli(capsys, "train", *TINY, "--eval-iters", value, "--out",
                       str(tmp_path / "m.pt"))
    line = one_line_error(code, err, "argument --eval-iters: expected an int >= 1 and < 2**16",
                          value)
    assert code == 2 and len(line) < 300, line


@pytest.mark.parametrize("value", ["0", "-3"])
def test_eval_iters_below_one_is_refused(capsys, tmp_path, no_training, value):
    code, _, err = cli(capsys, "train", *TINY, "--eval-iters", value, "--out",
                       str(tmp_path / "m.pt"))
    one_line_error(code, err, "argument --eval-iters: expected an int >= 1")
    assert code == 2
