r"""Fixed-shape caches for compiled generation: the last `C` positions in a ring.

Dimension letters (the package legend): `B` batch, `D` model width, `H` heads, `D_h`
head width, `V` vocabulary, `L` layers, `M` positions held by an eager cache, `C` slots
of a ring: `attn_len + 1` for `TransformerLM` (the new token and the W before it),
`mem_len + 1` for Transformer-XL; for the feedback model the attention window
`W = attn_len`; without a window, every position a generation reads
(`labnn.compiled.decoding.ring_slots`).

`torch.compile` specialises a graph to the shapes of its inputs and to the Python
numbers it reads. The eager caches change shape while they fill (`KVBuffer`,
`KVState`), then slide a window whose bounds are Python ints: a compiled step would
compile again at every token. A ring keeps every shape fixed: the token at position $p$
writes its key and value into slot $p \bmod C$, over the position $C$ earlier, which has
just left the window. Apart from the slots' contents only `count`, the positions seen,
changes from token to token; it is a 0-d tensor, not an int, because the compiler would
treat an int as a constant and compile once per value. One graph serves a whole
generation.

The slots are then not in order, oldest first, as in the eager caches. That does not
matter: attention is a weighted sum over the keys, unchanged when keys and values are
permuted together, and the models see a key's position only through its distance to
the query, or through the key itself (absolute positions, added to the embedding). Each
slot's distance follows from `count`; slots not yet written get the score $-\infty$.
This module makes the rings from the eager caches and checks them; the steps over them
are `labnn.compiled.ring_steps`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from labnn.nn.arguments import is_int, state_dtypes
from labnn.nn.kv_cache import KVBuffer, KVCache
from labnn.feedback.model import check_offset
from labnn.feedback.kv import FeedbackTransformerKV, KVState
from labnn.transformer import TransformerLM
from labnn.xl.model import TransformerXL
from labnn.xl.cache import XLCache


class XLRing(NamedTuple):
    """`TransformerXL`'s cache for a compiled step: every layer's keys and values of the
    last `C - 1 = mem_len` positions, and a slot for the new one.

    Attributes:
        keys_t: per layer, the keys, transposed as `KVBuffer` stores them,
            `[B, H, D_h, C]`.
        values: per layer, the values, `[B, H, C, D_h]`.
        tables: per layer, the relative keys of the distances `C - 1, ..., 0`
            (`XLCache.rel_keys`), `[H, D_h, C]`; None with absolute positions.
        count: positions seen so far, a 0-d int64 tensor.
    """

    keys_t: list[torch.Tensor]
    values: list[torch.Tensor]
    tables: list[torch.Tensor] | None
    count: torch.Tensor


class TransformerRing(NamedTuple):
    """`TransformerLM`'s cache for a compiled step: every layer's keys and values of the
    last `C - 1` positions and a slot for the new one (`C - 1 = attn_len` with a window;
    without one, `C` covers every position a generation reads).

    Attributes:
        keys: per layer, the keys, `[B, H, C, D_h]` (rows, as `TransformerLM`'s
            cache holds them; the step reads them transposed, a view).
        values: per layer, the values, `[B, H, C, D_h]`.
        count: positions seen so far, a 0-d int64 tensor.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    count: torch.Tensor


class FeedbackRing(NamedTuple):
    """`FeedbackTransformerKV`'s cache for a compiled step.

    Attributes:
        kv: keys then values of the last `W` memory vectors, `[2, B, H, W, D_h]`.
        count: positions seen so far, a 0-d int64 tensor.
    """

    kv: torch.Tensor
    count: torch.Tensor


def slots_of(count: int, n: int, c: int, device: torch.device) -> torch.Tensor:
    r"""The slots, in a ring of `c` slots, of the last `n` of `count` positions, oldest
    first: $p \bmod C$ for each position $p$ of `count - n, ..., count - 1`.

    Shape:
        -> `[n]`.
    """
    return torch.arange(count - n, count, device=device) % c


