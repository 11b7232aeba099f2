import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # Tests that read the corpus need it locally: CI points LABNN_DATA_DIR at ../shared/data.
    shared = ROOT.parent / "shared" / "data"
    if "LABNN_DATA_DIR" not in os.environ and (shared / "tiny_shakespeare.txt").exists():
        os.environ["LABNN_DATA_DIR"] = str(shared)


@pytest.fixture
def device():
    """The device tests run on: `$LABNN_DEVICE` (make test-gpu sets cuda), else the CPU."""
    return torch.device(os.environ.get("LABNN_DEVICE", "cpu"))
