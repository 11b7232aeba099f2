"""Notebook 05's Exercise 4: a count of a cache's bytes that keeps a part of it, told apart
by reruns on changed copies of the cache. Half the bytes is the keys only, a division by 2,
half the positions, or a window of 4 positions of 8: a copy with fewer positions (5, or 3)
tells the positions apart, one whose values are twice as wide as its keys the keys, one with
half the layers a number of layers written in the function, one whose k and v have
storages of their own a count of one tensor per storage (k and v share the fused one). A
count that changes when called again on the same cache is a running total kept between
calls; `getsizeofs` gives what `sys.getsizeof` measures instead of the bytes; `position_slips`
the bytes of one position more or fewer than held, and of a `KVState`'s `offset` positions
(the tokens seen, not those held); more bytes than held are every layer counted L times
or every tensor twice; `unit_slips` and `layer_slips` give KiB, kB or MiB, L + 1 layers, H
times or 1 / H of the heads; `no_numpy_dtype` names a `.numpy()` of a bfloat16 cache,
`property_called` a `t.nbytes()`, `expect_any_device_cache` a `.numpy()` that fails on a
GPU's cache, `expect_factor` a count multiplied by a factor (3), not a storage's bytes.

Dimension letters (the package legend): `B` batch, `H` heads, `M` positions held, `D_h`
head width, `L` layers.
"""

from __future__ import annotations

import operator
import sys
from typing import Callable

import torch

from labnn.exercises.grading import expect_any_device, fail, guarded
from labnn.feedback.kv import KVState
from labnn.nn.kv_cache import KVBuffer, _Storage
from labnn.xl.cache import XLCache

N_LAYERS = 6  # the layers of the check's models (`memory_limits._caches`); a KVState has none


def _variant(cache, m: int | None = None, wide: bool = False, layers: int | None = None,
             dtype: torch.dtype | None = None, device: str | None = None):
    """A copy of `cache`, of its kind, cut to its first `m` positions, with values twice as
    wide as the keys (`wide`), with its first `layers` layers, in `dtype` or on `device`."""
    def own(t: torch.Tensor) -> torch.Tensor:
        return t.to(device or t.device, dtype or t.dtype, copy=True)

    if isinstance(cache, KVState):
        return KVState(own(cache.kv[:, :, :, :m]), cache.offset)
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else list(cache)
    out = []
    for k, v in pairs[:layers]:
        k, v = own(k[:, :, :m]), own(v[:, :, :m])
        out.append((k, torch.cat([v, v], -1) if wide else v))
    if not isinstance(cache, XLCache):
        return out
    return cache._replace(kv=[KVBuffer(_Storage(k, v, k.size(2), False), 0, k.size(2))
                              for k, v in out], rel_keys=cache.rel_keys[:layers])


def _bytes(cache) -> int:
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
    return sum(k.nbytes + v.nbytes for k, v in pairs)


