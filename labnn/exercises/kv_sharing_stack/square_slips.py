"""Slips of notebook 04's Exercise 2, `Square`, named from the error its backward raises
(through `torch.autograd.grad`, x `[4, 3]`): a matrix product for the elementwise chain
rule, a product with `torch.diag(2 * x)`, a reduced gradient, nothing saved,
`ctx.saved_tensors` called, a `.grad` read, no `return`, too many gradients, a list; and,
from its values, |x|, sign(x), a clamp at 0 or a reduced x where x belongs, a division by x
(NaN at x = 0) and a finite difference (2x + h); from the error its forward raises, x
squared in place; and the Jacobian as a matrix (`grad_output @ torch.diag_embed(2 * x)`,
right for a 1-D x only)."""

from __future__ import annotations

import inspect
import re

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.kv_sharing_stack.custom_backward_slips import (ctx_attribute_unset,
                                                                   wrong_gradient_count)


def _backward_source(fn) -> str:
    """`fn.backward`'s source, or "" where Python cannot find it."""
    try:
        return inspect.getsource(fn.backward)
    except (OSError, TypeError):
        return ""


def _reads_grad(fn) -> bool:
    """Whether `fn.backward`'s source reads a tensor's `.grad` (not `grad_output`)."""
    return bool(re.search(r"\.grad\b(?!_)", _backward_source(fn)))


def absolute_x_named(fn) -> str:
    """What to say of a backward whose gradient is 2|x|·grad_output: x rebuilt from
    the saved output as sqrt(y), or (without a sqrt in its source) |x| taken; both, where
    Python cannot read the source (a class made with exec)."""
    source = _backward_source(fn)
    if not source:
        return ("backward multiplies by |x| where x belongs, either x rebuilt from the "
                "saved output as sqrt(y), or an .abs(): the sign of x is lost, so the "
                "gradient has the wrong sign wherever x < 0. Save the input itself, "
                "ctx.save_for_backward(x), and return grad_output * 2 * x.")
    if "sqrt" in source:
        return ("backward rebuilds x from the saved output as sqrt(y), which is |x|: the "
                "sign of x is lost, so the gradient has the wrong sign wherever x < 0. "
                "Save the input itself, ctx.save_for_backward(x), and return "
                "grad_output * 2 * x.")
    return ("backward multiplies by |x| (.abs()) where x belongs: the sign of x is "
            "lost, so the gradient has the wrong sign wherever x < 0; d(x²)/dx = 2x: "
            "return grad_output * 2 * x.")


def divided_by_x(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor) -> None:
    """Fail when the gradient is NaN or inf exactly where x = 0 and right elsewhere: a
    division by x (e.g. 2 * y / x, with the output y = x² saved), 0/0 there."""
    if got.shape != want.shape:
        return
    bad = ~torch.isfinite(got)
    if bad.any() and bool((x[bad] == 0).all()) and close(got[~bad], want[~bad]):
        fail("backward's gradient is NaN (or inf) where x = 0, right elsewhere: it "
             "divides by x (e.g. 2 * y / x, with the output y = x² saved), 0/0 at x = 0, "
             "a common value (after a ReLU, in padding). Save x itself and return "
             "grad_output * 2 * x: no division.")


def finite_difference(got: torch.Tensor, want: torch.Tensor, g: torch.Tensor) -> None:
    """A backward that is a forward difference, ((x + h)² - x²) / h = 2x + h: its gradient
    is off by h * grad_output, for one constant h."""
    if got.shape != g.shape or close(got, want):
        return
    h = ((got - want) * g).sum().item() / (g * g).sum().item()
    if h != 0 and close(got, want + h * g):
        fail(f"backward's gradient is grad_output * (2x + h), h = {h:.3g}: a finite "
             "difference ((x + h)² - x²) / h, off by h (and in float32 it loses most digits "
             "to cancellation); write the derivative exactly: return grad_output * 2 * x.")


