"""Review 63 of labnn.plot: figures that drew something other than what they were given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from labnn import plot
from labnn.plot.scenes import _span, reach_steps


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_token_ids_as_a_tensor_label_the_ticks_with_their_values():
    # a learner labels the rows with the ids of the sequence, x[0]: "5", not "tensor(5)"
    ax = plot.attention_heatmap(torch.rand(3, 3), torch.tensor([5, 6, 7]), torch.arange(3))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["5", "6", "7"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert plot.token_label(torch.tensor(4)) == "4"


def test_attention_steps_labels_token_ids_given_as_a_tensor():
    maps = [torch.rand(2, 3, 3).softmax(-1).tril()]
    fig = plot.attention_steps(maps, torch.tensor([1, 2, 3]))
    assert fig.panels[0]["cols"] == ["1", "2", "3"]


def test_bar_plot_draws_numeric_names_in_the_given_order():
    # {layers: loss}: the bars follow the dict's order, each under its own name, not at x = 4, 1, 2
    ax = plot.bar_plot({4: 1.0, 1: 2.0, 2: 3.0})
    fig = ax.figure
    fig.canvas.draw()
    lefts = [round(p.get_x() + p.get_width() / 2) for p in ax.patches]
    assert lefts == [0, 1, 2]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "1", "2"]
    assert [p.get_height() for p in ax.patches] == [1.0, 2.0, 3.0]


def test_bar_plot_refuses_names_that_print_alike():
    with pytest.raises(ValueError, match="1"):
        plot.bar_plot({1: 1.0, "1": 2.0})


def test_span_of_indices_with_gaps_lists_each_run():
    assert _span([0, 1, 2, 3], "key") == "keys 0–3"
    assert _span([1, 3, 5, 6, 7], "key") == "keys 1, 3, 5–7"
    assert _span([2]) == "2"
    assert _span([1, 3]) == "1, 3"


def test_reach_steps_caption_names_a_dilated_mask_s_keys_one_by_one():
    i = torch.arange(8)
    dilated = (i[:, None] >= i[None]) & ((i[:, None] - i[None]) % 2 == 0)
    fig = reach_steps({"dilated": dilated}, 1)
    assert "layer 1 reaches 1, 3, 5, 7" in fig.frames[7]["caption"]


def test_reach_steps_of_many_layers_does_not_lose_the_reach_to_overflow():
    # counting paths in float32 overflows to inf, and inf * 0 = NaN read as "not reached"
    causal = torch.ones(48, 48, dtype=torch.bool).tril()
    fig = reach_steps({"causal": causal}, 120)
    assert "layer 120 reaches 0–47" in fig.frames[47]["caption"]
    assert fig.frames[47]["values"][0][-1] == [1] * 48


@pytest.mark.parametrize("x, ys, axis", [([0, 1, 2], [1.0, 2.0, 3.0], "logx"),
                                         ([1, 2, 3], [-1.0, 2.0, 3.0], "logy")])
def test_line_plot_on_a_log_axis_refuses_a_point_it_could_not_draw(x, ys, axis):
    # a log axis hides x <= 0 (or y <= 0) without a word: the point was silently missing
    with pytest.raises(ValueError, match=axis):
        plot.line_plot(x, {"a": ys}, **{axis: True})


def test_attention_heatmap_refuses_vmin_above_vmax():
    # swapped, the whole matrix was drawn in the darkest colour
    with pytest.raises(ValueError, match="vmin"):
        plot.attention_heatmap(torch.rand(2, 2), vmin=1.0, vmax=0.0)


def test_attention_heads_of_no_head_names_the_shape():
    with pytest.raises(ValueError, match="head"):
        plot.attention_heads(torch.rand(0, 3, 3))


def test_interactive_figure_refuses_negative_values_it_would_draw_as_zero():
    # the drawing clamps a value to [0, scale]: -3 and 0 looked alike, without a word
    from labnn.plot.interactive import InteractiveFigure

    panel = {"rows": ["r"], "cols": ["a", "b"], "values": [[-3.0, 0.5]]}
    with pytest.raises(ValueError, match="-3"):
        InteractiveFigure("scores", [panel], [{"caption": "one frame"}])
    with pytest.raises(ValueError, match="-1"):
        InteractiveFigure("scores", [{"rows": ["r"], "cols": ["a"]}],
                          [{"caption": "one frame", "values": {0: [[-1.0]]}}])


def test_attention_steps_of_a_banded_model_names_the_keys_its_band_hides():
    # a model with attn_len=2: query 6 reads keys 4-6 only, yet the caption said "may attend
    # to keys 0–6" and compared the weights with a uniform 1/7
    from labnn.transformer import TransformerConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig(11, seq_len=8, d_model=16, n_heads=2, n_layers=2,
                                            attn_len=2)).eval()
    maps = model.attention_maps(torch.randint(0, 11, (1, 8)))
    fig = plot.attention_steps(maps, "abcdefgh")
    caption = fig.frames[6]["caption"]
    assert "may attend to keys 4–6" in caption, caption
    assert "hides keys 0–3, 7" in caption, caption
    assert "uniform would give 0.33" in caption, caption
    assert fig.frames[6]["values"][0][0][:4] == [None] * 4  # drawn empty, as the causal mask
    # a causal model's captions are as before
    plain = TransformerLM(TransformerConfig(11, seq_len=8, d_model=16, n_heads=2,
                                            n_layers=1)).eval()
    fig = plot.attention_steps(plain.attention_maps(torch.randint(0, 11, (1, 8))), "abcdefgh")
    assert "may attend to keys 0–6; the causal mask hides key 7." in fig.frames[6]["caption"]


def test_stack_steps_does_not_call_a_list_stack_s_first_push_copy_free():
    # torch.stack copies at every push, the first too: it was captioned "nothing copied"
    from labnn.feedback import ListStack, Stack

    v, grads = torch.randn(3, 2), [torch.ones(t + 1, 2) for t in range(3)]
    listed = plot.stack_steps(ListStack(4, v[0], dim=0), v, grads)
    assert all("a copy" in f["caption"] for f in listed.frames[:3])
    stacked = plot.stack_steps(Stack(4, v[0], dim=0), v, grads)
    assert all("nothing copied" in f["caption"] for f in stacked.frames[:3])
    assert "1 slot stays free" in stacked.frames[2]["caption"]


def test_memory_steps_draws_a_never_tested_distance_empty():
    # accuracy_by_distance gives NaN where no position lies that far back ("never tested")
    fig = plot.memory_steps({"a": [1.0, float("nan")], "b": [0.5, 0.25]},
                            {"a": (1, 1), "b": (2, 2)},
                            {"a": {"ms": 1.0}, "b": {"ms": 2.0}})
    assert fig.panels[0]["values"][0] == [1.0, None]
    assert "a: out of reach (at most 1 back), accuracy not measured" in fig.frames[1]["caption"]


def test_memory_steps_names_a_cost_that_is_not_a_finite_number():
    # it failed inside the number formatting: "cannot convert float NaN to integer"
    with pytest.raises(ValueError, match=r"costs\['b'\]\['ms'\]"):
        plot.memory_steps({"a": [1.0], "b": [0.5]}, {"a": (1, 1), "b": (2, 2)},
                          {"a": {"ms": 1.0}, "b": {"ms": float("nan")}})
