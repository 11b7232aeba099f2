"""Checkers for notebook 03's Exercises 4-5: the token loop (the whole Feedback Transformer,
step by step) and its cache size.

Dimension letters (the package legend): `B` batch, `T` tokens, `D` model width, `L` layers,
`V` vocabulary. Each checker runs the learner's function on seeded inputs, compares it with
`labnn.feedback.model` and, when it differs, recomputes the typical mistakes (a step that
reads its own memory or only the top layer, a loop that calls the reference model, a cache
counted per layer, ...) to say which one was made. A first step that runs no layer (its
memory is empty) is named even where the logits match: the check's model has zero biases, so
a step 0 with the feed-forward alone matches there."""

from __future__ import annotations

from typing import Callable

import torch

from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.exercises.grading import (call, close, exercise, expect_like, expect_no_nan,
                                     expect_repeatable, expect_tensor, fail, first_position)
from labnn.exercises.grading import expect_any_device, expect_unchanged, snapshot
from labnn.exercises.grading.slips import expect_every_row, float64_round
from labnn.exercises.feedback_transformer import kept_state, long_memory, other_sizes, size_one
from labnn.exercises.feedback_transformer.cache_units import (
    BEYOND_INT32, FIRST, common_factor, expect_two_ints, feedback_count, fixed_arguments,
    kept_result, kept_rounds, ODD, other_slips, overflowed, token_count)
from labnn.exercises.feedback_transformer.long_memory import (
    expect_whole_memory, float32_made, global_model, jittered_model, named_detach, window_slip)
from labnn.exercises.feedback_transformer.memory_vector import B, D, H, _diagnose
from labnn.exercises.feedback_transformer.token_loop_slips import (
    REFERENCE, _first, cache_slips, cat_axis, embedding_kept, expect_memory_gradients,
    memory_slips, watch)
from labnn.exercises.feedback_transformer.weight_transforms import negative_step, relu_loop
from labnn.exercises.feedback_transformer.step_slips import (
    later_memory, layer_reads, mix_input_slip, off_entries, record_steps, rows_mixed, step_count,
    steps_off)


def _model() -> FeedbackTransformer:
    return jittered_model(FeedbackConfig(vocab_size=9, d_model=D, n_heads=H, n_layers=2,
                                         d_ff=24), seed=11, scaled=True)


def _loop(model: FeedbackTransformer, tokens: torch.Tensor, memory: str = "mix",
          grow: str = "append", chain: bool = True, logits: str = "top",
          own: bool = False, layer_keys: bool | str = True):
    """The token loop written out, with one typical mistake switched on for the diagnosis.

    Args:
        memory: what is stored: ``"mix"`` (right), ``"top"`` (the top layer),
            ``"embedding"`` (the token), ``"mean"`` (of the layers, not mixed),
            ``"mix_top_twice"`` (mix of the layers with the top in the embedding's place),
            ``"mix_embedding_last"`` (mix with the embedding last).
        grow: how the keys grow: ``"append"`` (right), ``"none"`` (never), ``"replace"``
            (only the newest step kept), ``"prepend"`` (newest first).
        chain: False feeds every layer the embedding instead of the previous layer's
            output.
        logits: ``"top"`` (right) or ``"memory"`` (the head applied to the memory vector).
        own: True runs each step a second time with its own memory vector already
            appended.
        layer_keys: False lets every layer read the first layer's keys and values,
            ``"last"`` the last layer's, ``"reversed"`` layer i those of layer L-1-i.
    """
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = {True: i, False: 0, "last": -1, "reversed": -1 - i}[layer_keys]
            outs.append(layer(outs[-1] if chain else x[:, t], keys[j], values[j]))
        m = {"mix": lambda: model.mix(torch.stack(outs)), "top": lambda: outs[-1],
             "embedding": lambda: outs[0], "mean": lambda: torch.stack(outs).mean(0),
             "mix_top_twice": lambda: model.mix(torch.stack(outs[1:] + outs[-1:])),
             "mix_embedding_last": lambda: model.mix(torch.stack(outs[1:] + outs[:1])),
             }[memory]()
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


