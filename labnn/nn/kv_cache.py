r"""Cached keys and values for generation: a `(k, v)` pair, or a `KVBuffer` that grows.

Dimension letters (the package legend): `B` batch, `H` heads, `D_h` head width, `T` new
tokens, `S` cached tokens in a window, `C` capacity of the storage behind it.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_int

KVCache = tuple[torch.Tensor, torch.Tensor]


class _Storage:
    """Transposed keys `[B, H, D_h, C]` and values `[B, H, C, D_h]` shared by the
    `KVBuffer`s cut from them; the first `filled` of the `C` slots are written."""

    def __init__(self, keys_t: torch.Tensor, values: torch.Tensor, filled: int):
        """Hold the two tensors and how many slots are written."""
        self.keys_t, self.values, self.filled = keys_t, values, filled

    @property
    def capacity(self) -> int:
        """`C`, the slots the storage has room for."""
        return self.values.size(2)


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

    Keys are stored transposed, `[B, H, D_h, C]`: a single query's scores $q K^\top$ then
    read each row of $K^\top$ contiguously, a vector-matrix product that ran twice as fast
    as reading $K$ row by row on this project's 2-core CPU (15 vs. 29 µs for 4 heads of
    1,024 keys of width 32).

    Unpacks like a `KVCache`: `k, v = buffer`, each `[B, H, S, D_h]` (views: do not modify
    them; `k` is the transpose of a contiguous `[B, H, D_h, S]` window).
    """

    def __init__(self, storage: _Storage, start: int, end: int):
        """The window `[start, end)` of `storage` (made by `empty` and `append`)."""
        self._storage, self.start, self.end = storage, start, end

    @classmethod
    def empty(cls, like: torch.Tensor, capacity: int = 0) -> KVBuffer:
        """A buffer of no tokens, with room for `capacity`, for keys shaped, typed and
        placed like `like` `[B, H, *, D_h]`."""
        if not isinstance(like, torch.Tensor) or like.dim() != 4:
            got = type(like).__name__
            if isinstance(like, torch.Tensor):
                got = list(like.shape)
            raise ValueError(f"like must be a [B, H, *, D_h] tensor of keys, got {got}")
        check_int("capacity", capacity, low=0)
        b, h, _, dh = like.shape
        keys_t = like.new_empty(b, h, dh, capacity)
        values = like.new_empty(b, h, capacity, dh)
        return cls(_Storage(keys_t, values, 0), 0, 0)

    def __len__(self) -> int:
        """`S`, the tokens in the window."""
        return self.end - self.start

    @property
    def keys_t(self) -> torch.Tensor:
        """The keys, transposed as stored: `[B, H, D_h, S]` (a view)."""
        return self._storage.keys_t.narrow(3, self.start, len(self))

    @property
    def values(self) -> torch.Tensor:
        """The values, `[B, H, S, D_h]` (a view)."""
        return self._storage.values.narrow(2, self.start, len(self))

    @property
    def storage_values(self) -> torch.Tensor:
        """The whole value storage `[B, H, C, D_h]` (for checks of shape, dtype and
        device, without a view)."""
        return self._storage.values

    def __iter__(self):
        """`k, v = buffer`: keys (a transposed view) and values, `[B, H, S, D_h]`."""
        return iter((self.keys_t.transpose(2, 3), self.values))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> KVBuffer:
        """The buffer of the cached tokens followed by `k`, `v`.

        Shape:
            k, v `[B, H, T, D_h]` -> a buffer of `S + T` tokens.
        """
        if not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
            raise TypeError("keys and values must be tensors, got "
                            f"{type(k).__name__} and {type(v).__name__}")
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
            moved = KVBuffer.empty(v, 2 * (n + t))._storage
            moved.keys_t.narrow(3, 0, n).copy_(storage.keys_t.narrow(3, start, n))
            moved.values.narrow(2, 0, n).copy_(storage.values.narrow(2, start, n))
            storage, start, end = moved, 0, n
        storage.keys_t.narrow(3, end, t).copy_(k.transpose(2, 3))
        storage.values.narrow(2, end, t).copy_(v)
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
