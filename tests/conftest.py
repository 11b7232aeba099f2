import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# Without a GPU, labnn's Triton kernels (tests/test_kernels.py) run under Triton's
# interpreter. Triton reads the variable when it is first imported, which importing
# labnn.compiled already does: so here, before any test module imports labnn.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


class NotebooksOnTheAudit:
    """`make test` sets LABNN_DEVICE=audit for the notebooks (labnn.training.device_audit): the variable
    is set while a notebook's cells run (its kernel starts, and inherits it, at the first one)
    and unset for every other test, fixtures included, which runs on the real CPU (the audit
    has its own tests, in processes of their own)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        if type(item).__name__ == "IPyNbCell":
            os.environ["LABNN_DEVICE"] = "audit"
        else:
            os.environ.pop("LABNN_DEVICE", None)


def pytest_configure(config):
    if os.environ.get("LABNN_DEVICE") == "audit":  # left set: xdist's workers inherit it
        config.pluginmanager.register(NotebooksOnTheAudit(), "labnn-notebooks-on-the-audit")
    # Tests that read the corpus need it locally: CI points LABNN_DATA_DIR at ../shared/data.
    shared = ROOT.parent / "shared" / "data"
    if "LABNN_DATA_DIR" not in os.environ and (shared / "tiny_shakespeare.txt").exists():
        os.environ["LABNN_DATA_DIR"] = str(shared)


@pytest.fixture
def device():
    """The device tests run on: `$LABNN_DEVICE` (make test-gpu sets cuda), else the CPU."""
    return torch.device(os.environ.get("LABNN_DEVICE", "cpu"))


@pytest.fixture
def no_training(monkeypatch):
    """`Trainer.fit` raises: a command-line test that must refuse before any training."""
    from labnn.training.trainer import Trainer

    def refuse(*args, **kwargs):
        raise AssertionError("training started: a model was built or trained")

    monkeypatch.setattr(Trainer, "fit", refuse)
    return refuse
