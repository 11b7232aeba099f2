"""The API pages' docstrings as mkdocstrings reads them: griffe's Google parser with the options of
mkdocs.yml. A `Returns:` sentence that runs over several lines is one row (one value, the signature's
type), not one row per line with types guessed from a tuple."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings (docs extra)")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]


def _docstring_options() -> dict:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    (plugin,) = [p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p]
    python = plugin["handlers"]["python"]["options"]
    assert python["docstring_style"] == "google"
    return python.get("docstring_options", {})


def _returns(docstring: str, parent=None) -> list:
    parsed = griffe.Docstring(docstring, parent=parent).parse("google", **_docstring_options())
    return [item for section in parsed if section.kind.value == "returns" for item in section.value]


def test_a_returns_sentence_over_three_lines_is_one_row():
    text = """Step the model.

    Returns:
        `(logits, state)`; the state holds the last `attn_len` memory vectors (all if
        None), detached. Within the call, the memory is also detached every
        `config.block_len` tokens.
    """
    (row,) = _returns(inspect.cleandoc(text))
    assert row.name == ""
    assert " ".join(row.description.split()) == (
        "`(logits, state)`; the state holds the last `attn_len` memory vectors (all if None), detached. "
        "Within the call, the memory is also detached every `config.block_len` tokens.")


def _with_returns(obj):
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.docstring:
            sections = member.docstring.parse("google", **_docstring_options())
            yield from ((member, s) for s in sections if s.kind.value == "returns")
        if member.is_module or member.is_class:
            yield from _with_returns(member)


def test_every_returns_section_of_labnn_is_one_row_with_the_signature_type():
    package = griffe.load("labnn", search_paths=[str(ROOT)], docstring_parser=None)
    found = list(_with_returns(package))
    assert len(found) > 20, "griffe found too few Returns sections: is labnn where it looked?"
    split = [f"{m.path}: {len(s.value)} rows" for m, s in found if len(s.value) != 1]
    assert not split, "Returns sections split into rows:\n  " + "\n  ".join(split)
    for member, section in found:
        (row,) = section.value
        if member.returns is not None:  # the row's type is the signature's return annotation
            assert str(row.annotation) == str(member.returns), member.path
