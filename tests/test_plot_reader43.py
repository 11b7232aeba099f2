"""Issue 43, a reader of the built site (headless Chromium) on labnn's figures.

1. Alt texts came from the source code of the titles: `title=f"last layer, head {head}"` read
   "last layer, head (head)", and the two figures of one cell shared one alt text. A figure now
   carries its alt text from its drawn titles and labels (`labnn.plot.alt`, as the output's
   `alt` metadata), which the site hook uses; its fallback drops unfilled placeholders.
2. Notebook 05's cost widget wrote a cache of 1,024 KiB as "1.02e+03".
3. Notebook 03's token-loop widget labelled every other column of a program of tokens.
4. `attention_heads` had no colour bar, and long sequences' y-tick characters overlapped.
"""

import base64
import json
import math
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from labnn import plot  # noqa: E402
from labnn.plot import alt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# 1. alt texts ---------------------------------------------------------------------------------

def test_alt_text_is_the_drawn_title_not_its_source():
    texts = []
    for head in (1, 3):
        fig, ax = plt.subplots()
        plot.attention_heatmap(torch.rand(4, 4), "abcd", "abcd", ax=ax,
                               title=f"last layer, head {head}")
        texts.append(alt.figure_alt(fig))
    assert "last layer, head 1" in texts[0] and "last layer, head 3" in texts[1]
    assert texts[0] != texts[1]
    assert "(head)" not in texts[0] and "{" not in texts[0]
    assert "key (attended to)" in texts[0] and "query (attending)" in texts[0]


def test_alt_text_reads_mathtext_as_words_and_has_suptitle_and_every_panel():
    fig = plot.attention_heads(torch.rand(2, 3, 3), "abc", "abc", title="layer 0, every head")
    text = alt.figure_alt(fig)
    assert text.startswith("Figure: layer 0, every head")
    assert "head 0" in text and "head 1" in text
    fig2, ax = plt.subplots()
    ax.set_title(r"dot products $x_i \cdot x_j$")
    assert alt.figure_alt(fig2) == "Figure: dot products x_i · x_j"
    assert alt.figure_alt(plt.figure()) == ""  # nothing drawn in words: no alt of our own


class _Events:
    def __init__(self):
        self.callbacks = []

    def register(self, event, callback):
        self.callbacks.append((event, callback))


class _Shell:
    def __init__(self, formatter):
        self.display_formatter = type("D", (), {"formatters": {"image/png": formatter}})()
        self.events = _Events()


def test_the_png_formatter_gives_each_figure_its_alt_text():
    from IPython.core.formatters import PNGFormatter
    from matplotlib.figure import Figure

    formatter = PNGFormatter()
    formatter.for_type(Figure, lambda fig: b"\x89PNG")
    shell = _Shell(formatter)
    assert alt.install(shell)
    assert alt.install(shell)  # twice: wrapped once
    fig, ax = plt.subplots()
    ax.set(title="Cache after 16 tokens", ylabel="KiB")
    data, metadata = formatter(fig)
    assert data == b"\x89PNG"
    assert metadata == {"alt": "Figure: Cache after 16 tokens; KiB"}
    # a backend set up again (%matplotlib inline) replaces the formatter: each cell wraps it again
    formatter.for_type(Figure, lambda fig: b"\x89PNG")
    (event, again), = shell.events.callbacks
    assert event == "pre_run_cell"
    again()
    assert formatter(fig)[1]["alt"] == "Figure: Cache after 16 tokens; KiB"


def _hook():
    pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import notebooks  # noqa: PLC0415

    return notebooks


def _cell(code: str, images: list[bytes]) -> str:
    imgs = "".join(f'<img alt="No description has been provided for this image" class="" '
                   f'src="data:image/png;base64,{base64.b64encode(i).decode()}"/>' for i in images)
    return (f'<div class="jp-Cell jp-CodeCell"><div class="highlight-ipynb hl-python">'
            f'<pre>{code}</pre></div><div class="jp-OutputArea">{imgs}</div></div>')


def test_site_hook_takes_each_figures_own_alt_text(tmp_path):
    notebooks = _hook()
    code = 'plot.attention_heatmap(w, title=f&quot;last layer, head {head}&quot;)'
    page = _cell(code, [b"one", b"two"])
    outputs = [{"output_type": "display_data", "data": {"image/png": base64.encodebytes(png)
                                                          .decode()},
                "metadata": {"image/png": {"alt": f"Figure: last layer, head {k}"}}}
               for k, png in ((2, b"one"), (5, b"two"))]
    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "", "outputs": outputs,
                                         "metadata": {}}]}))
    out = notebooks._alt_texts(page, notebooks._figure_alts(nb))
    assert 'alt="Figure: last layer, head 2"' in out and 'alt="Figure: last layer, head 5"' in out


