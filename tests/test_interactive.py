"""labnn.plot.interactive and the notebooks' interactive figures (labnn.plot.scenes, .loops): the
frames hold the data they claim (attention rows, reach by the formula, the Stack's gradients), the
HTML is self-contained with unique ids, and bad arguments fail with a message naming them. The
browser side (the slider moves the figure on the built site) is tests/test_site_interactive.py."""

import json
import math
import re

import pytest
import torch

from labnn import plot
from labnn.feedback import FeedbackConfig, FeedbackTransformer, Stack
from labnn.feedback import layer as feedback_layer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.memory import segment_mask

PANEL = {"rows": ["a", "b"], "cols": ["x", "y", "z"]}


def simple(**kw):
    frames = [{"caption": f"frame {k}", "values": {0: [[k / 4, None, 0.5], [0, 1, 0.25]]}}
              for k in range(3)]
    return plot.InteractiveFigure("demo", [PANEL], frames, **kw)


def data_of(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json">(.*?)</script>', html,
                                re.DOTALL).group(1))


def test_html_is_self_contained_and_ids_unique():
    a, b = simple()._repr_html_(), simple()._repr_html_()
    for html in (a, b):
        assert not re.search(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', html), "a request elsewhere"
        assert "<style" not in html  # the site's hook moves <style> out of notebook pages
        assert 'type="range"' in html and "aria-live" in html and "frame 0" in html
        assert "run the cell again" in html  # what an untrusted notebook shows instead
    ids = [re.findall(r'\bid="([^"]+)"', html) for html in (a, b)]
    assert len(set(ids[0] + ids[1])) == len(ids[0]) + len(ids[1]), ids
    assert data_of(a)["frames"][2]["values"]["0"][0] == [0.5, None, 0.5]


def test_script_cannot_close_early():
    fig = plot.InteractiveFigure("t", [{**PANEL, "values": [[0, 0, 0], [0, 0, 0]]}],
                                 [{"caption": "ends </script><b>", "label": "<!--"}])
    html = fig._repr_html_()
    assert html.count("</script>") == 2
    assert data_of(html)["frames"][0]["caption"] == "ends </script><b>"


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(title="", panels=[PANEL], frames=[{"caption": "c"}]), ValueError, "title"),
    (dict(title="t", panels=PANEL, frames=[{"caption": "c"}]), TypeError, "panels"),
    (dict(title="t", panels=[PANEL], frames=[]), TypeError, "frames"),
    (dict(title="t", panels=[PANEL], frames=[{"caption": ""}]), ValueError, "caption"),
    (dict(title="t", panels=[PANEL], frames=[{"caption": "c"}]), ValueError, "no values"),
    (dict(title="t", panels=[{**PANEL, "values": [[1, 2, 3]]}], frames=[{"caption": "c"}]),
     ValueError, "2 rows"),
    (dict(title="t", panels=[{**PANEL, "values": [[1, 2], [1, 2]]}], frames=[{"caption": "c"}]),
     ValueError, "3 entries"),
    (dict(title="t", panels=[{**PANEL, "values": [[1, 2, "x"], [1, 2, 3]]}],
          frames=[{"caption": "c"}]), TypeError, "numbers"),
    (dict(title="t", panels=[{**PANEL, "values": [[1, 2, math.nan], [1, 2, 3]]}],
          frames=[{"caption": "c"}]), ValueError, "finite"),
    (dict(title="t", panels=[{**PANEL, "values": [[0] * 3] * 2}],
          frames=[{"caption": "c", "hl": {0: [3]}}]), ValueError, "column indices"),
    (dict(title="t", panels=[{**PANEL, "values": [[0] * 3] * 2}],
          frames=[{"caption": "c", "values": {1: [[0] * 3] * 2}}]), ValueError, "panel 1"),
    (dict(title="t", panels=[{**PANEL, "values": [[0] * 3] * 2}], frames=[{"caption": "c"}],
          start=1), ValueError, "start"),
])
def test_bad_arguments_named(kwargs, error, name):
    with pytest.raises(error, match=name):
        plot.InteractiveFigure(**kwargs)


