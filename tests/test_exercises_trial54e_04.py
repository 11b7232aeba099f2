"""Trial 54e (notebook 04): answers that keep state between calls.

Wrong answers that passed: `shared_kv` with its result cached by the shapes (a dict,
`functools.lru_cache`), by the inputs' `id()` or `data_ptr()`, by `id(kv), id(norm)`, or
copied into one output buffer per shape; a `Square` whose forward is cached by `id(x)` or
`x.data_ptr()`; `value_gradients` cached by `data_ptr()`; `weight_gradient` cached by
`data_ptr()` or copied into one output buffer. Misleading: `Square.backward` with 2x cached
by (shape, dtype) ("a tensor made on the CPU"), `value_gradients` and `weight_gradient` cached
by `id()` ("right at the check's sizes, not with T = 1 / B = 1"), an `Append` returning a view
cached by (buffer shape, n) ("returns dtype torch.float64").
"""
import functools

import torch
from checker_helpers import autograd_function as _function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STATE = r"between calls"


# the probe's wrappers (harness.py), one per way of keeping a result
def _key(a):
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), a.dtype, a.device, a.requires_grad)
    if isinstance(a, (list, tuple)):
        return tuple(_key(x) for x in a)
    return ("M", type(a).__name__) if isinstance(a, torch.nn.Module) else ("V", repr(a))


def _ptr(a):
    if isinstance(a, torch.Tensor):
        return (a.data_ptr(), tuple(a.shape))
    return tuple(_ptr(x) for x in a) if isinstance(a, (list, tuple)) else repr(a)


def _cached(fn, key, clone=False):
    cache = {}

    def g(*args):
        k = key(args)
        if k not in cache:
            cache[k] = fn(*args)
        got = cache[k]
        if clone:
            return tuple(r.clone() for r in got) if isinstance(got, tuple) else got.clone()
        return got
    return g


def var_lru(fn):
    current = {}

    @functools.lru_cache(maxsize=None)
    def by_shape(key):
        return fn(*current["args"])

    def g(*args):
        current["args"] = args
        return by_shape(_key(args))
    return g


def var_buffer(fn):
    bufs = {}

    def into(i, r):
        k = (i, tuple(r.shape), r.dtype, r.device)
        if k not in bufs:
            bufs[k] = torch.empty_like(r.detach())
        return bufs[k].copy_(r)

    def g(*args):
        r = fn(*args)
        return tuple(into(i, x) for i, x in enumerate(r)) if isinstance(r, tuple) else into(0, r)
    return g


VARIANTS = {"a": lambda f: _cached(f, _key), "a_clone": lambda f: _cached(f, _key, True),
            "b": var_lru, "c_id": lambda f: _cached(f, lambda a: tuple(map(id, a))),
            "c_ptr": lambda f: _cached(f, _ptr), "d": var_buffer}


