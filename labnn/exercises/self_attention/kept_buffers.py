"""A causal mask (notebook 01's Exercise 3) cut from a buffer of a fixed size kept outside
the function: in a global, a closure's cell or a default argument (read by name), in a list,
tuple or dict held there, or in an attribute of the function (`_buf[0][:t, :t].clone()`),
wrong for any t past the buffer; an IndexError past its end; a call at 4200, past a buffer
of 4096 kept anywhere.

`t` is the number of tokens; the mask is `[t, t]`, query `i` by key `j`, True where `j <= i`.
"""

from __future__ import annotations

import dis
import re
from typing import Callable, Iterator

import torch

from labnn.exercises.grading import call, expect_shape, expect_tensor, fail
from labnn.exercises.grading.reference_calls import globals_read
from labnn.exercises.self_attention.causal_mask_slips import (
    expect_causal_shape, expect_mask_equal)
from labnn.nn.attention import causal_mask

# a held buffer at most this wide is called once past its size (a bool [n, n] mask of
# 400 MB at most); a wider one is left alone
CALL_UP_TO = 20_000


def buffer_crash(what: str, t: int) -> Callable[[Exception], None]:
    """A `diagnose` for `fn(t)`: an IndexError past the size of a buffer smaller than t."""
    def diagnose(err: Exception) -> None:
        found = re.search(r"index \d+ is out of bounds for dimension \d+ with size (\d+)",
                          str(err))
        if isinstance(err, IndexError) and found and int(found[1]) < t:
            fail(f"{what} raised IndexError ({found[0]}): a buffer of a fixed size, "
                 f"{found[1]}, is too small for t = {t}; build the mask from t, e.g. "
                 "torch.ones(t, t, dtype=torch.bool).tril().")
    return diagnose


def _kept_tensors(fn: Callable) -> dict[str, object]:
    """What `fn` reads from outside its call, by name: the globals it loads (not those it
    assigns: a buffer grown on demand), its closure's cells and its default arguments."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    stored = {i.argval for i in dis.get_instructions(code)
              if i.opname in ("STORE_GLOBAL", "STORE_DEREF")}
    kept = {n: v for n, v in globals_read(fn).items() if n not in stored}
    for n, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            kept.update({} if n in stored else {n: cell.cell_contents})
        except ValueError:  # a cell not assigned yet
            pass
    names = code.co_varnames[:code.co_argcount]
    kept.update(zip(names[len(names) - len(fn.__defaults__ or ()):], fn.__defaults__ or ()))
    return kept


def expect_past_4096(fn: Callable, name: str, largest: int) -> None:
    """One more call of a fast answer (its largest t was 2100), at 4200: a buffer of 4096
    kept anywhere (a dict, a list, an attribute, positions in 1-D), which the search of
    globals does not reach, is too small there. Shape and values only: cheap."""
    if largest != 2100:
        return
    what = f"{name}(4200)"
    got = expect_tensor(call(fn, what, 4200, diagnose=buffer_crash(what, 4200)), what)
    expect_causal_shape(got, 4200, what, fn)
    expect_shape(got, (4200, 4200), what)
    expect_mask_equal(got, causal_mask(4200), what)


def _held(name: str, value: object, depth: int = 2) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors in a list, tuple or dict (nested up to `depth`), by the expression that
    reads them: `_buf[0]`, `cache['mask']`."""
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, item in list(items)[:50]:
        at = f"{name}[{key!r}]"
        if isinstance(item, torch.Tensor):
            yield at, item
        elif depth > 1:
            yield from _held(at, item, depth - 1)


def _buffer_fail(name: str, held: str, shape: list[int]) -> None:
    fail(f"{name} reads `{held}`, a {shape} tensor kept outside the function: a mask of a "
         "fixed size cut to t ([:t, :t]), wrong for any larger t, and the exercise asks for "
         "none: build the mask from t on every call, e.g. "
         "torch.ones(t, t, dtype=torch.bool).tril().")


def expect_no_kept_buffer(fn: Callable, name: str, t: int) -> None:
    """Fail when `fn` reads a 2-D tensor of at least `[t, t]` (t the largest tried) kept
    outside the call: a mask of a fixed size cut to t, cloned or not."""
    for n, value in _kept_tensors(fn).items():
        if isinstance(value, torch.Tensor) and value.dim() == 2 and min(value.shape) >= t:
            _buffer_fail(name, n, list(value.shape))


def expect_no_held_buffer(fn: Callable, name: str, t: int) -> None:
    """A 2-D tensor wider than t (the largest tried) held in a list, tuple or dict that `fn`
    reads from outside, or in an attribute of `fn`: it may be a cache grown on demand, so
    `fn` is called once past its size and failed if it stops there."""
    held = [pair for n, value in _kept_tensors(fn).items() for pair in _held(n, value)]
    held += [(f"{name}.{n}", v) for n, v in getattr(fn, "__dict__", {}).items()
             if isinstance(v, torch.Tensor)]
    for n, value in held:
        size = min(value.shape) if value.dim() == 2 else 0
        if t < size <= CALL_UP_TO and tuple(_call_shape(fn, size + 1)) != (size + 1,) * 2:
            _buffer_fail(name, n, list(value.shape))


def _call_shape(fn: Callable, t: int) -> tuple:
    """The shape of `fn(t)`; `()` when it raises or gives no tensor."""
    try:
        got = fn(t)
    except Exception:
        return ()
    return tuple(got.shape) if isinstance(got, torch.Tensor) else ()
