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
        '<testcase classname="tests.test_xl" name="d"><skipped type="pytest.xfail" message="y"/>'
        '</testcase></testsuite></testsuites>')
    assert runner().junit_files(xml) == {"test_ddp.py": "1 skipped", "test_i18n.py": "1 skipped",
                                         "test_xl.py": "1 passed, 1 failed, 1 xfailed"}


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


def test_a_new_run_keeps_the_runs_before_it(tmp_path):
    """The runner replaced everything between the markers: the only record of the last
    complete unit run on a GPU, and the notes written beside it, would have been lost to the
    next `make test-gpu`. The new run goes first; what was there stays, below it."""
    ci = runner()
    start, end = ci.MARKERS
    page = tmp_path / "gpu.md"
    page.write_text(f"intro\n{start}\nRun of day 1: all passed.\n\nA note.\n{end}\nafter\n")
    ci.write_docs("Run of day 2: one failed.\n", page)
    text = page.read_text()
    assert text.index("Run of day 2") < text.index("Earlier runs") < text.index("Run of day 1")
    assert "A note." in text and text.startswith("intro\n") and text.endswith(f"{end}\nafter\n")
    ci.write_docs("Run of day 3.\n", page)
    text = page.read_text()
    assert text.count("Earlier runs") == 1
    assert text.index("day 3") < text.index("Earlier runs") < text.index("day 2") < text.index("day 1")


def test_refuses_a_machine_without_cuda(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "test-gpu"), "--parts", "unit",
                           "--no-write-docs", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "needs a CUDA device" in done.stderr


VERBOSE_LOG = """\
6 workers [7 items]

scheduling tests via LoadScheduling

tests/test_xl.py::test_a
tests/test_xl.py::test_b[one two]
[gw0] [ 14%] PASSED tests/test_xl.py::test_a
tests/test_ddp.py::test_c
[gw1] [ 28%] FAILED tests/test_xl.py::test_b[one two]
tests/test_kernels.py::test_d
[gw2] [ 42%] XFAIL tests/test_kernels.py::test_d
tests/test_cli.py::test_e
[gw3] [ 57%] SKIPPED tests/test_cli.py::test_e
"""


def test_a_cut_unit_run_names_the_tests_still_running(tmp_path):
    """A unit part stopped by the budget writes no junit file: its verbose log still gives
    the results per file, and the tests that had started but not ended (the slow or hung
    ones), so that the next run knows where the time went."""
    ci = runner()
    log = tmp_path / "unit.txt"
    log.write_text(VERBOSE_LOG)
    files, running, total, ended = ci.unit_progress(log)
    assert files == {"test_cli.py": "1 skipped", "test_kernels.py": "1 xfailed",
                     "test_xl.py": "1 passed, 1 failed"}
    assert (running, total, ended) == (["tests/test_ddp.py::test_c"], 7, 4)
    part = ci.Part("unit", [sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path)
    part.poll(deadline=0)  # cut; its log is the one above
    part.log.write_text(VERBOSE_LOG)
    line = ci.unit_summary(part)
    assert line.startswith("Unit tests (`LABNN_DEVICE=cuda`): cut in ")
    assert line.endswith(": 4 of 7 tests finished, 1 failed; still running when cut: "
                         "`tests/test_ddp.py::test_c`; not started: 2.")
    assert ci.unit_progress(tmp_path / "absent.txt") == ({}, [], 0, 0)


def test_the_feedback_benchmark_gets_what_is_left_of_the_benchmarks_share():
    """`make test-gpu` of 2026-11-27: `bench_feedback_kv.py` stopped at its fixed 60 s,
    before its bfloat16 and decoding rows. It now runs on until what is left of the
    benchmarks' share of the budget (40 %) is nearly spent."""
    ci = runner()
    cmd = ci.BENCHMARKS["bench_feedback_kv"]
    at = cmd.index("--time-limit") + 1
    assert ci.with_time_limit(cmd, 137.4)[at] == "117"
    assert ci.with_time_limit(cmd, 30)[at] == cmd[at]  # never below its own
    assert ci.with_time_limit(cmd, 137.4)[:at] + ci.with_time_limit(cmd, 137.4)[at + 1:] \
        == cmd[:at] + cmd[at + 1:]
    assert ci.with_time_limit(ci.BENCHMARKS["bench_xl"], 500) == ci.BENCHMARKS["bench_xl"]


def test_the_tests_that_touch_the_device_run_first():
    """The last GPU runs were cut with 44 of 5,425 tests not ended: test files ran in
    alphabetical order, so a cut falls on the last ones (test_train.py ... test_xl.py use
    the GPU), while 60 % of the tests are the learner-trial tests of the checkers, which
    build their tensors on the CPU whatever the device. Those run last now."""
    ci = runner()
    files = ci.unit_files(ROOT / "tests")
    names = [f.name for f in files]
    trials = [n for n in names if n.startswith("test_exercises_trial")]
    assert trials and names[-len(trials):] == trials
    assert {"test_xl.py", "test_train.py", "test_ddp.py", "test_kernels.py"} <= set(names)
    assert not set(ci.BROWSER_TESTS) & set(names)
    every = len(list((ROOT / "tests").glob("test_*.py")))
    assert len(names) == len(set(names)) == every - len(ci.BROWSER_TESTS)


def test_the_learner_trial_files_are_one_row_of_the_table():
    """The run of 2026-11-27 listed 68 trial files, one row each, around the 50 files of
    the models' tests."""
    units = {"test_xl.py": "70 passed", "test_exercises_trial9a.py": "54 passed",
             "test_exercises_trial10a.py": "97 passed, 1 failed",
             "test_exercises_xl.py": "90 passed, 2 skipped"}
    assert runner().grouped(units) == {
        "test_xl.py": "70 passed", "test_exercises_xl.py": "90 passed, 2 skipped",
        "test_exercises_trial*.py": "2 files: 151 passed, 1 failed"}
    assert runner().grouped({"test_xl.py": "1 passed"}) == {"test_xl.py": "1 passed"}


def test_the_benchmarks_come_last_with_their_reserve():
    """The unit tests and notebooks (pass or fail) come first, and their table is written
    before any benchmark runs: a run cut during the benchmarks still leaves it. The tests
    stop at the budget less the benchmarks' reserve, or at the budget without them."""
    ci = runner()
    assert ci.parts_seconds(570, 150, ["bench", "unit", "fast", "full"]) == 420
    assert ci.parts_seconds(570, 150, ["unit", "fast", "full"]) == 570


def test_the_second_writing_of_a_run_replaces_its_first(tmp_path):
    """The table is written after the tests and again after the benchmarks: the second
    must replace the first, not push it under 'Earlier runs'."""
    ci = runner()
    start, end = ci.MARKERS
    page = tmp_path / "gpu.md"
    page.write_text(f"intro\n{start}\nRun of day 1.\n{end}\n")
    before = page.read_text()
    ci.write_docs("Run of day 2, tests.\n", page, before)
    ci.write_docs("Run of day 2, tests and benchmarks.\n", page, before)
    text = page.read_text()
    assert "tests.\n" not in text and text.count("Run of day 2") == 1
    assert text.index("benchmarks") < text.index("Earlier runs") < text.index("day 1")
