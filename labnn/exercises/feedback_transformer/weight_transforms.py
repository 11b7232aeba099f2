"""Notebook 03's learned weights transformed before use: the layer logits `w` of the memory
vector given to `exp()` before their softmax (in the token loop, where `memory_vector`
names it already), negated (`softmax(-w)`) or given a second softmax (and `xs` reshaped
where a permute was meant), the weighted layers reduced by a max or a logsumexp, or
their mix put through a layer norm (`reductions`, also in the token loop); the relative
bias table given to `exp()` or a softmax before its columns are picked; head 0's bias for
every head, the bias regrouped by `reshape(S, H).T`, a mean over the keys, q added to the
output in the attention. Each is a list of `(result, message)` pairs for the
checkers' `diagnose`. `expect_mix_weights` solves for the weights a mix gave the layers and
names them (reversed, raw, relu, a plain mean, a temperature, a total other than one) where
they are not the softmax of the logits, shown with the digits that tell the two apart;
`row_weights` names weights that differ between the batch rows (computed from the layers'
content); `relu_weights` (`relu_loop` for the token loop) tells relu(w) / relu(w).sum() from
one layer alone, which it is at logits with one positive entry, by a rerun at other logits.

Dimension letters: `L+1` layers (the embedding first), `B` batch, `D` width, `H` heads.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from labnn.feedback.layer import feedback_attention
from labnn.exercises.grading.compare import close
from labnn.exercises.grading.outcomes import fail, first_line
from labnn.exercises.grading.slips import gives


def mix_slips(xs: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` with the weights `softmax(-w)` or `softmax(softmax(w))`, or
    with `xs` regrouped by `reshape(B, L+1, D)` where `permute(1, 0, 2)` was meant."""
    def mix(weights: torch.Tensor, layers: torch.Tensor = xs) -> torch.Tensor:
        return torch.einsum("l,lbd->bd", weights, layers)
    regrouped = xs.reshape(xs.size(1), xs.size(0), -1).transpose(0, 1)
    return [(mix((-w).softmax(0)), "your weights are softmax(-w): the largest logit must get "
                                   "the largest weight, softmax(w) with no minus sign."),
            (mix(w.softmax(0).softmax(0)), "you took the softmax twice (softmax of softmax(w) "
                                           "squeezes the weights toward uniform): once, "
                                           "w.softmax(0)."),
            (mix(w.softmax(0), regrouped), "xs.reshape(B, L+1, D) regroups the numbers in "
             "memory order, it does not move the layer axis: layer l is xs[l]; use "
             "xs.permute(1, 0, 2), or mix along dim 0 as it is, (w.softmax(0)[:, None, "
             "None] * xs).sum(0)."),
            *reductions(xs, w, "memory_vector(xs, w)",
                        "(w.softmax(0)[:, None, None] * xs).sum(0)")]


def reductions(xs: torch.Tensor, w: torch.Tensor, said: str,
               right: str) -> list[tuple[torch.Tensor, str]]:
    """The layers `xs` `[L+1, B, D]` weighted by `softmax(w)` (`w` the logits) and reduced
    by a max over the layers (`amax(0)`), or their mix put through a layer norm, or a
    logsumexp over the layers of `xs` plus `w` or `log_softmax(w)`; `said` opens a message,
    `right` is the mix."""
    p = w.softmax(0)
    weighted = p[:, None, None] * xs
    soft = (f"{said} is a logsumexp over the layers (of the layers plus the logits): a soft "
            f"maximum, not a mix: the memory vector is their weighted SUM, {right}.")
    slips = [(weighted.amax(0), f"{said} takes the max over the layers (amax) of the weighted "
                                f"layers: the memory vector is their SUM, {right}."),
             (F.layer_norm(weighted.sum(0), xs.shape[-1:]),
              f"{said} is the mix put through a layer norm: the memory vector is the mix "
              f"itself, {right}; keys and values normalise it (model.norm_mem)."),
             *[(torch.logsumexp(logits[:, None, None] + xs, 0), soft)
               for logits in (w, w.log_softmax(0))]]
    # layers of small values: logsumexp(log p + xs) is close to the mix itself
    return [(m, message) for m, message in slips if not close(m, weighted.sum(0))]


