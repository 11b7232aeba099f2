"""Where things are, shared by the site hooks (not a hook itself): the repository's notebooks and modules.

Nothing here is a hand-kept list: notebooks are `notebooks/*.ipynb`, modules are `labnn/**/*.py`.
Page paths (relative to the docs dir):

* notebook `notebooks/NN_x.ipynb` -> `notebooks/NN_x.ipynb` (rendered by mkdocs-jupyter at `notebooks/NN_x/`);
* module `labnn/a/b.py` -> annotated source `source/a/b.md`, API reference `api/a/b.md`;
  a package's `__init__.py` takes the package's name (`labnn/data/__init__.py` -> `source/data.md`) and the
  top package is the section's index (`source/index.md`, `api/index.md`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# LABNN_SITE_NOTEBOOKS_SRC: another folder of notebooks, only to develop the site without touching notebooks/.
NOTEBOOKS = Path(os.environ.get("LABNN_SITE_NOTEBOOKS_SRC") or ROOT / "notebooks")
PACKAGE = ROOT / "labnn"
BRANCH = "main"


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. "labnn.data.shakespeare"
    path: Path  # absolute path of the .py file
    stem: str  # page stem under source/ and api/, e.g. "data/shakespeare" or "index"

    @property
    def rel_path(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def short(self) -> str:
        return "labnn" if self.stem == "index" else self.name.removeprefix("labnn.")


def modules() -> list[Module]:
    """Every module of the package, the package first, then in path order."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if "__pycache__" in parts or any(p.startswith(".") for p in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        stem = "/".join(parts[1:]) or "index"
        found.append(Module(name, path, stem))
    return sorted(found, key=lambda m: (m.stem != "index", m.stem))


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def notebook_title(path: Path) -> str:
    """The first markdown heading of the notebook, else its file name."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return path.stem
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell.get("source", []))
        match = re.search(r"^#\s+(.+?)\s*$", text, re.MULTILINE)
        if match:
            return match.group(1)
    return path.stem


def repo_blob_url(repo_url: str, rel_path: str) -> str:
    return f"{repo_url.rstrip('/')}/blob/{BRANCH}/{rel_path}"


def colab_url(repo_url: str, rel_path: str) -> str:
    """Colab's URL for a notebook of the GitHub repository `repo_url` (https://github.com/OWNER/NAME)."""
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", repo_url.strip())
    if not match:
        raise ValueError(f"repo_url must look like https://github.com/OWNER/NAME, got {repo_url!r}")
    owner, name = match.groups()
    return f"https://colab.research.google.com/github/{owner}/{name}/blob/{BRANCH}/{rel_path}"
