"""The notebooks' interactive figures on the built site, as a reader uses them (headless Chromium, the
fixtures of tests/test_site.py, over `$LABNN_SITE_DIR`).

On every notebook page: at least one figure (`div.labnn-interactive`, labnn.plot.interactive); each
one drawn (its script ran); a key press on its slider (ArrowRight, or ArrowLeft at the end) and a click
on its ▶ / ◀ button move it one frame; after each move the SVG differs, the caption and the position
read what the figure's own JSON holds for that frame, and the cells drawn carry exactly that frame's
values. At 390 px every figure fits its column; in the dark scheme it draws with its lighter fill.
Screenshots of each figure (1400 px light and dark, 390 px) go to `.cache/site-report/interactive/`.
`test_weight_budgets`: each figure <= 1.5 MB in its page, a notebook page <= 6 MB, the site <= 36.5 MB,
an annotated source page 95 KB and an API page 55 KB on average.
"""

from __future__ import annotations

import re

import pytest
from test_site import PAGES, REPORT, SITE, browser, deadline, server  # noqa: F401 (fixtures)

NOTEBOOKS = [p for p in PAGES if p.startswith(("notebooks/", "zh/notebooks/"))
             and not p.endswith("notebooks/index.html")]  # the Chinese pages carry the figures too
SHOTS = REPORT / "interactive"

# The state of figure k: what the reader sees, and what its JSON says that frame should show.
_STATE_JS = """root => {
  const spec = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  const k = +root.querySelector("input[type=range]").value, f = spec.frames[k];
  const expected = [];
  spec.panels.forEach((p, i) => {
    const values = (f.values && f.values[i]) || p.values;
    values.forEach(row => row.forEach(v => expected.push(String(v))));
  });
  const svg = root.querySelector("[data-role=svg] svg");
  return {k, n: spec.frames.length, frame: root.getAttribute("data-frame"),
          svg: svg ? svg.outerHTML : "", caption: root.querySelector("[data-role=caption]").textContent,
          want_caption: f.caption, label: root.querySelector("output").textContent, want_label: f.label,
          cells: svg ? Array.from(svg.querySelectorAll("rect[data-v]")).map(r => r.getAttribute("data-v")) : [],
          want_cells: expected,
          fill: svg ? (svg.querySelector("rect[data-v][fill-opacity]") || {getAttribute: () => ""})
                        .getAttribute("fill") : "",
          overflow: root.scrollWidth - root.clientWidth,
          smallest: svg ? Math.min(...Array.from(svg.querySelectorAll("text"))
                                   .map(t => +t.getAttribute("font-size"))) : 0};
}"""


def _name(path: str) -> str:
    return path.removesuffix("/index.html").replace("notebooks/", "").replace("/", "-")