def attention_slips(q, k, v, bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`feedback_attention(q, k, v, bias)` with head 0's bias added to every head, the bias
    regrouped (`bias.reshape(S, H).T`), the weighted values averaged over the `S` keys
    instead of summed, or `q` added to the output."""
    h, s = bias.shape
    regrouped = ("the bias is regrouped (bias.reshape(S, H).T, or bias.T.reshape(H, S)): "
                 "reshape reorders the numbers, not the axes; bias is [H, S] already: add it "
                 "as it is.")
    return [(feedback_attention(q, k, v, bias.reshape(s, h).T), regrouped),
            (feedback_attention(q, k, v, bias.T.reshape(h, s)), regrouped),
            (feedback_attention(q, k, v, bias) + q, "your output adds q to the weighted values "
             "(a residual): the layer adds its input itself, x + attention; return the "
             "weighted sum of the values alone."),
            (feedback_attention(q, k, v, bias[:1]), "head 0's bias (bias[0]) is added to "
             "every head's scores: head h adds its own row, bias[h]: add bias [H, S] as it is, "
             "which broadcasts over the batch."),
            (feedback_attention(q, k, v, bias) / k.size(2), "you averaged the weighted values "
             f"over the keys (a mean over S = {k.size(2)} divides by S): the softmax weights "
             "already sum to one, so SUM over the keys.")]


def loop_mixes(logits: torch.Tensor, loop: Callable) -> list[tuple[torch.Tensor, str]]:
    """The token loop (`loop(mix)`, `mix(outs)` the memory vector of a step's outputs) with
    the layer logits `model.mix.logits` given to `exp()` before their softmax, negated, or
    cut to the layers after the softmax (the embedding's weight dropped)."""
    def mixed(weights: torch.Tensor) -> Callable:
        return lambda outs: torch.einsum("l,lbd->bd", weights, torch.stack(outs))
    use = "model.mix(torch.stack(outs)) computes the mix for you"
    return [
        (loop(mixed(logits.exp().softmax(0))),
         "your memory vector passes the layer logits through exp() before the softmax "
         f"(softmax already exponentiates): the weights are softmax(model.mix.logits); {use}."),
        (loop(mixed((-logits).softmax(0))),
         f"your memory vector weights the layers by softmax(-model.mix.logits): {use}."),
        (loop(lambda outs: torch.einsum("l,lbd->bd", logits.softmax(0)[1:],
                                        torch.stack(outs[1:]))),
         "your memory vector drops the embedding's weight (softmax(logits)[1:] with the "
         f"layers only): mix ALL the step's outputs, the embedding first; {use}."),
    ]


def table_transformed(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """`relative_bias(table, s)` with `table.exp()`, or a softmax of the table over its
    distances or its heads, before the columns are picked."""
    d = torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1
    said = ("the table holds the biases themselves, added to the scores as they are: pick "
            "its columns, table[:, d.clamp(max=table.size(1)) - 1], and change no entry.")
    return [(table.exp()[:, d], f"{what}: you applied exp() to the table: {said}"),
            (table.softmax(-1)[:, d], f"{what}: you took a softmax of the table over its "
                                      f"distances: {said}"),
            (table.softmax(0)[:, d], f"{what}: you took a softmax of the table over its "
                                     f"heads: {said}")]


def weights_used(mixed: torch.Tensor, layers: torch.Tensor) -> torch.Tensor | None:
    """The weights `p` `[L+1]` with `mixed = sum_l p_l layers[l]` (`mixed` `[B, D]`,
    `layers` `[L+1, B, D]`), solved by least squares over the `B·D` entries in float64;
    None where no mix of the layers gives `mixed` (or the entries are too few)."""
    a = layers.detach().cpu().double().flatten(1).T  # [B·D, L+1]
    y = mixed.detach().cpu().double().reshape(-1)
    if a.size(0) != y.numel() or a.size(0) <= 2 * a.size(1) or not y.isfinite().all():
        return None
    p = torch.linalg.lstsq(a, y[:, None]).solution[:, 0]
    return p if torch.allclose(a @ p, y, atol=1e-4, rtol=1e-4) else None


def _shown(p: torch.Tensor, *others: torch.Tensor) -> str:
    """`p` as a list, with the fewest digits (3 to 6) that tell it from `others`."""
    def shown(x: torch.Tensor, n: int) -> str:
        return "[" + ", ".join(f"{v:.{n}g}" for v in x.where(x.abs() > 1e-6, 0).tolist()) + "]"
    return shown(p, next((n for n in (3, 4, 5) if all(
        shown(p, n) != shown(x, n) for x in others)), 6))


def weights_named(p: torch.Tensor, logits: torch.Tensor, said: str, w: str) -> str | None:
    """What the weights `p` of a mix (from `weights_used`) are, where they are not
    `softmax(logits)`: reversed or otherwise paired with the wrong layers, the raw or
    sigmoid logits, a temperature (`softmax(c·w)`), a total other than one; `said` opens
    the message, `w` names the logits. None where `p` is `softmax(logits)` (or all zero)."""
    lw = logits.detach().cpu().double()
    ref = lw.softmax(0)
    if torch.allclose(p, ref, atol=1e-4) or not p.abs().amax() > 1e-6:  # no mix at all
        return None
    right = f"the weights are softmax({w}), weight l on entry l, the embedding first"
    if torch.allclose(p, ref.flip(0), atol=1e-4):
        return (f"{said} pairs the weights with the layers in reverse order (a flip or "
                f"[::-1] of the layers or of {w}): the top layer got the embedding's "
                f"weight; {right}.")
    if torch.allclose(p.sort().values, ref.sort().values, atol=1e-4):
        return (f"{said} gives the right weights to the wrong layers: {_shown(p)} where "
                f"softmax({w}) is {_shown(ref)}; {right}.")
    for named, how in ((lw, "the raw logits, no softmax"), (lw.sigmoid(), f"sigmoid({w})"),
                       (torch.ones_like(p), "1 each (a plain sum of the layers)"),
                       (lw.relu(), f"relu({w}), zero for a negative logit"),
                       (lw.relu() / lw.relu().sum(), f"relu({w}) / relu({w}).sum(), zero for a "
                                                     "negative logit")):
        if torch.allclose(p, named, atol=1e-4):
            return f"{said} weights the layers by {how}: {right}, positive and summing to one."
    if torch.allclose(p, torch.full_like(p, 1 / len(p)), atol=1e-4):
        return f"{said} is a plain mean of the layers, 1/(L+1) each: {right}, learned."
    centred, lp = lw - lw.mean(), p.clamp(min=1e-300).log()
    c = float(centred @ (lp - lp.mean()) / (centred @ centred).clamp(min=1e-12))
    if (p > 0).all() and abs(float(p.sum()) - 1) < 1e-4 and abs(c - 1) > 1e-3 \
            and torch.allclose(lp - lp.mean(), c * centred, atol=1e-3):
        scale = f"{w} / {1 / c:.3g}" if abs(c) < 1 else f"{w} * {c:.3g}"
        return (f"{said} weights the layers by softmax({scale}), a temperature on the "
                f"logits: {right}, with no scale inside the softmax.")
    out = [("the embedding" if i == 0 else f"layer {i}") for i in range(len(p))
           if abs(p[i]) < 1e-6 < ref[i]]
    if out:
        return (f"{said} gives {', '.join(out)} no weight (its weights: {_shown(p)}): the "
                f"mix runs over all L+1 entries; {right}, {_shown(ref)} here.")
    if abs(float(p.sum()) - 1) > 1e-4:
        total = next(t for n in (3, 4, 5, 6, 9) if (t := f"{float(p.sum()):.{n}g}") != "1")
        return (f"{said}: its weights of the layers, {_shown(p, ref)}, sum to {total}, "
                f"not one (a term added, or a factor?): {right}, {_shown(ref, p)} here, and "
                "nothing more.")
    return (f"{said}: its weights of the layers are {_shown(p, ref)}, not softmax({w}) = "
            f"{_shown(ref, p)}: {right}.")


def relu_weights(rerun: Callable, logits: torch.Tensor, said: str, w: str) -> str | None:
    """The message for weights `relu(w) / relu(w).sum()`, which give the one positive logit of
    the checks' all the weight (one layer alone); None where the answer is not that. `rerun(a,
    b)`: whether the answer with logits `a`, all but the smallest positive, gives the mix by
    `softmax(b)`, `b = log(relu(a))` (softmax of a log is the normalised relu)."""
    lw = logits.detach()
    a = lw - lw.min() - 0.1 * (lw.max() - lw.min())
    if rerun(a, a.relu().log()):
        return (f"{said} weights the layers by relu({w}) / relu({w}).sum(): zero for each "
                "negative logit (all the weight on the one positive logit here, 0 / 0 with "
                f"none): the weights are softmax({w}), exp({w}) / exp({w}).sum(), positive "
                "for every layer.")
    return None


def relu_loop(fn: Callable, tokens: torch.Tensor, make: Callable, otherwise: str) -> str:
    """`relu_weights` of a token loop `fn(model, tokens)`, its models from `make()`, or
    `otherwise`."""
    def rerun(a: torch.Tensor, b: torch.Tensor) -> bool:
        mine, ref = make(), make()
        with torch.no_grad():
            mine.mix.logits.copy_(a)
            ref.mix.logits.copy_(b)
            return gives(fn, mine, tokens, ref(tokens)[0])
    return relu_weights(rerun, make().mix.logits, "your memory vector",
                        "model.mix.logits") or otherwise


def row_weights(got: torch.Tensor, layers: torch.Tensor, said: str, w: str) -> None:
    """Fail where each batch row of `got` `[B, D]` is a mix of its own layers (`layers`
    `[L+1, B, D]`) with weights of its own: weights computed from the layers' content (a
    score of each layer's output), where they are `softmax(w)` alone."""
    if got.shape != layers.shape[1:] or got.size(0) < 2:
        return
    rows = [weights_used(got[b:b + 1], layers[:, b:b + 1]) for b in range(got.size(0))]
    if all(p is not None for p in rows) and not all(
            torch.allclose(p, rows[0], atol=1e-4) for p in rows):  # a fit is exact to ~1e-6
        a, b = _shown(rows[0], rows[1]), _shown(rows[1], rows[0])
        fail(f"{said}: its weights of the layers differ between the batch rows "
             f"({a} in row 0, {b} in row 1): computed from each "
             f"row's outputs (a score of their content?); the weights are softmax({w}) "
             "alone, the same for every row and every step.")


def expect_mix_weights(got: torch.Tensor, layers: torch.Tensor, logits: torch.Tensor,
                       said: str, w: str) -> None:
    """Fail, naming the weights, where `got` `[B, D]` is a mix of `layers` `[L+1, B, D]`
    with weights other than `softmax(logits)` (`weights_named`)."""
    p = weights_used(got, layers) if got.shape == layers.shape[1:] else None
    message = None if p is None else weights_named(p, logits, said, w)
    if message:
        fail(message)


def negative_step(err: Exception, right: str) -> None:
    """A `diagnose`: fail naming a `[::-1]` on a tensor (torch takes no negative step), the
    layers or their weights reversed; `right` says what the mix should be."""
    if isinstance(err, ValueError) and "step must be greater than zero" in str(err):
        fail(f"a [::-1] on a tensor raises in torch (no negative step; .flip(0) would "
             f"reverse), and nothing is to be reversed: {right} "
             f"(torch said: {first_line(err)})")
