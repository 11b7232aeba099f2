"""Scaled dot-product attention, written out, and multi-head attention.

Dimension letters used throughout:

* `B` batch, `H` heads, `T` queries (the new tokens), `S` keys (cached/memory tokens + new ones),
* `D` model width (`d_model`), `D_h` head width (`d_head = d_model / n_heads`).

Masks are boolean with **True = may attend**, the convention of
`torch.nn.functional.scaled_dot_product_attention`, broadcastable to `[B, H, T, S]`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

KVCache = tuple[torch.Tensor, torch.Tensor]


class _Storage:
    """Transposed keys `[B, H, D_h, C]` and values `[B, H, C, D_h]` shared by the `KVBuffer`s cut from them;
    the first `filled` of the `C` slots are written."""

    def __init__(self, keys_t: torch.Tensor, values: torch.Tensor, filled: int):
        self.keys_t, self.values, self.filled = keys_t, values, filled

    @property
    def capacity(self) -> int:
        return self.values.size(2)


class KVBuffer:
    r"""Cached keys and values that take new tokens without copying the cached ones (amortised O(new)).

    `torch.cat([cached, new])` copies the whole cache at every generated token: $O(S)$ writes to fresh memory,
    more traffic than the attention that then reads it. A `KVBuffer` is a window `[start, end)` over a
    storage with room to spare: `append` writes the new keys/values after `end` and returns a longer window.

    Each `KVBuffer` is a value that never changes: a storage is written only past the last window cut from it,
    where no existing `KVBuffer` looks. Appending to an older buffer (two continuations of one prompt) or to
    a full storage first copies the window into a fresh storage, twice as large as needed, so a sliding
    window of `M` tokens costs one copy of `M` tokens every `M` or so steps.

    Keys are stored transposed, `[B, H, D_h, C]`: a single query's scores $q K^\top$ then read each row of
    $K^\top$ contiguously, a vector-matrix product that ran twice as fast as reading $K$ row by row on this
    project's 2-core CPU (15 vs. 29 µs for 4 heads of 1,024 keys of width 32).

    Unpacks like a `KVCache`: `k, v = buffer`, each `[B, H, S, D_h]` (views: do not modify them; `k` is the
    transpose of a contiguous `[B, H, D_h, S]` window).
    """

    def __init__(self, storage: _Storage, start: int, end: int):
        self._storage, self.start, self.end = storage, start, end

    @classmethod
    def empty(cls, like: torch.Tensor, capacity: int = 0) -> KVBuffer:
        """A buffer of no tokens, with room for `capacity`, for keys shaped, typed and placed like `like`
        `[B, H, *, D_h]`."""
        if not isinstance(like, torch.Tensor) or like.dim() != 4:
            got = list(like.shape) if isinstance(like, torch.Tensor) else type(like).__name__
            raise ValueError(f"like must be a [B, H, *, D_h] tensor of keys, got {got}")
        if not _is_int(capacity) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
        b, h, _, dh = like.shape
        return cls(_Storage(like.new_empty(b, h, dh, capacity), like.new_empty(b, h, capacity, dh), 0), 0, 0)

    def __len__(self) -> int:
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
        """The whole value storage `[B, H, C, D_h]` (for checks of shape, dtype and device, without a view)."""
        return self._storage.values

    def __iter__(self):
        return iter((self.keys_t.transpose(2, 3), self.values))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> KVBuffer:
        """The buffer of the cached tokens followed by `k`, `v` (each `[B, H, T, D_h]`)."""
        if not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
            raise TypeError(f"keys and values must be tensors, got {type(k).__name__} and {type(v).__name__}")
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            raise RuntimeError(
                "KVBuffer writes in place and is for inference (generation under torch.no_grad or "
                "torch.inference_mode); pass a (k, v) tuple as the cache to backpropagate through it"
            )
        storage = self._storage
        b, h, _, dh = storage.values.shape
        if k.shape != v.shape or k.dim() != 4 or (k.size(0), k.size(1), k.size(3)) != (b, h, dh):
            raise ValueError(
                f"keys {list(k.shape)} and values {list(v.shape)} must both be [B, H, T, D_h] = {[b, h, dh]}"
            )
        for name, z in (("keys", k), ("values", v)):
            if z.dtype != storage.values.dtype or z.device != storage.values.device:
                raise ValueError(f"{name} are {z.dtype} on {z.device}, but this buffer holds "
                                 f"{storage.values.dtype} on {storage.values.device} (a cache of another model?)")
        t = k.size(2)
        start, end = self.start, self.end
        if storage.filled != end or end + t > storage.capacity:  # an older window, or no room: move
            n = len(self)
            moved = KVBuffer.empty(v, 2 * (n + t))._storage
            moved.keys_t.narrow(3, 0, n).copy_(storage.keys_t.narrow(3, start, n))
            moved.values.narrow(2, 0, n).copy_(storage.values.narrow(2, start, n))
            storage, start, end = moved, 0, n
        storage.keys_t.narrow(3, end, t).copy_(k.transpose(2, 3))
        storage.values.narrow(2, end, t).copy_(v)
        storage.filled = end + t
        return KVBuffer(storage, start, end + t)

    def last(self, n: int) -> KVBuffer:
        """The buffer of the last `n` tokens only (same storage, no copy)."""
        if not _is_int(n) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        return KVBuffer(self._storage, max(self.start, self.end - n), self.end)


def causal_mask(t: int, s: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean mask letting each query see itself and every earlier key.

    With `s > t` the first `s - t` keys are a memory or cache of earlier tokens: query `i` sits at absolute
    position `s - t + i` and may attend key `j` iff `j <= s - t + i`.

    Args:
        t: number of queries.
        s: number of keys (default `t`); must be at least `t`.
        device: where to build the mask.

    Returns:
        `[T, S]` boolean tensor, True = may attend.
    """
    s = t if s is None else s
    if not (_is_int(t) and _is_int(s)) or t < 0 or s < t:
        raise ValueError(f"causal_mask needs ints 0 <= t <= s, got t={t!r}, s={s!r}")
    return torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t)


