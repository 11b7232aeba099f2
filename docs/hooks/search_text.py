"""Search results without raw TeX: math in the search index becomes plain text (`$QK^\\top/\\sqrt{d}$` ->
`QKᵀ/√d`).

Pages typeset math in the browser (KaTeX), so the HTML the search plugin indexes still holds its source:
`\\(...\\)` and `\\[...\\]` (pymdownx.arithmatex, docstrings) and `$...$` (notebook markdown). Material's
search plugin has no option to transform or drop math, and excluding it (`data-search-exclude`) would cut
words out of sentences; so after the build (priority -100: after the search plugin has written its index)
each formula in `search/search_index.json` is rewritten as text. Display math stays searchable too, in the
same plain form. Why not pylatexenc's `latex2text` (2.11, tried 2026-11-26 on the site's 502 formulas): it
drops the space after a command (`≈0.06`, `L ·M`), drops `\\ne`, and loses the braces of indices (`R_i-j` for
`R_{i-j}`, `10^-3`), which changes what a formula says.

The same pass puts each run of indexed words outside every tag in a `<p>` (`whole_blocks`): Material's
snippet cut such a run at its first word (a formula's `(` lost); it has no option for its snippets.

on_page_context also gives notebook and annotated-source pages back their HTML after the search plugin
indexed a flattened copy (see notebooks.py, annotated.py's `for_search`).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

_SYMBOLS = {
    "top": "ᵀ", "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
    "approx": "≈", "sim": "~", "in": "∈", "leftarrow": "←", "rightarrow": "→", "to": "→", "mapsto": "↦",
    "gets": "←", "Rightarrow": "⇒", "dots": "…", "ldots": "…", "cdots": "⋯", "sum": "Σ", "prod": "Π",
    "circ": "∘", "mid": "|", "infty": "∞", "partial": "∂", "nabla": "∇", "odot": "⊙", "oplus": "⊕",
    "lVert": "‖", "rVert": "‖", "Vert": "‖", "langle": "⟨", "rangle": "⟩", "lfloor": "⌊", "rfloor": "⌋",
    "lceil": "⌈", "rceil": "⌉", "pm": "±", "ell": "ℓ", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ",
    "epsilon": "ε", "varepsilon": "ε", "eta": "η", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "omega": "ω", "Delta": "Δ",
    "Sigma": "Σ", "Omega": "Ω", "Theta": "Θ", "Lambda": "Λ", "Pi": "Π", "Phi": "Φ",
    "qquad": " ", "quad": " ",
}
_DROP = ("left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "displaystyle",
         "limits", "nolimits")
_WRAPPERS = ("mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathcal", "mathbb", "operatorname", "text",
             "textrm", "textbf", "textit", "boldsymbol", "bm", "hat", "bar", "tilde", "vec", "overline")
_MATH = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|(?<![\w$\\])\$(?=\S)([^$]+?)(?<=\S)\$(?![\w$])",
                   re.DOTALL)


def _group(tex: str, start: int) -> tuple[str, int]:
    """The brace group `{...}` at `start` (or the single character there) and the index after it."""
    while start < len(tex) and tex[start] == " ":
        start += 1
    if start < len(tex) and tex[start] == "{":
        depth = 0
        for i in range(start, len(tex)):
            depth += {"{": 1, "}": -1}.get(tex[i], 0)
            if depth == 0:
                return tex[start + 1:i], i + 1
        return tex[start + 1:], len(tex)
    command = re.match(r"\\(?:[A-Za-z]+|.)", tex[start:])
    if command:
        return command.group(0), start + command.end()
    return tex[start:start + 1], start + 1


def _paren(text: str) -> str:
    return text if len(text) <= 1 or re.fullmatch(r"\w+", text) else f"({text})"


def tex_to_text(tex: str) -> str:
    """A formula as a reader would type it: `\\frac{a}{b}` -> `(a)/(b)`, `\\sqrt{d}` -> `√d`, `K^\\top` ->
    `Kᵀ`, `d_{model}` -> `d_model`, font and sizing commands dropped."""
    tex = re.sub(r"\\+(?=[A-Za-z])", "\\\\", tex)  # `\\cdot` (escaped once too often) -> `\cdot`
    out: list[str] = []
    i = 0
    while i < len(tex):
        char = tex[i]
        if char == "\\":
            match = re.match(r"\\([A-Za-z]+)|\\(.?)", tex[i:], flags=re.DOTALL)
            name, symbol = match.group(1), match.group(2)
            i += match.end()
            if symbol is not None:
                out.append({",": " ", ";": " ", ":": " ", "!": "", " ": " ", "{": "{", "}": "}",
                            "_": "_", "%": "%", "&": "&", "#": "#", "|": "‖"}.get(symbol, symbol))
            elif name == "frac" or name in ("dfrac", "tfrac"):
                num, i = _group(tex, i)
                den, i = _group(tex, i)
                out.append(f"{_paren(tex_to_text(num))}/{_paren(tex_to_text(den))}")
            elif name == "sqrt":
                arg, i = _group(tex, i)
                out.append("√" + _paren(tex_to_text(arg)))
            elif name in _WRAPPERS:
                arg, i = _group(tex, i)
                out.append(tex_to_text(arg))
            elif name in _DROP:
                pass
            elif name in ("begin", "end"):
                _, i = _group(tex, i)
                out.append(" ")
            else:
                out.append(_SYMBOLS.get(name, name))
        elif char in "^_":
            arg, i = _group(tex, i + 1)
            text = tex_to_text(arg)
            out.append("ᵀ" if text == "ᵀ" else char + _paren(text))
        elif char in "{}":
            i += 1
        elif char == "&":
            out.append(" ")
            i += 1
        else:
            out.append(char)
            i += 1
    text = "".join(out).replace("^ᵀ", "ᵀ")
    return re.sub(r"\s+", " ", text).strip()


_CODE = re.compile(r"(<pre>.*?</pre>|<code>.*?</code>)", re.DOTALL)  # the index keeps these tags


def plain_math(text: str) -> str:
    """Every formula of an indexed text (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`) as plain text;
    code (`<pre>`, `<code>`: a plot title's `r"$\\sqrt{d}$"`) is left as written."""
    def plain(match: re.Match) -> str:  # the index holds HTML-escaped text (`&lt;`)
        tex = html.unescape(next(g for g in match.groups() if g is not None))
        return html.escape(tex_to_text(tex), quote=False)

    parts = _CODE.split(text)
    return "".join(part if index % 2 else _MATH.sub(plain, part) for index, part in enumerate(parts))


_TAG = re.compile(r"<(/?)[a-z]+\d?>")  # the index keeps only bare tags (`<p>`, `<code>`, `<pre>`, `<li>`...)


def whole_blocks(text: str) -> str:
    """An indexed text with each run of words outside every tag (a table's cells, a display formula:
    the search plugin keeps no `<div>`, `<td>`, `<span>`) in a `<p>` of its own. Material's result
    snippet shows the blocks holding a match from their first tag, or, for a bare run, from its first
    word: `(K, V) = W^KV LN(m)` showed as `K, V) = ...`, its `(` dropped."""
    out: list[str] = []
    depth = last = 0
    for match in _TAG.finditer(text):
        run = text[last:match.start()]
        out.append(f"<p>{run}</p>" if depth == 0 and run.strip() else run)
        out.append(match.group(0))
        depth = max(depth - 1, 0) if match.group(1) else depth + 1
        last = match.end()
    rest = text[last:]
    out.append(f"<p>{rest}</p>" if depth == 0 and rest.strip() else rest)
    return "".join(out)


@event_priority(-50)  # after the search plugin (priority 0) has indexed the page
def on_page_context(context, page, config, nav):
    """Give a page back the content notebooks.py or annotated.py flattened for the search plugin to index."""
    original = getattr(page, "labnn_content", None)
    if original is not None:
        page.content = re.sub(r'\s?data-search-\w+(="[^"]*")?', "", original)  # as the search plugin does
        del page.labnn_content
    return context


@event_priority(-100)
def on_post_build(config):
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if not index.is_file():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        for key in ("title", "text"):
            if key in doc:
                doc[key] = plain_math(doc[key])
        if "text" in doc:
            doc["text"] = whole_blocks(doc["text"])
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
