"""Trial 67, notebook 04 (kv_sharing_stack): wrong answers the checks refused with the
learner's own error or a generic "differs". A backward that reads an attribute forward never
set on ctx (Append's ctx.n, Square's ctx.x: forward saved nothing there) crashed with
AttributeError: 'AppendBackward' object has no attribute 'n'; it is named. Square's backward
pairing x with grad_output flipped or rolled (g.flip(0) * 2 * x), or the reverse, was told only
that the gradient differed; it is named. An Append whose
backward hands `top` or `value` a wrong slice of grad (negated, doubled, divided by n + 1,
its batch or steps reversed, the value's slot added to top's) was told only that the
recurrence's gradient differed; the check now calls backward once directly and says which of
the two gradients is wrong, and how it relates to grad[:, :n] or grad[:, n]. A weight
gradient with a relu, tanh or abs on xs or gs (G.T @ X.relu()), or with the bias's gradient
added, got "differs", and so did keys or values passed through a relu, tanh or softmax;
each is named.
"""
import torch

from checker_helpers import autograd_function, square_with, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _forward(ctx, top, value, buffer):
    n = ctx.n = top.size(1)
    buffer.data[:, n] = value
    return buffer.data[:, :n + 1]


def _append(backward, forward=_forward):
    return autograd_function("Append", forward, backward)


def _forward_without_n(ctx, top, value, buffer):
    n = top.size(1)
    buffer.data[:, n] = value
    return buffer.data[:, :n + 1]


UNSET = r"reads ctx\.{}.*forward never set"
case("append_ctx_n_never_set", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n], None), _forward_without_n),
     UNSET.format("n"))
case("append_ctx_attribute_misspelt", check_append,
     _append(lambda ctx, g: (g[:, :ctx.m], g[:, ctx.m], None)), UNSET.format("m"))


def _square_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


case("square_ctx_x_never_set", check_square, autograd_function(
    "Square", _square_forward, lambda ctx, g: g * 2 * ctx.x), UNSET.format("x") + ".*saved")
case("square_saved_tensor_misspelt", check_square, autograd_function(
    "Square", _square_forward, lambda ctx, g: g * 2 * ctx.saved_tensor[0]),
     r"ctx\.saved_tensor\b.*ctx\.saved_tensors")

MOVED = r"pairs each entry of {} with another entry of {}"
case("square_grad_output_flipped", check_square, square_with(lambda x, g: g.flip(0) * 2 * x),
     MOVED.format("x", "grad_output"))
case("square_grad_output_rolled", check_square,
     square_with(lambda x, g: g.roll(1, -1) * 2 * x), MOVED.format("x", "grad_output"))
case("square_x_flipped", check_square, square_with(lambda x, g: g * 2 * x.flip(-1)),
     MOVED.format("grad_output", "x"))
RIGHT["square_both_transposed_back"] = (check_square, square_with(
    lambda x, g: (g.mT * 2 * x.mT).mT if x.dim() > 1 else g * 2 * x))

TOP, VALUE = r"gradient for `top`.*grad\[:, :n\]", r"gradient for `value`.*grad\[:, n\]"
case("append_top_gradient_negated", check_append,
     _append(lambda ctx, g: (-g[:, :ctx.n], g[:, ctx.n], None)), TOP + r".*minus")
case("append_value_gradient_negated", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], -g[:, ctx.n], None)), VALUE + r".*minus")
case("append_top_gradient_doubled", check_append,
     _append(lambda ctx, g: (2 * g[:, :ctx.n], g[:, ctx.n], None)), TOP + r".*times c = 2")
case("append_top_gradient_batch_reversed", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n].flip(0), g[:, ctx.n], None)), TOP)
case("append_top_gradient_steps_reversed", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n].flip(1), g[:, ctx.n], None)), TOP)
case("append_value_gradient_batch_reversed", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n].flip(0), None)), VALUE)
case("append_value_gradient_batch_mean", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n].mean(0).expand_as(g[:, ctx.n]), None)),
     VALUE)
case("append_value_slot_added_to_top", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n] + g[:, ctx.n:ctx.n + 1], g[:, ctx.n], None)), TOP)
RIGHT["append_value_gradient_keepdim_summed"] = (check_append, _append(
    lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n:].sum(1), None)))
RIGHT["append_n_from_grad"] = (check_append, _append(
    lambda ctx, g: (g[:, :-1], g[:, -1], None), _forward_without_n))

def _weight_gradient(on_x=lambda x: x, on_g=lambda g: g):
    return lambda xs, gs: on_g(gs.flatten(0, 1)).T @ on_x(xs.flatten(0, 1))


case("weight_gradient_relu_of_x", check_weight_gradient, _weight_gradient(on_x=torch.relu),
     r"xs passes through \.relu\(\) first")
case("weight_gradient_relu_of_g", check_weight_gradient, _weight_gradient(on_g=torch.relu),
     r"gs passes through \.relu\(\) first")
case("weight_gradient_tanh_of_x", check_weight_gradient, _weight_gradient(on_x=torch.tanh),
     r"xs passes through \.tanh\(\) first")
case("weight_gradient_abs_of_g", check_weight_gradient, _weight_gradient(on_g=torch.abs),
     r"gs passes through \.abs\(\) first")
case("weight_gradient_plus_bias_gradient", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) + gs.sum((0, 1))[:, None],
     r"bias's gradient")


def _shared_kv(on_k=lambda k: k, on_v=lambda v: v):
    def shared_kv(m, norm, kv, n_heads):
        k, v = kv(norm(m)).view(m.size(0), 2, n_heads, -1).unbind(1)
        return on_k(k), on_v(v)
    return shared_kv


case("shared_kv_softmax_of_k", check_shared_kv, _shared_kv(on_k=lambda k: k.softmax(-1)),
     r"k passes through \.softmax\(-1\)")
case("shared_kv_relu_of_v", check_shared_kv, _shared_kv(on_v=torch.relu),
     r"v passes through \.relu\(\)")
case("shared_kv_tanh_of_k", check_shared_kv, _shared_kv(on_k=torch.tanh),
     r"k passes through \.tanh\(\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
