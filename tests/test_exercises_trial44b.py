"""Learner trial 44 (b), notebook 04: answers its checkers accepted or misnamed. Append: a
gradient accumulated outside autograd (on the module, or a global keyed by the buffer) with
no gradient for `top`, a backward that writes into the incoming grad, `ctx.mark_dirty`.
Square: x kept on the class or in a global, a copy of x saved (`x.clone()`), `x.data` saved.
shared_kv, value_gradients, weight_gradient: float64 hard-coded, `.squeeze()` (wrong at
B = 1, T = 1, D_h = 1), `read_grads[1]` (no such read at T = 1), `.view` on a non-contiguous
input, an in-place no-op that moves the caller's version counter, the notebook's own modules
used instead of the arguments, a constant factor taken for an average, the list reversed in
place, a width written as a number; and the right answers these checks must accept."""
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests
from torch.autograd.function import once_differentiable

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)
from labnn.feedback import FeedbackKVConfig, FeedbackTransformerKV

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
Fn = torch.autograd.Function


# ---- Exercise 4: Append ----
def _forward(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def _append(name, backward, forward=_forward):
    return type(name, (Fn,), {"forward": staticmethod(forward),
                              "backward": staticmethod(backward)})


ACC = {}


def _acc_forward(ctx, top, value, buffer):
    """The notebook's section 5 accumulator: state keyed by the buffer, reset at n = 0."""
    n = _forward(ctx, top, value, buffer).size(1) - 1
    if n == 0 or ACC.get(id(buffer)) is None or ACC[id(buffer)].shape != buffer.shape:
        ACC[id(buffer)] = torch.zeros_like(buffer)
    ctx.acc = ACC[id(buffer)]
    return buffer.data[:, : n + 1]


def _acc_no_top(ctx, grad):
    ctx.acc[:, : ctx.n + 1] += grad
    return None, ctx.acc[:, ctx.n].clone(), None


def _acc_top_zero(ctx, grad):
    ctx.acc[:, : ctx.n + 1] += grad
    return grad[:, : ctx.n] * 0, ctx.acc[:, ctx.n].clone(), None


def _acc_value_only(ctx, grad):
    """Right gradients in one backward; a second one through the same graph adds again."""
    ctx.acc[:, ctx.n] += grad[:, ctx.n]
    return grad[:, : ctx.n], ctx.acc[:, ctx.n].clone(), None


def _writes_grad(ctx, grad):
    g_value = grad[:, ctx.n].clone()
    grad[:, ctx.n] = 0
    return grad[:, : ctx.n], g_value, None


def _mark_dirty(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, n] = value
    ctx.n = n
    ctx.mark_dirty(buffer)
    return buffer[:, : n + 1]


def _right(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


STATE = r"(?s)outside autograd.*`top`|`top`.*outside autograd"
case("ap_module_accumulator", check_append,
     _append("AccNoTop", _acc_no_top, _acc_forward), STATE)
case("ap_accumulator_top_zero", check_append,
     _append("AccTopZero", _acc_top_zero, _acc_forward), STATE)
case("ap_accumulator_second_backward", check_append,
     _append("AccValue", _acc_value_only, _acc_forward),
     r"(?s)second backward.*outside autograd")
case("ap_backward_writes_grad", check_append, _append("WritesGrad", _writes_grad),
     r"(?s)changed (the incoming )?`?grad`? in place.*grad\[:, :n\], grad\[:, n\]")
case("ap_mark_dirty", check_append, _append("MarkDirty", _right, _mark_dirty),
     r"(?s)mark_dirty.*buffer\.data\[:, :n \+ 1\]")


def _needs_input_grad(ctx, grad):
    return (grad.narrow(1, 0, ctx.n) if ctx.needs_input_grad[0] else None,
            grad.select(1, ctx.n) if ctx.needs_input_grad[1] else None, None)


def _save_top(ctx, top, value, buffer):
    ctx.save_for_backward(top, value)
    return _forward(ctx, top, value, buffer)


def _saved_top_backward(ctx, grad):
    top, _ = ctx.saved_tensors
    return grad[:, : top.size(1)], grad[:, top.size(1)], None


RIGHT["ap_notebook"] = (check_append, _append("Append", _right))
RIGHT["ap_needs_input_grad"] = (check_append, _append("Narrow", _needs_input_grad))
RIGHT["ap_last_slot"] = (check_append, _append("Last", lambda ctx, g: (g[:, :-1], g[:, -1],
                                                                         None)))
RIGHT["ap_saves_top"] = (check_append, _append("SaveTop", _saved_top_backward, _save_top))
RIGHT["ap_extra_none"] = (check_append, _append("Extra", lambda ctx, g: (*_right(ctx, g),
                                                                          None)))


# ---- Exercise 2: Square ----
def _square(name, forward, backward):
    return type(name, (Fn,), {"forward": staticmethod(forward),
                              "backward": staticmethod(backward)})


class SqClassAttr(Fn):
    @staticmethod
    def forward(ctx, x):
        SqClassAttr.saved = x.detach().clone()
        return x * x

    @staticmethod
    def backward(ctx, g):
        return 2 * SqClassAttr.saved * g


STORE = {}
SqGlobal = _square("SqGlobal", lambda ctx, x: STORE.update(x=x.detach().clone()) or x * x,
                   lambda ctx, g: 2 * STORE["x"] * g)
OUTSIDE = r"(?s)(on the class|in a global).*second forward.*ctx\.save_for_backward\(x\)"
case("sq_class_attribute", check_square, SqClassAttr, OUTSIDE)
case("sq_global_dict", check_square, SqGlobal, OUTSIDE)


def _saved_back(ctx, g):
    (x,) = ctx.saved_tensors
    return 2 * x * g


SqSaveClone = _square("SqSaveClone",
                      lambda ctx, x: ctx.save_for_backward(x.clone()) or x * x, _saved_back)
SqCtxClone = _square("SqCtxClone", lambda ctx, x: setattr(ctx, "x", x.clone()) or x * x,
                     lambda ctx, g: 2 * ctx.x * g)
SqSaveData = _square("SqSaveData",
                     lambda ctx, x: ctx.save_for_backward(x.data) or x * x, _saved_back)
COPY = r"(?s)cop(y|ies) of x.*memory.*ctx\.save_for_backward\(x\)"
case("sq_save_clone", check_square, SqSaveClone, COPY)
case("sq_ctx_clone", check_square, SqCtxClone, COPY)
case("sq_save_data", check_square, SqSaveData,
     r"(?s)^(?!.*ctx\.x = x).*x\.data.*version counter")


def _save(ctx, x):
    ctx.save_for_backward(x)
    return x * x


class SqOnce(Fn):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SqSetup(Fn):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


RIGHT["sq_notebook"] = (check_square, _square("Square", _save, _saved_back))
RIGHT["sq_extra_none"] = (check_square, _square("SqNone", _save,
                                                lambda ctx, g: (_saved_back(ctx, g), None)))
RIGHT["sq_exp_log"] = (check_square, _square(
    "SqExpLog", lambda ctx, x: ctx.save_for_backward(x) or torch.exp(2 * torch.log(x.abs())),
    _saved_back))
# SqOnce was taken as right here; trial 61 found it silently wrong (test_exercises_trial61_04.py)
RIGHT["sq_setup_context"] = (check_square, SqSetup)


# ---- Exercise 1: shared_kv ----
def kv_right(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def kv_float64(m, norm, kv, n_heads):
    x = F.layer_norm(m.double(), m.shape[-1:], norm.weight.double(), norm.bias.double(),
                     norm.eps)
    y = F.linear(x, kv.weight.double(), kv.bias.double())
    return y.unflatten(-1, (2, n_heads, -1)).unbind(1)


def kv_squeeze_output(m, norm, kv, n_heads):
    y, d = kv(norm(m)).squeeze(), m.size(-1)
    return y[:, :d].reshape(m.size(0), n_heads, -1), y[:, d:].reshape(m.size(0), n_heads, -1)


def kv_squeeze_result(m, norm, kv, n_heads):
    k, v = kv_right(m, norm, kv, n_heads)
    return k.squeeze(), v.squeeze()


def kv_version(m, norm, kv, n_heads):
    with torch.no_grad():
        m.mul_(1.0)
    return kv_right(m, norm, kv, n_heads)


FAST = FeedbackTransformerKV(FeedbackKVConfig(vocab_size=20, d_model=32, n_heads=4,
                                              n_layers=3, d_ff=64, max_distance=16))


def kv_globals(m, norm, kv, n_heads):
    return kv_right(m, FAST.norm_mem, FAST.kv, n_heads)


def kv_functional(m, norm, kv, n_heads):
    x = F.layer_norm(m, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    d = m.shape[-1]
    k, v = F.linear(x, kv.weight[:d], kv.bias[:d]), F.linear(x, kv.weight[d:], kv.bias[d:])
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


FLOAT64 = r"(?s)float32 inputs.*float64.*(\.double\(\)|float64 written)"
case("kv_float64_hardcoded", check_shared_kv, kv_float64, FLOAT64)
case("kv_squeeze_output", check_shared_kv, kv_squeeze_output, r"(?s)B = 1.*squeeze")
case("kv_squeeze_result", check_shared_kv, kv_squeeze_result, r"(?s)= 1.*squeeze")
case("kv_version_bump", check_shared_kv, kv_version, r"(?s)`m` in place.*version")
case("kv_notebook_globals", check_shared_kv, kv_globals,
     r"(?s)^(?!.*float32 tensor met).*not the ones passed in.*FAST")
RIGHT["kv_notebook"] = (check_shared_kv, kv_right)
RIGHT["kv_functional"] = (check_shared_kv, kv_functional)
RIGHT["kv_unflatten"] = (check_shared_kv, lambda m, norm, kv, n_heads: tuple(
    kv(norm(m)).unflatten(-1, (2, n_heads, -1)).unbind(1)))


# ---- Exercise 3: value_gradients ----
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total[: g.size(0)] += g
    return total


def vg_float64(read_grads):
    out = torch.zeros(len(read_grads), read_grads[-1].size(1), dtype=torch.float64)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_squeeze(read_grads):
    return torch.stack([F.pad(g, (0, 0, 0, len(read_grads) - g.size(0)))
                        for g in read_grads]).sum(0).squeeze()


def vg_read_1(read_grads):
    out = read_grads[0].new_zeros(len(read_grads), read_grads[1].shape[1])
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_reverse(read_grads):
    read_grads.reverse()
    return vg_right(read_grads[::-1])


def vg_width_4(read_grads):
    out = torch.zeros(len(read_grads), 4, dtype=read_grads[0].dtype)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g[:, :4]
    return out


def vg_version(read_grads):
    read_grads[0].mul_(1.0)
    return vg_right(read_grads)


def vg_flat_view(read_grads):
    """Slots 0..t are the first (t + 1)·F numbers of a row-major [T, F]: right while the
    reads are contiguous."""
    total = torch.zeros_like(read_grads[-1]).view(-1)
    for g in read_grads:
        total[: g.numel()] += g.view(-1)
    return total.view(len(read_grads), -1)


def vg_autograd(read_grads):
    g = read_grads[-1]
    v = torch.zeros(len(read_grads), g.size(1), dtype=g.dtype, device=g.device,  # where g is
                    requires_grad=True)
    return torch.autograd.grad([v[: t + 1] for t in range(len(read_grads))], v, read_grads)[0]


case("vg_float64_hardcoded", check_value_gradients, vg_float64, FLOAT64)
case("vg_squeeze", check_value_gradients, vg_squeeze, r"(?s)= 1.*squeeze")
case("vg_read_grads_1", check_value_gradients, vg_read_1,
     r"(?s)T = 1.*read_grads\[1\].*read_grads\[-1\]")
case("vg_reverse_in_place", check_value_gradients, vg_reverse,
     r"(?s)^(?!.*read_grads\[i\] = ).*revers")
case("vg_width_written_4", check_value_gradients, vg_width_4,
     r"(?s)width.*number.*read_grads\[-1\]\.size\(1\)")
case("vg_view_non_contiguous", check_value_gradients, vg_flat_view,
     r"(?s)\.view.*not contiguous.*(reshape|flatten)")
case("vg_version_bump", check_value_gradients, vg_version, r"(?s)in place.*version")
RIGHT["vg_notebook"] = (check_value_gradients, vg_right)
case("vg_autograd", check_value_gradients, vg_autograd, r"autograd")  # refused since trial 53b
RIGHT["vg_pad_sum"] = (check_value_gradients, lambda r: torch.stack(
    [F.pad(g, (0, 0, 0, len(r) - g.size(0))) for g in r]).sum(0))


# ---- Exercise 5: weight_gradient ----
def wg_right(xs, gs):
    return gs.flatten(0, 1).t() @ xs.flatten(0, 1)


def wg_version(xs, gs):
    xs.mul_(1.0)
    return wg_right(xs, gs)


def wg_loop(xs, gs):
    w = xs.new_zeros(gs.size(-1), xs.size(-1))
    for t in range(xs.size(0)):
        w += gs[t].T @ xs[t]
    return w


case("wg_float64_hardcoded", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T.double() @ xs.flatten(0, 1).double(), FLOAT64)
case("wg_squeeze", check_weight_gradient,
     lambda xs, gs: torch.einsum("tbo,tbi->oi", gs.squeeze(), xs.squeeze()),
     r"(?s)= 1.*squeeze")
case("wg_learning_rate", check_weight_gradient, lambda xs, gs: 0.1 * wg_right(xs, gs),
     r"(?s)^(?!.*averaged).*0\.1.*constant")
case("wg_version_bump", check_weight_gradient, wg_version, r"(?s)`xs` in place.*version")
RIGHT["wg_notebook"] = (check_weight_gradient, wg_right)
RIGHT["wg_einsum"] = (check_weight_gradient,
                      lambda xs, gs: torch.einsum("tbo,tbi->oi", gs, xs))
# right until trial 49b, which found the exercise's one product unchecked
case("wg_loop", check_weight_gradient, wg_loop, r"one matrix product")
case("wg_bmm_sum", check_weight_gradient,
     lambda xs, gs: torch.bmm(gs.transpose(1, 2), xs).sum(0), r"one matrix product")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
