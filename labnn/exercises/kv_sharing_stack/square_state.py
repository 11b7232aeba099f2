"""Where notebook 04's `Square` (Exercise 2) keeps x for backward, seen from outside.

The exercise asks for `ctx.save_for_backward(x)`: x itself, per call, with its version
counter, so that autograd refuses a backward after the caller changed x in place. The
other places are named: on the class or in a global (a second forward overwrites it), a
copy (`x.clone()`: twice the memory, and never refused), `x.data` (an alias with its own
version counter) or a plain attribute (`ctx.x = x`: the new x, silently). A backward that
calls autograd for the derivative (`torch.autograd.grad`, `torch.func.vjp`, forward mode's
`torch.func.jvp`) is refused, and so is one whose result cannot be differentiated again.
"""

from __future__ import annotations

import contextlib

import torch

from labnn.exercises.grading import (close, expect_any_device, explain, fail, guarded, running,
                                     shares_memory)
from labnn.exercises.grading.reference_calls import calls_refused
from labnn.exercises.kv_sharing_stack.hidden_work import (DERIVATIVE_CALLS, ONCE_DIFFERENTIABLE,
                                                          graph_cut, once_differentiable)
from labnn.exercises.grading.sizes import randn
from labnn.exercises.kv_sharing_stack.input_rounds import quote
from labnn.exercises.kv_sharing_stack.square_slips import two_d_only


def expect_state_on_ctx(fn, x0: torch.Tensor, g: torch.Tensor) -> None:
    """Two forwards, then the first one's backward: its gradient must be the first x's,
    which a class attribute or a global overwritten by the second forward is not."""
    first = x0.clone().requires_grad_()
    second = randn(*x0.shape, seed=44, dtype=x0.dtype).requires_grad_()
    called = "Square.apply(x1), then Square.apply(x2)"
    with running(called):
        y1, y2 = fn.apply(first), fn.apply(second)
    if shares_memory(y1, y2):
        fail(f"{called} returned the same tensor: forward keeps its output between calls "
             "(on the class, in a global or a cache keyed by the shape), so the first "
             "output now belongs to the second call; return a new tensor each call, x * x.")
    with running(f"{called}, then the backward of the first"):
        (got,) = torch.autograd.grad(y1, first, g)
    if close(got, 2 * x0 * g):
        return
    if close(got, 2 * second.detach() * g):
        fail("Square keeps x outside ctx (on the class, e.g. Square.saved = x, or in a global "
             "dict): a second forward overwrote it, so the first output's backward used the "
             "second x (the check ran two forwards, then the first one's backward). Keep x "
             "on ctx, per call: ctx.save_for_backward(x).")
    fail("two forwards, then the first one's backward, gave a wrong gradient: backward "
         "reads something kept on the class or in a global, which the second forward "
         "changed. Keep x on ctx, per call: ctx.save_for_backward(x).")


