"""An annotated-source page in the site's search: each code block and note under its own heading.

Material's search indexer closes a heading's section when the element holding the heading closes,
and gives what follows back to the page's own entry. Each heading of an annotated page sits in its
note (`div.ann-note`, beside the code): every code block and every note after it went to the page's
top entry, so a search for a function's name led to the top of a long page, not to the function.
The unit test parses a page as the indexer does (no build); the other reads the built index.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
pytest.importorskip("material", reason="the search plugin is Material's (docs extra)")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
import annotated  # noqa: E402
import layout  # noqa: E402
from test_site import NOT_BUILT, SITE  # noqa: E402


def _indexed_sections(html: str) -> dict[str, str]:
    """{heading id ("" for the page's own entry): indexed text}, as Material's indexer cuts a page."""
    from material.plugins.search.plugin import Parser
    parser = Parser()
    parser.feed(html)
    parser.close()
    return {(s.id or ""): "".join(s.text) for s in parser.data}


def _page_html(stem: str) -> str:
    """An annotated page as MkDocs renders its markdown, with its code in place."""
    import markdown
    module = next(m for m in layout.modules() if m.stem == stem)
    text, codes = annotated.annotated_page(module, "https://github.com/labnn/labnn")
    body = text.split("---\n", 2)[2]  # without its front matter
    html = markdown.markdown(body, extensions=["md_in_html", "attr_list", "toc", "pymdownx.arithmatex"],
                             extension_configs={"pymdownx.arithmatex": {"generic": True}})
    return annotated.with_code(html, codes)


def test_each_code_block_is_indexed_under_its_heading_unit():
    sections = _indexed_sections(annotated.for_search(_page_html("nn/block")))
    forward = sections["TransformerBlock.forward"]
    assert "def forward(" in forward, forward[:300]
    assert "class TransformerBlock" in sections["TransformerBlock"]
    top = sections[""]
    assert "def " not in top and "class " not in top, top[:300]
    assert "import" in top  # the module's own code (its imports) stays with the page


def _definitions(text: str) -> list[str]:
    return re.findall(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", text, flags=re.MULTILINE)


@pytest.mark.skipif(not (SITE / "search" / "search_index.json").is_file(), reason=NOT_BUILT)
def test_each_code_block_is_indexed_under_its_heading():
    """Every `def`/`class` line of an annotated page is in the entry of the heading that names it
    (location `source/<module>/#<anchor>`): the page's own entry holds only the module's opening code."""
    docs = json.loads((SITE / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    problems = []
    pages = 0
    for doc in docs:
        page, _, anchor = doc["location"].partition("#")
        if not page.startswith("source/"):
            continue
        blocks = re.findall(r"<pre>(.*?)</pre>", doc["text"], flags=re.DOTALL)
        code = re.sub(r"<[^>]+>", "", "\n".join(blocks))
        names = _definitions(code)
        if not anchor:
            pages += 1
            if names:
                problems.append(f"{page}: the page's own entry holds the code of {names[:4]}")
            continue
        own = anchor.rsplit(".", 1)[-1]  # `init` for `__init__` (annotated._slug)
        if own not in names and own not in [name.strip("_") for name in names]:
            problems.append(f"{doc['location']}: no `def`/`class {own}` line in its entry ({names[:4]})")
    assert pages > 50, f"only {pages} annotated pages in the search index"
    assert not problems, f"{len(problems)} entries:\n  " + "\n  ".join(problems[:15])


def test_a_name_between_underscores_keeps_its_anchor():
    """`ExerciseError._render_traceback_`: Python-Markdown read the anchor `{#ExerciseError._render_traceback_}`
    as emphasis, so the heading showed `{#ExerciseError.render_traceback}` and took a made-up id
    (`exerciseerror_render_traceback_-exerciseerrorrender_traceback`). A name between single
    underscores gets its anchor without them, as a dunder does (`__init__` -> `init`)."""
    html = _page_html("exercises/grading/outcomes")
    heading = re.search(r"<h3[^>]*>.*?_render_traceback_.*?</h3>", html).group(0)
    assert 'id="ExerciseError.render_traceback"' in heading and "{#" not in heading, heading
