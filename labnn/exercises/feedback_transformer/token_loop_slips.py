"""The memory slips of notebook 03's token loop that read the wrong steps' memory (the
step's own embedding put in the memory before the layers run, the memory appended one
step late, a zero vector as the first memory, the keys appended to the values, keys and
values swapped): the loop written out with each, for `token_loop`; the guards on the model
handed to the learner (`watch`), which name a model part called with an input of the
wrong shape (or a layer handed every layer's keys), and an embedding written in place
(`embedding_kept`); the parameters the memory's gradient misses, the first named.

Dimension letters: `B` batch, `T` tokens, `D` model width.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.exercises.grading import expect_gradients
from labnn.exercises.grading.outcomes import fail, first_line, saved_changed
from labnn.exercises.feedback_transformer.weight_transforms import loop_mixes
from labnn.feedback.base import FeedbackBase
from labnn.feedback.layer import feedback_step
from labnn.feedback.model import FeedbackTransformer

# what computes the loop, or one whole step of it, for the learner: refused by name
REFERENCE = {FeedbackTransformer.forward: "model.forward", FeedbackTransformer._forward:
             "model._forward", FeedbackBase.step: "model.step", FeedbackTransformer._token:
             "model._token", feedback_step: "labnn.feedback.layer.feedback_step"}


def _loop_reading(model, tokens: torch.Tensor, reads: Callable, pair: str = "kv",
                  first_layer: bool = False, mix: Callable | None = None) -> torch.Tensor:
    """The token loop in which step `t` attends to the memory vectors
    `reads(memory, x[:, t])` (right: `memory`, the vectors of the earlier steps);
    `pair` what each layer reads as its keys and values: `"kv"` (right), `"kk"` the keys
    in the values' place (the value cache grown with the new keys), `"vk"` the two
    swapped; `first_layer` applies `model.layers[0]` at every layer; `mix(outs)` the
    memory vector of a step's outputs (default `model.mix(torch.stack(outs))`)."""
    x = model.embed(tokens)
    memory, tops = [], []
    for t in range(tokens.size(1)):
        read = reads(memory, x[:, t])
        keys, values = model.project_memory(torch.stack(read, 1) if read else x[:, :0])
        keys, values = ({"k": keys, "v": values}[c] for c in pair)
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            layer = model.layers[0] if first_layer else layer
            outs.append(layer(outs[-1], keys[i], values[i]))
        memory.append(mix(outs) if mix else model.mix(torch.stack(outs)))
        tops.append(outs[-1])
    return model.head(torch.stack(tops, 1))


def memory_slips(model, tokens: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """(logits, message) of the slips, for the checker's `_diagnose`."""
    want = model(tokens)[0]
    return [
        (_loop_reading(model, tokens, lambda memory, x_t: [torch.zeros_like(x_t)] + memory),
         "your memory starts with one zero vector; it must start empty (x[:, :0], no "
         "slot): the first token attends to nothing and gets a zero attention output."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory, pair="kk"),
         "your value cache grows with the new keys: append each layer's new values to "
         "values[i] (and keys to keys[i])."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory, pair="vk"),
         "keys and values are swapped: layer i takes (x, keys[i], values[i]), the keys "
         "first; yours got values[i] as its keys."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory + [x_t]),
         "step t reads its own memory: its embedding x[:, t] is in the memory before the "
         "layers run; project m_t only after the step, for later steps."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory[:-1]),
         "the memory is appended one step late: step t reads m_0 .. m_{t-2}; append m_t's "
         "keys and values right after step t, so that step t + 1 reads it."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory, first_layer=True),
         "every layer step uses model.layers[0]: layer l must be model.layers[l] "
         "(for layer, k, v in zip(model.layers, keys, values))."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory, mix=lambda outs: torch.einsum(
            "l,lbd->bd", model.mix.logits[1:].softmax(0), torch.stack(outs[1:]))),
         "your memory vector leaves the embedding out of the mix (softmax of "
         "model.mix.logits[1:] over the layers): mix ALL the step's outputs, the embedding "
         "first, model.mix(torch.stack(outs))."),
        *loop_mixes(model.mix.logits, lambda mix: _loop_reading(
            model, tokens, lambda memory, x_t: memory, mix=mix)),
        (want.softmax(-1), "your loop returns probabilities (a softmax of the logits): "
                           "return the logits, model.head(...) as it is."),
        (want.log_softmax(-1), "your loop returns log-probabilities (log_softmax): return "
                               "the logits, model.head(...) as it is."),
        (model.head(model.embed(tokens)), "model.head reads the embeddings: it reads the TOP "
                                          "layer's output of each step, outs[-1]."),
        (want.transpose(0, 1).reshape(want.shape),
         "your logits are the steps' rows in (t, b) order read as [B, T, V]: a reshape of "
         "torch.cat(tops, 0) keeps the steps outermost; stack the steps along dim 1, "
         "torch.stack(tops, dim=1), then model.head."),
        (model(tokens.roll(1, dims=1))[0],
         "step t runs on the previous token's embedding, x[:, t - 1] (at t = 0 the last "
         "one): it runs on its own token, x[:, t]; the tokens before it reach it through "
         "the memory."),
    ]


