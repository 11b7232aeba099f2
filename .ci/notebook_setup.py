#!/usr/bin/env python3
"""The notebooks' Colab badge and install lines, derived from the project's home in pyproject.toml.

    python .ci/notebook_setup.py            list what disagrees with [project.urls] Repository (exit 1)
    python .ci/notebook_setup.py --write    rewrite each notebook's badge and install lines to agree

The one setting is `[project.urls] Repository` (https://github.com/OWNER/NAME). From it:

* the badge in each notebook's first markdown cell links to Colab's copy of that notebook
  (`docs/hooks/layout.colab_url`, the same function the site's "Open in Colab" bar uses);
* the first lines of each notebook's `setup`-tagged cell install labnn from that repository when it is
  missing (on Colab), with nothing but labnn's own dependencies, and pin the torch already there so that
  pip never replaces it (Colab's CUDA build) with another build or version;
* the site's `repo_url` in mkdocs.yml must be the same URL (checked here, not written).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import layout  # noqa: E402  (the site's own URL helpers)

BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE = re.compile(r"\[!\[Open In Colab\]\(" + re.escape(BADGE_IMAGE) + r"\)\]\(([^)\s]*)\)")
SETUP_TAG = "setup"
PIP_LINE = re.compile(r"^\s*%pip install .*$", re.MULTILINE)

INSTALL_LINES = '''\
import importlib.metadata
import importlib.util

if importlib.util.find_spec("labnn") is None:  # e.g. on Colab
    # labnn and its dependencies only; the torch already here
    # (Colab's CUDA build) is kept as it is
    has_torch = importlib.util.find_spec("torch") is not None
    version = importlib.metadata.version("torch") if has_torch else None
    keep_torch = f"torch=={version}" if has_torch else ""
    %pip install -q "labnn @ git+REPOSITORY" {keep_torch}
'''


def repository(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """`[project.urls] Repository` of pyproject.toml: https://github.com/OWNER/NAME, no trailing slash."""
    urls = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"].get("urls", {})
    url = urls.get("Repository")
    if not isinstance(url, str) or not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{pyproject}: [project.urls] Repository must be https://github.com/OWNER/NAME, "
                         f"got {url!r}")
    return url


def mkdocs_repo_url(mkdocs: Path = ROOT / "mkdocs.yml") -> str | None:
    """The site's `repo_url` (read as text: mkdocs.yml may hold tags a plain YAML loader rejects)."""
    match = re.search(r"^repo_url:\s*[\"']?([^\s\"'#]+)", mkdocs.read_text(encoding="utf-8"), re.MULTILINE)
    return match.group(1) if match else None


def install_lines(repo: str) -> str:
    """The install block every setup cell starts with (ends with a newline)."""
    return INSTALL_LINES.replace("REPOSITORY", repo)


def colab_url(repo: str, notebook: Path) -> str:
    return layout.colab_url(repo, f"notebooks/{notebook.name}")


def _source(cell) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def _setup_cell(nb):
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and SETUP_TAG in c["metadata"].get("tags", [])]
    return cells[0] if len(cells) == 1 else None


def _starts_with_install_lines(source: str, repo: str) -> bool:
    block = install_lines(repo).rstrip("\n")
    return source == block or source.startswith(block + "\n")


def _first_markdown(nb):
    return next((c for c in nb["cells"] if c["cell_type"] == "markdown"), None)


def problems(notebook: Path, repo: str) -> list[str]:
    """What in `notebook` disagrees with `repo`: its badge and its install lines."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    name = notebook.name
    found = []
    want_badge = colab_url(repo, notebook)
    first = _first_markdown(nb)
    badges = BADGE.findall(_source(first)) if first else []
    if badges != [want_badge]:
        found.append(f"{name}: first markdown cell's Colab badge links to {badges or 'nothing'}, "
                     f"expected [{want_badge}]")
    setup = _setup_cell(nb)
    if setup is None:
        found.append(f"{name}: expected exactly one code cell tagged {SETUP_TAG!r}")
    elif not _starts_with_install_lines(_source(setup), repo):
        found.append(f"{name}: the setup cell does not start with the install lines of "
                     f".ci/notebook_setup.py (for {repo})")
    return found


def write(notebook: Path, repo: str) -> bool:
    """Rewrite the badge and the install lines of `notebook` to agree with `repo`; True if it changed."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    before = nbformat.writes(nb)
    badge = f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(repo, notebook)})"
    first = _first_markdown(nb)
    if first is None:
        raise ValueError(f"{notebook}: no markdown cell to hold the Colab badge")
    text = _source(first)
    if BADGE.search(text):
        text = BADGE.sub(lambda _: badge, text, count=1)
    else:  # after the title line
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n{badge}\n{rest}" if rest else f"{head}\n\n{badge}"
    first["source"] = text
    setup = _setup_cell(nb)
    if setup is None:
        raise ValueError(f"{notebook}: expected exactly one code cell tagged {SETUP_TAG!r}")
    text = _source(setup)
    pip = PIP_LINE.search(text)
    rest = text[pip.end():].lstrip("\n") if pip else text
    setup["source"] = install_lines(repo).rstrip("\n") + ("\n\n" + rest if rest else "")
    after = nbformat.writes(nb)
    if after != before:
        notebook.write_text(after + "\n", encoding="utf-8")
    return after != before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the notebooks to agree")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args()
    repo = repository()
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.write:
        for notebook in notebooks:
            print(f"{notebook.name}: {'rewritten' if write(notebook, repo) else 'already agrees'}")
        return 0
    found = [p for notebook in notebooks for p in problems(notebook, repo)]
    site = mkdocs_repo_url()
    if site != repo:
        found.append(f"mkdocs.yml: repo_url is {site}, expected {repo} ([project.urls] Repository)")
    print("\n".join(found) or f"all agree with {repo}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