def jacobian_as_matrix(fn, got: torch.Tensor, want: torch.Tensor, x: torch.Tensor,
                       g: torch.Tensor) -> None:
    """`grad_output @ torch.diag_embed(2 * x)`, the Jacobian as a matrix: right for a 1-D x;
    on x [R, C] matmul multiplies grad_output by every row's [C, C] diagonal, [R, R, C], and
    autograd sums that back to x's shape, grad_output * 2 * x.sum(0). Named from those
    values, or from a `diag_embed` in backward's source where the gradient is wrong."""
    if got.shape != want.shape or close(got, want):
        return
    summed = close(got, g * 2 * x.sum(0))
    matrix = "diag_embed" in _backward_source(fn)
    fix = "the chain rule here is elementwise: return grad_output * 2 * x."
    if summed and matrix:
        fail("backward's gradient is grad_output * 2 * x.sum(0), x summed over its rows: "
             "grad_output @ torch.diag_embed(2 * x) multiplies each row of grad_output by "
             "every row's diagonal matrix, [4, 4, 3], which autograd sums back to x's "
             f"shape. It is right for a 1-D x only; {fix}")
    if summed:
        fail("backward's gradient is grad_output * 2 * x.sum(0), x summed over its rows (a "
             ".sum(0), or a product with one diagonal matrix per row, torch.diag_embed, "
             f"that autograd summed back to x's shape?): {fix}")
    if matrix:
        fail("backward multiplies by torch.diag_embed(...), the Jacobian as one diagonal "
             "matrix per row of x, and its gradient is wrong on a 2-D x: matmul broadcasts "
             f"it over the rows of grad_output. {fix}")


def gradient_slips(fn, got: torch.Tensor, want: torch.Tensor, x: torch.Tensor,
                   g: torch.Tensor) -> None:
    """The slips named from the values of Square's gradient (x [4, 3], `g` grad_output):
    a division by x, x reduced (`x.mean()`, `x.sum()`), sign(x) or a clamp at 0 where x
    belongs, the chain rule inverted (grad_output / 2x), x or grad_output moved (flipped,
    rolled), a finite difference, the Jacobian as a matrix."""
    divided_by_x(got, want, x)
    fix = "d(x²)/dx = 2x, elementwise: return grad_output * 2 * x."
    for wrong, said in (*[(g * 2 * getattr(x, r)(), f"backward reduces x (x.{r}()), one "
                           "number for every entry, where each entry has its own: " + fix)
                          for r in ("mean", "sum")],
                        (g * 2 * x.sign(), "backward's local derivative is 2·sign(x), the "
                         "slope of 2|x|, not of x²: " + fix),
                        (g * 2 * x.clamp(min=0), "backward zeroes the gradient where x < 0 "
                         "(x.clamp(min=0) or a relu where x belongs): x² slopes down there, "
                         "2x < 0: " + fix)):
        if close(got, wrong) and not close(got, want):
            fail(said)
    if close(got, g / (2 * x)):
        fail("backward divides grad_output by the local derivative 2x (inf where x = 0): "
             "the chain rule multiplies them, return grad_output * 2 * x.")
    for moved, other in (("x", "grad_output"), ("grad_output", "x")):
        if any(close(got, m * 2 * x if other == "grad_output" else g * 2 * m)
               for m in _moves(g if other == "grad_output" else x)):
            fail(f"backward pairs each entry of {moved} with another entry of {other} ("
                 f"{other} flipped, rolled or transposed?): the gradient of x[i, j] is "
                 "grad_output[i, j] * 2 * x[i, j], same place: return grad_output * 2 * x.")
    finite_difference(got, want, g)
    jacobian_as_matrix(fn, got, want, x, g)


def _moves(t: torch.Tensor):
    """`t` flipped along an axis, rolled by one along it, or transposed (if square)."""
    for d in range(t.dim()):
        yield from (t.flip(d), t.roll(1, d), t.roll(-1, d))
    if t.dim() == 2 and t.size(0) == t.size(1):
        yield t.T


