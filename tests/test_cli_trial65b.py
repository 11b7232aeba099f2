"""The command line after review 65, each test written failing first: a `train` refused after
the check of `--out` (a `--set` that does not parse, sizes, a device) left `--out`'s new folder
behind, empty; `train --resume --out` of a plain `torch.save` file said "checkpoint ... has no
checksum ... --trust-checkpoint loads it", naming neither option, and offered to trust a file
that `train` never wrote."""

import pytest
import torch

from test_cli import TINY, cli, one_line_error


@pytest.mark.parametrize("options, needle", [
    (["--set", "bogus=1"], "--set 'bogus=1'"),
    (["--d-model", "30", "--n-heads", "4"], "--d-model 30, --n-heads 4"),
    (["--d-model", "8192", "--n-layers", "1000"], "lower --d-model or --n-layers"),
    (["--device", "meta"], "--device meta"),
    (["--model", "xl", "--batch-size", "20000"], "--batch-size 20000"),
])
def test_a_refused_train_creates_no_folder(capsys, tmp_path, no_training, options, needle):
    out = tmp_path / "new" / "dir" / "m.pt"
    code, stdout, err = cli(capsys, "train", *TINY, *options, "--out", str(out))
    one_line_error(code, err, needle)
    assert not (tmp_path / "new").exists(), sorted(tmp_path.rglob("*"))


def test_a_missing_out_folder_is_made_when_training_starts(capsys, tmp_path):
    out = tmp_path / "new" / "dir" / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "1", "--out", str(out))
    assert code == 0, err
    assert out.is_file() and sorted(p.name for p in out.parent.iterdir()) == ["m.pt"]


def test_an_out_folder_that_cannot_be_made_is_refused_creating_nothing(capsys, tmp_path,
                                                                       no_training):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "dir" / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--out", str(out))
    one_line_error(code, err, f"--out {out}", "is a file, not a folder")
    code, _, err = cli(capsys, "train", *TINY, "--out", "/proc/labnn/new/m.pt")
    one_line_error(code, err, "--out /proc/labnn/new/m.pt", "cannot create")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("content", [{"a": 1}, torch.nn.Linear(2, 2).state_dict(),
                                     torch.zeros(3)])
def test_resume_from_a_plain_torch_save_file_names_out(capsys, tmp_path, no_training, content):
    plain = tmp_path / "plain.pt"
    torch.save(content, plain)
    before = plain.read_bytes()
    code, out, err = cli(capsys, "train", *TINY, "--resume", "--out", str(plain))
    line = one_line_error(code, err, f"--resume: --out {plain} is not a checkpoint written by "
                          "`python -m labnn train`", "another --out", "--overwrite")
    assert "--trust-checkpoint" not in line and len(line) < 400, line
    assert out == "" and plain.read_bytes() == before


def test_sample_of_a_plain_torch_save_file_offers_no_trust(capsys, tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), plain)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(plain))
    line = one_line_error(code, err, f"--checkpoint {plain} is not a checkpoint written by "
                          "`python -m labnn train`")
    assert "--trust-checkpoint" not in line and len(line) < 400, line


def test_resume_from_an_older_checkpoint_without_checksum_offers_trust(capsys, tmp_path):
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", *TINY, "--iters", "2", "--out", str(out))
    assert code == 0, err
    old = tmp_path / "old.pt"
    old.write_bytes(out.read_bytes().split(b"\n", 1)[1])  # an older labnn's: no header line
    resume = ["train", *TINY, "--iters", "4", "--resume", "--out", str(old)]
    line = one_line_error(*cli(capsys, *resume)[::2], f"--resume: --out {old} has no checksum",
                          "older labnn", "--trust-checkpoint")
    assert len(line) < 400, line
    code, _, err = cli(capsys, *resume, "--trust-checkpoint")
    assert code == 0, err


@pytest.mark.parametrize("data, needle", [(b"", "is empty (0 bytes)"),
                                          (b"hello", "is not a labnn checkpoint"),
                                          (b"LABNN-CHECKPOINT 1 sha256=00\n", "is corrupted")])
def test_resume_from_an_unreadable_out_says_what_to_do(capsys, tmp_path, no_training, data,
                                                       needle):
    """An empty, foreign or damaged --out named neither --resume nor a way out."""
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data)
    code, out, err = cli(capsys, "train", *TINY, "--resume", "--out", str(bad))
    line = one_line_error(code, err, f"--resume: --out {bad}", needle, "another --out",
                          "--overwrite")
    assert out == "" and len(line) < 400 and bad.read_bytes() == data, line