def _check(state: dict, where: str) -> list[str]:
    problems = []
    if state["frame"] != str(state["k"]):
        problems.append(f"{where}: drawn frame {state['frame']}, slider at {state['k']}")
    if state["caption"] != state["want_caption"]:
        problems.append(f"{where}: caption {state['caption'][:80]!r}, expected {state['want_caption'][:80]!r}")
    if state["label"] != state["want_label"]:
        problems.append(f"{where}: position reads {state['label']!r}, expected {state['want_label']!r}")
    if state["cells"] != state["want_cells"]:
        diff = next(i for i, (a, b) in enumerate(zip(state["cells"] + [None], state["want_cells"] + [None])) if a != b)
        problems.append(f"{where}: cell {diff} shows {state['cells'][diff:diff + 3]}, "
                        f"the frame holds {state['want_cells'][diff:diff + 3]}")
    return problems


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_every_control_moves_its_figure(browser, server, deadline):  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    problems, counted = [], {}
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        page = context.new_page()
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        for path in NOTEBOOKS:
            page.goto(f"{server}/{path}".removesuffix("index.html"), wait_until="load")
            figures = page.locator("div.labnn-interactive")
            counted[path] = figures.count()
            for i in range(figures.count()):
                root, where = figures.nth(i), f"{path} figure {i}"
                root.scroll_into_view_if_needed()
                before = root.evaluate(_STATE_JS)
                if not before["svg"]:
                    problems.append(f"{where}: not drawn (did its script run?)")
                    continue
                problems += _check(before, where)
                key, step = ("ArrowRight", 1) if before["k"] < before["n"] - 1 else ("ArrowLeft", -1)
                root.locator("input[type=range]").focus()
                page.keyboard.press(key)
                after = root.evaluate(_STATE_JS)
                if after["k"] != before["k"] + step:
                    problems.append(f"{where}: {key} moved the slider from {before['k']} to {after['k']}")
                if after["svg"] == before["svg"]:
                    problems.append(f"{where}: {key} left the figure as it was")
                problems += _check(after, f"{where} after {key}")
                root.locator(f"button[data-step='{-step}']").click()  # and back, by the button
                back = root.evaluate(_STATE_JS)
                if back["k"] != before["k"] or back["svg"] != before["svg"]:
                    problems.append(f"{where}: the button did not bring back frame {before['k']}")
                problems += _check(back, f"{where} after the button")
                root.screenshot(path=str(SHOTS / f"{_name(path)}-{i}-1400.png"))
            page.set_viewport_size({"width": 390, "height": 900})
            for i in range(figures.count()):
                state = figures.nth(i).evaluate(_STATE_JS)
                if state["overflow"] > 1:
                    problems.append(f"{path} figure {i}: {state['overflow']} px wider than its column at 390 px")
                problems += _check(state, f"{path} figure {i} at 390 px")
                # 02's reachable positions: every other column numbered, at 6 px (a program's
                # tokens, every one labelled, stay at 6.5 px or more)
                if state["smallest"] < 6.5:
                    problems.append(f"{path} figure {i}: {state['smallest']:.1f} px text at 390 px")
                figures.nth(i).screenshot(path=str(SHOTS / f"{_name(path)}-{i}-390.png"))
            page.set_viewport_size({"width": 1400, "height": 1000})
    finally:
        context.close()
    problems += [f"{p}: no interactive figure" for p, n in counted.items() if n < 1]
    assert not problems, "\n  ".join(problems)


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_dark_scheme(browser, server, deadline):  # noqa: F811
    """In the dark scheme the figures draw in the page's light text colour with their lighter fill."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
    problems = []
    try:
        page = context.new_page()
        for path in NOTEBOOKS:
            page.goto(f"{server}/{path}".removesuffix("index.html"), wait_until="load")
            figures = page.locator("div.labnn-interactive")
            for i in range(figures.count()):
                state = figures.nth(i).evaluate(_STATE_JS)
                if state["fill"] != "#8c9eff":
                    problems.append(f"{path} figure {i}: fill {state['fill']!r} in the dark scheme")
                figures.nth(i).screenshot(path=str(SHOTS / f"{_name(path)}-{i}-dark.png"))
    finally:
        context.close()
    assert not problems, "\n  ".join(problems)


FIGURE_BUDGET, PAGE_BUDGET = 1.5e6, 6e6  # bytes (issue 30)
# The site: 40 MB in issue 30, 39.5 MB built on 8852ebd; 37.0 MB once the annotated code lost its
# spans that nothing styles and the theme its unused lunr languages. A checker module adds ~0.15 MB
# (its source and API pages, their search entries, an entry in its neighbours' menus). 35.7 MB once
# the line numbers were a CSS counter and the repository and palette icons masks in labnn.css
# (37.5 MB before, built on 6c255f9): 37 MB leaves the margin 38 MB left, ~8 checker modules.
# 35.29 MB once Material's other icons in every page were masks too (35.76 MB before, built on
# 1bf202d): 36.5 MB keeps that margin, 1.2 MB.
SITE_BUDGET = 36.5e6
# Mean bytes of a page of a kind (82.9 KB and 47.7 KB on 2026-11-29; 77.7 KB and 45.9 KB without
# the line numbers' elements and the inline icons): a kind over its budget grew in its markup (spans
# or numbers back in the code, mkdocstrings' `show_source`...), not by having more pages.
KIND_BUDGETS = {"source": 89e3, "api": 53e3}


def figure_bytes(html: str) -> list[int]:
    """The bytes of each interactive figure in a built page (its div, data and script)."""
    return [len(m.encode()) for m in
            re.findall(r'<div class="labnn-interactive".*?</script></div>', html, flags=re.DOTALL)]


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_weight_budgets():
    """Each figure <= 1.5 MB in its page, each notebook page <= 6 MB, the whole site <= 36.5 MB, the
    pages of the annotated source and of the API reference within their mean weights."""
    problems = []
    for path in NOTEBOOKS:
        page = SITE / path
        for i, n in enumerate(figure_bytes(page.read_text(encoding="utf-8"))):
            if n > FIGURE_BUDGET:
                problems.append(f"{path} figure {i}: {n:,} bytes")
        if page.stat().st_size > PAGE_BUDGET:
            problems.append(f"{path}: {page.stat().st_size:,} bytes")
    total = sum(f.stat().st_size for f in SITE.rglob("*") if f.is_file())
    if total > SITE_BUDGET:
        problems.append(f"the site: {total:,} bytes")
    for kind, budget in KIND_BUDGETS.items():
        sizes = [p.stat().st_size for p in (SITE / kind).rglob("index.html")]
        if not sizes or sum(sizes) / len(sizes) > budget:
            problems.append(f"{kind}/: {len(sizes)} pages, {sum(sizes) / max(len(sizes), 1):,.0f} bytes each")
    assert not problems, "over budget:\n  " + "\n  ".join(problems)


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_no_source_maps_in_the_site():
    """The theme's source maps (1.2 MB, for a browser's developer tools only) are left out of
    the site, and no script points to one."""
    maps = sorted(str(p.relative_to(SITE)) for p in SITE.rglob("*.map"))
    pointing = sorted(str(p.relative_to(SITE)) for p in SITE.rglob("*.js")
                      if "sourceMappingURL=" in p.read_text(encoding="utf-8", errors="replace"))
    assert not maps and not pointing, f"source maps {maps}; scripts pointing to one {pointing}"


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_the_copy_button_copies_the_code_as_written(browser, server, deadline):  # noqa: F811
    """Material's copy button copies a code block's `innerText`; each annotated source line is a
    block (labnn.css) holding its own line break, so every line came with a blank line after it
    (`from __future__ import annotations\\n\\n\\n\\nimport math`). While Material copies
    (`[data-md-copying]`, as it hides its own annotations) the lines are inline: the code as written."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                  permissions=["clipboard-read", "clipboard-write"])
    problems = []
    try:
        page = context.new_page()
        for path in ("source/feedback/layer/", "source/xl/relative_attention/", "index.html"):
            page.goto(f"{server}/{path}", wait_until="load")
            button = page.locator(".md-content .md-code__button[data-md-type=copy]").first
            code = page.eval_on_selector(button.get_attribute("data-clipboard-target"),
                                         "el => el.textContent.trimEnd()")
            button.scroll_into_view_if_needed()
            button.click()
            copied = page.evaluate("navigator.clipboard.readText()")
            if copied != code:
                problems.append(f"{path}: copied {copied[:120]!r}, the code {code[:120]!r}")
    finally:
        context.close()
    assert not problems, "\n  ".join(problems)


