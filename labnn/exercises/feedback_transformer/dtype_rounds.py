"""Notebook 03's dtype rounds for `memory_vector` and `feedback_attention`, once the answer
passes in float32: float64 inputs that float32 cannot hold (the check's own numbers divided
by 3), where a `.float()` on an input (`xs.float()`, `bias.float()`, `q.float().to(k.dtype)`)
rounds them and shows; then bfloat16 inputs, where a tensor made without `dtype=`
(`torch.zeros(xs.shape[1:], device=xs.device)`, `torch.ones(1, device=...)`) is float32 and
promotes the result, which float64 inputs hide (they promote it back). The attention
has a second float64 round at D_h = 8, whose root float32 cannot hold (the check's 4 has
an exact one): a scale computed in float32 shows there (`float32_scale`, run by
`other_sizes` once a scale rounded or written as a number is ruled out).

Dimension letters (the package legend): `B` batch, `H` heads, `S` memory keys, `D` model
width, `D_h` head width, `L` layers.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import (ExerciseFailed, call, close, expect_close, expect_like,
                                     expect_tensor, expect_unchanged, fail, first_line,
                                     snapshot)
from labnn.exercises.grading.sizes import randn
from labnn.exercises.grading.slips import beyond_float32, float64_round
from labnn.feedback.layer import feedback_attention as _attention


def float64_accurate(fn: Callable, what: str, args: dict[str, torch.Tensor],
                     reference: Callable) -> None:
    """The one dtype rule (`float64_round`) on the float64 `args`; a result that fails it
    and is the reference of the inputs with one of them rounded to float32 is named: a
    `.float()` on that input (a rerun tells it from a float32 step elsewhere).

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"memory_vector(xs, w)"``.
        args: the float64 inputs by name, in the order of the call.
        reference: computes the result from the inputs, in their dtype.
    """
    try:
        float64_round(fn, what, tuple(args.values()), reference(*args.values()))
    except ExerciseFailed as failed:
        try:  # a rerun that names the slip, as `gives`
            got = fn(*(t.clone() for t in args.values()))
        except Exception:  # noqa: BLE001 (float64_round's message stands)
            raise failed from None
        for name in args:
            rounded = {n: t.float().double() if n == name else t for n, t in args.items()}
            if isinstance(got, torch.Tensor) and got.dtype == torch.float64 and close(
                    got, reference(*rounded.values()), atol=1e-12, rtol=1e-10):
                fail(f"{what} with float64 inputs: your result is float64 but it is the "
                     f"reference of `{name}` rounded to float32: {name}.float() (or "
                     ".to(torch.float32)) on the way drops float64's precision; keep every "
                     "step in the inputs' dtype.")
        raise


def low_precision_round(fn: Callable, what: str, args: tuple, reference: Callable,
                        names: tuple[str, ...]) -> None:
    """Run `fn` on bfloat16 copies of `args` and refuse a result of another dtype than
    the inputs' (a float32 one is named: a tensor made without `dtype=`), or far from the
    reference.

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"memory_vector(xs, w)"``.
        args: the check's inputs (float32).
        reference: computes the result from the inputs, in their dtype.
        names: the arguments' names, the first one's dtype new tensors take (``"xs"``).
    """
    what, first = f"{what} with bfloat16 inputs", names[0]
    args = tuple(t.detach().to(torch.bfloat16) for t in args)
    want = reference(*args)

    def clash(err: Exception) -> None:  # a float32 tensor meets bfloat16 ones in a product
        if "expected scalar type" in str(err).lower() or "same dtype" in str(err):
            fail(f"{what} raised torch's dtype error ({first_line(err, 60)}): a float32 "
                 "tensor (made without dtype=, or a bool tensor times a number) meets the "
                 f"bfloat16 inputs: make new tensors with dtype={first}.dtype (or "
                 f"{first}.new_zeros(...), torch.zeros_like(...)), or .to({first}.dtype).")
    named = dict(zip(names, args))
    before = snapshot(**named)  # an input changed in place only when it has no gradient
    got = expect_tensor(call(fn, what, *args, diagnose=clash), what)
    expect_unchanged(before, what, **named)
    if got.dtype == torch.float32 and got.shape == want.shape:
        fail(f"{what} returns float32: a tensor made without dtype= (torch.zeros(..., "
             f"device={first}.device), torch.ones(1, device=...)) is float32 and promotes "
             f"the result (float64 inputs hid it): give it dtype={first}.dtype, or use "
             f"{first}.new_zeros(...) or torch.zeros_like(...).")
    expect_like(got, want, what)
    exact = reference(*(t.float() for t in args))  # of the same numbers, in float32
    expect_close(got.float(), exact, what, atol=0.05, rtol=0.05)  # bfloat16's rounding


def memory_vector(fn: Callable, xs: torch.Tensor, w: torch.Tensor) -> None:
    """The float64 and bfloat16 rounds of `fn(xs, w)`, on the check's `xs` and `w`."""
    def mix(xs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("l,lbd->bd", w.softmax(0), xs)
    xs64, w64 = beyond_float32(xs, w)
    float64_accurate(fn, "memory_vector(xs, w)", {"xs": xs64, "w": w64}, mix)
    low_precision_round(fn, "memory_vector(xs, w)", (xs, w), mix, ("xs", "w"))


def feedback_attention(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       bias: torch.Tensor) -> None:
    """The float64 and bfloat16 rounds of `fn(q, k, v, bias)`, on the check's inputs."""
    what = "feedback_attention(q, k, v, bias)"
    doubled = dict(zip(("q", "k", "v", "bias"), beyond_float32(q, k, v, bias)))
    float64_accurate(fn, what, doubled, _attention)
    low_precision_round(fn, what, (q, k, v, bias), _attention, ("q", "k", "v", "bias"))


def float32_scale(fn: Callable) -> None:
    """A float64 round at D_h = 8: sqrt(8), unlike the check's sqrt(4), is not exact in
    float32, so a scale computed in float32 (`torch.sqrt(torch.tensor(float(d)))`) shows,
    and is named."""
    d = 8
    what = f"feedback_attention(q, k, v, bias) with D_h = {d}"
    q, k, v, bias = (randn(*shape, seed=64 + i).double() / 3 for i, shape in enumerate(
        ((2, 3, d), (2, 3, 5, d), (2, 3, 5, d), (3, 5))))
    try:
        got = fn(q.clone(), k.clone(), v.clone(), bias.clone())
    except Exception:  # noqa: BLE001 (float64_accurate names it)
        got = None
    root32 = torch.tensor(float(d)).sqrt().double()  # sqrt(8) rounded to float32
    if isinstance(got, torch.Tensor) and got.dtype == torch.float64 and not close(
            got, _attention(q, k, v, bias), atol=1e-12, rtol=1e-10) and close(
            got, _attention(q * math.sqrt(d) / root32, k, v, bias), atol=1e-12, rtol=1e-10):
        fail(f"{what} and float64 inputs: your result is float64 but only float32-accurate: "
             "the scale sqrt(D_h) is computed in float32 (torch.tensor(float(d)) is "
             "float32): use math.sqrt(q.size(-1)), or a tensor of dtype=q.dtype.")
    float64_accurate(fn, what, dict(q=q, k=k, v=v, bias=bias), _attention)
