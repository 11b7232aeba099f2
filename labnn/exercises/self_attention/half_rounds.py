"""The float16 and bfloat16 rounds of notebook 01's Exercises 2 and 5, as `torch.autocast`
runs attention on a GPU: a finite fill of the masked scores that the dtype cannot hold
raises there, and is named; then the result is compared with the reference computed in
float32 from the same (rounded) inputs, at a tolerance fit for the dtype: a result of
another dtype (scores upcast, never cast back), NaN where the reference has numbers (a
query with no allowed key not zeroed in half precision, or `-1e9` turned into -inf and
NaN * 0, or a constant they cannot hold, seen in a rerun: an eps such as
`clamp_min(1e-12)` rounded to 0, a floor such as `clamp_min(-1e9)` turned into -inf),
and other values (half precision handled apart) are named.

Dimension letters: `B` batch, `T` queries, `D` width; outputs `[B, T, D]`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading import expect_like, expect_tensor, fail, first_line, first_position

HALF = (torch.float16, torch.bfloat16)
ULPS = 10  # the tolerance, in units of the dtype's eps: right answers stay below 1 eps


def expect_half_rounds(fn: Callable, what: str, inputs: Callable[[torch.dtype], tuple],
                       reference: Callable[[torch.dtype], torch.Tensor],
                       empty: tuple[int, ...] = ()) -> None:
    """Run `fn(*inputs(dtype))` in float16 and in bfloat16 and compare with
    `reference(dtype)`, float32 computed from the inputs rounded to `dtype`.

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"attention(q, k, v, mask)"``.
        inputs: dtype -> the arguments (tensors of that dtype, a boolean mask).
        reference: dtype -> the right result, in float32, `[B, T, D]`.
        empty: the queries whose mask row is all False (they must get zeros).
    """
    for dtype in HALF:
        name = str(dtype)[6:]
        label = f"{what} in {name} (as under torch.autocast)"
        try:
            got = fn(*inputs(dtype))
        except RuntimeError as err:
            if "overflow" not in str(err):
                return
            lost = _lost_constant(lambda: fn(*inputs(dtype)), dtype)
            fill = lost is None or "fill" in lost[1]
            what = "your fill of the masked scores" if fill else f"your {lost[0]:g} (in {lost[1]})"
            fail(f"{label} raised \"{first_line(err, 70)}\": {what} does not fit {name} "
                 f"(largest {torch.finfo(dtype).max:.4g}). "
                 + ("Fill with float('-inf'), or torch.finfo(scores.dtype).min." if fill else
                    "Use one each dtype holds: torch.finfo(s.dtype).min, or float('-inf')."))
        except Exception:
            return  # the learner's error in half precision only: left to the device rounds
        _expect_half_close(expect_tensor(got, label), reference(dtype), label, dtype, empty,
                           rerun=lambda: fn(*inputs(dtype)))


class _LostConstant(TorchFunctionMode):
    """Records the first constant (a Python float, or a 0-dim tensor of another dtype) handed
    to a torch function with a tensor of `dtype` that `dtype` cannot hold: not 0 but rounded
    to 0 (an eps such as `clamp_min(1e-12)` or `+ 1e-12`), or finite but turned into +-inf
    (a floor such as `clamp_min(-1e9)`), as `(constant, function, value in dtype)`."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype, self.lost = dtype, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        values = [*args, *kwargs.values()]
        if self.lost is None and any(isinstance(a, torch.Tensor) and a.dtype == self.dtype
                                     for a in values):
            for a in values:
                c = a.item() if (isinstance(a, torch.Tensor) and a.dim() == 0
                                 and a.is_floating_point() and a.dtype != self.dtype) else a
                if not isinstance(c, float) or c == 0.0 or not math.isfinite(c):
                    continue
                held = torch.tensor(c, dtype=torch.float64).to(self.dtype).item()
                if held == 0.0 or math.isinf(held):
                    self.lost = (c, getattr(func, "__name__", "an operation"), held)
                    break
        return func(*args, **kwargs)


