"""`.ci/test-gpu` (make test-gpu) without a GPU: its report of test files and notebooks, and the
table it writes into docs/gpu.md."""

import importlib.machinery
import importlib.util
import subprocess
import sys

from conftest import ROOT


def runner():
    loader = importlib.machinery.SourceFileLoader("test_gpu_runner_ci", str(ROOT / ".ci" / "test-gpu"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_junit_results_per_test_file(tmp_path):
    xml = tmp_path / "unit.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_xl" name="a"/>'
        '<testcase classname="tests.test_xl.TestStep" name="b"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_ddp" name="c"><skipped message="2 GPUs"/></testcase>'
        '<testcase classname="" name="tests.test_i18n"><skipped message="collection skipped"/></testcase>'
        '</testsuite></testsuites>')
    assert runner().junit_files(xml) == {"test_ddp.py": "1 skipped", "test_i18n.py": "1 skipped",
                                         "test_xl.py": "1 passed, 1 failed"}


def test_a_cut_or_failed_notebook_says_so(tmp_path):
    ci = runner()
    part = ci.Part("nb", [sys.executable, "-c", "print('FAILED nb.ipynb::Cell 7 - x')"], {}, tmp_path)
    part.proc.wait()
    part.poll(deadline=float("inf"))
    assert ci.notebook_result(part).startswith("passed")  # exit 0 wins over the printed line
    slow = ci.Part("slow", [sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path)
    slow.poll(deadline=0)
    assert ci.notebook_result(slow).startswith("cut at")
    failed = ci.Part("bad", [sys.executable, "-c", "print('FAILED nb.ipynb::Cell 7 - x'); exit(1)"],
                     {}, tmp_path)
    failed.proc.wait()
    failed.poll(deadline=float("inf"))
    assert ci.notebook_result(failed).startswith("failed (cells 7)")
    assert ci.notebook_result(None) == "not run"


def test_the_gpu_page_has_the_results_markers():
    text = (ROOT / "docs" / "gpu.md").read_text()
    start, end = runner().MARKERS
    assert text.index(start) < text.index(end)


def test_refuses_a_machine_without_cuda(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "test-gpu"), "--parts", "unit",
                           "--no-write-docs", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "needs a CUDA device" in done.stderr
