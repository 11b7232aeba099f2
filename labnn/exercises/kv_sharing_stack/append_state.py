"""Notebook 04's `Append` (Exercise 4) used as autograd uses it, beyond the one backward of
the recurrence whose gradients `stack_append` compares: the gradient reaching `top`
directly, the caller's `grad` left as it was, and a second backward through the same graph;
where the recurrence's gradient is wrong, which of backward's two gradients is.

An accumulator kept outside autograd (on ctx, the module, or a global keyed by the buffer,
the widely copied version of the trick) gives the right gradients in one backward while
returning nothing for `top`, and gives them again, added twice, in a second one; a backward
that writes into the incoming `grad` changes a tensor its caller holds.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, expect_close, fail, running
from labnn.exercises.kv_sharing_stack.stack_append_slips import (B1, F1, N1,
                                                                  one_append_inputs)
from labnn.exercises.grading.sizes import randn
from labnn.exercises.kv_sharing_stack.hidden_work import (ONCE_DIFFERENTIABLE, graph_cut,
                                                          once_differentiable)


GRAD_WRITTEN = ("Append.backward changed the incoming `grad` in place (e.g. grad[:, n] = 0): "
                "it is the caller's, who may use it again (the check's own grad_outputs "
                "changed). Slice it without writing: return grad[:, :n], grad[:, n], None.")


def _grad_written(err: Exception) -> None:
    """Name a write into `grad` that torch refused: with create_graph=True the incoming
    grad requires grad, and an in-place operation on a view of it raises."""
    if "leaf Variable that requires grad" in str(err) and "in-place" in str(err):
        fail(GRAD_WRITTEN)


def _one_append(fn):
    """One direct Append with `top` a leaf that requires grad: its output must have a
    `grad_fn`, and backward must leave the caller's `grad` unchanged. Returns the gradients
    of `top` and `value` and the incoming grad as it was."""
    buffer, _ = one_append_inputs(seed=30)
    top = buffer[:, :N1].clone().requires_grad_()
    value = randn(B1, F1, seed=31, dtype=buffer.dtype).requires_grad_()
    g = randn(B1, N1 + 1, F1, seed=32, dtype=buffer.dtype)
    kept = g.clone()
    with running("Append.apply(top, value, buffer)"):
        out = fn.apply(top, value, buffer)
    if out.grad_fn is None:
        fail("Append.apply(top, value, buffer) returns a tensor without a grad_fn "
             "(ctx.mark_non_differentiable?): no gradient reaches `top` and `value` through "
             "it. Mark nothing: autograd calls your backward for the output.")
    with running("Append.apply(top, value, buffer), then torch.autograd.grad to top and "
                 "value"):
        got = torch.autograd.grad(out, (top, value), g, allow_unused=True)
    if not torch.equal(g, kept):
        fail(GRAD_WRITTEN)
    return *got, kept


def expect_grad_left_alone(fn) -> None:
    """`_one_append`'s two checks alone: run before a wrong gradient of the recurrence is
    diagnosed, whose values these slips would otherwise be blamed on."""
    _one_append(fn)


def expect_split_gradients(fn) -> None:
    """`_one_append`, then say which of backward's two gradients is wrong, `top`'s
    (grad[:, :n]) or `value`'s (grad[:, n]), and how (minus, a factor, other places): run
    where the recurrence's gradient differs and no known slip was named."""
    top, value, kept = _one_append(fn)
    if top is not None and close(top, kept[:, :N1] + kept[:, N1:N1 + 1]):
        fail("Append.backward's gradient for `top` adds value's slot, grad[:, n], to each of "
             "top's n slots (a slice of size 1 broadcast): that slot belongs to `value` "
             "alone. Return grad[:, :n] for top and grad[:, n] for value.")
    for name, got, want, dims in (("top", top, kept[:, :N1], "b n f"),
                                  ("value", value, kept[:, N1], "b f")):
        if got is not None and got.shape == want.shape:
            where = "grad[:, :n]" if name == "top" else "grad[:, n]"
            expect_close(got, want, f"Append.backward's gradient for `{name}` "
                         f"(expected {where})", dims=dims)


def expect_top_gradient(fn) -> None:
    """`_one_append`, then backward must hand `top` its slots, grad[:, :n]."""
    got, _, kept = _one_append(fn)
    if got is None or not close(got, kept[:, :N1]):
        said = ("None" if got is None else "zeros" if not got.detach().any()
                else "a wrong gradient")
        fail(f"Append.backward returns {said} for `top`, yet the recurrence's gradients came "
             "out right: they are accumulated outside autograd (on ctx, the module or a "
             "global), which breaks when a graph is used twice. Return grad[:, :n] for "
             "`top`: autograd adds up what reaches each prefix.")


def expect_second_backward(fn, recurrence: Callable, x: torch.Tensor, g: torch.Tensor,
                           ref: torch.Tensor) -> None:
    """Two backwards through one graph (retain_graph=True) must give the same gradient, the
    reference `ref`: state that the first one filled shows in the second."""
    with running("torch.autograd.grad twice through one recurrence using Append "
                 "(retain_graph=True)"):
        out = recurrence(x, fn.apply)
        first = torch.autograd.grad(out, x, g, retain_graph=True)[0]
        second = torch.autograd.grad(out, x, g)[0]
    if not (close(first, ref) and close(second, ref)):
        fail("a second backward through the same graph (retain_graph=True) gave another "
             "gradient than the first: Append.backward keeps gradient state outside "
             "autograd (on ctx, the module or a global) that the first backward filled. "
             "Return grad[:, :n] and grad[:, n], and keep nothing between calls.")


def expect_twice_differentiable(fn) -> None:
    """A second derivative through one Append (create_graph=True): backward's gradients for
    `top` and `value` must stay functions of grad, which `.detach()` or `torch.no_grad()`
    in backward cut (a view made under `no_grad` still requires grad, with no graph behind
    it), and `@once_differentiable` too."""
    if once_differentiable(fn.backward):
        fail(f"Append.backward {ONCE_DIFFERENTIABLE}")
    buffer, _ = one_append_inputs(seed=40)
    top = buffer[:, :N1].clone().requires_grad_()
    value = randn(B1, F1, seed=41, dtype=buffer.dtype).requires_grad_()
    g = randn(B1, N1 + 1, F1, seed=42, dtype=buffer.dtype).requires_grad_()
    with running("torch.autograd.grad through Append.apply(top, value, buffer) with "
                 "create_graph=True (for a second derivative)", diagnose=_grad_written):
        grads = torch.autograd.grad(fn.apply(top, value, buffer), (top, value), g,
                                    create_graph=True, allow_unused=True)
    cut = [name for name, t in zip(("top", "value"), grads)
           if t is not None and not _depends_on(t, g)]
    if cut:
        fail(f"Append.backward's gradient for `{cut[0]}` cannot be differentiated again: "
             f"{graph_cut(fn.backward)} in backward cuts it from grad, so a second "
             "derivative through the stack (create_graph=True) loses it. Return the slices "
             "as they are: grad[:, :n], grad[:, n], None.")


def _depends_on(t: torch.Tensor, g: torch.Tensor) -> bool:
    """Whether autograd can differentiate `t` by `g`."""
    return t.grad_fn is not None and torch.autograd.grad(  # a view made under no_grad
        t, g, torch.ones_like(t), retain_graph=True, allow_unused=True)[0] is not None
