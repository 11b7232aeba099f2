"""Trial 49b: a blind learner trial of notebook 04's five exercises (234 answers).

Wrong answers that passed: a weight gradient that is not the one product G^T X the
exercise asks for (a product per step, `bmm` then a sum, outer products, a broadcast
[D_out, T·B, D_in] tensor of products) or that autograd computes (an `nn.Linear`'s
`.backward`, `torch.autograd.grad`, `torch.func.vjp`); value gradients in a buffer of fixed
size above the check's T = 12 (16, or the naive stack's 512); `shared_kv` with `.squeeze(1)`
(the check never tried one head); a `Square` saving `x.contiguous()` (a copy when x is not
contiguous; x always was). Messages: an `Append` keeping n in a global (or a class
attribute) was told to "save it in forward", which it did; an `Append` rounding the value
through float16 was told it "did not write the value"; a weight gradient through float16
got a message over 400 characters."""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (
    check_append, check_shared_kv, check_square, check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
PRODUCTS = r"one (matrix )?product"
AUTOGRAD = r"autograd"


# ---- Exercise 5: weight_gradient ----
def wg_loop(xs, gs):
    w = xs.new_zeros(gs.size(-1), xs.size(-1))
    for t in range(xs.size(0)):
        w += gs[t].T @ xs[t]
    return w


def wg_bmm_sum(xs, gs):
    return torch.bmm(gs.transpose(1, 2), xs).sum(0)


def wg_outer(xs, gs):
    w = xs.new_zeros(gs.size(-1), xs.size(-1))
    for t in range(xs.size(0)):
        for b in range(xs.size(1)):
            w += torch.outer(gs[t, b], xs[t, b])
    return w


def wg_einsum_batch_kept(xs, gs):
    return torch.einsum("tbo,tbi->boi", gs, xs).sum(0)


def wg_broadcast(xs, gs):
    return (gs.flatten(0, 1).T[:, :, None] * xs.flatten(0, 1)[None]).sum(1)


def wg_linear_backward(xs, gs):
    lin = torch.nn.Linear(xs.size(-1), gs.size(-1), device=xs.device, dtype=xs.dtype)
    with torch.enable_grad():
        lin(xs).backward(gs)
    return lin.weight.grad


def wg_autograd_grad(xs, gs):
    w = xs.new_zeros(gs.size(-1), xs.size(-1)).requires_grad_()
    with torch.enable_grad():
        return torch.autograd.grad(torch.nn.functional.linear(xs, w), w, gs)[0]


def wg_func_vjp(xs, gs):
    w = xs.new_zeros(gs.size(-1), xs.size(-1))
    return torch.func.vjp(lambda w: xs @ w.T, w)[1](gs)[0]


def wg_half(xs, gs):
    return (gs.flatten(0, 1).half().T.double() @ xs.flatten(0, 1).double()).to(xs.dtype)


for fn in (wg_loop, wg_bmm_sum, wg_outer, wg_einsum_batch_kept, wg_broadcast):
    case(fn.__name__, check_weight_gradient, fn, PRODUCTS)
for fn in (wg_linear_backward, wg_autograd_grad, wg_func_vjp):
    case(fn.__name__, check_weight_gradient, fn, AUTOGRAD)
case("wg_half", check_weight_gradient, wg_half, r"float16|half")  # and under 400 characters
RIGHT["wg_mm"] = (check_weight_gradient, lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1))
RIGHT["wg_einsum"] = (check_weight_gradient, lambda xs, gs: torch.einsum("tbo,tbi->oi", gs, xs))
RIGHT["wg_tensordot"] = (check_weight_gradient,
                         lambda xs, gs: torch.tensordot(gs, xs, dims=([0, 1], [0, 1])))
RIGHT["wg_addmm"] = (check_weight_gradient, lambda xs, gs: torch.addmm(
    xs.new_zeros(gs.size(-1), xs.size(-1)), gs.flatten(0, 1).T, xs.flatten(0, 1)))
RIGHT["wg_transposed_product"] = (check_weight_gradient,
                                  lambda xs, gs: (xs.flatten(0, 1).T @ gs.flatten(0, 1)).T)
RIGHT["wg_reshape"] = (check_weight_gradient, lambda xs, gs: gs.reshape(
    -1, gs.size(-1)).T.matmul(xs.reshape(-1, xs.size(-1))))


# ---- Exercise 3: value_gradients ----
def _fixed(capacity):
    def value_gradients(read_grads):
        out = read_grads[0].new_zeros(capacity, read_grads[0].size(1))
        for g in read_grads:
            out[: len(g)] += g
        return out[: len(read_grads)]
    return value_gradients


case("vg_capacity_16", check_value_gradients, _fixed(16), r"T = \d+")
case("vg_capacity_512", check_value_gradients, _fixed(512), r"T = \d+")


# ---- Exercise 1: shared_kv ----
def kv_squeeze_1(m, norm, kv, n_heads):
    b = m.size(0)
    k, v = kv(norm(m)).view(b, 2, n_heads, -1).unbind(1)
    return k.squeeze(1), v.squeeze(1)


case("kv_squeeze_1", check_shared_kv, kv_squeeze_1, r"n_heads = 1|H = 1")


# ---- Exercise 2: Square ----
def _square(save):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(save(x))
            ctx.shape = x.shape
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x.reshape(ctx.shape) * g
    return Square


case("square_saves_contiguous", check_square, _square(lambda x: x.contiguous()), r"copy")
case("square_saves_reshape_flat", check_square, _square(lambda x: x.reshape(-1)),
     r"copy|not x itself")
# right until trial 53h: an alias made in forward loses the second derivative through x
case("square_saves_view_flat", check_square, _square(lambda x: x.view_as(x)), r"not x itself")


# ---- Exercise 4: Append ----
_N = {}


class AppendGlobalN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        _N["n"] = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, g):
        return g[:, : _N["n"]], g[:, _N["n"]], None


class AppendHalfValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value.half().to(value.dtype)
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, g):
        return g[:, : ctx.n], g[:, ctx.n], None


case("append_n_in_a_global", check_append, AppendGlobalN, r"ctx")
case("append_value_through_float16", check_append, AppendHalfValue, r"float16|half")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
