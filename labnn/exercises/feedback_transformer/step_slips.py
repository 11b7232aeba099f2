"""Slips of notebook 03's token loop told by which of its steps differ: a loop over B
steps in place of T (`step_count`), one that stops a token early or stores each step's
logits one position late (`steps_off`), a wrong input of `model.mix` at step 0, or its
mix reduced by a max or put through a layer norm (`mix_input_slip`), and batch rows that
leak into each other (`rows_mixed`, also where a mix written in place of `model.mix` leaks
them). Called by `check_token_loop`;
`off_entries` marks the entries that `close` (the check's own comparison) calls different,
so that the first step off is found.

Dimension letters: `B` batch, `T` tokens, `D` model width, `L` layers, `V` vocabulary.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.feedback_transformer.weight_transforms import (
    reductions, row_weights, weights_named, weights_used)
from labnn.exercises.feedback_transformer.token_loop_slips import watch
from labnn.feedback.model import FeedbackTransformer


def off_entries(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """A bool tensor of `want`'s shape: True where `got` is off by more than `close`'s
    tolerance (NaN in `got` counts as off), so a result `close` refuses has an entry off."""
    return ~torch.isclose(got.detach().to(want.dtype), want.detach(), atol=1e-5, rtol=1e-4)


def step_count(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Logits `[B, k, V]` with `k = B != T` steps, equal to the first `k` steps: a loop over
    `tokens.size(0)`."""
    n, t, v = want.shape
    if got.dim() == 3 and tuple(got.shape) == (n, n, v) and n != t and torch.allclose(
            got.detach(), want[:, :n], atol=1e-4):
        fail(f"{what} has shape [B, T, V] = [{n}, {n}, {v}], expected [{n}, {t}, {v}]: your "
             f"loop ran B = {n} steps: tokens is [B, T]; run T = tokens.size(1) = {t} steps.")


def steps_off(got: torch.Tensor, want: torch.Tensor, step: int, what: str) -> None:
    """Logits `[B, T, V]` that differ from step `step` on: each step's logits one position
    late (position t holds step t - 1's), or right up to step T - 2 with the last step a
    copy of the one before, zeros, or alone wrong: a loop that stops one token early."""
    got, t = got.detach(), want.size(1)
    if step == 0 and t > 2 and close(got[:, 1:], want[:, :-1]):
        first = ("the last step's: a .roll(1, dims=1)?" if close(got[:, 0], want[:, -1])
                 else "none of the steps'")
        fail(f"the logits of {what} come one step late: position t holds the logits of step "
             f"t - 1 (position 0 {first}): store each step's logits at its own position t, "
             "computed from x[:, t], e.g. torch.stack(tops, dim=1) in order.")
    if step != t - 1 or step == 0:
        return
    said = (f"repeats step t = {t - 2}" if close(got[:, -1], got[:, -2]) else
            "is all zeros" if not got[:, -1].any() else "")
    fail(f"the logits of {what} match up to step t = {t - 2}; the last step, t = {t - 1}, "
         + (f"{said}: your loop stops one token early (range(T - 1)?). " if said else
            "alone differs: a loop that stops one token early (range(T - 1)), the last "
            "logits copied or left unfilled? ")
         + f"Run every step, for t in range(T), T = tokens.size(1) = {t}.")


