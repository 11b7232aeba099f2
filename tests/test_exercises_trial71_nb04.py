"""Trial 71, notebook 04 (kv_sharing_stack). Accepted wrong: an answer that special-cases the
sizes or the dtype of the checks' extra rounds (T = 1, F = 1, B = 1, a long T, a 1-D or 3-D
x, float32 inputs) with a tensor made on the CPU (torch.zeros without device=, .cpu(),
numpy) passed: only the check's first inputs were tried on another device, so on a GPU it
fails. Those rounds now try their inputs on another device too, and name the call.
Misnamed: a weight gradient multiplied by the batch size (gs.T @ xs * B), the steps or
T·B, or divided by D_in, got "a constant factor (a scale or a count?)"; the size is named
(confirmed at other sizes: T - 1, which is D_out at the check's sizes, is not called D_out).
An answer of another exercise handed to a check (weight_gradient to value_gradients', Square
to Append's) got its raw TypeError; it is named. `norm(m) @ kv.weight + kv.bias` got the raw
"mat1 and mat2 shapes cannot be multiplied": the Linear's weight layout is named, as it was
for `x @ layer.weight` with x a plain name. A value gradient summed in a numpy array
(np.zeros, float64) was told "float64 written into the code"; numpy is named first.
"""
import numpy as np
import torch

from checker_helpers import autograd_function, square_with, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
CPU = r"(made on the CPU|on the CPU whatever|goes through numpy).*(device=|\.cpu\(\)|torch)"


def _value_gradients(special, when):
    def value_gradients(read_grads):
        if when(read_grads):
            return special(read_grads)
        total = torch.zeros_like(read_grads[-1])
        for g in read_grads:
            total[:g.size(0)] += g
        return total
    return value_gradients


def _summed(read_grads, like):
    total = like
    for g in read_grads:
        total[:g.size(0)] += g
    return total


case("value_gradients_t1_cpu_zeros", check_value_gradients, _value_gradients(
    lambda rg: torch.zeros(1, rg[0].size(1), dtype=rg[0].dtype) + rg[0],
    lambda rg: len(rg) == 1), r"with T = 1 .*" + CPU)
case("value_gradients_t1_tensor_of_list", check_value_gradients, _value_gradients(
    lambda rg: torch.tensor(rg[0].tolist(), dtype=rg[0].dtype), lambda rg: len(rg) == 1),
    r"with T = 1 .*torch\.tensor\(\.\.\., device=x\.device\)")
# Not tried: a CPU tensor made only for T > 100. The T = 600 round is not rerun on another
# device (a loop over the reads' rows, a right answer, took 108 s there: trial 8b's "vg").
case("value_gradients_f1_python_floats", check_value_gradients, _value_gradients(
    lambda rg: torch.tensor([[sum(float(rg[t][j, 0]) for t in range(j, len(rg)))]
                             for j in range(len(rg))], dtype=rg[0].dtype),
    lambda rg: rg[0].size(1) == 1), r"F = 1.*" + CPU)
case("value_gradients_float32_cpu", check_value_gradients, _value_gradients(
    lambda rg: _summed(rg, torch.zeros(rg[-1].shape)), lambda rg: rg[0].dtype == torch.float32),
    r"float32 .*" + CPU)


def _square_1d(x, g):
    if x.dim() == 1:
        return g * 2 * x * torch.ones(x.shape, dtype=x.dtype)
    return g * 2 * x


def _square_3d(x, g):
    if x.dim() == 3:
        return (g.flatten() * 2 * x.flatten()).cpu().view(x.shape)
    return g * 2 * x


case("square_1d_cpu_ones", check_square, square_with(_square_1d), r"shape \[5\].*" + CPU)
case("square_3d_cpu", check_square, square_with(_square_3d), r"shape \[2, 3, 2\].*" + CPU)


def _weight_gradient(special, when):
    def weight_gradient(xs, gs):
        if when(xs):
            return special(xs, gs)
        return gs.flatten(0, 1).T @ xs.flatten(0, 1)
    return weight_gradient


case("weight_gradient_b1_numpy", check_weight_gradient, _weight_gradient(
    lambda xs, gs: torch.from_numpy(gs[:, 0].numpy().T @ xs[:, 0].numpy()),
    lambda xs: xs.size(1) == 1), r"B = 1.*numpy")
case("weight_gradient_t1_cpu", check_weight_gradient, _weight_gradient(
    lambda xs, gs: (gs[0].T @ xs[0]).cpu(), lambda xs: xs.size(0) == 1),
    r"T = 1.*\.cpu\(\)")
case("weight_gradient_float32_cpu", check_weight_gradient, _weight_gradient(
    lambda xs, gs: (gs.flatten(0, 1).T @ xs.flatten(0, 1)).cpu(),
    lambda xs: xs.dtype == torch.float32), r"float32.*\.cpu\(\)")


def _shared_kv(special, when):
    def shared_kv(m, norm, kv, n_heads):
        out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
        k, v = out[:, 0], out[:, 1]
        return special(k, v) if when(m) else (k, v)
    return shared_kv


case("shared_kv_b1_cpu", check_shared_kv, _shared_kv(
    lambda k, v: (k.cpu(), v.cpu()), lambda m: m.size(0) == 1), r"B = 1.*\.cpu\(\)")
