"""The command line after review 65, each test written failing first: `train --resume` with
other training options (`--lr`, `--seed`, `--batch-size`, a shorter `--iters`) printed the
model's parameter count before it was refused, and read the checkpoint twice; `--out -` (or
another name of standard output) wrote a file named `-` after training."""

import pytest

from test_cli import TINY, cli, one_line_error

from labnn.training import checkpoint as ckpt


@pytest.fixture
def saved(capsys, tmp_path):
    """A transformer checkpoint of `train` (TINY, 4 iterations)."""
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "4", "--out", str(out))
    assert code == 0, err
    return out


@pytest.mark.parametrize("options, needle", [
    (["--lr", "0.01"], "--lr 0.001 (not 0.01)"),
    (["--seed", "3"], "--seed 1337 (not 3)"),
    (["--batch-size", "3"], "--batch-size 2 (not 3)"),
    (["--iters", "2"], "--iters 2: "),
])
def test_resume_with_other_training_options_is_one_line_before_anything(
        capsys, saved, no_training, options, needle):
    code, out, err = cli(capsys, "train", *TINY, "--iters", "4", *options, "--resume",
                         "--out", str(saved))
    one_line_error(code, err, needle)
    assert out == "", out  # no parameter count of a model that is refused


def test_resume_reads_the_checkpoint_once(capsys, saved, monkeypatch):
    reads = []
    load = ckpt.load

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return load(path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "load", counted)
    code, out, err = cli(capsys, "train", *TINY, "--iters", "6", "--resume", "--out",
                         str(saved))
    assert code == 0, err
    assert "trained" in out and "from iteration 4 to 6" in out, out
    assert reads == [str(saved)], reads


@pytest.mark.parametrize("value", ["-", "/dev/stdout", "/dev/stderr", "/dev/fd/1",
                                   "/proc/self/fd/1"])
def test_out_naming_standard_output_is_refused_before_training(capsys, tmp_path, monkeypatch,
                                                               no_training, value):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "train", *TINY, "--out", value, "--overwrite")
    line = one_line_error(code, err, f"--out: expected a file name such as checkpoints/model.pt, "
                          f"got {value!r}", "standard output")
    assert code == 2 and out == "" and len(line) < 400, line
    assert not (tmp_path / "-").exists()


def test_sample_checkpoint_dash_names_standard_input(capsys):
    code, _, err = cli(capsys, "sample", "--checkpoint", "-")
    one_line_error(code, err, "--checkpoint: expected a file name", "'-'", "standard input")


def test_version_is_an_option(capsys):
    """`python -m labnn --version` said "the following arguments are required: command"."""
    import labnn  # noqa: PLC0415

    code, out, err = cli(capsys, "--version")
    assert code == 0 and err == "", err
    assert out.strip() == f"python -m labnn (labnn {labnn.__version__})", out
