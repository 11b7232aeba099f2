"""Checkers for notebook 04's Exercises 1 and 5, key/value sharing: the shared projection of a
memory vector and the weight gradient computed once per pass
(`labnn.feedback.step_linear.StepLinear`).

Dimension letters (the package legend): `T` steps, `B` batch, `H` heads, `D` model width,
`D_h` head width. Positions in messages use the lower-case letters of the result's own
dimensions, e.g. `at [b=0, h=1, d=2]`.

Each checker runs the learner's code on seeded random inputs in float64, compares it with
`labnn` and, when it differs, recomputes the typical mistakes (keys and values or their
biases swapped, the memory vector not normalized, an input changed in place, ...) to say
which one was made.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
import torch.nn.functional as F_
from torch import nn

from labnn.exercises.grading import (call, close, exercise, expect_any_device, expect_close,
                                     expect_gradients, expect_like, expect_repeatable,
                                     expect_tensor, expect_unchanged, fail, snapshot)

from labnn.exercises.kv_sharing_stack import (fresh_rounds, input_rounds, large_rounds,
                                              other_sizes)
from labnn.exercises.kv_sharing_stack.custom_backward import (
    B, D, DTYPE_HINT, H, T, _diagnose, _randn)
from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.kv_sharing_stack.hidden_work import expect_one_product
from labnn.exercises.grading.slips import expect_every_row, gives
from labnn.exercises.kv_sharing_stack.custom_backward_slips import (
    dot_t_3d, expect_float64_gradient, expect_one_weight_gradient, scaled_gradient,
    tensordot_axes, view_not_contiguous, weight_gradient_inputs)
from labnn.exercises.kv_sharing_stack.kv_sharing_slips import (
    expect_eps_used, expect_key_width, features_flattened, float32_met,
    foreign_modules, fresh_norm, head_width_as_number, heads_as_number, kv_input, module_cast,
    modules_run, norm_slips, reshape_width, split_unpacked, width_batch)
from labnn.feedback.layer import memory_keys_values
from labnn.feedback.step_linear import StepLinear, _LinearRoot, _LinearStep


@exercise("one key/value projection shared by all layers",
          refuse={memory_keys_values: "labnn.feedback.layer.memory_keys_values"})
def check_shared_kv(fn: Callable) -> None:
    """`fn(m, norm, kv, n_heads)`: memory vectors m `[B, D]`, a LayerNorm, a Linear `D
    -> 2D` (keys first) -> `(k, v)`, each `[B, H, D_h]`."""
    # B not H: a reshape(H, B, D_h) would otherwise look like a plain transpose; D_h = 6,
    # not the notebook's H = 4: four heads written as a number are not a swap
    B, D, H = 4, 12, 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        norm, kv = nn.LayerNorm(D).double(), nn.Linear(D, 2 * D).double()
        with torch.no_grad():
            norm.weight.normal_(1, 0.3)
            norm.bias.normal_(0, 0.3)
            kv.weight.add_(torch.randn_like(kv.weight) * 1e-3)  # not float32 numbers
            kv.bias.add_(torch.randn_like(kv.bias) * 1e-3)
    m_leaf = _randn(B, D, seed=5).requires_grad_()
    m_ref = _randn(B, D, seed=5).requires_grad_()
    # not a leaf: an in-place change is reported, not refused by autograd
    m = m_leaf.clone()
    d_h = D // H
    with torch.no_grad():
        normed = norm(m)
        out = kv(normed).view(B, 2, H, d_h)
        raw = kv(m).view(B, 2, H, d_h)
        no_bias = F_.linear(normed, kv.weight).view(B, 2, H, d_h)
        halves = [norm(t) for t in kv(m).chunk(2, -1)]
        norm_after = torch.stack(halves, 1).view(B, 2, H, d_h)
        w, b = kv.weight, kv.bias
        k_swapped_bias = F_.linear(normed, w[:D], b[D:]).view(B, H, d_h)
        v_swapped_bias = F_.linear(normed, w[D:], b[:D]).view(B, H, d_h)
        k_no_t = (normed @ w[:D] + b[:D]).view(B, H, d_h)  # x @ W, not x @ W.T
    what = "shared_kv(m, norm, kv, n_heads)"
    before = snapshot(m=m)
    try:
        with modules_run() as ran:
            got = call(fn, what, m, norm, kv, H, diagnose=lambda err: split_unpacked(err, fn)
                       or foreign_modules(fn, what, norm, kv) or fresh_norm(ran, what, norm)
                       or float32_met(err, what) or view_not_contiguous(err, fn, what))
    finally:  # a module cast in place: named before the guard's "holds other values"
        module_cast(what, norm=norm, kv=kv)
    expect_unchanged(before, what, m=m)
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and close(got[0], out[:, 0])
            and close(got[1], out[:, 1])):
        foreign_modules(fn, what, norm, kv)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        fail(f"{what}: return a pair (k, v), got {type(got).__name__}"
             + (f" of {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
    k, v = (expect_tensor(t, name) for t, name in zip(got, ("k", "v")))
    if tuple(k.shape) == tuple(out.shape[1:]) and close(k.detach(), out[0]):
        fail("k is out[0] of kv(norm(m)).view(B, 2, H, D_h): batch entry 0 (its keys and "
             "values), not the keys. Index the second axis: out[:, 0], out[:, 1].")
    by_batch = out.reshape(B, 2 * D).chunk(2, 0)  # kv(norm(m)).chunk(2, 0)
    if all(t.numel() == c.numel() and close(t.detach().reshape(c.shape), c)
           for t, c in zip((k, v), by_batch)):
        fail("chunk(2, dim=0), or a view(2, B, ...) of kv(norm(m)) [B, 2·D], splits keys "
             "from values along the batch (dim 0), whole rows (examples) as keys and "
             "values. Split the LAST axis: chunk(2, dim=-1), keys first D, then view each "
             "as [B, H, D_h].")
    expect_key_width(k, out.reshape(B, 2 * D), H, fn)
    for name, t in (("k", k), ("v", v)):
        if tuple(t.shape) == (B, D):
            fail(f"{name} has shape [B, D] = [{B}, {D}]: split it into heads, [B, H, "
                 f"D_h] = [{B}, {H}, {d_h}].")
        if tuple(t.shape) == (B, d_h, H) and d_h != H:
            fail(f"{name} has shape [B, D_h, H] = {list(t.shape)}: the heads and the "
                 f"head width are swapped; view as [B, H, D_h] = [{B}, {H}, {d_h}].")
        head_width_as_number(t, out.reshape(B, 2 * D), name, H)
        heads_as_number(t, out.reshape(B, 2 * D), name, H)
        expect_like(t, out[:, 0], name, DTYPE_HINT)
    k0, v0 = k.detach(), v.detach()
    if close(k0, out[:, 1]) and close(v0, out[:, 0]):
        fail("keys and values are swapped: the first D outputs of kv are the keys.")
    if close(k0, raw[:, 0]) or close(v0, raw[:, 1]):
        fail("normalize the memory vector first (norm(m)), as the model does before "
             "projecting it, for the keys and the values alike: kv(norm(m)).")
    post = F_.layer_norm(kv(m).detach(), (2 * D,)).view(B, 2, H, d_h)[:, 0]
    if close(k0, norm_after[:, 0]) or close(k0, post):
        fail("you normalized after projecting: apply `norm` to m first, then project, "
             "kv(norm(m)).")
    norm_slips(k0, m, norm, kv, H)  # another normalisation than norm(m)
    missing = [n for n, t, i in (("keys", k0, 0), ("values", v0, 1))
               if close(t, no_bias[:, i])]
    if missing:
        fail(f"the projection's bias is missing from the {' and '.join(missing)}: kv(x) "
             "(or F.linear(x, kv.weight, kv.bias)) adds kv.bias; x @ kv.weight.T alone "
             "does not.")
    if close(k0, out[:, 0] + b[:D].view(H, d_h)) or close(v0, out[:, 1] + b[D:].view(H, d_h)):
        fail("kv's bias is added twice: kv(x) adds kv.bias already; kv(norm(m)) + kv.bias "
             "(or F.linear with the bias, then + bias) adds it again. Use kv(norm(m)) alone.")
    k_bias, v_bias = close(k0, k_swapped_bias), close(v0, v_swapped_bias)
    if k_bias and v_bias:
        fail("the biases are swapped: the keys' bias is kv.bias[:D] (with the weight "
             "rows kv.weight[:D]), the values' bias kv.bias[D:].")
    for name, theirs, got_it, own in (("values", "keys", v_bias, "D:"),
                                      ("keys", "values", k_bias, ":D")):
        if got_it:  # one bias copied from the other half: the other half is right
            fail(f"the {name} use the {theirs}' bias, kv.bias[{own[::-1]}]: the {name}' bias "
                 f"is kv.bias[{own}], beside their weight rows kv.weight[{own}] (the "
                 f"{theirs} are right), or simply kv(norm(m)).chunk(2, -1).")
    if close(k0, k_no_t):
        fail("k is norm(m) @ kv.weight[:D] + kv.bias[:D]: nn.Linear's weight is [out, in], "
             "so the layer computes x @ W.T + b: use kv.weight[:D].T, or simply "
             "kv(norm(m)).chunk(2, -1).")
    flat = kv(normed).detach()
    if close(k0, flat[:, :D].view(B, d_h, H).transpose(1, 2)):
        fail("the heads are split the wrong way: view the D outputs as [H, D_h] "
             "(head-major), not [D_h, H].")
    if close(k0, flat[:, :D].reshape(H, B, d_h).transpose(0, 1)):
        fail("reshape(H, B, D_h) reads the [B, D] rows in the wrong order (it mixes batch "
             "entries into heads); split each row: view(B, H, D_h) (then transpose if you "
             "need [H, ...]).")
    for name, got_t, every, which in (("keys", k0, 0, "even"), ("values", v0, 1, "odd")):
        if close(got_t, flat[:, every::2].view(B, H, d_h)):
            fail(f"the {name} are taken from alternate outputs, the {which} ones "
                 f"({every}::2): kv's 2D outputs are not interleaved but side by side, "
                 "the first D the keys, the last D the values: "
                 "kv(norm(m)).chunk(2, dim=-1), or .view(B, 2, H, D_h).")
    if close(k0, flat.view(B, H, 2, d_h)[:, :, 0]):
        fail("keys and values are interleaved per head: the 2D outputs are [keys (D), "
             "values (D)], so view "
             "them as [B, 2, H, D_h] (keys/values first, then heads).")
    for name, half in (("v", 0), ("k", 1)):
        if close(v0, k0) and close(k0, out[:, half]):
            fail(f"{name} is the same as {'kv'[half]}: kv(norm(m)) gives the keys as its "
                 "first D outputs and the values as its last D outputs: k, v = "
                 "kv(norm(m)).chunk(2, dim=-1), each viewed as [B, H, D_h].")
    if any(close(t, out[:, i] * math.sqrt(w) ** e) for t, i in ((k0, 0), (v0, 1))
           for w in (d_h, D) for e in (-1, 1)):
        fail("k or v is scaled by sqrt(D_h) (or its inverse, or sqrt(D)): that scale belongs "
             "to the attention scores, q·k / sqrt(D_h); keep the keys and values unscaled.")
    acts = {"relu()": torch.relu, "tanh()": torch.tanh, "sigmoid()": torch.sigmoid,
            "softmax(-1)": lambda t: t.softmax(-1), "gelu()": F_.gelu}
    for (name, t, i), (f, act) in itertools.product((("k", k0, 0), ("v", v0, 1)), acts.items()):
        if close(t, act(out[:, i])):
            said = ", a softmax is the attention weights'" if f.startswith("soft") else ""
            fail(f"{name} passes through .{f}: the keys and values are the projection's "
                 f"outputs as they are{said}: kv(norm(m)).chunk(2, -1), each viewed as "
                 "[B, H, D_h].")
    kv_input(k0, v0, m, kv, normed, H)  # another input than norm(m), heads mixed
    if not (close(k0, out[:, 0]) and close(v0, out[:, 1])):  # dropout: another at each call
        expect_repeatable(fn, what, (k, v), m, norm, kv, H)
    expect_every_row(k, out[:, 0], "k")
    if not (close(k0, out[:, 0]) and close(v0, out[:, 1])):
        fresh_rounds.shared_kv_rows(fn, m, norm, kv, H)
    expect_close(k, out[:, 0], "k", dims="b h d")
    expect_close(v, out[:, 1], "v", dims="b h d")
    fresh_rounds.shared_kv(fn, m_leaf.detach().clone().requires_grad_(), norm, kv, H)
    expect_eps_used(k, v, m, norm, kv, H)
    for name, t, i in (("k", k, 0), ("v", v, 1)):
        expect_float64_gradient(t, out[:, i], name, "shared_kv",
                                "m and of the modules' parameters")
    if not (k.requires_grad and v.requires_grad):
        expect_any_device(fn, what, m, norm, kv, H)  # first: a numpy round trip detaches
        fail("k or v is detached (no gradient flows back through it): the projection "
             "kv and the norm would "
             "never learn. Drop the .detach() / torch.no_grad().")
    ref = kv(norm(m_ref)).view(B, 2, H, d_h)
    params = {"norm.weight": norm.weight, "norm.bias": norm.bias,
              "kv.weight": kv.weight, "kv.bias": kv.bias}
    expect_gradients((k, v), (ref[:, 0], ref[:, 1]), what,
                     {"m": (m_leaf, m_ref), **{n: (p, p) for n, p in params.items()}},
                     dims={"m": "b d", "norm.weight": "d", "norm.bias": "d",
                           "kv.weight": "o i", "kv.bias": "o"})
    fresh_rounds.shared_kv_again(fn, B, D, H)  # first: a result kept, named as such
    other_sizes.shared_kv(fn)
    large_rounds.shared_kv(fn)  # keys and values up to about 1e6: a clamp shows
    later = input_rounds.shared_kv(fn)
    expect_any_device(fn, what, m, norm, kv, H)  # a model's m and layers: on a GPU
    input_rounds.on_devices(later)  # then each extra round's inputs: a branch for their sizes


@exercise("the weight gradient of a layer applied at every step", refuse={
    StepLinear.__call__: "labnn.feedback.step_linear.StepLinear",
    _LinearStep.backward: "labnn.feedback.step_linear.StepLinear",
    _LinearRoot.backward: "labnn.feedback.step_linear.StepLinear"})
def check_weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)`: inputs xs `[T, B, D_in]` and output gradients gs `[T, B, D_out]` of
    one Linear applied at every step -> dL/dW `[D_out, D_in]` = $\\sum_t g_t^\\top x_t$,
    in one matrix product."""
    xs, gs = _randn(T, B, 3, seed=6), _randn(T, B, 4, seed=7)
    want = sum(gs[t].t() @ xs[t] for t in range(T))
    what = "weight_gradient(xs, gs)"
    before = snapshot(xs=xs, gs=gs)

    def order(err: Exception) -> None:
        """G X^T on flattened rows: rerun with D_in = D_out, where it runs."""
        tensordot_axes(err)
        reshape_width(err, xs, gs, fn)
        width_batch(err, fn, what)
        dot_t_3d(err, fn, what)
        square = _randn(T, B, 4, seed=8)
        if isinstance(err, RuntimeError) and gives(
                fn, square, gs, gs.flatten(0, 1) @ square.flatten(0, 1).T):
            fail(f"{what} computes G X^T, [T*B, T*B]: the order is G^T X, "
                 "gs.flatten(0, 1).T @ xs.flatten(0, 1), [D_out, D_in]. "
                 f"(torch said: {str(err).strip().splitlines()[0]})")

    got = expect_tensor(call(fn, what, xs, gs, diagnose=order), what)
    expect_unchanged(before, what, xs=xs, gs=gs)
    sizes = {"T": T, "B": B, "D_out": 4, "D_in": 3}
    expect_one_weight_gradient(got, want, what, sizes)
    features_flattened(got, xs, gs, what)
    if tuple(got.shape) == (3, 4):
        fail("the result is transposed, [D_in, D_out]: dL/dW has the weight's shape "
             "[D_out, D_in] = G^T X.")
    expect_like(got, want, what, DTYPE_HINT, sizes)
    scaled_gradient(fn, got, want, what, sizes, (_randn(4, 3, 5, seed=94),
                                                 _randn(4, 3, 2, seed=95)))
    _diagnose(got, want, [
        (want.t().reshape(want.shape),
         "reshape is not a transpose: X^T G is [D_in, D_out], and .reshape(D_out, D_in) "
         "(or .view) refills it row by row, scrambling the entries; transpose instead: "
         "G^T X = gs.flatten(0, 1).T @ xs.flatten(0, 1) (or (X^T G).T)."),
        (gs.sum((0, 1))[:, None] * xs.sum((0, 1))[None],
         "you took the product of the sums (sum of G times sum of X): the gradient is the sum "
         "of the products, one g_t^T x_t per (t, b) row, which G^T X computes."),
        *[(gs.sum(axis).t() @ xs.sum(axis),
           f"you summed over the {name} before the product: (sum_{i} g_{i})^T (sum_{i} x_{i}) "
           f"adds cross terms g_{i}^T x_{j} of different {rows} {i} != {j} too. Pair each g "
           "with its own x: gs.flatten(0, 1).T @ xs.flatten(0, 1).")
          for axis, name, rows, i, j in ((1, "batch", "examples", "b", "c"),
                                         (0, "steps", "steps", "t", "s"))],
        (gs.transpose(0, 1).flatten(0, 1).t() @ xs.flatten(0, 1),
         "the rows of G and X are paired with different (t, b): flatten both the same way "
         "(gs.flatten(0, 1) and xs.flatten(0, 1))."),
        (gs.reshape(gs.size(-1), -1) @ xs.reshape(-1, xs.size(-1)),
         "reshape reorders the entries: gs.reshape(D_out, -1) is not G^T; transpose, "
         "G^T X = gs.flatten(0, 1).T @ xs.flatten(0, 1)."),
        *[(gs[t].t() @ xs[t], f"that is the {which} step's gradient only: the layer is "
           "applied at every step, so flatten steps and batch together, then G^T X.")
          for t, which in ((-1, "last"), (0, "first"))],
        *[(g_rows.t() @ x_rows, "the rows of G and X are paired in reverse order (one of "
           "them flipped, or its steps or examples): row r of G must meet row r of X, the "
           "same step and example, gs.flatten(0, 1).T @ xs.flatten(0, 1).")
          for g_rows, x_rows in [p for d in ((0, 1), 0, 1) for p in (
              (gs.flip(d).flatten(0, 1), xs.flatten(0, 1)),
              (gs.flatten(0, 1), xs.flip(d).flatten(0, 1)))]],
        *[(gs[:, b].t() @ xs[:, b], f"only batch element {b} is counted: flatten steps AND "
           "batch, [T·B, D].") for b in (0, -1)],
        *[(want - gs[t].t() @ xs[t], f"step {t} is left out (a range from 1, or to T - 1?): "
           "every step adds its g_t^T x_t: gs.flatten(0, 1).T @ xs.flatten(0, 1).")
          for t in (0, T - 1)],
        *[(want + gs[t].t() @ xs[t], f"step {t} is counted twice (its product added again "
           "after a loop, or a range that repeats it?): each step adds its g_t^T x_t "
           "once: gs.flatten(0, 1).T @ xs.flatten(0, 1).") for t in (0, T - 1)],
        *[(g.flatten(0, 1).t() @ x.flatten(0, 1), "g of step t meets x of the step "
           "before or after (a shifted slice, gs[1:] with xs[:-1], or a .roll?): pair each "
           "g_t with its own x_t, gs.flatten(0, 1).T @ xs.flatten(0, 1).")
          for g, x in ((gs[1:], xs[:-1]), (gs[:-1], xs[1:]), (gs.roll(1, 0), xs),
                       (gs.roll(-1, 0), xs))],
        (gs.flatten(0, 1).t() @ xs.transpose(0, 1).flatten(0, 1),
         "the rows of G and X are paired with different (t, b): flatten both the same way "
         "(gs.flatten(0, 1) and xs.flatten(0, 1))."),
        *weight_gradient_inputs(xs, gs),
        (want + gs.sum((0, 1))[:, None], "you added the bias's gradient, gs summed over steps "
         "and batch: dL/db is its own [D_out] vector; dL/dW is G^T X alone."),
    ])
    expect_unclipped(got, want, what)
    expect_close(got, want, what, dims="o i")
    fresh_rounds.weight_gradient(fn, xs, gs)  # before a later round names a kept result
    expect_float64_gradient(got, want, what, "weight_gradient", "xs and gs")
    expect_one_product(fn, xs, gs, what)
    fresh_rounds.weight_gradient_again(fn, xs, gs)
    other_sizes.weight_gradient(fn)
    large_rounds.weight_gradient(fn)  # xs and gs up to about 1e6: a clamp shows
    later = input_rounds.weight_gradient(fn)
    expect_any_device(fn, what, xs, gs)  # a model's inputs and gradients: on a GPU
    input_rounds.on_devices(later)  # then each extra round's inputs: a branch for their sizes
