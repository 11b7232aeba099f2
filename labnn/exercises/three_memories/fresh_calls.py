"""Notebook 05's answers that keep state between calls, which the checks' other rounds miss
(each differs from the ones before in its sizes or dtype): `make_recall` on its own input
tensors refilled in place (a result kept by their `id()` or `data_ptr()`), and a y or x kept
per shape and only partly rewritten; `accuracy_by_distance` through
`grading.fresh_values.expect_fresh`, then on labels where fewer distances occur (a
NaN-filled result kept per `max_distance`, never reset, shows an earlier call's numbers);
`cache_bytes` on a copy of each cache, grown in place as a model grows it when generating
(a count kept by `id(cache)`, or stored on the cache). `other_exercise` names the function of
another of the four exercises handed to a check, by its skeleton's argument names.

Dimension letters (the package legend): `N` examples, `T` tokens per example, `B` batch,
`H` heads, `M` positions held, `D_h` head width.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from labnn.data.recall import IGNORE, accuracy_by_distance, make_recall
from labnn.exercises.grading import call, close, expect_close, expect_tensor, fail
from labnn.exercises.grading.fresh_values import AFRESH, REFILLED, expect_fresh
from labnn.feedback.kv import KVState
from labnn.nn.kv_cache import KVBuffer
from labnn.xl.cache import XLCache

KEPT = "a result kept between calls"
SKELETONS = {"reach": "memory, n_layers, span, position", "cache_bytes": "cache",
             "make_recall": "filler, values, positions",
             "accuracy_by_distance": "logits, y, max_distance"}


def other_exercise(fn: Callable, name: str) -> None:
    """Fail when `fn` takes the arguments of another exercise's skeleton than `name`'s."""
    try:
        takes = ", ".join(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return
    for other, args in SKELETONS.items():
        if takes == args != SKELETONS[name]:
            fail(f"your function takes ({takes}), the arguments of {other}, another exercise "
                 f"of this notebook: this check tests {name}({SKELETONS[name]}): pass it "
                 f"your my_{name}.")


def _equal(got, want: torch.Tensor) -> bool:
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(
        got.long(), want)


def stale_part(what: str, out, want: tuple, earlier: tuple) -> None:
    """Fail when the x or y of `out` differs from `want` only where it holds what an earlier
    call returned (`earlier`, its x and y): a tensor kept per shape, rewritten in part."""
    for name, got, right, old in zip("xy", out, want, earlier):
        if not isinstance(got, torch.Tensor) or got.shape != right.shape or _equal(got, right):
            continue
        wrong = got.long() != right
        if old.shape == right.shape and torch.equal(got.long()[wrong], old[wrong]):
            n, t = wrong.nonzero()[0].tolist()
            new = ("filler.clone()" if name == "x" else f"torch.full_like(filler, {IGNORE})")
            fail(f"{what}: {name} holds {got[n, t].item()} at [n={n}, t={t}], expected "
                 f"{right[n, t].item()}: what an earlier call left there. {name} is a tensor "
                 "kept between calls (one per shape?) and only partly rewritten: make a new "
                 f"one at every call ({new}).")


def recall_refilled(fn: Callable, given: tuple, returned: tuple) -> tuple:
    """`fn` on its last call's input tensors (`given`, which gave `returned`) refilled in
    place with other ids, values and positions: the x and y of that call again are a result
    kept by the tensors' `id()` or `data_ptr()`. Returns `(what, out, want, earlier)` for
    the caller's diagnosis when it differs otherwise (None when right)."""
    earlier = tuple(r.detach().clone() for r in returned)
    g = torch.Generator().manual_seed(54)
    new = (torch.randint(5000, 5100, given[0].shape, generator=g),
           torch.tensor([7, 9000, 1, 42, 0]), torch.tensor([5, 2, 0, 7, 3]))
    with torch.no_grad():
        for a, b in zip(given, new):
            a.copy_(b)
    what = f"make_recall(filler, values, positions), {REFILLED}"
    out = call(fn, what, *given)
    want = make_recall(*new)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(f"{what} returned {type(out).__name__}, not a pair (x, y).")
    if all(_equal(o, w) for o, w in zip(out, want)):
        return None
    if all(_equal(o, k) for o, k in zip(out, earlier)):
        fail(f"{what}, returned the earlier x and y: {KEPT}, keyed on the tensors "
             f"themselves (id() or data_ptr()); {AFRESH}")
    stale_part(what, out, want, earlier)
    return what, out, want, earlier


def _same(got, want: torch.Tensor) -> bool:
    return isinstance(got, torch.Tensor) and close(got.double(), want.double(), atol=1e-6)


class _Deferred(Exception):
    """A result that differs, kept for the end of the check (`args[0]`: what fails it)."""


def _later(got, want: torch.Tensor, said: str) -> Callable[[], None]:
    """What fails `got`, unlike `want`, with the check's own comparison."""
    return lambda: expect_close(expect_tensor(got, said).double(), want.double(), said,
                                atol=1e-6)


def _defer(got, want: torch.Tensor, said: str) -> None:
    raise _Deferred(_later(got, want, said))


