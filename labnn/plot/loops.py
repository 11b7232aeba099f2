r"""Interactive figures of step-by-step loops: the Feedback Transformer's token loop (notebook
03) and the `Stack` that holds its keys and values (notebook 04); the other notebooks' are in
`labnn.plot.scenes`.

Dimension letters (the package legend): `T` steps (tokens of one sequence, or pushes), `L`
layers, `H` heads, `S` memory keys read by a step, `C` a stack's capacity, `F` one pushed
value's features.

Both read the real objects (a trained model, a `Stack`) through their public behaviour, and
take them as arguments: `labnn.plot` sits beside `labnn.feedback`, not above it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from labnn.plot.attention import token_label
from labnn.plot.interactive import InteractiveFigure
from labnn.plot.scenes import _span


def feedback_trace(model: torch.nn.Module, tokens: torch.Tensor) -> list[list[torch.Tensor]]:
    r"""Run `model` over one sequence and record what every layer of every step attends to:
    $\mathrm{softmax}(q K^\top / \sqrt{d_h} + b)$ over the memory keys it was given.

    Args:
        model: a Feedback Transformer (`model.layers`: `FeedbackLayer`s), in eval mode.
        tokens: `[T]` token ids.

    Returns:
        `T` lists of `L` tensors `[H, S_t]`, `S_t` = the memory vectors step `t` reads (the
        last `attn_len` steps before it).
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise TypeError("tokens must be a 1-D tensor of token ids [T]")
    layers = getattr(model, "layers", None)
    if layers is None or model.training:
        raise ValueError("model must be a Feedback Transformer (with .layers) in eval mode")
    trace: list[list[torch.Tensor]] = []

    def record(layer, args, kwargs, output):
        x, k = args[:2]
        if layer is layers[0]:
            trace.append([])
        trace[-1].append(layer.attention_weights(x, k, **kwargs)[0].cpu())  # [H, S]

    hooks = [layer.register_forward_hook(record, with_kwargs=True) for layer in layers]
    try:
        with torch.no_grad():
            model(tokens[None].to(next(model.parameters()).device))
    finally:
        for hook in hooks:
            hook.remove()
    if len(trace) != tokens.numel():  # a loop that computes the layers without calling them
        raise TypeError(
            f"{type(model).__name__} ran its layers {len(trace)} times for {tokens.numel()} "
            "tokens: only a model whose token loop calls each FeedbackLayer can be traced "
            "(a FeedbackTransformerKV with loop='autograd': copy the weights with "
            "load_state_dict)")
    return trace


def feedback_steps(model: torch.nn.Module, tokens: torch.Tensor, labels: Sequence[str], *,
                   title: str = "") -> InteractiveFigure:
    r"""Step through a Feedback Transformer's token loop: which memory vectors each layer of
    step `t` reads, with what weights, and how step `t` writes its own
    ($m_t = \sum_l \mathrm{softmax}(w)_l\, x^l_t$).

    Args:
        model: the trained model (eval mode), with `layer_weights()` and `layers`.
        tokens: `[T]` token ids of one sequence.
        labels: `T` printable tokens.
        title: the figure's title.
    """
    trace = feedback_trace(model, tokens)
    t_len = len(trace)
    cols = [token_label(s) for s in labels]
    if len(cols) != t_len:
        raise ValueError(f"labels must have {t_len} entries (one per token), got {len(cols)}")
    mix = model.layer_weights().float().cpu().tolist()
    mix_names = ["embedding"] + [f"layer {l}" for l in range(1, len(mix))]
    n_heads = trace[0][0].size(0)
    panels = [{"title": "what every step writes: its layers mixed by the weights softmax(w)",
               "cols": mix_names, "rows": ["softmax(w)"], "values": [mix], "text": True}]
    panels += [{"title": f"layer {l + 1}: weights on the memory vectors of earlier steps",
                "cols": cols,
                "rows": [f"head {h}" for h in range(n_heads)]} for l in range(len(trace[0]))]
    written = " + ".join(f"{w:.2f}·{n}" for w, n in zip(mix, mix_names))
    frames = []
    for t, weights in enumerate(trace):
        values, parts = {}, []
        for l, w in enumerate(weights):
            first = t - w.size(1)  # the memory vectors read: steps first .. t - 1
            grid = [[None] * t_len for _ in range(n_heads)]
            for h in range(n_heads):
                for s in range(w.size(1)):
                    grid[h][first + s] = w[h, s].item()
            values[l + 1] = grid
            mean = w.mean(0).tolist()
            read = ", ".join(f"step {first + s}: {m:.2f}" for s, m in enumerate(mean))
            parts.append(f"layer {l + 1} reads {_span(list(range(first, t)), 'step')}"
                         + (f" (mean weight over the heads: {read})" if read else ""))
        caption = (f"step {t} '{cols[t]}': " + "; ".join(parts)
                   + f". It then writes m_{t} = {written}.")
        if t == 0:
            caption = (f"step 0 '{cols[0]}': no memory yet, so no layer reads anything. "
                       f"It writes m_0 = {written}.")
        frames.append({"label": f"{t} '{cols[t]}'", "caption": caption, "values": values,
                       "hl": {p: [t] for p in range(1, len(panels))}})
    return InteractiveFigure(title or "The token loop: what each step reads and writes", panels,
                             frames, slider="step t", start=min(t_len - 1, 6), description=(
                                 "Move the slider to pick a step; each row is one head's "
                                 "attention over the memory vectors of the steps before it."))


