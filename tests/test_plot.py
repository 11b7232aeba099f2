import matplotlib

matplotlib.use("Agg")

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from labnn import plot


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def history(n=5, offset=0.0):
    return {
        "iter": [10 * i for i in range(n)],
        "train_loss": [3.0 - 0.2 * i + offset for i in range(n)],
        "val_loss": [3.1 - 0.2 * i + offset for i in range(n)],
        "lr": [1e-3] * n,
        "time": [0.1 * i for i in range(n)],
    }


def test_attention_heatmap_labels_and_values():
    weights = torch.softmax(torch.randn(3, 5), dim=-1)
    ax = plot.attention_heatmap(weights, "abc", ["x", " ", "\n", "y", "z"], title="head 0")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "␣", "⏎", "y", "z"]
    assert ax.get_title() == "head 0"
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy(), rtol=1e-6)
    assert len(ax.figure.axes) == 2  # matrix + colorbar


def test_attention_heatmap_into_given_axes_without_labels():
    fig, axes = plt.subplots(1, 2)
    ax = plot.attention_heatmap(np.eye(4), ax=axes[1], colorbar=False, annotate=True)
    assert ax is axes[1]
    assert len(ax.texts) == 16
    assert len(fig.axes) == 2


def test_attention_heatmap_bad_input():
    with pytest.raises(ValueError, match=r"weights must have 2 dimensions, got shape \[2, 3, 4\]"):
        plot.attention_heatmap(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="query_labels must have 3 entries.*got 2"):
        plot.attention_heatmap(torch.rand(3, 4), query_labels="ab")
    with pytest.raises(ValueError, match="key_labels must have 4 entries.*got 5"):
        plot.attention_heatmap(torch.rand(3, 4), key_labels="abcde")


def test_attention_heads_grid():
    fig = plot.attention_heads(torch.rand(3, 4, 4), "abcd", "abcd", ncols=2, title="layer 0")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:3] == ["head 0", "head 1", "head 2"]
    assert not fig.axes[3].axison  # the unused fourth cell is hidden
    assert fig._suptitle.get_text() == "layer 0"
    with pytest.raises(ValueError, match=r"weights must have 3 dimensions, got shape \[4, 4\]"):
        plot.attention_heads(torch.rand(4, 4))
    with pytest.raises(ValueError, match="ncols must be a positive int, got 0"):
        plot.attention_heads(torch.rand(2, 4, 4), ncols=0)


def test_loss_curves_single_history_skips_missing_values():
    h = history()
    h["val_loss"][1] = None
    h["val_loss"][2] = math.nan
    ax = plot.loss_curves(h)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"train", "val"}
    assert list(lines["train"].get_xdata()) == h["iter"]
    assert list(lines["val"].get_xdata()) == [0, 30, 40]
    assert ax.get_xlabel() == "iteration"


def test_loss_curves_several_runs_share_axes():
    ax = plot.loss_curves({"no positions": history(), "learned": history(offset=-0.5)}, train=False, logy=True)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["no positions val", "learned val"]
    assert ax.get_yscale() == "log"


def test_loss_curves_bad_input():
    with pytest.raises(ValueError, match="history must be a Trainer history.*got \\['loss'\\]"):
        plot.loss_curves({"loss": [1.0]})
    with pytest.raises(ValueError, match="history must be a Trainer history.*got list"):
        plot.loss_curves([1.0, 2.0])
    bad = history()
    bad["val_loss"] = bad["val_loss"][:2]
    with pytest.raises(ValueError, match=r"history\['val_loss'\] has 2 entries but history\['iter'\] has 5"):
        plot.loss_curves(bad)


def test_line_plot_log_axes_and_missing_points():
    ax = plot.line_plot([64, 128, 256], {"cached": [1.0, 1.1, 1.2], "uncached": [2.0, None, 8.0]},
                        ylabel="ms per token", logx=True, logy=True)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.get_lines()] == ["cached", "uncached"]
    assert list(ax.get_lines()[1].get_xdata()) == [64, 256]
    assert ax.get_ylabel() == "ms per token"
    with pytest.raises(ValueError, match=r"series\['a'\] has 2 values but x has 3"):
        plot.line_plot([1, 2, 3], {"a": [1, 2]})
    with pytest.raises(ValueError, match="series must be a non-empty dict"):
        plot.line_plot([1, 2, 3], {})


def test_bar_plot():
    ax = plot.bar_plot({"xl": 1.8, "feedback": 1.75}, ylabel="val loss")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["xl", "feedback"]
    assert [p.get_height() for p in ax.patches] == [1.8, 1.75]
    assert [t.get_text() for t in ax.texts] == ["1.8", "1.75"]
    with pytest.raises(ValueError, match="values must be a non-empty dict"):
        plot.bar_plot({})


def test_library_never_shows(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda *a, **k: pytest.fail("plt.show() called inside labnn.plot"))
    plot.attention_heatmap(torch.rand(2, 2))
    plot.attention_heads(torch.rand(2, 2, 2))
    plot.loss_curves(history())
    plot.line_plot([1, 2], {"a": [1, 2]})
    plot.bar_plot({"a": 1.0})


