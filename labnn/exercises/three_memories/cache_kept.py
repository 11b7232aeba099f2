"""Notebook 05's Exercise 4 reads a cache to count its bytes: the answer must leave the
cache as it found it. A cache is the model's memory, read again by the next step; an
answer that empties the list, overwrites the keys, resets a state's offset, turns XL's
`KVBuffer`s into tuples or clears its tables of relative keys changes (or breaks) the
generation that follows, and the check's later calls would meet an emptied cache (a bare
`StopIteration`, or "that is MiB" for a zero that no division made). An item or field
assigned anew (`state.kv = state.kv.cpu()`, `cache[i] = (k.clone(), v.clone())`) is named
even where it holds the same numbers, and so is an in-place write that torch refuses (XL's
tensors are inference tensors).

Dimension letters (the package legend): `B` batch, `H` heads, `M` positions held, `D_h`
head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import fail
from labnn.feedback.kv import KVState
from labnn.nn.kv_cache import KVBuffer
from labnn.xl.cache import XLCache

FIX = ("count its bytes without changing it: no .clear() or .pop() on its lists, no "
       "in-place writes (.zero_()), no assignments to its items or fields")


def expect_caches_kept(fn: Callable, rounds: dict) -> None:
    """Call `fn` once on every cache of `rounds` (dtype -> `(name, cache, ...)` tuples)
    before any other call, and fail, naming the change, when a cache is not what it was.
    An answer that raises is left to the checks that name its error."""
    for dtype, caches in rounds.items():
        for name, cache, *_ in caches:
            name = name if dtype == torch.float32 else f"{str(dtype)[6:]} {name}"
            before = _contents(cache)
            try:
                fn(cache)
            except RuntimeError as err:  # torch refusing to write into an inference tensor
                if "Inplace update to inference tensor" not in str(err):
                    continue
                change = "it writes into its tensors in place; torch refused: inference tensors"
            except Exception:
                continue
            else:
                change = _change(before, _contents(cache))
            if change:
                fail(f"cache_bytes(<{name} cache>) changed the cache it measures ({change}): "
                     f"{FIX}; the next step reads that cache.")


class _Object:
    """An item or field of a cache, compared by identity: an assignment replaces it, even
    with a copy of the same numbers."""

    def __init__(self, obj) -> None:
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Object) and other.obj is self.obj


def _contents(cache) -> dict:
    """What a cache holds, all that the next step reads: its layers (their types, and a
    `KVBuffer`'s window over its storage), their keys and values (copies), XL's tables of
    relative keys (copies), its other fields."""
    if isinstance(cache, KVState):
        return {"state.kv": cache.kv.clone(), "state.offset": cache.offset,
                "state.kv (object)": _Object(cache.kv)}
    layers = cache.kv if isinstance(cache, XLCache) else cache
    where = "cache.kv" if isinstance(cache, XLCache) else "cache"
    held = {f"{where} (layers)": len(layers)}
    for i, kv in enumerate(layers):
        held[f"{where}[{i}]"] = type(kv).__name__
        if isinstance(kv, KVBuffer):  # the window, and how much of its storage is written
            held[f"{where}[{i}] (start, end, filled)"] = (kv.start, kv.end,
                                                          kv._storage.filled)
        k, v = kv
        held[f"layer {i}'s keys"], held[f"layer {i}'s values"] = k.clone(), v.clone()
    if isinstance(cache, XLCache):
        held["cache.rel_keys (layers)"] = len(cache.rel_keys)
        for i, table in enumerate(cache.rel_keys):
            held[f"cache.rel_keys[{i}]"] = table if table is None else table.clone()
        held |= {f"cache.rel_keys[{i}] (object)": _Object(table)
                 for i, table in enumerate(cache.rel_keys)}
    # last: the items themselves (an assignment, even of the same numbers)
    return held | {f"{where}[{i}] (object)": _Object(kv) for i, kv in enumerate(layers)}


def _change(before: dict, after: dict) -> str:
    """The first difference of two `_contents`, in words; '' when there is none."""
    for name, was in before.items():
        now = after.get(name)
        if isinstance(was, torch.Tensor):
            if not isinstance(now, torch.Tensor) or now.shape != was.shape:
                shape = list(now.shape) if isinstance(now, torch.Tensor) else "gone"
                return f"{name}: shape {list(was.shape)} before, {shape} after"
            if not torch.equal(now, was):
                return f"{name}: overwritten"
        elif isinstance(was, _Object) and now != was:
            return f"an assignment {name.removesuffix(' (object)')} = ... replaced it"
        elif now != was:
            return f"{name}: {was} before, {now} after"
    return ""
