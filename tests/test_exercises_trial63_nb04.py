"""Trial 63, notebook 04 (a learner's trial): an `Append` that adds the value into slot n
(`buffer[:, n] += value`, `.add_`) instead of copying it was right on the check's zeroed
buffer and then blamed on state kept between calls; a `Square` whose backward is a finite
difference was blamed on a dtype (float32) or a float16 step; `ctx.save_for_backward(x,
None)`, which torch allows, crashed the check (a raw AttributeError); `torch.tensordot`
with its axes paired crosswise (`dims=([1, 0], [0, 1])`) was told about `dims=n`; a
LayerNorm written out over the batch axis (`m.mean(0)`) got only "k differs".
"""
import torch
from checker_helpers import autograd_function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# --- Append (Exercise 4): the value added into its slot, not copied ---
def _append_forward(write):
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        write(buffer, n, value)
        ctx.n = n
        return buffer.data[:, : n + 1]
    return forward


def _append_backward(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


def _add_(buffer, n, value):
    buffer[:, n].add_(value)


def _iadd_data(buffer, n, value):
    buffer.data[:, n] += value


def _plus_slot(buffer, n, value):
    buffer[:, n] = buffer[:, n] + value


def _copy_(buffer, n, value):
    buffer[:, n].copy_(value)


ADDED = r"adds the value into slot n.*only while the slot holds zeros.*copy_\(value\)"
for tag, write in (("add_", _add_), ("data_iadd", _iadd_data), ("plus_slot", _plus_slot)):
    case(f"append_{tag}_into_slot", check_append,
         autograd_function("Append", _append_forward(write), _append_backward), ADDED)
RIGHT["append_copy_"] = (check_append, autograd_function(
    "Append", _append_forward(_copy_), _append_backward))


# --- Square (Exercise 2) ---
def _square_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def _forward_difference(ctx, grad_output):
    (x,) = ctx.saved_tensors
    h = 1e-3
    return grad_output * ((x + h) * (x + h) - x * x) / h


def _central_difference(ctx, grad_output):
    (x,) = ctx.saved_tensors
    h = 1e-6
    return grad_output * ((x + h) ** 2 - (x - h) ** 2) / (2 * h)


case("square_forward_difference", check_square,
     autograd_function("Square", _square_forward, _forward_difference),
     r"h = 0\.001: a finite difference.*grad_output \* 2 \* x")
case("square_central_difference_float32", check_square,
     autograd_function("Square", _square_forward, _central_difference),
     r"float32.*far more than float32 rounding.*finite difference")


def _saves_x_and_none(ctx, x):
    ctx.save_for_backward(x, None)  # torch allows None among the saved tensors
    return x * x


def _backward_x_and_none(ctx, grad_output):
    x, _ = ctx.saved_tensors
    return grad_output * 2 * x


RIGHT["square_saves_x_and_none"] = (check_square, autograd_function(
    "Square", _saves_x_and_none, _backward_x_and_none))


# --- weight gradient (Exercise 5): tensordot's axes paired crosswise ---
case("weight_gradient_tensordot_crosswise", check_weight_gradient,
     lambda xs, gs: torch.tensordot(gs, xs, dims=([1, 0], [0, 1])),
     r"paired axis 1 of its first tensor \(the batch\) with axis 0 of the second \(the "
     r"steps\).*dims=\(\[0, 1\], \[0, 1\]\)")


# --- shared keys and values (Exercise 1): a LayerNorm written out over the batch axis ---
def _shared_kv_normed_over(dim, unbiased):
    def shared_kv(m, norm, kv, n_heads):
        mean, var = m.mean(dim, keepdim=True), m.var(dim, keepdim=True, unbiased=unbiased)
        h = (m - mean) / (var + norm.eps).sqrt() * norm.weight + norm.bias
        out = kv(h).view(m.size(0), 2, n_heads, -1)
        return out[:, 0], out[:, 1]
    return shared_kv


OVER_BATCH = r"normalized over the batch \(dim 0\).*each memory vector over its D features"
case("shared_kv_normed_over_batch", check_shared_kv, _shared_kv_normed_over(0, False),
     OVER_BATCH)
case("shared_kv_normed_over_batch_unbiased", check_shared_kv, _shared_kv_normed_over(0, True),
     OVER_BATCH)
RIGHT["shared_kv_normed_by_hand"] = (check_shared_kv, _shared_kv_normed_over(-1, False))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
