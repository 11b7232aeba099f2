"""Notebook 03's answers that hold only while no size is 1, and the token loop on a
sequence long enough for a copied window to show. The checks' own sizes are all above 1
(B 2, H 3, S 6, s 2 and 7): a `.squeeze()` with no dim there drops nothing it should keep,
and passed; a decoding step has B = 1, a model may have one head, a step one memory key.
Each checker, once the answer passes, runs it again with such a size 1 (`expect_same`
names a lost axis); the token loop also runs one sequence of 66 tokens, past a window
copied from the notebook (`attn_len` 32, the 48 tokens of its first plot, max_distance 64)
or a memory detached every 32 or 64 steps (its gradients are checked); one memory key
must pass v its gradient.

Dimension letters (the package legend): `B` batch, `H` heads, `S` memory keys, `D` model
width, `D_h` head width, `L` layers, `T` tokens.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import (close, expect_gradients, expect_no_alias, expect_tensor,
                                     fail, first_line)
from labnn.exercises.grading.sizes import expect_same, randn
from labnn.exercises.feedback_transformer.long_memory import _model, named_detach, window_slip
from labnn.exercises.feedback_transformer.token_loop_slips import expect_memory_gradients
from labnn.exercises.feedback_transformer.step_slips import off_entries
from labnn.feedback.layer import LayerMix, RelativeBias, feedback_attention

_KEEP = ("a .squeeze() with no dim drops every axis of size 1, {axes} too: squeeze only "
         "an axis you added yourself ({fix}), or none")
T = 66  # past a window of 32 (the notebook's attn_len), 48 (its T_DEMO) or 64


def memory_vector(fn: Callable) -> None:
    """`fn(xs, w)` with one sequence, B = 1: the memory vector is `[1, D]`; then with one
    layer, L + 1 = 1: the result is xs[0], a new tensor, not a view of xs."""
    xs, w = randn(3, 1, 5, seed=51), randn(3, seed=52)
    mix = LayerMix(3)
    with torch.no_grad():
        mix.logits.copy_(w)
        want = mix(xs)
    expect_same("memory_vector(xs, w) with B = 1, xs [3, 1, 5]",
                lambda: fn(xs.clone(), w.clone()), want,
                _KEEP.format(axes="B = 1", fix=".sum(0) leaves none to drop"), dims="B D")
    xs, w = randn(1, 2, 5, seed=50), randn(1, seed=49)  # one layer: weight 1, xs[0]
    what = "memory_vector(xs, w) with one layer, xs [1, 2, 5]"
    expect_same(what, lambda: fn(xs.clone(), w.clone()), xs[0],
                "read L + 1 from xs and w; one layer gets weight softmax(w) = 1")
    given = xs.clone()
    expect_no_alias(fn(given, w.clone()), what, " (xs[0]?)", xs=given)


def relative_bias(fn: Callable) -> None:
    """`fn(table, s)` with one head (H = 1), then with one key (s = 1); neither result may
    be a view of the table (`table[:, :1]`)."""
    for heads, s in ((1, 3), (3, 1)):
        table = randn(heads, 4, seed=53)
        want = RelativeBias.lookup(table, s)
        expect_same(f"relative_bias(table, {s}) with table [{heads}, 4] (H = {heads}, "
                    f"s = {s})", lambda t=table, s=s: fn(t.clone(), s), want,
                    _KEEP.format(axes="H = 1 and S = 1",
                                 fix="table[:, d - 1] is [H, S] as it is"), dims="H S")
        given = table.clone()
        expect_no_alias(fn(given, s), f"relative_bias(table, {s}) with table [{heads}, 4]",
                        " (table[:, :1]?)" if s == 1 else "", table=given)


def one_key(fn: Callable) -> None:
    """`fn(q, k, v, bias)` with one memory key (S = 1): weight 1, the output is that key's
    value, not zeros (zeros are for S = 0 alone), nor a view of v, nor cut from its graph."""
    q, k, v = randn(2, 3, 4, seed=54), randn(2, 3, 1, 4, seed=55), randn(2, 3, 1, 4, seed=56)
    bias = randn(3, 1, seed=57)
    what = "feedback_attention(q, k, v, bias) with one memory key, k [2, 3, 1, 4]"
    want = feedback_attention(q, k, v, bias)
    given = dict(q=q.clone(), k=k.clone(), v=v.clone(), bias=bias.clone())
    try:
        got = fn(*given.values())
    except Exception as err:  # noqa: BLE001 (it ran at S = 6: a lost key axis)
        line = first_line(err, 100)
        fail(f"{what} raised {type(err).__name__} ({line}), though it runs at S = 6: a "
             ".squeeze() with no dim drops the key axis too when S = 1: squeeze only the "
             "query axis, .squeeze(2).")
    if isinstance(got, torch.Tensor) and got.shape == want.shape and not got.detach().any():
        fail(f"{what} gives zeros: the one key gets weight 1 and the output is its value, "
             "v[:, :, 0]; only an empty memory (S = 0) gives zeros (test k.size(2) == 0).")
    expect_same(what, lambda: fn(q.clone(), k.clone(), v.clone(), bias.clone()), want,
                _KEEP.format(axes="the key axis S = 1", fix=".squeeze(2) of the query axis"),
                dims="B H D_h")
    for name, tensor in given.items():  # v[:, :, 0]: the caller's v, for one key
        expect_no_alias(got, what, " (v[:, :, 0]?)" if name == "v" else "", **{name: tensor})
    leaves = [t.clone().requires_grad_() for t in given.values()]
    got = fn(*(t.clone() for t in leaves))  # it ran above: the gradient reaches v?
    if not isinstance(got, torch.Tensor) or got.grad_fn is None:
        fail(f"{what} is cut from the graph (no grad_fn): v gets no gradient, so nothing "
             "before it learns (a .detach(), or torch.tensor(...) of its values, for one "
             "key?). The output is v[:, :, 0] (weight 1): return v[:, :, 0].clone(), no "
             "detach, or compute it as for any S.")
    refs = [t.clone().requires_grad_() for t in given.values()]
    expect_gradients(got, feedback_attention(*refs), what,
                     {n: (a, b) for n, a, b in zip(given, leaves, refs)},
                     dims={"q": "b h d", "k": "b h s d", "v": "b h s d", "bias": "h s"})


def token_loop(fn: Callable) -> None:
    """`fn(model, tokens)` on one sequence (B = 1) of `T = 66` tokens: a `.squeeze()` drops
    B, a window copied from the notebook cuts the memory, a detach every 32 or 64 steps
    cuts its gradients."""
    model = _model()
    tokens = torch.randint(0, 9, (1, T), generator=torch.Generator().manual_seed(58))
    want_graph = model(tokens)[0]
    want = want_graph.detach()
    what = f"token_loop(model, tokens) with B = 1, tokens [1, {T}]"
    keep = _KEEP.format(axes="B = 1", fix="m[:, None] adds one; keep m [B, D] as it is")
    try:
        got = fn(model, tokens.clone())
    except Exception as err:  # noqa: BLE001 (it ran at B = 2: a lost batch axis)
        line = first_line(err, 100)
        fail(f"{what} raised {type(err).__name__} ({line}), though it runs at B = 2: {keep}.")
    got = expect_tensor(got, what)
    if got.shape != want.shape:
        expect_same(what, lambda: got, want, keep, dims="B T V")
    if not close(got.detach(), want):
        off = off_entries(got, want)
        step = int(off.any(2).any(0).nonzero()[0])
        window_slip(model, tokens, got, step, what)
        fail(f"the logits of {what} differ from step t = {step} on, though the 24 tokens of "
             "the check before match: nothing may depend on the sequence's length; the "
             "exercise has no window: step t attends to the memory of every earlier step.")
    params = dict(model.named_parameters())  # past a detach every 32 or 64 steps
    named_detach(fn, model, tokens, what,
                 lambda: expect_memory_gradients(got, want_graph, what, params))
