"""The package's plan, kept: sub-packages by concept whose imports run one way, short modules,
short lines (issue 26)."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "labnn"
# Each part of the package and its level: a module may import from its own part and from parts
# of a lower level only. `labnn` itself (seed_everything, fast_mode) sits just above `labnn.nn`,
# whose argument checks it uses.
LEVELS = {"nn": 1, "labnn": 1.5, "data": 2, "transformer": 3, "xl": 3, "feedback": 3,
          "plot": 3, "compiled": 4, "training": 4, "exercises": 5, "cli": 6,
          "__main__": 7}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def part(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "labnn"


def imports(path: Path) -> list[str]:
    """The labnn modules `path` imports (at any depth, lazy imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("labnn"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("labnn")]
    return found


def dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_few_top_level_modules_and_sub_packages_by_concept():
    top = [p.name for p in PACKAGE.glob("*.py")]
    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    assert len(top) <= 8, top
    assert len(packages) >= 4, packages
    parts = {p.removesuffix(".py") for p in top + packages} - {"__init__"}
    assert set(LEVELS) == parts | {"labnn"}, "a new part of the package needs its level here"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: dotted(p))
def test_imports_run_one_way(path):
    me = part(dotted(path)) if dotted(path) != "labnn" else "labnn"
    for target in imports(path):
        other = part(target)
        assert other == me or LEVELS[other] < LEVELS[me], (
            f"{dotted(path)} imports {target}: {other} (level {LEVELS[other]}) is not below "
            f"{me} (level {LEVELS[me]})")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: dotted(p))
def test_modules_and_lines_are_short(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 320, f"{dotted(path)} has {len(lines)} lines"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 100]
    assert not long, f"{dotted(path)}: lines over 100 characters at {long[:5]}"


def inline_math(text: str) -> list[str]:
    """The `$...$` spans of `text`: its `$` signs paired in order within each paragraph
    (display math `$$...$$` and escaped `\\$` left out)."""
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    spans = []
    for paragraph in re.split(r"\n\s*\n", text):
        signs = [m.start() for m in re.finditer(r"(?<!\\)\$", paragraph)]
        spans += [paragraph[a + 1:b] for a, b in zip(signs[::2], signs[1::2])]
    return spans


@pytest.mark.parametrize("path", MODULES, ids=lambda p: dotted(p))
def test_inline_math_is_typeset(path):
    """The annotated and API pages render docstrings and comments with pymdownx.arithmatex,
    which leaves `$...$` as text when a space follows the first `$` or precedes the last
    (`$p = $` showed on two pages)."""
    loose = [s for s in inline_math(path.read_text(encoding="utf-8")) if s != s.strip()]
    assert not loose, f"{dotted(path)}: inline math with a space inside its $...$: {loose}"
