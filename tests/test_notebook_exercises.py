"""Every exercise in every notebook: unsolved it fails cleanly; with its collapsible solution it passes.

nbval runs the notebooks as a learner first sees them (exercise cells raise `ExerciseNotDone`). This test
runs each notebook's `setup` cells, then each exercise's solution (the code block of the
`<details><summary>Solution</summary>` block in the markdown cell right after it) in a fresh namespace, and
asserts the checker accepts it. That cell must first offer three tiered hints, in order: a nudge, the idea,
the code; the stub must raise a bare `NotImplementedError()` (its message would be shown to the learner).
"""

import re
from pathlib import Path

import nbformat
import pytest

from labnn.exercises.checking import ExerciseNotDone

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
SOLUTION = re.compile(r"<details>\s*<summary>\s*Solution\s*</summary>.*?```python\n(.*?)```", re.S)
HINTS = ["Hint 1 — a nudge", "Hint 2 — the idea", "Hint 3 — the code"]
SUMMARY = re.compile(r"<details>\s*<summary>\s*(.*?)\s*</summary>", re.S)


def tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def setup_source(nb):
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code" and "setup" in tags(cell):
            # IPython magics (the %pip install fallback) cannot run in plain exec: labnn is installed here
            lines += [re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in cell.source.splitlines()]
    return "\n".join(lines)


def hints_cell(nb, i):
    after = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
    return after.source if after is not None and after.cell_type == "markdown" else ""


def exercises(nb):
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "exercise" in tags(cell):
            match = SOLUTION.search(hints_cell(nb, i))
            yield i, cell, match.group(1) if match else None


CASES = [
    pytest.param(path, i, id=f"{path.stem}-cell{i}")
    for path in NOTEBOOKS
    for i, _, _ in exercises(nbformat.read(path, as_version=4))
]


def test_every_notebook_has_at_least_four_exercises():
    for path in NOTEBOOKS:
        n = len(list(exercises(nbformat.read(path, as_version=4))))
        assert n >= 4, f"{path.name} has {n} exercises, expected at least 4"


@pytest.mark.parametrize("path,index", CASES)
def test_exercise_fails_cleanly_unsolved_and_passes_solved(path, index, capsys):
    nb = nbformat.read(path, as_version=4)
    _, cell, solution = next(e for e in exercises(nb) if e[0] == index)
    assert {"exercise", "raises-exception"} <= tags(cell), "exercise cells are tagged exercise + raises-exception"
    assert solution is not None, "an exercise cell must be followed by a <details> solution with a python block"
    setup = setup_source(nb)

    namespace = {}
    exec(compile(setup, f"{path.name}:setup", "exec"), namespace)
    with pytest.raises(ExerciseNotDone, match=r"not solved yet .* stuck\? open Hint 1 below the cell"):
        exec(compile(cell.source, f"{path.name}:cell{index}", "exec"), namespace)

    namespace = {}
    exec(compile(setup, f"{path.name}:setup", "exec"), namespace)
    exec(compile(solution, f"{path.name}:solution{index}", "exec"), namespace)
    assert "✅" in capsys.readouterr().out, "the checker should report success for the solution"


@pytest.mark.parametrize("path,index", CASES)
def test_exercise_offers_three_tiered_hints_before_the_solution(path, index):
    nb = nbformat.read(path, as_version=4)
    summaries = SUMMARY.findall(hints_cell(nb, index))
    assert summaries == HINTS + ["Solution"], (
        f"the cell after the exercise should hold, in order, <details> blocks {HINTS + ['Solution']}, "
        f"got {summaries}")


@pytest.mark.parametrize("path,index", CASES)
def test_exercise_stub_gives_nothing_away(path, index):
    nb = nbformat.read(path, as_version=4)
    cell = nb.cells[index]
    stubs = re.findall(r"raise NotImplementedError\((.*?)\)", cell.source, re.S)
    assert stubs, "an exercise stub raises NotImplementedError()"
    assert all(not arg.strip() for arg in stubs), (
        f"the stub should raise a bare NotImplementedError(): its text would be the solution, not a hint "
        f"(got {stubs})")
