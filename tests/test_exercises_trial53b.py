"""Trial 53b: a blind learner trial of notebook 04's exercises (sharing keys and values).

Wrong answers that passed: a weight gradient formed as outer products that dodged the product
count (an `addcmul` loop or broadcast, `broadcast_tensors` or `expand` then `*`, `prod`); a
`Square.backward` asking forward-mode autograd (`torch.func.jvp`, `forward_ad`) for the
derivative, or one that cannot be differentiated again (`x.detach()`, `torch.no_grad()`, also
in `Append`); a `Square` written with `einsum("ij,ij->ij")` (only 2-D x tried); value
gradients in a fixed buffer of 1024 rows, or computed by autograd; float64 computing cast
back to the inputs' dtype, in every exercise. Misleading: a sum started from `empty_like`.
"""
import torch
import torch.nn.functional as F
from checker_helpers import autograd_function as _function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
OUTER = r"(?i)outer product"


# Exercise 5: outer products, however spelled
def wg_addcmul_loop(xs, gs):
    out = xs.new_zeros(gs.shape[-1], xs.shape[-1])
    for t in range(xs.shape[0]):
        for b in range(xs.shape[1]):
            out = out.addcmul(gs[t, b][:, None], xs[t, b][None, :])
    return out


def wg_addcmul_broadcast(xs, gs):
    return torch.addcmul(xs.new_zeros(()), gs[..., :, None], xs[..., None, :]).sum((0, 1))


def wg_broadcast_tensors(xs, gs):
    a, b = torch.broadcast_tensors(gs[..., :, None], xs[..., None, :])
    return (a * b).sum((0, 1))


def wg_expand_mul(xs, gs):
    t, b, d_out, d_in = *gs.shape, xs.shape[-1]
    return (gs.unsqueeze(-1).expand(t, b, d_out, d_in)
            * xs.unsqueeze(-2).expand(t, b, d_out, d_in)).sum((0, 1))


def wg_prod(xs, gs):
    a, b = torch.broadcast_tensors(gs[..., :, None], xs[..., None, :])
    return torch.stack([a, b]).prod(0).sum((0, 1))


def wg_plain_broadcast(xs, gs):
    return (gs[..., :, None] * xs[..., None, :]).sum((0, 1))


for _fn in (wg_addcmul_loop, wg_addcmul_broadcast, wg_broadcast_tensors, wg_expand_mul, wg_prod):
    case(_fn.__name__, check_weight_gradient, _fn, OUTER)
case("wg_plain_broadcast", check_weight_gradient, wg_plain_broadcast, r"(?i)outer products.*10")
case("wg_double_back", check_weight_gradient,
     lambda xs, gs: (gs.flatten(0, 1).double().T @ xs.flatten(0, 1).double()).to(xs.dtype),
     r"float64|double")
RIGHT["wg_mm"] = (check_weight_gradient, lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1))
RIGHT["wg_einsum"] = (check_weight_gradient, lambda xs, gs: torch.einsum("tbo,tbi->oi", gs, xs))
RIGHT["wg_tensordot"] = (check_weight_gradient,
                         lambda xs, gs: torch.tensordot(gs, xs, dims=([0, 1], [0, 1])))
RIGHT["wg_transposed_product"] = (check_weight_gradient,
                                  lambda xs, gs: (xs.flatten(0, 1).T @ gs.flatten(0, 1)).T)
RIGHT["wg_conv1d"] = (check_weight_gradient, lambda xs, gs: F.conv1d(
    xs.flatten(0, 1).T[:, None], gs.flatten(0, 1).T[:, None, :])[..., 0].T)