def xl_ring(cache: XLCache, count: int) -> XLRing:
    """The ring holding what `TransformerXL.step` cached after reading `count` tokens.

    Args:
        cache: the eager cache (`labnn.xl.cache`), at most `mem_len` positions.
        count: how many positions the streams have seen (the prompt's length). The
            cache holds `M = min(count, mem_len)` of them, which is checked: a count
            that does not fit would put the keys into the wrong slots. Once the cache
            is full, any count `>= mem_len` gives an equivalent ring: its slots turn
            with `count % C`, but each key keeps its distance, all the step reads.

    Shape:
        keys and values `L x [B, H, M, D_h]` -> a ring of `C = mem_len + 1` slots.
    """
    if not isinstance(cache, XLCache):
        raise TypeError("cache must be an XLCache (from TransformerXL.step), got "
                        f"{type(cache).__name__}")
    held, mem_len = len(cache.kv[0]), cache.mem_len
    if not is_int(count) or min(count, mem_len) != held:
        need = f"exactly {held}" if held < mem_len else f"at least {mem_len}"
        raise ValueError(
            f"count={count!r} does not fit the cache: it holds {held} positions "
            f"(mem_len={mem_len}), so the streams have seen {need}; count is an int, the "
            "positions seen (the prompt's length)"
        )
    c, keys_t, values = mem_len + 1, [], []
    for kv in cache.kv:
        b, h, dh, m = kv.keys_t.shape
        slots = slots_of(count, m, c, kv.values.device)
        # zeros, not empty: a masked slot gets weight 0, and 0 * NaN would be NaN
        keys_t.append(kv.keys_t.new_zeros(b, h, dh, c).index_copy_(3, slots, kv.keys_t))
        values.append(kv.values.new_zeros(b, h, c, dh).index_copy_(2, slots, kv.values))
    tables = None if cache.rel_keys[0] is None else list(cache.rel_keys)
    count_t = torch.tensor(count, device=cache.kv[0].values.device)
    return XLRing(keys_t, values, tables, count_t)


def transformer_ring(cache: list[KVCache | KVBuffer], count: int,
                     slots: int) -> TransformerRing:
    """The ring of `slots` slots holding what `TransformerLM` cached after reading
    `count` tokens (`model(prompt, use_cache=True)`).

    Args:
        cache: per layer `(k, v)` (or a `KVBuffer`) of exactly `count` positions.
        count: the positions seen (the prompt's length).
        slots: `C`: `attn_len + 1` with a window, else at least the positions the
            generation reads (`labnn.compiled.ring_slots`); the last `C - 1` cached
            positions are kept. Fewer slots are not refused (the positions to come are
            not known here): each new token then overwrites the oldest, and decoding
            silently goes on as a window of `C - 1` earlier tokens, another model.

    Shape:
        keys and values `L x [B, H, count, D_h]` -> a ring of `C` slots.
    """
    if not isinstance(cache, list) or not all(isinstance(kv, (tuple, KVBuffer))
                                              for kv in cache):
        raise TypeError("cache must be a TransformerLM cache (a list of (k, v) per layer, "
                        f"from model(prompt, use_cache=True)), got {type(cache).__name__}")
    held = tuple(cache[0])[0].size(2)
    if not is_int(count) or count != held:
        raise ValueError(f"count={count!r} does not fit the cache: it holds {held} "
                         f"positions, so the streams have seen exactly {held}")
    if not is_int(slots) or slots < 2:
        raise ValueError(f"slots must be an int >= 2 (the new token's and one more), got "
                         f"{slots!r}")
    keys, values = [], []
    for k, v in cache:
        m = min(count, slots - 1)
        b, h, _, dh = k.shape
        at = slots_of(count, m, slots, k.device)
        # zeros, not empty: a masked slot gets weight 0, and 0 * NaN would be NaN
        keys.append(k.new_zeros(b, h, slots, dh).index_copy_(2, at, k[:, :, count - m:]))
        values.append(v.new_zeros(b, h, slots, dh).index_copy_(2, at, v[:, :, count - m:]))
    return TransformerRing(keys, values, torch.tensor(count, device=keys[0].device))


