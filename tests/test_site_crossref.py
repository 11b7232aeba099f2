"""docs/hooks/crossref.py: a name in an annotated note leads to the section that defines it.

Each equation is written once and the other notes name it
(`labnn.feedback.layer.memory_keys_values`, `XLBlock.memory_cache`, `feedback_weights`); those
names were plain inline code, so a reader of
source/feedback/model/ or source/xl/cache/ had to hunt for them in the sidebar (site reader 66).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import crossref  # noqa: E402

SITE = Path(os.environ.get("LABNN_SITE_DIR") or ROOT / "site").resolve()


def _url(here: str):
    def url_of(stem: str, anchor: str) -> str:
        page = "" if stem == here else f"../{stem.rsplit('/', 1)[-1]}/"
        return page + (f"#{anchor}" if anchor else "")
    return url_of


def test_a_note_names_a_definition_of_another_module_as_a_link():
    html = ("<p>its key (<code>labnn.feedback.layer.memory_keys_values</code>) and "
            "<code>XLBlock.memory_cache</code></p>")
    linked = crossref.link_names(html, "feedback/model", _url("feedback/model"))
    assert '<a class="labnn-ref" href="../layer/#memory_keys_values"><code>labnn.feedback.layer.' \
           'memory_keys_values</code></a>' in linked
    assert 'href="../block/#XLBlock.memory_cache"' in linked


def test_a_name_the_page_imports_from_labnn_links_where_it_is_defined():
    html = "<p>the step itself (<code>feedback_step</code>, <code>memory_keys_values</code>)</p>"
    linked = crossref.link_names(html, "feedback/model", _url("feedback/model"))
    assert 'href="../layer/#feedback_step"' in linked
    assert 'href="../layer/#memory_keys_values"' in linked


def test_a_name_of_the_page_itself_links_its_section_and_a_method_its_anchor():
    html = "<p>the weights of <code>feedback_weights</code>; <code>LayerMix.__init__</code></p>"
    linked = crossref.link_names(html, "feedback/layer", _url("feedback/layer"))
    assert '<a class="labnn-ref" href="#feedback_weights"><code>feedback_weights</code></a>' \
        in linked
    assert 'href="#LayerMix.init"' in linked


def test_code_headings_links_arguments_and_common_words_stay_as_they_are():
    html = ('<pre><code>feedback_weights</code></pre><h2 id="x"><code>feedback_weights</code></h2>'
            '<a href="y"><code>LayerMix</code></a><ul><li><code>linear</code>: the layer</li></ul>'
            '<p><code>generate</code> and <code>x</code></p>')
    for here in ("feedback/layer", "feedback/step_linear", "xl/cache"):
        linked = crossref.link_names(html, here, _url(here))
        assert linked == html, (here, linked)


@pytest.mark.skipif(not (SITE / "source" / "feedback" / "model" / "index.html").is_file(),
                    reason=f"{SITE} was not built")
@pytest.mark.parametrize("page, name, target", [
    ("source/feedback/model", "memory_keys_values", "source/feedback/layer#memory_keys_values"),
    ("source/feedback/model", "labnn.feedback.layer.LayerMix", "source/feedback/layer#LayerMix"),
    ("source/feedback/kv", "labnn.feedback.layer.memory_keys_values",
     "source/feedback/layer#memory_keys_values"),
    ("source/xl/cache", "XLBlock.memory_cache", "source/xl/block#XLBlock.memory_cache"),
    ("source/xl/cache", "KVBuffer", "source/nn/kv_cache#KVBuffer"),  # imported from a re-export
    ("source/xl/cache", "RelativeMultiHeadAttention.key_table",
     "source/xl/relative_attention#RelativeMultiHeadAttention.key_table"),
    ("source/feedback/layer", "feedback_weights", "source/feedback/layer#feedback_weights"),
    ("zh/source/feedback/model", "memory_keys_values",
     "zh/source/feedback/layer#memory_keys_values"),
])
def test_the_built_note_links_the_name_to_its_section(page, name, target):
    html = (SITE / page / "index.html").read_text(encoding="utf-8")
    link = rf'<a class="labnn-ref" href="([^"]*)"><code>{re.escape(name)}</code></a>'
    hrefs = re.findall(link, html)
    assert hrefs, f"{page}: `{name}` is not a link"
    path, _, anchor = target.partition("#")
    for href in hrefs:
        where, _, got = href.partition("#")
        resolved = (SITE / page / where).resolve() if where else (SITE / page)
        assert resolved == (SITE / path).resolve() and got == anchor, (href, target)
        assert f'id="{anchor}"' in (SITE / path / "index.html").read_text(encoding="utf-8")


@pytest.mark.skipif(not (SITE / "source" / "index.html").is_file(), reason=f"{SITE} was not built")
def test_every_name_link_reaches_its_anchor():
    """An anchor is the one Markdown gave the heading: `InteractiveFigure._repr_html_`'s heading
    got `InteractiveFigure.repr`, and a link built from the name alone led nowhere."""
    missing = []
    for page in sorted(SITE.rglob("index.html")):
        for href in re.findall(r'<a class="labnn-ref" href="([^"]*)"', page.read_text("utf-8")):
            where, _, anchor = href.partition("#")
            target = (page.parent / where / "index.html").resolve() if where else page
            found = target.is_file() and f'id="{anchor}"' in target.read_text("utf-8")
            if not found if anchor else not target.is_file():
                missing.append(f"{page.parent.relative_to(SITE)}: {href}")
    assert not missing, missing[:10]


@pytest.mark.skipif(not (SITE / "zh" / "source" / "feedback" / "model" / "index.html").is_file(),
                    reason=f"{SITE} was not built with its Chinese pages")
def test_a_chinese_page_links_names_to_chinese_pages_only():
    """A link from a Chinese page to an English one must say （英文） (test_site_zh.py); a name
    of a module without a Chinese page (`labnn.nn.arguments`) stays plain code there."""
    for page in sorted((SITE / "zh").rglob("index.html")):
        for href in re.findall(r'<a class="labnn-ref" href="([^"]*)"', page.read_text("utf-8")):
            target = (page.parent / href.partition("#")[0]).resolve()
            assert target.is_relative_to((SITE / "zh").resolve()), (page, href)
