r"""Figures a learner can move: a slider steps through frames, with no kernel and no server.

A figure is panels of cells (rows x columns: attention weights, reachable positions, buffer
slots), and one frame per position of a slider. Each frame may replace a panel's values,
outline some of its columns and says in words what it shows (its caption, e.g. "query 5 ->
key 3: weight 0.41"). `InteractiveFigure._repr_html_` writes one `<div>` holding the frames
as JSON (numbers rounded), a range slider with step buttons, the caption and the drawing
code (`interactive.js`, ~7 KB, inline): Jupyter, Colab and the built site run the script of
an HTML output, and the site's offline test covers the pages. Still fallback: the caption of
the first frame and the figure's description are HTML text (search, no JavaScript, a notebook
opened untrusted, which runs no output script, says to run the cell), and each notebook keeps
its Matplotlib figures.

Why this mechanism (measured with `benchmarks/interactive_cost.py`: notebook 01's figure for a
4-layer, 4-head model, 27 query positions of 16 rows x 27 keys): this renderer's output is
~81 KB (73 KB of JSON data, ~8 KB of code and markup; ~48 KB for the 2-layer model of the fast
run), drawn as vector graphics at the width of its column (readable at 390 px and 1,400 px), in
the page's text colour (light and dark schemes), with a keyboard-operable `<input type=range>`,
an accessible name and a live caption. Matplotlib's own player,
`FuncAnimation(...).to_jshtml()`, embeds one PNG per frame: 535 KB for the same 27 frames at
100 dpi, fixed pixels on a white background (unreadable when shrunk to a phone, a white box in
the dark scheme), with no text for a screen reader or the search. A bundled plotting library
would be a new dependency and a script every notebook page loads (by their published sizes,
not measured here: plotly.js several MB minified, Vega + Vega-Lite + vega-embed about 0.8 MB).
So: no new dependency, a few tens of KB per figure.

The five figures of the notebooks are built by `labnn.plot.scenes` and `labnn.plot.loops` on
top of `InteractiveFigure`; build your own from dicts (see `InteractiveFigure`).
"""

from __future__ import annotations

import html
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

_SCRIPT = (Path(__file__).with_name("interactive.js")).read_text(encoding="utf-8")
_STYLE = "color:inherit;max-width:100%;margin:0.5em 0"
_BUTTON = ("font:inherit;color:inherit;background:transparent;border:1px solid currentColor;"
           "border-radius:4px;min-width:2.2em;min-height:2em;cursor:pointer")


def _number(value, name: str):
    """`value` rounded for the JSON (None stays None: an empty cell)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # a numpy or torch scalar
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold numbers or None, "
                            f"got {type(value).__name__}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must hold finite numbers or None, got {value!r}")
    if value < 0:  # drawn as shades of 0 .. scale: a negative one would look like 0
        raise ValueError(f"{name} must hold numbers >= 0 (shades from 0 to the panel's "
                         f"scale) or None, got {value!r}: shift or rescale them first")
    return round(float(value), 3)


def _grid(values, n_rows: int, n_cols: int, name: str) -> list[list]:
    """A rows x columns list of rounded numbers (or None) from nested sequences."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, Sequence) or len(values) != n_rows:
        got = len(values) if isinstance(values, Sequence) else type(values).__name__
        raise ValueError(f"{name} must have {n_rows} rows (one per row label), got {got}")
    out = []
    for r, row in enumerate(values):
        if not isinstance(row, Sequence) or len(row) != n_cols:
            raise ValueError(f"{name}[{r}] must have {n_cols} entries (one per column label)")
        out.append([_number(v, name) for v in row])
    return out


def _labels(labels, name: str) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence) or not labels:
        raise TypeError(f"{name} must be a non-empty list of labels, got {labels!r}")
    return [str(label) for label in labels]


def _check_panel(panel, i: int) -> dict:
    if not isinstance(panel, Mapping):
        raise TypeError(f"panels[{i}] must be a dict, got {type(panel).__name__}")
    rows = _labels(panel.get("rows"), f"panels[{i}]['rows']")
    cols = _labels(panel.get("cols"), f"panels[{i}]['cols']")
    out = {"title": str(panel.get("title", "")), "rows": rows, "cols": cols,
           "text": bool(panel.get("text", False)), "digits": int(panel.get("digits", 2)),
           "scale": float(panel.get("scale", 1.0))}
    if not out["scale"] > 0:
        raise ValueError(f"panels[{i}]['scale'] must be positive, got {panel.get('scale')!r}")
    if panel.get("values") is not None:
        out["values"] = _grid(panel["values"], len(rows), len(cols), f"panels[{i}]['values']")
    if panel.get("struck") is not None:
        struck = _grid(panel["struck"], len(rows), len(cols), f"panels[{i}]['struck']")
        out["struck"] = [[int(bool(v)) for v in row] for row in struck]
    if panel.get("sep"):  # columns before which a line is drawn (e.g. segment starts)
        out["sep"] = [int(j) for j in panel["sep"]]
    if panel.get("cells") is not None:  # text written in the cells instead of the values
        cells = panel["cells"]
        if len(cells) != len(rows) or any(len(r) != len(cols) for r in cells):
            raise ValueError(f"panels[{i}]['cells'] must be {len(rows)} x {len(cols)} strings")
        out["cells"], out["text"] = [[str(c) for c in row] for row in cells], True
    return out