def feedback_ring(state: KVState, window: int) -> FeedbackRing:
    """The ring of `window` slots holding the keys and values of `state`.

    Args:
        state: from `FeedbackTransformerKV` (the prompt read), at least one position.
        window: the model's `attn_len`; without one, at least every position the
            generation will read. The state holds `M = min(offset, attn_len)` vectors,
            so `M == min(offset, window)` is checked: a smaller window would overwrite
            slots, a larger `attn_len` than the model's attend too far back.

    Shape:
        state.kv `[2, B, H, M, D_h]`, `M <= window` -> kv `[2, B, H, W, D_h]`.
    """
    if not isinstance(state, KVState):
        raise TypeError("state must be a KVState (from FeedbackTransformerKV), got "
                        f"{type(state).__name__}")
    check_offset(state.offset)
    two, b, h, m, dh = state.kv.shape
    if m == 0:
        raise ValueError("state holds no memory vector yet: read at least one token "
                         "with the model first (the ring step attends to one at least)")
    if not is_int(window) or window <= 0 or min(state.offset, window) != m:
        need = f"exactly {m}" if m < state.offset else f"at least {m}"
        raise ValueError(
            f"window={window!r} does not fit the state: it holds the last {m} of "
            f"{state.offset} memory vectors, so the window (the model's attn_len) must "
            f"be a positive int, {need}"
        )
    slots = slots_of(state.offset, m, window, state.kv.device)
    kv = state.kv.new_zeros(two, b, h, window, dh).index_copy_(3, slots, state.kv)
    return FeedbackRing(kv, torch.tensor(state.offset, device=kv.device))


def check_ring(model: TransformerLM | TransformerXL | FeedbackTransformerKV,
               ring: TransformerRing | XLRing | FeedbackRing, batch_size: int) -> None:
    """Raise a clear error unless `ring` could come from this model's cache by
    `transformer_ring`, `xl_ring` or `feedback_ring` (by the model's kind), for
    `batch_size` streams.

    Every layer's shapes, the kind of positions, the window, dtype and device: a ring
    from another model would otherwise run silently on the model's first layers, or
    fail inside the compiler's tracing. Python on shapes only; `labnn.compiled.decoder`
    calls it once per generation, never the steps.
    """
    kind, maker, check = {
        TransformerLM: (TransformerRing, "transformer_ring", _check_transformer_ring),
        TransformerXL: (XLRing, "xl_ring", _check_xl_ring),
        FeedbackTransformerKV: (FeedbackRing, "feedback_ring", _check_feedback_ring),
    }[type(model)]
    if not isinstance(ring, kind):
        article = "an" if kind is XLRing else "a"
        raise TypeError(f"ring must be {article} {kind.__name__} (from {maker}) for a "
                        f"{type(model).__name__}, got {type(ring).__name__}")
    weight = (model.kv if isinstance(model, FeedbackTransformerKV)
              else model.blocks[0].attn.qkv).weight
    tensors = check(model, ring, batch_size)
    for t in tensors:
        if t.dtype not in state_dtypes(weight) or t.device != weight.device:
            raise ValueError(f"ring is {t.dtype} on {t.device}, but the model is "
                             f"{weight.dtype} on {weight.device}")
    count = ring.count
    if (not isinstance(count, torch.Tensor) or count.dim() != 0
            or count.dtype != torch.long or count.device != weight.device):
        got = (f"{count.dtype} {list(count.shape)} on {count.device}"
               if isinstance(count, torch.Tensor) else type(count).__name__)
        raise ValueError(f"ring.count must be a 0-d torch.long tensor on {weight.device} "
                         f"(positions seen), got {got}")


