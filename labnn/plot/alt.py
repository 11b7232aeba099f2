r"""Alt texts for figures: what a screen reader (or a page whose image fails) says for a plot.

`figure_alt` reads the words a figure draws (its title, each panel's title and axis labels)
as they are drawn: `title=f"head {head}"` gives "head 3", not the code that made it. In
Jupyter, `labnn.plot` wraps IPython's PNG formatter of Matplotlib figures (`install`, when
imported in a kernel): each figure shown then carries its alt text in the output's
metadata (`{"image/png": {"alt": ...}}`, which nbconvert's classic template and the site's
hook `docs/hooks/notebooks.py` write into the `<img>`), so no two figures share one.
"""

from __future__ import annotations

import re

from matplotlib.figure import Figure

_TEX = {r"\top": "T", r"\sqrt": "sqrt", r"\cdot": "·", r"\times": "×", r"\circ": "∘",
        r"\to": "→", r"\le": "≤", r"\ge": "≥", r"\,": " ", r"\;": " ", r"\!": ""}


def plain(text: str) -> str:
    r"""A drawn text as words: mathtext's `$...$` and TeX commands dropped
    (`softmax($QK^\top/\sqrt{d}$)` -> `softmax(QK^T/sqrt(d))`).

    Args:
        text: a title or label as given to Matplotlib.

    Returns:
        The text on one line, without `$`, braces or backslashes.
    """
    for command, word in _TEX.items():
        text = text.replace(command, word)
    text = re.sub(r"\\(?:mathrm|mathbf|mathit|text|operatorname)\s*", "", text)
    text = re.sub(r"\\([a-zA-Z]+)", r"\1", text)
    text = text.replace("$", "").replace("{", "(").replace("}", ")").replace("()", "")
    return re.sub(r"\s+", " ", text).strip()


def figure_alt(fig: Figure) -> str:
    """The alt text of a figure, from the words it draws: its title, the panels' titles, then
    their axis labels, each once.

    Args:
        fig: a Matplotlib figure.

    Returns:
        "Figure: " and those words joined by "; ", or "" when the figure draws none.
    """
    words = []
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_visible():
        words.append(suptitle.get_text())
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    words += [ax.get_title(loc) for ax in shown for loc in ("left", "center", "right")]
    words += [label for ax in shown for label in (ax.get_xlabel(), ax.get_ylabel())]
    unique = dict.fromkeys(t for t in (plain(w) for w in words) if t)
    return f"Figure: {'; '.join(unique)}" if unique else ""


def _with_alt(inner):
    """`inner` (a formatter's function for figures) with the figure's alt text as metadata."""
    def png(fig):
        data = inner(fig)
        if data is None:
            return None
        data, metadata = data if isinstance(data, tuple) else (data, None)
        try:
            text = figure_alt(fig)
        except Exception:  # noqa: BLE001 (an alt text must never stop a figure from showing)
            text = ""
        if text:
            metadata = {**(metadata or {}), "alt": text}
        return (data, metadata) if metadata else data

    png.labnn_alt = True
    return png


def _inline_backend_now() -> None:
    """Set Matplotlib's inline backend up now, as the first figure would: its set-up registers
    the PNG formatter of figures (which replaces any earlier one), and a figure shown by the
    cell that sets it up would otherwise miss the wrap."""
    import matplotlib

    try:
        backend = matplotlib.get_backend(auto_select=False)
    except TypeError:  # Matplotlib < 3.10
        backend = matplotlib.rcParams._get("backend")
    if backend in ("inline", "module://matplotlib_inline.backend_inline"):
        try:
            import matplotlib_inline.backend_inline  # noqa: F401 (its import sets it up)
        except ImportError:
            pass


def _wrap(shell) -> bool:
    formatter = shell.display_formatter.formatters.get("image/png")
    if formatter is None:
        return False
    try:
        inner = formatter.lookup_by_type(Figure)
    except KeyError:  # no inline backend (yet): the figures are not shown as PNG
        return False
    if not getattr(inner, "labnn_alt", False):
        formatter.for_type(Figure, _with_alt(inner))
    return True


def install(shell=None) -> bool:
    """Give every figure IPython shows as PNG its alt text (`figure_alt`) in the output's
    metadata. The wrap is renewed before each cell runs: setting the backend up again (e.g.
    `%matplotlib inline`) replaces the formatter.

    Args:
        shell: the IPython shell; None: the running one, if any.

    Returns:
        Whether the figures' PNG formatter is wrapped now.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
        if shell is None or not hasattr(shell, "display_formatter"):
            return False
        _inline_backend_now()
    if not getattr(shell, "_labnn_alt_event", False):
        shell.events.register("pre_run_cell", lambda *args: _wrap(shell))
        shell._labnn_alt_event = True
    return _wrap(shell)
