"""Trial 53h: a second blind learner trial of notebook 04's exercises, after 53b's fixes.

A wrong answer that passed: `Square` saving an alias of x made in forward (`x.detach()`,
`x.view_as(x)`, `x[...]`, `x.reshape(x.shape)`) instead of x itself. Forward runs without
autograd, so the alias is not tied to x, and a second derivative through x is lost: silently
wrong once grad_output depends on x (2/3 of d2L/dx2 in the trial's network). Trials 48b and
49b had the views down as right, before the second derivative was checked. Misleading: an
in-place write into `grad` in Append's backward met the second-derivative round first and
came out as torch's raw error.
"""
import torch
from checker_helpers import autograd_function as _function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import check_append, check_square

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
ALIAS = r"not x itself.*second derivative"


def _saving(how):
    def forward(ctx, x):
        ctx.save_for_backward(how(x))
        return x * x
    return forward


def _backward(ctx, g):
    (x,) = ctx.saved_tensors
    return 2 * x * g


for tag, how in (("detach", lambda x: x.detach()), ("view_as", lambda x: x.view_as(x)),
                 ("ellipsis", lambda x: x[...]), ("slice", lambda x: x[:]),
                 ("reshape", lambda x: x.reshape(x.shape)),
                 ("as_strided", lambda x: x.as_strided(x.shape, x.stride()))):
    case(f"sq_saves_{tag}", check_square, _function("Square", _saving(how), _backward), ALIAS)
RIGHT["sq_saves_x"] = (check_square, _function("Square", _saving(lambda x: x), _backward))


def _push(ctx, top, value, buffer):
    ctx.n = top.size(1)
    buffer.data[:, ctx.n] = value
    return buffer.data[:, :ctx.n + 1]


def _grad_scaled_in_place(ctx, g):
    g[:, ctx.n] *= 1
    return g[:, :ctx.n], g[:, ctx.n], None


def _grad_mul_(ctx, g):
    g.mul_(1.0)
    return g[:, :ctx.n], g[:, ctx.n], None


case("ap_grad_times_1_in_place", check_append,
     _function("Append", _push, _grad_scaled_in_place), r"changed the incoming `grad` in place")
case("ap_grad_mul_", check_append, _function("Append", _push, _grad_mul_),
     r"changed the incoming `grad` in place")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