def cache_slips(fn: Callable, a, b, tf: int, fb: int, n_layers: int, what: str) -> None:
    """Name sizes in other units than bytes, a layer count written as a number (`fn`
    reruns with another L), and a feedback cache of (L or 3)·D per token (for L = 3 both:
    `fn` reruns with L = 8 to tell them apart)."""
    for f, unit in ((1024, "KiB (divided by 1024)"), (1000, "kB (divided by 1000)"),
                    (1024 ** 2, "MiB (divided by 1024²)"), (10 ** 6, "MB (divided by 10⁶)")):
        if tf >= f and fb >= f and abs(a - tf / f) < 1 and abs(b - fb / f) < 1:
            fail(f"{what}: your sizes are in {unit}: return bytes, "
                 f"({tf}, {fb}) here.")
    layers, unit = divmod(a * n_layers, tf)  # layers counted, if a whole number
    other = layers + 1 if layers + 1 != n_layers else layers + 2  # not this call's L
    if not unit and layers not in (0, 1, n_layers) and _first(fn, other, 16, 10, 2) == (
            layers * 640):
        fail(f"{what}: transformer_bytes counts {layers} layers whatever n_layers is (also "
             f"for n_layers = {other}): a layer count written as a number; multiply by "
             "n_layers.")
    if not unit and layers == n_layers - 1 > 0:
        fail(f"{what}: transformer_bytes counts L - 1 = {layers} layers: the transformer "
             "caches a key and a value in each of its n_layers layers.")
    vectors, per_layer = b == fb * 3 // 2, b == fb // 2 * n_layers
    if vectors and per_layer:  # L = 3: tell them apart with L = 8
        other = _first(fn, 8, 16, 10, 2, index=1)
        vectors, per_layer = other != 8 * 16 * 10 * 2, other != 3 * 16 * 10 * 2
    share = "all layers share ONE key and ONE value per token: 2·D numbers."
    if vectors and per_layer:
        fail(f"{what}: feedback_bytes counts 3·D numbers per token: either the memory "
             "vectors counted with the key and value, or one key per layer (L = 3); "
             + share)
    if vectors:
        fail(f"{what}: count only the keys and values (2 * D per token), not the "
             "memory vectors.")
    if per_layer and b != fb:
        fail(f"{what}: feedback_bytes counts one key per layer, L·D numbers per token: "
             + share)


def _first(fn: Callable, *args, index: int = 0):
    """`fn(*args)[index]`, None when it raises or returns no such entry."""
    try:
        return fn(*args)[index]
    except Exception:
        return None