# The start of each row of a Markdown code block that continues a wrapped line at column 0 (390 px).
_WRAPS_JS = """() => {
  const out = [];
  for (const code of document.querySelectorAll(".md-content .highlight pre > code")) {
    if (code.closest(".ann-code")) continue;
    const style = getComputedStyle(code);
    const column0 = code.getBoundingClientRect().left + parseFloat(style.paddingLeft) + 1;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    let start = null, top = null, line = "";
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (let k = 0; k < node.nodeValue.length; k++) {
        const ch = node.nodeValue[k];
        if (ch === "\\n") { start = null; line = ""; continue; }
        line += ch;
        if (!ch.trim()) continue;
        const r = document.createRange(); r.setStart(node, k); r.setEnd(node, k + 1);
        const box = r.getBoundingClientRect();
        if (start === null) { start = box.left; top = box.top; continue; }
        if (box.top > top + box.height / 2) {  // a new row of the same source line
          if (box.left <= column0) out.push(line.trim().slice(0, 60));
          top = box.top;
        }
      }
    }
  }
  return out;
}"""


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_a_wrapped_code_line_on_a_phone_starts_right_of_its_line(browser, server, deadline):  # noqa: F811
    """On a phone a long line of a page's own code block (not a notebook cell, not annotated source)
    wrapped to column 0, and its rest read as a command of its own (gpu/: `~/.cache/labnn/...txt`
    under `mkdir -p corpus && cp`); it wraps under its own indentation + 4 columns, as notebook
    cells and annotated source do (site.js, labnn.css)."""
    problems = _on_phone_code_pages(browser, server, _WRAPS_JS)
    assert not problems, "rows of a wrapped code line at column 0:\n  " + "\n  ".join(problems)


