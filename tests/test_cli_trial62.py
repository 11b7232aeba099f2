"""The command line, checkpoints and the trainer after a reader's trial (stop 62), each test
written failing first: `trusted="no"` unpickled a checkpoint (its pickle ran); a read-only
`--out` and an `extra` entry that cannot be saved were refused only at the first save,
after training; `--out` could replace the corpus; a symlink to nothing as `--out` got the
Python API's advice; a `map_location` this machine lacks was blamed on the file; and
`sample | head` ended with "error: Broken pipe"."""

import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from test_checkpoint import RunsCode, write_pickled
from test_cli import TINY, cli, one_line_error

from labnn.training import TrainConfig, Trainer
from labnn.training import checkpoint as ckpt
from labnn.transformer import TransformerConfig, TransformerLM


@pytest.mark.parametrize("flag", ["no", "False", 0, None])
def test_a_flag_that_is_not_a_bool_is_refused_before_anything_is_read(tmp_path, flag):
    marker = tmp_path / "pwned"
    evil = write_pickled(tmp_path / "evil.pt", {"x": RunsCode(marker)})
    with pytest.raises(TypeError, match=r"trusted must be True or False, got"):
        ckpt.load(evil, trusted=flag)
    with pytest.raises(TypeError, match=r"verify must be True or False, got"):
        ckpt.load(evil, verify=flag)
    assert not marker.exists()


def trainer(tmp_path, **kwargs):
    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig(11, seq_len=8, d_model=16, n_heads=2, n_layers=1))
    config = TrainConfig(max_iters=4, eval_interval=2, eval_iters=1, batch_size=2, seq_len=8,
                         checkpoint=str(tmp_path / "m.pt"), device="cpu")
    ids = torch.randint(11, (200,))
    return Trainer(kwargs.pop("model", model), ids, ids, config, **kwargs)


def test_fit_refuses_flags_that_are_not_bools(tmp_path):
    t = trainer(tmp_path)
    for flags in ({"resume": "no"}, {"overwrite": 1}, {"trusted": "False"}):
        with pytest.raises(TypeError, match=f"{next(iter(flags))} must be True or False"):
            t.fit(**flags)
    assert t.iter == 0


@pytest.mark.parametrize("extra, needle", [
    ({"s": {1}}, r"extra\['s'\] is a set"),
    ([1], "extra must be a dict of entries to save, got list"),
    (None, "extra must be a dict of entries to save, got NoneType"),
])
def test_extra_entries_are_checked_when_the_trainer_is_made(tmp_path, extra, needle):
    with pytest.raises(TypeError, match=needle):
        trainer(tmp_path, extra=extra)


@pytest.mark.parametrize("model", [None, "x"])
def test_a_model_that_is_not_a_module_is_named(tmp_path, model):
    with pytest.raises(TypeError, match=f"model must be an nn.Module, got {type(model).__name__}"):
        trainer(tmp_path, model=model)


def test_a_map_location_this_machine_lacks_is_not_blamed_on_the_file(tmp_path):
    path = ckpt.save_atomic({"a": 1}, tmp_path / "a.pt")
    with pytest.raises(ValueError, match=r"map_location='mps': this machine has no mps device"):
        ckpt.load(path, map_location="mps")
    assert ckpt.load(path, map_location="meta") == {"a": 1}


@pytest.mark.parametrize("flag", ["--overwrite", "--resume"])
def test_a_read_only_out_is_refused_before_training(capsys, tmp_path, no_training, flag):
    out = ckpt.save_atomic({"a": 1}, tmp_path / "ro.pt")
    out.chmod(0o444)
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out), flag)
    line = one_line_error(code, err, f"--out cannot save checkpoint {out}", "read-only (mode 444)",
                          "chmod u+w")
    assert "training started" not in line and "give a folder" not in line, line


def test_the_corpus_is_never_an_out(capsys, tmp_path, monkeypatch, no_training):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("LABNN_DATA_DIR", str(data))
    corpus = data / "tiny_shakespeare.txt"  # refused before it is read
    corpus.write_text("First Citizen:\n")
    before = corpus.read_bytes()
    for flags in ([], ["--overwrite"]):
        code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(corpus), *flags)
        one_line_error(code, err, f"--out {corpus} is the corpus the model trains on")
    assert corpus.read_bytes() == before


def test_a_symlink_to_nothing_as_out_gets_the_command_lines_advice(capsys, tmp_path,
                                                                   no_training):
    out = tmp_path / "dl.pt"
    out.symlink_to(tmp_path / "gone.pt")
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out))
    line = one_line_error(code, err, f"--out {out} exists: --resume continues from it, "
                                     "--overwrite replaces it")
    assert "fit(" not in line, line


def test_sample_into_a_closed_pipe_ends_silently():
    """`python -m labnn sample ... | head -c 5`: the reader closes the pipe; the command
    ended with "error: [Errno 32] Broken pipe" on stderr, where a command line goes quietly."""
    script = ("import sys\nfrom labnn.cli import commands\n"
              "def sample(args):\n    for _ in range(10000):\n        print('x' * 100)\n"
              "commands.sample = sample\n"
              "sys.exit(commands.main(['sample', '--checkpoint', 'm.pt']))\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.read(5)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and err == "", err
