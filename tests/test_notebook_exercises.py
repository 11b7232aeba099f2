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
import torch

from labnn.exercises.grading import ExerciseFailed, ExerciseNotDone

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


# ---------- issue 29: an odd result gets a sentence about the answer, never a crash in the checker


def _nan(t):
    if not t.is_floating_point() or t.numel() == 0:
        return t
    t = t.detach().clone(memory_format=torch.contiguous_format)
    t.view(-1)[min(3, t.numel() - 1)] = float("nan")
    return t


ODD_RESULTS = {  # what the answer's tensors become -> what the checker must say about it
    "nan": (_nan, "NaN"),
    "float16": (lambda t: t.half() if t.is_floating_point() else t, r"dtype torch\.float16"),
    "float64": (lambda t: t.double() if t.is_floating_point() else t, r"dtype torch\.float64"),
    "int64": (lambda t: t.long(), r"dtype torch\.int64"),
    "complex": (lambda t: t.to(torch.complex64), r"dtype torch\.complex64"),
    "meta": (lambda t: t.to("meta"), "is on the meta device"),
}


# Append.apply must return a view of its buffer: the test's NaN comes in a copy, told so
SAYS_INSTEAD = {("04_kv_sharing_stack", "Append", "nan"): r"returns a new tensor \(a copy\)"}


def _changes(before, after):
    """Whether `after` differs from `before` in dtype, device or values (NaN included)."""
    if before.dtype != after.dtype or before.device != after.device:
        return True
    return not torch.equal(before.isnan(), after.isnan()) if before.is_floating_point() else False


def _odd(fn, mutate, changed):
    """`fn` whose tensor results (alone or in a tuple) pass through `mutate`; `changed`
    collects whether one did change."""

    def each(result):
        if isinstance(result, torch.Tensor):
            out = mutate(result)
            changed.append(_changes(result, out))
            return out
        if isinstance(result, tuple):
            return tuple(each(r) for r in result)
        return result

    if isinstance(fn, type):  # an autograd Function: its forward's result
        class Odd(fn):
            @staticmethod
            def forward(ctx, *args):
                return each(fn.forward(ctx, *args))

        return Odd

    def odd(*args, **kwargs):
        return each(fn(*args, **kwargs))

    odd.__name__ = getattr(fn, "__name__", "odd")
    return odd


@pytest.mark.parametrize("odd", list(ODD_RESULTS))
@pytest.mark.parametrize("path,index", CASES)
def test_an_odd_result_gets_a_sentence_about_the_answer(path, index, odd, capsys):
    nb = nbformat.read(path, as_version=4)
    _, _, solution = next(e for e in exercises(nb) if e[0] == index)
    mutate, says = ODD_RESULTS[odd]
    names = set(re.findall(r"check_\w+\((\w+)", solution))
    says = next((s for (nb_, name, o), s in SAYS_INSTEAD.items()
                 if (nb_, o) == (path.stem, odd) and name in names), says)
    namespace, changed = {}, []
    exec(compile(setup_source(nb), f"{path.name}:setup", "exec"), namespace)
    for name, check in list(namespace.items()):
        if name.startswith("check_") and name != "check_claim":
            namespace[name] = (lambda *fns, _check=check:
                               _check(*(_odd(fn, mutate, changed) for fn in fns)))
    try:
        exec(compile(solution, f"{path.name}:solution{index}", "exec"), namespace)
    except ExerciseFailed as err:
        assert any(changed), f"the unchanged solution failed: {err}"
        assert re.search(says, str(err)), f"expected a sentence saying {says!r}, got: {err}"
    else:
        assert not any(changed), "an answer with a changed result passed"
        assert "✅" in capsys.readouterr().out
