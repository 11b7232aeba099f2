"""Checkers for notebook 03 (the Feedback Transformer).

Dimension letters: `B` batch, `H` heads, `S` memory keys, `T` tokens, `D` width, `D_h` head width,
`L` layers, `V` vocabulary. Positions in messages use the lower-case letters of the result's own dimensions,
e.g. `at [b=0, h=1, d=2]`.

Each checker runs the learner's function on seeded random inputs, compares it with `labnn.feedback` and,
when it differs, recomputes the typical mistakes (no softmax over the layer weights, newest-first distances,
missing scale, a step that reads its own memory or only the top layer, a loop that calls the reference
model, an input changed in place, ...) to say which one was made.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..feedback import FeedbackConfig, FeedbackTransformer, LayerMix, RelativeBias, feedback_attention
from .checking import (
    ExerciseFailed,
    close,
    exercise,
    expect_close,
    expect_dtype,
    expect_gradients,
    expect_shape,
    expect_tensor,
    expect_unchanged,
    fail,
    snapshot,
)

B, H, S, D_H, L, D = 2, 3, 6, 4, 3, 12
MAX_DISTANCE = 4


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


DTYPE_HINT = ("Keep the inputs' dtype: no .double() / .float() on the way, and create new tensors with "
              "torch.zeros_like(...) or dtype=<input>.dtype.")


def _leaves(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """For each input: a leaf that requires grad (the learner's gradients land there), the non-leaf copy
    handed to the learner (so that an in-place change is reported, not refused by autograd), and a leaf
    for the reference."""
    mine = [t.clone().requires_grad_() for t in tensors]
    given = [t.clone() for t in mine]
    ref = [t.clone().requires_grad_() for t in tensors]
    return mine, given, ref


def _diagnose(got: torch.Tensor, want: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first typical mistake whose result `got` reproduces (mistakes that
    happen to give the right answer on these inputs are skipped)."""
    for wrong, message in mistakes:
        if close(got, wrong) and not close(wrong, want):
            fail(message)


@exercise("memory vector (layer mix)")
def check_memory_vector(fn: Callable) -> None:
    """`fn(xs, w)`: xs `[L+1, B, D]` (embedding first), w `[L+1]` -> $\\sum_l \\mathrm{softmax}(w)_l x^l$,
    `[B, D]`."""
    (xs_leaf, w_leaf), (xs, w), (xs_ref, w_ref) = _leaves(_randn(L + 1, B, D, seed=1),
                                                          _randn(L + 1, seed=2))
    mix = LayerMix(L + 1)
    with torch.no_grad():
        mix.logits.copy_(w)
    want = mix(xs).detach()
    before = snapshot(xs=xs, w=w)
    got = expect_tensor(fn(xs, w), "memory_vector(xs, w)")
    expect_unchanged(before, "memory_vector(xs, w)", xs=xs, w=w)
    if tuple(got.shape) == (L + 1, B, D):
        fail("the result still has one entry per layer, [L+1, B, D]: sum the weighted layers over the layer "
             "axis (dim 0) to get [B, D].")
    expect_shape(got, want.shape, "memory_vector(xs, w)")
    expect_dtype(got, want.dtype, "memory_vector(xs, w)", DTYPE_HINT)
    xs, w = xs.detach(), w.detach()
    p = w.softmax(0)
    _diagnose(got, want, [
        (want / (L + 1), "you took the mean of the weighted layers, which divides by L+1 (1/(L+1) too "
                         "small): the softmax weights already sum to one, so SUM over the layer axis."),
        (torch.einsum("l,lbd->bd", w, xs), "you used the raw logits w as weights: take softmax(w) first, so "
                                           "that the weights are positive and sum to one."),
        (xs.mean(0), "that is the plain average of the layers: weight layer l by softmax(w)[l]."),
        (xs[-1], "that is the top layer only: the memory mixes ALL layers, the embedding xs[0] included."),
        (torch.einsum("l,lbd->bd", w[1:].softmax(0), xs[1:]),
         "the embedding xs[0] is left out: the mix runs over all L+1 entries, the embedding first."),
        (torch.einsum("l,lbd->bd", p.flip(0), xs), "the weights are paired with the layers in reverse order: "
                                                   "softmax(w)[l] weights xs[l]."),
        (torch.einsum("l,lbd->bd", w.log_softmax(0), xs), "you used log_softmax: the weights must be "
                                                          "softmax(w), which sum to one."),
    ])
    expect_close(got, want, "memory_vector(xs, w)", dims="b d")
    expect_gradients(got, torch.einsum("l,lbd->bd", w_ref.softmax(0), xs_ref), "memory_vector(xs, w)",
                     {"xs": (xs_leaf, xs_ref), "w": (w_leaf, w_ref)}, dims={"xs": "l b d", "w": "l"})


def _float_index_error(err: IndexError) -> bool:
    return "must be long" in str(err) or "used as indices" in str(err)


@exercise("relative position bias")
def check_relative_bias(fn: Callable) -> None:
    """`fn(table, s)`: table `[H, max_distance]` (entry `d - 1` for distance `d`), `s` keys oldest first
    -> `[H, S]` where key `j` is at distance `s - j`, clamped to `max_distance`."""
    (table_leaf,), (table,), (table_ref,) = _leaves(_randn(H, MAX_DISTANCE, seed=3))
    rel = RelativeBias(H, MAX_DISTANCE)
    with torch.no_grad():
        rel.bias.copy_(table)
    for s in (2, 7):
        what = f"relative_bias(table, {s})"
        want = rel(s).detach()
        before = snapshot(table=table)
        try:
            got = fn(table, s)
        except IndexError as err:
            if _float_index_error(err):
                fail(f"{what}: indexing the table with a float tensor fails: distances used as indices must be "
                     "a LongTensor (torch.arange with int arguments gives one; or call .long()).")
            if s > MAX_DISTANCE:
                fail(f"{what}: with {s} keys and max_distance = {MAX_DISTANCE}, distances beyond "
                     f"{MAX_DISTANCE} index past the table ({err}): clamp them, .clamp(max=table.size(1)), so "
                     "that they share the last entry.")
            raise
        got = expect_tensor(got, what)
        expect_unchanged(before, what, table=table)
        if tuple(got.shape) == (s, H) and s != H:
            fail(f"{what} has shape [{s}, {H}] = [S, H]: heads come first, [H, S] (index the table's columns, "
                 "table[:, ...]).")
        expect_shape(got, want.shape, what)
        expect_dtype(got, want.dtype, what, DTYPE_HINT)
        d = torch.arange(s, 0, -1)
        t0 = table.detach()
        _diagnose(got, want, [
            (t0[:, (d - 1) % MAX_DISTANCE],
             f"{what}: distances beyond max_distance = {MAX_DISTANCE} wrap around (the % operator) to the "
             "first entries: clamp them instead (.clamp(max=max_distance)), so that every far key shares "
             "the LAST entry."),
            (t0[:, torch.arange(1, s + 1).clamp(max=MAX_DISTANCE) - 1],
             f"{what}: the distances run the wrong way: keys are ordered oldest first, so key 0 is at "
             "distance s and the LAST key is the previous step (distance 1, entry 0)."),
            (t0[:, d.clamp(max=MAX_DISTANCE - 1)],
             f"{what}: off by one: distance d uses entry d - 1 (the previous step, distance 1, uses entry 0)."),
            (t0[:, d.clamp(max=MAX_DISTANCE - 1) - 1],
             f"{what}: clamped one too early: distances of max_distance = {MAX_DISTANCE} and beyond use the "
             f"LAST entry, index {MAX_DISTANCE - 1} (clamp the distance to max_distance, then subtract 1)."),
            (t0[:, torch.arange(s).clamp(max=MAX_DISTANCE) - 1],
             f"{what}: the distances of the keys are s - j = s, ..., 1 (torch.arange(s, 0, -1)), not j."),
        ])
        expect_close(got, want, what, dims="h j")
        expect_gradients(got, table_ref[:, d.clamp(max=MAX_DISTANCE) - 1], what,
                         {"table": (table_leaf, table_ref)}, dims={"table": "h d"})


@exercise("feedback attention")
def check_feedback_attention(fn: Callable) -> None:
    """`fn(q, k, v, bias)`: q `[B, H, D_h]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, H, D_h]`;
    zeros when `S = 0`."""
    leaves, (q, k, v, bias), refs = _leaves(_randn(B, H, D_H, seed=4), _randn(B, H, S, D_H, seed=5),
                                            _randn(B, H, S, D_H, seed=6), _randn(H, S, seed=7))
    what = "feedback_attention(q, k, v, bias)"
    want = feedback_attention(q, k, v, bias).detach()
    before = snapshot(q=q, k=k, v=v, bias=bias)
    got = expect_tensor(fn(q, k, v, bias), what)
    expect_unchanged(before, what, q=q, k=k, v=v, bias=bias)
    if tuple(got.shape) == (B, H, S):
        fail(f"{what} returns [B, H, S]: those are the attention weights over the keys; weight the values "
             "with them ('bhs,bhsd->bhd') to get [B, H, D_h].")
    expect_shape(got, want.shape, what)
    expect_dtype(got, want.dtype, what, DTYPE_HINT)
    q, k, v, bias = (t.detach() for t in (q, k, v, bias))
    scores = torch.einsum("bhd,bhsd->bhs", q, k)
    scaled = scores / math.sqrt(D_H)
    _diagnose(got, want, [
        (feedback_attention(q * math.sqrt(D_H), k, v, bias), "you forgot to divide q·k by sqrt(d_head)."),
        (feedback_attention(q / math.sqrt(D_H), k, v, bias), "you divided q·k by d_head: divide by "
                                                             "sqrt(d_head)."),
        (feedback_attention(q, k, v, torch.zeros_like(bias)), "the relative bias is missing: add it to the "
                                                              "scaled scores, before the softmax."),
        (feedback_attention(q, k, v, -bias), "the bias is subtracted: add it to the scores."),
        (feedback_attention(q * math.sqrt(D_H / (H * D_H)), k, v, bias),
         "you divided q·k by sqrt(H·d_head), the width of all heads together: divide by sqrt(d_head), "
         "the width of one head, q.size(-1)."),
        (feedback_attention(q, k, v, bias.flip(-1)), "the bias is reversed along the keys (bias.flip(-1)): "
                                                     "bias[h, s] belongs to key s; add it as it is."),
        (torch.einsum("bhs,bhsd->bhd", (scaled + bias).softmax(1), v),
         "the softmax runs over the heads (dim 1): it must run over the memory keys, the last dim of the "
         "scores [b, h, s]."),
        (torch.einsum("bhs,bhsd->bhd", scaled.softmax(-1) + bias, v),
         "the bias is added after the softmax: add it to the scores, then take the softmax."),
        (torch.einsum("bhs,bhsd->bhd", (scaled + bias).softmax(-1), k),
         "you weighted the keys: the attention weights average the VALUES v."),
    ])
    expect_close(got, want, what, dims="b h d")
    names = ("q", "k", "v", "bias")
    expect_gradients(got, feedback_attention(*refs), what,
                     {n: (a, b) for n, a, b in zip(names, leaves, refs)},
                     dims={"q": "b h d", "k": "b h s d", "v": "b h s d", "bias": "h s"})
    empty = torch.zeros(B, H, 0, D_H)
    got = expect_tensor(fn(q, empty, empty, torch.zeros(H, 0)), "feedback_attention with no memory (S = 0)")
    if torch.isnan(got).any():
        fail("with an empty memory (S = 0) your result contains NaN: there is nothing to attend to, so "
             "return zeros (torch.zeros_like(q)) in that case.")
    if close(got, q):
        fail("with an empty memory (S = 0) there is nothing to attend to: the output is zeros, not q.")
    expect_close(got, torch.zeros_like(q), "feedback_attention with no memory (S = 0)", dims="b h d")


def _model() -> FeedbackTransformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        config = FeedbackConfig(vocab_size=9, d_model=D, n_heads=H, n_layers=2, d_ff=24)
        model = FeedbackTransformer(config).eval()
        with torch.no_grad():  # non-zero layer weights and biases, so that every mistake shows
            model.mix.logits.normal_()
            for layer in model.layers:
                layer.attn.rel.bias.normal_()
    return model


def _loop(model: FeedbackTransformer, tokens: torch.Tensor, memory: str = "mix", grow: str = "append",
          chain: bool = True, logits: str = "top", own: bool = False, layer_keys: bool = True):
    """The token loop written out, with one typical mistake switched on for the diagnosis.

    Args:
        memory: what is stored: ``"mix"`` (right), ``"top"`` (the top layer), ``"embedding"`` (the token),
            ``"mix_top_twice"`` (mix of the layers with the top in the embedding's place),
            ``"mix_embedding_last"`` (mix with the embedding last).
        grow: how the keys grow: ``"append"`` (right), ``"none"`` (never), ``"replace"`` (only the newest
            step kept), ``"prepend"`` (newest first).
        chain: False feeds every layer the embedding instead of the previous layer's output.
        logits: ``"top"`` (right) or ``"memory"`` (the head applied to the memory vector).
        own: True runs each step a second time with its own memory vector already appended.
        layer_keys: False lets every layer read the first layer's keys and values.
    """
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if layer_keys else 0
            outs.append(layer(outs[-1] if chain else x[:, t], keys[j], values[j]))
        m = {"mix": lambda: model.mix(torch.stack(outs)), "top": lambda: outs[-1],
             "embedding": lambda: outs[0],
             "mix_top_twice": lambda: model.mix(torch.stack(outs[1:] + outs[-1:])),
             "mix_embedding_last": lambda: model.mix(torch.stack(outs[1:] + outs[:1]))}[memory]()
        tops.append(outs[-1] if logits == "top" else m)
        k, v = model.project_memory(m[:, None])
        if grow == "append":
            keys = [torch.cat(pair, 2) for pair in zip(keys, k)]
            values = [torch.cat(pair, 2) for pair in zip(values, v)]
        elif grow == "prepend":
            keys = [torch.cat((new, old), 2) for old, new in zip(keys, k)]
            values = [torch.cat((new, old), 2) for old, new in zip(values, v)]
        elif grow == "replace":
            keys, values = k, v
        if own:  # the step again, now reading its own memory vector
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], keys[i], values[i]))
            tops[-1] = outs[-1]
    return model.head(torch.stack(tops, 1))