class _Guarded:
    """Replaces `forward` and `step` of the model handed to the learner: the loop must
    not call them."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        fail(f"your loop calls model.{self.name}(...), the reference itself, so it would "
             "pass without implementing anything: build the loop from model.embed, "
             "model.layers, model.mix, model.project_memory and model.head.")


def _mix_input(n_layers: int, seen: list, batch: int | None = None) -> Callable:
    """A forward pre-hook for `model.mix`: a stack of the wrong size gets a diagnosis,
    not an einsum error; the first input is kept in `seen`. With `batch` (B != L + 1),
    a stack along dim 1, `[B, L+1, D]`, is named as such."""

    def hook(module, args):
        (xs,) = args
        seen[:] = seen or [xs.detach()]
        if xs.dim() == 3 and xs.size(0) == n_layers + 1:
            return
        want = (f"it mixes ALL L+1 = {n_layers + 1} outputs of a step stacked along dim 0, "
                f"[L+1, B, D]: torch.stack(outs) with outs = [embedding, layer 1, ..., "
                f"layer {n_layers}].")
        if batch is not None and batch != n_layers + 1 and xs.dim() == 3 \
                and tuple(xs.shape[:2]) == (batch, n_layers + 1):
            fail(f"model.mix got [B, L+1, D] = {list(xs.shape)} (stacked along dim 1): it "
                 "takes the L+1 outputs along the FIRST axis, [L+1, B, D]: "
                 "torch.stack(outs) (dim 0).")
        if xs.dim() == 3 and xs.size(0) < n_layers + 1 and (
                batch is None or xs.size(1) == batch):
            fail(f"model.mix got {xs.size(0)} entries, a tensor of shape "
                 f"{list(xs.shape)} = [L+1?, B, D]: an output is left out: " + want)
        fail(f"model.mix got a tensor of shape {list(xs.shape)}: " + want)

    return hook


def _layer_input(i: int) -> Callable:
    """A forward pre-hook for `model.layers[i]`: its input `x` must be one step, `[B, D]`
    (`x[:, t:t + 1]`, `[B, 1, D]`, fails inside the layer with a bare view error)."""

    def hook(module, args):
        x = args[0] if args else None
        if len(args) > 1 and isinstance(args[1], (list, tuple)):
            fail(f"model.layers[{i}] got the list of every layer's keys ({len(args[1])} "
                 "entries): layer i takes its own keys and values, keys[i], values[i].")
        if isinstance(x, torch.Tensor) and x.dim() != 2:
            sliced = x.dim() == 3 and x.size(1) == 1
            fail(f"model.layers[{i}] got x of shape {list(x.shape)}"
                 + (" = [B, 1, D]" if sliced else "") + ": a layer takes one step's "
                 "vectors, [B, D]: feed it x[:, t]"
                 + (" (x[:, t:t + 1] keeps the token axis)" if sliced else "")
                 + ", then each layer's output.")

    return hook


def _projected(project: Callable, first: list) -> Callable:
    """`model.project_memory` that names a memory vector handed in without its axis of
    steps: `m` `[B, D]` instead of `m[:, None]` `[B, 1, D]`; keeps `m_0` in `first`, then
    the newest memory vector of each later call."""

    def project_memory(memory, *args, **kwargs):
        if isinstance(memory, torch.Tensor) and memory.dim() == 2:
            fail(f"model.project_memory got m of shape {list(memory.shape)} = [B, D]: it "
                 "takes a sequence of memory vectors, [B, S, D]; pass m[:, None], "
                 "[B, 1, D], and append the keys and values it returns along S (dim 2).")
        if isinstance(memory, torch.Tensor) and memory.dim() == 3 and memory.size(1):
            first.append(memory[:, -1 if first else 0].detach())  # m_0, then each newest
        return project(memory, *args, **kwargs)

    return project_memory


def watch(model, seen: list, batch: int | None = None, first: list | None = None) -> list:
    """Guard the model handed to the learner: `forward` and `step` refuse; `model.mix`,
    `model.layers` and `model.project_memory` name an input of the wrong shape. The first
    input of `model.mix` is kept in `seen` (returned), the first memory vector in `first`."""
    model.forward, model.step = _Guarded("forward"), _Guarded("step")
    model._forward = _Guarded("_forward")
    model.project_memory = _projected(model.project_memory, [] if first is None else first)
    model.mix.register_forward_pre_hook(_mix_input(len(model.layers), seen, batch))
    for i, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(_layer_input(i))
    return seen


def cat_axis(fn: Callable, model, tokens: torch.Tensor, want: torch.Tensor) -> Callable:
    """A `diagnose` for the token loop: a torch.cat of the memory (0 keys, then 1 new) along
    another axis than S; or the memory vector m `[B, D]` given its memory axis in front
    (`m.unsqueeze(0)`, `[1, B, D]`), which runs only for B = 1: rerun on one row (the
    reference's first row is `want[:1]`)."""
    def diagnose(err: Exception) -> None:
        found = re.search(r"except in dimension (\d+)\. Expected size 0 but got size 1", str(err))
        said = f"(torch said: {first_line(err)})"
        if found and found[1] != "2":
            fail(f"the memory is concatenated along dim {found[1]} (torch.cat(..., "
                 f"dim={found[1]})): keys and values are [B, H, S, D_h]; append the new ones "
                 f"along S, torch.cat([old, new], dim=2). {said}")
        if "except in dimension 2" not in str(err) or tokens.size(0) == 1:
            return
        one = tokens[:1]
        try:
            with torch.no_grad():
                right = bool(torch.allclose(fn(model, one), want[:1], atol=1e-4))
        except Exception:
            return
        if right:
            fail("the memory vector m is [B, D]: m.unsqueeze(0) (or m[None]) makes [1, B, D], "
                 "the batch as the memory axis (right only for B = 1, where your loop runs); "
                 "add the memory axis in the middle, m[:, None] or m.unsqueeze(1) -> "
                 f"[B, 1, D]. {said}")

    return diagnose


def embedding_kept(model) -> Callable[[str], None]:
    """Record the embeddings `model.embed` returns; the function returned fails when one was
    written into in place (`x[:, t] = h`) after the loop read it."""
    made = []
    model.embed.register_forward_hook(lambda _, __, out: None if out.is_inference() else
                                      made.append((out, out._version)))

    def check(what: str) -> None:
        if any(out._version != version for out, version in made):
            fail(f"{what}: x[:, t] was overwritten in place (x[:, t] = ...) after it went "
                 "into outs: outs[0] is a view of x, so model.mix read the new values, not "
                 "the embedding: don't write into x; keep the outputs in their own list.")

    return check


_DETACHED = ("the memory vector m, or its keys and values, is detached (or computed under "
             "torch.no_grad()): gradients must flow from later steps back through the memory "
             "(backpropagation through time), so keep m and its keys and values in the graph.")


def expect_memory_gradients(got: torch.Tensor, want: torch.Tensor, what: str,
                            params: dict[str, torch.Tensor]) -> None:
    """`expect_gradients` for the model's parameters: logits with no graph told in one line;
    the mix logits (the detached `model.layer_weights()`) or the embedding alone cut named;
    when several get none, the first is named and the rest counted."""
    if not got.requires_grad or got.grad_fn is None:
        fail(f"{what} is cut from the model (no grad_fn): no parameter gets a gradient. "
             "Computed under torch.no_grad(), detached, or rebuilt from its values "
             "(torch.tensor(...), .tolist())? Keep the logits in the graph of the model's "
             "parts: training backpropagates through them and through the memory.")
    if got.requires_grad and got.grad_fn is not None:
        u = torch.randn(want.shape, generator=torch.Generator().manual_seed(1234))
        with saved_changed(what, "a preallocated memory filled with mem[:, t] = ..., or "
                           "+=, .mul_(...)", "keep each step's memory vector in a list and "
                           "torch.stack or torch.cat it, never write into a tensor already "
                           "read"):
            mine, ref = (torch.autograd.grad(y, list(params.values()), u.to(y.dtype),
                                             retain_graph=True, allow_unused=True)
                         for y in (got, want))
        cut = [n for n, a, b in zip(params, mine, ref) if b is not None and b.abs().amax() > 0
               and (a is None or not a.abs().amax() > 0)]
        rest = [(a, b) for n, a, b in zip(params, mine, ref) if n != "mix.logits"]
        if cut == ["mix.logits"] and all(b is None or a is not None and torch.allclose(
                a, b, rtol=1e-4, atol=1e-6) for a, b in rest):  # the memory itself flows
            fail(f"`model.mix.logits` alone gets no gradient from {what}: the memory's "
                 "layer weights were cut from the graph (model.layer_weights() is a detached "
                 "copy, for plots; .item(), float(), .tolist(), .numpy() cut them too): mix "
                 "with model.mix(torch.stack(outs)), which keeps them in the graph.")
        if cut == ["embed.weight"]:  # the memory flows: the embeddings alone detached
            fail(f"`model.embed.weight` alone gets no gradient from {what}: the embeddings "
                 "were detached (model.embed(tokens).detach()?): keep them in the graph.")
        if len(cut) > 1:
            fail(f"`model.{cut[0]}` and {len(cut) - 1} more get no gradient from {what}: "
                 + _DETACHED)
    expect_gradients(got, want, what, {f"model.{n}": (p, p) for n, p in params.items()},
                     advice=_DETACHED)
