"""The cells that compare a learner's solved exercise with the package's module: they say
whether the two agree, and point back to the exercise's check when not, instead of
raising torch's own assertion (learner trial of stop 40, notebook 02's cell xl-30)."""

from pathlib import Path

import nbformat
import pytest

from test_notebook_exercises import SOLUTION, setup_source

NB02 = Path(__file__).resolve().parents[1] / "notebooks" / "02_transformer_xl.ipynb"


def run_comparison(answer):
    """Notebook 02's setup, `relative_scores` = `answer` (a source text), then cell
    xl-30; what it printed."""
    nb = nbformat.read(NB02, as_version=4)
    cells = {cell.get("id"): cell for cell in nb.cells}
    printed = []
    namespace = {"print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
    exec(setup_source(nb), namespace)
    exec(answer, namespace)
    exec(cells["xl-30"].source, namespace)
    return "\n".join(printed)


def solution():
    nb = nbformat.read(NB02, as_version=4)
    text = next(cell.source for cell in nb.cells if cell.get("id") == "xl-28")
    return SOLUTION.search(text).group(1).replace("check_relative_scores(relative_scores)", "")


RETURN = "return (content + position) / math.sqrt(q.size(-1))"


@pytest.mark.parametrize("wrong, said", [
    ("return content + position", "differs from RelativeMultiHeadAttention.scores by up to"),
    ("return ((content + position) / math.sqrt(q.size(-1)))[..., :-1]",
     "yours has shape [2, 2, 3, 4], the module's [2, 2, 3, 5]"),
])
def test_the_comparison_cell_points_back_to_the_check(wrong, said):
    right = solution()
    assert run_comparison(right) == "your relative_scores matches RelativeMultiHeadAttention.scores"
    assert RETURN in right
    printed = run_comparison(right.replace(RETURN, wrong))
    assert said in printed and "Exercise 5's check above" in printed