# Exercise 1
def shared_kv(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def kv_chunk(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


for _n, _w in VARIANTS.items():
    case(f"kv_{_n}", check_shared_kv, _w(shared_kv), STATE)
case("kv_by_module_ids", check_shared_kv,
     _cached(shared_kv, lambda a: (id(a[2]), id(a[1]), tuple(a[0].shape))), STATE)
RIGHT["kv_right"] = (check_shared_kv, shared_kv)
RIGHT["kv_chunk_views"] = (check_shared_kv, kv_chunk)


# Exercise 2
def _sq_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def _sq_backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return grad_output * 2 * x


def _square_forward_cached(name, key):
    kept = {}

    def forward(ctx, x):
        ctx.save_for_backward(x)
        if key(x) not in kept:
            kept[key(x)] = x * x
        return kept[key(x)]
    return _function(name, forward, _sq_backward)


def _square_twice_x_cached():
    kept = {}

    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        k = (tuple(x.shape), x.dtype)
        if k not in kept:
            kept[k] = 2 * x
        return grad_output * kept[k]
    return _function("Square", _sq_forward, backward)


def _square_buffer():
    bufs = {}

    def forward(ctx, x):
        ctx.save_for_backward(x)
        k = (tuple(x.shape), x.dtype, x.device)
        if k not in bufs:
            bufs[k] = torch.empty_like(x)
        return bufs[k].copy_(x * x)
    return _function("Square", forward, _sq_backward)


case("square_forward_by_data_ptr", check_square,
     _square_forward_cached("Square", lambda x: (x.data_ptr(), tuple(x.shape))), STATE)
case("square_forward_by_id", check_square, _square_forward_cached("Square", id), STATE)
case("square_forward_by_shape", check_square,
     _square_forward_cached("Square", lambda x: (tuple(x.shape), x.dtype, x.device)), STATE)
case("square_output_buffer", check_square, _square_buffer(), STATE)
case("square_backward_2x_by_shape", check_square, _square_twice_x_cached(), STATE)


class _SquareOnClass(torch.autograd.Function):  # named by the two forwards' round, as before
    saved = None

    @staticmethod
    def forward(ctx, x):
        _SquareOnClass.saved = x.detach().clone()
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2 * _SquareOnClass.saved


case("square_x_on_the_class", check_square, _SquareOnClass, r"outside ctx")
RIGHT["square_right"] = (check_square, _function("Square", _sq_forward, _sq_backward))


# Exercise 3
def value_gradients(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total[: g.size(0)] += g
    return total


_ZEROS = {}


def vg_zeros_cloned(read_grads):  # a cached constant, cloned: harmless
    last = read_grads[-1]
    k = (tuple(last.shape), last.dtype, last.device)
    if k not in _ZEROS:
        _ZEROS[k] = torch.zeros_like(last)
    total = _ZEROS[k].clone()
    for g in read_grads:
        total[: g.size(0)] += g
    return total


@functools.lru_cache(maxsize=None)
def _slots(t):  # a pure function of an int: which reads see which slot
    return torch.arange(t)


def vg_lru_of_ints(read_grads):
    t = len(read_grads)
    total = read_grads[-1].new_zeros(read_grads[-1].shape)
    for g in read_grads:
        total.index_add_(0, _slots(t)[: g.size(0)].to(g.device), g)
    return total


for _n in ("a", "c_id", "c_ptr", "d"):
    case(f"vg_{_n}", check_value_gradients, VARIANTS[_n](value_gradients), STATE)
RIGHT["vg_right"] = (check_value_gradients, value_gradients)
RIGHT["vg_zeros_cached_cloned"] = (check_value_gradients, vg_zeros_cloned)
RIGHT["vg_lru_cache_of_ints"] = (check_value_gradients, vg_lru_of_ints)


# Exercise 4
def _ap_forward(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def _ap_backward(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


def _append_view_cached():
    views = {}

    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n].copy_(value)
        ctx.n = n
        k = (tuple(buffer.shape), n)
        if k not in views:
            views[k] = buffer.data[:, : n + 1]
        return views[k]
    return _function("Append", forward, _ap_backward)


def _ap_backward_n_from_grad(ctx, grad):
    n = grad.size(1) - 1
    return grad[:, :n], grad[:, n], None


case("append_view_cached_by_shape", check_append, _append_view_cached(), STATE)
RIGHT["append_right"] = (check_append, _function("Append", _ap_forward, _ap_backward))
RIGHT["append_n_from_grad"] = (check_append,
                               _function("Append", _ap_forward, _ap_backward_n_from_grad))


# Exercise 5
def weight_gradient(xs, gs):
    return gs.flatten(0, 1).t() @ xs.flatten(0, 1)


@functools.lru_cache(maxsize=None)
def _order(d):  # a pure function of an int, a fresh tensor built from it at every call
    return torch.arange(d)


def wg_lru_of_ints(xs, gs):
    return gs.flatten(0, 1).t() @ xs.flatten(0, 1)[:, _order(xs.size(-1)).to(xs.device)]


for _n in ("a", "c_id", "c_ptr", "d"):
    case(f"wg_{_n}", check_weight_gradient, VARIANTS[_n](weight_gradient), STATE)
RIGHT["wg_right"] = (check_weight_gradient, weight_gradient)
RIGHT["wg_lru_cache_of_ints"] = (check_weight_gradient, wg_lru_of_ints)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