def check_mask(mask: torch.Tensor, t: int, s: int, name: str = "mask") -> None:
    """Raise a clear error unless `mask` is boolean and broadcastable to `[B, H, T, S]`."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor (True = may attend), got {got}")
    if mask.dim() < 2 or mask.dim() > 4 or mask.shape[-2] not in (1, t) or mask.shape[-1] != s:
        raise ValueError(
            f"{name} has shape {list(mask.shape)}, expected one broadcastable to [B, H, T={t}, S={s}] "
            f"(e.g. [{t}, {s}])"
        )


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q `[B, H, T, D_h]`, k and v `[B, H, S, D_h]` are floating tensors of one
    dtype and device whose shapes agree (batch and head dimensions may broadcast)."""
    for name, z in (("q", q), ("k", k), ("v", v)):
        if not isinstance(z, torch.Tensor) or z.dim() != 4 or not z.is_floating_point():
            got = f"{z.dtype} {list(z.shape)}" if isinstance(z, torch.Tensor) else type(z).__name__
            raise ValueError(f"{name} must be a floating tensor [B, H, *, D_h], got {got}")
        if z.dtype != q.dtype or z.device != q.device:
            raise ValueError(f"{name} is {z.dtype} on {z.device}, but q is {q.dtype} on {q.device}")
    if k.size(-1) != q.size(-1) or k.size(2) != v.size(2):
        raise ValueError(f"shapes disagree: q {list(q.shape)} and k {list(k.shape)} need the same D_h, k and "
                         f"v {list(v.shape)} the same number of keys S")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the keys of scores whose masked entries (mask False) get weight exactly zero.

    Masked scores are set to the most negative finite number, so a partly masked row gives them weight zero
    and a fully masked row gives zeros (never NaN).

    Shape:
        scores `[B, H, T, S]`, mask (True = may attend) broadcastable to it -> weights `[B, H, T, S]`.
    """
    if mask is None:
        return scores.softmax(dim=-1)
    check_mask(mask, scores.size(-2), scores.size(-1))
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return weights * mask.any(dim=-1, keepdim=True)  # fully masked rows -> 0


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention written out, returning the output and the weights.

    $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_h}}\right) V$$

    Masked keys get weight exactly zero; a fully masked row gives zeros, never NaN (`masked_softmax`).

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, True = may attend, broadcastable to `[B, H, T, S]`.
        dropout_p: dropout on the weights, applied only when `training`.
        training: whether to apply dropout.

    Shape:
        q `[B, H, T, D_h]`, k and v `[B, H, S, D_h]` -> output `[B, H, T, D_h]`, weights `[B, H, T, S]`.

    Returns:
        `(output, weights)`; weights are those before dropout.
    """
    check_qkv(q, k, v)
    d_head = q.size(-1)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d_head)
    weights = masked_softmax(scores, mask)
    dropped = F.dropout(weights, dropout_p, training) if dropout_p > 0 else weights
    return dropped @ v, weights


