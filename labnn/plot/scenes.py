r"""The notebooks' interactive figures: each turns what a notebook computed into frames of an
`InteractiveFigure` (`labnn.plot.interactive`), one slider position per query, step or distance.

Dimension letters (the package legend): `L` layers, `H` heads, `T` queries, `S` keys. Every
caption states the numbers of its frame, so a reader (or a test) can check the picture against
the data.

* `attention_steps` (notebook 01): a trained model's attention, one query at a time.
* `reach_steps` (02): which inputs each layer's output can depend on, under per-layer masks.
* `feedback_steps` (03) and `stack_steps` (04), the step-by-step loops of notebooks 03 and
  04 (a Feedback step's reads, a `Stack`'s buffer), live in `labnn.plot.loops`.
* `memory_steps` (05): three memories at a chosen distance: reach, accuracy and cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from labnn.nn.arguments import check_int
from labnn.plot.attention import token_label
from labnn.plot.interactive import InteractiveFigure


def _span(cols: Sequence[int], noun: str = "") -> str:
    """Sorted indices in words, each run of consecutive ones as a range: "keys 3–7", "key 3",
    "keys 1, 3, 5–7", "no key" (without a noun: "3–7")."""
    if not cols:
        return f"no {noun}".strip() if noun else "none"
    runs = [[cols[0], cols[0]]]
    for j in cols[1:]:
        if j == runs[-1][1] + 1:
            runs[-1][1] = j
        else:
            runs.append([j, j])
    numbers = ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in runs)
    return f"{noun}{'s' if len(cols) > 1 else ''} {numbers}" if noun else numbers


def _readable(value: float) -> str:
    """A number as a learner reads it, never in e-notation: whole numbers and numbers from 100 up
    as integers with thousands separators ("1,024"), others with three significant digits
    ("12.3", "0.457", "0.0123")."""
    value = float(value)
    if value == round(value) or abs(value) >= 99.95:
        return f"{value:,.0f}"
    rounded = float(f"{value:.3g}")  # 9.9996 -> 10.0: its digits, not the value's
    digits = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return f"{value:,.{digits}f}"


def _tokens(labels, n: int, name: str = "tokens") -> list[str]:
    labels = list(labels)
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries (one per position), got {len(labels)}")
    return [token_label(t) for t in labels]


def attention_steps(maps: Sequence[torch.Tensor], tokens, *, title: str = "") -> InteractiveFigure:
    """One query at a time: its attention weights over the keys, every head of every layer.

    Args:
        maps: one tensor per layer, `[H, T, T]` or `[1, H, T, T]` (e.g.
            `TransformerLM.attention_maps`), causal: weights of keys after the query are 0.
            A key weighted 0 by every head of every layer (before a band, `attn_len`) is
            read as masked too: drawn empty, and named in the caption.
        tokens: `T` labels, one per position (a string gives one per character).
        title: the figure's title (default: says what it shows).

    Returns:
        An `InteractiveFigure`: frame `q` shows row `q` of every head; keys after `q` (the
        causal mask), and masked keys before it, are empty cells.
    """
    if isinstance(maps, torch.Tensor) or not isinstance(maps, Sequence) or not maps:
        raise TypeError("maps must be a non-empty list of tensors, one per layer")
    for l, m in enumerate(maps):  # one sequence: a batch would be drawn as more heads
        if not isinstance(m, torch.Tensor) or m.dim() not in (3, 4) or m.dim() == 4 and len(m) != 1:
            raise ValueError(f"maps[{l}] must be [H, T, T] or [1, H, T, T] (one sequence: "
                             f"maps[{l}][i]), got {list(getattr(m, 'shape', [type(m).__name__]))}")
    heads = [m.detach().float().cpu().reshape(-1, *m.shape[-2:]) for m in maps]  # L x [H, T, T]
    t = heads[0].size(-1)
    if any(h.shape[-2:] != (t, t) for h in heads):
        raise ValueError(f"maps must be square [.., T, T] with the same T, got "
                         f"{[list(h.shape) for h in heads]}")
    labels = _tokens(tokens, t)
    # full colour from the 98th percentile of the weights of queries with 4 keys or more (a query
    # with few keys has large weights by necessity): the differences between heads stay visible
    seen = torch.cat([a[:, q, : q + 1].flatten() for a in heads for q in range(min(3, t - 1), t)])
    scale = max(seen.quantile(0.98).item(), 0.05)
    panels = [{"title": f"layer {l} (full colour: weight {scale:.2f} or more)", "scale": scale,
               "rows": [f"head {h}" for h in range(a.size(0))], "cols": labels}
              for l, a in enumerate(heads)]
    # a key no head of any layer gives weight is masked (a band, padding), not merely ignored
    read = torch.stack([a != 0 for a in heads]).flatten(0, 1).any(0).tril()  # [T, T]
    frames = []
    for q in range(t):
        keys = read[q].nonzero().flatten().tolist()  # the keys query q may attend
        kept = set(keys)
        values = {l: [[w if j in kept else None for j, w in enumerate(row)]
                      for row in a[:, q].tolist()] for l, a in enumerate(heads)}
        best = max(((a[h, q, j].item(), l, h, j) for l, a in enumerate(heads)
                    for h in range(a.size(0)) for j in keys or [q]))
        w, l, h, j = best
        hidden = [k for k in range(t) if k not in kept]
        hidden = (f"the causal mask hides {_span(hidden, 'key')}" if hidden == list(
            range(q + 1, t)) else f"the mask hides {_span(hidden, 'key')}") if hidden else (
            "no key comes after it")
        caption = (f"query {q} '{labels[q]}' may attend to {_span(keys, 'key')}; "
                   f"{hidden}. Largest weight: layer {l}, head {h} → key {j} "
                   f"'{labels[j]}': {w:.2f} (uniform would give {1 / max(len(keys), 1):.2f}).")
        frames.append({"label": f"{q} '{labels[q]}'", "caption": caption, "values": values,
                       "hl": {l: [q] for l in range(len(heads))}})
    return InteractiveFigure(title or "Attention of one query, every head", panels, frames,
                             slider="query", start=t // 2, description=(  # keys on both sides
                                 "Move the slider to pick a query position; each row is one head's "
                                 "attention weights over the keys (the stronger the blue, the more "
                                 "weight)."))


def reach_steps(masks: Mapping[str, torch.Tensor], n_layers: int, *, boundaries=(),
                title: str = "") -> InteractiveFigure:
    r"""Which input positions each layer's output at a query can depend on, when every layer
    attends under the same mask: $R_1 = M$, $R_l = R_{l-1} M$ (boolean product).

    Args:
        masks: name -> `[N, N]` boolean mask (True = may attend), e.g.
            `segment_mask(48, 8, 8)` and the plain segments `segment_mask(48, 8, 0)`.
        n_layers: `L`, how many layers to follow.
        boundaries: positions where a segment starts, drawn as lines.
        title: the figure's title.

    Returns:
        An `InteractiveFigure`: frame `i` shows, for each mask, the positions layer
        `1..L` reaches from query `i` (filled = reachable).
    """
    if not isinstance(masks, Mapping) or not masks:
        raise TypeError("masks must be a non-empty dict: name -> [N, N] boolean mask")
    check_int("n_layers", n_layers)
    reach, n = {}, None
    for name, mask in masks.items():
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            raise TypeError(f"masks[{name!r}] must be a 2-D boolean tensor")
        n = mask.size(0) if n is None else n
        if mask.shape != (n, n):
            raise ValueError(f"masks[{name!r}] has shape {list(mask.shape)}, expected [{n}, {n}]")
        layers, step = [], mask.cpu().float()
        m = step
        for _ in range(n_layers):
            layers.append(m > 0)
            m = ((m @ step) > 0).float()  # reached or not: counting paths would overflow
        reach[name] = torch.stack(layers)  # [L, N, N]
    sep = sorted(int(j) for j in boundaries if 0 < int(j) < n)
    panels = [{"title": name, "rows": [f"layer {l + 1}" for l in range(n_layers)],
               "cols": [str(j) for j in range(n)], "sep": sep} for name in reach]
    frames = []
    for i in range(n):
        parts, values = [], {}
        for p, (name, r) in enumerate(reach.items()):
            values[p] = r[:, i].int().tolist()
            ranges = [_span(r[l, i].nonzero().flatten().tolist()) for l in range(n_layers)]
            parts.append(f"{name}: " + ", ".join(f"layer {l + 1} reaches {s}"
                                                 for l, s in enumerate(ranges)))
        frames.append({"label": str(i), "caption": f"query {i}. " + "; ".join(parts) + ".",
                       "values": values, "hl": {p: [i] for p in range(len(reach))}})
    return InteractiveFigure(title or "Reachable positions, layer by layer", panels, frames,
                             slider="query position", start=n - 1, description=(
                                 "Move the slider to pick a query; filled cells are the input "
                                 "positions each layer's output there can depend on."))


def memory_steps(accuracy: Mapping[str, Sequence[float]], reach: Mapping[str, tuple],
                 costs: Mapping[str, Mapping[str, float]], *, chance: float | None = None,
                 title: str = "", cost_title: str = "cost (shade: relative to the largest)"
                 ) -> InteractiveFigure:
    """Several memories at a chosen distance: can they reach it, do they recall, what it costs.

    Args:
        accuracy: name -> recall accuracy at distance `d = 1..D` (entry `d - 1`; NaN, where
            no position lay that far back, is drawn empty).
        reach: name -> `(always, at_most)`: every query reaches `always` tokens back, some
            reach `at_most` (`math.inf`: no limit).
        costs: name -> {cost name: value}, the same cost names for every memory.
        chance: the accuracy of guessing, named in the captions.
        title: the figure's title.
        cost_title: the title of the cost panel (say where the costs were measured).
    """
    for arg, value in (("accuracy", accuracy), ("reach", reach), ("costs", costs)):
        if not isinstance(value, Mapping) or not value:
            raise TypeError(f"{arg} must be a non-empty dict keyed by memory name")
    names = list(accuracy)
    if set(reach) != set(names) or set(costs) != set(names):
        raise ValueError(f"accuracy, reach and costs must name the same memories, got "
                         f"{names}, {list(reach)}, {list(costs)}")
    # NaN: no position lay that far back (`accuracy_by_distance`), drawn as an empty cell
    acc = {n: [None if math.isnan(float(a)) else float(a) for a in accuracy[n]]
           for n in names}
    d_max = len(acc[names[0]])
    if any(len(a) != d_max for a in acc.values()):
        raise ValueError("accuracy must give every memory the same number of distances")
    cost_names = list(costs[names[0]])
    if any(list(costs[n]) != cost_names for n in names):
        raise ValueError(f"costs must give every memory the same costs {cost_names}")
    for n, c in ((n, c) for n in names for c in cost_names):
        if not math.isfinite(float(costs[n][c])):  # a cost not measured has no shade
            raise ValueError(f"costs[{n!r}][{c!r}] must be a finite number, got "
                             f"{costs[n][c]!r}")
    top = {c: max(float(costs[n][c]) for n in names) or 1.0 for c in cost_names}
    panels = [
        {"title": "recall accuracy by distance d (struck through: out of reach)", "rows": names,
         "cols": [str(d) for d in range(1, d_max + 1)], "values": [acc[n] for n in names],
         "struck": [[d > reach[n][1] for d in range(1, d_max + 1)] for n in names]},
        {"title": cost_title, "rows": names, "cols": cost_names,
         "values": [[float(costs[n][c]) / top[c] for c in cost_names] for n in names],
         "cells": [[_readable(costs[n][c]) for c in cost_names] for n in names]},
    ]
    frames = []
    for d in range(1, d_max + 1):
        parts = []
        for n in names:
            always, at_most = reach[n]
            where = ("within reach of every query" if d <= always else
                     f"reached only from some positions (up to {at_most} back)" if d <= at_most
                     else f"out of reach (at most {at_most} back)")
            if math.isinf(always):
                where = "within reach (no limit)"
            a = acc[n][d - 1]
            parts.append(f"{n}: {where}, accuracy "
                         + ("not measured" if a is None else f"{a:.2f}"))
        guess = f" (chance {chance:.2f})" if chance is not None else ""
        frames.append({"label": f"d = {d}", "caption": f"distance {d}{guess}. " + "; ".join(parts)
                       + ".", "hl": {0: [d - 1]}})
    return InteractiveFigure(title or "Three memories at one distance", panels, frames,
                             slider="distance d", start=d_max - 1, description=(
                                 "Move the slider to pick how far back the value lies; the "
                                 "captions say which memory can reach it and how often it "
                                 "recalls it."))
