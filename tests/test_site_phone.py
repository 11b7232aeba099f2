"""Code on a phone (390 px) as a reader follows it, over `$LABNN_SITE_DIR` in headless Chromium (the
fixtures of tests/test_site.py): nesting shown as nesting, a table set in a code block kept in columns.

labnn.css wraps each code line under its own indentation and, on a phone, shows a deep indentation
shallower than it is (the box holds ~37 columns): a line's depth and its wrapped part's must still
say which line belongs to which.
"""

from __future__ import annotations

import pytest
from test_site import NOT_BUILT, PAGES, browser, deadline, server  # noqa: F401 (fixtures)

# Per code line (annotated source, notebook cells): [indentation in columns, x of its first
# character, x where its wrapped part starts (null: one row), the line's text], one list per block.
_LINES_JS = """() => [...document.querySelectorAll('.md-content pre')].map(pre => {
  const width = (() => { const s = document.createElement('span'); s.textContent = '0000000000';
    pre.querySelector('code, .labnn-line, .ann-line')?.append(s); const w = s.getBoundingClientRect().width / 10;
    s.remove(); return w; })();
  return [...pre.querySelectorAll('.labnn-line, .ann-line')].map(line => {
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT), rects = [];
    let first = null;
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (let k = 0; k < node.nodeValue.length; k++) {
        if (/\\s|\\u200b/.test(node.nodeValue[k])) continue;
        const r = document.createRange(); r.setStart(node, k); r.setEnd(node, k + 1);
        const box = r.getBoundingClientRect();
        if (!box.height) continue;
        if (!first) first = box;
        rects.push(box);
      }
    }
    if (!first) return null;
    const wrapped = rects.filter(b => b.top > first.top + first.height / 2);
    const i = parseFloat(line.style.getPropertyValue('--i') || '0');
    return [i, first.left / width, wrapped.length ? Math.min(...wrapped.map(b => b.left)) / width : null,
            line.textContent.trim().slice(0, 50)];
  }).filter(Boolean);
})"""


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("path", ["source/feedback/fused/loop/", "notebooks/05_three_memories/"])
def test_deeper_code_is_shown_deeper_on_a_phone(browser, server, deadline, path):  # noqa: F811
    """At 390 px a line indented past 40 % of the box was shown at 40 %: in
    source/feedback/fused/loop, `raise ValueError(` stood as deep as the `if` it belongs to, and
    under that `if`'s wrapped part. A line indented more than the one before it is shown deeper
    (half a column at least), and a statement after a wrapped one starts apart from its wrapped part."""
    if f"{path}index.html" not in PAGES:
        pytest.skip(f"{path} is not in this site")
    context = browser.new_context(viewport={"width": 390, "height": 900})
    problems = []
    try:
        page = context.new_page()
        page.goto(f"{server}/{path}", wait_until="load")
        for block in page.evaluate(_LINES_JS):
            for (i, x, rows, text), (j, y, _, after) in zip(block, block[1:]):
                if j > i and y < x + 0.5:
                    problems.append(f"{after!r} (indented {j:g}) at column {y:.1f}, not deeper than "
                                    f"{text!r} (indented {i:g}) at {x:.1f}")
                statements = i % 4 == 0 and j % 4 == 0  # not a continuation under a bracket
                if statements and j > i and rows is not None and abs(rows - y) < 0.5:
                    problems.append(f"{after!r} at column {y:.1f}, as deep as the wrapped part of {text!r}")
    finally:
        context.close()
    assert not problems, f"{len(problems)} lines:\n  " + "\n  ".join(problems[:12])


# Each row of a code block laid out in columns, and where a column's text starts on its row.
_COLUMNS_JS = """text => { const pre = [...document.querySelectorAll('.md-content pre')]
    .find(p => p.textContent.includes(text));
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT), chars = [];
  while (walker.nextNode())
    for (let k = 0; k < walker.currentNode.nodeValue.length; k++) {
      const r = document.createRange(); r.setStart(walker.currentNode, k); r.setEnd(walker.currentNode, k + 1);
      const box = r.getBoundingClientRect();
      chars.push([walker.currentNode.nodeValue[k], Math.round(box.top), box.left]);
    }
  const lines = [[]];
  chars.forEach(c => c[0] === '\\n' ? lines.push([]) : lines[lines.length - 1].push(c));
  return lines.filter(l => l.some(c => c[0].trim())).map(l => {
    const shown = l.filter(c => c[0].trim());
    return [l.map(c => c[0]).join(''), new Set(shown.map(c => c[1])).size, l.map(c => c[2])];
  });
}"""


