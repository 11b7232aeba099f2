"""Plots for the notebooks: curves and bars (`figures`), attention maps (`attention`)."""

from labnn.plot.attention import attention_heads, attention_heatmap, token_label
from labnn.plot.figures import bar_plot, line_plot, loss_curves, panels

__all__ = ["attention_heads", "attention_heatmap", "bar_plot", "line_plot", "loss_curves",
           "panels", "token_label"]
