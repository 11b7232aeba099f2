"""Notebook 05's Exercise 4 reads a cache to count its bytes: the answer must leave the
cache as it found it. A cache is the model's memory, read again by the next step; an
answer that empties the list, overwrites the keys, resets a state's offset, turns XL's
`KVBuffer`s into tuples or clears its tables of relative keys changes (or breaks) the
generation that follows, and the check's later calls would meet an emptied cache (a bare
`StopIteration`, or "that is MiB" for a zero that no division made). An item or field
assigned anew (`state.kv = state.kv.cpu()`, `cache[i] = (k.clone(), v.clone())`) is named
even where it holds the same numbers, and so is an in-place write, by its operation, even
one that leaves the values as they were (`k.mul_(1)`: its version counter moves; a
`.squeeze_()` on a batch-1 cache drops an axis) or that torch refuses (XL's tensors are
inference tensors); so is a tensor's dtype, device or `requires_grad` changed
(`k.data = k.data.double()`, `.requires_grad_(True)`).

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
_NOT_WRITES = ("requires_grad_", "retain_grad", "share_memory_")


def _tensors(cache) -> list[tuple[str, torch.Tensor]]:
    """Every tensor a cache holds, by name: keys, values, XL's storage and tables."""
    if isinstance(cache, KVState):
        return [("state.kv", cache.kv)]
    if isinstance(cache, XLCache):
        held = [(f"cache.kv[{i}]'s {part}", getattr(b._storage, part))
                for i, b in enumerate(cache.kv) for part in ("keys", "values")]
        return held + [(f"cache.rel_keys[{i}]", t) for i, t in enumerate(cache.rel_keys)
                       if t is not None]
    return [(f"layer {i}'s {part}", t) for i, kv in enumerate(cache)
            for part, t in zip(("keys", "values"), kv)]


class _Writes(torch.overrides.TorchFunctionMode):
    """Records the first in-place operation on a cache's tensor (or a view of it), by
    name: `.mul_(...)` (`*=` too), `[...] = ...`, `out=`."""

    def __init__(self, cache) -> None:
        super().__init__()
        self.held = _tensors(cache)
        self.storages = {}
        for name, t in self.held:
            self.storages.setdefault(t.untyped_storage().data_ptr(), []).append(name)
        self.seen = ""

    def _whose(self, t) -> str:
        if not isinstance(t, torch.Tensor):
            return ""
        named = [name for name, held in self.held if held is t]
        return named[0] if named else " / ".join(self.storages.get(
            t.untyped_storage().data_ptr(), []))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not self.seen and name not in _NOT_WRITES:
            if args and (name == "__setitem__" or name.endswith("_") and not
                         name.startswith("__")) and (whose := self._whose(args[0])):
                self.seen = ("an index assignment [...] = ..." if name == "__setitem__"
                             else f".{name}(...)") + f" on {whose}"
            elif whose := self._whose(kwargs.get("out")):
                self.seen = f"{name}(..., out=...) on {whose}"
        return func(*args, **kwargs)


def _versions(cache) -> list[int]:
    """The version counters of a cache's tensors (inference tensors have none: torch
    refuses to write into them)."""
    return [t._version for _, t in _tensors(cache) if not t.is_inference()]


def expect_caches_kept(fn: Callable, rounds: dict, batch_one: list = ()) -> None:
    """Call `fn` once on every cache of `rounds` (dtype -> `(name, cache, ...)` tuples)
    and `batch_one` (float32 caches of B = 1, where a `.squeeze_()` drops an axis) before
    any other call, and fail, naming the change, when a cache is not what it was: an
    in-place write is named by its operation, even where the values stay the same (its
    version counter moves). An answer that raises is left to the checks that name its
    error."""
    named = [(name if dtype == torch.float32 else f"{str(dtype)[6:]} {name}", cache)
             for dtype, caches in rounds.items() for name, cache, *_ in caches]
    for name, cache in named + [(f"batch-1 {name}", c) for name, c, *_ in batch_one]:
        before, versions, writes = _contents(cache), _versions(cache), _Writes(cache)
        try:
            with writes:
                fn(cache)
        except RuntimeError as err:  # torch refusing to write into an inference tensor
            if "Inplace update to inference tensor" not in str(err):
                continue
            change = "torch refused: XL's tensors are inference tensors"
        except Exception:
            continue
        else:
            change = _change(before, _contents(cache)) or (
                "its values stay the same, its version counter moved"
                if _versions(cache) != versions else "")
        if change and writes.seen:
            fail(f"cache_bytes must only read the cache: {writes.seen} wrote into it. That "
                 f"changed the cache it measures in place (the {name} cache; {change}), and "
                 "the next step reads that cache: count its bytes without writing, t.nbytes.")
        if change and (kind := _kind_change(before, _contents(cache))):
            fail(f"cache_bytes(<{name} cache>) changed the cache's tensors: {kind}: count, "
                 "change nothing; the next step reads that cache.")
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


_KINDS = {"dtype": "k.data = k.data.{}()", "device": "k.data = k.data.to(...)",
          "requires_grad": ".requires_grad_({})"}
_METHODS = {"float64": "double", "float32": "float", "float16": "half"}


def _kind_change(before: dict, after: dict) -> str:
    """The first tensor of two `_contents` whose dtype, device or `requires_grad` differs,
    in words (`torch.equal` ignores them); '' when there is none."""
    for name, was in before.items():
        now = after.get(name)
        if not isinstance(was, torch.Tensor) or not isinstance(now, torch.Tensor):
            continue
        for field, how in _KINDS.items():
            old, new = (str(getattr(t, field)).removeprefix("torch.") for t in (was, now))
            if old != new:
                how = how.format(_METHODS.get(new, new))
                return (f"{name}'{'' if name.endswith('s') else 's'} {field} is {new} now, "
                        f"was {old} ({how})")
    return ""


def _change(before: dict, after: dict) -> str:
    """The first difference of two `_contents`, in words; '' when there is none."""
    for name, was in before.items():
        now = after.get(name)
        if isinstance(was, torch.Tensor):
            if not isinstance(now, torch.Tensor) or now.shape != was.shape:
                shape = list(now.shape) if isinstance(now, torch.Tensor) else "gone"
                return f"{name}: shape {list(was.shape)} before, {shape} after"
            if _kind_change({name: was}, {name: now}) or not torch.equal(now, was):
                return f"{name}: overwritten"
        elif isinstance(was, _Object) and now != was:
            return f"an assignment {name.removesuffix(' (object)')} = ... replaced it"
        elif now != was:
            return f"{name}: {was} before, {now} after"
    return ""
