"""Notebook 04's answers that hold only at the checks' own sizes: the shared keys and
values, the value gradients, `Append` and the weight gradient, once they pass there, run
again where every size differs (`grading.sizes`), so that `torch.zeros(5, 3)`,
`.reshape(10, 3)`, `unflatten(-1, (2, -1))` or `range(2)` written as numbers fails by name;
the weight gradient at a long T too, where a `.clamp()` on it shows, and `Append` pushed
past eight slots (a window of the last few returned instead of the whole prefix).

Dimension letters (the package legend): `T` steps, `B` batch, `F` features of one
step; `D` model width, `H` heads, `D_h` head width; `D_in`, `D_out` the widths of one
`Linear`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from labnn.exercises.grading import call, fail
from labnn.exercises.grading.sizes import expect_same, randn
from labnn.exercises.kv_sharing_stack.input_rounds import summed_reads

T, B, F, D_IN, D_OUT = 4, 3, 6, 5, 2  # the checks' own: T 5, B 2, F 3, D_in 3, D_out 4
KV_B, KV_D, KV_H = 3, 15, 5  # shared_kv's own: B 4, D 12, H 2


def value_gradients(fn: Callable) -> None:
    """`fn(read_grads)` with `T = 4` reads of `F = 6` features."""
    reads = [randn(t + 1, F, seed=60 + t, dtype=torch.float64) for t in range(T)]
    want = summed_reads(reads)
    expect_same(f"value_gradients(read_grads) with T = {T} reads of F = {F}",
                lambda: fn([r.clone() for r in reads]), want,
                "T is len(read_grads), F read_grads[0].size(1): no size written as a "
                "number (the check's first round has T = 5, F = 3)")


def weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)` with xs `[4, 3, 5]`, gs `[4, 3, 2]`; then with T = 600 steps of inputs
    ten times as large, entries in the thousands: a `.clamp()` that the check's twelve
    rows stayed within is named (`grading.clipping`)."""
    xs = randn(T, B, D_IN, seed=64, dtype=torch.float64)
    gs = randn(T, B, D_OUT, seed=65, dtype=torch.float64)
    expect_same(f"weight_gradient(xs, gs) with xs [{T}, {B}, {D_IN}], gs [{T}, {B}, {D_OUT}]",
                lambda: fn(xs.clone(), gs.clone()), gs.flatten(0, 1).t() @ xs.flatten(0, 1),
                "flatten(0, 1), no size as a number (the check's first round: T 5, B 2, D_in 3, "
                "D_out 4)")
    xs, gs = (10 * randn(600, 2, d, seed=s, dtype=torch.float64) for d, s in ((3, 62), (4, 63)))
    expect_same("weight_gradient(xs, gs) with xs [600, 2, 3], gs [600, 2, 4] (T = 600, "
                "inputs x 10)", lambda: fn(xs.clone(), gs.clone()),
                gs.flatten(0, 1).t() @ xs.flatten(0, 1), "read T and B from xs, no number")


def shared_kv(fn: Callable) -> None:
    """`fn(m, norm, kv, n_heads)` with m `[3, 15]`, `n_heads = 5`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        norm, kv = nn.LayerNorm(KV_D).double(), nn.Linear(KV_D, 2 * KV_D).double()
    m = randn(KV_B, KV_D, seed=66, dtype=torch.float64)
    with torch.no_grad():
        want = kv(norm(m)).view(KV_B, 2, KV_H, -1)
    for i, name in enumerate("kv"):
        expect_same(f"{name} of shared_kv(m, norm, kv, n_heads) with m [{KV_B}, {KV_D}], "
                    f"n_heads = {KV_H}", lambda i=i: fn(m.clone(), norm, kv, KV_H)[i],
                    want[:, i], "B is m.size(0), D m.size(-1), H n_heads, no number (the "
                    "check's first round: B = 4, D = 12, H = 2)")


def append(fn: Callable, recurrence: Callable) -> None:
    """`fn.apply` in `recurrence(x, push)` with x `[T, B, F] = [4, 3, 6]`: its outputs,
    then the gradient of x."""
    x = randn(T, B, F, seed=67, dtype=torch.float64).requires_grad_()
    g = randn(T, B, F, seed=68, dtype=torch.float64)
    want = recurrence(x, None)
    (ref,) = torch.autograd.grad(want, x, g)
    fix = "B is value.size(0), F value.size(-1), no number (the check's: B = 2, F = 3)"
    what = f"Append in a recurrence, x [T, B, F] = [{T}, {B}, {F}]"
    expect_same(what, lambda: recurrence(x, fn.apply), want.detach(), fix)
    expect_same(f"the gradient through {what}",
                lambda: torch.autograd.grad(recurrence(x, fn.apply), x, g)[0], ref, fix)
    _long_stack(fn, recurrence)


def _long_stack(fn: Callable, recurrence: Callable) -> None:
    """`fn.apply` with n = 10 slots in `top` (a buffer of C = 12), then in a recurrence of
    T = 12 steps: the prefix returned is all n + 1 slots, which a window of the last few (an
    attention span) cuts only past the check's five."""
    buffer = randn(B, 12, F, seed=69, dtype=torch.float64)
    value = randn(B, F, seed=70, dtype=torch.float64).requires_grad_()
    what = "Append.apply(top, value, buffer) with n = 10 slots in top, C = 12"
    out = call(fn.apply, what, buffer.data[:, :10], value, buffer)
    if isinstance(out, torch.Tensor) and out.dim() == 3 and out.size(1) != 11:
        fail(f"{what} returns {out.size(1)} slots, not n + 1 = 11: the stack keeps every "
             "value pushed, no window of the last few; return the whole prefix, "
             "buffer.data[:, :n + 1].")
    x = randn(12, B, F, seed=71, dtype=torch.float64)
    expect_same(f"Append in a recurrence, x [T, B, F] = [12, {B}, {F}]",
                lambda: recurrence(x, fn.apply), recurrence(x, None),
                "the prefix is buffer.data[:, :n + 1], n = top.size(1), at any length")
