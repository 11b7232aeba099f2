"""Trial 46b: a blind learner trial of notebook 04's five exercises (311 answers).

Wrong answers that passed: a `value_gradients` that keeps a buffer between calls (never
zeroed, or zeroed and returned again: every call of the check had new sizes); `.squeeze()`
in `Append`'s and `Square`'s backward (wrong at B = 1 or F = 1, and for an x with an axis of
1: the checks never tried one) and in `weight_gradient` (D_out = 1); a `value_gradients`
that returns the caller's own tensor at T = 1, or adds into a buffer of 8 rows (the longest
T tried was 5); labnn's own `_Append` and `Stack` behind `Append` and `value_gradients`.
Messages: a `Square` whose backward reads `ctx.x` was told it saves `x.data`; an `Append`
whose backward writes into `grad`, or whose output is marked non-differentiable, was told
it returns None for `value`; a LayerNorm written without its eps (or with it outside the
root) was blamed on a float32 step; `kv.weight` rounded through float32 passed (its weights
were float32 numbers cast up), and so did LayerNorm's eps written as 1e-5 (every round used
the default eps)."""
import types

from checker_helpers import trial_case, trial_tests

import torch
import torch.nn.functional as F

from labnn.exercises.kv_sharing_stack import (
    check_append, check_shared_kv, check_square, check_value_gradients, check_weight_gradient)
from labnn.feedback import Stack
from labnn.feedback.stack import _Append

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
_KEPT = {}


def vg_buffer_never_zeroed(read_grads):
    last = read_grads[-1]
    key = (tuple(last.shape), last.dtype, str(last.device))
    if key not in _KEPT:
        _KEPT[key] = torch.zeros_like(last)
    out = _KEPT[key]
    for g in read_grads:
        out[: len(g)] += g
    return out.clone()


def vg_buffer_returned(read_grads):
    last = read_grads[-1]
    buf = _KEPT.get("returned")
    if buf is None or buf.shape != last.shape or buf.dtype != last.dtype:
        buf = _KEPT["returned"] = torch.zeros_like(last)
    buf.zero_()
    for g in read_grads:
        buf[: len(g)] += g
    return buf


def vg_right(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[: len(g)] += g
    return out


def vg_padded(read_grads):  # read_grads[-1] itself when T = 1
    out = read_grads[-1]
    for g in read_grads[:-1]:
        out = out + F.pad(g, (0, 0, 0, len(read_grads) - len(g)))
    return out


def vg_eight_rows(read_grads):
    out = read_grads[0].new_zeros(8, read_grads[0].size(1))
    for g in read_grads:
        out[: len(g)] += g
    return out[: len(read_grads)].clone()


def vg_through_labnn_stack(read_grads):
    t = len(read_grads)
    v = read_grads[0].new_zeros(t, read_grads[0].size(1), requires_grad=True)
    stack = Stack(t, v[0], dim=0)
    reads = [stack.push(v[i]) for i in range(t)]
    return torch.autograd.grad(reads, v, read_grads)[0]


class _AppendBase(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class AppendSqueezed(_AppendBase):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n : ctx.n + 1].squeeze(), None


class AppendRight(_AppendBase):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendThroughLabnn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        stack = types.SimpleNamespace(dim=1, _buffer=buffer)
        return _Append.forward(ctx, top, value, stack, True)

    @staticmethod
    def backward(ctx, grad):
        return _Append.backward(ctx, grad)[:3]


class SquareSqueezed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x * g).squeeze()


class SquareReadsCtxX(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.x = x
        return x * x

    @staticmethod
    def backward(ctx, g):
        return 2 * ctx.x * g


def wg_squeezed(xs, gs):
    return torch.einsum("tbo,tbi->oi", gs, xs).squeeze()


STATE = r"(?i)call|again|between|kept|state|buffer"
case("vg_buffer_never_zeroed", check_value_gradients, vg_buffer_never_zeroed, STATE)
case("vg_buffer_returned", check_value_gradients, vg_buffer_returned, STATE)
case("vg_returns_the_read_at_t_1", check_value_gradients, vg_padded,
     r"(?i)read_grads|same memory|alias|new tensor")
case("vg_eight_rows", check_value_gradients, vg_eight_rows,
     r"(?i)T = 1[0-9]|read every size|a buffer of a fixed size")
case("vg_through_labnn_stack", check_value_gradients, vg_through_labnn_stack, r"Stack")
case("append_squeezed", check_append, AppendSqueezed, r"(?i)squeeze|B = 1|F = 1")
case("append_through_labnn", check_append, AppendThroughLabnn, r"_Append|labnn")
case("square_squeezed", check_square, SquareSqueezed, r"(?i)squeeze|size 1")
case("square_reads_ctx_x", check_square, SquareReadsCtxX, r"ctx\.x")
case("wg_squeezed", check_weight_gradient, wg_squeezed, r"(?i)squeeze|D_out = 1|D_in = 1")

RIGHT["vg_right"] = (check_value_gradients, vg_right)
RIGHT["append_right"] = (check_append, AppendRight)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


class AppendZeroesGrad(_AppendBase):  # writes into the incoming grad
    @staticmethod
    def backward(ctx, grad):
        gv = grad[:, ctx.n]
        grad[:, ctx.n] = 0
        return grad[:, : ctx.n], gv.clone(), None


class AppendNotDifferentiable(_AppendBase):
    @staticmethod
    def forward(ctx, top, value, buffer):
        out = _AppendBase.forward(ctx, top, value, buffer)
        ctx.mark_non_differentiable(out)  # its backward then never runs
        return out

    backward = AppendRight.backward


def _kv(norm_of):
    def shared_kv(m, norm, kv, n_heads):
        k, v = kv(norm_of(m, norm)).chunk(2, -1)
        return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))
    return shared_kv


def _std(m):
    return m.std(-1, unbiased=False, keepdim=True)


kv_no_eps = _kv(lambda m, n: (m - m.mean(-1, keepdim=True)) / _std(m) * n.weight + n.bias)
kv_eps_outside = _kv(lambda m, n: (m - m.mean(-1, keepdim=True)) / (_std(m) + n.eps)
                     * n.weight + n.bias)


def kv_weight_through_float32(m, norm, kv, n_heads):
    y = F.linear(norm(m), kv.weight.float().to(m.dtype), kv.bias)
    k, v = y.chunk(2, -1)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


MORE = {}
more = trial_case(MORE, {})
more("append_zeroes_grad", check_append, AppendZeroesGrad, r"in place")
more("append_not_differentiable", check_append, AppendNotDifferentiable,
     r"grad_fn|mark_non_differentiable")
more("kv_no_eps", check_shared_kv, kv_no_eps, r"(?i)eps")
more("kv_eps_outside_the_root", check_shared_kv, kv_eps_outside, r"(?i)eps")
more("kv_weight_through_float32", check_shared_kv, kv_weight_through_float32,
     r"(?i)float32|\.float\(\)")
test_more_wrong_answers_named, _ = trial_tests(MORE, {}, {})


kv_eps_written = _kv(lambda m, n: F.layer_norm(m, m.shape[-1:], n.weight, n.bias, 1e-5))
RIGHT_MORE = {"kv_norm_eps": (check_shared_kv, _kv(lambda m, n: F.layer_norm(
    m, m.shape[-1:], n.weight, n.bias, n.eps)))}
EPS = {}
trial_case(EPS, {})("kv_eps_written_as_1e_5", check_shared_kv, kv_eps_written, r"norm\.eps")
test_eps_named, test_eps_right = trial_tests(EPS, RIGHT_MORE, {})