def test_attention_frames_are_the_models_rows():
    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig(11, seq_len=16, d_model=16, n_heads=2,
                                            n_layers=2)).eval()
    maps = model.attention_maps(torch.randint(0, 11, (1, 7)))
    fig = plot.attention_steps(maps, "to be, ")
    assert [p["cols"] for p in fig.panels][0] == ["t", "o", "␣", "b", "e", ",", "␣"]
    for q in range(7):
        for layer, m in enumerate(maps):
            got = fig.frames[q]["values"][layer]
            for h in range(2):
                row = m[0, h, q]
                assert got[h][q + 1:] == [None] * (6 - q)  # the causal mask: empty cells
                assert got[h][: q + 1] == pytest.approx(row[: q + 1].tolist(), abs=6e-4)
    w, l, h, j = max((m[0, h, 4, j].item(), l, h, j) for l, m in enumerate(maps)
                     for h in range(2) for j in range(5))
    assert f"layer {l}, head {h} → key {j}" in fig.frames[4]["caption"]
    assert f": {w:.2f}" in fig.frames[4]["caption"]
    # it opens at a query with keys on both sides: the prose asks for the masked cells at once
    assert fig.start == 3 and None in fig.frames[fig.start]["values"][0][0]
    # in the dark scheme more weight is a brighter blue (interactive.js): "darker" held in light only
    assert "darker" not in fig.description and "blue" in fig.description, fig.description
    with pytest.raises(ValueError, match="tokens"):
        plot.attention_steps(maps, "too short")
    with pytest.raises(TypeError, match="maps"):
        plot.attention_steps(maps[0], "to be, ")
    # a batch of two was drawn as the first sequence's heads, then the second's as more
    batch = [torch.cat([m, m]) for m in maps]
    with pytest.raises(ValueError, match=r"maps\[0\] must be \[H, T, T\] or \[1, H, T, T\] "
                                         r"\(one sequence: maps\[0\]\[i\]\), got \[2, "):
        plot.attention_steps(batch, "to be, ")


def test_reach_is_the_formula():
    n, seg, mem, layers = 48, 8, 8, 3
    fig = plot.reach_steps({"xl": segment_mask(n, seg, mem), "plain": segment_mask(n, seg, 0)},
                           layers)
    for i in range(n):
        start = i // seg * seg
        for layer in range(1, layers + 1):
            xl = fig.frames[i]["values"][0][layer - 1]
            lo = max(0, start - layer * mem)  # each layer adds mem_len positions
            assert xl == [int(lo <= j <= i) for j in range(n)], (i, layer)
            plain = fig.frames[i]["values"][1][layer - 1]
            assert plain == [int(start <= j <= i) for j in range(n)]
    assert "layer 2 reaches 24–40" in fig.frames[40]["caption"]
    with pytest.raises(ValueError, match="n_layers"):
        plot.reach_steps({"x": segment_mask(8, 4, 4)}, 0)
    with pytest.raises(TypeError, match="boolean"):
        plot.reach_steps({"x": segment_mask(8, 4, 4).float()}, 2)


