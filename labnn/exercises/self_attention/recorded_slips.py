"""Slips of notebook 01's attention exercises that only the torch calls of a rerun tell
apart, recorded with a `TorchFunctionMode`: the backward NaN of a query with no allowed
key when -inf was added to the scores (`+ log(mask)`) or a hand-written softmax divided by
a zero sum clamped to a tiny number (01 Ex2), and an output that changes between calls
because a layer is created inside the function (01 Ex5), not because of dropout; torch's
own attention run by the answer (`torch_attention_refused`, 01 Ex1; Ex2 and Ex5 refuse it
in `own_parts`); `.T` read on the 4-D heads (01 Ex5). And the in-place edits autograd
refuses in a call whose inputs require grad (`in_place_crash`).

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True =
may attend.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading import fail

_ADD = {"add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_", "__sub__",
        "__rsub__", "__isub__", "baddbmm", "addmm", "addbmm"}  # these three: input + a product
_DIVISOR = {"div": 1, "div_": 1, "true_divide": 1, "__truediv__": 1, "__itruediv__": 1,
            "__rtruediv__": 0, "__rdiv__": 0, "reciprocal": 0}  # the divisor's place
_INIT = ("kaiming_uniform_", "xavier_uniform_", "normal_", "uniform_")  # a new layer's weights

ADDED_INF = ("the gradient of q is NaN for a query with no allowed key: adding log(mask) (or "
             "-inf) to the scores (by + or as baddbmm's input) makes the backward NaN for "
             "an empty row even when zeroed later (the sum passes the NaN of its softmax "
             "back); use scores.masked_fill(~mask, float('-inf')) and zero the empty rows "
             "after the softmax.")
TINY_SUM = ("the backward of a row with no allowed key is NaN (0/0 through the division by "
            "its sum, 0 clamped to a tiny number), though the output is right: divide by "
            "torch.where(z == 0, 1, z), or use scores.masked_fill(~mask, float('-inf'))"
            ".softmax(-1) and zero the empty rows.")
NEW_LAYER = ("a layer created inside the function (torch.nn.Linear(D, D)) has fresh random "
             "weights on every call: use the module's own layers, mha.out_proj (and mha.qkv).")


TORCH_SDPA = ("your function runs torch.nn.functional.scaled_dot_product_attention, torch's "
              "own attention, so it would pass without implementing anything: compute the "
              "weights yourself, softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).")


class _TorchAttention(TorchFunctionMode):
    """Records whether `F.scaled_dot_product_attention` was called, or one of the aten ops
    behind it (`torch.ops.aten._scaled_dot_product_attention_math`)."""

    called = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if "scaled_dot_product" in name:  # aten's ops too
            self.called = name if name.startswith("_") else True
        return func(*args, **(kwargs or {}))


def torch_attention_refused(check: Callable) -> Callable:
    """Decorate a checker whose own code never runs torch's fused attention: the answer
    fails with `TORCH_SDPA` when it does (it is a builtin, which `grading`'s
    `reference_refused` cannot watch), even when a round raised first."""
    @functools.wraps(check)
    def run(fn: Callable, *args, **kwargs) -> None:
        mode = _TorchAttention()
        try:
            with mode:
                check(fn, *args, **kwargs)
        finally:
            if mode.called:
                aten = "" if mode.called is True else f" (here torch.ops.aten.{mode.called})"
                fail(TORCH_SDPA.replace("attention,", f"attention{aten},", 1))
    return run


class _Calls(TorchFunctionMode):
    """Records the names of the torch functions called, whether a sum had a constant
    operand holding -inf (no gradient: a mask made additive), and whether a division's
    divisor held a value below 1e-19 in size (a zero clamped to a tiny number)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.added_inf = self.tiny_divisor = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        self.names.append(name)
        floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if name in _ADD and any(not t.requires_grad and bool(torch.isneginf(t).any())
                                for t in floats):
            self.added_inf = True
        place = _DIVISOR.get(name)
        divisor = args[place] if place is not None and len(args) > place else None
        if (isinstance(divisor, torch.Tensor) and divisor.is_floating_point()
                and bool((divisor.abs() < 1e-19).any())):
            self.tiny_divisor = True
        return func(*args, **(kwargs or {}))