def _on_phone_code_pages(browser, server, js: str) -> list[str]:
    """What `js` finds on each page whose own code blocks wrap on a phone (390 px), by page."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    found = []
    try:
        page = context.new_page()
        for path in ("index.html", "gpu/", "benchmarks/", "distributed/", "compatibility/"):
            page.goto(f"{server}/{path}", wait_until="load")
            found += [f"{path}: {item!r}" for item in page.evaluate(js)]
    finally:
        context.close()
    return found


# Each row break inside a word of a page's own code block (390 px): the word and the row it ends.
_MID_WORD_JS = """() => {
  const out = [];
  for (const code of document.querySelectorAll(".md-content .highlight pre > code")) {
    if (code.closest(".ann-code")) continue;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    let top = null, line = "", prev = "";
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (let k = 0; k < node.nodeValue.length; k++) {
        const ch = node.nodeValue[k];
        if (ch === "\\n") { top = null; line = ""; prev = ""; continue; }
        line += ch;
        if (!ch.trim()) { prev = ch; continue; }
        const r = document.createRange(); r.setStart(node, k); r.setEnd(node, k + 1);
        const box = r.getBoundingClientRect();
        if (top !== null && box.top > top + box.height / 2) {  // a new row of the same source line
          const word = line.slice(0, -1).match(/\\S*$/)[0];
          if (/\\w/.test(prev) && /\\w/.test(ch) && word.includes("/")) out.push(word + " | " + ch);
        }
        if (top === null || box.top > top + box.height / 2) top = box.top;
        prev = ch;
      }
    }
  }
  return out;
}"""


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_a_wrapped_path_on_a_phone_breaks_after_a_slash(browser, server, deadline):  # noqa: F811
    """On a phone gpu/'s wheelhouse command cut its index URL inside a word (`.../whl/cu12` over
    `8`), which read as a CUDA 12 index and an `8`; a path or URL too long for its row now
    breaks after one of its `/` (site.js), never between two letters or digits of it."""
    problems = _on_phone_code_pages(browser, server, _MID_WORD_JS)
    assert not problems, "a path cut between two letters (word so far | next letter):\n  " + \
        "\n  ".join(problems)


# Each row of a wrapped code line that starts off its place (390 px): a line shows its indentation
# up to 40 % of its box (after annotated source's 6-column gutter), and its wrapped rows hang 2
# columns further in (labnn.css).
_HANG_JS = """() => {
  const out = [];
  for (const line of document.querySelectorAll(".md-content :is(.ann-line, .labnn-line)")) {
    const box = line.getBoundingClientRect();
    if (!box.width || line.closest(".jp-OutputArea-output")) continue;
    const text = line.textContent, indent = text.match(/^ */)[0].length;
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT), c = document.createRange();
    let at = 0, top = null, cw = 0, rows = [];
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (let k = 0; k < node.nodeValue.length; k++, at++) {
        if (!/[^\\s\\u200b]/.test(node.nodeValue[k])) continue;
        c.setStart(node, k); c.setEnd(node, k + 1);
        const r = c.getBoundingClientRect();
        if (!r.width) continue;
        cw = cw || r.width;
        if (top === null || r.top > top + r.height / 2) { rows.push([r.left, at]); top = r.top; }
      }
    }
    if (!cw || rows.length < 2 && !indent) continue;
    const gutter = line.classList.contains("ann-line") ? 6 * cw : 0;
    const shown = Math.min(indent * cw, 0.25 * box.width + indent * cw / 4, 0.4 * box.width);
    rows.forEach(([left, k], row) => {
      const want = box.left + gutter + shown + (row ? 2 * cw : 0);
      if (Math.abs(left - want) > 1.5)
        out.push(`${row ? "wrapped row" : "first row"} at column ${((left - box.left - gutter) / cw)
          .toFixed(1)}, not ${((want - box.left - gutter) / cw).toFixed(1)} (indentation ${indent}): `
          + text.slice(Math.max(indent, k - 30), k + 20).trim());
    });
  }
  return out;
}"""


@pytest.mark.skipif(not NOTEBOOKS, reason="the site was not built (see tests/test_site.py)")
def test_a_wrapped_code_line_on_a_phone_hangs_under_its_own_indentation(browser, server, deadline):  # noqa: F811
    """On a phone every wrapped code line continued 4 columns into the code, whatever its
    indentation: in notebook 01 a line indented 8 went on at column 4, left of its own code, and a
    line indented 12 was shown at 8, as deep as the line it continues (annotated source and page
    code blocks alike). Each line shows its indentation (past a third of its box counting a
    quarter, 40 % of its box at most: labnn.css) and its wrapped rows hang 2 columns further in (4
    on a wide screen)."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    problems = []
    try:
        page = context.new_page()
        for path in ("notebooks/01_attention/", "source/feedback/layer/", "gpu/"):
            page.goto(f"{server}/{path}", wait_until="load")
            problems += [f"{path}: {item}" for item in page.evaluate(_HANG_JS)]
    finally:
        context.close()
    assert not problems, f"{len(problems)} rows off their place:\n  " + "\n  ".join(problems[:12])
