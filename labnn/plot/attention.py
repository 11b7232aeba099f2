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
    symbols."""
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
) -> plt.Axes:
    r"""Draw one attention matrix: row $i$ shows how query $i$ spreads its attention
    over the keys (the weights $w_{ij}$, each row summing to 1).

    Args:
        weights: attention weights (tensor or array), rows are queries, columns keys.
            Raw scores work too: the colour scale starts at 0, or at the minimum when it
            is negative.
        query_labels: one label per query (a string gives one per character); spaces and
            newlines are drawn as `␣` and `⏎`.
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
    rows = _labels(query_labels, t, "query_labels")
    cols = _labels(key_labels, s, "key_labels")
    if ax is None:
        size = (min(1.0 + 0.3 * s, 10.0) + 1.0, min(1.0 + 0.3 * t, 10.0))
        _, ax = plt.subplots(figsize=size)
    low = min(0.0, float(w.min()))  # weights start at 0; raw scores may be negative
    high = max(float(w.max()), low + 1e-12)
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
                dark = w[i, j] < low + 0.6 * (w.max() - low)
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
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
    """Draw each head's attention matrix side by side (one `attention_heatmap` per
    head).

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
    ncols = min(ncols, h)
    nrows = math.ceil(h / ncols)
    size = min(max(3.0, 0.14 * max(t, s)), 6.0)  # room for one tick label per token
    figsize = ((size + 0.2) * ncols, (size + 0.5) * nrows)  # + titles: square-ish matrices
    # the key labels under the bottom row only, the query labels left of the first column
    # only: the panels get the room, and the labels a larger size
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False,
                             sharex=True, sharey=True)
    for head, ax in enumerate(axes.flat):
        if head >= h:
            ax.axis("off")
            continue
        attention_heatmap(w[head], query_labels, key_labels, ax=ax, title=f"head {head}",
                          cmap=cmap, colorbar=False)
        if head % ncols:
            ax.set_ylabel("")
        if head + ncols < h:
            ax.set_xlabel("")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig_w, fig_h = fig.get_size_inches()
    # the final layout leaves more room for the tick labels than first assumed
    fill_x, fill_y = (1.0 if all(len(str(x)) == 1 for x in labels or ()) else 0.8
                      for labels in (key_labels, query_labels))
    for ax in axes.flat[:h]:
        box = ax.get_position()
        ax.tick_params(axis="x", labelsize=_tick_size(box.width * fig_w, s, fill_x))
        ax.tick_params(axis="y", labelsize=_tick_size(box.height * fig_h, t, fill_y))
    return fig
