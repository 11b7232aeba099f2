"""docs/hooks/nav.py: the source and API navigation follow the package's folders along the learning path."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
import layout  # noqa: E402
import nav  # noqa: E402


def _pages(entries: list) -> list[str]:
    out = []
    for entry in entries:
        ((_, value),) = entry.items()
        out += _pages(value) if isinstance(value, list) else [value]
    return out


def test_every_module_once_and_sub_packages_as_titled_sections():
    mods = layout.modules()
    tree = nav.tree(mods, "source", nav.learning_order(layout.notebooks()))
    assert sorted(_pages(tree)) == sorted(f"source/{m.stem}.md" for m in mods)
    titles = [next(iter(e)) for e in tree]
    assert titles[0] == "The package: overview"
    assert "Transformer-XL" in titles and "Data" in titles and "Training" in titles
    (xl,) = [e["Transformer-XL"] for e in tree if "Transformer-XL" in e]
    assert xl[0] == {"xl": "source/xl.md"}  # the sub-package's own page first
    feedback = next(v for e in tree for k, v in e.items() if k.startswith("The Feedback"))
    assert any(isinstance(v, list) for e in feedback for v in e.values())  # feedback/fused nested


def test_order_follows_the_notebooks_then_the_imports(tmp_path):
    cell = {"cell_type": "code", "source": "from labnn import plot\nimport labnn.xl"}
    (tmp_path / "01.ipynb").write_text(json.dumps({"cells": [cell]}))
    (tmp_path / "02.ipynb").write_text(json.dumps(
        {"cells": [{"cell_type": "code", "source": "from labnn.feedback import X\nlabnn.xl"}]}))
    assert nav.learning_order(sorted(tmp_path.glob("*.ipynb"))) == {"plot": 0, "xl": 0, "feedback": 1}
    order = [next(iter(e)) for e in nav.tree(layout.modules(), "api",
                                              nav.learning_order(layout.notebooks()))]
    assert order.index("Transformer-XL") < order.index("The Feedback Transformer")
    # xl before compiled (both first met in notebook 02): compiled builds on xl
    assert order.index("Transformer-XL") < order.index(
        next(t for t in order if t.startswith("Compiled")))
    assert order[-1] == "python -m labnn"  # no notebook imports the command line


def test_no_page_is_titled_by_a_dunder_module_name():
    """`labnn/__main__.py`'s pages were titled `__main__`, which the footer's "Previous" and "Next"
    links showed (benchmarks, the API overview): such a module goes by its docstring's title."""
    for folder in ("source", "api"):
        titles = {v: k for e in _flat(nav.tree(layout.modules(), folder, {})) for k, v in e.items()}
        assert titles[f"{folder}/__main__.md"] == "python -m labnn"
        assert not [t for t in titles.values() if t.startswith("__")], titles


def _flat(entries: list) -> list[dict]:
    out = []
    for entry in entries:
        ((_, value),) = entry.items()
        out += _flat(value) if isinstance(value, list) else [entry]
    return out


def test_modules_of_a_sub_package_come_after_what_they_import():
    tree = nav.tree(layout.modules(), "source", {})
    xl = next(v for e in tree for k, v in e.items() if k == "Transformer-XL")
    stems = [next(iter(e.values())) for e in xl]
    assert stems.index("source/xl/relative_attention.md") < stems.index("source/xl/block.md")
    assert stems.index("source/xl/block.md") < stems.index("source/xl/model.md")


def test_a_nested_section_names_its_modules_by_their_own_names():
    tree = nav.tree(layout.modules(), "source", nav.learning_order(layout.notebooks()))
    exercises = next(v for e in tree for k, v in e.items() if k.startswith("Exercise checkers"))
    xl = next(v for e in exercises for k, v in e.items() if k.startswith("Notebook 02"))
    titles = {v: k.replace("\u200b", "") for e in xl for k, v in e.items()}
    assert titles["source/exercises/transformer_xl.md"] == "exercises.transformer_xl"
    assert titles["source/exercises/transformer_xl/segment_memory.md"] == "segment_memory"
    xl_section = next(v for e in tree for k, v in e.items() if k == "Transformer-XL")
    assert {"xl.\u200bmodel": "source/xl/model.md"} in xl_section  # one level: the dotted name


def test_a_package_api_page_links_what_its_all_exports():
    import annotated  # noqa: PLC0415

    by_name = {m.name: m for m in layout.modules()}
    page = annotated.api_page(by_name["labnn.exercises.transformer_xl"])
    assert ("[`check_segment_mask`][labnn.exercises.transformer_xl.segment_memory"
            ".check_segment_mask]") in page
    assert "Exported here" not in annotated.api_page(by_name["labnn"])  # no __all__: no exports


def _sections(entries: list, found: dict) -> dict:
    """Each sub-package's page -> the pages of its section, in the sidebar's order."""
    for entry in entries:
        ((_, value),) = entry.items()
        if isinstance(value, list):
            pages = [next(iter(e.values())) for e in value]
            found[pages[0]] = [p if isinstance(p, str) else _pages(p)[0] for p in pages[1:]]
            _sections(value, found)
    return found


def test_a_sub_package_reads_in_the_order_its_docstring_names_its_modules():
    """`labnn/compiled/__init__.py` says "Read in this order: `rings`, `ring_steps`, ...":
    the sidebar says the same, and an exercise sub-package lists the checkers it names
    first before their slips."""
    tree = nav.tree(layout.modules(), "source", nav.learning_order(layout.notebooks()))
    sections = _sections(tree, {})
    assert sections["source/compiled.md"] == [f"source/compiled/{s}.md" for s in (
        "rings", "ring_steps", "cuda_graph", "backends", "decoding", "kernels")]
    assert sections["source/xl.md"] == [f"source/xl/{s}.md" for s in (
        "relative_attention", "memory", "block", "model", "cache")]
    assert sections["source/feedback.md"] == [f"source/feedback/{s}.md" for s in (
        "layer", "base", "model", "stack", "step_linear", "kv", "fused")]
    first = sections["source/exercises/self_attention.md"][:2]
    assert first == [f"source/exercises/self_attention/{s}.md"
                     for s in ("masked_attention", "multi_head")]
    for package, pages in sections.items():  # every module named, in the docstring's order
        doc = ast.get_docstring(ast.parse((layout.ROOT / package.replace("source/", "labnn/")
                                          .replace(".md", "/__init__.py")).read_text()))
        prefix = package[:-len(".md")] + "/"
        named = nav.named_order(doc, prefix[len("source/"):])
        listed = [p[len(prefix):-len(".md")] for p in pages]
        assert [n for n in listed if n in named] == sorted(
            (n for n in listed if n in named), key=named.index), package


def test_every_annotated_source_section_has_its_own_anchor():
    """`forward` and `_forward` once shared an anchor: two search entries of one location made
    Material's search worker fail (no results for `Stack`, `push`, `f`)."""
    import annotated  # noqa: PLC0415

    for module in layout.modules():
        anchors = [s.anchor for s in annotated.split_module(module.path.read_text()) if s.anchor]
        assert len(anchors) == len(set(anchors)), (module.name, sorted(
            a for a in set(anchors) if anchors.count(a) > 1))
    sections = annotated.split_module("class A:\n    def __init__(self): ...\n"
                                      "    def forward(self): ...\n    def _forward(self): ...\n")
    assert [s.anchor for s in sections if s.anchor] == ["A", "A.init", "A.forward", "A._forward"]
