"""Setting up where learners are: a fresh machine (`make test` and its Chromium), Colab, other torch versions.

* `.ci/ensure-chromium`, the first step of `make test`, run with a fake PATH: Chromium present, absent with
  no apt-get, absent without root, absent with an apt-get that works or fails;
* `make test` without Chromium and without apt-get stops at once, before the venv;
* `make test-torch TORCH=torch==X` works in `.venv-torch-X`, never in `.venv`, and runs the notebooks too;
* the project's home, `[project.urls] Repository`, agrees with mkdocs.yml's `repo_url`, every notebook's
  Colab badge and its install lines (`.ci/notebook_setup.py --write` rewrites the notebooks);
* the install lines, run as IPython runs them in throwaway environments with fake installed packages and
  a local folder of fake wheels (`pip install --dry-run --report`, offline): on a Colab-like machine they
  install labnn alone and never replace its CUDA torch; on a bare one, labnn's own dependencies only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
ENSURE_CHROMIUM = ROOT / ".ci" / "ensure-chromium"
BASH = shutil.which("bash") or "/bin/bash"


def _load_notebook_setup():
    spec = importlib.util.spec_from_file_location("notebook_setup", ROOT / ".ci" / "notebook_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup = _load_notebook_setup()
REPO = setup.repository()


# ---------------------------------------------------------------- Chromium for `make test`

def _fake_bin(tmp_path: Path, *, uid: int, apt: str | None) -> Path:
    """A PATH folder with `id` (printing `uid`) and, unless `apt` is None, an `apt-get` running `apt`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text(f"#!{BASH}\necho {uid}\n")
    if apt is not None:
        log = tmp_path / "apt.log"
        (bin_dir / "apt-get").write_text(f'#!{BASH}\necho "$*" >> {log}\n{apt}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def _ensure_chromium(tmp_path: Path, bin_dir: Path, chromium: Path) -> subprocess.CompletedProcess:
    env = {"PATH": str(bin_dir), "LABNN_CHROMIUM": str(chromium), "HOME": str(tmp_path)}
    return subprocess.run([BASH, str(ENSURE_CHROMIUM)], env=env, capture_output=True, text=True, timeout=30)


def _apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_chromium_present_installs_nothing(tmp_path):
    chromium = tmp_path / "chromium"
    chromium.write_text(f"#!{BASH}\n")
    chromium.chmod(0o755)
    bin_dir = _fake_bin(tmp_path, uid=0, apt="exit 0")
    done = _ensure_chromium(tmp_path, bin_dir, chromium)
    assert done.returncode == 0, done.stderr
    assert _apt_calls(tmp_path) == []


def test_chromium_missing_without_apt_stops_with_what_to_do(tmp_path):
    chromium = tmp_path / "chromium"
    start = time.perf_counter()
    done = _ensure_chromium(tmp_path, _fake_bin(tmp_path, uid=0, apt=None), chromium)
    assert done.returncode == 1
    assert time.perf_counter() - start < 5
    assert f"no Chromium at {chromium}" in done.stderr
    assert "LABNN_CHROMIUM=/path/to/chromium" in done.stderr


def test_chromium_missing_without_root_names_the_command(tmp_path):
    done = _ensure_chromium(tmp_path, _fake_bin(tmp_path, uid=1000, apt="exit 0"), tmp_path / "chromium")
    assert done.returncode == 1
    assert "Run: sudo apt-get install -y chromium" in done.stderr
    assert _apt_calls(tmp_path) == []  # nothing tried without root


def test_chromium_missing_as_root_is_installed_with_apt(tmp_path):
    chromium = tmp_path / "chromium"
    # The fake apt-get "installs" Chromium where the script looks for it.
    apt = f'if [ "$*" != "${{*#*install}}" ]; then printf "#!{BASH}\\n" > {chromium}; {shutil.which("chmod")} +x {chromium}; fi'
    done = _ensure_chromium(tmp_path, _fake_bin(tmp_path, uid=0, apt=apt), chromium)
    assert done.returncode == 0, done.stderr
    calls = _apt_calls(tmp_path)
    assert len(calls) == 2 and calls[0].endswith("update -q"), calls
    assert calls[1].endswith("install -y -q chromium"), calls
    assert "DPkg::Lock::Timeout" in calls[1]  # waits for another apt rather than failing on its lock


def test_chromium_install_failing_stops_with_the_command(tmp_path):
    apt = 'case "$*" in *install*) exit 100;; esac'
    done = _ensure_chromium(tmp_path, _fake_bin(tmp_path, uid=0, apt=apt), tmp_path / "chromium")
    assert done.returncode == 1
    assert "apt-get install failed. Run: apt-get install -y chromium" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_without_chromium_stops_before_the_venv(tmp_path):
    venv = tmp_path / "venv"
    env = {"PATH": str(_fake_bin(tmp_path, uid=0, apt=None)), "HOME": str(tmp_path)}
    start = time.perf_counter()
    done = subprocess.run([shutil.which("make"), "-C", str(ROOT), "test", f"VENV={venv}",
                           f"LABNN_CHROMIUM={tmp_path / 'chromium'}"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert time.perf_counter() - start < 10
    assert "no Chromium at" in done.stderr, done.stderr
    assert not venv.exists()  # stopped before the long steps


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_torch_uses_its_own_venv():
    done = subprocess.run([shutil.which("make"), "-n", "-C", str(ROOT), "test-torch", "TORCH=torch==2.2.2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert re.search(r'^\.venv-torch-2\.2\.2/bin/python -m pip install -q +"torch==2\.2\.2"$', done.stdout, re.M)
    assert ".venv-torch-2.2.2/bin/pytest" in done.stdout
    assert ".venv/" not in done.stdout
    # the notebooks too, as `make test` runs them: what a learner runs on that torch
    assert "notebooks/01_attention.ipynb" in done.stdout and "--nbval-lax" in done.stdout
    assert "LABNN_DEVICE=audit LABNN_FAST=1" in done.stdout


def test_ci_run_leaves_the_browser_to_make_test():
    text = (ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in text and "make test" in text


# ---------------------------------------------------------------- one home: [project.urls] Repository

def test_site_repo_url_is_the_project_home():
    assert setup.mkdocs_repo_url() == REPO, "mkdocs.yml repo_url must equal [project.urls] Repository"


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_badge_and_install_lines_follow_the_project_home(notebook):
    assert setup.problems(notebook, REPO) == [], "run: python .ci/notebook_setup.py --write"


def test_notebook_setup_rewrites_badge_and_install_lines(tmp_path):
    fork = "https://github.com/someone/labnn-fork"
    source = ROOT / "notebooks" / "01_attention.ipynb"
    notebook = tmp_path / source.name
    shutil.copy(source, notebook)
    assert setup.write(notebook, fork)
    assert setup.problems(notebook, fork) == []
    assert len(setup.problems(notebook, REPO)) == 2  # badge and install lines name the fork now
    text = notebook.read_text()
    assert f"colab.research.google.com/github/someone/labnn-fork/blob/main/notebooks/{source.name}" in text
    assert not setup.write(notebook, fork)  # a second run changes nothing
    # Everything after the install lines is kept: the cells' sources, minus the two rewritten lines.
    before = json.loads(source.read_text())["cells"]
    after = json.loads(text)["cells"]
    assert [c["id"] for c in before] == [c["id"] for c in after]
    assert "".join(after[1]["source"]).endswith("".join(before[1]["source"]).split("%pip install", 1)[1]
                                                .split("\n", 1)[1])


def test_compatibility_page_shows_the_install_lines_the_notebooks_use():
    page = (ROOT / "docs" / "compatibility.md").read_text()
    assert f"```python\n{setup.install_lines(REPO)}```" in page


def test_repository_must_be_a_github_url(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "https://gitlab.com/a/b"\n')
    with pytest.raises(ValueError, match=r"Repository must be https://github.com/OWNER/NAME, got 'https://gitlab"):
        setup.repository(pyproject)


# ---------------------------------------------------------------- the install lines, as on Colab

def _write_metadata(folder: Path, name: str, version: str, requires: list[str]) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("fake\n")
    (info / "RECORD").write_text("")


def _environment(tmp_path: Path, installed: dict[str, str]) -> Path:
    """A venv (no pip) holding fake packages `installed` {name: version}; returns its python."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    for name, version in installed.items():
        _write_metadata(site, name, version, [])
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return venv / "bin" / "python"


def _wheelhouse(tmp_path: Path, dists: dict[str, str]) -> Path:
    """Fake wheels: labnn (its dependencies and extras read from pyproject.toml) and `dists` {name: version}."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requires = list(project["dependencies"])
    for extra, reqs in project.get("optional-dependencies", {}).items():
        # an extra's own marker, if any, joined to the extra's (one ';' per requirement)
        requires += [f'{r.split(";")[0]}; ({r.split(";")[1].strip()}) and extra == "{extra}"'
                     if ";" in r else f'{r}; extra == "{extra}"' for r in reqs]
    folder = tmp_path / "wheels"
    folder.mkdir()
    for name, version, reqs in [("labnn", project["version"], requires)] + [(n, v, []) for n, v in dists.items()]:
        with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
            info = f"{name}-{version}.dist-info"
            meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
            meta += [f"Requires-Dist: {r}" for r in reqs]
            meta += [f"Provides-Extra: {e}" for e in project.get("optional-dependencies", {}) if name == "labnn"]
            whl.writestr(f"{info}/METADATA", "\n".join(meta) + "\n")
            whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            whl.writestr(f"{info}/RECORD", "")
    return folder


# Runs a cell in the environment's own Python, as IPython would, recording the expanded `%pip` line.
RUN_CELL = """
import json, string, sys
code = sys.stdin.read()
cell = {"__name__": "__main__"}
class Shell:
    def run_line_magic(self, magic, line, _stack_depth=1):
        print(json.dumps([magic, string.Formatter().vformat(line, (), cell)]))
cell["get_ipython"] = Shell
exec(code, cell)
"""


def _pip_line(python: Path, cell: str) -> list[str]:
    """The arguments the cell's `%pip` line gives pip in that environment (IPython's transformation)."""
    import shlex

    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(cell)
    # Not run from the checkout, nor with a PYTHONPATH that holds it (a GPU run's): `python -c`
    # would find ./labnn and skip the install.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", RUN_CELL], input=code, capture_output=True, text=True,
                          check=True, timeout=60, cwd=python.parents[2], env=env)
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert [magic for magic, _ in calls] == ["pip"], done.stdout
    return shlex.split(calls[0][1])


def _would_install(python: Path, wheels: Path, args: list[str]) -> tuple[dict[str, str], str]:
    """{name: version} that `pip install ARGS` would install into `python`'s environment, and pip's stderr."""
    assert args[:2] == ["install", "-q"], args
    requirement = f"labnn @ git+{REPO}"
    assert requirement in args, f"the install lines must install {requirement!r}: {args}"
    args = ["labnn" if a == requirement else a for a in args[2:]]  # the local fake of this checkout
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run",
                           "--quiet", "--report", "-", "--no-index", "--find-links", str(wheels), *args],
                          env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {}, done.stderr
    report = json.loads(done.stdout)
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in report["install"]}, done.stderr


COLAB = {"torch": "2.9.0+cu126", "numpy": "2.0.2", "matplotlib": "3.8.0", "tqdm": "4.66.5"}
PYPI = {"torch": "2.13.0", "numpy": "2.4.0", "matplotlib": "3.10.0", "tqdm": "4.67.1"}


def test_install_lines_on_colab_install_labnn_alone(tmp_path):
    python = _environment(tmp_path, COLAB)
    args = _pip_line(python, setup.install_lines(REPO))
    assert "torch==2.9.0+cu126" in args  # the torch already there is pinned
    install, stderr = _would_install(python, _wheelhouse(tmp_path, PYPI), args)
    assert install == {"labnn": "0.1.0"}, stderr


def test_install_lines_never_replace_an_older_cuda_torch(tmp_path):
    python = _environment(tmp_path, COLAB | {"torch": "2.5.1+cu121"})  # below labnn's floor
    wheels = _wheelhouse(tmp_path, PYPI)
    args = _pip_line(python, setup.install_lines(REPO))
    install, stderr = _would_install(python, wheels, args)
    assert install == {} and "torch==2.5.1+cu121" in stderr and "conflict" in stderr.lower(), stderr
    # The check sees a replacement when there is one: without the pin pip would take PyPI's torch.
    unpinned = [a for a in args if not a.startswith("torch==")]
    assert _would_install(python, wheels, unpinned)[0] == {"labnn": "0.1.0", "torch": "2.13.0"}


def test_install_lines_on_a_bare_jupyter_install_only_what_labnn_needs(tmp_path):
    python = _environment(tmp_path, {})
    wheels = _wheelhouse(tmp_path, PYPI | {"pytest": "8.4.0", "mkdocs": "1.6.1", "jupyterlab": "4.4.0"})
    args = _pip_line(python, setup.install_lines(REPO))
    assert not any(a.startswith("torch") for a in args)
    install, stderr = _would_install(python, wheels, args)
    assert install == {"labnn": "0.1.0"} | PYPI, stderr  # no test, docs or lab extras
