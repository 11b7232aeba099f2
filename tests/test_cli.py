import subprocess
import sys

import pytest

from labnn.cli import MODELS


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "labnn", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_train_then_sample(tmp_path):
    ckpt = tmp_path / "tiny.pt"
    r = run("train", "--iters", "6", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--seq-len", "16",
            "--eval-interval", "3", "--eval-iters", "2", "--device", "cpu", "--set", "positions=sinusoidal",
            "--out", str(ckpt), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "val loss" in r.stdout and ckpt.exists()
    r = run("sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "20", "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ROMEO:") and len(r.stdout.rstrip("\n")) >= 26


@pytest.mark.parametrize("model", sorted(set(MODELS) - {"transformer"}))
def test_every_model_trains_and_samples(tmp_path, model):
    ckpt = tmp_path / f"{model}.pt"
    r = run("train", "--model", model, "--iters", "2", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
            "--seq-len", "8", "--batch-size", "2", "--eval-interval", "2", "--eval-iters", "1", "--device", "cpu",
            "--out", str(ckpt), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run("sample", "--checkpoint", str(ckpt), "--prompt", "KING", "--tokens", "5", "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("KING")


def test_bad_override_is_explained(tmp_path):
    r = run("train", "--set", "colour=blue", "--iters", "1", cwd=tmp_path)
    assert r.returncode != 0 and "FIELD one of" in r.stderr
