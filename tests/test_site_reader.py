"""The site as a reader sees it in the settings a stylesheet forgets: forced colours (Windows' high
contrast themes), over `$LABNN_SITE_DIR` in headless Chromium (the fixtures of tests/test_site.py).

In forced colours the browser repaints text and backgrounds in the reader's system colours but keeps
a background's alpha: an element the theme gives a transparent background gets its forced colour
back transparent, so its forced text colour has to stand on whatever lies behind.
"""

from __future__ import annotations

import pytest
from test_site import NOT_BUILT, PAGES, browser, deadline, server  # noqa: F401 (fixtures)

# The contrast of a mark's text with what shows behind it: its own background over its ancestors'.
_MARKS_JS = """sel => [...document.querySelectorAll(sel)].filter(m => m.getClientRects().length).map(m => {
  const rgba = s => { const v = s.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3]));
  let layers = [], e = m;
  for (; e; e = e.parentElement) { const b = rgba(getComputedStyle(e).backgroundColor); if (b[3] > 0) layers.push(b); if (b[3] === 1) break; }
  let back = [255, 255, 255];
  layers.reverse().forEach(l => { back = over(l, back); });
  const text = over(rgba(getComputedStyle(m).color), back);
  const lum = c => { const [r, g, b] = c.map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const [hi, lo] = [lum(text), lum(back)].sort((a, b) => b - a);
  return [m.textContent, (hi + 0.05) / (lo + 0.05)];
})"""


@pytest.mark.skipif("index.html" not in PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_a_search_hit_stays_readable_in_forced_colours(browser, server, deadline, scheme):  # noqa: F811
    """The word a search matched (`<mark>`, in a result and, after following it, in the page) was
    drawn in MarkText over Material's transparent background: in a dark high-contrast theme, black on
    black (`Stack` vanished from "the feedback stack" in the first result). Each mark now reads at a
    contrast of 4.5 at least, in a dark and in a light forced scheme."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=scheme)
    problems = []
    try:
        page = context.new_page()
        page.emulate_media(forced_colors="active")
        page.goto(f"{server}/", wait_until="load")
        page.click(".md-search__input")
        page.keyboard.type("Stack", delay=10)
        page.wait_for_function("() => document.querySelectorAll('.md-search-result mark').length > 3",
                               timeout=30_000)
        marks = page.evaluate(_MARKS_JS, ".md-search-result mark")
        page.goto(f"{server}/notebooks/04_kv_sharing_stack/?h=stack", wait_until="load")
        page.wait_for_function("() => document.querySelector('.md-content mark')", timeout=30_000)
        marks += page.evaluate(_MARKS_JS, ".md-content mark")
        assert len(marks) > 5, marks
        problems = [f"{scheme}: {text!r} at contrast {ratio:.2f}" for text, ratio in marks if ratio < 4.5]
    finally:
        context.close()
    assert not problems, f"{len(problems)} of {len(marks)} marks unreadable:\n  " + "\n  ".join(problems[:8])


# Each number with its unit in a table's cell (`487 ms`, `248–254 ms`, `88.7 %`), outside code: the
# rows it is drawn on (a Range's boxes), as a reader sees them.
_UNITS_JS = r"""() => {
  const unit = /\d[\d,.]*(?:[–-]\d[\d,.]*)?\s(?:ms|µs|s|min|MiB|KiB|GiB|MB|GB|%)(?![\w])/g, out = [];
  document.querySelectorAll('.md-content td').forEach(cell => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n; (n = walker.nextNode());) {
      if (n.parentElement.closest('code, .katex')) continue;
      for (const m of n.nodeValue.matchAll(unit)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(b => b.width).map(b => Math.round(b.top)));
        out.push([m[0], tops.size]);
      }
    }
  });
  return out;
}"""


@pytest.mark.skipif("benchmarks/index.html" not in PAGES, reason=NOT_BUILT)
def test_a_number_keeps_its_unit_in_a_table_on_a_phone(browser, server, deadline):  # noqa: F811
    """The benchmarks' tables on a phone (390 px) broke a time from its unit and a range at its dash:
    `487` / `ms`, `248–` / `254` / `ms` (the training-step table). site.js keeps a number, a range
    and its unit on one row in a table's cell (outside code); the column takes their width."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/benchmarks/", wait_until="load")
        found = page.evaluate(_UNITS_JS)
    finally:
        context.close()
    assert len(found) > 50, found
    broken = [text for text, rows in found if rows > 1]
    assert not broken, f"{len(broken)} of {len(found)} numbers split from their unit: {broken[:10]}"


# Each of Material's own icons drawn by a CSS mask on a ::before/::after (the sidebar's arrows, a
# hint's icon and chevron, the copy button, a search result's page icon): the contrast of its colour
# with what lies behind it. Reuses _MARKS_JS's way of stacking backgrounds.
_MASKED_JS = """() => { const out = [];
  const rgba = s => { const v = s.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3]));
  const lum = c => { const [r, g, b] = c.map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  document.querySelectorAll('body *').forEach(el => ['::before', '::after'].forEach(pseudo => {
    const c = getComputedStyle(el, pseudo);
    if (c.content === 'none' || !c.maskImage || c.maskImage === 'none' || !el.getClientRects().length) return;
    let layers = [];
    for (let e = el; e; e = e.parentElement) { const b = rgba(getComputedStyle(e).backgroundColor); if (b[3] > 0) layers.push(b); if (b[3] === 1) break; }
    let back = [255, 255, 255];
    layers.reverse().forEach(l => { back = over(l, back); });
    const icon = over(rgba(c.backgroundColor), back);
    const [hi, lo] = [lum(icon), lum(back)].sort((a, b) => b - a);
    out.push([(el.className.baseVal ?? el.className).split(' ')[0] || el.tagName.toLowerCase(), pseudo, (hi + 0.05) / (lo + 0.05)]);
  }));
  return out; }"""


@pytest.mark.skipif("index.html" not in PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_materials_masked_icons_show_in_forced_colours(browser, server, deadline, scheme):  # noqa: F811
    """Material draws some icons as a ::before/::after masked over its background colour; forced
    colours repaint that background in Canvas, the colour behind it: the sidebar's arrows, a hint's
    icon and chevron (notebook 04), the copy button (annotated source) and a search result's page
    icon all vanished (contrast 1.0). Each now shows at a contrast of 3 at least (labnn.css)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=scheme)
    icons = []
    try:
        page = context.new_page()
        page.emulate_media(forced_colors="active")
        for path in ["notebooks/04_kv_sharing_stack/", "source/feedback/kv/"]:
            page.goto(f"{server}/{path}", wait_until="load")
            icons += [(path, *icon) for icon in page.evaluate(_MASKED_JS)]
        page.click(".md-search__input")
        page.keyboard.type("Stack", delay=10)
        page.wait_for_function("() => document.querySelectorAll('.md-search-result__icon').length > 3",
                               timeout=30_000)
        icons += [("search", *icon) for icon in page.evaluate(_MASKED_JS)]
    finally:
        context.close()
    kinds = {(name, pseudo) for _, name, pseudo, _ in icons}
    assert {("md-nav__icon", "::after"), ("summary", "::after"), ("md-code__button", "::after"),
            ("md-search-result__icon", "::after")} <= kinds, kinds
    faint = sorted({f"{where} {name}{pseudo} at {ratio:.2f}" for where, name, pseudo, ratio in icons if ratio < 3})
    assert not faint, f"{scheme}: {len(faint)} kinds of icon unseen:\n  " + "\n  ".join(faint[:12])