def _check_xl_ring(model: TransformerXL, ring: XLRing, b: int) -> list[torch.Tensor]:
    """`check_ring`'s shapes for XL; returns the ring's tensors."""
    n, tables = len(model.blocks), ring.tables
    if len(ring.keys_t) != n or len(ring.values) != n or (
            tables is not None and len(tables) != n):
        raise ValueError(f"ring holds {len(ring.keys_t)} layers, but this model has {n} "
                         "(a ring from another model?)")
    positions = model.config.positions
    if (tables is None) != (positions == "absolute"):
        made = "absolute" if tables is None else "relative"
        raise ValueError(f"ring was made by a model with {made} positions, this one "
                         f"{positions}")
    attn = model.blocks[0].attn
    h, dh = attn.n_heads, attn.d_head
    first = ring.values[0]
    c = first.size(2) if isinstance(first, torch.Tensor) and first.dim() == 4 else "C"
    want = {"keys_t": (b, h, dh, c), "values": (b, h, c, dh), "tables": (h, dh, c)}
    shown = {"keys_t": f"[B={b}, H={h}, D_h={dh}, C={c}]",
             "values": f"[B={b}, H={h}, C={c}, D_h={dh}]",
             "tables": f"[H={h}, D_h={dh}, C={c}]"}
    tensors = []
    for name in want:
        for i, t in enumerate(getattr(ring, name) or ()):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want[name]:
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ring.{name}[{i}] has shape {got}, expected "
                                 f"{shown[name]} (a ring from another model or batch?)")
            tensors.append(t)
    return tensors


def _check_transformer_ring(model: TransformerLM, ring: TransformerRing,
                            b: int) -> list[torch.Tensor]:
    """`check_ring`'s shapes for `TransformerLM`; returns the ring's tensors."""
    n, attn, band = len(model.blocks), model.blocks[0].attn, model.config.attn_len
    if len(ring.keys) != n or len(ring.values) != n:
        raise ValueError(f"ring holds {len(ring.keys)} layers, but this model has {n} "
                         "(a ring from another model?)")
    first = ring.values[0]
    c = first.size(2) if isinstance(first, torch.Tensor) and first.dim() == 4 else "C"
    for name in ("keys", "values"):
        for i, t in enumerate(getattr(ring, name)):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != (
                    b, attn.n_heads, c, attn.d_head):
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ring.{name}[{i}] has shape {got}, expected [B={b}, "
                                 f"H={attn.n_heads}, C={c}, D_h={attn.d_head}] (a ring from "
                                 "another model or batch?)")
    if band is not None and c > band + 1:
        raise ValueError(f"ring has {c} slots, but this model attends to attn_len={band} "
                         f"earlier tokens: make it with at most attn_len + 1 = {band + 1}")
    return [*ring.keys, *ring.values]


def _check_feedback_ring(model: FeedbackTransformerKV, ring: FeedbackRing,
                         b: int) -> list[torch.Tensor]:
    """`check_ring`'s shapes for the feedback model; returns the ring's tensor."""
    c, kv = model.config, ring.kv
    h, dh = c.n_heads, c.d_model // c.n_heads
    if (not isinstance(kv, torch.Tensor) or kv.dim() != 5
            or (kv.size(0), kv.size(1), kv.size(2), kv.size(4)) != (2, b, h, dh)):
        got = list(kv.shape) if isinstance(kv, torch.Tensor) else type(kv).__name__
        raise ValueError(f"ring.kv has shape {got}, expected [2, B={b}, H={h}, W, "
                         f"D_h={dh}] (a ring from another model or batch?)")
    if c.attn_len is not None and kv.size(3) != c.attn_len:
        raise ValueError(f"ring has a window of {kv.size(3)} slots, but this model "
                         f"attends to attn_len={c.attn_len}: make it with "
                         "feedback_ring(state, model.config.attn_len)")
    return [kv]