class MultiHeadAttention(nn.Module):
    r"""Multi-head self-attention with a fused query/key/value projection and an optional KV cache.

    $$\mathrm{MHA}(X) = \mathrm{concat}_h\big(\mathrm{Attention}(X W^Q_h, X W^K_h, X W^V_h)\big)\, W^O$$

    Uses `torch.nn.functional.scaled_dot_product_attention` (fused kernels) unless the weights are asked for.

    Args:
        d_model: model width `D`; must be divisible by `n_heads`.
        n_heads: number of heads `H`.
        dropout: dropout on the attention weights and on the output.
        bias: whether the projections have biases.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if not (_is_int(d_model) and _is_int(n_heads)) or n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads} (a positive int)")
        self.n_heads, self.d_head, self.dropout = n_heads, d_model // n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_dropout = nn.Dropout(dropout)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, D]` -> `[B, H, T, D_h]`."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)

    def project(
        self, x: torch.Tensor, cache: KVCache | KVBuffer | None = None
    ) -> tuple[torch.Tensor, KVCache | KVBuffer]:
        """Queries of the new tokens; keys and values of the cached tokens followed by the new ones.

        A `KVBuffer` cache comes back as a `KVBuffer` (the new keys appended in place), anything else as a
        `(k, v)` tuple.

        Shape:
            x `[B, T, D]`, cache `([B, H, S - T, D_h], [B, H, S - T, D_h])` -> q `[B, H, T, D_h]`,
            `(k, v)` each `[B, H, S, D_h]`.
        """
        q, k, v = (self.split_heads(z) for z in self.qkv(x).chunk(3, dim=-1))
        if isinstance(cache, KVBuffer):
            return q, cache.append(k, v)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        return q, (k, v)

    def check_input(self, x: torch.Tensor, cache: KVCache | KVBuffer | None) -> None:
        """Raise a clear error unless `x` is `[B, T, D]` of this module's dtype and device and a tuple `cache`
        is `(k, v)` `[B, H, *, D_h]` like it (a `KVBuffer` checks what is appended). O(1): shapes only."""
        weight = self.qkv.weight
        d = weight.size(1)
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.size(-1) != d:
            got = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be [B, T, D={d}], got {got}")
        if x.dtype != weight.dtype or x.device != weight.device:
            raise ValueError(f"x is {x.dtype} on {x.device}, but the module is {weight.dtype} on {weight.device}")
        if cache is None or isinstance(cache, KVBuffer):
            return
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            raise TypeError(f"cache must be a (k, v) pair or a KVBuffer, got {type(cache).__name__}")
        want = (x.size(0), self.n_heads, self.d_head)
        for name, z in zip("kv", cache):
            if not isinstance(z, torch.Tensor) or z.dim() != 4 or (z.size(0), z.size(1), z.size(3)) != want:
                got = list(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
                raise ValueError(f"cache {name} must be [B, H, S, D_h] = {list(want[:2])} + [S, {want[2]}] "
                                 f"(B from x), got {got}")
            if z.dtype != x.dtype or z.device != x.device:
                raise ValueError(f"cache {name} is {z.dtype} on {z.device}, but x is {x.dtype} on {x.device}")

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        cache: KVCache | KVBuffer | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, KVCache | KVBuffer]:
        """Attend from the new tokens `x` to the cached keys/values and their own.

        Args:
            x: the new tokens.
            mask: boolean, True = may attend, broadcastable to `[B, H, T, S]`; None attends everywhere.
            cache: `(k, v)` of earlier tokens, each `[B, H, S - T, D_h]`, or a `KVBuffer`.
            need_weights: also return the attention weights (uses the written-out path).

        Shape:
            x `[B, T, D]` -> output `[B, T, D]`, weights `[B, H, T, S]`.

        Returns:
            `(output, weights or None, kv)` where `kv` covers all `S` keys: the cache to pass next time
            (a `KVBuffer` if `cache` was one, else a `(k, v)` tuple).
        """
        self.check_input(x, cache)
        q, kv = self.project(x, cache)
        k, v = kv
        if mask is not None:
            check_mask(mask, q.size(2), k.size(2))
        p = self.dropout if self.training else 0.0
        if need_weights:
            y, weights = scaled_dot_product_attention(q, k, v, mask, p, self.training)
        else:
            y, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), None
            if mask is not None:
                y = y.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # fully masked rows -> 0
        y = y.transpose(1, 2).flatten(2)  # [B, T, D]
        return self.out_dropout(self.out_proj(y)), weights, kv