def _check_frame(frame, k: int, panels: list[dict]) -> dict:
    if not isinstance(frame, Mapping):
        raise TypeError(f"frames[{k}] must be a dict, got {type(frame).__name__}")
    caption = frame.get("caption")
    if not isinstance(caption, str) or not caption.strip():
        raise ValueError(f"frames[{k}]['caption'] must say in words what the frame shows")
    out = {"label": str(frame.get("label", k)), "caption": caption, "values": {}, "hl": {}}
    for i, values in dict(frame.get("values") or {}).items():
        if not (isinstance(i, int) and 0 <= i < len(panels)):
            raise ValueError(f"frames[{k}]['values'] names panel {i!r}; there are {len(panels)}")
        p = panels[i]
        out["values"][i] = _grid(values, len(p["rows"]), len(p["cols"]), f"frames[{k}] panel {i}")
    for i, cols in dict(frame.get("hl") or {}).items():
        if not (isinstance(i, int) and 0 <= i < len(panels)):
            raise ValueError(f"frames[{k}]['hl'] names panel {i!r}; there are {len(panels)}")
        n = len(panels[i]["cols"])
        if any(not isinstance(c, int) or not 0 <= c < n for c in cols):
            raise ValueError(f"frames[{k}]['hl'][{i}] must be column indices 0..{n - 1}, "
                             f"got {cols}")
        out["hl"][i] = list(cols)
    for i, p in enumerate(panels):
        if "values" not in p and i not in out["values"]:
            raise ValueError(f"panel {i} has no values of its own, and frames[{k}] gives none")
    return out


class InteractiveFigure:
    """A figure of panels that a slider steps through, shown as HTML (`_repr_html_`).

    Args:
        title: what the figure shows (also its accessible name).
        panels: dicts with `rows` and `cols` (labels), optional `title`, `values` (rows x
            columns, in `[0, scale]`, None = empty cell, e.g. masked), `struck` (cells to
            strike through, e.g. out of reach: True = struck, unlike a mask's True = may
            attend), `scale` (the value drawn fully coloured, default 1),
            `text` (write each value in its cell), `digits`, and `cells` (rows x columns of
            strings to write instead of the values), `sep` (columns before which to draw a line).
        frames: dicts with a `caption` (what this frame shows, in words), a `label` (the
            slider's position, e.g. "query 5: 'b'"), and optionally `values` {panel index:
            rows x columns} replacing that panel's values and `hl` {panel index: [columns]}
            to outline.
        slider: what the slider moves through (its label, e.g. "query position").
        description: one or two sentences for a reader who cannot move it (printed page,
            screen reader before the first move, search index).
        start: the frame shown first.
    """

    def __init__(self, title: str, panels: Sequence[Mapping], frames: Sequence[Mapping], *,
                 slider: str = "step", description: str = "", start: int = 0):
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"title must be a non-empty string, got {title!r}")
        if isinstance(panels, (str, Mapping)) or not isinstance(panels, Sequence) or not panels:
            raise TypeError("panels must be a non-empty list of dicts")
        if isinstance(frames, (str, Mapping)) or not isinstance(frames, Sequence) or not frames:
            raise TypeError("frames must be a non-empty list of dicts")
        if not isinstance(start, int) or not 0 <= start < len(frames):
            raise ValueError(f"start must be a frame index 0..{len(frames) - 1}, got {start!r}")
        self.panels = [_check_panel(p, i) for i, p in enumerate(panels)]
        self.frames = [_check_frame(f, k, self.panels) for k, f in enumerate(frames)]
        self.title, self.slider, self.start = title, str(slider), start
        self.description = str(description)

    def to_json(self) -> str:
        """The figure's data as the page holds it (compact JSON)."""
        spec = {"title": self.title, "panels": self.panels, "frames": self.frames}
        return json.dumps(spec, separators=(",", ":"), ensure_ascii=False)

    def _repr_html_(self) -> str:
        data = self.to_json()
        uid = f"labnn-fig-{secrets.token_hex(6)}"  # unique on a page, no module-held counter
        safe = data.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the script
        e, first = html.escape, self.frames[self.start]
        n = len(self.frames) - 1
        return (
            f'<div class="labnn-interactive" id="{uid}" style="{_STYLE}">'
            f'<p style="margin:0 0 .3em;font-weight:bold">{e(self.title)}</p>'
            f'<div data-role="svg" style="width:100%" role="group" aria-label="{e(self.title)}">'
            f'<p style="margin:0;opacity:.8">{e(self.description)} (The figure is drawn here by'
            " JavaScript: in Jupyter, run the cell again if it stays empty, e.g. in an untrusted"
            ' notebook.)</p></div>'
            # JupyterLab's notebook shortcuts would take the arrow keys from the slider
            '<div data-lm-suppress-shortcuts="true" data-p-suppress-shortcuts="true"'
            ' style="display:flex;flex-wrap:wrap;align-items:center;gap:.4em;margin:.4em 0">'
            f'<label for="{uid}-slider">{e(self.slider)}</label>'
            f'<button type="button" data-step="-1" aria-label="previous"'
            f' style="{_BUTTON}">◀</button>'
            f'<input type="range" id="{uid}-slider" min="0" max="{n}" step="1" value="{self.start}"'
            f' style="flex:1 1 8em;min-width:8em;accent-color:#f57c00">'
            f'<button type="button" data-step="1" aria-label="next" style="{_BUTTON}">▶</button>'
            f'<output for="{uid}-slider" style="min-width:6em">{e(first["label"])}</output></div>'
            '<p data-role="caption" aria-live="polite" style="margin:.2em 0">'
            f'{e(first["caption"])}</p>'
            f'<script type="application/json">{safe}</script>'
            f"<script>{_SCRIPT}(document.currentScript ? document.currentScript.parentNode"
            f' : document.getElementById("{uid}"));</script></div>'
        )

    def __repr__(self) -> str:
        first = self.frames[self.start]["caption"]
        return (f"<InteractiveFigure {self.title!r}: {len(self.frames)} frames; "
                f"first: {first}>")
