"""Notebook 04's answers on large values: each exercise once more with entries of every
size from about 1 to about 1e6, where a result bounded on the way (`.clamp(-10, 10)` on a
gradient "against exploding values", on a key, on the value pushed, on a weight gradient)
shows. The checks' own values are of order 1, and a recurrence's states pass through tanh,
so a clamp at 10 or 1000 changed nothing there.

Dimension letters (the package legend, plus two of `Append`): `B` batch, `n` the stack's
length, `C` the buffer's capacity, `F` features of one step; `D` model width, `H` heads.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from labnn.exercises.grading import close, fail, running
from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading.sizes import randn
from labnn.exercises.kv_sharing_stack.input_rounds import summed_reads

SAID = "with entries up to about 1e6"


def _large(*shape: int, seed: int) -> torch.Tensor:
    """Entries of every size from about 1 to about 1e6: some inside a bound, some beyond."""
    scale = torch.logspace(0, 6, torch.Size(shape).numel(), dtype=torch.float64)
    return randn(*shape, seed=seed, dtype=torch.float64) * scale.view(shape)


def expect_exact(what: str, got: object, want: torch.Tensor) -> None:
    """Fail unless `got` is `want`: clipped (`expect_unclipped`) or otherwise wrong at large
    values only."""
    if isinstance(got, torch.Tensor) and close(got, want):
        return
    expect_unclipped(got, want, what)
    fail(f"{what} is wrong, though right for the check's values of about 1: a step that "
         "depends on how large the values are (a clamp, a threshold, an eps?); nothing "
         "bounds this result: compute exactly what is asked.")


def square(fn) -> None:
    """`Square.apply(x)` and its gradient, x and grad_output up to about 1e6."""
    x, g = _large(4, 3, seed=170).requires_grad_(), _large(4, 3, seed=171)
    with running(f"Square.apply(x) {SAID}, and its gradient"):
        y = fn.apply(x)
        (got,) = torch.autograd.grad(y, x, g)
    expect_exact(f"Square.apply(x) {SAID}", y, x.detach() ** 2)
    expect_exact(f"the gradient of Square.apply(x) {SAID}", got, 2 * x.detach() * g)


def value_gradients(fn: Callable) -> None:
    """`fn(read_grads)`, the reads up to about 1e6."""
    reads = [_large(t + 1, 3, seed=172 + t) for t in range(5)]
    what = f"value_gradients(read_grads) {SAID}"
    with running(what):
        got = fn(list(reads))
    expect_exact(what, got, summed_reads(reads))


def append(fn) -> None:
    """One push of a value up to about 1e6, backward with a gradient as large: slot n holds
    the value, `top` and `value` get their slices of the gradient, as they are."""
    b, n, c, f = 2, 5, 12, 8
    buffer = torch.zeros(b, c, f, dtype=torch.float64)
    buffer[:, :n] = _large(b, n, f, seed=180)
    top = buffer[:, :n].clone().requires_grad_()
    value, grad = _large(b, f, seed=181).requires_grad_(), _large(b, n + 1, f, seed=182)
    what = f"Append.apply(top, value, buffer) {SAID}"
    with running(f"{what}, and its backward"):
        out = fn.apply(top, value, buffer)
        got = torch.autograd.grad(out, (top, value), grad, allow_unused=True)
    expect_exact(f"slot n of the buffer after {what}", buffer[:, n], value.detach())
    for name, mine, want in zip(("top", "value"), got, (grad[:, :n], grad[:, n])):
        expect_exact(f"the gradient of `{name}` from {what}", mine, want)


def shared_kv(fn: Callable) -> None:
    """`fn(m, norm, kv, H)` with a LayerNorm whose scale goes up to about 1e6: keys and
    values as large."""
    b, d, h = 3, 8, 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        norm, kv = nn.LayerNorm(d).double(), nn.Linear(d, 2 * d).double()
    with torch.no_grad():
        norm.weight.copy_(_large(d, seed=184))
    m = randn(b, d, seed=183, dtype=torch.float64)
    what = f"shared_kv(m, norm, kv, n_heads) with norm.weight {SAID[5:]}"
    with torch.no_grad():
        out = kv(norm(m)).view(b, 2, h, -1)
    with running(what):
        got = fn(m, norm, kv, h)
    for i, name in enumerate("kv"):
        mine = got[i] if isinstance(got, (tuple, list)) and len(got) == 2 else got
        expect_exact(f"{name} of {what}", mine, out[:, i])


def weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)`, xs and gs up to about 1e6: dL/dW up to about 1e8."""
    xs, gs = _large(4, 3, 5, seed=185), _large(4, 3, 2, seed=186)
    what = f"weight_gradient(xs, gs) {SAID}"
    with running(what):
        got = fn(xs.clone(), gs.clone())
    expect_exact(what, got, gs.flatten(0, 1).t() @ xs.flatten(0, 1))
