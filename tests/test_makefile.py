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


def test_every_test_of_the_built_site_runs_on_the_built_site():
    """`make test` runs the tests of the built site once it is built (BROWSER_TESTS, with
    LABNN_SITE_DIR); a file that reads the site but is left out of that list runs in the unit
    step, where no site is built, and skips its checks of the site in silence (as
    test_site_crossref.py and test_site_search_sections.py did). .ci/test-gpu leaves the same
    files out of its unit tests."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    listed = set(re.search(r"^BROWSER_TESTS := ((?:.*\\\n)*.*)$", text, re.M).group(1).split()) - {"\\"}
    reading = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
               if p.name != "test_makefile.py" and re.search(r"LABNN_SITE_DIR|^from test_site import",
                            p.read_text(encoding="utf-8"), re.M)}
    assert reading <= listed, f"read the built site, not in BROWSER_TESTS: {reading - listed}"
    gpu = re.search(r"^BROWSER_TESTS = \(([^)]*)\)", (ROOT / ".ci/test-gpu").read_text(), re.M)
    assert {f"tests/{n}" for n in re.findall(r'"([^"]+)"', gpu.group(1))} == listed
