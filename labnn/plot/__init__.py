"""Plots for the notebooks: curves and bars (`figures`), attention maps (`attention`), and figures
a learner can move (`interactive`, built for each notebook by `scenes` and `loops`). In
Jupyter, every figure shown gets an alt text made of the words it draws (`alt`)."""

from labnn.plot import alt
from labnn.plot.attention import attention_heads, attention_heatmap, token_label
from labnn.plot.figures import bar_plot, line_plot, loss_curves, panels
from labnn.plot.interactive import InteractiveFigure
from labnn.plot.loops import feedback_steps, stack_steps
from labnn.plot.scenes import attention_steps, memory_steps, reach_steps

__all__ = ["InteractiveFigure", "attention_heads", "attention_heatmap", "attention_steps",
           "bar_plot", "feedback_steps", "line_plot", "loss_curves", "memory_steps", "panels",
           "reach_steps", "stack_steps", "token_label"]

alt.install()