# Exercise 2: Square
def _save(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def _jvp(ctx, g):
    (x,) = ctx.saved_tensors
    return torch.func.jvp(lambda t: t * t, (x,), (g,))[1]


def _forward_ad(ctx, g):
    import torch.autograd.forward_ad as fw
    (x,) = ctx.saved_tensors
    with fw.dual_level():
        d = fw.make_dual(x, g)
        return fw.unpack_dual(d * d).tangent


def _no_grad(ctx, g):
    (x,) = ctx.saved_tensors
    with torch.no_grad():
        return 2 * x * g


def _einsum(ctx, x):
    ctx.save_for_backward(x)
    return torch.einsum("ij,ij->ij", x, x)


case("sq_func_jvp", check_square, _function("Square", _save, _jvp), r"jvp")
case("sq_forward_ad", check_square, _function("Square", _save, _forward_ad), r"forward_ad")
case("sq_double_back", check_square, _function("Square", _save, lambda ctx, g: (
    2 * ctx.saved_tensors[0].double() * g.double()).to(g.dtype)), r"float64|double")
case("sq_backward_x_detached", check_square, _function("Square", _save, lambda ctx, g: (
    2 * ctx.saved_tensors[0].detach() * g)), r"detach")
case("sq_backward_g_detached", check_square, _function("Square", _save, lambda ctx, g: (
    2 * ctx.saved_tensors[0] * g.detach())), r"detach")
case("sq_backward_no_grad", check_square, _function("Square", _save, _no_grad), r"no_grad")
case("sq_einsum_2d", check_square, _function("Square", _einsum, lambda ctx, g: (
    2 * torch.einsum("ij,ij->ij", ctx.saved_tensors[0], g))), r"(?i)any shape|dimension")
RIGHT["sq_right"] = (check_square, _function("Square", _save, lambda ctx, g: (
    2 * ctx.saved_tensors[0] * g)))
RIGHT["sq_addcmul"] = (check_square, _function("Square", _save, lambda ctx, g: torch.addcmul(
    torch.zeros_like(g), g, ctx.saved_tensors[0], value=2)))
RIGHT["sq_needs_input_grad"] = (check_square, _function("Square", _save, lambda ctx, g: (
    2.0 * ctx.saved_tensors[0] * g if ctx.needs_input_grad[0] else None)))


# Exercise 3: value gradients
def vg_fixed1024(read_grads):
    out = read_grads[0].new_zeros(1024, read_grads[0].shape[1])
    for g in read_grads:
        out[:len(g)] += g
    return out[:len(read_grads)]


def vg_autograd(read_grads):
    v = read_grads[0].new_zeros(len(read_grads), read_grads[0].shape[1], requires_grad=True)
    return torch.autograd.grad([v[:t + 1] for t in range(len(read_grads))], v, read_grads)[0]


def vg_double_back(read_grads):
    out = torch.zeros(len(read_grads), read_grads[0].shape[1], dtype=torch.float64,
                      device=read_grads[0].device)
    for g in read_grads:
        out[:len(g)] += g.double()
    return out.to(read_grads[0].dtype)


def vg_empty_like(read_grads):
    out = torch.empty_like(read_grads[-1])
    for g in read_grads:
        out[:len(g)] += g
    return out


def _vg_right(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[:len(g)] += g
    return out


def _vg_padded(read_grads):
    return torch.stack([F.pad(g, (0, 0, 0, len(read_grads) - len(g)))
                        for g in read_grads]).sum(0)


def _vg_index_add(read_grads):
    cat = torch.cat(read_grads)
    idx = torch.cat([torch.arange(len(g), device=cat.device) for g in read_grads])
    return cat.new_zeros(len(read_grads), cat.shape[1]).index_add_(0, idx, cat)


def _vg_empty_filled(read_grads):
    out = torch.empty_like(read_grads[-1]).zero_()
    for g in read_grads:
        out[:len(g)] += g
    return out


case("vg_fixed1024", check_value_gradients, vg_fixed1024, r"(?i)fixed|1024")
case("vg_autograd", check_value_gradients, vg_autograd, r"autograd")
case("vg_double_back", check_value_gradients, vg_double_back, r"float64|double")
case("vg_empty_like", check_value_gradients, vg_empty_like, r"empty.*zeros")
for _fn in (_vg_right, _vg_padded, _vg_index_add, _vg_empty_filled):
    RIGHT[_fn.__name__.lstrip("_")] = (check_value_gradients, _fn)


# Exercise 4: Append
def _push(ctx, top, value, buffer):
    ctx.n = top.size(1)
    buffer.data[:, ctx.n] = value
    return buffer.data[:, :ctx.n + 1]


def _push_double(ctx, top, value, buffer):
    ctx.n = top.size(1)
    buffer.data[:, ctx.n] = value.double().to(buffer.dtype)
    return buffer.data[:, :ctx.n + 1]


_SPLIT = lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n], None)  # noqa: E731
case("ap_top_detached", check_append, _function("Append", _push, lambda ctx, g: (
    g[:, :ctx.n].detach(), g[:, ctx.n], None)), r"detach")
case("ap_double_back", check_append, _function("Append", _push_double, _SPLIT),
     r"float64|double")
RIGHT["ap_right"] = (check_append, _function("Append", _push, _SPLIT))
RIGHT["ap_clone"] = (check_append, _function("Append", _push, lambda ctx, g: (
    g[:, :-1].clone(), g[:, -1].clone(), None)))


# Exercise 1: shared keys and values
def kv_double_back(m, norm, kv, n_heads):
    b, d = m.shape
    y = F.linear(norm(m).double(), kv.weight.double(), kv.bias.double()).to(m.dtype)
    k, v = y.split(d, -1)
    return k.view(b, n_heads, -1), v.view(b, n_heads, -1)


def _kv_right(m, norm, kv, n_heads):
    b, d = m.shape
    k, v = kv(norm(m)).split(d, -1)
    return k.view(b, n_heads, -1), v.view(b, n_heads, -1)


case("kv_double_back", check_shared_kv, kv_double_back, r"float64|double")
RIGHT["kv_right"] = (check_shared_kv, _kv_right)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
