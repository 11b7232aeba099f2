"""pytest plugin: keep the outputs nbval produced, so the site renders notebooks executed once.

`make test` runs every notebook under nbval (`-p nbval_capture --nbval-capture=DIR`, with `tests/` on
PYTHONPATH); this plugin copies each cell's outputs, as nbval received them from the kernel, into the
notebook and writes it to `DIR/<name>.ipynb` once every cell of it has passed. The site build then renders
those copies instead of executing the notebooks a second time (`LABNN_EXECUTED_NOTEBOOKS=DIR`, see
`docs/hooks/notebooks.py`, which also checks that every cell of a copy is still the repository's).

nbval drops `update_display_data` messages (it prints "unhandled iopub msg"), so a display updated in place
(labnn.training.progress's bar) would be kept in its first state, "train: 0%| | 0/150". This plugin reads the
kernel's messages before nbval does: it marks each display that has a `display_id` and keeps the last data
sent to that id, which the written notebook shows (as Jupyter and nbclient would).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

_notebooks: dict[str, dict] = {}  # notebook path -> {"nb", "cells": {index: outputs}, "failed", "items"}
_MARK = "labnn_display_id"  # metadata key naming a display's id until the notebook is written


def pytest_addoption(parser):
    parser.addoption("--nbval-capture", metavar="DIR", default=None,
                     help="write each notebook nbval ran without failure, with its outputs, into DIR")


def _state(item) -> dict | None:
    parent = getattr(item, "parent", None)
    if type(item).__name__ != "IPyNbCell" or not hasattr(parent, "nb"):
        return None
    key = str(parent.path)
    if key not in _notebooks:
        _notebooks[key] = {"nb": copy.deepcopy(parent.nb), "cells": {}, "failed": False,
                           "expected": sum(1 for c in parent.nb.cells if c.cell_type == "code")}
    return _notebooks[key]


def _watch_displays(notebook, latest: dict[str, dict]) -> None:
    """Wrap the notebook's `get_kernel_message` (nbval's only way to read the kernel's output): a display
    with an id gets it in its metadata, and `update_display_data` goes to `latest[id]`, not to nbval."""
    if getattr(notebook, "_labnn_watched", False):
        return
    read = notebook.get_kernel_message

    def get_kernel_message(timeout=None, stream="iopub"):
        while True:
            msg = read(timeout=timeout, stream=stream)
            content = msg.get("content", {})
            display_id = (content.get("transient") or {}).get("display_id")
            if msg.get("msg_type") == "update_display_data":
                if display_id is not None:
                    latest[display_id] = {"data": content.get("data", {}), "metadata": content.get("metadata", {})}
                continue
            if display_id is not None and msg.get("msg_type") == "display_data":
                content["metadata"] = {**content.get("metadata", {}), _MARK: display_id}
            return msg

    notebook.get_kernel_message = get_kernel_message
    notebook._labnn_watched = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    state = _state(item)
    if state is not None and item.config.getoption("nbval_capture") is not None:
        _watch_displays(item.parent, state.setdefault("displays", {}))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    state = _state(item)
    if state is None or item.config.getoption("nbval_capture") is None:
        return
    report = outcome.get_result()
    if report.failed:
        state["failed"] = True
    if call.when == "call" and report.passed:
        index = item.cell_num if hasattr(item, "cell_num") else None
        if index is not None:
            state["cells"][index] = [copy.deepcopy(o) for o in (item.test_outputs or [])]
            if len(state["cells"]) == state["expected"]:
                _write(item.config, Path(str(item.parent.path)), state)


def _write(config, path: Path, state: dict) -> None:
    if state["failed"]:
        return
    nb = state["nb"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    for count, (cell, index) in enumerate(zip(code, sorted(state["cells"])), start=1):
        outputs = []
        for out in state["cells"][index]:
            kind = out.get("output_type")
            if kind == "stream":
                outputs.append(nbformat.v4.new_output("stream", name=out["name"], text=out["text"]))
            elif kind in ("display_data", "execute_result"):
                extra = {"execution_count": count} if kind == "execute_result" else {}
                data, metadata = out["data"], dict(out.get("metadata", {}))
                display_id = metadata.pop(_MARK, None)
                if display_id in state.get("displays", {}):  # its last state, as a reader would see it
                    data, metadata = state["displays"][display_id]["data"], state["displays"][display_id]["metadata"]
                outputs.append(nbformat.v4.new_output(kind, data=data, metadata=metadata, **extra))
            elif kind == "error":
                outputs.append(nbformat.v4.new_output("error", ename=out["ename"], evalue=out["evalue"],
                                                      traceback=out["traceback"]))
        cell.outputs = outputs
        cell.execution_count = count
    target = Path(config.getoption("nbval_capture")) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".ipynb.tmp")
    nbformat.write(nb, str(tmp))
    tmp.replace(target)
