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
import search_text  # noqa: E402
from test_site import NOT_BUILT, PAGES, SITE, browser, deadline, server  # noqa: E402,F401 (fixtures)


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


# A name a reader types -> the section that defines it (its annotated source, else its API entry).
NAMES = {
    "memory_keys_values": "source/feedback/layer/#memory_keys_values",
    "relative_scores": "source/xl/relative_attention/#relative_scores",  # not the checker's module
    "relative_shift": "source/xl/relative_attention/#relative_shift",
    "check_causal_mask": "source/exercises/self_attention/masked_attention/#check_causal_mask",
    "update_memory": "source/xl/memory/#update_memory",
}


def _first_hits(page, term: str) -> list[tuple[str, str]]:
    """(href without its ?h=, snippet text) of the first result group's links, as a reader sees them."""
    page.click(".md-search__input")
    page.fill(".md-search__input", "")
    page.keyboard.type(term, delay=10)
    page.wait_for_function(  # the results of the whole term: each link carries the words it matched as ?h=
        """term => [...document.querySelectorAll('.md-search-result__item a')].some(a =>
            (new URL(a.href).searchParams.get('h') || '').split(/[\\s_]+/)
            .includes(term.toLowerCase().split(/[\\s_]+/).pop()))""", arg=term, timeout=40_000)
    return page.eval_on_selector_all(
        ".md-search-result__item:first-child > a", """els => els.map(a => {
            const url = new URL(a.href); url.search = '';
            return [url.pathname.replace(/^\\//, '') + url.hash, a.querySelector('article').textContent]; })""")


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
def test_a_name_typed_into_the_search_leads_to_its_own_section(browser, server, deadline):
    """The first result is the name's page and its first section the name's own: with `_` a
    separator, `memory_keys_values` was three words, and notebook 04 (its title says keys and
    values, its text memory) came first; the checker module `relative_scores.py` (its title the
    name) came before the function."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    problems = []
    try:
        page = context.new_page()
        page.goto(f"{server}/", wait_until="load")
        for term, want in NAMES.items():
            hits = _first_hits(page, term)
            sections = [href for href, _ in hits if "#" in href]
            if not sections or sections[0] != want:
                problems.append(f"{term}: first result {[h for h, _ in hits][:3]}, expected {want}")
    finally:
        context.close()
    assert not problems, "\n  ".join(problems)


# A class member a reader types -> its section; a plain word -> a lesson (a notebook) first.
DOTTED = {
    "Stack.push": "source/feedback/stack/#Stack.push",
    "Trainer.fit": "source/training/trainer/#Trainer.fit",
    "FeedbackBase.step": "source/feedback/base/#FeedbackBase.step",
    "TransformerLM.generate": "source/transformer/#TransformerLM.generate",
    # typed in lowercase: the query was split at its dot (`stack` + `push`: notebook 04 first)
    "stack.push": "source/feedback/stack/#Stack.push",
    "trainer.fit": "source/training/trainer/#Trainer.fit",
}
WORDS = ("memory", "attention", "cache", "mask")


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
def test_a_class_member_typed_into_the_search_leads_to_its_section(browser, server, deadline):
    """`Stack.push` was split at its dot into `stack` and `push`, which notebook 04 says most: the
    lesson came first, and `Trainer.fit` led to the top of another module. A dot after a capitalised
    name is no separator (mkdocs.yml): the member's own section comes first, while a plain word
    still leads to a lesson. Typed in lowercase (`stack.push`), a query was still split at its dot:
    a dot inside a text that is one dotted name whole is no separator either."""
    from playwright.sync_api import TimeoutError
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    problems = []
    try:
        page = context.new_page()
        page.goto(f"{server}/", wait_until="load")
        for term, want in DOTTED.items():
            try:
                hits = _first_hits(page, term)
            except TimeoutError:  # Playwright's (40 s): no result marked the name whole as its match
                problems.append(f"{term}: no result matched it as one word (split at its dot?)")
                break  # the next would wait as long: the test's deadline is 90 s
            sections = [href for href, _ in hits if "#" in href]
            if not sections or sections[0] != want:
                problems.append(f"{term}: first result {[h for h, _ in hits][:3]}, expected {want}")
        for term in WORDS:
            hits = _first_hits(page, term)
            if not hits or not hits[0][0].startswith("notebooks/"):
                problems.append(f"{term}: first result {[h for h, _ in hits][:3]}, not a lesson")
    finally:
        context.close()
    assert not problems, "\n  ".join(problems)


def test_a_snippet_keeps_the_brackets_of_words_outside_tags_unit():
    """Material's snippet starts a block at its first tag, or at the first word of a run outside
    every tag (a display formula, a table's cells): `(K, V) = W^KV LN(m)` lost its `(`."""
    text = "<p>The keys,</p> (K, V) = W^KV LN(m), <p>keys <code>D</code>.</p> Name Type <pre>a\n(b)</pre>"
    assert search_text.whole_blocks(text) == (
        "<p>The keys,</p><p> (K, V) = W^KV LN(m), </p><p>keys <code>D</code>.</p><p> Name Type </p>"
        "<pre>a\n(b)</pre>")


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
def test_a_snippet_keeps_its_brackets(browser, server, deadline):
    """A search whose word sits in a formula outside every tag shows the formula whole."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(f"{server}/", wait_until="load")
        hits = _first_hits(page, "memory_keys_values LN")
        formula = [text for href, text in hits if "W^KV" in text]
        assert formula and all("(K, V) = W^KV LN(m)" in text for text in formula), hits
    finally:
        context.close()
