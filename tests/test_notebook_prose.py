"""What a notebook's prose tells the learner holds: every `labnn` name it mentions exists, its hints climb
from an idea to the code without handing the answer over early, and no cell the learner runs shows an
exercise's answer right below the exercise.

Names. A learner copies what the prose, the hints and the solutions say: "use `relative_shift` from `labnn.xl.model`",
`from labnn.nn.attention import causal_mask`, "`labnn.xl.model.TransformerXL` does exactly this". Each such name is
collected from every cell of every notebook (markdown prose, the code blocks of its hints and solutions, and
the code cells) and resolved by importing it, so that an instruction that would end in an ImportError or an
AttributeError fails here instead.
"""

import ast
import importlib
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

FENCED = re.compile(r"```python\n(.*?)```", re.S)
# "`relative_shift` from `labnn.xl.model`", "`stream_batch` in `labnn.data`"
NAME_FROM = re.compile(r"`(\w+)`\s+(?:from|in)\s+`(labnn(?:\.\w+)*)`")
# "from `labnn.xl.model` import `update_memory`"
FROM_IMPORT = re.compile(r"from\s+`?(labnn(?:\.\w+)*)`?\s+import\s+`(\w+)`")
# "`labnn.xl.model.TransformerXL`", "`labnn.training.trainer.TrainConfig(stream=True)`", "labnn.data.order_task"
DOTTED = re.compile(r"(?<![\w./])(labnn(?:\.\w+)+)")


def python_imports(source):
    """(module, name) for every `from labnn... import name` and (module, None) for `import labnn...`."""
    code = "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "labnn":
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "labnn":
                    yield alias.name, None


def references(nb):
    """Every (where, module, attribute path) a notebook names."""
    for i, cell in enumerate(nb.cells):
        where = f"cell {i} ({cell.cell_type}, id {cell.get('id')})"
        blocks = [cell.source] if cell.cell_type == "code" else FENCED.findall(cell.source)
        for block in blocks:
            for module, name in python_imports(block):
                yield where, module, name
        text = cell.source
        if cell.cell_type == "code":  # comments and strings of code cells are prose too
            text = "\n".join(re.findall(r"#.*$|\"[^\"\n]*\"", text, re.M))
        for name, module in NAME_FROM.findall(text):
            yield where, module, name
        for module, name in FROM_IMPORT.findall(text):
            yield where, module, name
        for dotted in DOTTED.findall(text):
            yield where, dotted, None


def resolve(module, name):
    """Import `module` (or its longest importable prefix) and look the rest up as attributes."""
    parts = module.split(".") + ([name] if name else [])
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError names what is missing
        return obj
    raise ModuleNotFoundError(module)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_labnn_name_a_notebook_mentions_exists(path):
    nb = nbformat.read(path, as_version=4)
    missing = []
    for where, module, name in references(nb):
        try:
            resolve(module, name)
        except (ImportError, AttributeError) as err:
            target = f"{name} from {module}" if name else module
            missing.append(f"{where}: {target} ({type(err).__name__}: {err})")
    assert not missing, f"{path.name} tells the learner to use names that do not exist:\n" + "\n".join(missing)


def test_the_collector_finds_the_forms_prose_uses():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Use `relative_shift` from `labnn.xl.model`, and `labnn.xl.model.TransformerXL`.\n"
                                      "```python\nfrom labnn.nn.attention import causal_mask, nothing_here\n```"),
        nbformat.v4.new_code_cell("from labnn.xl.model import segment_mask  # see labnn.training.trainer.TrainConfig"),
    ]
    found = {(module, name) for _, module, name in references(nb)}
    assert found >= {("labnn.xl.model", "relative_shift"), ("labnn.xl.model.TransformerXL", None),
                     ("labnn.nn.attention", "causal_mask"), ("labnn.nn.attention", "nothing_here"),
                     ("labnn.xl.model", "segment_mask"), ("labnn.training.trainer.TrainConfig", None)}
    with pytest.raises(AttributeError):
        resolve("labnn.nn.attention", "nothing_here")
    assert resolve("labnn.xl.model.TransformerXL", None).__name__ == "TransformerXL"


# ---------------------------------------------------------------------------- hints that climb

