"""Review 65 of the package, each test written failing first: the site hook rendered an
executed notebook from its cache after a change of labnn/ (stale outputs); generation with a
`generator=` on another device than the model failed mid-loop with torch's error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".ci"))
import execute_notebooks as ex  # noqa: E402


def _notebook(path: Path, code: str, prose: str = "# Title", key: str | None = None) -> Path:
    nb = {"cells": [{"cell_type": "markdown", "id": "m0", "metadata": {}, "source": prose},
                    {"cell_type": "code", "id": "c0", "metadata": {}, "execution_count": 1,
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
                     "source": code}],
          "metadata": {} if key is None else {ex.KEY: key}, "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """docs/hooks/notebooks.py with its cache folder in tmp_path, under the key "now" (as if
    `.ci/execute_notebooks.cache_key` computed it)."""
    pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import notebooks  # noqa: PLC0415

    cache = tmp_path / "cache" / "notebooks"
    monkeypatch.setattr(notebooks, "executed_folder", lambda: cache)
    monkeypatch.delenv("LABNN_EXECUTED_NOTEBOOKS", raising=False)
    monkeypatch.setattr(ex, "cache_key", lambda notebook, package=None: "now")
    return SimpleNamespace(_executed_copy=notebooks._executed_copy, cache=cache)


def test_the_cache_copy_of_another_labnn_is_not_rendered(tmp_path, hook):
    nb = _notebook(tmp_path / "n.ipynb", "print(1)")
    _notebook(hook.cache / "n.ipynb", "print(1)", key="before labnn/ changed")
    assert hook._executed_copy(nb) is None  # stale: on_files executes it again
    _notebook(hook.cache / "n.ipynb", "print(1)")  # no key at all: not known current
    assert hook._executed_copy(nb) is None
    _notebook(hook.cache / "n.ipynb", "print(1)", key="now")
    assert hook._executed_copy(nb) == hook.cache.resolve() / "n.ipynb"


def test_the_cache_copy_takes_new_prose_as_execute_notebooks_does(tmp_path, hook):
    nb = _notebook(tmp_path / "n.ipynb", "print(1)", prose="# New title")
    _notebook(hook.cache / "n.ipynb", "print(1)", prose="# Old title", key="now")
    copy = hook._executed_copy(nb)
    assert copy == hook.cache.resolve() / "n.ipynb"
    cells = json.loads(copy.read_text())["cells"]
    assert cells[0]["source"] == "# New title" and cells[1]["outputs"][0]["text"] == "1\n"


def test_a_given_copy_is_checked_by_its_key_when_it_has_one(tmp_path, hook, monkeypatch):
    """LABNN_EXECUTED_NOTEBOOKS: nbval's copies (make test) carry no key and are rendered when
    their cells match; a copy of execute_notebooks (make site) carries one and must match it."""
    given = tmp_path / "given" / "notebooks"
    monkeypatch.setenv("LABNN_EXECUTED_NOTEBOOKS", str(given))
    nb = _notebook(tmp_path / "n.ipynb", "print(1)")
    _notebook(given / "n.ipynb", "print(1)")
    assert hook._executed_copy(nb) == given.resolve() / "n.ipynb"
    _notebook(given / "n.ipynb", "print(1)", key="before labnn/ changed")
    assert hook._executed_copy(nb) is None
    _notebook(given / "n.ipynb", "print(1)", key="now")
    assert hook._executed_copy(nb) == given.resolve() / "n.ipynb"


def _Generator(device: str) -> torch.Generator:
    """A CPU generator that says it is on `device` (to test the device check without a GPU)."""
    return type("Generator", (torch.Generator,), {"device": torch.device(device)})()


def test_generate_names_a_generator_on_another_device_before_the_loop():
    from labnn.nn.generation import generate  # noqa: PLC0415

    def next_logits(new, seen, cache):
        raise AssertionError("the loop began")

    prompt = torch.zeros(1, 2, dtype=torch.long, device="meta")  # a model's device, no values
    with pytest.raises(ValueError, match=r"generator is on cpu, but the prompt is on meta"):
        generate(next_logits, prompt, 3, generator=torch.Generator())


@pytest.mark.parametrize("generator, device", [("cuda:1", "cuda:0"), ("cuda:0", "cuda:1"),
                                                ("cpu", "cuda:0"), ("cuda:0", "cpu")])
def test_a_generator_of_another_device_index_is_refused_naming_both(generator, device):
    """'cuda:1' against a model on 'cuda:0' passed the check (it compared device types only)
    and failed in torch's sampling, at the first token after the prompt."""
    from labnn.nn.arguments import check_generator  # noqa: PLC0415

    with pytest.raises(ValueError) as caught:
        check_generator(_Generator(generator), torch.device(device))
    message = str(caught.value)
    assert f"generator is on {generator}, but the prompt is on {device}" in message, message
    assert f"torch.Generator('{device}')" in message and len(message) < 400, message


@pytest.mark.parametrize("generator, device", [("cuda:0", "cuda:0"), ("cpu", "cpu"),
                                                ("cuda", "cuda:1"), ("mps", "mps:0")])
def test_a_generator_of_the_drawing_device_is_taken(generator, device):
    from labnn.nn.arguments import check_generator  # noqa: PLC0415

    check_generator(None, torch.device(device))
    check_generator(_Generator(generator), torch.device(device))


def test_sample_next_names_a_generator_on_another_device():
    from labnn.nn.generation import sample_next  # noqa: PLC0415

    logits = torch.zeros(1, 4, device="meta")
    with pytest.raises(ValueError, match=r"generator is on cpu, but the logits are on meta"):
        sample_next(logits, 1.0, None, generator=torch.Generator())


def test_a_notebook_changed_while_the_site_builds_is_named_not_a_traceback(
        tmp_path, hook, monkeypatch):
    """A notebook or labnn/ edited while `make site` executed the notebooks leaves a copy that
    is no longer current: the build said AttributeError ('NoneType' has no 'parent') with a
    traceback (seen in session 67); it names the notebook and says to build again."""
    import notebooks  # noqa: PLC0415
    from mkdocs.structure.files import Files  # noqa: PLC0415

    nb = _notebook(tmp_path / "n.ipynb", "print(1)")
    monkeypatch.setattr(notebooks.layout, "notebooks", lambda: [nb])
    monkeypatch.setattr(notebooks.execute_notebooks, "run", lambda *a, **k: 0)  # "executed"
    with pytest.raises(SystemExit, match=r"n\.ipynb changed .*build again"):
        notebooks.on_files(Files([]), {"site_dir": str(tmp_path / "site"),
                                  "use_directory_urls": True})
