"""Trial 69, notebook 04 (kv_sharing_stack). A right `Square` whose backward holds a line
that cannot run on the meta device (`assert torch.isfinite(grad_output).all()`) was refused
as "Square calls torch.autograd.grad": the device check's rerun on labnn's stand-in passes
the checker's own `torch.autograd.grad` through a `__torch_function__` mode in grading, which
`by_the_learner` took for the learner. Keys or values mixed across the batch (`k.roll(1, 0)`,
a row index reversed, m centred over the batch, a cumsum over dim 0, kv(norm(m)).T
reshaped) got "shifted by one", "the right values in the wrong places" or "differs"; they
are now named by a rerun with m[0] alone changed. A weight gradient whose xs (or gs) is its
mean over the batch broadcast back, kv's bias added twice and a .gelu() on the values got
"differs" or a broadcast term; each is now named. Keys made by a numpy round trip
(`torch.from_numpy(k.detach().numpy())`) were told only "detached": the device check, which
names numpy, now runs first there.
"""
import torch
import torch.nn.functional as F

from checker_helpers import autograd_function, passes, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _shared_kv(after=lambda k, v: (k, v), before=lambda m, norm: norm(m)):
    def shared_kv(m, norm, kv, n_heads):
        out = kv(before(m, norm)).view(m.size(0), 2, n_heads, -1)
        return after(out[:, 0], out[:, 1])
    return shared_kv


MIXED = r"of batch entry \d change when only m\[0\] changes: your code mixes the batch entries"
case("shared_kv_keys_rolled_over_batch", check_shared_kv,
     _shared_kv(lambda k, v: (k.roll(1, 0), v)), r"keys " + MIXED)
case("shared_kv_values_rolled_over_batch", check_shared_kv,
     _shared_kv(lambda k, v: (k, v.roll(1, 0))), r"values " + MIXED)
case("shared_kv_memory_rolled_over_batch", check_shared_kv,
     _shared_kv(before=lambda m, norm: norm(m.roll(1, 0))), MIXED)
case("shared_kv_keys_plus_batch_mean", check_shared_kv,
     _shared_kv(lambda k, v: (k + k.mean(0), v)), MIXED)
case("shared_kv_memory_centred_over_batch", check_shared_kv,
     _shared_kv(before=lambda m, norm: norm(m - m.mean(0))), MIXED)
case("shared_kv_keys_cumsum_over_batch", check_shared_kv,
     _shared_kv(lambda k, v: (k.cumsum(0), v)), MIXED)


def _values_of_other_rows(m, norm, kv, n_heads):
    y, d = kv(norm(m)), m.size(1)
    rows = torch.arange(m.size(0), device=m.device).flip(0)
    return y[:, :d].reshape(m.size(0), n_heads, -1), y[rows, d:].reshape(m.size(0), n_heads, -1)


case("shared_kv_values_of_other_rows", check_shared_kv, _values_of_other_rows,
     r"values " + MIXED)


def _transposed_reshape(m, norm, kv, n_heads):
    out = kv(norm(m)).T.reshape(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


case("shared_kv_transposed_then_reshaped", check_shared_kv, _transposed_reshape, MIXED)


def _bias_twice(m, norm, kv, n_heads):
    out = (kv(norm(m)) + kv.bias).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


case("shared_kv_bias_added_twice", check_shared_kv, _bias_twice, r"kv's bias is added twice")
case("shared_kv_values_gelu", check_shared_kv, _shared_kv(lambda k, v: (k, F.gelu(v))),
     r"v passes through \.gelu\(\)")
case("shared_kv_keys_through_numpy", check_shared_kv,
     _shared_kv(lambda k, v: (torch.from_numpy(k.detach().numpy()), v)),
     r"goes through numpy \(\.numpy\(\)\).*on a GPU")
RIGHT["shared_kv_split_by_width"] = (check_shared_kv, lambda m, norm, kv, n_heads: tuple(
    t.reshape(m.size(0), n_heads, -1) for t in kv(norm(m)).split(m.size(-1), -1)))
RIGHT["shared_kv_functional"] = (check_shared_kv, lambda m, norm, kv, n_heads: F.linear(
    F.layer_norm(m, norm.normalized_shape, norm.weight, norm.bias, norm.eps), kv.weight,
    kv.bias).unflatten(-1, (2, n_heads, -1)).unbind(1))


case("weight_gradient_x_batch_mean", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.mean(1, keepdim=True).expand_as(xs).flatten(0, 1),
     r"xs \(or gs, the same sum\) is replaced by its mean over dim 1")
case("weight_gradient_g_step_mean", check_weight_gradient,
     lambda xs, gs: gs.mean(0, keepdim=True).expand_as(gs).flatten(0, 1).T @ xs.flatten(0, 1),
     r"is replaced by its mean over dim 0")
RIGHT["weight_gradient_tensordot"] = (check_weight_gradient, lambda xs, gs: torch.tensordot(
    gs, xs, dims=([0, 1], [0, 1])))


def _square_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def _square_backward_asserting(ctx, grad_output):
    (x,) = ctx.saved_tensors
    assert torch.isfinite(grad_output).all(), "a gradient that is not finite"
    return grad_output * 2 * x


def test_square_with_a_value_check_accepted(capsys):
    """Not 'Square calls torch.autograd.grad': the device check's own call, rerun by a mode."""
    passes(check_square, autograd_function("Square", _square_forward,
                                           _square_backward_asserting), capsys)


def _append_forward(ctx, top, value, buffer):
    n = ctx.n = top.size(1)
    assert n < buffer.size(1), "the buffer is full"
    buffer[:, n].copy_(value)
    return buffer.data[:, :n + 1]


def _append_backward(ctx, grad):
    assert torch.isfinite(grad).all()
    return grad[:, :ctx.n], grad[:, ctx.n], None


RIGHT["append_with_value_checks"] = (check_append, autograd_function(
    "Append", _append_forward, _append_backward))


def _value_gradients_checked(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        assert torch.isfinite(g).all()
        total[:g.size(0)] += g
    return total


RIGHT["value_gradients_with_value_checks"] = (check_value_gradients, _value_gradients_checked)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