HINT_BLOCK = re.compile(r"<summary>\s*(Hint (\d)[^<]*|Solution)\s*</summary>(.*?)</details>", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
OPERATIONS = (ast.Call, ast.BinOp, ast.Compare, ast.Subscript, ast.UnaryOp, ast.BoolOp)


def hint_tiers(nb):
    """(where, {1: text, 2: text, 3: text, 'solution': text}) for every cell of hints."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or "<summary>Hint" not in cell.source:
            continue
        tiers = {}
        for summary, number, body in HINT_BLOCK.findall(cell.source):
            tiers[int(number) if number else "solution"] = body
        yield f"cell {i} (id {cell.get('id')})", tiers


def canonical(code):
    """`code` without blanks, the way `ast.unparse` writes it when it parses."""
    try:
        code = ast.unparse(ast.parse(code.strip()))
    except SyntaxError:
        pass
    return re.sub(r"\s+", "", code.replace('"', "'"))


class _Anonymous(ast.NodeTransformer):
    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)


def shape_of(code):
    """`code` canonical, every variable called `_`: `torch.where(mask, v[:, None], IGNORE)` and
    `torch.where(after, values[:, None], IGNORE)` are the same line of code."""
    try:
        return canonical(ast.unparse(_Anonymous().visit(ast.parse(code.strip()))))
    except SyntaxError:
        return canonical(code)


def operations(node):
    """How many operations `node` holds (a negative number such as `-1` is not one)."""
    return sum(isinstance(n, OPERATIONS) and not (isinstance(n, ast.UnaryOp) and isinstance(n.operand, ast.Constant))
               for n in ast.walk(node))


def solution_pieces(solution):
    """The expressions that make up the answer: every expression of two operations or more (calls,
    arithmetic, comparisons, indexing) in the bodies of the functions and classes the solution defines,
    written by `shape_of`."""
    tree = ast.parse(FENCED.findall(solution)[0])
    pieces = set()
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            for node in ast.walk(top):
                if isinstance(node, OPERATIONS) and operations(node) >= 2:
                    pieces.add(shape_of(ast.unparse(node)))
    return pieces


def api_names(code):
    """The functions and attributes `code` uses (`softmax`, `masked_fill`, `where`, ...)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(re.findall(r"\.(\w+)", code))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def tier_problems(tiers):
    """What is wrong with one exercise's tiers: a nudge or an idea that holds a line of
    code or an expression of the solution, or a Hint 3 that shows less code than Hint 2
    names."""
    problems = []
    pieces = solution_pieces(tiers["solution"])
    for tier in (1, 2):
        for span in SPAN.findall(tiers[tier]) + FENCED.findall(tiers[tier]):
            try:
                statements = ast.parse(span.strip()).body
            except SyntaxError:
                statements = []
            # `mem_len = 0` in a sentence is a case, not code
            if any(isinstance(s, (ast.Assign, ast.AugAssign, ast.Return)) and not isinstance(s.value, ast.Constant)
                   for s in statements):
                problems.append(f"Hint {tier} writes a statement, `{span}`: lines of code are for Hint 3")
            given = sorted(p for p in pieces if p in shape_of(span))
            if given:
                problems.append(f"Hint {tier} gives `{span}`, which holds the solution's {given[0]}")
    code_3 = "\n".join(FENCED.findall(tiers[3]))
    if "..." not in code_3:
        problems.append("Hint 3 is not a skeleton with blanks (`...`)")
    named_2 = {word for span in SPAN.findall(tiers[2]) for word in re.findall(r"[A-Za-z_]\w*", span)}
    missing = sorted((named_2 & api_names(FENCED.findall(tiers["solution"])[0])) - set(re.findall(r"\w+", code_3)))
    if missing:
        problems.append(f"Hint 2 names {missing}, which Hint 3's code does not show: Hint 3 must show more")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_hints_climb_an_idea_then_the_shape_then_the_code(path):
    """Hint 1 nudges, Hint 2 gives the idea in words, names and shapes (no line of code, no expression of
    the solution), Hint 3 the code with blanks, using at least what Hint 2 named; the Solution the rest."""
    nb = nbformat.read(path, as_version=4)
    found = [(where, problem) for where, tiers in hint_tiers(nb) for problem in tier_problems(tiers)]
    assert not found, f"{path.name}:\n" + "\n".join(f"{where}: {p}" for where, p in found)


def test_the_tier_rule_catches_an_answer_in_hint_2():
    solution = "```python\ndef f(q, k):\n    return (q @ k.transpose(-2, -1)).softmax(dim=-1)\n```"
    good = {1: "Scores, then a softmax.", 2: "Multiply `q` by the transpose of `k`; `softmax` over the keys.",
            3: "```python\nreturn (q @ k.transpose(..., ...)).softmax(dim=...)\n```", "solution": solution}
    assert tier_problems(good) == []
    assert tier_problems({**good, 2: "`q @ k.transpose(-2, -1)`, then `softmax`."})
    assert tier_problems({**good, 2: "`scores = q @ k.mT`"})
    assert tier_problems({**good, 3: "```python\nreturn ...\n```"})  # shows less than Hint 2 named
    assert tier_problems({**good, 3: "```python\nreturn (q @ k.transpose(-2, -1)).softmax(dim=-1)\n```"})


# ---------------------------------------------------------------------------- answers stay in the solutions

HEADING = re.compile(r"^#{1,6} ", re.M)


def answer_cells(nb):
    """(hints cell index, exercise number, index of a code cell holding that exercise's answer): the
    solution's body, statement by statement, is in the cell."""
    code = {i: canonical(c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    for h, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or "<summary>Solution" not in cell.source:
            continue
        before = "\n".join(c.source for c in nb.cells[max(0, h - 3) : h] if c.cell_type == "markdown")
        number = (re.findall(r"Exercise (\d+)", before) or ["?"])[-1]
        solution = HINT_BLOCK.findall(cell.source)[-1][2]
        for top in ast.parse(FENCED.findall(solution)[0]).body:
            if not isinstance(top, ast.FunctionDef):
                continue
            body = [s for s in top.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            lines = [canonical(ast.unparse(s)) for s in body]
            for i, source in code.items():
                if lines and all(line in source for line in lines):
                    yield h, number, i


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_code_cell_gives_an_exercise_answer_away(path):
    """The learner runs the cells below an exercise: none of them may show its answer. A code cell that
    needs the answer comes at the earliest two headings further on, and the markdown cell right before it
    says that it holds the answer of that exercise (solve it first)."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for h, number, i in answer_cells(nb):
        headings = [j for j in range(h + 1, len(nb.cells))
                    if nb.cells[j].cell_type == "markdown" and HEADING.search(nb.cells[j].source)]
        intro = nb.cells[i - 1].source if nb.cells[i - 1].cell_type == "markdown" else ""
        if len(headings) < 2 or i < headings[1]:
            found.append(f"cell {i} shows the answer of Exercise {number} right below it (hints in cell {h})")
        elif f"Exercise {number}" not in intro or "answer" not in intro:
            found.append(f"cell {i} holds the answer of Exercise {number}; the cell before it does not say so")
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_the_answer_rule_catches_a_cell_right_below():
    hints = ("<details><summary>Hint 1 — a nudge</summary>\n\nx\n</details>\n"
             "<details><summary>Solution</summary>\n\n```python\ndef f(x):\n    return x.sum(0) * 2\n```\n</details>")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("**Exercise 1.** Sum."), nbformat.v4.new_code_cell("def f(x): ..."),
                nbformat.v4.new_markdown_cell(hints), nbformat.v4.new_markdown_cell("## Next"),
                nbformat.v4.new_code_cell("def g(x):\n    return x.sum(0) * 2")]
    assert [(h, n, i) for h, n, i in answer_cells(nb)] == [(2, "1", 4)]


# a markdown link whose target is neither a web address nor an anchor of the same notebook
LOCAL_LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_to_the_site_are_web_addresses(path):
    """A notebook opened in Colab, Jupyter or on GitHub has no docs folder beside it: a link
    such as `../source/data/programs.md` (which only the site build rewrites) leads nowhere
    there. Notebook 03 had one."""
    nb = nbformat.read(path, as_version=4)
    local = [(cell.get("id"), target) for cell in nb.cells if cell.cell_type == "markdown"
             for target in LOCAL_LINK.findall(cell.source)]
    assert not local, f"{path.name}: link to https://labnn.github.io/labnn/... instead: {local}"