@pytest.mark.parametrize("n, shape", [(1, (1, 1)), (2, (1, 2)), (3, (3, 1)), (4, (4, 1))])
def test_panels_fit_the_column(n, shape):
    fig, axes = plot.panels(n)
    assert len(axes) == n
    assert fig.get_size_inches()[0] == pytest.approx(plot.figures.COLUMN_WIDTH)
    rows = sorted({round(ax.get_position().y0, 3) for ax in axes})
    cols = sorted({round(ax.get_position().x0, 3) for ax in axes})
    assert (len(rows), len(cols)) == shape
    assert fig.get_size_inches()[1] == pytest.approx(3.4 * shape[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be a positive int"),
    ({"n": 2.0}, "n must be a positive int"),
    ({"n": True}, "n must be a positive int"),
    ({"n": 2, "height": -1}, "height must be a positive number"),
    ({"n": 2, "width": "8"}, "width must be a positive number"),
])
def test_panels_bad_arguments(kwargs, message):
    n = kwargs.pop("n")
    with pytest.raises(ValueError, match=message):
        plot.panels(n, **kwargs)


def test_line_plot_series_that_coincide_stay_visible():
    """Issue 31 (05, "Keys and values held"): a series equal to another drawn after it still shows —
    each has its own dashes and marker, and is drawn wider than the one after it."""
    ax = plot.line_plot([16, 64, 256], {"transformer": [16, 64, 256], "XL": [16, 64, 256],
                                        "feedback": [8, 32, 128]}, logx=True, logy=True)
    lines = ax.get_lines()
    assert len({line.get_linestyle() for line in lines}) == 3
    assert len({line.get_marker() for line in lines}) == 3
    assert lines[0].get_linewidth() > lines[1].get_linewidth() > lines[2].get_linewidth()
    assert lines[0].get_markersize() > lines[1].get_markersize()


def test_line_plot_many_series_get_their_legend_beside_the_axes():
    """Issue 31 (04): five series' legend inside the axes covered lines; beside them it covers none."""
    five = {f"s{k}": [k, k + 1.0, k + 2.0] for k in range(5)}
    ax = plot.line_plot([1, 2, 3], five)
    ax.figure.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1
    three = plot.line_plot([1, 2, 3], {k: five[k] for k in ("s0", "s1", "s2")})
    three.figure.canvas.draw()
    assert three.get_legend().get_window_extent().x0 < three.get_window_extent().x1  # inside


def test_line_plot_smooth_draws_the_running_mean_over_the_faint_points():
    ys = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    ax = plot.line_plot(range(6), {"noisy": ys}, smooth=2)
    faint, mean = ax.get_lines()
    assert list(faint.get_ydata()) == ys and faint.get_alpha() < 1
    assert list(mean.get_ydata()) == [0.5] * 5 and list(mean.get_xdata()) == [0.5, 1.5, 2.5, 3.5, 4.5]
    assert mean.get_label() == "noisy" and mean.get_color() == faint.get_color()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["noisy"]
    with pytest.raises(ValueError, match="smooth must be a positive int"):
        plot.line_plot([1, 2], {"a": [1, 2]}, smooth=0)


def test_bar_plot_leaves_room_above_the_bars_for_labels_and_a_legend():
    """Issue 31 (03): a legend in the upper right covered the tallest bar's label."""
    ax = plot.bar_plot({"embedding": 0.41, "layer 1": 0.33, "layer 2": 0.26})
    assert ax.get_ylim()[1] >= 1.3 * 0.41


def test_attention_heads_label_the_outer_panels_in_larger_type():
    """Issue 31 (01): 27 per-character ticks in each of four panels were ~5 px tall; the keys are now
    labelled under the bottom row and the queries left of the first column, one character per slot."""
    line = "HAMLET:\nTo be, or not to be"
    fig = plot.attention_heads(torch.rand(4, len(line), len(line)), line, line, ncols=2)
    fig.canvas.draw()
    shown = [(any(t.get_visible() and t.get_text() for t in ax.get_xticklabels()),
              any(t.get_visible() and t.get_text() for t in ax.get_yticklabels()))
             for ax in fig.axes[:4]]  # the fifth: the shared colour bar (issue 43)
    assert shown == [(False, True), (False, False), (True, True), (True, False)]
    sizes = {t.get_fontsize() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()}
    assert min(sizes) >= 8


def test_a_log_x_axis_is_ticked_at_the_measured_points():
    """Contexts 1 ... 16, 31 read as 31 at the last point, not as a tick of 32 beside it
    (notebook 05's trial); lengths 800, 1,800, 3,800 as themselves."""
    for x in ([1, 2, 4, 8, 16, 31], [800, 1800, 3800]):
        ax = plot.line_plot(x, {"loss": [2.0] * len(x)}, logx=True)
        ax.figure.canvas.draw()
        shown = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels()
                 if t.get_text()]
        assert shown == [(v, f"{v:g}") for v in x], shown
        plt.close(ax.figure)


def test_a_log_x_axis_is_ticked_in_plain_numbers():
    """Lengths on a base-2 axis read as 64, 128, 256, not as 2^6, 2^7, 2^8."""
    ax = plot.line_plot([64, 128, 256, 512], {"loss": [2.0, 2.1, 2.2, 2.3]}, logx=True)
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "64" in labels and "512" in labels, labels
    assert not any("^" in label or "$" in label for label in labels), labels
