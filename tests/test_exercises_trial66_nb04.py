"""Trial 66, notebook 04 (kv_sharing_stack): wrong answers the checks refused with a generic
"differs" (or the learner's own error). Exercise 1's memory vector normalized another way
than norm(m): never centred (an RMSNorm, or m / std), centred but never divided by the std,
norm applied twice, norm's weight and bias applied again after norm(m), swapped, half of them,
the bias added before the scale, mean and std over all of m, or an L2 normalize; each is
named. Square's backward with x reduced (x.mean(), x.sum()), with sign(x) or a clamp(min=0)
where x belongs, is named; value_gradients reading read_grads[T] (a loop up to T inclusive)
crashed with "list index out of range": named. An Append whose capacity check is off by one
(it raises when the value goes into the buffer's last slot, n = C - 1) crashed with its own
error: named; an Append whose gradient is wrong in no way the check recomputes is told which
of backward's two gradients is wrong, and how (since trial 67; before, only what was compared).
A weight gradient with the steps or examples of G (or X) reversed, or one step counted twice,
is named.
"""
import torch
import torch.nn.functional as F

from checker_helpers import autograd_function, square_with, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _kv_of(normalize):
    """shared_kv with the memory vector normalized by `normalize(m, norm)`."""
    def shared_kv(m, norm, kv, n_heads):
        out = kv(normalize(m, norm)).view(m.size(0), 2, n_heads, -1)
        return out[:, 0], out[:, 1]
    return shared_kv


def _centred(m):
    return m - m.mean(-1, keepdim=True)


def _std(m, norm):
    return (m.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()


NOT_CENTRED = r"never subtracts the mean"
case("shared_kv_rms_norm", check_shared_kv, _kv_of(
    lambda m, n: m * torch.rsqrt(m.pow(2).mean(-1, keepdim=True) + n.eps) * n.weight + n.bias),
     NOT_CENTRED)
case("shared_kv_divided_by_std_not_centred", check_shared_kv, _kv_of(
    lambda m, n: m / _std(m, n) * n.weight + n.bias), NOT_CENTRED)
case("shared_kv_centred_not_scaled", check_shared_kv, _kv_of(
    lambda m, n: _centred(m) * n.weight + n.bias), r"never divides by the std")
case("shared_kv_norm_twice", check_shared_kv, _kv_of(lambda m, n: n(n(m))),
     r"norm twice.*norm\(norm\(m\)\)")
case("shared_kv_affine_twice", check_shared_kv, _kv_of(lambda m, n: n(m) * n.weight + n.bias),
     r"weight and bias twice")
case("shared_kv_bias_before_scale", check_shared_kv, _kv_of(
    lambda m, n: (_centred(m) / _std(m, n) + n.bias) * n.weight), r"adds the bias before")
case("shared_kv_l2_normalize", check_shared_kv, _kv_of(lambda m, n: F.normalize(m, dim=-1)),
     r"its length \(F\.normalize")
case("shared_kv_l2_normalize_affine", check_shared_kv, _kv_of(
    lambda m, n: F.normalize(m, dim=-1) * n.weight + n.bias), r"its length \(F\.normalize")
case("shared_kv_weight_and_bias_swapped", check_shared_kv, _kv_of(
    lambda m, n: _centred(m) / _std(m, n) * n.bias + n.weight), r"swaps norm's weight and bias")
case("shared_kv_weight_only", check_shared_kv, _kv_of(
    lambda m, n: _centred(m) / _std(m, n) * n.weight), r"half of norm's affine")
case("shared_kv_bias_only", check_shared_kv, _kv_of(
    lambda m, n: _centred(m) / _std(m, n) + n.bias), r"half of norm's affine")
case("shared_kv_normalized_over_all_of_m", check_shared_kv, _kv_of(
    lambda m, n: (m - m.mean()) / m.std() * n.weight + n.bias), r"over all of m at once")
RIGHT["shared_kv_layer_norm_written_out"] = (check_shared_kv, _kv_of(
    lambda m, n: _centred(m) / _std(m, n) * n.weight + n.bias))

X_REDUCED = r"reduces x.*elementwise"
case("square_backward_x_mean", check_square, square_with(lambda x, g: g * 2 * x.mean()),
     X_REDUCED)
case("square_backward_x_sum", check_square, square_with(lambda x, g: g * 2 * x.sum()),
     X_REDUCED)
case("square_backward_sign_x", check_square, square_with(lambda x, g: g * 2 * x.sign()),
     r"2·sign\(x\)")
case("square_backward_x_clamped_at_0", check_square,
     square_with(lambda x, g: g * 2 * x.clamp(min=0)), r"zeroes the gradient where x < 0")
case("square_backward_relu_x", check_square, square_with(lambda x, g: g * 2 * x.relu()),
     r"zeroes the gradient where x < 0")


def _value_gradients_reads_to(last):
    """value_gradients summing read_grads[t][j] for t in range(j, last(T))."""
    def value_gradients(read_grads):
        out = torch.zeros_like(read_grads[-1])
        for j in range(len(read_grads)):
            for t in range(j, last(len(read_grads))):
                out[j] += read_grads[t][j]
        return out
    return value_gradients


case("value_gradients_reads_to_T_inclusive", check_value_gradients,
     _value_gradients_reads_to(lambda n: n + 1), r"read_grads\[0\] to read_grads\[4\].*T \+ 1")
RIGHT["value_gradients_reads_to_T"] = (check_value_gradients,
                                       _value_gradients_reads_to(lambda n: n))


def _append_full_at(full):
    """Append refusing a push once `full(n, capacity)` holds."""
    def forward(ctx, top, value, buffer):
        n = ctx.n = top.size(1)
        if full(n, buffer.size(1)):
            raise RuntimeError("stack is full")
        buffer.data[:, n] = value
        return buffer.data[:, :n + 1]

    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n], None
    return autograd_function("Append", forward, backward)