def square_backward_error(err: Exception, fn, y: torch.Tensor) -> None:
    """Name the slip behind `err`, raised by `fn.backward` for `y = fn.apply(x)`."""
    ctx_attribute_unset(err, "Square")
    shape = re.search(r"invalid gradient at index 0 - got (\[.*?\]) but", str(err))
    matmul = "mat1 and mat2 shapes cannot be multiplied" in str(err)
    if isinstance(err, RuntimeError) and (matmul or shape and shape.group(1) in (
            "[3, 3]", "[4, 4]")):
        fail("backward uses a matrix product (@, mm, matmul): the chain rule here is "
             "elementwise, each x[i, j] gets its own grad_output[i, j] * 2 * x[i, j]: "
             "return grad_output * 2 * x, with *, not @. (torch said: "
             f"{str(err).strip().splitlines()[0]})")
    source = _backward_source(fn) if shape else ""
    if isinstance(err, RuntimeError) and shape and re.search(r"\bdiag\(", source):
        fail(f"backward returns a gradient of shape {shape.group(1)}, x is [4, 3]: a "
             "product with torch.diag(2 * x) is right for one 1-D x only (on a 2-D x, "
             "diag takes its diagonal): the chain rule is elementwise, return "
             "grad_output * 2 * x, with *, no diagonal matrix.")
    if isinstance(err, RuntimeError) and shape:
        reduced = (" (no .sum() or .mean())" if not source
                   or re.search(r"\b(sum|mean)\(", source) else "")
        fail(f"backward returns a gradient of shape {shape.group(1)}, x is [4, 3]: "
             f"one gradient per entry of x, grad_output * 2 * x{reduced}.")
    if isinstance(err, RuntimeError) and "appears to not have been used" in str(err):
        fail("Square.backward returned None (a missing return?): it must return one "
             "gradient per input of forward, here the one for x: return "
             "grad_output * 2 * x.")
    if isinstance(err, (IndexError, ValueError)) and y.grad_fn is not None and not len(
            getattr(y.grad_fn, "saved_tensors", (0,))):
        fail("ctx.saved_tensors is empty: call ctx.save_for_backward(x) in forward, "
             f"so that backward can read x back (torch said: {err}).")
    saved = len(getattr(y.grad_fn, "saved_tensors", ())) if y.grad_fn is not None else 0
    if isinstance(err, ValueError) and "too many values to unpack" in str(err) and saved > 1:
        fail(f"ctx.saved_tensors holds all {saved} tensors given to ctx.save_for_backward, "
             "and (x,) = ctx.saved_tensors unpacks one: save x alone, "
             "ctx.save_for_backward(x); backward needs nothing else (grad_output * 2 * x), "
             f"and each extra tensor saved is memory kept until backward. (Python said: {err})")
    if isinstance(err, TypeError) and "'tuple' object is not callable" in str(err):
        fail("ctx.saved_tensors is an attribute, the tuple of saved tensors, not a method: "
             "(x,) = ctx.saved_tensors, without ().")
    if isinstance(err, TypeError) and "'NoneType'" in str(err) and _reads_grad(fn):
        fail("backward reads a .grad (e.g. x.grad), which is None here: autograd fills "
             ".grad only after backward. The gradient that flows in is the argument "
             f"grad_output: return grad_output * 2 * x. (torch said: {err})")
    if isinstance(err, RuntimeError) and wrong_gradient_count(err):
        fail(f"backward must return exactly one gradient per input of forward "
             f"(here one, for x): {err}")
    if isinstance(err, RuntimeError) and "(got list)" in str(err):
        fail("Square.backward returned a list: autograd takes one tensor per input of "
             "forward, here a single tensor (or a tuple): return grad_output * 2 * x.")


def forward_in_place(err: Exception, fn) -> None:
    """`ctx.mark_dirty(x)` with `x.square_()` (or `x.mul_(x)`, `x **= 2`): autograd refuses
    to change a leaf that requires grad, the check's x, in place."""
    if not (isinstance(err, RuntimeError) and "leaf Variable that requires grad" in str(err)):
        return
    try:
        found = re.search(r"\w+\.\w+_\([^)]*\)", inspect.getsource(fn.forward))
    except (OSError, TypeError):
        found = None
    how = f"{found[0]}, " if found else ""
    fail(f"Square.forward changes x in place ({how}with ctx.mark_dirty(x)): x is the "
         "caller's, here a leaf that requires grad, which autograd refuses to change (and "
         "backward needs x as it was); return a new tensor, x * x.")


# torch's words for an operation that needs a 2-D (or 3-D) tensor, and what a learner wrote
_TWO_D = (
    ("t() expects a tensor with <= 2", ".t() transposes at most 2-D: no transpose, Square is "
                                       "elementwise"),
    ("tensor.mT is only supported on", ".mT needs 2 or more dimensions: no transpose, Square "
                                       "is elementwise"),
    ("must be a matrix", "torch.mm (.mm) multiplies 2-D matrices only: multiply elementwise, "
                         "*"),
    ("must be a 3D tensor", "torch.bmm takes 3-D tensors only: multiply elementwise, *"),
    ("einsum(): the number of subscripts", "an einsum with one letter per axis ('ij') fixes "
                                           "the number of axes: '...,...->...' or *"),
    ("too many indices for tensor", "x[:, :] indexes two axes: use x itself"),
    ("Dimension out of range", "a dim numbered for a 2-D x (transpose(0, 1), size(1)) is "
                               "out of range here: use no dim, Square is elementwise"),
    ("invalid gradient at index 0", "the gradient is put back in a 2-D shape: keep x's own "
                                    "shape (no view; view_as(x))"),
)


def two_d_only(err: Exception) -> str:
    """What in a Square written for 2-D x raised `err` on a 1-D or 3-D x ("" if unknown)."""
    return next((said for words, said in _TWO_D if words in str(err)), "")