def test_site_hook_fallback_has_no_placeholder_and_no_shared_alt():
    notebooks = _hook()
    code = ('fig = plot.attention_heads(m, title=&quot;layer 0, every head&quot;)\n'
            'plot.attention_heatmap(w, title=f&quot;last layer, head {head}&quot;)')
    out = notebooks._alt_texts(_cell(code, [b"one", b"two"]))
    alts = [a.split('"')[0] for a in out.split('alt="')[1:]]
    assert len(alts) == 2 and alts[0] != alts[1], alts
    assert all("(head)" not in a and "{" not in a for a in alts), alts
    assert all("layer 0, every head" in a for a in alts), alts


# 2. numbers in the widgets ----------------------------------------------------------------------

def test_widget_numbers_are_never_in_e_notation():
    acc = {"window": [1.0, 0.1], "XL": [1.0, 0.9], "feedback": [1.0, 1.0]}
    reach = {"window": (1, 1), "XL": (1, 2), "feedback": (math.inf, math.inf)}
    costs = {"window": {"train ms/step": 12.3456, "cache KiB": 1024.0, "decode ms": 0.4567},
             "XL": {"train ms/step": 1234.5, "cache KiB": 1536.0, "decode ms": 0.0123},
             "feedback": {"train ms/step": 99.96, "cache KiB": 256.0, "decode ms": 3.0}}
    fig = plot.memory_steps(acc, reach, costs)
    cells = fig.panels[1]["cells"]
    assert cells[0] == ["12.3", "1,024", "0.457"]
    assert cells[1] == ["1,234", "1,536", "0.0123"]
    assert cells[2] == ["100", "256", "3"]
    assert not any("e" in c for row in cells for c in row)


# 4. attention_heads: colour bar, readable ticks ---------------------------------------------

def _overlaps(labels) -> list:
    boxes = sorted((t.get_window_extent() for t in labels if t.get_visible() and t.get_text()),
                   key=lambda b: b.y0)
    return [(a, b) for a, b in zip(boxes, boxes[1:]) if b.y0 < a.y1 - 0.5]


@pytest.mark.parametrize("n", [27, 80])
def test_attention_heads_share_one_colour_bar_and_ticks_do_not_overlap(n):
    line = ("HAMLET:\nTo be, or not to be, that is the question: whether 'tis nobler in "
            "the mind to suffer")[:n]
    weights = torch.rand(4, n, n).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    fig = plot.attention_heads(weights, line, line, ncols=2, title="layer 0, every head")
    fig.canvas.draw()
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1
    assert bars[0].get_ylim() == pytest.approx((0.0, 1.0))
    assert {im.get_clim() for ax in fig.axes for im in ax.images} == {(0.0, 1.0)}
    for ax in fig.axes[:4]:
        assert not _overlaps(ax.get_yticklabels()), n
    ticks = fig.axes[0].get_yticklabels()
    shown = [t for t in ticks if t.get_visible() and t.get_text()]
    assert min(t.get_fontsize() for t in shown) >= 7
    if n == 27:
        assert len(shown) == n  # every character of a short line


# 3. every column of a program labelled ------------------------------------------------------

PROGRAM = ("a = 4 ; b = 2 ; if a < b : a ++ ; print a ; b = a ; if b > 3 : b -- ; "
           "print b ; a = 1 ; print a").split()


def _column_labels(html: str, width: int) -> list[dict]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the docs extra")
    chromium = Path(os.environ.get("LABNN_CHROMIUM", "/usr/bin/chromium"))
    if not chromium.exists():
        pytest.skip(f"no Chromium at {chromium}")
    with sync_api.sync_playwright() as manager:
        browser = manager.chromium.launch(executable_path=str(chromium), headless=True,
                                          args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.set_content(f"<!doctype html><body style='margin:0'>{html}</body>")
            page.wait_for_selector("[data-role=svg] svg")
            return page.evaluate("""cols => Array.from(document.querySelectorAll("svg text"))
                .filter(t => cols.includes(t.textContent))
                .map(t => { const b = t.getBoundingClientRect();
                            return {text: t.textContent, left: b.left, right: b.right}; })""",
                                 sorted(set(PROGRAM)))
        finally:
            browser.close()


@pytest.mark.parametrize("width", [760, 390])
def test_every_column_of_a_program_is_labelled(width):
    n = len(PROGRAM)
    panel = {"title": "layer 1: weights on the memory vectors of earlier steps", "cols": PROGRAM,
             "rows": ["head 0", "head 1"]}
    frames = [{"caption": f"step {t}", "values": {0: [[0.5] * n, [0.25] * n]}, "hl": {0: [t]}}
              for t in range(n)]
    html = plot.InteractiveFigure("The token loop", [panel], frames)._repr_html_()
    labels = sorted(_column_labels(html, width), key=lambda b: b["left"])
    assert [b["text"] for b in labels] == PROGRAM  # every token, in order
    clashes = [(a["text"], b["text"]) for a, b in zip(labels, labels[1:])
               if b["left"] < a["right"] - 0.5]
    assert not clashes
