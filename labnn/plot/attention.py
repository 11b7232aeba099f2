r"""Attention maps: heatmaps of who attends to whom, for one head or all of them.

Dimension letters (the package legend): `H` heads, `T` queries (target positions), `S`
keys (source positions: memory, then segment).

Like every plot of `labnn.plot` (which re-exports these, so notebooks call
`plot.attention_heatmap`): draws with Matplotlib, returns what it drew on and never calls
`plt.show()`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from labnn.nn.arguments import check_int

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥"}


def token_label(token: object) -> str:
    """A printable tick label for one token: space, newline and tab become visible
    symbols; a one-element tensor (an id of `x[0]`) is its value, not `tensor(5)`."""
    if isinstance(token, torch.Tensor) and token.numel() == 1:
        token = token.item()
    return "".join(_VISIBLE.get(ch, ch) for ch in str(token))


def _as_array(values, name: str, ndim: int) -> np.ndarray:
    """`values` (a tensor, an array, nested lists) as a float array of `ndim` dims."""
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values, dtype=float)
    if array.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimensions, got shape {list(array.shape)}")
    return array


def _labels(labels: Sequence | str | None, n: int, name: str) -> list[str] | None:
    """`n` printable tick labels, or None for no labels."""
    if labels is None:
        return None
    labels = list(labels)  # a string gives one label per character
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries (one per row/column of weights), "
                         f"got {len(labels)}")
    return [token_label(label) for label in labels]


_MIN_TICK = 8.0  # points: the smallest tick label a reader is given


def _tick_size(inches: float, n: int, fill: float = 0.8) -> float:
    """A font size (points) that fits `n` tick labels along `inches` of axis, between 4
    and 12: each label `fill` of its slot (single characters can fill it all)."""
    return min(12.0, max(4.0, fill * 72 * inches / n))


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
    vmin: float | None = None,
    vmax: float | None = None,
) -> plt.Axes:
    r"""Draw one attention matrix: row $i$ shows how query $i$ spreads its attention
    over the keys (the weights $w_{ij}$, each row summing to 1).

    Args:
        weights: attention weights (tensor or array), rows are queries, columns keys.
            Raw scores work too: the colour scale starts at 0, or at the minimum when it
            is negative (of the finite values: masked `-inf` scores are drawn darkest,
            NaN blank).
        query_labels: one label per query (a string gives one per character); spaces and
            newlines are drawn as `␣` and `⏎`.
        key_labels: one label per key, same rules.
        ax: axes to draw into; a new figure when None.
        title: axes title (None for none).
        cmap: Matplotlib colormap name.
        colorbar: add a colorbar beside the matrix.
        annotate: write each weight in its cell (readable for matrices up to ~12 x 12).
        vmin, vmax: the weights drawn darkest and brightest (None: 0, or the minimum when
            negative, and the maximum), e.g. one scale for several heads.

    Shape:
        weights: `[T, S]`.

    Returns:
        The `Axes` drawn on.
    """
    w = _as_array(weights, "weights", 2)
    if vmin is not None and vmax is not None and not float(vmin) < float(vmax):
        raise ValueError(f"vmin={vmin!r} must be below vmax={vmax!r} (the weights drawn "
                         "darkest, then brightest)")
    t, s = w.shape
    rows = _labels(query_labels, t, "query_labels")
    cols = _labels(key_labels, s, "key_labels")
    if ax is None:
        size = (min(1.0 + 0.3 * s, 10.0) + 1.0, min(1.0 + 0.3 * t, 10.0))
        _, ax = plt.subplots(figsize=size)
    least, most = _finite_range(w)
    low = min(0.0, least) if vmin is None else float(vmin)  # raw scores may be < 0
    high = max(most if vmax is None else float(vmax), low + 1e-12)
    image = ax.imshow(w, cmap=cmap, vmin=low, vmax=high, aspect="auto")
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
                dark = not w[i, j] >= low + 0.6 * (high - low)  # NaN and -inf too
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def _finite_range(w: np.ndarray) -> tuple[float, float]:
    """The least and greatest finite values of `w` (a masked score is -inf), or (0, 0)."""
    finite = w[np.isfinite(w)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)


def _shared_scale(w: np.ndarray) -> tuple[float, float]:
    """One colour scale for every head: 0..1 for attention weights, else the data's finite
    range."""
    least, high = _finite_range(w)
    low = min(0.0, least)
    return (0.0, 1.0) if low >= 0.0 and high <= 1.0 else (low, max(high, low + 1e-12))


def _readable_ticks(axes: list[plt.Axes], axis: str, labels: list[str] | None, inches: float,
                    fill: float) -> None:
    """Tick labels of axes that share them, not overlapping: all as large as their slots allow
    (at most 12 points); when that is below 8 points, every k-th one at 8 points."""
    if labels is None:
        return
    n = len(labels)
    size = fill * 72 * inches / n
    step = 1 if size >= _MIN_TICK else math.ceil(_MIN_TICK / size)
    kept = range(0, n, step)
    for ax in axes:
        set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
        set_ticks(list(kept), [labels[i] for i in kept])
        ax.tick_params(axis=axis, labelsize=min(12.0, max(size, _MIN_TICK)))


def attention_heads(
    weights,
    query_labels: Sequence | str | None = None,
    key_labels: Sequence | str | None = None,
    *,
    ncols: int = 4,
    title: str | None = None,
    cmap: str = "viridis",
) -> plt.Figure:
    """Draw each head's attention matrix side by side (one `attention_heatmap` per
    head), on one colour scale (0..1 for attention weights) with one colour bar.

    Tick labels never overlap: the keys under the bottom row, the queries left of the first
    column, as large as their slots allow; on long sequences every k-th one.

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
    check_int("ncols", ncols)
    h, t, s = w.shape
    if h == 0:
        raise ValueError(f"weights must hold at least one head, got shape {list(w.shape)} "
                         "([H, T, S])")
    rows = _labels(query_labels, t, "query_labels")
    cols = _labels(key_labels, s, "key_labels")
    ncols = min(ncols, h)
    nrows = math.ceil(h / ncols)
    # room for one tick label per token: a character is narrower than a line is tall
    width, height = min(max(3.0, 0.13 * s), 6.0), min(max(3.0, 0.16 * t), 7.0)
    figsize = ((width + 0.2) * ncols + 0.9, (height + 0.5) * nrows)  # + titles, colour bar
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False,
                             sharex=True, sharey=True)
    low, high = _shared_scale(w)
    for head, ax in enumerate(axes.flat):
        if head >= h:
            ax.axis("off")
            continue
        attention_heatmap(w[head], rows, cols, ax=ax, title=f"head {head}", cmap=cmap,
                          colorbar=False, vmin=low, vmax=high)
        if head % ncols:
            ax.set_ylabel("")
        if head + ncols < h:
            ax.set_xlabel("")
    if title:
        fig.suptitle(title)
    right = 1 - 0.8 / figsize[0]  # the colour bar's strip
    fig.tight_layout(rect=(0, 0, right, 1))
    fig_w, fig_h = fig.get_size_inches()
    # the final layout leaves more room for the tick labels than first assumed; single
    # characters fill their slot's width, a label's height is ~1.2 times its size
    fill_x = 1.0 if all(len(x) == 1 for x in cols or ()) else 0.8
    box, drawn = axes.flat[0].get_position(), list(axes.flat[:h])
    _readable_ticks(drawn, "x", cols, box.width * fig_w, fill_x)
    _readable_ticks(drawn, "y", rows, box.height * fig_h, 0.8)
    top = max(ax.get_position().y1 for ax in drawn)
    bottom = min(ax.get_position().y0 for ax in drawn)
    cax = fig.add_axes((right + 0.15 / fig_w, bottom, 0.15 / fig_w, top - bottom),
                       label="<colorbar>")
    bar = fig.colorbar(axes.flat[0].images[0], cax=cax)
    bar.set_label("attention weight" if (low, high) == (0.0, 1.0) else "weight")
    return fig
