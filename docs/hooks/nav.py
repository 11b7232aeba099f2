"""Build the navigation from what exists: the notebooks and the package's folders.

Notebooks come in file order (`01_…` to `05_…`). The source and API tabs follow the package's
folders: the package's overview, then one entry per sub-package or top module, a sub-package as a
section titled by the first line of its `__init__` docstring (its own page first, then its modules
and sub-packages; in a section within a section, a module goes by its own name). Within a
sub-package, the modules its `__init__` docstring names come first, in the order it names them
(its "Read in this order"). Otherwise the order follows the notebook that first imports them
(`labnn.xl`, `from labnn import plot`), what no notebook imports (the command line) last; among
those of one notebook, and among the modules of a sub-package, what builds on fewer of its
siblings (in the package's own imports) comes first, then what the notebooks name first. Why a
hook: mkdocs and Material build a navigation from the files under docs/ (these pages are
generated) and mkdocs-awesome-nav orders by hand-kept `.nav.yml` files; neither can order by the
notebooks.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402

_IMPORT = re.compile(r"\blabnn\.([\w.]+)|\bfrom labnn import ([\w, ()]+)")


def learning_order(notebooks: list[Path]) -> dict[str, int]:
    """Stems of the package (`xl`, `exercises/self_attention`) -> the first notebook that
    names them, in the order the notebooks name them (the dict's order)."""
    first: dict[str, int] = {}
    for index, path in enumerate(notebooks):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                for dotted, listed in _IMPORT.findall("".join(cell["source"])):
                    for name in [dotted] if dotted else re.findall(r"\w+", listed):
                        parts = name.strip(".").split(".")
                        for n in range(1, len(parts) + 1):
                            first.setdefault("/".join(parts[:n]), index)
    return first


def doc(module: layout.Module) -> str:
    """The module's docstring ("" without one)."""
    return ast.get_docstring(ast.parse(module.path.read_text(encoding="utf-8"))) or ""


def named_order(text: str, stem: str) -> list[str]:
    """The modules of package `stem` (`xl/`) in the order `text`, its docstring, first
    names them in backticks: `` `memory` `` or `` `labnn.xl.memory.f` `` -> `memory`."""
    dotted = "labnn." + stem.replace("/", ".")
    names = [n.removeprefix(dotted).split(".")[0] for n in re.findall(r"`([\w.]+)`", text)]
    return list(dict.fromkeys(n for n in names if n))


def title(module: layout.Module) -> str:
    """A section title: the docstring's first line, up to a colon, comma, parenthesis or stop."""
    first = doc(module).split("\n")[0]
    return re.split(r":\s|,\s|\s\(|\.\s|\.$", first)[0].strip() or module.short


def imports(mods: list[layout.Module]) -> dict[str, set[str]]:
    """Each module's stem -> the stems of the labnn modules it imports."""
    stems = {m.name: m.stem for m in mods}
    found = {}
    for module in mods:
        names = set()
        for node in ast.walk(ast.parse(module.path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labnn"):
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        found[module.stem] = {stems[n] for n in names if n in stems} - {module.stem}
    return found


def depth(stem: str, siblings: list[str], graph: dict[str, set[str]]) -> int:
    """How many of its siblings a module or sub-package needs, directly or not."""
    def under(s: str, top: str) -> bool:
        return s == top or s.startswith(top + "/")

    needs, todo = set(), [stem]
    while todo:
        top = todo.pop()
        for other in siblings:
            if other not in needs and other != stem and any(
                    under(s, top) and any(under(t, other) for t in ts) for s, ts in graph.items()):
                needs.add(other)
                todo.append(other)
    return len(needs)


def breakable(name: str) -> str:
    """A dotted name that may wrap after each dot (a zero-width space, which the search's
    separator also splits at): a narrow sidebar would otherwise cut `exercises.kv_sharing_stack`
    to `exercises.kv_sharin…`."""
    return name.replace(".", ".\u200b")


def tree(mods: list[layout.Module], folder: str, order: dict[str, int]) -> list:
    """Entries for the modules under `folder` (source/ or api/), sub-packages as sections."""
    by_stem = {m.stem: m for m in mods}
    graph = imports(mods)
    met = {stem: i for i, stem in enumerate(order)}  # where the notebooks first name it

    def entries(prefix: str) -> list:
        children = {prefix + m.stem[len(prefix):].split("/")[0] for m in mods
                    if m.stem.startswith(prefix) and m.stem not in (prefix.rstrip("/"), "index")}
        own = prefix and doc(by_stem[prefix.rstrip("/")])
        named = [prefix + n for n in named_order(own, prefix) if prefix + n in children]
        children = sorted(children, key=lambda c: (
            named.index(c) if c in named else len(named), order.get(c, len(order)),
            depth(c, children, graph), met.get(c, len(met)), c))
        out = []
        for stem in children:
            is_package = by_stem[stem].path.name == "__init__.py"
            # in a section within a section a module goes by its own name (the sections say the
            # rest); higher up by its dotted name, which tells `xl.model` from `feedback.model`
            nested = prefix.count("/") >= 2 and not is_package
            name = stem[len(prefix):] if nested else by_stem[stem].short
            if name.rsplit(".", 1)[-1].startswith("__"):  # `__main__`: says nothing to a reader (and
                name = title(by_stem[stem]).strip("`")    # the footer's links): `python -m labnn`
            page = {breakable(name): f"{folder}/{stem}.md"}
            out.append({title(by_stem[stem]): [page, *entries(stem + "/")]} if is_package else page)
        return out

    return [{"The package: overview": f"{folder}/index.md"}, *entries("")]


def on_config(config):
    mods = layout.modules()
    order = learning_order(layout.notebooks())
    config["nav"] = [
        {"Home": "index.md"},
        {"Notebooks": [{layout.notebook_title(p): f"notebooks/{p.name}"}
                       for p in layout.notebooks()]},
        {"Annotated source": tree(mods, "source", order)},
        {"API reference": tree(mods, "api", order)},
        {"Benchmarks": "benchmarks.md"},
        # How to run it elsewhere: one tab, not three
        {"Running labnn": [{"On a GPU": "gpu.md"}, {"On several processes": "distributed.md"},
                           {"torch versions, Colab": "compatibility.md"}]},
    ]
    return config