@pytest.mark.skipif("api/feedback/kv/index.html" not in PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("path", ["api/feedback/kv/", "source/feedback/kv/"])
def test_a_table_in_a_code_block_keeps_its_columns_on_a_phone(browser, server, deadline, path):  # noqa: F811
    """The state_dict of labnn.feedback.kv, set in columns in its docstring, wrapped at 390 px: a
    row's second column fell under its first (`mix.logits` / `[L+1]`), and `keys = first D ...`,
    indented 34 columns to stand under `ONE projection`, started at 40 % of the box and read as a
    line of its own. Each row stays one row (the block scrolls sideways in its box) and the
    continuation stands under its column."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/{path}", wait_until="load")
        lines = page.evaluate(_COLUMNS_JS, "embed.weight [V, D]")
    finally:
        context.close()
    split = [text.strip() for text, rows, _ in lines if rows > 1]
    assert not split, f"{len(split)} rows wrapped: {split[:4]}"
    row = next((text, lefts) for text, _, lefts in lines if "ONE projection" in text)
    keys = next((text, lefts) for text, _, lefts in lines if text.strip().startswith("keys ="))
    assert keys[0].index("keys") == row[0].index("ONE"), "the docstring's columns changed: update this test"
    one, under = row[1][row[0].index("ONE")], keys[1][keys[0].index("keys")]
    assert abs(under - one) < 1, f"`keys = ...` starts at {under:.0f} px, its column `ONE ...` at {one:.0f} px"


@pytest.mark.skipif("gpu/index.html" not in PAGES, reason=NOT_BUILT)
def test_highlighted_code_is_no_table_on_a_phone(browser, server, deadline):  # noqa: F811
    """Only plain text is set in columns: gpu/'s shell block (`make test-gpu    # 570 s in all`,
    comments aligned) was taken for a table, kept its rows whole and cut its comment off at the
    box's edge (it scrolled sideways); highlighted code wraps under its indentation."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/gpu/", wait_until="load")
        pre = page.locator(".md-content pre", has_text="570 s in all").first
        marked, over = pre.evaluate("""p => [p.classList.contains('labnn-columns'),
            [p, p.querySelector('code')].some(e => e.scrollWidth > e.clientWidth + 1)]""")
    finally:
        context.close()
    assert not marked and not over, f"in columns: {marked}, scrolls sideways: {over}"


# Each break between two rows of a code line that falls between two letters or digits of a name
# holding a `_`, `.`, `=`, `(` or `,`, or two CamelCase words: there it could have broken at one.
_MID_NAME_JS = """() => [...document.querySelectorAll('.md-content .labnn-line, .md-content .ann-line')]
  .flatMap(line => {
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT), chars = [];
    while (walker.nextNode())
      for (let k = 0; k < walker.currentNode.nodeValue.length; k++) {
        const r = document.createRange(); r.setStart(walker.currentNode, k); r.setEnd(walker.currentNode, k + 1);
        const box = r.getBoundingClientRect();
        if (box.height) chars.push([walker.currentNode.nodeValue[k], box.top]);
      }
    const text = chars.map(c => c[0]).join(''), found = [];
    for (let k = 1; k < chars.length; k++) {
      if (chars[k][1] < chars[k - 1][1] + 5 || !/[A-Za-z0-9]{2}/.test(text.slice(k - 1, k + 1))) continue;
      if (/[a-z][A-Z]/.test(text.slice(k - 1, k + 1))) continue;
      const name = (text.slice(0, k).match(/\\S*$/)[0] + text.slice(k).match(/^\\S*/)[0]);
      if (/[_.=(,]\\w|[a-z][A-Z]/.test(name)) found.push(text.slice(0, k).match(/\\S*$/)[0] + ' / ' + text.slice(k).match(/^\\S*/)[0]);
    }
    return found;
  })"""


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
@pytest.mark.parametrize("path", ["source/exercises/grading/isolation/",
                                  "source/exercises/self_attention/multi_head_order_slips/",
                                  "notebooks/04_kv_sharing_stack/"])
def test_long_names_break_between_their_parts_on_a_phone(browser, server, deadline, path):  # noqa: F811
    """At 390 px a name longer than a code line's row broke between two letters: 351 times on 109
    pages (isolation: `torch.are_determinist` / `ic_algorithms_enabled()`). It breaks after a `_`,
    `.`, `=`, `(` or `,`, or between two CamelCase words (site.js's <wbr>, on phones only)."""
    if f"{path}index.html" not in PAGES:
        pytest.skip(f"{path} is not in this site")
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/{path}", wait_until="load")
        broken = page.evaluate(_MID_NAME_JS)
    finally:
        context.close()
    assert not broken, f"{len(broken)} names broken between two letters: {broken[:6]}"


@pytest.mark.skipif(not PAGES, reason=NOT_BUILT)
def test_names_in_code_get_no_breaks_on_a_wide_screen(browser, server, deadline):  # noqa: F811
    """The <wbr> inside long names are a phone's: at 1400 px a code line wraps as it did."""
    path = "source/exercises/grading/isolation/"
    if f"{path}index.html" not in PAGES:
        pytest.skip(f"{path} is not in this site")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/{path}", wait_until="load")
        shown = page.evaluate("""() => [...document.querySelectorAll('wbr.labnn-code-break')]
            .filter(w => getComputedStyle(w).display !== 'none').length""")
    finally:
        context.close()
    assert not shown, f"{shown} breaks inside names at 1400 px"
