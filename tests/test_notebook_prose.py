"""Every `labnn` name a notebook tells the learner to use exists.

A learner copies what the prose, the hints and the solutions say: "use `relative_shift` from `labnn.xl`",
`from labnn.attention import causal_mask`, "`labnn.xl.TransformerXL` does exactly this". Each such name is
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
# "`relative_shift` from `labnn.xl`", "`stream_batch` in `labnn.data`"
NAME_FROM = re.compile(r"`(\w+)`\s+(?:from|in)\s+`(labnn(?:\.\w+)*)`")
# "from `labnn.xl` import `update_memory`"
FROM_IMPORT = re.compile(r"from\s+`?(labnn(?:\.\w+)*)`?\s+import\s+`(\w+)`")
# "`labnn.xl.TransformerXL`", "`labnn.train.TrainConfig(stream=True)`", "labnn.data.order_task"
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
        nbformat.v4.new_markdown_cell("Use `relative_shift` from `labnn.xl`, and `labnn.xl.TransformerXL`.\n"
                                      "```python\nfrom labnn.attention import causal_mask, nothing_here\n```"),
        nbformat.v4.new_code_cell("from labnn.xl import segment_mask  # see labnn.train.TrainConfig"),
    ]
    found = {(module, name) for _, module, name in references(nb)}
    assert found >= {("labnn.xl", "relative_shift"), ("labnn.xl.TransformerXL", None),
                     ("labnn.attention", "causal_mask"), ("labnn.attention", "nothing_here"),
                     ("labnn.xl", "segment_mask"), ("labnn.train.TrainConfig", None)}
    with pytest.raises(AttributeError):
        resolve("labnn.attention", "nothing_here")
    assert resolve("labnn.xl.TransformerXL", None).__name__ == "TransformerXL"
