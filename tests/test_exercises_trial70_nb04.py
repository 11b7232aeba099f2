"""Trial 70, notebook 04 (kv_sharing_stack). Dropout in shared_kv (training mode, so another
result at each call) got only "k differs from the reference"; two calls on the same inputs
now name it, as notebooks 01 and 03 do. A Square.backward returning g * g * x (grad_output
twice and no 2) got "differs"; it is named beside 2·x·g·g. A Square that saves x and y but
unpacks `(x,) = ctx.saved_tensors` ended in Python's raw ValueError; it is named. A tensor
moved to the GPU by name (`.cuda()`, `device="cuda"`, the Colab learner's habit) ended in
torch's raw "Torch not compiled with CUDA enabled" (or, on a GPU, "same device") for every
exercise; the shared `running` names it. F.layer_norm with its default eps was told "the
eps is written as a number", which it is not; the message now says which eps was used.
Two parameters cut from the graph (`kv.weight.data`, `kv.bias.data`) were asked "was it ...
detached"; now "were they".
"""
import pytest
import torch
import torch.nn.functional as F

from checker_helpers import autograd_function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _shared_kv(after=lambda y: y, before=lambda m, norm: norm(m)):
    def shared_kv(m, norm, kv, n_heads):
        out = after(kv(before(m, norm))).view(m.size(0), 2, n_heads, -1)
        return out[:, 0], out[:, 1]
    return shared_kv


RANDOM = r"two calls of shared_kv.*same inputs give different results.*dropout"
case("shared_kv_dropout_on_projection", check_shared_kv,
     _shared_kv(lambda y: F.dropout(y, 0.1)), RANDOM)
case("shared_kv_dropout_on_memory", check_shared_kv,
     _shared_kv(before=lambda m, norm: F.dropout(norm(m), 0.1)), RANDOM)
case("shared_kv_dropout_half", check_shared_kv,
     _shared_kv(lambda y: F.dropout(y, 0.5, training=True)), RANDOM)


def _square(backward, forward=None):
    def save_x(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    return autograd_function("Square", forward or save_x, backward)


def _x(ctx):
    return ctx.saved_tensors[0]


case("square_backward_g_g_x", check_square, _square(lambda ctx, g: g * g * _x(ctx)),
     r"multiplies by grad_output twice \(x·g·g, and no 2\)")
case("square_backward_g_squared_x", check_square, _square(lambda ctx, g: g.pow(2) * _x(ctx)),
     r"multiplies by grad_output twice \(x·g·g")


def _save_x_and_y(ctx, x):
    y = x * x
    ctx.save_for_backward(x, y)
    return y


def _unpack_one(ctx, g):
    (x,) = ctx.saved_tensors
    return g * 2 * x


case("square_saves_two_unpacks_one", check_square, _square(_unpack_one, _save_x_and_y),
     r"ctx\.saved_tensors holds all 2 tensors.*\(x,\) = ctx\.saved_tensors unpacks one")

GPU = r"moves a tensor to the GPU by name \(\.cuda\(\), device='cuda'\).*device=x\.device"
case("shared_kv_memory_to_cuda", check_shared_kv,
     _shared_kv(before=lambda m, norm: norm(m.cuda())), GPU)


def _value_gradients_on_cuda(read_grads):
    total = torch.zeros(len(read_grads), read_grads[0].size(1), dtype=read_grads[0].dtype,
                        device="cuda")
    for g in read_grads:
        total[:g.size(0)] += g
    return total


case("value_gradients_device_cuda", check_value_gradients, _value_gradients_on_cuda, GPU)
case("square_backward_x_to_cuda", check_square,
     _square(lambda ctx, g: g * 2 * _x(ctx).to("cuda")), GPU)


def _weight_gradient_mixed(xs, gs):  # what a GPU says when one operand went to it
    raise RuntimeError("Expected all tensors to be on the same device, but found at least "
                       "two devices, cuda:0 and cpu!")


case("weight_gradient_same_device_on_a_gpu", check_weight_gradient, _weight_gradient_mixed,
     GPU)


def _layer_norm(eps=None):
    def normed(m, norm):
        extra = {} if eps is None else {"eps": eps}
        return F.layer_norm(m, m.shape[-1:], norm.weight, norm.bias, **extra)
    return normed


case("shared_kv_layer_norm_default_eps", check_shared_kv,
     _shared_kv(before=_layer_norm()),
     r"^(?!.*written as a number;).*used eps = 1e-5, the default \(eps= left out of "
     r"F\.layer_norm.*norm\.eps")


def _weights_through_data(m, norm, kv, n_heads):
    out = F.linear(norm(m), kv.weight.data, kv.bias.data).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


case("shared_kv_weights_through_data", check_shared_kv, _weights_through_data,
     r"`kv\.weight` and `kv\.bias` get no gradient .*: were they, or a value computed from them")
RIGHT["shared_kv_layer_norm_module_eps"] = (check_shared_kv, _shared_kv(
    before=lambda m, norm: _layer_norm(norm.eps)(m, norm)))
RIGHT["shared_kv_dropout_off"] = (check_shared_kv,
                                  _shared_kv(lambda y: F.dropout(y, 0.1, training=False)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CPU message is tested above")
def test_cuda_named_on_a_gpu_too():
    """On a GPU, `.cuda()` of the check's CPU inputs raises "same device", named alike."""
    from labnn.exercises.grading import ExerciseFailed
    with pytest.raises(ExerciseFailed, match="GPU by name"):
        check_shared_kv(_shared_kv(before=lambda m, norm: norm(m.cuda())))
