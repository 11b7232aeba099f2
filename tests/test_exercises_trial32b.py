"""Learner trial 32 (b), notebook 04: a Square backward that divides by x (NaN at x = 0);
shared_kv, Append and weight_gradient answers that hold only at the checks' own sizes
(n_heads, D or the batch written as numbers); a float32 step inside a float64 result
(weight_gradient, shared_kv, Square.forward); a float32 input in shared_kv; a gradient
returned for Append's buffer; |x| rebuilt as sqrt(y) in a class whose source Python cannot
read; labnn's own memory_keys_values; an intermediate changed in place after autograd saved
it; and the right answers these checks must accept."""
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- Exercise 1: shared_kv ----
def _heads(k, v, h):
    return k.unflatten(-1, (h, -1)), v.unflatten(-1, (h, -1))


def skv_heads_2(m, norm, kv, n_heads):
    return _heads(*kv(norm(m)).chunk(2, -1), 2)


def skv_heads_4(m, norm, kv, n_heads):
    return _heads(*kv(norm(m)).chunk(2, -1), 4)


def skv_d_12(m, norm, kv, n_heads):
    y = kv(norm(m))
    return _heads(y[:, :12], y[:, 12:], n_heads)


def skv_d_8(m, norm, kv, n_heads):
    y = kv(norm(m))
    return _heads(y[:, :8], y[:, 8:], n_heads)


def skv_batch_4(m, norm, kv, n_heads):
    return kv(norm(m)).view(4, 2, n_heads, -1).unbind(1)


def skv_float32_inside(m, norm, kv, n_heads):
    x = norm(m).float()
    y = F.linear(x, kv.weight.float(), kv.bias.float()).to(m.dtype)
    return _heads(*y.chunk(2, -1), n_heads)


def skv_input_float(m, norm, kv, n_heads):
    return _heads(*kv(norm(m.float())).chunk(2, -1), n_heads)


def skv_labnn(m, norm, kv, n_heads):
    from labnn.feedback.layer import memory_keys_values
    k, v = memory_keys_values(m, norm, kv, n_heads)
    return k, v


def skv_saved_changed(m, norm, kv, n_heads):
    x = norm(m)
    y = kv(x)
    x.add_(1.0)
    return _heads(*y.chunk(2, -1), n_heads)


def skv_right_unflatten(m, norm, kv, n_heads):
    out = kv(norm(m)).unflatten(-1, (2, n_heads, -1))
    return out[:, 0], out[:, 1]


def skv_right_matmul(m, norm, kv, n_heads):
    y = norm(m) @ kv.weight.T + kv.bias
    d = m.size(-1)
    return y[:, :d].reshape(len(m), n_heads, -1), y[:, d:].reshape(len(m), n_heads, -1)


RIGHT["skv_unflatten"] = (check_shared_kv, skv_right_unflatten)
RIGHT["skv_matmul"] = (check_shared_kv, skv_right_matmul)
case("skv_heads_2", check_shared_kv, skv_heads_2,
     r"right at the check's sizes, not at these.*n_heads")
case("skv_heads_4", check_shared_kv, skv_heads_4,
     r"^(?!.*swapped).*4 heads.*n_heads = 2")
case("skv_d_12", check_shared_kv, skv_d_12, r"right at the check's sizes, not at these.*D")
case("skv_d_8", check_shared_kv, skv_d_8,
     r"^(?!.*split\(8).*first 8 .*not the first D = 12.*m\.size\(-1\)")
case("skv_batch_4", check_shared_kv, skv_batch_4,
     r"right at the check's sizes, not at these.*m\.size\(0\)")
case("skv_float32_inside", check_shared_kv, skv_float32_inside, r"float32-accurate.*float")
case("skv_input_float", check_shared_kv, skv_input_float,
     r"float32.*float64.*\.float\(\)")
case("skv_labnn", check_shared_kv, skv_labnn,
     r"runs labnn\.feedback\.layer\.memory_keys_values, the reference")
case("skv_saved_changed", check_shared_kv, skv_saved_changed,
     r"cannot be computed: a tensor the backward pass needs.*changed in place")


# ---- Exercise 2: Square ----
class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SqDividesByX(_Square):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * 2 * y / x


class SqForwardFloat32(_Square):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.float() * x.float()).to(x.dtype)


class SqRightSignSqrt(_Square):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y, x.sign())
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, s = ctx.saved_tensors
        return 2 * y.sqrt() * s * grad_output


class SqRightSquare(_Square):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.square(x)


_UNREADABLE = """
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y.sqrt() * grad_output
"""
_space = {"torch": torch}
exec(compile(_UNREADABLE, "<exec>", "exec"), _space)  # inspect.getsource cannot read it
SqSqrtNoSource = _space["Square"]

RIGHT["sq_sign_sqrt"] = (check_square, SqRightSignSqrt)
RIGHT["sq_square"] = (check_square, SqRightSquare)
case("sq_divides_by_x", check_square, SqDividesByX, r"NaN.*x = 0.*divi.*by x")
case("sq_forward_float32", check_square, SqForwardFloat32, r"float32-accurate.*forward")
case("sq_sqrt_no_source", check_square, SqSqrtNoSource,
     r"sqrt\(y\).*\.abs\(\)|\.abs\(\).*sqrt\(y\)")


# ---- Exercise 4: Append ----
class _Append(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], None


class ApLoopTwo(_Append):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        for b in range(2):
            buffer.data[b, n] = value[b]
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApReshapeTwo(_Append):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value.reshape(2, -1)
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApBackwardReshapeTwo(_Append):
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n].reshape(2, -1), None


class ApBufferGradient(_Append):
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], grad


class ApRightTrailingNone(_Append):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None, None


class ApRightNeedsInputGrad(_Append):
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        g_top = grad[:, :n] if ctx.needs_input_grad[0] else None
        g_val = grad[:, n] if ctx.needs_input_grad[1] else None
        return g_top, g_val, None


RIGHT["ap_plain"] = (check_append, _Append)
RIGHT["ap_trailing_none"] = (check_append, ApRightTrailingNone)
RIGHT["ap_needs_input_grad"] = (check_append, ApRightNeedsInputGrad)
_B_FIX = r"right at the check's sizes, not at these.*value\.size\(0\)"
case("ap_loop_two", check_append, ApLoopTwo, _B_FIX)
case("ap_reshape_two", check_append, ApReshapeTwo, _B_FIX)
case("ap_backward_reshape_two", check_append, ApBackwardReshapeTwo, _B_FIX)
case("ap_buffer_gradient", check_append, ApBufferGradient, r"None for `buffer`")


# ---- Exercise 5: weight_gradient ----
def wg_float32_inside(xs, gs):
    return (gs.float().flatten(0, 1).T @ xs.float().flatten(0, 1)).to(xs.dtype)


def wg_right_einsum(xs, gs):
    return torch.einsum("tbo,tbi->oi", gs, xs)


RIGHT["wg_einsum"] = (check_weight_gradient, wg_right_einsum)
case("wg_float32_inside", check_weight_gradient, wg_float32_inside, r"float32-accurate")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
