"""Trial 48b: a blind learner trial of notebook 04's five exercises (270 answers).

Wrong answers that passed: a `Square` never tried in float32 (`x.double()` in forward, a
float64 result, `ctx.save_for_backward(x.double())`); a `Square` whose backward lets
autograd find the derivative (`torch.autograd.grad` under enable_grad, `torch.func.vjp`);
`ctx.save_for_backward(2 * x)`, a scaled copy of x; a `shared_kv` and a `weight_gradient`
that keep their result (or norm(m), or kv's weights) between calls, keyed by the sizes;
labnn's own `StepLinear` behind `weight_gradient`. Messages: a `Square` saving a view of x
got torch's raw "view was created in no_grad mode" error (the answer is right); a small
constant added (1e-9, an eps a little off) was blamed on a `.float()`; a half-precision
gradient of `Append` and a bfloat16 one of `Square` got messages over 400 characters; an
`Append` writing through `buffer.detach()` was told to use `buffer.data` "not buffer
itself"; kv's weights cached by shape were blamed on B = 1."""
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (
    check_append, check_shared_kv, check_square, check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STATE = r"(?i)between calls|kept|keeps|cache"


def _square(forward, backward=None):
    """A Square Function from `forward(ctx, x)` and `backward(ctx, g)` (default: reads
    the saved x, returns 2 * x * g)."""
    def standard(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g
    return type("Square", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward or standard)})


def _save(how):
    def forward(ctx, x):
        ctx.save_for_backward(how(x))
        return x * x
    return forward


def _fwd_double(ctx, x):
    ctx.save_for_backward(x)
    x = x.double()
    return x * x


def _fwd_to_float64(ctx, x):
    ctx.save_for_backward(x)
    return (x * x).to(torch.float64)


def _bwd_saved_double(ctx, g):
    (x,) = ctx.saved_tensors
    return (2 * x * g).to(g.dtype)


def _bwd_autograd_grad(ctx, g):
    (x,) = ctx.saved_tensors
    with torch.enable_grad():
        x_ = x.detach().requires_grad_()
        (out,) = torch.autograd.grad(x_ ** 2, x_, g)
    return out


def _bwd_func_vjp(ctx, g):
    (x,) = ctx.saved_tensors
    _, vjp = torch.func.vjp(torch.square, x)
    return vjp(g)[0]


def _bwd_saved_derivative(ctx, g):
    (two_x,) = ctx.saved_tensors
    return two_x * g


def _bwd_view(ctx, g):
    (x,) = ctx.saved_tensors
    return 2 * x.view(g.shape) * g


def _bwd_plus(ctx, g):
    (x,) = ctx.saved_tensors
    return 2 * x * g + 1e-9


def _bwd_bfloat16(ctx, g):
    (x,) = ctx.saved_tensors
    return 2 * x * g.to(torch.bfloat16).to(x.dtype)


def _fwd_plus(ctx, x):
    ctx.save_for_backward(x)
    return x * x + 1e-9


def _fwd_factor(ctx, x):
    ctx.save_for_backward(x)
    return x * x * (1 + 1e-8)


NOT_FLOAT = r"^(?!.*\.float\(\))(?!.*float32 step).*constant"
case("square_double_in_forward", check_square, _square(_fwd_double), r"float32.*float64")
case("square_result_to_float64", check_square, _square(_fwd_to_float64), r"float32.*float64")
case("square_saves_x_double", check_square, _square(_save(lambda x: x.double()),
                                                     _bwd_saved_double), r"copy.*float64")
case("square_autograd_grad_in_backward", check_square, _square(_save(lambda x: x),
                                                               _bwd_autograd_grad),
     r"torch\.autograd\.grad.*derivative")
case("square_func_vjp_in_backward", check_square, _square(_save(lambda x: x), _bwd_func_vjp),
     r"torch\.func\.vjp.*derivative")
case("square_saves_2x", check_square, _square(_save(lambda x: 2 * x), _bwd_saved_derivative),
     r"2 \* x.*memory.*save_for_backward\(x\)")
case("square_backward_plus_1e_9", check_square, _square(_save(lambda x: x), _bwd_plus),
     NOT_FLOAT)
case("square_forward_plus_1e_9", check_square, _square(_fwd_plus), NOT_FLOAT)
case("square_forward_times_1_plus_1e_8", check_square, _square(_fwd_factor),
     r"^(?!.*\.float\(\)).*constant")
case("square_gradient_through_bfloat16", check_square, _square(_save(lambda x: x),
                                                               _bwd_bfloat16),
     r"bfloat16|half")