def test_feedback_frames_are_the_models_attention(monkeypatch):
    torch.manual_seed(0)
    model = FeedbackTransformer(FeedbackConfig(vocab_size=9, d_model=16, n_heads=2, n_layers=2,
                                               attn_len=3, max_distance=3,
                                               shared_kv=True)).eval()
    tokens = torch.randint(0, 9, (6,))
    seen = []  # what feedback_attention itself computes, step by step and layer by layer
    original = feedback_layer.feedback_attention

    def spy(q, k, v, bias, **options):
        seen.append((q.unsqueeze(2) @ k.transpose(-1, -2)).squeeze(2).div(q.size(-1) ** 0.5)
                    .add(bias).softmax(-1)[0] if k.size(2) else None)
        return original(q, k, v, bias, **options)

    monkeypatch.setattr(feedback_layer, "feedback_attention", spy)
    fig = plot.feedback_steps(model, tokens, [str(t) for t in tokens.tolist()])
    monkeypatch.undo()
    assert fig.panels[0]["values"][0] == pytest.approx(model.layer_weights().tolist(), abs=1e-3)
    for t in range(6):
        for layer in range(2):
            grid = fig.frames[t]["values"][layer + 1]
            expected = seen[2 * t + layer]
            first = max(0, t - 3)  # attn_len = 3: the last three steps
            for h in range(2):
                assert grid[h][:first] == [None] * first and grid[h][t:] == [None] * (6 - t)
                if t:
                    assert grid[h][first:t] == pytest.approx(expected[h].tolist(), abs=6e-4)
    assert "no memory yet" in fig.frames[0]["caption"]
    assert "layer 1 reads steps 1–3" in fig.frames[4]["caption"]
    with pytest.raises(ValueError, match="eval mode"):
        plot.feedback_steps(model.train(), tokens, ["a"] * 6)


def test_stack_frames_show_slots_views_and_gradients():
    torch.manual_seed(0)
    values = torch.randn(5, 3)
    grads = [torch.randn(t + 1, 3) for t in range(5)]
    fig = plot.stack_steps(Stack(7, values[0], dim=0), values, grads)
    assert len(fig.frames) == 10 and fig.panels[0]["cols"] == [str(j) for j in range(7)]
    push2 = fig.frames[2]
    assert push2["values"][1] == [[1, 1, 1, None, None, None, None]]
    assert "covers slots 0–2, the same memory as the buffer" in push2["caption"]
    back4, back3 = fig.frames[5]["caption"], fig.frames[6]["caption"]  # 5 pushes: no S_5
    assert "S_5" not in back4 and "S_4 (its read's own only: no later step)" in back4, back4
    assert "S_3 (its read's own plus what S_4 passed down)" in back3, back3
    total = torch.zeros(5, 3)  # dL/dv_j = sum over the reads t >= j of g_t[j] (Exercise 3)
    for g in grads:
        total[: g.size(0)] += g
    last = fig.frames[-1]  # backward of push 0: every value has its gradient
    assert last["values"][2][1][:5] == pytest.approx(total.norm(dim=1).tolist(), abs=1e-3)
    assert f"v_0 (norm {total[0].norm():.2f})" in last["caption"]
    back3 = fig.frames[5 + 1]  # backward of push 3: slots 0..3 arrive, v_3 and v_4 landed
    assert back3["values"][2][1][:3] == [None] * 3 and back3["values"][2][0][4:] == [None] * 3
    with pytest.raises(ValueError, match="read_grads"):
        plot.stack_steps(Stack(7, values[0], dim=0), values, grads[:4])
    with pytest.raises(ValueError, match="capacity"):
        plot.stack_steps(Stack(3, values[0], dim=0), values, grads)


def test_memory_frames():
    acc = {"window": [1.0, 1.0, 0.1, 0.12], "XL": [1.0, 0.9, 0.8, 0.1],
           "feedback": [1.0, 1.0, 1.0, 0.95]}
    reach = {"window": (2, 2), "XL": (2, 3), "feedback": (math.inf, math.inf)}
    costs = {n: {"train ms/step": i + 1.0, "cache KiB": 4.0 - i} for i, n in enumerate(acc)}
    fig = plot.memory_steps(acc, reach, costs, chance=0.125)
    assert fig.panels[0]["struck"] == [[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert fig.panels[1]["cells"][2] == ["3", "2"]
    caption = fig.frames[2]["caption"]
    assert "window: out of reach (at most 2 back), accuracy 0.10" in caption
    assert "XL: reached only from some positions (up to 3 back), accuracy 0.80" in caption
    assert "feedback: within reach (no limit), accuracy 1.00" in caption
    with pytest.raises(ValueError, match="same memories"):
        plot.memory_steps(acc, {"window": (2, 2)}, costs)
