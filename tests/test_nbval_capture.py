"""tests/nbval_capture.py: the notebook it writes holds what a reader of the executed notebook would see."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_a_display_updated_in_place_is_kept_in_its_last_state(tmp_path):
    """nbval drops `update_display_data` (labnn.training.progress draws its bar with it): the capture must not keep
    the bar's first drawing ("0%| | 0/30") but its final one, as Jupyter and nbclient would."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        "from IPython.display import display\n"
        "handle = display({'text/plain': 'step 0/3'}, raw=True, display_id=True)\n"
        "for i in range(1, 4):\n"
        "    handle.update({'text/plain': f'step {i}/3'}, raw=True)\n"
        "print('done')\n"
    ))
    nb.cells.append(nbformat.v4.new_code_cell("handle.update({'text/plain': 'step 3/3, checked'}, raw=True)"))
    source = tmp_path / "notebooks" / "updated.ipynb"
    source.parent.mkdir()
    nbformat.write(nb, str(source))
    captured = tmp_path / "executed" / "notebooks"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "nbval_capture", "--nbval-lax", "--nbval-current-env",
         f"--nbval-capture={captured}", str(source), "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "unhandled iopub msg" not in run.stdout
    written = nbformat.read(str(captured / "updated.ipynb"), as_version=4)
    first = written.cells[0].outputs
    assert [o["output_type"] for o in first] == ["display_data", "stream"], first
    # A later cell's update reaches the display too (Jupyter shows every display of an id in its last state).
    assert first[0]["data"] == {"text/plain": "step 3/3, checked"}
    assert "labnn_display_id" not in first[0].get("metadata", {})
    assert first[1]["text"] == "done\n"