def _once_per_storage(cache) -> int:
    """The bytes of the first tensor seen in each storage (`k` and `v` share one)."""
    seen, total = set(), 0
    for pair in ([tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache):
        for t in pair:
            ptr = t.untyped_storage().data_ptr()
            total += 0 if ptr in seen else t.nbytes
            seen.add(ptr)
    return total


def _rerun(fn: Callable, what: str, cache):
    """`fn(cache)`, or None where it raises."""
    try:
        with guarded(what):
            return fn(cache)
    except Exception:
        return None


def _indexed(fn: Callable, what: str, cache: KVState) -> bool:
    """Whether `fn` indexes (or unpacks) the state's kv: a rerun that records it."""
    seen = []

    class _Probe(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if args and args[0] is probe and getattr(func, "__name__", "") in (
                    "__getitem__", "select", "unbind", "__iter__", "chunk", "split"):
                seen.append(func)
            return func(*args, **(kwargs or {}))

    probe = cache.kv.clone()
    with _Probe():
        _rerun(fn, what, KVState(probe, cache.offset))
    return bool(seen)


def expect_parts_counted(fn: Callable, what: str, name: str, cache, want: int, got) -> None:
    """Name a count that keeps a part of the cache: a window of positions, half of them,
    the keys only, a division by 2, a number of layers written as a number."""
    if isinstance(got, (int, float)) and got > want:
        _multiplied(fn, what, cache, want, got)
    if not isinstance(got, (int, float)) or not 0 < got < want:
        return
    tensor = cache.kv if isinstance(cache, KVState) else None
    own = None if tensor is not None else _variant(cache)  # k, v: a storage each
    if own is not None and got == _once_per_storage(cache) and _rerun(
            fn, what, own) == _bytes(own):
        fail(f"{what} gives {got:,}, one tensor per storage, and is right on a copy whose k "
             "and v have storages of their own: k and v are views into one storage (the "
             "fused projection), each with its own entries: count both, k.nbytes + "
             "v.nbytes, even where a storage was seen.")
    held = tensor.size(3) if tensor is not None else _pairs(cache)[0][0].size(2)
    kept = got * held / want
    m = 5 if held > 5 else 3
    cut = _variant(cache, m=m)
    per, again = _bytes(cut) / m, _rerun(fn, what, cut)
    if kept == int(kept) and again == per * min(kept, m):
        where = ("a transformer's cache keeps every position so far, even with attn_len "
                 "(it limits what a query reads, not what is kept)" if name.endswith(
                     "transformer") else "the cache's tensors hold every position it "
                 "remembers")
        fail(f"{what} counts {int(kept)} of the {held} positions the cache holds (the last "
             f"{int(kept)}? a window written in your function): {where}: count them all, "
             "t.nbytes of each tensor.")
    if again in (per * (m // 2), per * (m - m // 2)) and 2 * got == want:
        fail(f"{what} counts half the positions the cache holds ({held // 2} of {held}): "
             "count every position, t.nbytes of each tensor.")
    if tensor is not None and 2 * got == want:
        fail(f"{what} is half of kv's bytes: "
             + ("kv[0] is the keys only; kv [2, B, H, M, D_h] holds the values too, at kv[1]"
                if _indexed(fn, what, cache) else "you divided by 2; kv [2, B, H, M, D_h] "
                "holds the keys and the values too, of all layers at once (not per layer)")
             + ": count kv.nbytes, whole.")
    if tensor is not None:
        return
    wide = _variant(cache, wide=True)
    again = _rerun(fn, what, wide)
    if 2 * got == want and again == sum(k.nbytes for k, _ in _pairs(wide)):
        fail(f"{what} counts the keys only (with values wider than the keys, it gives "
             "their bytes): the cache holds values too: k.nbytes + v.nbytes.")
    if 2 * got == want and 2 * again == _bytes(wide):
        fail(f"{what} is half the bytes: you divided by 2 (by L?); count each tensor's "
             "t.nbytes, keys and values, once.")
    n_layers = len(_pairs(cache))
    fewer = _variant(cache, layers=n_layers // 2)
    if _rerun(fn, what, fewer) == got:
        fail(f"{what} gives {got:,} for {n_layers} layers and again for {n_layers // 2}: "
             "your count does not follow the cache's layers (a number of layers written as "
             "a number?): add every layer's keys and values, one (k, v) per layer.")


def expect_counted_anew(fn: Callable, what: str, cache, got, called: list) -> None:
    """Name a result kept between calls: `got` is the bytes of another cache of this one's
    type that `fn` was given before (`called`: `(name, cache, bytes)` of each), and a copy
    of this cache with half its positions gives `got` again (kept by the type), or is
    counted right where that cache had this one's sizes in another dtype (by the shapes)."""
    if got not in [n for _, c, n in called if type(c) is type(cache) and c is not cache]:
        return
    held = cache.kv.size(3) if isinstance(cache, KVState) else _pairs(cache)[0][0].size(2)
    cut = _variant(cache, m=max(1, held // 2))
    again = _rerun(fn, what, cut)
    twins = [_dtype(c) for _, c, n in called if n == got and type(c) is type(cache) and
             _sizes(c) == _sizes(cache) and _dtype(c) != _dtype(cache)]
    if twins and again == _bytes(cut) != _bytes(_variant(cut, dtype=twins[0])) and _rerun(
            fn, what, _variant(cut, dtype=twins[0])) == again:  # new sizes: counted anew
        fail(f"{what} gives {got:,}, the bytes of the {str(twins[0])[6:]} cache of the same "
             f"sizes it was given before; a copy with {max(1, held // 2)} positions is "
             f"counted right, that copy in {str(twins[0])[6:]} then gets its count: a result "
             "kept between calls, keyed on the shapes (not the dtype): count the cache it is "
             "given, t.nbytes of each tensor.")
    if _bytes(cut) != got and again == got:
        fail(f"{what} gives {got:,}, the bytes of another cache it was given before, and "
             f"again for a copy with {max(1, held // 2)} positions: it returned the result "
             "of an earlier call for another cache (a value kept between calls, keyed on "
             "the cache's type?): count the cache it is given.")


def _sizes(cache) -> list:
    """The shapes of a cache's tensors."""
    return [cache.kv.shape] if isinstance(cache, KVState) else [
        (k.shape, v.shape) for k, v in _pairs(cache)]


def _dtype(cache) -> torch.dtype:
    return cache.kv.dtype if isinstance(cache, KVState) else _pairs(cache)[0][0].dtype


def _pairs(cache) -> list:
    return [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else list(cache)


def expect_same_twice(fn: Callable, what: str, cache, got, kept: str | None) -> None:
    """Name a count that changes when `fn` is called again on the same, unchanged cache: a
    running total kept between calls (`kept`: the default argument holding it, if named)."""
    again = _rerun(fn, what, cache)
    if again is None or again == got:
        return
    where = kept or "a global or a default argument"
    fail(f"{what} gives {got:,}, then {again:,} when called again on the same cache: your "
         f"function keeps a count between calls ({where}, added to at each call). Start "
         "from 0 inside the function at every call: total = 0, then add each tensor's "
         "t.nbytes.")


def getsizeofs(cache, layers) -> list[int]:
    """What `sys.getsizeof` gives where `.nbytes` belongs: of each tensor, of the cache
    object, of `cache.kv`."""
    sizes = [sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in layers),
             sys.getsizeof(cache)]
    if isinstance(cache, KVState):
        sizes.append(sys.getsizeof(cache.kv))
    return sizes


def position_slips(cache, layers) -> list:
    """The bytes of `M + 1` or `M - 1` positions for the `M` held (per layer, or of the
    shared `kv`), and of a `KVState`'s `offset` positions when it holds fewer (`M`, at
    most `attn_len`): the counts of a reader who took the tokens seen for those held."""
    held = layers[0][0].size(-2)
    per = (cache.kv.nbytes if isinstance(cache, KVState) else sum(
        k.nbytes + v.nbytes for k, v in layers)) // max(held, 1)
    out = [(per * (held + s), f"that is one position too {word} ({held} {sign} 1 = M {sign} "
                              f"1 for the M = {held} held): count the positions the cache "
                              "holds, its tensors' own size (t.nbytes).")
           for s, word, sign in ((1, "many", "+"), (-1, "few", "-")) if held > 1]
    if not isinstance(cache, KVState) or not 0 < held < cache.offset:
        return out
    return out + [(per * cache.offset,
                   f"you counted offset = {cache.offset} positions, the tokens the state has "
                   f"seen; kv keeps only the last {held} (at most attn_len): count kv.nbytes, "
                   "whose M axis is the positions held.")]


def no_numpy_dtype(err: Exception, what: str) -> None:
    """Name a `.numpy()` of a dtype NumPy lacks (bfloat16): its TypeError alone says only
    "unsupported ScalarType"."""
    said = str(err)
    if isinstance(err, TypeError) and "unsupported ScalarType" in said:
        fail(f"{what} raised TypeError: {said.splitlines()[0]}. NumPy has no bfloat16, so "
             "t.numpy() fails on this cache: count in torch, t.nbytes (numel() * "
             "element_size()), which knows every dtype.")


def property_called(err: Exception, what: str) -> None:
    """Name `t.nbytes()`: torch's TypeError says only that an int is not callable."""
    if isinstance(err, TypeError) and "'int' object is not callable" in str(err):
        fail(f"{what} raised TypeError ('int' object is not callable): an int was called, as "
             "t.nbytes() calls one. A tensor's .nbytes (like .itemsize and .ndim) is a "
             "property, an int: t.nbytes, no call (KVState.nbytes() is the state's method).")


def unit_slips(want: int) -> list[tuple[float, str]]:
    """The bytes in KiB, kB or MiB, divided (/) or floored (//), each with its diagnosis."""
    return [(divide(want, unit), f"that is {name}, not bytes: return the number of bytes "
                                 f"itself (no division by {unit:,}).")
            for unit, name in ((1024, "KiB (bytes / 1024)"), (1000, "kB (bytes / 1000)"),
                               (2**20, "MiB (bytes / 2**20)"))
            for divide in (operator.truediv, operator.floordiv)]


def layer_slips(cache, want: int, first: int, heads: int) -> list[tuple[int | None, str]]:
    """L + 1 layers counted (a transformer or XL cache: `first` is one layer's bytes), and
    the head width taken as D = H * D_h (`heads` times the bytes)."""
    one_pair = type(cache).__name__ == "KVState"
    return [(None if one_pair else want + first,
             "that counts L + 1 layers: the cache holds one (k, v) pair per layer, L of them; "
             "the embedding keeps none."),
            (want * heads, f"that is H = {heads} times too many: each head's keys and values "
                           "have width D_h = D / H, not D ([B, H, M, D_h]): count each "
                           "tensor's t.nbytes."),
            (want // heads, f"that is 1 / H = 1 / {heads} of it: the heads are left out; "
                            "the cache holds every head, [B, H, M, D_h]: count each "
                            "tensor's t.nbytes.")]


def _multiplied(fn: Callable, what: str, cache, want: int, got) -> None:
    """Name more bytes than held: L times (a factor of the layers, `* n_layers` on a sum
    over them, or a `KVState`'s kv, which the layers share, counted once per layer), or
    twice (rerun on a copy with values twice as wide: every tensor doubled)."""
    if isinstance(cache, KVState) and got == N_LAYERS * want:
        fail(f"{what} is {N_LAYERS} times kv's bytes ({N_LAYERS} = L, the model's layers?): "
             "kv [2, B, H, M, D_h] is the one key and value shared by all layers (each "
             "step writes one memory vector): count kv.nbytes once.")
    if isinstance(cache, KVState):
        return
    if got == len(_pairs(cache)) * want:
        fail(f"{what} is L = {len(_pairs(cache))} times the bytes: the cache holds one (k, v) "
             "per layer, and a sum over them counts each layer once; multiplied by the "
             "number of layers too, each is counted L times: no factor of L.")
    wide = _variant(cache, wide=True)
    if got == 2 * want and _rerun(fn, what, wide) == 2 * _bytes(wide):
        fail(f"{what} is twice the bytes: every tensor counted twice (a * 2 for the keys "
             "and values, on top of k.nbytes + v.nbytes?): count each once, k.nbytes + "
             "v.nbytes per layer.")


def expect_factor(fn: Callable, what: str, cache, want: int, got) -> None:
    """Name a count `got / want` times the bytes on a copy whose k and v own their storages
    too (nothing more in a storage there): a factor multiplied in, not a storage counted."""
    own = None if isinstance(cache, KVState) else _variant(cache)
    if own is not None and got > want and _rerun(fn, what, own) == got * _bytes(own) / want:
        fail(f"{what} gives {got:,}, {got / want:g} times the {want:,} bytes, and so on a copy "
             "whose k and v own their storages: a factor in your count (3 for q, k and v?), "
             "not a storage: the cache holds k and v: k.nbytes + v.nbytes, no factor.")


def expect_any_device_cache(fn: Callable, caches: list) -> None:
    """Run `fn` on a copy of each cache on the meta device (its tensors on a GPU: a
    `.numpy()` fails there), `caches` as `check_cache_bytes` builds them."""
    for name, cache, *_ in caches:
        expect_any_device(fn, f"cache_bytes(<{name} cache>)", _variant(cache, device="meta"))
