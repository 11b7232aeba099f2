"""Execute notebooks for the site side by side, one thread each, re-running only what changed.

`make site` runs `python .ci/execute_notebooks.py --out .cache/site-executed/notebooks
notebooks/*.ipynb` and then `mkdocs build --strict` with `LABNN_EXECUTED_NOTEBOOKS` naming that
folder, so the site renders these copies (docs/hooks/notebooks.py) instead of executing each
notebook with torch's default threads.

* Progress: a line when a notebook starts and one when it ends, with its wall time.
* Side by side: `--jobs` notebooks at once (default: the CPU count), each kernel with
  `OMP_NUM_THREADS=1` / `MKL_NUM_THREADS=1` (torch takes its intra-op thread count from them): on a
  2-core machine two kernels of one thread each beat one kernel fighting itself for both cores.
* Cache: an executed copy is kept with a key in its metadata (`labnn_cache_key`): the sha256 of the
  notebook's code cells, every `labnn/**/*.py` and `*.js` (interactive.js), the flags that change
  what runs (`LABNN_FAST`, `LABNN_DEVICE`) and the torch version. A notebook whose key matches is not executed again; when
  only its prose changed, the new markdown cells are put beside the kept outputs. Why not
  jupyter-cache (the maintained cache behind MyST-NB): its key covers the code cells and the kernel
  only, so a change to `labnn/` would serve stale outputs, and it adds a SQL database; nbclient
  (what nbconvert and mkdocs-jupyter execute with) plus this key is the whole job.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("LABNN_FAST", "LABNN_DEVICE")
KEY = "labnn_cache_key"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def cache_key(notebook: Path, package: Path = ROOT / "labnn") -> str:
    """What the outputs of `notebook` depend on, as one sha256."""
    digest = hashlib.sha256()
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            digest.update(b"\0cell\0" + _source(cell).encode())
    # and its scripts: interactive.js is inlined into the outputs of the figures it draws
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".js")):
        digest.update(b"\0file\0" + path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    for flag in FLAGS:
        digest.update(f"\0{flag}={os.environ.get(flag, '')}".encode())
    digest.update(f"\0torch={version('torch')}".encode())
    return digest.hexdigest()


def reuse(notebook: Path, copy: Path, key: str) -> bool:
    """Refresh `copy` from `notebook` if it was executed under `key`: outputs kept, prose updated."""
    if not copy.is_file():
        return False
    old = json.loads(copy.read_text(encoding="utf-8"))
    if old.get("metadata", {}).get(KEY) != key:
        return False
    new = json.loads(notebook.read_text(encoding="utf-8"))
    outputs = iter([c for c in old["cells"] if c["cell_type"] == "code"])
    for cell in new["cells"]:
        if cell["cell_type"] == "code":
            done = next(outputs)
            cell["outputs"], cell["execution_count"] = done["outputs"], done["execution_count"]
    new["metadata"][KEY] = key
    _write(copy, new)
    return True


def _write(path: Path, nb: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _failed_cell(nb) -> str:
    """`cell <id> (<its first line> ...)`: the last cell whose output is an error (an
    earlier one may show an error on purpose, tagged `raises-exception`)."""
    cell = next((c for c in reversed(nb.cells) if c.cell_type == "code"
                 and any(o.output_type == "error" for o in c.get("outputs", []))), None)
    if cell is None:
        return "a cell"
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return f"cell {cell.get('id', '?')} ({first[:60]} ...)"


def execute(notebook: Path, copy: Path, key: str, timeout: int | None = None) -> None:
    """Run every cell of `notebook` (in its folder, one thread) into `copy`."""
    import nbformat  # noqa: PLC0415
    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415

    os.environ.update(ONE_THREAD)  # the kernel inherits this process's environment
    print(f"start    {notebook.name}", flush=True)
    start = time.perf_counter()
    nb = nbformat.read(notebook, as_version=4)
    with tempfile.TemporaryDirectory() as sockets:

        class UnixSocketKernel(KernelManager):
            """The kernel over Unix sockets in a folder of its own, not over TCP (which
            ipykernel 7 warns is unencrypted, once per notebook); kernels side by side
            never share a path."""

            def __init__(self, **kwargs):
                super().__init__(transport="ipc", ip=f"{sockets}/kernel", **kwargs)

        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                kernel_manager_class=UnixSocketKernel,
                                resources={"metadata": {"path": str(notebook.parent)}})
        try:
            client.execute()
        except CellExecutionError as error:
            raise RuntimeError(f"{_failed_cell(nb)}: {error.ename}: {error.evalue}") from None
    nb.metadata[KEY] = key
    _write(copy, json.loads(nbformat.writes(nb)))
    print(f"done     {notebook.name} in {time.perf_counter() - start:.0f} s", flush=True)


def run(notebooks: list[Path], out: Path, jobs: int, timeout: int | None = None) -> int:
    """Execute the notebooks whose key changed, `jobs` at a time; 1 if any failed."""
    out.mkdir(parents=True, exist_ok=True)
    todo = {}
    for notebook in notebooks:
        key = cache_key(notebook)
        if reuse(notebook, out / notebook.name, key):
            print(f"cached   {notebook.name} (code, labnn/ and flags unchanged)", flush=True)
        else:
            todo[notebook] = key
    failed = 0
    spawn = multiprocessing.get_context("spawn")  # fresh workers, nothing forked mid-state
    here = str(Path(__file__).resolve().parent)  # they import this module by name (sys.path goes along)
    if here not in sys.path:
        sys.path.insert(0, here)
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=spawn) as pool:
        futures = {}
        for notebook, key in todo.items():
            futures[pool.submit(execute, notebook, out / notebook.name, key, timeout)] = notebook
        for future in as_completed(futures):
            name = futures[future].name
            try:
                future.result()
            except Exception as error:  # noqa: BLE001 (report every notebook, then fail)
                failed += 1
                (out / name).unlink(missing_ok=True)
                print(f"FAILED   {name}: {type(error).__name__}: {error}"[:2000], flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="a folder named notebooks/")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default none)")
    args = parser.parse_args(argv)
    if args.out.name != "notebooks":
        parser.error("--out must name a folder called notebooks/ (LABNN_EXECUTED_NOTEBOOKS)")
    started = time.perf_counter()
    rc = run(args.notebooks, args.out, args.jobs, args.timeout)
    print(f"notebooks: {time.perf_counter() - started:.0f} s in all", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