def _lost_constant(rerun: Callable[[], object], dtype: torch.dtype) -> tuple | None:
    """Rerun the learner's call under `_LostConstant`: its constant lost in `dtype`, if any."""
    mode = _LostConstant(dtype)
    try:
        with mode, torch.no_grad():
            rerun()
    except Exception:
        pass  # a constant that does not fit raises in the call it was handed to: seen
    return mode.lost


def _lost_message(label: str, i: int, dtype: torch.dtype, lost: tuple) -> str:
    """What to say of a query `i` with no allowed key, NaN in `dtype` because of `lost`."""
    c, func, held = lost
    name, info = str(dtype)[6:], torch.finfo(dtype)
    said = f"{label} gives NaN for query i={i}, which may attend no key: your {c:g} (in {func})"
    if held == 0.0:
        return (f"{said} rounds to 0 in {name} (smallest positive "
                f"{info.smallest_normal * info.eps:.2g}), so that row's 0 / 0 is NaN. Divide "
                "by torch.where(z == 0, 1, z), or zero the empty rows, "
                "w.masked_fill(~mask.any(-1, keepdim=True), 0.0).")
    return (f"{said} is {'-' if held < 0 else ''}inf in {name} (largest {info.max:.5g}): "
            "that row is NaN. Zero empty rows in every dtype, "
            "w.masked_fill(~mask.any(-1, keepdim=True), 0.0), not by a product (NaN * 0 is NaN).")


def _expect_half_close(got: torch.Tensor, want: torch.Tensor, label: str,
                       dtype: torch.dtype, empty: tuple[int, ...],
                       rerun: Callable[[], object] = lambda: None) -> None:
    """Fail unless `got` has `dtype` and `want`'s values within `ULPS` eps of `dtype`
    (`rerun`, the call again, tells a constant lost in `dtype` apart)."""
    name = str(dtype)[6:]
    if got.is_floating_point() and got.dtype != dtype and got.shape == want.shape:
        fail(f"{label} returns {str(got.dtype)[6:]}: a result keeps its inputs' dtype "
             f"({name} in, {name} out). Computing in float32 inside is fine: cast the "
             "result back, .to(q.dtype) (or x.dtype).")
    expect_like(got, want.to(dtype), label)
    got = got.detach().float()
    nan = torch.isnan(got) & torch.isfinite(want)
    if nan.any():
        rows = nan.any(-1).any(0)  # per query
        if empty and rows[list(empty)].all() and not rows.sum() > len(empty):
            lost = _lost_constant(rerun, dtype)
            if lost is not None:
                fail(_lost_message(label, empty[0], dtype, lost))
            fail(f"{label} gives NaN for query i={empty[0]}, which may attend no key "
                 f"(numbers in float32): in {name} its softmax is NaN (a row of only -inf; "
                 "a fill like -1e9 is -inf in float16) and your answer does not zero it "
                 "(NaN * 0 stays NaN): zero it in every dtype, "
                 "w.masked_fill(~mask.any(-1, keepdim=True), 0.0).")
        fail(f"{label} gives NaN (at {first_position(nan, 'b i d')}) where the reference, "
             "computed in float32 from the same inputs, has numbers: does your function "
             f"compute something else in {name}? Compute the same in every dtype.")
    tol = ULPS * torch.finfo(dtype).eps
    off = (got - want).abs() > tol * (1 + want.abs())
    if off.any():
        i = tuple(off.nonzero()[0].tolist())
        fail(f"{label} differs from the reference, computed in float32 from the same inputs, "
             f"by more than {name}'s rounding ({tol:.2g}): at {first_position(off, 'b i d')} "
             f"yours {got[i].item():.4g}, expected {want[i].item():.4g}. Does your function "
             f"compute something else in {name}? Compute the same in every dtype.")