def expect_finite_backward(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           mask: torch.Tensor) -> None:
    """`fn(q, k, v, mask)`, right on a mask with an all-False row: when the gradient of q
    or k is NaN (and v's finite), name an additive -inf or a division by a clamped zero
    sum, seen in the calls of the rerun; otherwise leave it to `expect_backward`."""
    inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    calls = _Calls()
    try:
        with calls:
            out = fn(*inputs, mask.clone())
        out.backward(torch.ones_like(out))
    except Exception:
        return
    grads = [t.grad for t in inputs]
    if any(g is None for g in grads) or grads[2].isnan().any() or not any(
            g.isnan().any() for g in grads[:2]):
        return
    if calls.added_inf:
        fail(ADDED_INF)
    if calls.tiny_divisor:
        fail(TINY_SUM)


def expect_mha_finite_backward(fn: Callable, x: torch.Tensor, mha, mask: torch.Tensor
                               ) -> None:
    """Exercise 5's `expect_finite_backward`: `fn(x, mha, mask)` whose gradient of x is
    NaN, with an additive -inf or a division by a clamped zero sum seen in its calls, is
    named (the parameters' gradients are left alone: `torch.autograd.grad` of x only)."""
    mine, calls = x.detach().clone().requires_grad_(), _Calls()
    try:
        with calls:
            out = fn(mine, mha, mask.clone())
        grad, = torch.autograd.grad(out, mine, torch.ones_like(out))
    except Exception:
        return
    if bool(grad.isnan().any()) and calls.added_inf:
        fail(ADDED_INF.replace("of q", "of x", 1))
    if bool(grad.isnan().any()) and calls.tiny_divisor:
        fail(TINY_SUM)


def expect_no_new_layer(fn: Callable, *args) -> None:
    """Rerun `fn(*args)` (clones of tensors), an answer that changes between calls: fail
    when it initialises a layer's weights (`torch.nn.Linear` created inside)."""
    calls = _Calls()
    try:
        with calls, torch.no_grad():
            fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    except Exception:
        return
    if any(name in _INIT for name in calls.names):
        fail(NEW_LAYER)


def in_place_crash(what: str) -> Callable[[Exception], None]:
    """A `diagnose` for a call whose inputs require grad: the in-place edit of a view of an
    input (`.transpose_`) or of one of several views (`chunk`), and a `.resize_`, which
    autograd refuses there, are named."""
    def diagnose(err: Exception) -> None:
        if "leaf Variable that requires grad is being used in an in-place" in str(err):
            fail(f"{what} works in place on the input (e.g. .transpose_ on a view of it): "
                 "autograd refuses that when the input requires grad; use the "
                 "out-of-place form (.transpose(1, 2)).")
        if "cannot resize variables that require grad" in str(err):
            fail(f"{what} calls .resize_, which autograd refuses on a tensor that requires "
                 "grad, as in a model: use .reshape(...) (or .view), which it follows.")
        if "is the output of a function that returns multiple views" in str(err):
            fail(f"{what} edits in place (q *= ..., /=, +=) a view that chunk, split or "
                 "unbind returned (e.g. q of the chunks of mha.qkv(x)): autograd refuses "
                 "that when they require grad, as in a model; write it out of place: "
                 "q = q * scale.")
    return diagnose


class _ReversedAxes(TorchFunctionMode):
    """Records whether `.T` was read on a tensor of more than two axes (it reverses them all)."""

    seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (getattr(getattr(func, "__self__", None), "__name__", "") == "T" and args
                and isinstance(args[0], torch.Tensor) and args[0].dim() > 2):
            self.seen = True
        return func(*args, **(kwargs or {}))


def name_reversed_axes(fn: Callable, *args) -> None:
    """Rerun `fn(*args)` (clones of tensors), an answer that raised: fail when it read `.T` of
    a tensor of 3 or more axes, e.g. `k.T` of the heads `[B, H, S, D_h]`."""
    mode = _ReversedAxes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation of it: this is the checker's rerun
        try:
            with mode:
                fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
        except Exception:
            pass
    if mode.seen:
        fail("your function reads .T of a tensor of more than 2 axes, which reverses them all "
             "(k [B, H, S, D_h] becomes [D_h, S, H, B]): transpose only the last two, "
             "k.transpose(-2, -1) (or k.mT).")
