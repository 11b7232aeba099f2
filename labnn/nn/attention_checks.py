"""The checks at the door of attention: what `MultiHeadAttention` (and its relative
subclass) and the written-out attention accept, with a clear error for what they do not.

Kept apart so that each `forward` reads as its equation. Every check but
`check_polarity` is O(1) on shapes, dtypes and devices: none of them reads a tensor's
values, so none waits for the device. `check_polarity` reads `T` entries of a mask back
to the host, and runs only where the mask is known to see later keys.

Masks are boolean with **True = may attend**, broadcastable to `[B, H, T, S]`.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import autocast_dtype, check_bool, state_dtypes
from labnn.nn.kv_cache import KVBuffer, KVCache


def check_mask(mask: torch.Tensor, t: int, s: int, name: str = "mask", *,
               b: int | None = None, h: int | None = None,
               device: torch.device | None = None) -> None:
    """Raise a clear error unless `mask` is boolean (True = may attend), broadcastable
    to `[B, H, T, S]` (`B` and `H` checked when given) and on `device` (when given: the
    scores').

    A float mask (an additive bias), one of another length, or one made for another
    batch size is the usual mistake; each would otherwise broadcast silently or fail
    deep inside torch. So is a mask per example `[B, T, S]` against `[B, H, T, S]`
    scores: broadcasting reads a 3-D mask as `[H, T, S]`, one per head, which with
    `B == H` fits silently; a 3-D mask with more than one entry in front is refused
    there. A 2-D mask is always `[T, S]`: a padding mask per example, `[B, S]`, is
    `mask[:, None, None]` (with `B == T` it would fit as `[T, S]`, silently).
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor (True = may attend), got {got}")
    if mask.dim() == 3 and mask.size(0) != 1 and b is not None and h is not None:
        raise ValueError(
            f"{name} of shape {list(mask.shape)} is ambiguous against [B, H, T, S] scores "
            f"(torch reads it as one mask per head): give mask[:, None] for one per "
            f"example, [B, 1, T, S], or mask[None] for one per head, [1, H, T, S] "
            "(True = may attend)")
    if device is not None and mask.device != torch.device(device):
        raise ValueError(f"{name} is on {mask.device}, but the scores are on {device}: "
                         f"move it, {name}.to({str(device)!r}) (True = may attend)")
    if mask.dim() < 2:  # torch's fused kernel takes none: a row of keys is [1, S]
        raise ValueError(f"{name} has shape {list(mask.shape)}: give it at least the two "
                         f"last axes [T, S] = [{t}, {s}] (for one row over the keys, "
                         f"mask[None], [1, {s}]; True = may attend)")
    rows_ok = mask.shape[-2] in (1, t)
    lead = (b, h)[4 - mask.dim():] if 2 < mask.dim() <= 4 else ()  # [B, H] or [H]
    lead_ok = all(n in (1, want) for n, want in zip(mask.shape[:-2], lead) if want is not None)
    if not rows_ok or not lead_ok or mask.dim() > 4 or mask.shape[-1] != s:
        bh = ", ".join(f"{k}={v}" if v is not None else k for k, v in (("B", b), ("H", h)))
        padding = mask.dim() == 2 and b is not None and list(mask.shape) == [b, s]
        raise ValueError(
            f"{name} has shape {list(mask.shape)}, expected one broadcastable to "
            f"[{bh}, T={t}, S={s}] (e.g. [{t}, {s}]; True = may attend)"
            + (f"; a padding mask per example, [B, S], is {name}[:, None, None]"
               if padding else ""))


def check_polarity(mask: torch.Tensor, t: int, s: int) -> bool:
    """Raise a clear error when `mask` (`[..., T, S]`, known to let some query see a later
    key) lets no query `i` attend its own position `S - T + i`: the polarity of
    `nn.Transformer`'s masks (True = masked), e.g. `~causal_mask(T, S)` or
    `triu(diagonal=1)`, which would read only the future. Returns True (a caller's `and`).

    One read of `T` entries, made only where the mask sees later keys (already a host read).
    """
    rows = torch.arange(t, device=mask.device) if mask.size(-2) == t else 0
    if not mask[..., rows, torch.arange(s - t, s, device=mask.device)].any():
        raise ValueError(
            "mask lets queries attend later keys but no query its own position: inverted? "
            "True = may attend (as in scaled_dot_product_attention; nn.Transformer's masks "
            "say the opposite): pass ~mask, or causal_mask(T, S) for the causal one")
    return True


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q `[B, H, T, D_h]`, k and v `[B, H, S, D_h]` are
    floating tensors of one dtype and device whose shapes agree (batch and head
    dimensions may broadcast)."""
    for name, z in (("q", q), ("k", k), ("v", v)):
        shape = f"[B, H, {'T' if name == 'q' else 'S'}, D_h]"
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"{name} must be a tensor {shape}, got {type(z).__name__}")
        if z.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dimensions {shape}, got {z.dim()}: {list(z.shape)}")
        if not z.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {z.dtype}")
        if z.dtype != q.dtype or z.device != q.device:
            raise ValueError(
                f"{name} is {z.dtype} on {z.device}, but q is {q.dtype} on {q.device}")
    if k.size(-1) != q.size(-1) or k.size(2) != v.size(2):
        raise ValueError(
            f"shapes disagree: q {list(q.shape)} and k {list(k.shape)} need the same "
            "D_h, "
            f"k and v {list(v.shape)} the same number of keys S"
        )
    for dim, letter in enumerate("BH"):
        if len({z.size(dim) for z in (q, k, v)} - {1}) > 1:
            raise ValueError(
                f"q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} disagree in "
                f"{letter}: they must be equal or broadcast (a size of 1)")


def check_rel_keys(rel_keys: torch.Tensor, s: int, q: torch.Tensor) -> None:
    """Raise a clear error unless `rel_keys`, given to `RelativeMultiHeadAttention`, is a
    table `[R, H, D_h]` of the queries' `q [B, H, T, D_h]` device and dtype (any under
    `torch.autocast`), with `R >= S`.

    Its distances cannot be read from its shape: the module uses its last `S` rows as
    the distances `S - 1, ..., 0`, which they are in a `relative_keys(R)` (not in a
    `relative_keys(R, later)` with `later > 0`).
    """
    if not isinstance(rel_keys, torch.Tensor):
        raise TypeError("rel_keys must be a tensor from relative_keys(R), got "
                        f"{type(rel_keys).__name__}")
    h, d_head = q.size(1), q.size(-1)
    if rel_keys.dim() != 3 or rel_keys.shape[1:] != (h, d_head):
        layout = rel_keys.dim() == 3 and rel_keys.shape[:2] == (h, d_head)
        raise ValueError(
            f"rel_keys must be [R, H={h}, D_h={d_head}] with R >= S={s}, as from "
            f"relative_keys(R), got {list(rel_keys.shape)}"
            + (" (a key_table, [H, D_h, R]?)" if layout else ""))
    cast = autocast_dtype(q.device) is not None  # autocast casts both to its dtype
    if (rel_keys.dtype != q.dtype and not cast) or rel_keys.device != q.device:
        raise ValueError(f"rel_keys is {rel_keys.dtype} on {rel_keys.device}, but the "
                         f"queries are {q.dtype} on {q.device}")
    if rel_keys.size(0) < s:
        raise ValueError(f"rel_keys covers {rel_keys.size(0)} distances, need at least S={s}")


def check_scores_input(q: torch.Tensor, keys_t: torch.Tensor, rel_keys: torch.Tensor | None,
                       u: torch.Tensor | None, v: torch.Tensor | None, aligned: bool) -> None:
    """Raise a clear error unless the inputs of `labnn.xl.relative_scores` have its shapes:
    q `[B, H, T, D_h]`, keys_t `[B, H, D_h, S]`, rel_keys `[H, D_h, N]` (N = S unless
    `aligned`), u and v `[H, D_h]`.

    Its products reshape rather than broadcast, so a tensor of the right size in the
    wrong layout (keys untransposed when S = D_h, a table with a row per distance, a bias
    `[H, 1, D_h]` read by batch) would give scores without an error.
    """
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must be [B, H, T, D_h], got {list(getattr(q, 'shape', []))}")
    b, h, _, dh = q.shape
    want = (b, h, dh)
    if keys_t.dim() != 4 or keys_t.shape[:3] != want:
        hint = keys_t.shape[-1] == dh and keys_t.shape[:2] == (b, h)
        raise ValueError(
            f"keys_t must be [B={b}, H={h}, D_h={dh}, S], got {list(keys_t.shape)}"
            + (" (the keys untransposed? keys_t is k.transpose(2, 3))" if hint else ""))
    if rel_keys is not None:
        if rel_keys.dim() != 3 or rel_keys.shape[:2] != (h, dh):
            hint = rel_keys.dim() == 3 and rel_keys.shape[1:] == (h, dh)
            raise ValueError(
                f"rel_keys must be [H={h}, D_h={dh}, N], one column per distance, got "
                f"{list(rel_keys.shape)}"
                + (" (a row per distance? use heads_first(r))" if hint else ""))
        if not aligned and rel_keys.size(-1) != keys_t.size(-1):
            raise ValueError(
                f"rel_keys has {rel_keys.size(-1)} columns, one per key needs "
                f"S={keys_t.size(-1)} (or an align)")
    for name, bias in (("u", u), ("v", v)):
        if bias is not None and bias.shape != (h, dh):
            raise ValueError(f"{name} must be [H={h}, D_h={dh}], got {list(bias.shape)}")


def check_aligned(position: torch.Tensor, b: int, h: int, t: int, s: int) -> None:
    """Raise a clear error unless `align` gave the position term by (query, key)."""
    if position.shape != (b, h, t, s):
        raise ValueError(f"align must give [B={b}, H={h}, T={t}, S={s}], got "
                         f"{list(position.shape)}")


def check_attention_input(module: torch.nn.Module, x: torch.Tensor,
                          cache: KVCache | KVBuffer | None, need_weights: bool) -> None:
    """Raise a clear error unless `x` is `[B, T, D]` of the dtype and device of `module`
    (a `MultiHeadAttention`), a tuple `cache` is `(k, v)` `[B, H, *, D_h]` like it (a
    `KVBuffer` checks what is appended) and `need_weights` a bool. Under `torch.autocast`
    autocast's dtype is accepted too."""
    check_bool("need_weights", need_weights)
    weight = module.qkv.weight
    d, dtypes = weight.size(1), state_dtypes(weight)
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.size(-1) != d:
        got = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be [B, T, D={d}], got {got}")
    if x.dtype not in dtypes or x.device != weight.device:
        raise ValueError(f"x is {x.dtype} on {x.device}, but the module is "
                         f"{weight.dtype} on {weight.device}")
    if cache is None or isinstance(cache, KVBuffer):
        return
    if not isinstance(cache, (tuple, list)) or len(cache) != 2:
        raise TypeError("cache must be a (k, v) pair or a KVBuffer, got "
                        f"{type(cache).__name__}")
    want = (x.size(0), module.n_heads, module.d_head)
    for name, z in zip("kv", cache):
        tensor = isinstance(z, torch.Tensor) and z.dim() == 4
        if not tensor or (z.size(0), z.size(1), z.size(3)) != want:
            got = list(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
            raise ValueError(
                f"cache {name} must be [B, H, S, D_h] = {list(want[:2])} + "
                f"[S, {want[2]}] (B from x), got {got}")
        if z.dtype not in dtypes or z.device != x.device:
            raise ValueError(f"cache {name} is {z.dtype} on {z.device}, but x is "
                             f"{x.dtype} on {x.device}")
    if cache[0].size(2) != cache[1].size(2):
        raise ValueError(f"cache k holds {cache[0].size(2)} keys and v {cache[1].size(2)} "
                         "values: they need the same number S")