@exercise("the feedback token loop", refuse=REFERENCE)
def check_token_loop(fn: Callable) -> None:
    """`fn(model, tokens)`: tokens `[B, T]` -> logits `[B, T, V]` of a
    `FeedbackTransformer` (no window, one key/value projection per layer), computed step
    by step from an empty memory, from the model's parts."""
    generator = torch.Generator().manual_seed(8)
    model, tokens = _model(), torch.randint(0, 9, (B, 7), generator=generator)
    what = "token_loop(model, tokens)"
    params = dict(model.named_parameters())
    want_graph = model(tokens)[0]
    want = want_graph.detach()
    with torch.no_grad():
        mistakes = [
            (_loop(model, tokens, memory="top"),
             "the vector that reaches model.project_memory is the top layer's output: it "
             "must be the memory vector m, model.mix of ALL layer outputs, the embedding "
             "first (if you made m, project m itself, not outs[-1])."),
            (model(torch.cat([tokens[:, :1], tokens[:, :-1]], 1))[0],
             "step t reads the embedding of the token before it (x[:, t - 1]): step t "
             "reads its own token, x[:, t]; the earlier ones reach it through the memory."),
            (_loop(model, tokens, memory="embedding"), lambda: relu_loop(fn, tokens, _model, (
                "your memory vector is the token's embedding: it must be model.mix of ALL "
                "layer outputs (torch.stack(outs), embedding first)."))),
            (_loop(model, tokens, memory="mean"),
             "your memory vector is a plain mean of the layer outputs: it is the learned "
             "mix, model.mix(torch.stack(outs)), weighted by softmax(model.mix.logits)."),
            (_loop(model, tokens, chain=False),
             "the layers are not chained: each layer was fed the embedding x[:, t]; "
             "layer l must read the output of layer l - 1 (outs[-1]), the first layer "
             "the embedding."),
            (_loop(model, tokens, logits="memory"),
             "the logits come from the memory vector m: model.head must read the TOP "
             "layer's output of each step (outs[-1]); m only feeds later steps."),
            (_loop(model, tokens, memory="mix_top_twice"),
             "model.mix got the layer outputs without the embedding (the top layer in "
             "its place): stack ALL outputs of the step, the embedding first, "
             "torch.stack([x[:, t], layer 1, ..., layer L])."),
            (_loop(model, tokens, memory="mix_embedding_last"),
             "model.mix got its entries in the wrong order: stack them embedding "
             "first, then layer 1, ..., layer L (mix weight l belongs to entry l)."),
            (_loop(model, tokens, own=True),
             "each step reads its own memory vector: a step attends only to the memory "
             "of EARLIER steps; append its keys and values after computing its "
             "outputs, for the steps that follow."),
            *memory_slips(model, tokens),
            (_loop(model, tokens, layer_keys=False),
             "every layer reads the first layer's keys and values: each layer i has "
             "its own projection of the memory, so layer i reads keys[i], values[i]."),
            (_loop(model, tokens, layer_keys="last"),
             "every layer reads the last layer's keys and values (keys[-1]): each "
             "layer i has its own projection of the memory, so layer i reads keys[i]."),
            (_loop(model, tokens, layer_keys="reversed"),
             "the layers' keys and values are reversed: layer i read the keys of layer "
             "L-1-i (keys[-1 - i]): layer i reads its own, keys[i], values[i]."),
            (_loop(model, tokens, grow="none"),
             "the memory never grows: after each step, project its memory vector "
             "(model.project_memory(m[:, None])) and append the keys and values for "
             "later steps."),
            (_loop(model, tokens, grow="replace"),
             "each step sees only the previous step's memory: append the new keys and "
             "values to the old ones (torch.cat along dim 2), do not replace them."),
            (_loop(model, tokens, grow="prepend"),
             "the new keys and values are put in front: keys are kept oldest first "
             "(the relative bias relies on it), so append them at the end of dim 2."),
        ]
    projected = []  # the first memory vector the loop projects, m_0
    seen = watch(model, seen=[], batch=tokens.size(0), first=projected)
    trace = record_steps(model, projected)  # each step's outputs and memory vector
    embedding_written = embedding_kept(model)
    read = []  # the number of keys layer 0 read at each of its calls
    model.layers[0].register_forward_pre_hook(lambda _, args: None if len(args) < 2 or not (
        isinstance(args[1], torch.Tensor) and args[1].dim() == 4) else read.append(
        args[1].size(-2)))
    tokens_before, kept = snapshot(tokens=tokens), other_sizes.memory_read(model)
    model.train()  # dropout 0: the same logits; a loop that switches it to eval() is named
    crashed = cat_axis(fn, model, tokens, want)
    got = expect_tensor(call(fn, what, model, tokens, diagnose=lambda err: (
        global_model(fn, model, what), crashed(err), negative_step(
            err, "model.mix(torch.stack(outs)), embedding first, as the outputs come."))), what)
    expect_unchanged(tokens_before, what, tokens=tokens)
    trace = trace()  # before any rerun
    if close(got, want):  # norm_mem undoes a scale of m (or a layer norm): m_t itself
        later_memory(model, trace, lambda: mix_input_slip(model, tokens, seen, projected))
    if read == list(range(1, tokens.size(1))):  # layer 0 first ran at step 1, over 1 key
        fail("your loop runs no layer at step t = 0 (model.layers[0] first ran at step 1): "
             "run every layer at every step, the first over the empty memory, 0 keys: its "
             "attention output is zero, but out_proj's bias, the feed-forward and the "
             "residuals still apply, layer(outs[-1], keys[i], values[i]).")
    if got.shape != want.shape or not close(got, want):  # the notebook's model, of 32 ids?
        global_model(fn, model, what)
    step_count(got, want, what)
    n, t, v = want.shape
    if tuple(got.shape) == (t, n, v):
        fail(f"{what} has shape [T, B, V] = [{t}, {n}, {v}]: stack the steps along "
             f"dim 1, [B, T, V].")
    if tuple(got.shape) == (n, t, D):
        fail(f"{what} has shape [B, T, D] = [{n}, {t}, {D}]: these are the top "
             f"layer's outputs; "
             "model.head turns them into logits over the vocabulary.")
    expect_like(got, want, what, "Keep the model's dtype (no .double() on the way).")
    if not close(got, want):  # dropout in the loop: another result at each call
        expect_repeatable(fn, what, got, model, tokens)
    _diagnose(got, want, mistakes)
    expect_every_row(got, want, what, fix="run each step on x[:, t] of all rows.")
    expect_no_nan(got, want, what, dims="b t v")
    if not close(got, want):
        embedding_written(what)
        off = off_entries(got, want)  # NaN counts as off
        step = int(off.any(dim=2).any(dim=0).nonzero()[0])
        n = read[0] if read else 0
        if step == 0 and n:
            fail(f"the logits of {what} differ at step t = 0, where your first layer read "
                 f"{n} memory key{'s' * (n > 1)}: the memory starts empty, "
                 "model.project_memory(x[:, :0])" + (", not x[:, :1]" if n == 1 else "")
                 + ": step t attends only to the steps before it.")
        where = ("already at the first step, t = 0, where the memory is still empty: "
                 "check the embedding, the layers chained (layer l reads layer l - 1) "
                 "and model.head on the top layer's output"
                 if step == 0 else f"from step t = {step} on (earlier steps match): check "
                                   "what later steps read, model.mix of all outputs, "
                                   "model.project_memory, keys[i] for layer i, "
                                   "appended oldest first")
        if step:
            if not seen:  # a mix of its own: named where it leaks across the batch rows
                rows_mixed(fn, model, tokens, got, what, own_mix=True)
            later_memory(model, trace)  # m_t (t > 0) not a mix of its step's outputs
            mix_input_slip(model, tokens, seen, projected)
            window_slip(model, tokens, got, step, what)
            layer_reads(fn, _model(), tokens)  # keys[t % L]: another layer's keys
        steps_off(got, want, step, what)  # one token short, each step's logits one late
        rows_mixed(fn, model, tokens, got, what)  # a mean over the batch, in the memory?
        off[:, :step], off[:, step + 1:] = False, False  # the first at the step named
        fail(f"the logits of {what} differ {where} (first at "
             f"{first_position(off, 'b t v')}).")
    kept_state.token_loop(fn, what, tokens, model.config, model.mix.logits)  # a new model
    named_detach(fn, model, tokens, what,
                 lambda: expect_memory_gradients(got, want_graph, what, params))
    # the one dtype rule: float64 logits from a float64 model (a fresh one: no watchers)
    float64_round(float32_made(fn), what, (_model().double(), tokens),
                  _model().double()(tokens)[0].detach())
    other_sizes.token_loop(fn, kept)  # a memory kept between calls: named there
    long_memory.bfloat16_round(fn, what, _model().to(torch.bfloat16), tokens[:, :3])
    expect_whole_memory(fn, what, lambda m: dict(m.named_parameters()), expect_memory_gradients)
    size_one.token_loop(fn)
    for said, part in (("", tokens[:, :3]), (" with B = 1", tokens[:1, :3]),
                       (" with T = 1", tokens[:, :1])):  # a model: on a GPU, at any size
        expect_any_device(fn, what + said, _model(), part)


