"""A learner's trial of the command line and checkpoints (trial 49). Each test was written
failing, from what the trial found; the worst: `--out /dev/null --overwrite`, run as root
(Colab), replaced the machine's /dev/null with a regular file."""

import os

import pytest
import torch

from labnn.training import checkpoint as ckpt
from test_cli import TINY, cli, one_line_error


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A transformer checkpoint written by `train` (2 iterations)."""
    from labnn.cli import main

    path = tmp_path_factory.mktemp("tiny49") / "tiny.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    return path


@pytest.fixture
def fifo(tmp_path):
    """A named pipe: a file that is not a regular one, as /dev/null is (a character
    device needs root to make)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    path = tmp_path / "pipe.pt"
    os.mkfifo(path)
    return path


def test_a_save_never_replaces_a_device_or_a_pipe(fifo):
    for save in (lambda: ckpt.save_atomic({"a": 1}, fifo), lambda: ckpt.check_writable(fifo)):
        with pytest.raises(ValueError, match=r"pipe.pt is a pipe, not a regular file"):
            save()
        assert fifo.is_fifo()
    link = fifo.with_name("link.pt")
    link.symlink_to(fifo)  # the symlink's target is what a save would replace
    with pytest.raises(ValueError, match=r"link.pt is a pipe"):
        ckpt.save_atomic({"a": 1}, link)
    assert fifo.is_fifo()


def test_train_overwrite_refuses_a_device_or_a_pipe_in_one_line(capsys, fifo):
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(fifo), "--overwrite")
    one_line_error(code, err, "--out", "is a pipe, not a regular file")
    assert fifo.is_fifo()


def test_trust_checkpoint_reads_a_checkpoint_without_checksum(capsys, tmp_path, tiny):
    """A checkpoint of a labnn older than the checksum line: refused with advice that was a
    Python call, and --trust-checkpoint (the README's way for an older labnn's files) did
    not read it either."""
    old = tmp_path / "old.pt"
    old.write_bytes(tiny.read_bytes().split(b"\n", 1)[1])  # the header line removed
    code, _, err = cli(capsys, "sample", "--checkpoint", str(old), "--tokens", "3")
    one_line_error(code, err, "has no checksum", "--trust-checkpoint")
    code, out, err = cli(capsys, "sample", "--checkpoint", str(old), "--tokens", "3",
                         "--trust-checkpoint")
    assert code in (0, None) and out.strip(), err
    plain = tmp_path / "state_dict.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), plain)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(plain), "--trust-checkpoint")
    one_line_error(code, err, "was not written by `python -m labnn train`")


def test_compile_says_how_many_tokens_it_can_generate(capsys, tiny):
    """The default --tokens 300 past a learned-position model's seq_len (8 here) got a
    line about rings and sliding windows, and no number to give."""
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--compile", "--prompt", "AB")
    one_line_error(code, err, "--tokens 7 or fewer", "leave out --compile")


def test_labnn_device_is_named_when_it_chose_the_device(capsys, tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("LABNN_DEVICE", "bogus")
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny))
    one_line_error(code, err, "LABNN_DEVICE=bogus", "--device")


def test_resume_names_no_derived_field(capsys, tmp_path):
    """--d-model changed on --resume asked for `--set d_ff=...`, a field the learner never
    set (it follows from --d-model)."""
    out = tmp_path / "a.pt"
    assert cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out))[0] in (0, None)
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--d-model", "32", "--out",
                       str(out), "--resume")
    line = one_line_error(code, err, "--d-model 16 (not 32)", "--overwrite")
    assert "d_ff" not in line


def test_resume_with_another_learning_rate_names_the_flags_and_the_way_out(capsys, tmp_path):
    out = tmp_path / "a.pt"
    assert cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out))[0] in (0, None)
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--lr", "0.002", "--seed", "3",
                       "--out", str(out), "--resume")
    line = one_line_error(code, err, "--lr 0.001 (not 0.002)", "--seed 1337 (not 3)",
                          "--overwrite")
    assert "min_lr" not in line


def test_abbreviated_options_are_not_guessed(capsys, tiny):
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--tok", "3")
    one_line_error(code, err, "--tok")


def test_a_prompt_past_the_learned_positions_is_named_under_compile(capsys, tiny):
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--compile", "--prompt",
                       "ABCDEFGHI")  # 9 characters, seq_len 8
    one_line_error(code, err, "cannot continue this --prompt of 9 characters")


def test_too_many_tokens_for_the_memory_name_tokens(capsys, monkeypatch, tiny):
    """--tokens 100000000 ended in the allocator's own message, naming no option (here
    the allocator's refusal is simulated: a real one depends on the machine)."""
    from labnn.transformer import TransformerLM

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 25600000256 bytes")

    monkeypatch.setattr(TransformerLM, "generate", refuse)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--tokens", "100000000")
    one_line_error(code, err, "--tokens 100000000: not enough memory on cpu")


def test_an_empty_checkpoint_name_is_named_as_such(capsys):
    code, _, err = cli(capsys, "sample", "--checkpoint", "")
    line = one_line_error(code, err, "--checkpoint", "expected a file name")
    assert "directory" not in line
