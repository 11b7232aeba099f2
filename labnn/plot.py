"""Plots for the notebooks and benchmarks: attention heatmaps, loss curves, line and bar charts.

Legend: `H` heads, `T` queries (target positions), `S` keys (source positions, memory + segment).

Every function draws with Matplotlib, returns the `Axes` (or `Figure`) it drew on and never calls
`plt.show()`: the caller decides when to show or save. Pass `ax=` to draw into an existing grid; `panels`
makes a grid laid out for the width of a notebook page (two panels side by side, more stacked).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥"}
# Width of the notebook column of the docs site at 1400 px (~830 px) in inches at Matplotlib's 100 dpi:
# a figure this wide is shown at its own size, so its text stays as large as Matplotlib drew it.
COLUMN_WIDTH = 8.2


def token_label(token: object) -> str:
    """A printable tick label for one token: space, newline and tab become visible symbols."""
    return "".join(_VISIBLE.get(ch, ch) for ch in str(token))


def _as_array(values, name: str, ndim: int) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values, dtype=float)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {list(array.shape)}")
    return array


def _labels(labels: Sequence | str | None, n: int, name: str) -> list[str] | None:
    if labels is None:
        return None
    labels = list(labels)  # a string gives one label per character
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries (one per row/column of weights), got {len(labels)}")
    return [token_label(label) for label in labels]


def _tick_size(inches: float, n: int) -> float:
    """A font size (points) that fits `n` tick labels along `inches` of axis, between 4 and 10."""
    return min(10.0, max(4.0, 0.8 * 72 * inches / n))


def attention_heatmap(
    weights,
    query_labels: Sequence | str | None = None,
    key_labels: Sequence | str | None = None,
    ax: plt.Axes | None = None,
    title: str | None = "attention weights",
    *,
    cmap: str = "viridis",
    colorbar: bool = True,
    annotate: bool = False,
) -> plt.Axes:
    """Draw one attention matrix: row `i` shows how query `i` spreads its attention over the keys.

    Args:
        weights: attention weights (tensor or array), rows are queries, columns keys. Raw scores work too:
            the colour scale starts at 0, or at the minimum when it is negative.
        query_labels: one label per query (a string gives one per character); spaces and newlines
            are drawn as `␣` and `⏎`.
        key_labels: one label per key, same rules.
        ax: axes to draw into; a new figure when None.
        title: axes title (None for none).
        cmap: Matplotlib colormap name.
        colorbar: add a colorbar beside the matrix.
        annotate: write each weight in its cell (readable for matrices up to ~12 x 12).

    Shape:
        weights: `[T, S]`.

    Returns:
        The `Axes` drawn on.
    """
    w = _as_array(weights, "weights", 2)
    t, s = w.shape
    rows, cols = _labels(query_labels, t, "query_labels"), _labels(key_labels, s, "key_labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1.0 + 0.3 * s, 10.0) + 1.0, min(1.0 + 0.3 * t, 10.0)))
    low = min(0.0, float(w.min()))  # weights start at 0; raw scores may be negative
    image = ax.imshow(w, cmap=cmap, vmin=low, vmax=max(float(w.max()), low + 1e-12), aspect="auto")
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    box, (fig_w, fig_h) = ax.get_position(), ax.figure.get_size_inches()
    if cols is not None:
        ax.set_xticks(range(s), cols, fontsize=_tick_size(box.width * fig_w, s))
    if rows is not None:
        ax.set_yticks(range(t), rows, fontsize=_tick_size(box.height * fig_h, t))
    if annotate:
        for i in range(t):
            for j in range(s):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if w[i, j] < low + 0.6 * (w.max() - low) else "black")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_heads(
    weights,
    query_labels: Sequence | str | None = None,
    key_labels: Sequence | str | None = None,
    *,
    ncols: int = 4,
    title: str | None = None,
    cmap: str = "viridis",
) -> plt.Figure:
    """Draw each head's attention matrix side by side (one `attention_heatmap` per head).

    Args:
        weights: attention weights of one sequence, one matrix per head.
        query_labels, key_labels: as in `attention_heatmap`.
        ncols: heads per row of the grid.
        title: figure title.
        cmap: Matplotlib colormap name.

    Shape:
        weights: `[H, T, S]`.

    Returns:
        The `Figure`.
    """
    w = _as_array(weights, "weights", 3)
    if not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    h, t, s = w.shape
    ncols = min(ncols, h)
    nrows = math.ceil(h / ncols)
    size = min(max(3.0, 0.14 * max(t, s)), 6.0)  # room for one tick label per token
    fig, axes = plt.subplots(nrows, ncols, figsize=((size + 0.2) * ncols, size * nrows), squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head >= h:
            ax.axis("off")
            continue
        attention_heatmap(w[head], query_labels, key_labels, ax=ax, title=f"head {head}", cmap=cmap, colorbar=False)
        if head % ncols:
            ax.set_ylabel("")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig_w, fig_h = fig.get_size_inches()
    for ax in axes.flat[:h]:  # the final layout leaves more room for the tick labels than first assumed
        box = ax.get_position()
        ax.tick_params(axis="x", labelsize=_tick_size(box.width * fig_w, s))
        ax.tick_params(axis="y", labelsize=_tick_size(box.height * fig_h, t))
    return fig


def panels(n: int, *, height: float = 3.4, width: float = COLUMN_WIDTH) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure of `n` panels laid out for a notebook column: one or two side by side, more stacked.

    A row of three or more panels, shrunk to the column's width, shows its labels at a third of their
    size; stacked, each panel keeps the column's full width. Two panels share a row.

    Args:
        n: number of panels (axes).
        height: height of one row of panels, in inches.
        width: figure width in inches (default `COLUMN_WIDTH`, shown unscaled on the site).

    Returns:
        The `Figure` and a list of its `n` axes, in reading order.

    Examples:
        >>> fig, (left, right) = panels(2)
        >>> fig, axes = panels(3)  # three rows
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (the number of panels), got {n!r}")
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number of inches, got {value!r}")
    ncols = 2 if n == 2 else 1
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height * nrows), squeeze=False,
                             layout="constrained")
    return fig, list(axes.flat)


def _is_history(obj) -> bool:
    return isinstance(obj, Mapping) and "iter" in obj and ("train_loss" in obj or "val_loss" in obj)


def _finite_points(xs, ys) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(float(y))]
    return [float(x) for x, _ in pairs], [float(y) for _, y in pairs]


def loss_curves(
    history: Mapping,
    ax: plt.Axes | None = None,
    *,
    title: str | None = "loss",
    logy: bool = False,
    train: bool = True,
) -> plt.Axes:
    """Plot training and validation loss against iterations, for one run or several.

    Args:
        history: one history from `Trainer.fit()` (a dict of lists with keys `iter`, `train_loss`,
            `val_loss`, ...), or a dict `{run name: history}` to compare runs on one axes (one
            colour per run; train dashed, validation solid). `None`/NaN entries are skipped.
        ax: axes to draw into; a new figure when None.
        title: axes title (None for none).
        logy: logarithmic loss axis.
        train: also draw the training loss (validation is always drawn when present).

    Returns:
        The `Axes` drawn on.
    """
    if _is_history(history):
        runs = {"": history}
    elif isinstance(history, Mapping) and history and all(_is_history(h) for h in history.values()):
        runs = dict(history)
    else:
        found = list(history) if isinstance(history, Mapping) else type(history).__name__
        raise ValueError(
            "history must be a Trainer history (a dict with 'iter' and 'train_loss'/'val_loss' lists) "
            f"or a dict of such histories, got {found}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    for index, (name, run) in enumerate(runs.items()):
        color = f"C{index}"
        prefix = f"{name} " if name else ""
        for key, style, show in (("train_loss", "--", train), ("val_loss", "-", True)):
            if not show or key not in run:
                continue
            if len(run[key]) != len(run["iter"]):
                raise ValueError(
                    f"history[{key!r}] has {len(run[key])} entries but history['iter'] has {len(run['iter'])}"
                )
            xs, ys = _finite_points(run["iter"], run[key])
            if xs:
                ax.plot(xs, ys, style, color=color, label=f"{prefix}{key.split('_')[0]}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (nats per token)")
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def line_plot(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    ax: plt.Axes | None = None,
    *,
    xlabel: str = "sequence length",
    ylabel: str = "",
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> plt.Axes:
    """Plot several named series against one shared x, e.g. time per token against sequence length.

    Args:
        x: the x values, shared by every series.
        series: `{name: y values}`, each as long as `x`; `None`/NaN entries (e.g. out of memory) are skipped.
        ax: axes to draw into; a new figure when None.
        xlabel, ylabel, title: labels.
        logx, logy: logarithmic axes (base 2 for x, which suits powers-of-two lengths; base 10 for y).

    Returns:
        The `Axes` drawn on.
    """
    x = list(x)
    if not isinstance(series, Mapping) or not series:
        raise ValueError(f"series must be a non-empty dict {{name: values}}, got {series!r}")
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"series[{name!r}] has {len(ys)} values but x has {len(x)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, ys in series.items():
        xs, ys = _finite_points(x, ys)
        ax.plot(xs, ys, "o-", label=name)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return ax


def bar_plot(
    values: Mapping[str, float],
    ax: plt.Axes | None = None,
    *,
    ylabel: str = "",
    title: str | None = None,
    annotate: bool = True,
    fmt: str = "{:.3g}",
) -> plt.Axes:
    """Draw one bar per named value, e.g. final validation loss per model.

    Args:
        values: `{name: value}`, drawn in the given order.
        ax: axes to draw into; a new figure when None.
        ylabel, title: labels.
        annotate: write each value above its bar using `fmt`.
        fmt: format string for the annotations.

    Returns:
        The `Axes` drawn on.
    """
    if not isinstance(values, Mapping) or not values:
        raise ValueError(f"values must be a non-empty dict {{name: value}}, got {values!r}")
    names, heights = list(values), [float(v) for v in values.values()]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 1.2 * len(names)), 4.0))
    bars = ax.bar(names, heights, color=[f"C{i}" for i in range(len(names))])
    if annotate:
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights])
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return ax