class _Guarded:
    """Replaces `forward` and `step` of the model handed to the learner: the loop must not call them."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        fail(f"your loop calls model.{self.name}(...), the reference itself, so it would pass without "
             "implementing anything: build the loop from model.embed, model.layers, model.mix, "
             "model.project_memory and model.head.")


def _check_mix_input(n_layers: int):
    """A forward pre-hook for `model.mix`: a stack of the wrong size gets a diagnosis, not an einsum error."""

    def hook(module, args):
        (xs,) = args
        if xs.dim() != 3 or xs.size(0) != n_layers + 1:
            fail(f"model.mix got {xs.size(0) if xs.dim() else 0} entries, a tensor of shape "
                 f"{list(xs.shape)}: it mixes ALL L+1 = {n_layers + 1} outputs of a step stacked along dim "
                 f"0, [L+1, B, D]: torch.stack(outs) with outs = [embedding, layer 1, ..., layer {n_layers}].")

    return hook


@exercise("the feedback token loop")
def check_token_loop(fn: Callable) -> None:
    """`fn(model, tokens)`: tokens `[B, T]` -> logits `[B, T, V]` of a `FeedbackTransformer` (no window, one
    key/value projection per layer), computed step by step from an empty memory, from the model's parts."""
    model, tokens = _model(), torch.randint(0, 9, (B, 7), generator=torch.Generator().manual_seed(8))
    what = "token_loop(model, tokens)"
    params = dict(model.named_parameters())
    want_graph = model(tokens)[0]
    want = want_graph.detach()
    with torch.no_grad():
        mistakes = [
            (_loop(model, tokens, memory="top"), "your memory vector is the top layer's output: it must be "
             "model.mix of ALL layer outputs, the embedding first."),
            (_loop(model, tokens, memory="embedding"), "your memory vector is the token's embedding: it must "
             "be model.mix of ALL layer outputs (torch.stack(outs), embedding first)."),
            (_loop(model, tokens, chain=False), "the layers are not chained: each layer was fed the "
             "embedding x[:, t]; layer l must read the output of layer l - 1 (outs[-1]), the first layer "
             "the embedding."),
            (_loop(model, tokens, logits="memory"), "the logits come from the memory vector m: model.head "
             "must read the TOP layer's output of each step (outs[-1]); m only feeds later steps."),
            (_loop(model, tokens, memory="mix_top_twice"), "model.mix got the layer outputs without the "
             "embedding (the top layer in its place): stack ALL outputs of the step, the embedding first, "
             "torch.stack([x[:, t], layer 1, ..., layer L])."),
            (_loop(model, tokens, memory="mix_embedding_last"), "model.mix got its entries in the wrong "
             "order: stack them embedding first, then layer 1, ..., layer L (mix weight l belongs to "
             "entry l)."),
            (_loop(model, tokens, own=True), "each step reads its own memory vector: a step attends only "
             "to the memory of EARLIER steps; append its keys and values after computing its outputs, "
             "for the steps that follow."),
            (_loop(model, tokens, layer_keys=False), "every layer reads the first layer's keys and values: "
             "each layer i has its own projection of the memory, so layer i reads keys[i], values[i]."),
            (_loop(model, tokens, grow="none"), "the memory never grows: after each step, project its memory "
             "vector (model.project_memory(m[:, None])) and append the keys and values for later steps."),
            (_loop(model, tokens, grow="replace"), "each step sees only the previous step's memory: append "
             "the new keys and values to the old ones (torch.cat along dim 2), do not replace them."),
            (_loop(model, tokens, grow="prepend"), "the new keys and values are put in front: keys are kept "
             "oldest first (the relative bias relies on it), so append them at the end of dim 2."),
        ]
    model.forward, model.step = _Guarded("forward"), _Guarded("step")
    model.mix.register_forward_pre_hook(_check_mix_input(len(model.layers)))
    tokens_before = tokens.clone()
    got = expect_tensor(fn(model, tokens), what)
    expect_unchanged({"tokens": tokens_before}, what, tokens=tokens)
    n, t, v = want.shape
    if tuple(got.shape) == (t, n, v):
        fail(f"{what} has shape [T, B, V] = [{t}, {n}, {v}]: stack the steps along dim 1, [B, T, V].")
    if tuple(got.shape) == (n, t, D):
        fail(f"{what} has shape [B, T, D] = [{n}, {t}, {D}]: these are the top layer's outputs; "
             "model.head turns them into logits over the vocabulary.")
    expect_shape(got, want.shape, what)
    expect_dtype(got, want.dtype, what, "Keep the model's dtype (no .double() on the way).")
    _diagnose(got, want, mistakes)
    if not close(got, want):
        step = int((got.detach() - want).abs().amax(dim=(0, 2)).gt(1e-4).nonzero()[0])
        where = ("already at the first step, t = 0. There the memory must still be empty (a step reads only "
                 "EARLIER steps' memory), so only these matter: the embedding, the layers chained one "
                 "after the other (layer l reads layer l - 1's output), "
                 "and model.head applied to the TOP layer's output of the step"
                 if step == 0 else f"from step t = {step} on (earlier steps match, so the layers and the "
                 "head are right): what differs is what later steps read from the memory: the memory vector "
                 "(model.mix of all outputs, embedding first), its projection (model.project_memory), "
                 "which keys each layer reads (layer i: keys[i]) and how they are appended (oldest first)")
        try:
            expect_close(got, want, what, dims="b t v")
        except ExerciseFailed as err:
            fail(f"the logits differ {where}. {err}")
    expect_gradients(
        got, want_graph, what, {f"model.{name}": (p, p) for name, p in params.items()},
        advice="the memory vector m, or its keys and values, is detached (or computed under "
               "torch.no_grad()): gradients must flow from later steps back through the memory "
               "(backpropagation through time), so keep m and its keys and values in the graph.")


