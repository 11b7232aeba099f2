"""Every benchmark runs (`--quick`) and prints one JSON object with `--json`. Timings are not asserted here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_compare_refs_quick():
    """benchmarks/compare_refs.py imports HEAD's package beside the working tree's, finds the same
    outputs and prints one line per hot path."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_refs.py"
    r = subprocess.run([sys.executable, str(path), "--quick", "--repeats", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("new/ref") == 3, r.stdout
