"""The command line after review 66, each test written failing first.

A refused pickle was offered `--trust-checkpoint` whenever the first name the safe loader
refused began with `torch.`, `numpy.`, `collections.`, ...: a whole `nn.Module` saved with
`torch.save(model)`, a NumPy array, and a pickle of protocol 4 (whose name the safe loader
does not report) that runs `touch` when unpickled were all called "a checkpoint of an older
labnn that you wrote yourself". Only labnn's own classes are offered it now.
"""

import pickle

import numpy as np
import pytest
import torch

from test_checkpoint import RunsCode, feedback_state, write_pickled
from test_cli import TINY, cli, one_line_error


def pickled(kind, path, marker):
    """A `torch.save` file that holds pickled objects, none of them labnn's."""
    if kind == "module":
        torch.save(torch.nn.Linear(2, 2), path)
    elif kind == "module-with-header":
        write_pickled(path, {"model": torch.nn.Linear(2, 2)})
    elif kind == "numpy":
        torch.save({"model": {"w": np.zeros(3)}}, path)
    elif kind == "protocol-4":  # runs `touch marker` when unpickled
        torch.save({"x": RunsCode(marker)}, path, pickle_protocol=4)
    elif kind == "bare-pickle":
        path.write_bytes(pickle.dumps({"x": RunsCode(marker)}, protocol=2))
    return path


KINDS = ["module", "module-with-header", "numpy", "protocol-4", "bare-pickle"]


@pytest.mark.parametrize("kind", KINDS)
def test_sample_of_a_foreign_pickle_offers_no_trust(capsys, tmp_path, kind):
    marker = tmp_path / "pwned"
    path = pickled(kind, tmp_path / "f.pt", marker)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path), "--tokens", "2")
    line = one_line_error(code, err, str(path), "not loaded", "give a file that train wrote")
    assert "--trust-checkpoint" not in line and "older labnn" not in line, line
    assert len(line) < 400 and not marker.exists(), line


@pytest.mark.parametrize("kind", KINDS)
def test_resume_from_a_foreign_pickle_offers_no_trust(capsys, tmp_path, no_training, kind):
    marker = tmp_path / "pwned"
    path = pickled(kind, tmp_path / "f.pt", marker)
    before = path.read_bytes()
    code, _, err = cli(capsys, "train", *TINY, "--resume", "--out", str(path))
    line = one_line_error(code, err, str(path), "not loaded", "another --out", "--overwrite")
    assert "--trust-checkpoint" not in line and "older labnn" not in line, line
    assert len(line) < 400 and not marker.exists() and path.read_bytes() == before, line


def test_a_whole_model_is_named_as_one(capsys, tmp_path):
    path = pickled("module", tmp_path / "m.pt", None)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path))
    one_line_error(code, err, "torch.nn.modules.linear.Linear", "torch.save(model)")


def test_an_older_labnn_pickle_is_still_offered_trust(capsys, tmp_path, no_training):
    """What labnn wrote before its checkpoints were plain data: its own FeedbackState."""
    path = write_pickled(tmp_path / "old.pt", {"state": feedback_state()})
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path))
    one_line_error(code, err, "FeedbackState", "older labnn", "--trust-checkpoint")
    code, _, err = cli(capsys, "train", *TINY, "--resume", "--out", str(path))
    one_line_error(code, err, "FeedbackState", "older labnn", "--trust-checkpoint resumes")


def test_an_older_labnn_class_beside_a_foreign_one_offers_no_trust(capsys, tmp_path):
    path = write_pickled(tmp_path / "mixed.pt", {"state": feedback_state(),
                                                   "m": torch.nn.Linear(2, 2)})
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path))
    line = one_line_error(code, err, "torch.nn.modules.linear.Linear", "not loaded")
    assert "--trust-checkpoint" not in line, line


def test_a_run_that_ends_while_resume_starts_is_not_overwritten(capsys, tmp_path, monkeypatch):
    """`train --resume` read `--out` before `Trainer.fit` locked it: another run of it that
    saved and ended in between was then trained over from the older read. The read is under
    the lock now: the other run is refused while this one holds `--out`."""
    import os
    import subprocess
    import sys

    from conftest import ROOT
    from labnn.cli import commands
    from labnn.training.trainer import Trainer

    out = tmp_path / "m.pt"
    step = Trainer.train_step

    def stop_at_2(self):
        if self.iter == 2:
            raise KeyboardInterrupt
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", stop_at_2)
    run = ["train", "--iters", "6", *TINY, "--out", str(out), "--resume"]
    assert cli(capsys, *run)[0] == 130  # --out holds iteration 2 of 6
    monkeypatch.setattr(Trainer, "train_step", step)
    checked, other = commands.check_before_building, {}

    def other_run_ends(*args, **kwargs):  # after the read, before Trainer.fit
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        other["run"] = subprocess.run([sys.executable, "-m", "labnn", *run], env=env,
                                      capture_output=True, text=True, timeout=300)
        return checked(*args, **kwargs)

    monkeypatch.setattr(commands, "check_before_building", other_run_ends)
    code, stdout, err = cli(capsys, *run)
    assert code == 0 and "from iteration 2 to 6" in stdout, err
    assert other["run"].returncode == 1, other["run"].stdout
    assert "being written by another run" in other["run"].stderr, other["run"].stderr


@pytest.mark.parametrize("kind", ["protocol-4", "torchscript"])
def test_a_foreign_file_gets_one_line_and_no_torch_warning(capsys, tmp_path, monkeypatch, kind):
    """A pickle of protocol 4 printed torch's two-line UserWarning before the one line; a
    TorchScript archive (`torch.jit.save`) was handed to `torch.jit.load` by `torch.load`,
    which builds its modules (running their TorchScript `__setstate__`), with a warning."""
    import warnings

    path = tmp_path / "f.pt"
    if kind == "torchscript":
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)
    else:
        pickled(kind, path, tmp_path / "pwned")
    loaded = []
    monkeypatch.setattr(torch.jit, "load", lambda *a, **k: loaded.append(a))
    with warnings.catch_warnings(record=True) as shown:  # printed, one line each, outside
        warnings.simplefilter("always")
        code, _, err = cli(capsys, "sample", "--checkpoint", str(path))
    line = one_line_error(code, err, str(path), "not loaded", "give a file that train wrote")
    assert not loaded and not shown and "--trust-checkpoint" not in line, (line, shown)
    if kind == "torchscript":
        assert "TorchScript" in line, line