def stack_steps(stack, values: torch.Tensor, read_grads: Sequence[torch.Tensor], *,
                title: str = "") -> InteractiveFigure:
    r"""Push `values` into an empty `stack` (a `labnn.feedback.Stack` with `dim=0`), read the
    stack after every push, backpropagate $\mathcal{L} = \sum_t \langle g_t, S_t \rangle$ and
    show each step: the slot written, the view handed out, and where the gradients land
    ($\partial\mathcal{L}/\partial v_j = \sum_{t \ge j} g_t[j]$).

    Args:
        stack: an empty stack of capacity `C >= T`, `dim=0`.
        values: `[T, F]` the values pushed, one per step.
        read_grads: `T` tensors `[t + 1, F]`, the gradient `g_t` arriving at read `t`.
        title: the figure's title.
    """
    if not isinstance(values, torch.Tensor) or values.dim() != 2:
        raise TypeError("values must be a [T, F] tensor, one value per step")
    n, cap = values.size(0), getattr(stack, "capacity", None)
    if cap is None or len(stack) != 0 or getattr(stack, "dim", None) != 0 or cap < n:
        raise ValueError(f"stack must be an empty Stack(capacity >= {n}, like, dim=0)")
    if len(read_grads) != n or any(tuple(g.shape) != (t + 1, values.size(1))
                                   for t, g in enumerate(read_grads)):
        raise ValueError("read_grads must be T tensors, read_grads[t] of shape [t + 1, F]")
    v = values.detach().clone().requires_grad_()
    views, arriving, shared = [], {}, []
    for t in range(n):
        s = stack.push(v[t])
        # a view of the one buffer: where the stack's own view and the first push's start
        start = s.data_ptr()
        shared.append(start == stack.view().data_ptr() and (not views or
                                                            start == views[0].data_ptr()))
        s.register_hook(lambda g, t=t: arriving.__setitem__(t, g.detach().clone()))
        views.append(s)
    sum((g.to(s) * s).sum() for g, s in zip(read_grads, views)).backward()
    landed = v.grad.norm(dim=1).tolist()
    top = max(max(g.norm(dim=1).max().item() for g in arriving.values()), 1e-12)
    slots = [str(j) for j in range(cap)]
    empty = [None] * cap
    panels = [{"title": f"the buffer: {cap} slots allocated before the first push", "cols": slots,
               "rows": ["written"]},
              {"title": "the view handed out (no copy)", "cols": slots, "rows": ["S_t"]},
              {"title": "gradient norms in backward", "cols": slots, "scale": top, "text": True,
               "rows": ["arriving at S_t", "landed on v_j"]}]
    frames = []
    for t in range(n):
        cover = [1 if j <= t else None for j in range(cap)]
        same = "the same memory as the buffer: nothing copied" if shared[t] else "a copy"
        frames.append({"label": f"push {t}", "hl": {0: [t]}, "values": {
            0: [cover], 1: [cover], 2: [empty, empty]}, "caption": (
                f"push {t}: v_{t} is written into slot {t}; the view S_{t} handed to step {t} "
                f"covers {_span(list(range(t + 1)), 'slot')}, {same}. "
                f"{cap - t - 1} slot{'s stay' if cap - t - 1 != 1 else ' stays'} free.")})
    for t in reversed(range(n)):
        g = arriving[t].norm(dim=1).tolist()
        cover = [1 if j <= t else None for j in range(cap)]
        frames.append({"label": f"back {t}", "hl": {1: [t], 2: [t]}, "values": {
            0: [[1 if j < n else None for j in range(cap)]], 1: [cover],
            2: [g + [None] * (cap - t - 1), [None] * t + landed[t:] + [None] * (cap - n)]},
            "caption": (
                f"backward of push {t}: the gradient at S_{t} ("
                + (f"its read's own plus what S_{t + 1} passed down" if t < n - 1 else
                   "its read's own only: no later step")
                + f") splits: slot {t} goes to v_{t} (norm {landed[t]:.2f}), "
                + (f"{_span(list(range(t)), 'slot')} pass{'es' if t == 1 else ''} down to "
                   f"S_{t - 1}." if t else
                   "nothing is left to pass down."))})
    return InteractiveFigure(title or "A Stack, push by push, then backward", panels, frames,
                             slider="step", start=min(2, n - 1), description=(
                                 "Move the slider through the pushes (forward) and then the "
                                 "backward pass; the captions name the slots involved."))
