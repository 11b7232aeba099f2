"""Review 64 of labnn.plot: `line_plot`'s running mean mixed values from both sides of a
gap (None or NaN: a length that ran out of memory)."""

import math

import matplotlib

matplotlib.use("Agg")

from labnn import plot  # noqa: E402


def drawn(line):
    return [(x, y) for x, y in zip(line.get_xdata(), line.get_ydata()) if math.isfinite(y)]


def test_line_plot_smooths_each_side_of_a_gap_alone():
    ys = [0.0, 0.0, 0.0, None, 10.0, 10.0, 10.0, 10.0]
    ax = plot.line_plot(range(8), {"a": ys}, smooth=2)
    faint, mean = ax.lines
    # the mean over (2, 0.0) and (4, 10.0) was drawn at (3, 5.0): a value never measured
    assert {y for _, y in drawn(mean)} == {0.0, 10.0}
    assert [x for x, _ in drawn(mean)] == [0.5, 1.5, 4.5, 5.5, 6.5]
    # the gap stays a gap: the line breaks between x = 1.5 and x = 4.5
    assert any(not math.isfinite(y) for y in mean.get_ydata())
    assert len(drawn(faint)) == 7


def test_line_plot_a_piece_shorter_than_smooth_is_not_averaged_with_another():
    ys = [1.0, float("nan"), 3.0, 3.0, 3.0]
    ax = plot.line_plot(range(5), {"a": ys}, smooth=2)
    assert [y for _, y in drawn(ax.lines[-1])] == [3.0, 3.0]