case("shared_kv_float32_cpu_zeros", check_shared_kv, _shared_kv(
    lambda k, v: (k + torch.zeros(1), v), lambda m: m.dtype == torch.float32),
    r"float32.*torch\.zeros\(\.\.\., device=x\.device\)")


def _append_forward(ctx, top, value, buffer):
    n = ctx.n = top.size(1)
    buffer[:, n].copy_(value)
    return buffer.data[:, :n + 1]


def _append_backward(special, when):
    def backward(ctx, grad):
        if when(grad):
            return special(ctx, grad)
        return grad[:, :ctx.n], grad[:, ctx.n], None
    return autograd_function("Append", _append_forward, backward)


case("append_b1_cpu", check_append, _append_backward(
    lambda ctx, g: (g[:, :ctx.n].cpu(), g[:, ctx.n].cpu(), None), lambda g: g.size(0) == 1),
    r"B = 1\).*made on the CPU")
case("append_f1_cpu_ones", check_append, _append_backward(
    lambda ctx, g: (g[:, :ctx.n] * torch.ones(1, 1, 1), g[:, ctx.n], None),
    lambda g: g.size(-1) == 1), r"F = 1\).*made on the CPU")

RIGHT["value_gradients_t1_zeros_like"] = (check_value_gradients, _value_gradients(
    lambda rg: torch.zeros_like(rg[0]) + rg[0], lambda rg: len(rg) == 1))
RIGHT["value_gradients_numpy_free_index"] = (check_value_gradients, _value_gradients(
    lambda rg: _summed(rg, rg[0].new_zeros(len(rg), rg[0].size(1))), lambda rg: True))


def _flat(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


SCALED = {"times_batch": (lambda xs, gs: _flat(xs, gs) * xs.size(1),
                          r"times B, the batch size \(2 here, 3 with B = 3\)"),
          "times_batch_shape": (lambda xs, gs: _flat(xs, gs) * gs.shape[1], r"times B"),
          "times_steps": (lambda xs, gs: _flat(xs, gs) * len(xs), r"times T, the steps"),
          "times_rows": (lambda xs, gs: _flat(xs, gs) * (xs.size(0) * xs.size(1)),
                         r"times T·B"),
          "over_d_in": (lambda xs, gs: _flat(xs, gs) / xs.size(-1), r"divided by D_in")}
for tag, (fn, pattern) in SCALED.items():
    case(f"weight_gradient_{tag}", check_weight_gradient, fn,
         pattern + r".*no factor: gs\.flatten\(0, 1\)\.T @ xs\.flatten\(0, 1\)")
case("weight_gradient_over_batch_still", check_weight_gradient,
     lambda xs, gs: _flat(xs, gs) / xs.size(1), r"you divided by the batch size")
case("weight_gradient_times_steps_less_one", check_weight_gradient,  # 4 = T - 1 = D_out here
     lambda xs, gs: _flat(xs, gs) * (len(xs) - 1), r"^(?!.*D_out).*times c = 4")
case("weight_gradient_lr_still", check_weight_gradient,
     lambda xs, gs: 0.1 * _flat(xs, gs), r"a constant \(a learning rate\?\)")


def _value_gradients_numpy(read_grads):
    total = np.zeros(tuple(read_grads[-1].shape))  # float64, numpy's default
    for g in read_grads:
        total[:g.shape[0]] += g.numpy()
    return torch.from_numpy(total)


case("value_gradients_numpy_zeros", check_value_gradients, _value_gradients_numpy,
     r"goes through numpy \(\.numpy\(\)\).*on a GPU")


def _weight_not_transposed(m, norm, kv, n_heads):
    out = (norm(m) @ kv.weight + kv.bias).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


case("shared_kv_weight_not_transposed", check_shared_kv, _weight_not_transposed,
     r"a Linear's weight is \[out_features, in_features\] = \[24, 12\]; call `kv\(norm\(m\)\)`")



Square = square_with(lambda x, g: g * 2 * x)  # Exercise 2's answer, for Exercise 4's check


def value_gradients(read_grads):  # Exercise 3's answer, handed to Exercises 1 and 5
    return _value_gradients(None, lambda rg: False)(read_grads)


def weight_gradient(xs, gs):
    return _flat(xs, gs)


OTHER = r"this check calls {}, but it was handed {}, which refused.*another exercise"
case("append_given_square", check_append, Square, OTHER.format("Append", "Square"))
case("value_gradients_given_weight_gradient", check_value_gradients, weight_gradient,
     OTHER.format("value_gradients", "weight_gradient"))
case("weight_gradient_given_value_gradients", check_weight_gradient, value_gradients,
     OTHER.format("weight_gradient", "value_gradients"))
case("shared_kv_given_weight_gradient", check_shared_kv, weight_gradient,
     OTHER.format("shared_kv", "weight_gradient"))


def _shared_kv_helper_misused(m, norm, kv, n_heads):  # its own helper's TypeError: not named
    def split(t):
        return t.view(m.size(0), n_heads, -1)
    k, v = kv(norm(m)).chunk(2, -1)
    return split(k, n_heads), split(v)


case("shared_kv_own_helper_type_error", check_shared_kv, _shared_kv_helper_misused,
     r"^(?!.*another exercise).*split\(\) takes 1 positional argument")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