for tag, how in (("slice", lambda x: x[:]), ("view_as", lambda x: x.view_as(x)),
                 ("reshape", lambda x: x.reshape(x.shape))):
    # right until trial 53h: an alias made in forward loses the second derivative through x
    case(f"square_saves_{tag}", check_square, _square(_save(how), _bwd_view),
         r"not x itself")
# right until trial 49b tried a transposed x: x.view(-1) fails there
case("square_saves_view_minus_1", check_square,
     _square(_save(lambda x: x.view(-1)), _bwd_view), r"not contiguous|not x itself")


def _fwd_x_and_y(ctx, x):
    y = x * x
    ctx.save_for_backward(x, y)
    return y


def _bwd_x_and_y(ctx, g):
    x, _ = ctx.saved_tensors
    return 2 * x * g


RIGHT["square_saves_x_and_y"] = (check_square, _square(_fwd_x_and_y, _bwd_x_and_y))


# ---- Exercise 1: shared_kv ----
def _heads(y, n_heads):
    k, v = y.chunk(2, -1)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


_KEPT = {}


def kv_result_kept(m, norm, kv, n_heads):
    key = ("kv", tuple(m.shape), n_heads, m.dtype, m.device)
    if key not in _KEPT:
        _KEPT[key] = _heads(kv(norm(m)), n_heads)
    return _KEPT[key]


def kv_norm_kept(m, norm, kv, n_heads):
    key = ("norm", tuple(m.shape), m.dtype, m.device)
    if key not in _KEPT:
        _KEPT[key] = norm(m)
    return _heads(kv(_KEPT[key]), n_heads)


def kv_weights_kept(m, norm, kv, n_heads):
    key = ("weight", tuple(kv.weight.shape), m.dtype, m.device)
    if key not in _KEPT:
        _KEPT[key] = (kv.weight, kv.bias)
    return _heads(F.linear(norm(m), *_KEPT[key]), n_heads)


def kv_ln_plus_1e_8(m, norm, kv, n_heads):
    mu, var = m.mean(-1, keepdim=True), m.var(-1, unbiased=False, keepdim=True)
    normed = (m - mu) / torch.sqrt(var + norm.eps + 1e-8) * norm.weight + norm.bias
    return _heads(kv(normed), n_heads)


case("kv_result_kept_by_shape", check_shared_kv, kv_result_kept, STATE)
case("kv_norm_kept_by_shape", check_shared_kv, kv_norm_kept, STATE)
case("kv_weights_kept_by_shape", check_shared_kv, kv_weights_kept, STATE)
case("kv_ln_eps_plus_1e_8", check_shared_kv, kv_ln_plus_1e_8, r"constant \(an eps\)")


# ---- Exercise 3: value_gradients ----
def vg_plus_1e_9(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[: len(g)] += g
    return out + 1e-9


case("vg_plus_1e_9", check_value_gradients, vg_plus_1e_9, NOT_FLOAT)


# ---- Exercise 4: Append ----
class _AppendBase(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class AppendHalfGrad(_AppendBase):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n].half(), None


class AppendPlus1e9(_AppendBase):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n] + 1e-9, None


class AppendDetachedBuffer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buf = buffer.detach()
        buf[:, n] = value
        ctx.n = n
        return buf[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("append_half_grad", check_append, AppendHalfGrad, r"half|float16")
case("append_plus_1e_9", check_append, AppendPlus1e9, r"constant \(an eps\)")
case("append_detached_buffer", check_append, AppendDetachedBuffer,
     r"detach\(\).*version counter.*buffer\.data")


# ---- Exercise 5: weight_gradient ----
def wg_result_kept(xs, gs):
    key = ("wg", xs.shape, gs.shape, xs.dtype, xs.device)
    if key not in _KEPT:
        _KEPT[key] = gs.flatten(0, 1).T @ xs.flatten(0, 1)
    return _KEPT[key]


def wg_step_linear(xs, gs):
    from labnn.feedback.step_linear import StepLinear
    lin = torch.nn.Linear(xs.shape[-1], gs.shape[-1], bias=False).to(xs)
    with torch.enable_grad():
        sl = StepLinear(lin, xs.shape[0], xs[0])
        ys = [sl(x) for x in xs]
        return torch.autograd.grad(ys, lin.weight, list(gs))[0]


def wg_times_1_plus_1e_9(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) * (1 + 1e-9)


def wg_plus_1e_9(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) + 1e-9


case("wg_result_kept_by_shape", check_weight_gradient, wg_result_kept, STATE)
case("wg_labnn_step_linear", check_weight_gradient, wg_step_linear, r"StepLinear")
case("wg_times_1_plus_1e_9", check_weight_gradient, wg_times_1_plus_1e_9,
     r"^(?!.*\.float\(\)).*constant")
case("wg_plus_1e_9", check_weight_gradient, wg_plus_1e_9, NOT_FLOAT)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