def mix_input_slip(model: FeedbackTransformer, tokens: torch.Tensor, seen: list,
                   projected: list) -> None:
    """Name what is wrong with the first input of `model.mix` (step 0, empty memory), when
    it is not `torch.stack([embedding, layer 1, ..., layer L])`, `[L + 1, B, D]`; or with
    the weights of the step's outputs in `m_0`, the first memory vector projected
    (`projected`), where they are not `softmax(model.mix.logits)` (a mix of the loop's own,
    or `model.mix` reversed, scaled or added to)."""
    with torch.no_grad():
        x = model.embed(tokens[:, :1])
        keys, values = model.project_memory(x[:, :0])
        outs = [x[:, 0]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        want = torch.stack(outs)
    said = "the input of model.mix at step 0"
    order = [next((j for j, o in enumerate(want) if close(e, o)), -1) for e in seen[0]] \
        if seen and seen[0].shape == want.shape else []
    if sorted(order) == list(range(len(want))) != order:  # the outputs, in another order
        fail(f"{said} is the step's outputs "
             + ("in reverse order (outs[::-1], or a flip)" if order[::-1] == sorted(order)
                else f"in the order {order} (0 the embedding, l layer l)")
             + ": stack them embedding first, then layer 1, ..., layer L, torch.stack(outs): "
             "mix weight l belongs to entry l.")
    if projected and not projected[0].any():
        fail("the first memory vector your loop projects is all zeros: a slot of a zero-"
             "filled memory read before its step wrote it (mem[:, :t + 1] at step t?): step "
             "t reads m_0 .. m_{t-1} only, mem[:, :t], each written after its step.")
    if not seen or close(seen[0], want):
        p = weights_used(projected[0], want) if projected else None
        said = "your loop never calls model.mix; " * (not seen) + "your memory vector m_0"
        for m, message in reductions(want, model.mix.logits.detach(), said,
                                     "model.mix(torch.stack(outs))") if projected else ():
            if m.shape == projected[0].shape and close(projected[0], m):
                fail(message)
        if p is not None and (named := weights_named(p, model.mix.logits, said,
                                                     "model.mix.logits")):
            fail(named)
    if not seen:
        fail("your loop never calls model.mix: the memory vector m is the learned mix of "
             "the step's outputs, model.mix(torch.stack(outs)), [L + 1, B, D] -> [B, D].")
    if close(seen[0], want):
        return
    if close(seen[0], want.transpose(0, 1).reshape(want.shape)):
        fail(f"{said} is torch.stack(outs, 1), [B, L + 1, D], reshaped to [L + 1, B, D]: "
             "reshape reorders the entries; stack along dim 0, torch.stack(outs).")
    if close(seen[0][:-1], want[:-1]) and close(seen[0][-1], want[-2]):
        fail(f"{said}: its last entry is layer L - 1's output, not the top layer's: m_t was "
             "mixed before the top layer ran; mix once the step is done, "
             "model.mix(torch.stack(outs)) of all L + 1 outputs.")
    if close(seen[0][1:], want[1:]):
        fail(f"{said} leaves the embedding out: entry 0 must be the step's embedding "
             "x[:, t], then layer 1, ..., layer L.")
    fail(f"{said} is not torch.stack([x[:, 0], layer 1, ..., layer L]), [L + 1, B, D]: "
         "the step's embedding first, then every layer's output.")


def rows_mixed(fn, model: FeedbackTransformer, tokens: torch.Tensor, got: torch.Tensor,
               what: str, own_mix: bool = False) -> None:
    """Fail when row 0 of `fn(model, tokens)` (`got`, wrong) is the same on a second call but
    changes where only the other rows' tokens change: the batch rows leak into each other
    (a sum or mean over the batch axis, e.g. in the memory vector). `own_mix`: the loop
    never called `model.mix`, so the mix written in its place is the likely leak."""
    other = tokens.clone()
    other[1:] = (other[1:] + 1) % model.config.vocab_size
    try:
        again, changed = fn(model, tokens.clone()), fn(model, other)
    except Exception:  # noqa: BLE001 (the check's own call ran: a rerun only names)
        return
    if all(isinstance(r, torch.Tensor) and r.shape == got.shape for r in (again, changed)) \
            and close(again[:1].detach(), got[:1].detach()) \
            and not close(changed[:1].detach(), got[:1].detach()):
        if own_mix:
            fail(f"{what}: your loop never calls model.mix, and the logits of row 0 change "
                 "when only the other rows' tokens do: your own mix (or another step) mixes "
                 "the batch rows (an einsum 'l,lbd->d', a sum over dim 1?); each row's m is "
                 "its own mix, model.mix(torch.stack(outs)), [L + 1, B, D] -> [B, D].")
        fail(f"{what}: the logits of row 0 change when only the tokens of the other rows do: "
             "your loop mixes the batch rows (a sum, mean or einsum over the batch axis, dim "
             "0?); each row runs on its own tokens: keep the batch axis B apart at every step.")


def record_steps(model: FeedbackTransformer, projected: list) -> Callable[[], tuple]:
    """Keep the input of `model.layers[0]` and every layer's output at each call (and name
    steps joined end to end for `model.head`, `_head_input`); the
    function returned freezes them, with the memory vectors `projected` (`m_0`, then the
    newest of each later call), for `later_memory`: call it right after the learner's loop."""
    kept = [[] for _ in range(len(model.layers) + 1)]
    model.head.register_forward_pre_hook(_head_input)
    for i, layer in enumerate(model.layers):
        layer.register_forward_hook(lambda _, args, out, i=i: (
            kept[0].append(args[0].detach()) if i == 0 and args else None,
            kept[i + 1].append(out.detach())) and None)
    return lambda: (list(projected), [list(k) for k in kept])


def _head_input(head, args: tuple) -> None:
    """A forward pre-hook for `model.head`: the tops joined end to end, `[B, T·D]`
    (`torch.cat(tops, dim=1)` of `[B, D]` steps), fail inside its norm with a bare error."""
    x, d = args[0], head.proj.in_features
    if isinstance(x, torch.Tensor) and x.dim() == 2 and x.size(1) != d and not x.size(1) % d:
        fail(f"model.head got {list(x.shape)} = [B, T·D]: torch.cat(tops, dim=1) joins the "
             "steps' [B, D] outputs end to end; torch.stack(tops, dim=1) gives [B, T, D], "
             "one row per step, for model.head.")


def later_memory(model: FeedbackTransformer, trace: tuple,
                 first: Callable[[], None] | None = None) -> None:
    """Fail naming the first memory vector `m_t` after a right `m_0` that is not
    `model.mix` of step t's own outputs (`trace` from `record_steps`, one layer call a
    step): its weights change from step to step or between the batch rows (`row_weights`,
    at any step), or it mixes in other steps' vectors. `first`: name a wrong `m_0` too, by
    `first()` (`mix_input_slip`) or as no mix: where the logits hide it (`model.norm_mem`
    undoes a scale of m, or a layer norm on it)."""
    projected, kept = trace
    if len({len(k) for k in kept}) != 1 or len(projected) != len(kept[0]):
        return
    for t, m in enumerate(projected):
        layers = torch.stack([k[t] for k in kept])  # [L + 1, B, D]: step t's outputs
        weights = model.mix.weights().detach()  # not model.mix(...): its hook keeps `seen`
        if m.shape != layers.shape[1:] or close(m, torch.einsum("l,lbd->bd", weights, layers)):
            continue
        row_weights(m, layers, f"your memory vector m_{t}", "model.mix.logits")
        if t == 0 and first is None:
            return
        if t == 0:
            first()  # named by what it is, a reduction or its weights, if it can be
        said = f"your memory vector m_{t}" + (" (m_0 is right)" if t == 1 else
                                              f" (m_0 to m_{t - 1} are right)" if t else "")
        p = weights_used(m, layers)
        named = p is not None and weights_named(p, model.mix.logits, said, "model.mix.logits")
        fail((named.replace(": the weights", ", not at every step the same: the weights", 1)
              if t else named) if named else f"{said} is no mix of step {t}'s own outputs, "
             "whatever the weights (a running mean of the memory vectors, or an earlier "
             "step's outputs?): each step writes model.mix(torch.stack(outs)) of its own "
             "outputs; the earlier steps reach it through the memory.")


def memory_on(fn: Callable, model: FeedbackTransformer, tokens: torch.Tensor,
              earlier: torch.Tensor | None = None) -> None:
    """Run `fn` on a watched copy of `model` and name a memory vector that is no mix of its
    step's outputs (`later_memory`), `m_0` too: where the check's model is too small for its
    logits to show it; `earlier`: the mix logits of the check's first model, whose
    weights in `m_0` were kept between calls."""
    model, projected = copy.deepcopy(model), []
    watch(model, [], first=projected)
    trace = record_steps(model, projected)
    try:
        with torch.no_grad():
            fn(model, tokens.clone())
    except Exception:  # noqa: BLE001 (a rerun only names)
        return
    projected, kept = trace()

    def first() -> None:
        p = weights_used(projected[0], torch.stack([k[0] for k in kept]))
        if p is not None and earlier is not None and torch.allclose(
                p, earlier.detach().cpu().double().softmax(0), atol=1e-4):
            fail("your memory vector m_0 on a new model weights the layers by softmax of "
                 "the check's FIRST model's mix.logits: weights kept between calls (a global "
                 "computed once?): mix with the model you are given, "
                 "model.mix(torch.stack(outs)), in every call.")

    later_memory(model, (projected, kept), first)


def layer_reads(fn: Callable, model: FeedbackTransformer, tokens: torch.Tensor) -> None:
    """Run `fn` on a copy of `model` and name the first layer whose newest memory key or
    value is not its own projection's, `model.project_memory`'s newest for that layer, but
    another layer's (`keys[i % 2]`, written for 2 layers; `keys[t % L]`, by the step)."""
    model, newest, found, step = copy.deepcopy(model), [], [], [-1]
    project = model.project_memory

    def project_memory(memory, *args, **kwargs):
        out = project(memory, *args, **kwargs)
        if memory.size(1):
            newest[:] = [[x[..., -1, :] for x in kv] for kv in out]  # [keys, values]
        return out

    def hook(i: int, args: tuple) -> None:
        step[0] += i == 0
        if found or not newest or len(args) < 3 or not all(
                isinstance(a, torch.Tensor) and a.dim() == 4 and a.size(2) for a in args[1:3]):
            return
        layers = [next((j for j, n in enumerate(made) if n.shape == a.shape[:2] + a.shape[3:]
                        and torch.equal(n, a[..., -1, :])), None)
                  for a, made in zip(args[1:3], newest)]
        if None not in layers and layers != [i, i]:
            found.append((step[0], i, *layers))

    model.project_memory = project_memory
    for i, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(lambda _, args, i=i: hook(i, args))
    try:
        with torch.no_grad():
            fn(model, tokens.clone())
    except Exception:  # noqa: BLE001 (a rerun only names)
        return
    if not found:
        return
    t, i, k, v = found[0]
    read = (f"the keys and values of layer {k} (keys[{k}], values[{k}])" if k == v else
            f"its own keys but the values of layer {v} (values[{v}])" if k == i else
            f"its own values but the keys of layer {k} (keys[{k}])" if v == i else
            f"the keys of layer {k} and the values of layer {v}")
    fail(f"at step t = {t}, model.layers[{i}] read {read}: each layer attends over its own "
         "projection of the memory, keys[i], values[i] for layer i, at every step (not an "
         "index computed from the step t, nor one written for 2 layers such as i % 2).")
