"""Annotated-source pages as the site's search and links find them: each heading's anchor."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
import annotated  # noqa: E402
import layout  # noqa: E402


def _page_html(stem: str) -> str:
    """An annotated page as MkDocs renders its markdown, with its code in place."""
    import markdown
    module = next(m for m in layout.modules() if m.stem == stem)
    text, codes = annotated.annotated_page(module, "https://github.com/labnn/labnn")
    body = text.split("---\n", 2)[2]  # without its front matter
    html = markdown.markdown(body, extensions=["md_in_html", "attr_list", "toc", "pymdownx.arithmatex"],
                             extension_configs={"pymdownx.arithmatex": {"generic": True}})
    return annotated.with_code(html, codes)


def test_a_name_between_underscores_keeps_its_anchor():
    """`ExerciseError._render_traceback_`: Python-Markdown read the anchor `{#ExerciseError._render_traceback_}`
    as emphasis, so the heading showed `{#ExerciseError.render_traceback}` and took a made-up id
    (`exerciseerror_render_traceback_-exerciseerrorrender_traceback`). A name between single
    underscores gets its anchor without them, as a dunder does (`__init__` -> `init`)."""
    html = _page_html("exercises/grading/outcomes")
    heading = re.search(r"<h3[^>]*>.*?_render_traceback_.*?</h3>", html).group(0)
    assert 'id="ExerciseError.render_traceback"' in heading and "{#" not in heading, heading
