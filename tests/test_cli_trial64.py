"""The command line after a reader's trial (stop 64), each test written failing first:
`train --resume` with other model options printed the parameter count of a model that was
then refused; `--eval-iters` had no upper bound; under torchrun the memory check ran only
after the model was built."""

import pytest
import torch

from test_cli import TINY, cli, one_line_error


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


# under torchrun: the checks before building, in two processes (gloo on the CPU)

TOO_LARGE = ["--n-layers", "1000", "--d-model", "60000", "--n-heads", "4"]


def train_in_rank(rank, port, folder, cases):
    """One process of two, as torchrun starts it: `main(argv)` for each of `cases`, with
    the exit status, stderr and the largest `n_layers` of a model built written to
    `folder/rank`."""
    import contextlib
    import io
    import os

    import torch.distributed as dist

    from labnn.cli import main
    from labnn.transformer import TransformerLM

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    built, init = [0], TransformerLM.__init__

    def counted(self, config):
        built.append(config.n_layers)
        if config.n_layers > 2:  # a stand-in counts one or two layers: this is the model
            raise AssertionError(f"built a model of {config.n_layers} layers")
        init(self, config)

    TransformerLM.__init__ = counted
    results = []
    for argv in cases:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        results.append((code, err.getvalue(), max(built)))
        built[:] = [0]
    torch.save(results, f"{folder}/{rank}")
    if dist.is_initialized():
        dist.destroy_process_group()
    os._exit(0)


def test_under_torchrun_the_checks_before_building_run_as_in_one_process(tmp_path):
    import socket

    import torch.multiprocessing as mp

    from test_ddp import START

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = ["train", *TINY, "--iters", "1", "--out"]
    cases = [[*base, str(tmp_path / "big.pt"), *TOO_LARGE],
             [*base, str(tmp_path / "odd.pt"), "--batch-size", "3", "--n-layers", "3"]]
    mp.start_processes(train_in_rank, args=(port, str(tmp_path), cases), nprocs=2,
                       start_method=START)
    for rank in range(2):
        (big, big_err, big_built), (odd, odd_err, odd_built) = torch.load(tmp_path / str(rank))
        one_line_error(big, big_err, "--d-model 60000 --n-layers 1000: one training step needs")
        assert big_built < 3, big_err  # the stand-ins of check_size only
        one_line_error(odd, odd_err, "--batch-size 3", "divisible by the number of processes, 2")
        assert odd_built < 3 and odd == 2, odd_err


# trying the command line as a user would


@pytest.mark.parametrize("model, pair, others", [
    ("transformer", "mem_len=64", "--model xl"),
    ("xl", "block_len=4", "--model feedback or feedback-kv"),
    ("feedback", "loop=true", "--model feedback-kv"),
])
def test_a_set_field_of_another_model_names_that_model(capsys, tmp_path, no_training, model,
                                                      pair, others):
    code, _, err = cli(capsys, "train", *TINY, "--model", model, "--set", pair, "--out",
                       str(tmp_path / "m.pt"))
    field = pair.partition("=")[0]
    line = one_line_error(code, err, f"--set {pair}: {field} is a field of {others}",
                          f"not of --model {model}")
    assert code == 2 and "sizes have options" not in line, line


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_train_into_a_closed_pipe_goes_on_and_saves(tmp_path, unbuffered):
    """`train ... | head -1`: the reader closing stdout ended the run silently (status 141)
    before its first step, where stdout is unbuffered, and nothing was saved."""
    import os
    import subprocess
    import sys

    from conftest import ROOT
    from labnn.training import checkpoint as ckpt

    out = tmp_path / "m.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": unbuffered}
    run = subprocess.Popen([sys.executable, "-m", "labnn", "train", *TINY, "--iters", "4",
                            "--out", str(out)], env=env, text=True, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.stdout.close()  # as `head` does once it has its lines
    err = run.stderr.read()
    assert run.wait(timeout=300) == 0, err
    assert ckpt.load(out)["iter"] == 4
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("train:")]
    assert len(lines) == 1 and "stdout was closed" in lines[0], err
