"""A learner's trial of the command line (trial 43): help text, Ctrl-C, config mistakes."""

import pytest

from labnn.training import checkpoint as ckpt
from labnn.cli import build_parser
from test_cli import TINY, cli, one_line_error


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A transformer checkpoint written by `train` (2 iterations)."""
    from labnn.cli import main

    path = tmp_path_factory.mktemp("tiny43") / "tiny.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    return path


def commands():
    """The `train` and `sample` sub-parsers by name."""
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices


@pytest.mark.parametrize("command", ["train", "sample"])
def test_every_option_says_what_it_does_and_its_default(command):
    sub = commands()[command]
    for action in sub._actions:
        if action.dest == "help":
            continue
        name = action.option_strings[-1]
        assert action.help, f"{command} {name} has no help"
        if action.default not in (None, False, [], "==SUPPRESS=="):
            assert "default" in action.help, f"{command} {name}: {action.help!r}"


def test_help_says_what_set_and_eval_iters_set():
    sub = commands()["train"]
    text = sub.format_help()
    for field in ("mem_len", "attn_len", "max_distance", "d_ff", "positions", "loop"):
        assert field in text, field
    helps = {a.option_strings[-1]: a.help for a in sub._actions if a.option_strings}
    assert "batches" in helps["--eval-iters"] and "--eval-interval" in helps["--eval-iters"]
    assert "cuda" in helps["--device"] and "cpu" in helps["--device"]


def interrupt_at(monkeypatch, iteration):
    from labnn.training.trainer import Trainer

    step = Trainer.train_step

    def killed(self):
        if self.iter == iteration:
            raise KeyboardInterrupt
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", killed)


def test_ctrl_c_before_the_first_checkpoint_promises_no_resume(capsys, tmp_path, monkeypatch):
    interrupt_at(monkeypatch, 1)
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--iters", "6", *TINY, "--eval-interval", "5",
                       "--out", str(out))
    assert code == 130, err
    line = one_line_error(code, err, "interrupted at iteration 1", "nothing was saved",
                          "--eval-interval")
    assert "--resume continues" not in line and not out.exists()


def test_ctrl_c_of_an_overwrite_run_keeps_the_old_checkpoint_and_says_so(
        capsys, tmp_path, monkeypatch, tiny):
    out = tmp_path / "m.pt"
    out.write_bytes(tiny.read_bytes())
    before = out.read_bytes()
    interrupt_at(monkeypatch, 1)
    code, _, err = cli(capsys, "train", "--iters", "6", *TINY, "--eval-interval", "5",
                       "--out", str(out), "--overwrite")
    assert code == 130, err
    line = one_line_error(code, err, "interrupted at iteration 1", f"{out} still holds",
                          "earlier run")
    assert "--resume continues" not in line
    assert out.read_bytes() == before


@pytest.mark.parametrize("model, flags, needles", [
    ("transformer", ["--d-model", "30", "--n-heads", "4"],
     ["--d-model 30", "--n-heads 4", "divisible"]),
    ("xl", ["--d-model", "30", "--n-heads", "4"], ["--d-model 30", "--n-heads 4"]),
    ("feedback", ["--d-model", "30", "--n-heads", "4"], ["--d-model 30", "--n-heads 4"]),
    ("transformer", ["--set", "d_ff=-4"], ["--set d_ff=-4", "positive"]),
    ("transformer", ["--set", "positions=rotary"], ["--set positions=rotary", "learned"]),
    ("feedback-kv", ["--set", "shared_kv=false"], ["--set shared_kv=false", "True"]),
    ("xl", ["--set", "mem_len=-1"], ["--set mem_len=-1", "non-negative"]),
])
def test_a_config_mistake_names_its_options(capsys, tmp_path, model, flags, needles):
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--model", model, "--iters", "1", *TINY, *flags,
                       "--out", str(out))
    one_line_error(code, err, *needles)
    assert not out.exists()


def test_set_lists_only_the_fields_it_can_set(capsys, tmp_path):
    code, _, err = cli(capsys, "train", "--model", "xl", "--iters", "1", *TINY,
                       "--set", "colour=blue", "--out", str(tmp_path / "a.pt"))
    line = one_line_error(code, err, "--set 'colour=blue'", "mem_len", "clamp_len")
    for own in ("'d_model'", "'n_heads'", "'dropout'", "'vocab_size'"):
        assert own not in line, line


def test_an_empty_out_is_refused_by_its_name(capsys):
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", "")
    line = one_line_error(code, err, "--out", "got ''", "file name")
    assert "--out ." not in line


@pytest.mark.parametrize("device, needles", [("", ["--device", "got ''", "cuda:1"]),
                                             ("gpu", ["--device gpu", "not a device name"])])
def test_a_device_mistake_names_the_option(capsys, tmp_path, tiny, device, needles):
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY[:-2], "--device", device,
                       "--out", str(out))
    one_line_error(code, err, *needles)
    assert not out.exists()
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--device", device)
    one_line_error(code, err, *needles)


def test_an_unwritable_out_found_at_save_names_the_option(capsys, tmp_path, monkeypatch):
    import os

    def refused(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(ckpt.os, "replace", refused)
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out))
    one_line_error(code, err, f"--out {out}", "cannot save", "Operation not permitted")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("model", ["feedback", "feedback-kv"])
def test_the_feedback_models_train_with_a_bounded_memory_by_default(capsys, tmp_path, model):
    """With attn_len None the memory carried from batch to batch kept every step of a pass
    over the text: each iteration slower than the last, each checkpoint larger."""
    out = tmp_path / "fb.pt"
    code, _, err = cli(capsys, "train", "--model", model, "--iters", "2", *TINY, "--out", str(out))
    assert code == 0, err
    assert ckpt.load(out)["model_config"]["attn_len"] == 64
    code, _, err = cli(capsys, "train", "--model", model, "--iters", "2", *TINY,
                       "--set", "attn_len=null", "--out", str(tmp_path / "all.pt"))
    assert code == 0, err
    assert ckpt.load(tmp_path / "all.pt")["model_config"]["attn_len"] is None


def test_resuming_with_other_model_options_names_the_options_that_resume_it(capsys, tmp_path):
    """It named config fields (`attn_len: checkpoint None vs model 64`), not the options."""
    out = tmp_path / "fb.pt"
    code, _, err = cli(capsys, "train", "--model", "feedback", "--iters", "2", *TINY,
                       "--set", "attn_len=null", "--out", str(out))
    assert code == 0, err
    args = ["train", "--model", "feedback", "--iters", "2", *TINY, "--out", str(out), "--resume"]
    args[args.index("--d-model") + 1] = "32"
    code, _, err = cli(capsys, *args)
    one_line_error(code, err, "--resume", "--d-model 16 (not 32)", "--set attn_len=null (not 64)",
                   "--overwrite")