def _append_value_gradient(of):
    """Append with the right forward, the value's gradient `of(grad, n)`."""
    def forward(ctx, top, value, buffer):
        n = ctx.n = top.size(1)
        buffer.data[:, n] = value
        return buffer.data[:, :n + 1]
    return autograd_function("Append", forward,
                             lambda ctx, grad: (grad[:, :ctx.n], of(grad, ctx.n), None))


case("append_value_gradient_averaged_over_slots", check_append,
     _append_value_gradient(lambda grad, n: grad[:, n] / (n + 1)),
     r"gradient for `value` \(expected grad\[:, n\]\).*times c = 0\.1667")
CAPACITY = r"last slot.*n = C - 1.*off by one"
case("append_capacity_check_off_by_one", check_append,
     _append_full_at(lambda n, c: n >= c - 1), CAPACITY)
case("append_capacity_check_n_plus_1", check_append,
     _append_full_at(lambda n, c: n + 1 >= c), CAPACITY)
RIGHT["append_capacity_check"] = (check_append, _append_full_at(lambda n, c: n >= c))

REVERSED = r"paired in reverse order"
case("weight_gradient_steps_of_g_reversed", check_weight_gradient,
     lambda xs, gs: gs.flip(0).flatten(0, 1).T @ xs.flatten(0, 1), REVERSED)
case("weight_gradient_steps_of_x_reversed", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flip(0).flatten(0, 1), REVERSED)
case("weight_gradient_examples_of_g_reversed", check_weight_gradient,
     lambda xs, gs: gs.flip(1).flatten(0, 1).T @ xs.flatten(0, 1), REVERSED)
TWICE = r"step .* counted twice"
case("weight_gradient_last_step_twice", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) + gs[-1].T @ xs[-1], TWICE)
case("weight_gradient_first_step_twice", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) + gs[0].T @ xs[0], TWICE)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
