"""The Makefile as the README presents it: `make help` lists every target."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_target():
    """The README says `make help` lists every target: each .PHONY target but `help` is
    there, named at the start of a line."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()
    shown = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout
    listed = set(re.findall(r"^make ([\w-]+)", shown, re.M))
    assert set(phony) - {"help"} <= listed, f"not in make help: {set(phony) - {'help'} - listed}"