def accuracy_anew(fn: Callable, logits: torch.Tensor, y: torch.Tensor, max_d: int,
                  first: torch.Tensor) -> list[Callable[[], None]]:
    """`fn(logits, y, max_d)` again (`first`: what the check's call gave, right) through
    `expect_fresh` (other logits, then refilled), then on labels of the same shape where
    only distances 1 to 3 occur: a number where NaN is due, one an earlier call gave there,
    is a result kept between calls and never reset.

    Returns:
        What fails a result that differs otherwise, for the check to call after its named
        rounds (an argmax only right where a class is likely differs on these flat logits:
        its own round names it).
    """
    what = "accuracy_by_distance(logits, y, max_distance)"
    try:
        kept = [first.double(), *(r.detach().double().clone() for r in expect_fresh(
            fn, what, (logits.clone(), y.clone(), max_d), accuracy_by_distance, _same,
            _defer))]
    except _Deferred as later:
        return list(later.args)
    n, t = y.shape
    _, y = make_recall(torch.full((n, t), 3), torch.arange(n) % 3, torch.full((n,), t - 4))
    said = f"{what} with other labels of the same shape, where only distances 1 to 3 occur"
    got = call(fn, said, logits.clone(), y, max_d)
    want = accuracy_by_distance(logits, y, max_d).double()
    if _same(got, want):
        return []
    held = got.detach().double() if isinstance(got, torch.Tensor) and (
        got.shape == want.shape) else want
    for d in (torch.isnan(want) & ~torch.isnan(held)).nonzero().flatten().tolist():
        if any(held[d] == k[d] for k in kept):
            fail(f"{said}, gives {held[d].item():.4g} at d={d + 1}, where NaN is due: the "
                 "number an earlier call gave there. A result tensor kept between "
                 "calls (filled with NaN once, never reset) keeps old entries: make a new "
                 "one at every call, logits.new_full((max_distance,), float('nan')).")
    return [_later(got, want, said)]


def _copy(cache):
    """A copy of `cache`, of its kind, holding new tensors."""
    if isinstance(cache, KVState):
        return KVState(cache.kv.clone(), cache.offset)
    if isinstance(cache, XLCache):
        return cache._replace(kv=[KVBuffer.of(k.clone(), v.clone()) for k, v in cache.kv],
                              rel_keys=list(cache.rel_keys))
    return [(k.clone(), v.clone()) for k, v in cache]


def _grow(cache, bytes_of: Callable) -> tuple[str, int]:
    """Grow `cache` in place by one position, as a model does when it generates: longer
    tensors in its list, its `kv` field or its `KVBuffer`s. Returns how, and its bytes."""
    if isinstance(cache, KVState):
        cache.kv, cache.offset = torch.cat([cache.kv, cache.kv[:, :, :, -1:]], 3), cache.offset + 1
        how = "its kv replaced by a longer one"
    elif isinstance(cache, XLCache):
        for i, (k, v) in enumerate(list(cache.kv)):
            cache.kv[i] = cache.kv[i].append(k[:, :, -1:].clone(), v[:, :, -1:].clone())
        how = "each KVBuffer of cache.kv appended to"
    else:
        cache[:] = [(torch.cat([k, k[:, :, -1:]], 2), torch.cat([v, v[:, :, -1:]], 2))
                    for k, v in cache]
        how = "each layer's (k, v) replaced by longer ones"
    return how, bytes_of(cache)


def cache_grown(fn: Callable, caches: list, bytes_of: Callable) -> None:
    """`fn` on a copy of each cache of `caches` (`(name, cache, bytes, ...)`, counted right),
    then on that same copy grown in place by one position (`_grow`): the count before it
    grew again is a count kept between calls, by the cache object (`id(cache)`) or on it
    (an attribute set on it, named)."""
    copies = []  # kept alive: a freed copy's id() could come back
    for name, cache, want, *_ in caches:
        copy = _copy(cache)
        copies.append(copy)
        fields = set(getattr(copy, "__dict__", {}))
        what = f"cache_bytes(<a copy of the {name} cache>)"
        got = call(fn, what, copy)
        if got != want:
            fail(f"{what} gives {got!r}, where {want:,} bytes are expected (as for the cache "
                 "it copies, which you counted right): count the tensors the cache holds at "
                 "each call, nothing kept between calls.")
        how, grown = _grow(copy, bytes_of)
        what = (f"cache_bytes(<{name} cache>) called again on the same cache grown in place "
                f"by one position ({how}, as when generating)")
        again = call(fn, what, copy)
        if again == grown:
            continue
        added = sorted(set(getattr(copy, "__dict__", {})) - fields)
        if again == got:
            where = (f"stored on the cache as cache.{added[0]}" if added else
                     "keyed on the cache object, its id(cache)")
            fail(f"{what} gives {again:,}, its count before it grew ({grown:,} now): a count "
                 f"kept between calls, {where}; count the tensors it holds at every call.")
        fail(f"{what} gives {again!r}, expected {grown:,}: count the tensors the cache holds "
             "at every call.")


def kept_default(fn: Callable) -> str | None:
    """The name of a default argument of `fn` that an earlier call filled (a list, dict or
    set, not empty: what a call keeps for the next), e.g. "the default argument `_rows`"."""
    code, defaults = getattr(fn, "__code__", None), getattr(fn, "__defaults__", None) or ()
    if code is None:
        return None
    names = code.co_varnames[:code.co_argcount][-len(defaults):] if defaults else ()
    for name, value in zip(names, defaults):
        if isinstance(value, (list, dict, set)) and value:
            return f"the default argument `{name}`"
    return None
