"""`.ci/execute_notebooks.py` (make site): what its cache key covers; it re-runs only what changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".ci"))
import execute_notebooks as ex  # noqa: E402


def _notebook(path: Path, code: list[str], prose: str = "# Title") -> Path:
    cells = [{"cell_type": "markdown", "id": "m0", "metadata": {}, "source": prose}]
    cells += [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
               "outputs": [], "source": src} for i, src in enumerate(code)]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def package(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("X = 1\n")
    return tmp_path / "pkg"


def test_key_covers_code_package_and_flags_not_prose(tmp_path, package, monkeypatch):
    monkeypatch.delenv("LABNN_FAST", raising=False)
    nb = _notebook(tmp_path / "n.ipynb", ["print(1)"])
    key = ex.cache_key(nb, package)
    _notebook(nb, ["print(1)"], prose="# Another title")
    assert ex.cache_key(nb, package) == key
    _notebook(nb, ["print(2)"])
    assert ex.cache_key(nb, package) != key
    _notebook(nb, ["print(1)"])
    (package / "a.py").write_text("X = 2\n")
    changed = ex.cache_key(nb, package)
    assert changed != key
    monkeypatch.setenv("LABNN_FAST", "1")
    assert ex.cache_key(nb, package) != changed


def test_key_covers_the_packages_script_files(tmp_path, package):
    """labnn/plot/interactive.js is inlined into each interactive figure's output: a change to it
    kept serving the old drawing code (notebook 02's 6 px column numbers after their fix)."""
    nb = _notebook(tmp_path / "n.ipynb", ["print(1)"])
    (package / "draw.js").write_text("var a = 1;\n")
    key = ex.cache_key(nb, package)
    (package / "draw.js").write_text("var a = 2;\n")
    assert ex.cache_key(nb, package) != key


def test_reuse_keeps_outputs_and_takes_the_new_prose(tmp_path):
    nb = _notebook(tmp_path / "n.ipynb", ["print(1)"], prose="# New")
    copy = tmp_path / "out.ipynb"
    old = json.loads(nb.read_text())
    old["cells"][0]["source"] = "# Old"
    old["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1\n"}]
    old["metadata"][ex.KEY] = "k"
    copy.write_text(json.dumps(old))
    assert not ex.reuse(nb, copy, "other key")
    assert ex.reuse(nb, copy, "k")
    kept = json.loads(copy.read_text())
    assert kept["cells"][0]["source"] == "# New"
    assert kept["cells"][1]["outputs"][0]["text"] == "1\n"


def test_run_executes_side_by_side_then_serves_the_cache(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    src = tmp_path / "src"
    src.mkdir()
    good = _notebook(src / "a.ipynb", ["import os\nprint(os.environ['OMP_NUM_THREADS'])"])
    bad = _notebook(src / "b.ipynb", ["raise ValueError('boom')"])
    out = tmp_path / "notebooks"
    assert ex.run([good, bad], out, jobs=2, timeout=120) == 1
    log, err = capfd.readouterr()
    assert "without encryption" not in err  # the kernels run over Unix sockets, not TCP
    assert "start    a.ipynb" in log and "done     a.ipynb in" in log and "FAILED   b.ipynb" in log
    assert not (out / "b.ipynb").exists()  # a failed notebook leaves no copy to render
    executed = json.loads((out / "a.ipynb").read_text())
    assert "".join(executed["cells"][1]["outputs"][0]["text"]) == "1\n"  # one thread in the kernel
    assert ex.run([good], out, jobs=1) == 0
    assert "cached   a.ipynb" in capfd.readouterr().out


def test_a_failure_names_its_cell_and_error_however_long_the_cell(tmp_path, capfd):
    # a long cell once filled the 2,000 characters of the line, and the error was cut off
    long_cell = "\n".join(f"x{i} = {i}" for i in range(400)) + "\nraise ValueError('boom')"
    bad = _notebook(tmp_path / "b.ipynb", ["raise KeyError('shown on purpose')", long_cell])
    nb = json.loads(bad.read_text())
    nb["cells"][1]["metadata"]["tags"] = ["raises-exception"]  # an error the page shows
    bad.write_text(json.dumps(nb))
    assert ex.run([bad], tmp_path / "notebooks", jobs=1, timeout=120) == 1
    line = next(x for x in capfd.readouterr().out.splitlines() if x.startswith("FAILED"))
    assert "cell c1 (x0 = 0 ...): ValueError: boom" in line, line


def test_site_hook_renders_the_given_copy_else_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
    import notebooks  # noqa: PLC0415

    given, cache = tmp_path / "given" / "notebooks", tmp_path / "cache" / "notebooks"
    given.mkdir(parents=True)
    cache.mkdir(parents=True)
    nb = _notebook(tmp_path / "n.ipynb", ["print(1)"])
    monkeypatch.setattr(notebooks, "executed_folder", lambda: cache)
    monkeypatch.setenv("LABNN_EXECUTED_NOTEBOOKS", str(given))
    monkeypatch.setattr(ex, "cache_key", lambda notebook, package=None: "k")
    assert notebooks._executed_copy(nb) is None
    cached = json.loads(_notebook(cache / "n.ipynb", ["print(1)"]).read_text())
    cached["metadata"][ex.KEY] = "k"  # the cache's copy counts under its key alone (review 65)
    (cache / "n.ipynb").write_text(json.dumps(cached))
    assert notebooks._executed_copy(nb) == cache.resolve() / "n.ipynb"
    _notebook(given / "n.ipynb", ["print(1)"])
    assert notebooks._executed_copy(nb) == given.resolve() / "n.ipynb"
    _notebook(nb, ["print(1)"], prose="# Changed")  # every cell of nbval's copy must match
    assert notebooks._executed_copy(nb) == cache.resolve() / "n.ipynb"  # its prose refreshed
    assert json.loads((cache / "n.ipynb").read_text())["cells"][0]["source"] == "# Changed"
