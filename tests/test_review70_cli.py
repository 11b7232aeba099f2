"""Review 70 of the command line and checkpoints: tampered checkpoints refused with a
message naming what is wrong, and a resume from another vocabulary refused."""

import hashlib
import io
import zipfile

import pytest
import torch

from labnn.training import checkpoint as ckpt
from test_cli import TINY, cli, one_line_error


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A transformer checkpoint written by `train` (2 iterations)."""
    from labnn.cli import main
    path = tmp_path_factory.mktemp("tiny70") / "tiny.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    return path


def changed(tiny, path, change):
    """A copy of `tiny` with `change(payload)` applied, saved with a valid checksum."""
    payload = ckpt.load(tiny)
    change(payload)
    ckpt.save_atomic(payload, path)
    return path


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.float16])
def test_sample_refuses_weights_of_another_dtype(capsys, tmp_path, tiny, dtype):
    def to(p):
        p["model"]["tok_emb.weight"] = p["model"]["tok_emb.weight"].to(dtype)
    path = changed(tiny, tmp_path / "d.pt", to)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path), "--tokens", "3")
    one_line_error(code, err, "tok_emb.weight", str(dtype).removeprefix("torch."), "float32")


def test_check_weights_names_the_dtype():
    from labnn.transformer import TransformerConfig, TransformerLM
    model = TransformerLM(TransformerConfig(vocab_size=5, seq_len=4, d_model=8, n_heads=2,
                                            n_layers=1))
    weights = {k: v.double() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"checkpoint float64 vs model float32"):
        ckpt.check_weights(weights, model, "x.pt")


@pytest.mark.parametrize("tokenizer, needle", [
    (lambda t: t[:10], "10 characters"),
    (lambda t: ["a"] * len(t), "distinct"),
    (lambda t: 5, "int"),
])
def test_sample_names_a_tokenizer_that_does_not_fit(capsys, tmp_path, tiny, tokenizer, needle):
    def change(p):
        p["tokenizer"] = tokenizer(p["tokenizer"])
    path = changed(tiny, tmp_path / "t.pt", change)
    code, out, err = cli(capsys, "sample", "--checkpoint", str(path), "--tokens", "3")
    one_line_error(code, err, str(path), "tokenizer", needle)
    assert out == ""  # refused before the prompt is printed


def test_a_zip_with_extra_members_is_refused(tmp_path, tiny):
    raw = tiny.read_bytes()[ckpt.HEADER_LEN:]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w") as z:
        for info in zin.infolist():
            z.writestr(info, zin.read(info.filename))
        z.writestr("archive/evil.py", "import os")
    data = out.getvalue()
    path = tmp_path / "z.pt"
    path.write_bytes(ckpt.MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    with pytest.raises(ValueError, match=r"archive/evil\.py"):
        ckpt.load(path)
    ckpt.load(tiny)  # the file train wrote still loads


def test_resume_from_another_vocabulary_is_refused(capsys, tmp_path, tiny):
    def swap(p):
        t = p["tokenizer"]
        t[0], t[1] = t[1], t[0]
    path = changed(tiny, tmp_path / "v.pt", swap)
    before = path.read_bytes()
    code, _, err = cli(capsys, "train", "--iters", "3", *TINY, "--out", str(path), "--resume")
    one_line_error(code, err, "--resume", "tokenizer", "--overwrite")
    assert path.read_bytes() == before


def test_distributed_page_says_which_gpu_statements_never_ran_on_a_gpu():
    """docs/distributed.md stated the CUDA random-state resume and the NCCL refusal of one
    GPU for two processes as facts; neither was ever run on a GPU (tests/test_ddp.py
    checks them on a CPU), and the page did not say a torchrun mistake ends in torchrun's
    own traceback."""
    from pathlib import Path
    text = " ".join((Path(__file__).parents[1] / "docs/distributed.md").read_text().split())
    assert "CUDA random state, and so resumes only under as many processes as wrote it " \
           "(refused otherwise, with that message); this was never run on a GPU" in text
    assert "no GPU run has given `cuda:1`" in text
    assert "`torchrun` reports the failed process with a traceback of its own" in text


def test_an_out_inside_a_file_is_refused_at_the_door(capsys, tmp_path, no_training):
    """`--out a.pt/x.pt` with a.pt a file passed the door (the nearest existing folder was
    looked for above a.pt), printed the model's size, then failed with a bare
    `[Errno 20] Not a directory`."""
    (tmp_path / "a.pt").write_text("keep")
    code, out, err = cli(capsys, "train", "--iters", "2", *TINY,
                         "--out", str(tmp_path / "a.pt" / "x.pt"))
    one_line_error(code, err, "a.pt is a file, not a folder")
    assert out == "" and (tmp_path / "a.pt").read_text() == "keep"


def test_an_out_that_is_a_device_is_named_before_it_exists(capsys):
    """`--out /dev/null` was told to `--overwrite`, which then refused the device."""
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--out", "/dev/null")
    line = one_line_error(code, err, "/dev/null", "character device")
    assert "--overwrite" not in line


def test_a_checkpoint_path_inside_a_file_names_the_file(tmp_path):
    """save_atomic, check_writable and load of `a.pt/x.pt` (a.pt a file) raised a bare
    `[Errno 20] Not a directory`, naming neither a.pt nor what to do."""
    (tmp_path / "a.pt").write_text("keep")
    path = tmp_path / "a.pt" / "x.pt"
    for call in (ckpt.check_writable, lambda p: ckpt.save_atomic({}, p), ckpt.load):
        with pytest.raises(NotADirectoryError, match=rf"{tmp_path / 'a.pt'} is a file, not a "
                                                     "folder; give another path"):
            call(path)
    assert (tmp_path / "a.pt").read_text() == "keep"
