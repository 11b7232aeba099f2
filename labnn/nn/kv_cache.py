r"""Cached keys and values for generation: a `(k, v)` pair, or a `KVBuffer` that grows.

Dimension letters (the package legend): `B` batch, `H` heads, `D_h` head width, `T` new
tokens, `S` tokens in a buffer's window (the keys an attention over it reads: `M` cached
ones, then the `T` new ones an `append` adds), `C` capacity of the storage behind it.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_bool, check_int, state_dtype_hint, state_dtypes

KVCache = tuple[torch.Tensor, torch.Tensor]


class _Storage:
    """Keys (`[B, H, C, D_h]`, or transposed `[B, H, D_h, C]`) and values `[B, H, C,
    D_h]` shared by the `KVBuffer`s cut from them; the first `filled` of the `C` slots
    are written."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, filled: int,
                 transposed: bool):
        """Hold the two tensors, how many slots are written, and the keys' layout."""
        self.keys, self.values, self.filled = keys, values, filled
        self.transposed = transposed

    @property
    def capacity(self) -> int:
        """`C`, the slots the storage has room for."""
        return self.values.size(2)

    def keys_in(self, start: int, n: int) -> torch.Tensor:
        """The keys, as stored, of slots `start .. start + n - 1` (a view)."""
        return self.keys.narrow(3 if self.transposed else 2, start, n)

    def values_in(self, start: int, n: int) -> torch.Tensor:
        """The values of slots `start .. start + n - 1` (a view)."""
        return self.values.narrow(2, start, n)

    def write(self, at: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Copy `k`, `v` `[B, H, T, D_h]` into slots `at .. at + T - 1`."""
        t = k.size(2)
        self.keys_in(at, t).copy_(k.transpose(2, 3) if self.transposed else k)
        self.values_in(at, t).copy_(v)


def check_tensors(k, v) -> None:
    """Raise a clear error unless the keys and values are tensors."""
    if not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        raise TypeError("keys and values must be tensors, got "
                        f"{type(k).__name__} and {type(v).__name__}")


class KVBuffer:
    r"""Cached keys and values that take new tokens without copying the cached ones.

    `torch.cat([cached, new])` copies the whole cache at every generated token: $O(S)$
    writes to fresh memory, more traffic than the attention that then reads it. A
    `KVBuffer` is a window `[start, end)` over a storage with room to spare: `append`
    writes the new keys and values after `end` and returns a longer window, amortised
    $O(T)$ per call.

    Each `KVBuffer` is a value that never changes: a storage is written only past the last
    window cut from it, where no existing `KVBuffer` looks. Appending to an older buffer
    (two continuations of one prompt) or to a full storage first copies the window into a
    fresh storage, twice as large as needed, so a sliding window of `M` tokens costs one
    copy of `M` tokens every `M` or so steps.

    The keys' layout suits the attention that reads them. `transposed=True` stores $K^\top$
    `[B, H, D_h, C]`: a single query's scores $q K^\top$, written out (Transformer-XL),
    then read each row of $K^\top$ contiguously, 1.5-1.7x as fast as reading $K$ row by
    row (8 vs. 13 µs for 4 heads of 1,024 keys of width 32). The fused
    `torch.nn.functional.scaled_dot_product_attention` wants the opposite: rows of $K$
    contiguous (`transposed=False`, `[B, H, C, D_h]`), 6.2 vs. 14.2 µs for 128 keys there
    (`TransformerLM`'s generation). Both: `benchmarks/key_layouts.py`, one thread of a
    2-core x86_64 VM (AMD EPYC, torch 2.13.0), two runs beside other jobs, 2026-11-27.

    Unpacks like a `KVCache`: `k, v = buffer`, each `[B, H, S, D_h]` (views: do not modify
    them).
    """

    def __init__(self, storage: _Storage, start: int, end: int):
        """The window `[start, end)` of `storage` (made by `empty` and `append`)."""
        self._storage, self.start, self.end = storage, start, end

    @classmethod
    def empty(cls, like: torch.Tensor, capacity: int = 0, *,
              transposed: bool = False) -> KVBuffer:
        """A buffer of no tokens, with room for `capacity`, for keys shaped, typed and
        placed like `like` `[B, H, *, D_h]`, stored transposed or not (the class's
        docstring)."""
        if not isinstance(like, torch.Tensor) or like.dim() != 4:
            got = type(like).__name__
            if isinstance(like, torch.Tensor):
                got = list(like.shape)
            raise ValueError(f"like must be a [B, H, *, D_h] tensor of keys, got {got}")
        check_int("capacity", capacity, low=0)
        check_bool("transposed", transposed)
        b, h, _, dh = like.shape
        shape = (b, h, dh, capacity) if transposed else (b, h, capacity, dh)
        keys, values = like.new_empty(shape), like.new_empty(b, h, capacity, dh)
        return cls(_Storage(keys, values, 0, transposed), 0, 0)

    @classmethod
    def of(cls, k: torch.Tensor, v: torch.Tensor, room: int = 0, *,
           transposed: bool = False) -> KVBuffer:
        """A buffer holding `k`, `v` `[B, H, S, D_h]`, with room for `room` more tokens."""
        check_int("room", room, low=0)
        check_tensors(k, v)
        for name, z in (("k", k), ("v", v)):  # not `like`, which the caller never named
            if z.dim() != 4:
                raise ValueError(f"{name} must be [B, H, S, D_h], got {list(z.shape)}")
        return cls.empty(v, k.size(2) + room, transposed=transposed).append(k, v)

    def __len__(self) -> int:
        """`S`, the tokens in the window."""
        return self.end - self.start

    @property
    def keys(self) -> torch.Tensor:
        """The keys, `[B, H, S, D_h]` (a view)."""
        keys = self._storage.keys_in(self.start, len(self))
        return keys.transpose(2, 3) if self._storage.transposed else keys

    @property
    def keys_t(self) -> torch.Tensor:
        """The keys, transposed: `[B, H, D_h, S]` (a view; stored so, the window itself:
        each generated token of Transformer-XL reads it in every layer)."""
        keys = self._storage.keys_in(self.start, len(self))
        return keys if self._storage.transposed else keys.transpose(2, 3)

    @property
    def values(self) -> torch.Tensor:
        """The values, `[B, H, S, D_h]` (a view)."""
        return self._storage.values_in(self.start, len(self))

    @property
    def storage_values(self) -> torch.Tensor:
        """The whole value storage `[B, H, C, D_h]` (for checks of shape, dtype and
        device, without a view)."""
        return self._storage.values

    @property
    def allocated_bytes(self) -> int:
        """The bytes of the storage behind the window, the room to spare included."""
        return self._storage.keys.nbytes + self._storage.values.nbytes

    def __iter__(self):
        """`k, v = buffer`: keys and values, `[B, H, S, D_h]` (views)."""
        return iter((self.keys, self.values))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> KVBuffer:
        """The buffer of the cached tokens followed by `k`, `v`.

        Shape:
            k, v `[B, H, T, D_h]` -> a buffer of `len(self) + T` tokens.
        """
        check_tensors(k, v)
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            raise RuntimeError(
                "KVBuffer writes in place and is for inference (generation under "
                "torch.no_grad or torch.inference_mode); pass a (k, v) tuple as the "
                "cache to backpropagate through it"
            )
        self._check_new(k, v)
        storage, t = self._storage, k.size(2)
        start, end = self.start, self.end
        if storage.filled != end or end + t > storage.capacity:
            # an older window, or no room left: move the window to a fresh storage
            n = len(self)
            moved = KVBuffer.empty(v, 2 * (n + t), transposed=storage.transposed)
            moved._storage.write(0, *self)
            storage, start, end = moved._storage, 0, n
        # the new keys and values go right after the window: nothing before them is copied
        storage.write(end, k, v)
        storage.filled = end + t
        return KVBuffer(storage, start, end + t)

    def _check_new(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Raise a clear error unless `k` and `v` fit this buffer (shape, type, place)."""
        held = self._storage.values
        b, h, _, dh = held.shape
        fits = k.dim() == 4 and (k.size(0), k.size(1), k.size(3)) == (b, h, dh)
        if k.shape != v.shape or not fits:
            raise ValueError(f"keys {list(k.shape)} and values {list(v.shape)} must both "
                             f"be [B, H, T, D_h] = {[b, h, dh]}")
        for name, z in (("keys", k), ("values", v)):
            if z.dtype != held.dtype or z.device != held.device:
                raise ValueError(
                    f"{name} are {z.dtype} on {z.device}, but this buffer holds "
                    f"{held.dtype} on {held.device} (a cache of another model?)")

    def last(self, n: int) -> KVBuffer:
        """The buffer of the last `n` tokens only (same storage, no copy)."""
        check_int("n", n, low=0)
        return KVBuffer(self._storage, max(self.start, self.end - n), self.end)


def check_layer_caches(cache: list[KVCache | KVBuffer], layers: int,
                       heads: tuple[int, int, int], weight: torch.Tensor) -> int:
    """Raise a clear error unless `cache` holds one `(k, v)` or `KVBuffer` per layer of
    a stack of `layers` attention layers, each `[B, H, M, D_h]` with `heads` = `(B, H,
    D_h)`, of the dtype and device of the model's `weight`. O(L) Python on shapes only,
    since it runs at every generated token: a `KVBuffer` is checked by its storage,
    without cutting views.

    Returns:
        The number `M` of cached tokens.
    """
    if not isinstance(cache, (list, tuple)):
        raise TypeError("cache must be a list of (k, v) pairs, one per layer, as returned "
                        f"with use_cache=True; got {type(cache).__name__}")
    if len(cache) != layers:
        raise ValueError(f"cache has {len(cache)} layers, expected {layers}")
    m, dtypes = None, state_dtypes(weight)
    for i, kv in enumerate(cache):
        if isinstance(kv, KVBuffer):
            k, n = kv.storage_values, len(kv)
        elif not isinstance(kv, tuple):
            raise TypeError(f"cache[{i}] must be a (k, v) tuple or a KVBuffer, as returned "
                            f"with use_cache=True; got {type(kv).__name__}")
        else:
            k, v = kv if len(kv) == 2 else (None, None)
            tensors = isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            if not tensors or k.dim() != 4 or k.shape != v.shape:
                got = [list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                       for t in kv]
                raise ValueError(f"cache[{i}] must be (k, v), two tensors of one shape "
                                 f"[B, H, S, D_h], got {got}")
            n = k.size(2)
        if (k.size(0), k.size(1), k.size(3)) != heads:
            b, h, dh = heads
            raise ValueError(
                f"cache[{i}] has keys {list(k.shape)}, expected [B, H, S, D_h] with batch "
                f"size {b} (the tokens'), {h} heads of width {dh} (a cache from another "
                "model?)")
        if k.dtype not in dtypes or k.device != weight.device:
            raise ValueError(
                f"cache[{i}] is {k.dtype} on {k.device}, but the model is {weight.dtype} "
                f"on {weight.device}{state_dtype_hint(k.dtype, weight)}")
        m = n if m is None else m
        if n != m:
            raise ValueError(f"cache[{i}] holds {n} keys, but cache[0] holds {m}")
    return m
