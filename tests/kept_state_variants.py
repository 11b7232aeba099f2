"""Answers that keep state between calls, built from a right answer `fn` (probe 54e): the
wrappers the trials of notebooks 01, 03 and 05 try on each exercise, and the message each must
get (`labnn.exercises.grading.fresh_values`). A result may be a tensor or a tuple of them."""
import functools

import torch

EARLIER = r"returned the result of an earlier call.*cache"
REFILLED = r"refilled in place.*id\(\) or data_ptr\(\)"
BUFFER = r"overwr.*output buffer"
REUSED = r"another result than at its first call on the same values.*data_ptr\(\)"


def _key(a):
    if isinstance(a, torch.Tensor):
        return tuple(a.shape), a.dtype, a.device, a.requires_grad
    return type(a).__name__ if isinstance(a, torch.nn.Module) else repr(a)


def _map(r, f):
    return tuple(f(x) for x in r) if isinstance(r, tuple) else f(r)


def var_a(fn, clone=False):  # a dict keyed on the shapes (a_clone: returns a clone)
    cache = {}

    def g(*args):
        key = tuple(_key(a) for a in args)
        if key not in cache:
            cache[key] = fn(*args)
        return _map(cache[key], lambda t: t.clone()) if clone else cache[key]
    return g


def var_b(fn):  # functools.lru_cache on the shapes
    now = {}
    by_shape = functools.lru_cache(maxsize=None)(lambda key: fn(*now["args"]))

    def g(*args):
        now["args"] = args
        return by_shape(tuple(_key(a) for a in args))
    return g


def var_c(fn, ptr=False):  # a dict keyed on id() (c_ptr: data_ptr() and shape)
    cache = {}

    def g(*args):
        key = tuple((a.data_ptr(), tuple(a.shape)) if ptr and isinstance(a, torch.Tensor)
                    else id(a) for a in args)
        if key not in cache:
            cache[key] = fn(*args)
        return cache[key]
    return g


def var_d(fn):  # one output buffer per shape: buf.copy_(result); return buf
    bufs = {}

    def into(i, r):
        key = (i, tuple(r.shape), r.dtype, r.device)
        if key not in bufs:
            bufs[key] = torch.empty_like(r.detach())
        return bufs[key].copy_(r)

    def g(*args):
        r = fn(*args)
        return tuple(into(i, x) for i, x in enumerate(r)) if isinstance(r, tuple) else into(0, r)
    return g


def variants(earlier=EARLIER, refilled=REFILLED, buffer=BUFFER):
    """name -> (wrapper, the message it must get)."""
    return {"a": (var_a, earlier), "a_clone": (lambda f: var_a(f, True), earlier),
            "b": (var_b, earlier), "c_id": (var_c, refilled),
            # by data_ptr(): where the allocator hands a freed input's address to a new input
            # of the same shape, the check's repeated call already meets the stale result
            "c_ptr": (lambda f: var_c(f, True), f"{refilled}|{REUSED}"), "d": (var_d, buffer)}


VARIANTS = variants()
