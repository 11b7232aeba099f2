"""The command line after a reader's trial (stop 63), each test written failing first: size
options had no upper bound (`--seq-len 10**20` printed a 2,000-character overflow, a huge
`--n-layers` built a model for minutes); a huge `--set mem_len` was blamed on --batch-size
and --seq-len; a pipe, a folder or a dangling symlink at the corpus's path hung, gave a bare
errno or started a download over it; and Ctrl-C at the end of a save, or before a resumed
run began, named the wrong checkpoint."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT
from test_cli import TINY, cli, one_line_error

from labnn.cli import MODELS
from labnn.cli.commands import model_classes
from labnn.data import shakespeare
from labnn.training import checkpoint as ckpt


@pytest.mark.parametrize("option, value, limit", [
    ("--seq-len", "100000000000000000000", "< 2**20"),
    ("--n-layers", str(10**9), "< 1024"),
    ("--d-model", str(10**12), "< 2**16"),
    ("--n-heads", str(10**12), "< 2**16"),
    ("--batch-size", str(10**12), "< 2**20"),
])
def test_every_size_option_has_an_upper_bound_named_in_one_short_line(capsys, tmp_path, option,
                                                                      value, limit):
    code, _, err = cli(capsys, "train", *TINY, option, value, "--out", str(tmp_path / "m.pt"))
    line = one_line_error(code, err, f"argument {option}: expected an int >= 1 and {limit}",
                          value)
    assert code == 2 and len(line) < 300, line


@pytest.mark.parametrize("pair", ["d_ff=100000000000000000000", "mem_len=10000000000000"])
def test_a_huge_int_through_set_is_refused_before_any_model_is_built(capsys, tmp_path, pair):
    code, _, err = cli(capsys, "train", "--model", "xl", *TINY, "--set", pair, "--out",
                       str(tmp_path / "m.pt"))
    line = one_line_error(code, err, f"--set {pair}: expected an int < 2**31")
    assert code == 2 and len(line) < 300, line


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_parameter_count_before_building_is_the_built_models(model):
    from labnn.cli.sizes import parameter_count

    model_cls, config_cls, _ = model_classes(model)
    config = config_cls(vocab_size=65, d_model=16, n_heads=2, n_layers=5)
    with torch.device("meta"):
        built = sum(p.numel() for p in model_cls(config).parameters())
    assert parameter_count(model_cls, config) == built


def test_a_model_too_large_is_refused_without_building_all_its_layers(capsys, tmp_path,
                                                                      monkeypatch):
    from labnn.transformer import TransformerLM

    built, init = [], TransformerLM.__init__

    def counted(self, config):
        built.append(config.n_layers)
        init(self, config)

    monkeypatch.setattr(TransformerLM, "__init__", counted)
    code, _, err = cli(capsys, "train", *TINY, "--n-layers", "1000", "--d-model", "60000",
                       "--n-heads", "4", "--out", str(tmp_path / "m.pt"))
    one_line_error(code, err, "--d-model 60000 --n-layers 1000: one training step needs",
                   "lower --d-model or --n-layers")
    assert max(built) <= 2, built


def test_a_memory_too_large_names_mem_len_not_the_batch(capsys, tmp_path):
    code, _, err = cli(capsys, "train", "--model", "xl", *TINY, "--set", "mem_len=100000000",
                       "--out", str(tmp_path / "m.pt"))
    line = one_line_error(code, err, "--set mem_len=100000000", "lower --set mem_len")
    assert "--batch-size" not in line.partition(":")[2].partition("lower")[2], line


def test_a_mask_too_large_names_seq_len_alone(capsys, tmp_path, monkeypatch):
    """The fused kernels' `[T, S]` mask does not grow with the batch: lowering
    --batch-size would not help."""
    import labnn.training.config

    monkeypatch.setattr(labnn.training.config, "available_memory", lambda device: 2 * 2**30)
    code, _, err = cli(capsys, "train", *TINY, "--seq-len", "100000", "--batch-size", "1",
                       "--out", str(tmp_path / "m.pt"))
    line = one_line_error(code, err, "--seq-len 100000:", "attention mask", "lower --seq-len")
    assert "--batch-size" not in line, line


# the corpus's path: a pipe, a folder, a symlink to nothing


def corpus_at(tmp_path, monkeypatch, make):
    monkeypatch.setenv("LABNN_DATA_DIR", str(tmp_path))
    path = tmp_path / shakespeare.FILENAME
    make(path)

    def no_download(*a, **k):
        raise AssertionError("downloaded over the user's path")

    monkeypatch.setattr(shakespeare, "download", no_download)
    return path


@pytest.mark.parametrize("make, needle", [
    (os.mkfifo, "is a pipe, not a regular file"),
    (os.mkdir, "is a directory, not the corpus file"),
    (lambda p: p.symlink_to(p.parent / "nowhere.txt"), "nowhere.txt, which does not exist"),
])
def test_a_corpus_path_that_is_not_a_file_is_named_in_one_line(capsys, tmp_path, monkeypatch,
                                                               no_training, make, needle):
    path = corpus_at(tmp_path, monkeypatch, make)
    start = time.monotonic()
    code, _, err = cli(capsys, "train", *TINY, "--iters", "1", "--out", str(tmp_path / "m.pt"))
    one_line_error(code, err, str(path), needle, "LABNN_DATA_DIR")
    assert time.monotonic() - start < 60 and os.path.lexists(path)


def test_a_pipe_at_the_corpus_path_does_not_hang_the_python_api(tmp_path):
    os.mkfifo(tmp_path / shakespeare.FILENAME)
    with pytest.raises(ValueError, match="is a pipe, not a regular file"):
        shakespeare.load_tiny_shakespeare(tmp_path, download_missing=False)


# Ctrl-C at the end of a save, and before a resumed run began


def test_ctrl_c_after_the_rename_of_a_save_names_the_new_checkpoint(capsys, tmp_path,
                                                                    monkeypatch):
    fsync_dir, calls = ckpt.fsync_dir, []

    def interrupted_at_the_second_save(folder):
        calls.append(folder)
        fsync_dir(folder)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the rename of iteration 4 is done

    monkeypatch.setattr(ckpt, "fsync_dir", interrupted_at_the_second_save)
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "6", "--out", str(out))
    assert ckpt.load(out)["iter"] == 4
    one_line_error(code, err, f"interrupted at iteration 4; {out} holds iteration 4")
    assert code == 130


def test_a_save_interrupted_before_its_rename_leaves_the_old_file(tmp_path, monkeypatch):
    out = ckpt.save_atomic({"iter": 1}, tmp_path / "m.pt")

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        ckpt.save_atomic({"iter": 2}, out)
    assert type(caught.value) is KeyboardInterrupt and ckpt.load(out)["iter"] == 1


@pytest.mark.parametrize("flag", ["--resume", "--overwrite"])
def test_ctrl_c_before_a_run_over_an_existing_checkpoint_says_it_is_unchanged(capsys, tmp_path,
                                                                             monkeypatch, flag):
    out = tmp_path / "m.pt"
    assert cli(capsys, "train", *TINY, "--iters", "2", "--out", str(out))[0] == 0
    before = out.read_bytes()

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("labnn.cli.commands.read_corpus", interrupted)
    code, _, err = cli(capsys, "train", *TINY, "--iters", "4", "--out", str(out), flag)
    line = one_line_error(code, err, f"interrupted before training started; {out} is unchanged")
    assert "nothing was saved" not in line and out.read_bytes() == before
    assert ("--resume continues from it" in line) == (flag == "--resume"), line


def test_a_real_sigint_during_a_resumed_run_names_what_out_holds(tmp_path):
    out = tmp_path / "m.pt"
    args = [sys.executable, "-m", "labnn", "train", *TINY, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([*args, "--iters", "2"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.Popen([*args, "--iters", "100000", "--resume"], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = run.stdout.readline()  # the parameters: the model is built, training begins
    assert "parameters" in line, line
    time.sleep(2)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    line = one_line_error(run.returncode, err, "python -m labnn train: interrupted at iteration")
    assert run.returncode == 130 and "nothing was saved" not in line, line
    assert f"{out} holds iteration" in line or f"{out} still holds the earlier run" in line


# trying the command line as a user would


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_temperature_below_the_logits_precision_is_greedy_not_nan(dtype):
    """1e-300 rounds to 0 in float32: `0 / 0` made the likeliest logit NaN, and the draw
    was token 0 (a newline) whatever the logits."""
    from labnn.nn.generation import sample_next

    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, 0.0, 4.0]], dtype=dtype)
    for temperature in (1e-300, 1e-50):
        assert sample_next(logits, temperature).tolist() == [1, 0]


def test_sample_at_a_tiny_temperature_prints_what_greedy_prints(capsys, tmp_path):
    out = tmp_path / "m.pt"
    assert cli(capsys, "train", *TINY, "--iters", "2", "--out", str(out))[0] == 0
    sample = ["sample", "--checkpoint", str(out), "--prompt", "KING", "--tokens", "6"]
    greedy = cli(capsys, *sample, "--temperature", "0")
    assert cli(capsys, *sample, "--temperature", "1e-300") == greedy


def test_a_data_dir_that_is_a_symlink_to_nothing_is_named(capsys, tmp_path, monkeypatch,
                                                          no_training):
    (tmp_path / "data").symlink_to(tmp_path / "gone")
    monkeypatch.setenv("LABNN_DATA_DIR", str(tmp_path / "data"))
    code, _, err = cli(capsys, "train", *TINY, "--iters", "1", "--out", str(tmp_path / "m.pt"))
    one_line_error(code, err, f"LABNN_DATA_DIR={tmp_path / 'data'} is a symlink to "
                   f"{tmp_path / 'gone'}, which does not exist")
    assert "Errno" not in err


def test_an_out_inside_a_file_names_the_file(capsys, tmp_path, no_training):
    (tmp_path / "notes").write_text("mine")
    out = tmp_path / "notes" / "sub" / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "1", "--out", str(out))
    one_line_error(code, err, f"--out {out}: {tmp_path / 'notes'} is a file, not a folder")


@pytest.mark.parametrize("model, flags, needle", [
    ("xl", ["--seq-len", "10000", "--batch-size", "12"],
     "--batch-size 12 --seq-len 10000: the validation split holds 111,540 characters, too "
     "few for 12 streams of 10,000 + 1"),
    ("transformer", ["--seq-len", "120000", "--batch-size", "1"],
     "--seq-len 120000: the validation split holds 111,540 characters, too few for rows of "
     "120,000 + 1"),
])
def test_rows_longer_than_a_split_name_the_options(capsys, tmp_path, no_training, model, flags,
                                                   needle):
    """It was the Trainer's `val_ids hold 111540 tokens ... seq_len=10000`, in the Python
    API's names, after the model was built."""
    code, _, err = cli(capsys, "train", "--model", model, *TINY, *flags, "--d-model", "8",
                       "--n-heads", "1", "--out", str(tmp_path / "m.pt"))
    one_line_error(code, err, needle)


def test_activations_too_large_name_a_d_ff_given_by_set(capsys, tmp_path):
    code, _, err = cli(capsys, "train", *TINY, "--batch-size", "12", "--seq-len", "64", "--set",
                       "d_ff=2000000000", "--out", str(tmp_path / "m.pt"))
    one_line_error(code, err, "--batch-size 12 --seq-len 64 --set d_ff=2000000000: one training "
                   "step needs", "(activations", "lower --batch-size, --seq-len or --set d_ff")