def _kept(y: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors `y`'s node holds: saved with save_for_backward, and kept as attributes
    of ctx (`ctx.x = ...`)."""
    try:
        saved = [t for t in y.grad_fn.saved_tensors if isinstance(t, torch.Tensor)]
    except (AttributeError, RuntimeError):
        saved = []
    try:
        attrs = [v for v in vars(y.grad_fn).values() if isinstance(v, torch.Tensor)]
    except TypeError:
        attrs = []
    return saved, attrs


def _copy(t: torch.Tensor, x0: torch.Tensor) -> str | None:
    """How `t` copies x's values as they were at forward: `x.clone()`, `x.double()` (a
    copy in another dtype), `2 * x` (a copy scaled), `x.contiguous()` or `x.reshape(-1)`
    of an `x0` that is not contiguous; None if it is no copy of x."""
    if t.numel() != x0.numel() or not t.is_floating_point():
        return None
    t, x = t.detach().reshape(x0.shape).double(), x0.double()
    c = (t * x).sum() / (x * x).sum()
    if not torch.allclose(t, c * x, rtol=1e-6, atol=1e-6 * x.abs().max().item()):
        return None
    if abs(c.item() - 1) > 1e-6:
        return f"{c.item():g} * x"
    if not x0.is_contiguous():  # the check's x a transpose: contiguous() copies it
        return "x.contiguous() or x.reshape(...): a copy when x is not contiguous, as here"
    return "x.clone()" if t.dtype == x0.dtype else f"x.to({t.dtype})"


def expect_input_saved(fn, x0: torch.Tensor, g: torch.Tensor, want: torch.Tensor) -> None:
    """A caller may change x in place between the forward and the backward: x kept with
    ctx.save_for_backward then makes backward raise (its version counter changed); a
    copy, `x.data` or `ctx.x = x` does not, and each is named. A tensor computed from x
    (y and x's sign) is accepted; a copy of x, scaled or cast (2 * x, x.double()), not."""
    x = x0.clone().requires_grad_()  # clone keeps the strides
    layout = "" if x0.is_contiguous() else ", not contiguous (a transpose: .view fails there)"
    with running(f"Square.apply(x) with x [4, 3]{layout}"):
        y = fn.apply(x)
    saved, attrs = _kept(y)
    _expect_x_alone(saved, attrs, x, x0)
    with torch.no_grad():
        x.mul_(5)  # the caller changes x in place after the forward
    what = ("Square.backward (through torch.autograd.grad) after the caller changed x in "
            "place")
    try:
        with guarded(what):
            (got,) = torch.autograd.grad(y, x, g)
    except RuntimeError as err:
        if any(w in str(err) for w in ("modified by an inplace operation",
                                       "has been modified inplace")):
            return  # x or a view of it saved: autograd noticed the change
        explain(what, err)
        raise
    if any(shares_memory(t, x) for t in attrs):  # first: ctx.x = x beside a saved x too
        fail("Square keeps x on ctx (ctx.x = x) for backward: save it with "
             "ctx.save_for_backward(x) and read ctx.saved_tensors in backward, so that "
             "autograd checks x was not modified before backward: here the caller changed x "
             "in place (x *= 5) after forward, and ctx.x silently gave the gradient at the "
             "new x.")
    if any(shares_memory(t, x) for t in saved):
        fail("Square saves x.data: .data is an alias of x with its own version counter, so "
             "autograd cannot see that the caller changed x in place after forward (the "
             "check did, x *= 5, and backward silently used the new x). Save x itself: "
             "ctx.save_for_backward(x).")
    if got is not None and not close(got, want):
        fail("Square's backward used x as the caller changed it in place after forward (x "
             "*= 5): keep x with ctx.save_for_backward(x), not on ctx, so that autograd "
             "checks it was not modified.")
    copies = [(f"ctx.save_for_backward({_copy(t, x0)})", _copy(t, x0)) for t in saved]
    copies += [(f"ctx.x = {_copy(t, x0)}", _copy(t, x0)) for t in attrs]
    how = next((h for h, c in copies if c), None)
    if how is None:
        return  # something else computed from x (y and x's sign): accepted
    fail(f"Square keeps a copy of x ({how}): a tensor of x's size doubles the memory kept "
         "for backward, and autograd never refuses it, not even after the caller changed x "
         "in place (the check did, x *= 5). Save x itself, ctx.save_for_backward(x), and "
         "compute the rest in backward.")


def _expect_x_alone(saved: list[torch.Tensor], attrs: list[torch.Tensor], x: torch.Tensor,
                    x0: torch.Tensor) -> None:
    """Fail when Square keeps x (saved) and beside it a copy of x (`2 * x`, `x.clone()`):
    backward needs x alone; the copy only doubles the memory kept for backward. (y = x * x
    saved beside x is accepted: an output, which the caller's graph often keeps anyway.)"""
    if not any(shares_memory(t, x) for t in saved):
        return
    how = next((_copy(t, x0) for t in saved + attrs
                if not shares_memory(t, x) and _copy(t, x0)), None)
    if how is not None:
        fail(f"Square keeps {how} beside x, and backward needs x alone (grad_output * 2 * "
             "x): a copy of x doubles the memory kept for backward. Keep x only: "
             "ctx.save_for_backward(x).")


def own_derivative() -> contextlib.AbstractContextManager[None]:
    """Fail, after the block, if the learner's Square called autograd (torch.autograd.grad,
    .backward(), torch.func.vjp) to find the derivative the exercise asks for."""
    return calls_refused(DERIVATIVE_CALLS, lambda name: (
        f"Square calls {name}: autograd finds the derivative for you; the exercise is to "
        "write it: return grad_output * 2 * x."))


def expect_twice_differentiable(fn) -> None:
    """A second derivative through Square (create_graph=True, as gradient penalties and
    Hessian-vector products use): backward's result must depend on x and grad_output as
    autograd sees them, d/dx = 2 * grad_output, d/dgrad_output = 2 * x. An alias of x
    saved instead (`x.detach()`, `x.view_as(x)`, `x[...]`: forward runs without autograd, so
    it is not tied to x) loses the derivative through x, silently once grad_output depends
    on x: refused. So is a backward marked `@once_differentiable`: its error is raised
    only where the engine visits a copy, not by `torch.autograd.grad(..., x)`."""
    if once_differentiable(fn.backward):
        fail(f"Square.backward {ONCE_DIFFERENTIABLE}")
    x = randn(3, 4, seed=150, dtype=torch.float64).requires_grad_()
    g = randn(3, 4, seed=151, dtype=torch.float64).requires_grad_()
    h = randn(3, 4, seed=152, dtype=torch.float64)
    with running("torch.autograd.grad(Square.apply(x), x, grad_output, create_graph=True), "
                 "then the gradient of that gradient (a second derivative)"):
        y = fn.apply(x)
        saved = [t for t in getattr(y.grad_fn, "saved_tensors", ())
                 if isinstance(t, torch.Tensor)]  # save_for_backward(x, None): allowed
        tied = any(t is x for t in saved)
        (gx,) = torch.autograd.grad(y, x, g, create_graph=True)
        got = (torch.autograd.grad(gx, (x, g), h, allow_unused=True) if gx.requires_grad
               else (None, None))
    if not tied and any(shares_memory(t, x) for t in saved):
        fail("Square saves an alias of x made in forward (x.detach(), x.view_as(x), x[...]), "
             "not x itself: forward runs without autograd, so the alias is not tied to x, "
             "and a second derivative through x is lost (silently wrong once grad_output "
             "depends on x). Save x itself: ctx.save_for_backward(x).")
    want = (2 * g.detach() * h, 2 * x.detach() * h)
    lost = [name for name, mine, ref in zip(("x", "grad_output"), got, want)
            if (mine is None or not close(mine, ref)) and (tied or name != "x")]
    if lost:
        fail(f"Square.backward's result cannot be differentiated again through "
             f"{' and '.join(lost)} (a second derivative, create_graph=True, gets none): "
             f"{graph_cut(fn.backward)} in backward cuts the graph. Compute grad_output * 2 * "
             "x from them as they are: autograd differentiates backward's own operations.")


def expect_any_shape(fn) -> None:
    """Square on a 3-D and a 1-D x, forward and backward: x * x holds for any shape, on
    another device too (a branch for one shape may make its tensors on the CPU)."""
    for shape in ((2, 3, 2), (5,)):
        x = randn(*shape, seed=153, dtype=torch.float64).requires_grad_()
        g = randn(*shape, seed=154, dtype=torch.float64)
        what = f"Square.apply(x) and its gradient with x of shape {list(shape)}"
        try:
            y = fn.apply(x)
            got = (y.detach(), torch.autograd.grad(y, x, g)[0])
        except Exception as err:  # written for a 2-D x only (an einsum "ij,ij->ij")
            named = two_d_only(err)
            if named:
                fail(f"{what} raised {type(err).__name__} ({quote(err, 60)}): {named}. Square "
                     "is for x of any shape: x * x, grad_output * 2 * x.")
            fail(f"{what} raised {type(err).__name__} ({quote(err, 90)}): Square must "
                 "work for x of any shape, a layer's activations: x * x and grad_output * 2 "
                 "* x, elementwise, not written for 2-D.")
        if not (close(got[0], x.detach() ** 2) and close(got[1], 2 * x.detach() * g)):
            fail(f"{what} is wrong (right for the 2-D x): Square must work for x of any "
                 "shape: x * x and grad_output * 2 * x, elementwise.")
        expect_any_device(lambda x, g: torch.autograd.grad(fn.apply(x), x, g)[0], what, x, g)