@exercise("cache sizes")
def check_cache_bytes(fn: Callable) -> None:
    """`fn(n_layers, d_model, n_tokens, bytes_per_number)` -> `(transformer_bytes,
    feedback_bytes)` of the decoding caches for one sequence: a transformer keeps keys
    and values per layer, a feedback model with shared keys/values keeps one key and one
    value per token (past 2**31 bytes too)."""
    seen = {}  # arguments -> result: a result kept per argument returns
    for n_layers, d_model, n_tokens, size in [FIRST, (8, 512, 100, 2), BEYOND_INT32, ODD]:
        what = f"cache_bytes({n_layers}, {d_model}, {n_tokens}, {size})"
        got = call(fn, what, n_layers, d_model, n_tokens, size, diagnose=overflowed)
        tf, fb = 2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size
        expect_two_ints(got, tf, fb, what)  # a tuple of Python ints, no int32 overflow
        kept_result(got, (n_layers, d_model, n_tokens, size), seen, what)
        a, b = got
        if (a, b) == (fb, tf):
            fail(f"{what}: the two sizes are swapped: the transformer's comes first.")
        cache_slips(fn, a, b, tf, fb, n_layers, what)
        small = [name for value, ref, name in ((a, tf, "transformer_bytes"),
                                               (b, fb, "feedback_bytes")) if value * 8 == ref]
        if small:
            fail(f"{what}: {' and '.join(small)} {'are' if small[1:] else 'is'} 8 times too "
                 "small: bytes_per_number already counts bytes; do not divide by 8.")
        for i, (value, ref, name) in enumerate(((a, tf, "transformer_bytes"),
                                                (b, fb, "feedback_bytes"))):
            if value == ref * 8:
                fail(f"{what}: {name} is in bits: a number takes bytes_per_number "
                     f"BYTES, no factor 8.")
            if value == ref // size and value == _first(fn, n_layers, d_model, n_tokens,
                                                        2 * size, index=i):  # not d_model // 4
                fail(f"{what}: {name} counts numbers, not bytes: multiply by "
                     f"bytes_per_number.")
            if value == ref // n_tokens:
                fail(f"{what}: {name} is the size of ONE token's entry: multiply by "
                     f"n_tokens.")
        token_count((a, b), (n_layers, d_model, n_tokens, size), what)  # n_tokens - 1?
        common_factor(fn, (n_layers, d_model, n_tokens, size), (a, b), what)  # * 4 in both
        if a == tf // 2:  # 2 bytes written for bytes_per_number halves it too, at 4 bytes
            fixed_arguments(fn, (n_layers, d_model, n_tokens, size), (a, b), what,
                            names=("bytes_per_number",))
            fail(f"{what}: the transformer caches keys AND values for every layer: 2 "
                 "* L * D numbers per token, twice what you counted.")
        if a == tf // n_layers * (n_layers + 1):
            fail(f"{what}: counted L + 1 layers: the transformer caches keys and values "
                 "in its L layers, not the embedding.")
        if a == tf // n_layers:
            fail(f"{what}: the transformer keeps a key and a value PER LAYER: "
                 f"multiply by n_layers.")
        if b == fb * n_layers:
            fail(f"{what}: with shared keys and values the feedback model projects "
                 f"each memory vector ONCE for "
                 "all layers: do not multiply by n_layers.")
        if b == fb // 2 * (2 + n_layers):
            fail(f"{what}: feedback_bytes counts (2 + L)·D numbers per token (a key, a value "
                 "and a memory per layer?): the feedback model caches one key and one value "
                 "per token, shared by all layers: 2 * d_model numbers.")
        feedback_count(fn, (n_layers, d_model, n_tokens, size), b, what)  # 4·D, fixed?
        if b == fb // 2 * (n_layers + 1) and b != fb:
            fail(f"{what}: for the Feedback model you counted L keys and one value (or one key "
                 "and L values) per position: all layers share ONE key and ONE value per "
                 "position (that is the point of sharing): 2 · D numbers per position.")
        if b == fb // 2:
            fail(f"{what}: the feedback model caches a key AND a value per token: 2 * "
                 f"D numbers.")
        if a == tf and b and a % b == 0 and a // b != n_layers:
            fail(f"{what}: feedback_bytes is transformer_bytes / {a // b}, a fixed ratio: it is "
                 f"1/L for the given L = n_layers = {n_layers} (1/4 only when L = 4): compute "
                 "it from the arguments, 2 * d_model * n_tokens * bytes_per_number.")
        if isinstance(a, float) or isinstance(b, float):
            if (a, b) == (tf, fb):
                fail(f"{what} returned floats {got!r}: bytes are whole numbers, "
                     f"return ints (use * and //, "
                     "not /).")
        if (a, b) != (tf, fb):
            other_slips(fn, (n_layers, d_model, n_tokens, size), (a, b), what)
            fail(f"for L={n_layers}, D={d_model}, {n_tokens} tokens, {size} bytes "
                 f"each: got {got}, expected ({tf}, {fb}).")
    kept_rounds(fn, seen)  # the first call's arguments again, one to three of them
