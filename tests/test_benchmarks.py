"""Every benchmark runs (`--quick`) and prints one JSON object with `--json`. Timings are not asserted here."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_quick_json(path):
    r = subprocess.run([sys.executable, str(path), "--quick", "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert isinstance(figures, dict) and figures


def test_recall_sweep_quick_json():
    """benchmarks/recall_sweep.py (notebook 05's sweep) runs and sums up each model."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "recall_sweep.py"
    r = subprocess.run([sys.executable, str(path), "--quick", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(figures["summary"]) == {"window", "XL", "feedback"}
    summary = figures["summary"].values()
    assert all(s["best_lr"] in figures["args"]["lrs"] for s in summary)
    params = [s["params"] for s in summary]
    assert (max(params) - min(params)) / max(params) < 0.01, "parameter-matched"


def _git_checkout() -> bool:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="compare_refs reads HEAD: needs a git checkout")
def test_compare_refs_quick():
    """benchmarks/compare_refs.py imports HEAD's package beside the working tree's, finds the same
    outputs and prints one line per hot path."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_refs.py"
    r = subprocess.run([sys.executable, str(path), "--quick", "--repeats", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("new/ref") == 3, r.stdout


@pytest.mark.skipif(not _git_checkout(), reason="compare_refs reads HEAD: needs a git checkout")
def test_the_ref_runs_its_own_modules_not_the_working_trees(tmp_path):
    """The ref's modules said `from labnn.nn.attention import ...`, which is the working
    tree's package: the "ref" ran HEAD's top modules on the working tree's building
    blocks, and compared a mixture with the new code."""
    refs = load_benchmark("compare_refs")
    ref = refs.import_ref("HEAD", tmp_path)
    try:
        xl = refs.module(ref, "xl.model")
        assert xl.XLBlock.__module__.startswith("labnn_ref.")
        assert xl.causal_mask.__module__.startswith("labnn_ref.")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.split(".")[0] == "labnn_ref"]:
            del sys.modules[name]


def load_benchmark(name):
    """A benchmark script imported as a module (benchmarks/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def feedback_kv():
    """benchmarks/bench_feedback_kv.py as a module; torch's thread count restored after."""
    threads = torch.get_num_threads()
    yield load_benchmark("bench_feedback_kv")
    torch.set_num_threads(threads)


def test_feedback_kv_broken_peers_get_a_row(feedback_kv, monkeypatch, capsys):
    """A peer that is missing, fails to build or fails at its first step gets a row saying
    why, in every dtype; the other models are measured and decoding still runs."""

    class FailsAtStep(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(1, 1)

        def forward(self, tokens):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (512x64 and\n"
                               "512x512)")

    def fails_at_build():
        raise ValueError("no such config")

    found = {"broken_step": FailsAtStep, "broken_build": fails_at_build}
    missing = {"absent": "not installed (pip install absent)"}
    monkeypatch.setattr(feedback_kv, "peers", lambda args: (found, missing))
    feedback_kv.main(["--quick", "--lengths", "8", "--json",
                      "--dtypes", "float32", "bfloat16"])
    out, rows = capsys.readouterr()
    figures = json.loads(out)
    assert rows.count("absent: skipped — not installed (pip install absent)") == 1, rows
    assert rows.count("broken_build: skipped — build failed: ValueError: no such "
                      "config") == 2, rows
    assert rows.count("broken_step: skipped — RuntimeError: mat1 and mat2 shapes cannot "
                      "be multiplied (512x64 and 512x512)") == 2, rows
    ours = set(feedback_kv.ours(feedback_kv.parse_args(["--quick"])))
    for dtype in ("float32", "bfloat16"):
        measured, skipped = set(figures["train"][dtype]["8"]), figures["skipped"][dtype]
        assert skipped["broken_step"].startswith("RuntimeError: mat1 and mat2")
        assert measured | set(skipped) == ours | set(found), (dtype, measured, skipped)
        assert all(skipped[name] for name in skipped)
    assert set(figures["train"]["float32"]["8"]) == ours
    assert {"parallel", "kv_fused", "kv_compiled"} <= set(figures["decode"])
    assert figures["peers_missing"] == missing


def test_feedback_kv_time_limit(feedback_kv, capsys):
    """Past --time-limit, what would start is skipped with a printed line, and the JSON
    object still comes."""
    feedback_kv.main(["--quick", "--no-peers", "--json", "--time-limit", "0"])
    out, rows = capsys.readouterr()
    figures = json.loads(out)
    assert figures["train"]["float32"] == {} and figures["decode"] == {}
    assert "time limit (0 s) reached" in rows and figures["time_limit_skipped"]


@pytest.mark.parametrize("name, trains", [
    ("bench_feedback_algorithmic", "train_on_programs"),
    ("bench_feedback_shakespeare", "Trainer"),
])
def test_a_row_prints_as_its_model_finishes(name, trains, monkeypatch, capsys):
    """The table's header comes before any training and each model's row (with its ratio to
    the transformer, trained first) before the next model starts: a cut-off run reports."""
    printed = rows_before(load_benchmark(name), trains, ["--quick"], capsys, monkeypatch)
    header = printed[0].splitlines()
    assert header[-1].startswith("model") and "transformer" not in header[0], printed
    for before, row in zip(printed[1:], ("transformer", "xl" if "shake" in name else "feedback")):
        lines = before.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(row), printed
        assert lines[0].rstrip().endswith("x"), printed  # the ratio, printed with the row


def test_the_transformer_ring_replay_runs_and_prints_each_row():
    """benchmarks/transformer_ring_replay.py (the Benchmarks page's replayed transformer step):
    one row per width and context, each with its slots and time per token."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transformer_ring_replay.py"
    r = subprocess.run([sys.executable, str(path), "--quick"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if "ms per token" in line]
    assert len(rows) == 4 and all("slots" in row for row in rows), r.stdout


def test_the_key_layouts_print_both_layouts_and_their_ratio_in_each_row():
    """benchmarks/key_layouts.py (the figures of KVBuffer's and key_table's docstrings): three
    rows per size, each with both layouts' times and their ratio."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "key_layouts.py"
    r = subprocess.run([sys.executable, str(path), "--keys", "16"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if "keys:" in line]
    assert [row.split()[0] for row in rows] == ["scores", "fused", "table"], r.stdout
    assert all(row.count(" us") == 2 and row.endswith("x)") for row in rows), r.stdout


def test_bench_xl_names_a_variant_that_fell_back_to_eager(monkeypatch):
    """With --kernels on a CPU (or without Triton, or inductor without a compiler) the ring
    step runs eagerly, and the column said 'kernels' with a speed-up: a figure under the
    wrong name (trial 53d). The row now says what ran."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # conftest runs the kernels so
    bench = load_benchmark("bench_xl")
    row = bench.measure(16, 32, 2, 2, 1, 2, 1, backends=("kernels",))
    assert "eagerly" in row["kernels_fell_back"] or "CUDA" in row["kernels_fell_back"], row
    shown = bench.line(row, ("kernels",))
    assert "fell back" in shown and "kernels" in shown, shown


def test_bench_generation_warms_the_compiled_run_at_the_timed_size(monkeypatch):
    """The compiled run was warmed up for 2 new tokens and timed for --new: its ring had
    another size, so the first timed round compiled (229.9 ms a token, 0.37x, trial 53d)."""
    bench = load_benchmark("bench_generation")
    calls = []

    def record(generate, prompt, n, device):
        calls.append((generate, n))
        return 1e-3

    monkeypatch.setattr(bench, "per_token_seconds", record)
    monkeypatch.setattr(sys, "argv", ["bench_generation.py", "--contexts", "16", "--new",
                                      "6", "--repeats", "1", "--compile", "--json"])
    bench.main()
    warm_up = [n for _, n in calls[:4]]  # cached, recomputed, window, compiled: in order
    assert warm_up[3] == 6, warm_up


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("name, quick", [
    ("bench_generation", ["--quick"]), ("bench_xl", ["--quick"]),
    ("bench_feedback_kv", ["--quick"]),
    ("bench_xl_ring_kernels", ["--quick"]),
    ("transformer_ring_replay", [])])  # its --quick runs on the CPU whatever --device says
def test_a_device_this_machine_lacks_is_one_line(name, quick):
    """`--device cuda` on a CPU machine ended in a 10-13 line traceback (trial 53d)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    r = subprocess.run([sys.executable, str(path), "--device", "cuda", *quick],
                       capture_output=True, text=True, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert "--device cuda" in lines[-1] and "CUDA" in lines[-1], r.stderr


def test_bench_xl_json_keeps_each_row_as_it_is_measured(capsys):
    """With --json the rows were printed only in the final object: a run cut off printed
    nothing but a traceback (trial 53d). Each row now goes to stderr as it is measured, as
    bench_feedback_kv's do."""
    bench = load_benchmark("bench_xl")
    result = bench.main(["--attn-lens", "8", "16", "--d-model", "16", "--n-heads", "2",
                         "--n-layers", "1", "--steps", "2", "--repeats", "1", "--json"])
    err = capsys.readouterr().err
    rows = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [r["attn_len"] for r in rows] == [8, 16] == [r["attn_len"] for r in result["rows"]]


@pytest.mark.parametrize("init, why", [
    ("import sys\nsys.exit('labml: no .labml.yaml found')",
     "import failed: SystemExit: labml: no .labml.yaml found"),
    ("", "installed, but incomplete: ModuleNotFoundError: No module named "
         "'labml_nn.transformers'"),
])
def test_a_peer_whose_import_exits_or_is_incomplete_gets_a_row(feedback_kv, tmp_path,
                                                               monkeypatch, init, why):
    """A peer whose import called sys.exit stopped the whole benchmark (SystemExit is not
    an Exception), and a labml_nn lacking a module was called "not installed"."""
    (tmp_path / "labml_nn").mkdir()
    (tmp_path / "labml_nn" / "__init__.py").write_text(init)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.split(".")[0] == "labml_nn"]:
        monkeypatch.delitem(sys.modules, name)
    _, missing = feedback_kv.peers(feedback_kv.parse_args(["--quick"]))
    assert missing["labml_kv"] == why


def rows_before(bench, name: str, argv: list[str], capsys, monkeypatch) -> list[str]:
    """What `bench.main(argv)` had printed each time it called `bench.<name>`, and at the
    end: the rows must come as they are measured, not all at the end."""
    work, printed = getattr(bench, name), []

    def watched(*args, **kwargs):
        printed.append(capsys.readouterr().out)
        return work(*args, **kwargs)

    monkeypatch.setattr(bench, name, watched)
    threads = torch.get_num_threads()
    try:
        bench.main(argv)
    finally:
        torch.set_num_threads(threads)
    return printed + [capsys.readouterr().out]


def test_compiled_training_prints_each_run_with_its_ratio_as_it_finishes(capsys,
                                                                         monkeypatch):
    """Both runs were printed at the end, with no ratio between them."""
    bench = load_benchmark("compiled_training")
    printed = rows_before(bench, "run", ["--quick"], capsys, monkeypatch)
    assert len(printed) == 3 and "total" not in printed[0], printed
    assert printed[1].strip().startswith("eager") and printed[1].count("\n") == 1, printed
    compiled_row = printed[2].strip().splitlines()[-1]
    assert compiled_row.startswith("compiled") and "x eager" in compiled_row, printed


def test_compiled_loop_prints_each_row_with_its_ratios_as_it_finishes(capsys, monkeypatch):
    """The five rows were timed in turns and printed together at the end: a run cut off
    after minutes of compiling printed no time at all."""
    bench = load_benchmark("compiled_loop")
    printed = rows_before(bench, "paired_times", ["--quick", "--repeats", "1"], capsys,
                          monkeypatch)
    rows = [p.strip().splitlines()[-1] for p in printed[1:]]
    names = ["fused", "parallel compiled", "compiled", "eager"]
    assert [r.split("  ")[0].strip() for r in rows] == names, printed
    assert all("x parallel (" in r for r in rows) and "x fused" not in rows[0], rows
    assert all("x fused" in r and "x parallel compiled" in r for r in rows[2:]), rows


def test_xl_claims_prints_each_model_and_each_score_as_it_is_measured(capsys, monkeypatch):
    """Every figure came at the end of minutes of training."""
    monkeypatch.setenv("LABNN_DATA_DIR", os.environ.get("LABNN_DATA_DIR", ""))
    bench = load_benchmark("xl_claims")
    printed = rows_before(bench, "stream_loss", ["--quick"], capsys, monkeypatch)
    assert "trained in" in printed[0] and printed[0].count("trained in") == 3, printed
    assert "claim 3" in printed[-1], printed[-1]


def test_interactive_cost_prints_each_figure_as_it_is_measured(capsys, monkeypatch):
    bench = load_benchmark("interactive_cost")
    printed = rows_before(bench, "FuncAnimation", [], capsys, monkeypatch)
    assert "labnn.plot.interactive bytes" in printed[0], printed
