"""Notebook 04's answers that hold only at the checks' own sizes: the value gradients and
the weight gradient, once they pass there, run again where every size differs
(`grading.sizes`), so that `torch.zeros(5, 3)` or `.reshape(10, 3)` written as numbers
fails by name. (`shared_kv` is checked at two sizes already; `Append` at every length of
its recurrence.)

Dimension letters (the package legend): `T` steps, `B` batch, `F` features of one
step; `D_in`, `D_out` the widths of one `Linear`.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading.sizes import expect_same, randn

T, B, F, D_IN, D_OUT = 4, 3, 6, 5, 2  # the checks' own: T 5, B 2, F 3, D_in 3, D_out 4


def value_gradients(fn: Callable) -> None:
    """`fn(read_grads)` with `T = 4` reads of `F = 6` features."""
    reads = [randn(t + 1, F, seed=60 + t, dtype=torch.float64) for t in range(T)]
    want = torch.stack([sum(reads[t][j] for t in range(j, T)) for j in range(T)])
    expect_same(f"value_gradients(read_grads) with T = {T} reads of F = {F}",
                lambda: fn([r.clone() for r in reads]), want,
                "T is len(read_grads), F read_grads[0].size(1): no size written as a "
                "number (the check's are T = 5, F = 3)")


def weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)` with xs `[4, 3, 5]`, gs `[4, 3, 2]`."""
    xs = randn(T, B, D_IN, seed=64, dtype=torch.float64)
    gs = randn(T, B, D_OUT, seed=65, dtype=torch.float64)
    expect_same(f"weight_gradient(xs, gs) with xs [{T}, {B}, {D_IN}], gs [{T}, {B}, {D_OUT}]",
                lambda: fn(xs.clone(), gs.clone()), gs.flatten(0, 1).t() @ xs.flatten(0, 1),
                "flatten(0, 1), no size as a number (the check's: T 5, B 2, D_in 3, D_out 4)")
