"""The Chinese (中文) pages of the built site in headless Chromium (docs/hooks/i18n.py).

A Chinese reader has a menu, tabs and previous/next links that stay on the Chinese side where a page
is translated and say （英文） where they lead to an English page; the header's switch goes to the
same page in the other language; the site's search finds a Chinese word; each Chinese notebook page
says once that its code, outputs and plot labels are English. Every page's links, requests and
console (the Chinese pages' too) are test_site.py's `test_page`. Serves `$LABNN_SITE_DIR` as
test_site.py does.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from test_site import PAGES, SITE, browser, deadline, server  # noqa: F401 (fixtures)

ZH_NOTEBOOK = "zh/notebooks/03_feedback_transformer/index.html"
pytestmark = pytest.mark.skipif(ZH_NOTEBOOK not in PAGES,
                                reason="no Chinese pages built (make site; LABNN_I18N=0?)")
EN = "（英文）"
NB04 = ["/zh/notebooks/04_kv_sharing_stack/", "04 · 共享键和值：反馈栈"]
_CODE_AND_OUTPUTS_JS = """() => Array.from(document.querySelectorAll(".jp-CodeCell"))
  .map(c => c.innerText.trim())"""
_LINKS_JS = "els => els.map(e => [new URL(e.href).pathname, e.textContent.trim()])"
_IDS_JS = "els => els.map(e => e.id)"


@pytest.fixture
def page(browser, deadline):  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield context.new_page()
    context.close()


def _switch_to(page, lang: str) -> None:
    page.hover(".labnn-lang-switch .md-header__button")
    link = page.locator(f".labnn-lang-switch a[hreflang={lang}]")
    link.wait_for(state="visible", timeout=5_000)
    with page.expect_navigation(wait_until="load"):
        link.click()


def test_notebook_page_has_chinese_menu_tabs_and_previous_next(page, server):  # noqa: F811
    page.goto(f"{server}/zh/notebooks/03_feedback_transformer/", wait_until="load")
    menu = page.eval_on_selector_all(".md-sidebar--primary .md-nav__link[href]", _LINKS_JS)
    assert NB04 in menu, menu
    english = [text for path, text in menu if path.startswith("/notebooks/")]
    assert len(english) == 3 and all(t.endswith(EN) for t in english), english  # 01, 02, 05
    tabs = page.eval_on_selector_all(".md-tabs__link", _LINKS_JS)
    assert ["/zh/notebooks/03_feedback_transformer/", "笔记本"] in tabs, tabs  # its first zh page
    assert ["/zh/source/feedback/", "源码注解"] in tabs, tabs
    assert all(p.startswith("/zh/") or t.endswith(EN) for p, t in tabs), tabs
    assert page.locator(".md-tabs__item--active").inner_text().strip() == "笔记本"
    footer = page.eval_on_selector_all(
        ".md-footer__link", "els => els.map(e => [new URL(e.href).pathname,"
        " e.querySelector('.md-ellipsis').textContent.trim()])")
    assert footer[0][0] == "/notebooks/02_transformer_xl/" and footer[0][1].endswith(EN), footer
    assert footer[1] == NB04, footer
    assert page.locator(".md-footer__direction").first.inner_text().strip() == "上一页"
    assert page.get_attribute("html", "lang") == "zh"


def test_every_link_of_a_chinese_page_says_english_where_it_leaves(page, server):  # noqa: F811
    """On the zh landing page (its table: 01, 02 and 05 English), a notebook and an annotated page,
    each link to a page of the site is a Chinese page or says （英文）."""
    for path in ("zh/", "zh/notebooks/03_feedback_transformer/", "zh/source/feedback/model/"):
        page.goto(f"{server}/{path}", wait_until="load")
        links = page.eval_on_selector_all(
            ".md-content a[href]:not(.headerlink):not([download])",
            "els => els.map(e => [new URL(e.href).host, new URL(e.href).pathname,"
            " e.textContent.trim()])")
        english = [(p, t) for h, p, t in links if h == urlsplit(server).netloc
                   and not p.startswith("/zh/") and p.endswith("/") and t]
        assert english and all("英文" in t for _, t in english), (path, english)
        if path == "zh/":
            table = page.eval_on_selector_all(".md-content table a[href]", _LINKS_JS)
            assert [p for p, t in table if t.endswith(EN)] == [
                "/notebooks/01_attention/", "/notebooks/02_transformer_xl/",
                "/notebooks/05_three_memories/"]
            assert {"/zh/notebooks/03_feedback_transformer/", NB04[0]} <= {p for p, _ in table}


def test_language_switch_goes_to_the_counterpart_and_back(page, server):  # noqa: F811
    """English notebook 03 -> 中文 -> English; the Chinese page has the English one's code, outputs
    and heading ids (an #anchor works on both); an English-only page offers the Chinese home."""
    page.goto(f"{server}/notebooks/03_feedback_transformer/", wait_until="load")
    english_cells = page.evaluate(_CODE_AND_OUTPUTS_JS)
    english_heads = page.eval_on_selector_all(".md-content h2[id]", _IDS_JS)
    _switch_to(page, "zh")
    assert urlsplit(page.url).path == "/zh/notebooks/03_feedback_transformer/", page.url
    assert "反馈记忆" in page.locator(".md-content").inner_text()
    assert page.evaluate(_CODE_AND_OUTPUTS_JS) == english_cells, "code or outputs differ"
    assert page.eval_on_selector_all(".md-content h2[id]", _IDS_JS) == english_heads
    toc = page.eval_on_selector_all(
        ".md-sidebar--secondary a[href*='#']",
        "els => els.map(e => decodeURIComponent(new URL(e.href).hash.slice(1)))")
    assert toc and all(page.locator(f"[id='{t}']").count() == 1 for t in toc), toc
    _switch_to(page, "en")
    assert urlsplit(page.url).path == "/notebooks/03_feedback_transformer/", page.url
    assert page.get_attribute("html", "lang") == "en"
    page.goto(f"{server}/api/feedback/stack/", wait_until="load")
    assert page.locator(".labnn-lang-switch a[hreflang=zh]").text_content().strip() == "中文首页"
    _switch_to(page, "zh")
    assert urlsplit(page.url).path == "/zh/", page.url


def test_search_finds_a_chinese_word(page, server):  # noqa: F811
    page.goto(f"{server}/zh/", wait_until="load")
    page.click(".md-search__input")
    page.keyboard.type("反馈", delay=10)
    # the page's first query also waits for the worker to build the index (1.6 MB): on a loaded
    # 2-core machine that took over 15 s
    page.wait_for_function("""() => [...document.querySelectorAll('.md-search-result__item a')]
        .some(a => new URL(a.href).searchParams.get('h') === '反馈')""", timeout=60_000)
    hits = page.eval_on_selector_all(".md-search-result__item a",
                                     "els => els.map(e => new URL(e.href).pathname)")
    assert "/zh/notebooks/03_feedback_transformer/" in hits, hits[:10]


def test_notebook_page_says_its_outputs_are_english(page, server):  # noqa: F811
    for stem in ("03_feedback_transformer", "04_kv_sharing_stack"):
        page.goto(f"{server}/zh/notebooks/{stem}/", wait_until="load")
        note = page.locator(".labnn-zh-english")
        assert note.count() == 1
        text = note.inner_text()
        assert "英文" in text and "代码输出" in text and "图中" in text, text
        top = note.evaluate("e => e.getBoundingClientRect().top")
        assert top < 1000, f"{stem}: the note is not at the top ({top:.0f} px down)"


def test_switch_fits_a_phone(browser, server, deadline):  # noqa: F811
    """At 390 px the switch's (hidden) list stays inside the screen: it does not widen the page (the
    old "中文（本页暂无译文，转到中文首页）" made every English-only page 468 px wide)."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        for path in ("benchmarks/", "notebooks/03_feedback_transformer/", "zh/"):
            page.goto(f"{server}/{path}", wait_until="load")
            right = page.evaluate("document.querySelector('.labnn-lang-switch .md-select__inner')"
                                  ".getBoundingClientRect().right")
            assert right <= 390, f"{path}: the language list reaches {right:.0f} px"
    finally:
        context.close()


def test_an_english_word_finds_the_english_page_first():
    """One index holds both languages: a Chinese page ranks below its English page for an English
    word its notes keep (an identifier), each at 0.3 times the English page's boost."""
    from test_site import SITE
    docs = json.loads((SITE / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    boost = {d["location"].split("#")[0]: d.get("boost", 1) for d in docs}
    pairs = [(zh, zh.removeprefix("zh/")) for zh in boost if zh.startswith("zh/")]
    assert pairs, "no Chinese page in the search index"
    wrong = [(zh, boost[zh], boost.get(en)) for zh, en in pairs
             if en in boost and not boost[zh] < boost[en]]
    assert not wrong, wrong


@pytest.mark.parametrize("module", ["feedback/layer", "feedback/stack", "feedback/fused/loop"])
def test_a_chinese_annotated_page_has_the_code_beside_its_notes(module):
    """A site reader's finding: the Chinese annotated-source pages showed the translated notes
    and no code at all (every placeholder empty: the i18n hook handed the code to its own copy
    of annotated.py, not to the one mkdocs loads as a hook). Each section's code is there, as on
    the English page."""
    english = (SITE / "source" / module / "index.html").read_text("utf-8")
    chinese = (SITE / "zh" / "source" / module / "index.html").read_text("utf-8")
    assert 'data-code="' not in chinese, "an empty code placeholder is left"
    assert chinese.count('<div class="ann-code">') == english.count('<div class="ann-code">') > 3


def test_a_display_formula_stays_its_own_paragraph_in_chinese():
    """A site reader's finding: zh/source/feedback/fused/backward showed `$` before and after a
    formula in a sentence. Its translation joined the display formula (`$$...$$`, a paragraph of
    its own in English) to the sentences around it, where arithmatex reads `$...$` inside it as
    inline math and leaves the outer `$` as text. Each translated note opens and closes a display
    formula's paragraph where its English source does."""
    import re
    from pathlib import Path
    polib = pytest.importorskip("polib", reason="the translations need polib (docs extra)")
    block = (re.compile(r"(?:^|\n\n)\$\$"), re.compile(r"\$\$(?:\n\n|$)"))
    wrong = []
    for po in sorted((Path(__file__).resolve().parents[1] / "docs/locale/zh").rglob("*.po")):
        for entry in polib.pofile(str(po)):
            if entry.msgstr and ([len(p.findall(entry.msgid)) for p in block]
                                 != [len(p.findall(entry.msgstr)) for p in block]):
                wrong.append(f"{po.name} {entry.msgctxt}")
    assert not wrong, f"a display formula joined to a sentence in: {wrong}"


def test_figure_hints_and_close_button_are_chinese(browser, server, deadline):  # noqa: F811
    """At 390 px a zh page's wide figures said "Swipe for the rest of the figure; tap or click it
    to see it full size" and the full-size view's button "× Close" (labnn.css, site.js in English):
    both now speak the page's language."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/zh/notebooks/03_feedback_transformer/", wait_until="load")
        page.wait_for_load_state("networkidle")
        hints = page.eval_on_selector_all(
            ".jp-RenderedImage.labnn-wide, .jp-RenderedImage.labnn-shrunk",
            "els => els.map(e => getComputedStyle(e, '::after').content)")
        assert hints, "no figure marked wide or shrunk at 390 px"
        assert all("点击" in h and "Tap" not in h for h in hints), hints
        page.locator(".jp-RenderedImage img").first.click()
        button = page.locator(".labnn-zoom-close")
        assert button.text_content().strip() == "× 关闭", button.text_content()
        assert button.get_attribute("aria-label") == "关闭原尺寸的图"
    finally:
        context.close()
