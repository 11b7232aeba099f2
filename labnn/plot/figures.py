"""Plots for the notebooks and benchmarks: loss curves, line and bar charts, panel grids.

Every function draws with Matplotlib, returns the `Axes` (or `Figure`) it drew on and
never calls `plt.show()`: the caller decides when to show or save. Pass `ax=` to draw into
an existing grid; `panels` makes a grid laid out for the width of a notebook page (two
panels side by side, more stacked). The attention maps are in `labnn.plot.attention`;
`labnn.plot` gives both one namespace for the notebooks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib import ticker

from labnn.nn.arguments import int_error, is_int, is_number

# Width of the notebook column of the docs site at 1400 px (~830 px) in inches at
# Matplotlib's 100 dpi: a figure this wide is shown at its own size, so its text stays as
# large as Matplotlib drew it.
COLUMN_WIDTH = 8.2


def panels(n: int, *, height: float = 3.4,
           width: float = COLUMN_WIDTH) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure of `n` panels laid out for a notebook column: one or two side by side,
    more stacked.

    A row of three or more panels, shrunk to the column's width, shows its labels at a
    third of their size; stacked, each panel keeps the column's full width. Two panels
    share a row.

    Args:
        n: number of panels (axes).
        height: height of one row of panels, in inches.
        width: figure width in inches (default `COLUMN_WIDTH`, shown unscaled on the
            site).

    Returns:
        The `Figure` and a list of its `n` axes, in reading order.

    Examples:
        >>> fig, (left, right) = panels(2)
        >>> fig, axes = panels(3)  # three rows
    """
    if not is_int(n) or n < 1:
        raise int_error(n)(f"n must be a positive int (the number of panels), got {n!r}")
    for name, value in (("height", height), ("width", width)):
        if not is_number(value) or not value > 0:
            raise ValueError(f"{name} must be a positive number of inches, got {value!r}")
    ncols = 2 if n == 2 else 1
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height * nrows),
                             squeeze=False, layout="constrained")
    return fig, list(axes.flat)


def _is_history(obj) -> bool:
    """Whether `obj` looks like one `Trainer.fit()` history."""
    losses = isinstance(obj, Mapping) and ("train_loss" in obj or "val_loss" in obj)
    return losses and "iter" in obj


def _finite_points(xs, ys) -> tuple[list[float], list[float]]:
    """The points whose y is a finite number (None and NaN are gaps, not zeros)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(float(y))]
    return [float(x) for x, _ in pairs], [float(y) for _, y in pairs]


def _pieces(xs, ys) -> list[tuple[list[float], list[float]]]:
    """The runs of consecutive finite points, split at each gap (None or NaN)."""
    pieces, gap = [], True
    for x, y in zip(xs, ys):
        if y is None or not math.isfinite(float(y)):
            gap = True
            continue
        if gap:
            pieces.append(([], []))
            gap = False
        pieces[-1][0].append(float(x))
        pieces[-1][1].append(float(y))
    return pieces


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
        history: one history from `Trainer.fit()` (a dict of lists with keys `iter`,
            `train_loss`, `val_loss`, ...), or a dict `{run name: history}` to compare
            runs on one axes (one colour per run; train dashed, validation solid).
            `None`/NaN entries are skipped.
        ax: axes to draw into; a new figure when None.
        title: axes title (None for none).
        logy: logarithmic loss axis.
        train: also draw the training loss (validation is always drawn when present).

    Returns:
        The `Axes` drawn on.
    """
    if _is_history(history):
        runs = {"": history}
    elif isinstance(history, Mapping) and history and all(
            _is_history(h) for h in history.values()):
        runs = dict(history)
    else:
        found = list(history) if isinstance(history, Mapping) else type(history).__name__
        raise ValueError(
            "history must be a Trainer history (a dict with 'iter' and "
            f"'train_loss'/'val_loss' lists) or a dict of such histories, got {found}"
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
                    f"history[{key!r}] has {len(run[key])} entries but history['iter'] "
                    f"has {len(run['iter'])}"
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
    smooth: int = 1,
) -> plt.Axes:
    """Plot several named series against one shared x, e.g. time per token against
    sequence length.

    Each series has its own colour, marker (up to 32 points) and dashes; more than three
    series get their legend beside the axes.

    Args:
        x: the x values, shared by every series.
        series: `{name: y values}`, each as long as `x`; `None`/NaN entries (e.g. out of
            memory) are skipped.
        ax: axes to draw into; a new figure when None.
        xlabel, ylabel, title: labels.
        logx, logy: logarithmic axes (base 2 for x, which suits powers-of-two lengths,
            ticked at `x` itself when it has at most 12 values; base 10 for y).
        smooth: draw each series' running mean over this many points, over its measured
            points in a faint line (1, or a series with fewer points: the points alone).
            The mean never spans a gap: it runs over each side alone (a side shorter
            than `smooth` has none), and its line breaks there.

    Returns:
        The `Axes` drawn on.
    """
    x = list(x)
    if not isinstance(series, Mapping) or not series:
        raise ValueError(
            f"series must be a non-empty dict {{name: values}}, got {series!r}")
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"series[{name!r}] has {len(ys)} values but x has {len(x)}")
    if not is_int(smooth) or smooth < 1:
        raise int_error(smooth)(f"smooth must be a positive int (points averaged), got {smooth!r}")
    _check_log_axes(x, series, logx, logy)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    for k, (name, ys) in enumerate(series.items()):
        pieces = _pieces(x, ys)
        xs, ys = _finite_points(x, ys)
        # fewer points than `smooth` on every side of the gaps: drawn as they are
        smoothed = 1 < smooth <= max((len(p[0]) for p in pieces), default=0)
        if smoothed:  # the measured points faint, their running mean drawn over them
            line, = ax.plot(xs, ys, lw=0.8, alpha=0.35)
            xs, ys = _running_mean(pieces, smooth)
        # each series its own marker and dashes, drawn thinner than the one before: a series
        # lying on another (equal values) still shows beneath it
        few = len(xs) <= 12  # markers as large as the points are few
        ax.plot(xs, ys, linestyle=_DASHES[k % len(_DASHES)], lw=max(1.0, 3.4 - 0.9 * k),
                marker=_MARKERS[k % len(_MARKERS)] if len(xs) <= 32 else None,
                ms=max(3.0, (10.0 if few else 6.5) - (3.0 if few else 1.5) * k), label=name,
                color=line.get_color() if smoothed else None)
    if logx:  # ticked 64, 128, 256, not 2^6, 2^7, 2^8; a few points: ticked at them (31, not 32)
        ax.set_xscale("log", base=2)
        if len(x) <= 12:
            ax.set_xticks(x)
            ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if len(series) > 3:  # beside the axes: a long legend inside covers lines wherever it goes
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend()
    return ax


