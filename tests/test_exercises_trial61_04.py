"""Trial 61, notebook 04 (a learner's trial, 256 answers): a backward marked
`@once_differentiable` passed Exercises 2 and 4, and Exercise 4's slices of grad taken under
`torch.no_grad()` passed too, though each notebook text says the check takes a second
derivative. Each gives a second derivative silently wrong where `torch.autograd.grad` asks
for it by its inputs: `once_differentiable` hangs its error on a copy the engine never
visits, and a view made under `no_grad` requires grad with no graph behind it (d^2/dx^2 of
sum(x^3) came out as 2x, not 6x; the notebook's recurrence 5661 against 25826). Exercise 4's
backward without `return` was told torch's "expected 3, got 1"; Exercise 3's buffer of a
fixed size, cloned on return, passed.
"""
import torch
from checker_helpers import trial_case, trial_tests
from torch.autograd.function import once_differentiable

from labnn.exercises.kv_sharing_stack import check_append, check_square, check_value_gradients

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


class SquareOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


def _append_forward(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def _append(name, backward):
    return type(name, (torch.autograd.Function,), {
        "forward": staticmethod(_append_forward), "backward": staticmethod(backward)})


@once_differentiable
def _once(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


def _under_no_grad(ctx, grad):
    with torch.no_grad():
        return grad[:, : ctx.n], grad[:, ctx.n], None


def _no_return(ctx, grad):
    grad[:, : ctx.n], grad[:, ctx.n], None  # noqa: B018 (the slip)


def _fixed_scratch(read_grads):
    total = read_grads[0].new_zeros(1024, read_grads[0].size(-1))
    for g in read_grads:
        total[: g.size(0)] += g
    return total[: len(read_grads)].clone()


ONCE = r"marked @once_differentiable.*silently.*torch\.autograd\.grad.*Remove the decorator"
case("square_once_differentiable", check_square, SquareOnce, "Square.backward is " + ONCE)
case("append_once_differentiable", check_append, _append("Append", _once),
     "Append.backward is " + ONCE)
case("append_slices_under_no_grad", check_append, _append("Append", _under_no_grad),
     r"gradient for `top` cannot be differentiated again: torch.no_grad\(\) in backward")
case("append_no_return", check_append, _append("Append", _no_return),
     r"Append.backward returned None \(a missing return\?\)")
case("value_gradients_fixed_scratch", check_value_gradients, _fixed_scratch,
     r"allocates a \[1024, 3\] tensor for T = \d+ steps.*a buffer of a fixed size")
RIGHT["append"] = (check_append, _append("Append", lambda ctx, grad: (
    grad[:, : ctx.n], grad[:, ctx.n], None)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def test_once_differentiable_is_silently_wrong_by_inputs():
    """Why it is refused: with grad_output depending on x, d^2/dx^2 sum(x^3) = 6x comes out
    as 2x, with no error (the reference, autograd's own, gives 6x)."""
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad((SquareOnce.apply(x) * x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(gg, 2 * x.detach())  # not 6 * x