@exercise("cache sizes")
def check_cache_bytes(fn: Callable) -> None:
    """`fn(n_layers, d_model, n_tokens, bytes_per_number)` -> `(transformer_bytes, feedback_bytes)` of the
    decoding caches for one sequence: a transformer keeps keys and values per layer, a feedback model with
    shared keys/values keeps one key and one value per token."""
    for n_layers, d_model, n_tokens, size in [(3, 128, 256, 4), (8, 512, 100, 2)]:
        call = f"cache_bytes({n_layers}, {d_model}, {n_tokens}, {size})"
        got = fn(n_layers, d_model, n_tokens, size)
        tf, fb = 2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size
        if isinstance(got, list) and len(got) == 2:
            fail(f"{call} returned a list: return a tuple, (transformer_bytes, feedback_bytes).")
        if not isinstance(got, tuple) or len(got) != 2:
            fail(f"{call}: return a tuple (transformer_bytes, feedback_bytes), got {got!r}.")
        for name, value in zip(("transformer_bytes", "feedback_bytes"), got):
            if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)) or isinstance(value, bool):
                fail(f"{call}: {name} should be an int, got {type(value).__name__}: {value!r}.")
        a, b = got
        if (a, b) == (fb, tf):
            fail(f"{call}: the two sizes are swapped: the transformer's comes first.")
        for value, ref, name in ((a, tf, "transformer_bytes"), (b, fb, "feedback_bytes")):
            if value == ref * 8:
                fail(f"{call}: {name} is in bits: a number takes bytes_per_number BYTES, no factor 8.")
            if value == ref // size:
                fail(f"{call}: {name} counts numbers, not bytes: multiply by bytes_per_number.")
            if value == ref // n_tokens:
                fail(f"{call}: {name} is the size of ONE token's entry: multiply by n_tokens.")
        if a == tf // 2:
            fail(f"{call}: the transformer caches keys AND values for every layer: 2 * L * D numbers per token, "
                 "twice what you counted.")
        if a == tf // n_layers:
            fail(f"{call}: the transformer keeps a key and a value PER LAYER: multiply by n_layers.")
        if b == fb * n_layers:
            fail(f"{call}: with shared keys and values the feedback model projects each memory vector ONCE for "
                 "all layers: do not multiply by n_layers.")
        if b == fb * 3 // 2:
            fail(f"{call}: count only the keys and values (2 * D per token), not the memory vectors.")
        if b == fb // 2:
            fail(f"{call}: the feedback model caches a key AND a value per token: 2 * D numbers.")
        if isinstance(a, float) or isinstance(b, float):
            if (a, b) == (tf, fb):
                fail(f"{call} returned floats {got!r}: bytes are whole numbers, return ints (use * and //, "
                     "not /).")
        if (a, b) != (tf, fb):
            fail(f"for L={n_layers}, D={d_model}, {n_tokens} tokens, {size} bytes each: got {got}, expected "
                 f"({tf}, {fb}).")