def _check_log_axes(x, series: Mapping, logx: bool, logy: bool) -> None:
    """Raise a clear error for a point a log axis would hide without a word (x or y <= 0)."""
    low_x = [v for v in x if logx and float(v) <= 0]
    if low_x:
        raise ValueError(f"x holds {low_x[0]!r}, which logx=True cannot draw (a log axis "
                         "shows only x > 0): drop it, or leave logx False")
    for name, ys in series.items():
        low_y = next((y for y in _finite_points(x, ys)[1] if logy and y <= 0), None)
        if low_y is not None:
            raise ValueError(f"series[{name!r}] holds {low_y!r}, which logy=True cannot "
                             "draw (a log axis shows only y > 0): drop it, or leave logy "
                             "False")


_MARKERS = ("o", "s", "^", "D", "v", "P")
_DASHES = ("-", "--", "-.", ":")


def _running_mean(pieces: list[tuple[list[float], list[float]]],
                  k: int) -> tuple[list[float], list[float]]:
    """The mean of each `k` consecutive points, at the mean of their x, within each piece
    (`_pieces`): a NaN between pieces breaks the line, where the measurements have a gap."""
    means_x, means_y = [], []
    for xs, ys in pieces:
        n = len(ys) - k + 1
        if n > 0 and means_x:
            means_x.append(math.nan)
            means_y.append(math.nan)
        means_x += [sum(xs[i:i + k]) / k for i in range(n)]
        means_y += [sum(ys[i:i + k]) / k for i in range(n)]
    return means_x, means_y


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
        values: `{name: value}`, drawn in the given order, each name as text (a number of
            layers, `{4: loss}`, is the label "4", not a place on the x axis).
        ax: axes to draw into; a new figure when None.
        ylabel, title: labels.
        annotate: write each value above its bar using `fmt`.
        fmt: format string for the annotations.

    Returns:
        The `Axes` drawn on.
    """
    if not isinstance(values, Mapping) or not values:
        raise ValueError(
            f"values must be a non-empty dict {{name: value}}, got {values!r}")
    # the names as text: numbers would place the bars at x = name, not in the given order
    names, heights = [str(n) for n in values], [float(v) for v in values.values()]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"values name two bars {twice!r} (e.g. 1 and '1'): give each bar "
                         "a name of its own")
    wrong = [(n, h) for n, h in zip(names, heights) if not math.isfinite(h)]
    if wrong:
        raise ValueError(f"values must be finite numbers (a bar's height), got "
                         f"{wrong[0][0]!r}: {wrong[0][1]}")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 1.2 * len(names)), 4.0))
    bars = ax.bar(names, heights, color=[f"C{i}" for i in range(len(names))])
    if annotate:
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights])
    if min(heights) >= 0 < max(heights):  # room above the bars for their labels and a legend
        ax.set_ylim(0, 1.3 * max(heights))
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return ax
