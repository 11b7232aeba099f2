"""Checkers for notebook 03 (the Feedback Transformer).

Dimension letters: `B` batch, `H` heads, `S` memory keys, `T` tokens, `D` width, `D_h` head width,
`L` layers, `V` vocabulary.

Each checker runs the learner's function on seeded random inputs, compares it with `labnn.feedback` and,
when it differs, recomputes the typical mistakes (no softmax over the layer weights, newest-first distances,
missing scale, a step that reads its own memory or only the top layer, ...) to say which one was made.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..feedback import FeedbackConfig, FeedbackTransformer, LayerMix, RelativeBias, feedback_attention
from .checking import close, exercise, expect_close, expect_shape, expect_tensor, fail

B, H, S, D_H, L, D = 2, 3, 6, 4, 3, 12


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _diagnose(got: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    for wrong, message in mistakes:
        if close(got, wrong):
            fail(message)


@exercise("memory vector (layer mix)")
def check_memory_vector(fn: Callable) -> None:
    """`fn(xs, w)`: xs `[L+1, B, D]` (embedding first), w `[L+1]` -> $\\sum_l \\mathrm{softmax}(w)_l x^l$, `[B, D]`."""
    xs, w = _randn(L + 1, B, D, seed=1), _randn(L + 1, seed=2)
    mix = LayerMix(L + 1)
    with torch.no_grad():
        mix.logits.copy_(w)
    want = mix(xs).detach()
    got = expect_tensor(fn(xs, w), "memory_vector(xs, w)")
    if tuple(got.shape) == (L + 1, B, D):
        fail("the result still has one entry per layer: sum the weighted layers over dim 0.")
    expect_shape(got, want.shape, "memory_vector(xs, w)")
    _diagnose(got, [
        (torch.einsum("l,lbd->bd", w, xs), "you used the raw weights w: take softmax(w) first so they sum to one."),
        (xs.mean(0), "that is the plain average of the layers: weight them by softmax(w)."),
        (xs[-1], "that is the top layer only: the memory mixes ALL layers, the embedding included."),
    ])
    expect_close(got, want, "memory_vector(xs, w)")


@exercise("relative position bias")
def check_relative_bias(fn: Callable) -> None:
    """`fn(table, s)`: table `[H, max_distance]` (entry `d - 1` for distance `d`), `s` keys oldest first
    -> `[H, S]` where key `j` is at distance `s - j`, clamped to `max_distance`."""
    table = _randn(H, 4, seed=3)
    rel = RelativeBias(H, 4)
    with torch.no_grad():
        rel.bias.copy_(table)
    for s in (3, 7):
        want = rel(s).detach()
        got = expect_tensor(fn(table, s), f"relative_bias(table, {s})")
        expect_shape(got, want.shape, f"relative_bias(table, {s})")
        if s <= 4:
            _diagnose(got, [
                (table[:, :s], "the keys are ordered oldest first: the LAST key is the previous step (distance 1, "
                               "entry 0), so the distances are s, s-1, ..., 1."),
                (table[:, 1 : s + 1].flip(-1), "off by one: distance d uses entry d - 1 (the previous step, "
                                               "distance 1, uses entry 0)."),
            ])
        expect_close(got, want, f"relative_bias(table, {s})")


@exercise("feedback attention")
def check_feedback_attention(fn: Callable) -> None:
    """`fn(q, k, v, bias)`: q `[B, H, D_h]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, H, D_h]`;
    zeros when `S = 0`."""
    q, k, v = _randn(B, H, D_H, seed=4), _randn(B, H, S, D_H, seed=5), _randn(B, H, S, D_H, seed=6)
    bias = _randn(H, S, seed=7)
    want = feedback_attention(q, k, v, bias)
    got = expect_tensor(fn(q, k, v, bias), "feedback_attention(q, k, v, bias)")
    expect_shape(got, want.shape, "feedback_attention(q, k, v, bias)")
    scores = torch.einsum("bhd,bhsd->bhs", q, k)
    _diagnose(got, [
        (feedback_attention(q * math.sqrt(D_H), k, v, bias), "you forgot to divide q.k by sqrt(d_head)."),
        (feedback_attention(q, k, v, torch.zeros_like(bias)), "the relative bias is missing: add it to the scores."),
        (torch.einsum("bhs,bhsd->bhd", (scores / math.sqrt(D_H) + bias).softmax(1), v),
         "the softmax runs over the heads: it must run over the memory keys (the last dim of the scores)."),
    ])
    expect_close(got, want, "feedback_attention(q, k, v, bias)")
    empty = torch.zeros(B, H, 0, D_H)
    got = expect_tensor(fn(q, empty, empty, torch.zeros(H, 0)), "feedback_attention with no memory")
    if torch.isnan(got).any():
        fail("with an empty memory (S = 0) the softmax of nothing gives NaN: return zeros in that case.")
    expect_close(got, torch.zeros_like(q), "feedback_attention with no memory")


def _model() -> FeedbackTransformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        model = FeedbackTransformer(FeedbackConfig(vocab_size=9, d_model=D, n_heads=H, n_layers=2, d_ff=24)).eval()
        with torch.no_grad():
            model.mix.logits.normal_()
    return model


def _loop(model: FeedbackTransformer, tokens: torch.Tensor, top_only: bool = False) -> torch.Tensor:
    """The token loop written out; `top_only` stores the top layer as memory instead of the mix (a mistake)."""
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        m = outs[-1] if top_only else model.mix(torch.stack(outs))
        k, v = model.project_memory(m[:, None])
        keys = [torch.cat(pair, 2) for pair in zip(keys, k)]
        values = [torch.cat(pair, 2) for pair in zip(values, v)]
    return model.head(torch.stack(tops, 1))


@exercise("the feedback token loop")
def check_feedback_loop(fn: Callable) -> None:
    """`fn(model, tokens)`: tokens `[B, T]` -> logits `[B, T, V]` of a `FeedbackTransformer` (no window, one
    key/value projection per layer), computed step by step from an empty memory."""
    model, tokens = _model(), torch.randint(0, 9, (B, 7), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = model(tokens)[0]
        got = expect_tensor(fn(model, tokens), "feedback_loop(model, tokens)")
        expect_shape(got, want.shape, "feedback_loop(model, tokens)")
        _diagnose(got, [(_loop(model, tokens, top_only=True), "your memory vector is the top layer's output: "
                         "it must be model.mix of ALL layer outputs, the embedding first.")])
    if not close(got, want):
        t = int((got - want).abs().amax(dim=(0, 2)).gt(1e-4).nonzero()[0])
        where = ("at the first step, which has no memory: every layer's attention must return zeros there"
                 if t == 0 else f"from step {t} on (earlier steps match): check how each step's memory vector is "
                 "projected (model.project_memory) and appended to the keys and values of later steps")
        fail(f"the logits differ {where}.")
    expect_close(got, want, "feedback_loop(model, tokens)")


@exercise("cache sizes")
def check_cache_bytes(fn: Callable) -> None:
    """`fn(n_layers, d_model, n_tokens, bytes_per_number)` -> `(transformer_bytes, feedback_bytes)` of the
    decoding caches for one sequence: a transformer keeps keys and values per layer, a feedback model with
    shared keys/values keeps one key and one value per token."""
    for n_layers, d_model, n_tokens, size in [(4, 128, 256, 4), (8, 512, 100, 2)]:
        got = fn(n_layers, d_model, n_tokens, size)
        want = (2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size)
        if not isinstance(got, tuple) or len(got) != 2:
            fail(f"return a tuple (transformer_bytes, feedback_bytes), got {got!r}.")
        if got[0] == want[0] // 2:
            fail("the transformer caches keys AND values: twice what you counted.")
        if got[1] == want[1] * n_layers:
            fail("with shared_kv the feedback model projects each memory vector ONCE for all layers.")
        if tuple(int(g) for g in got) != want:
            fail(f"for L={n_layers}, D={d_model}, {n_tokens} tokens, {size} bytes each: got {got}, expected {want}.")
