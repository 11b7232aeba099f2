r"""Fixed-shape caches for compiled generation: the last `C` positions in a ring.

Dimension letters (the package legend): `B` batch, `D` model width, `H` heads, `D_h`
head width, `V` vocabulary, `L` layers, `M` positions held by an eager cache, `C` slots
of a ring: `mem_len + 1` for Transformer-XL; for the feedback model the attention window
`W = attn_len`, or, without one, every position a generation reads
(`labnn.compiled`).

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
permuted together, and both models see a key's position only through its distance to
the query (XL with absolute positions not at all). Each slot's distance follows from
`count`; slots not yet written get the score $-\infty$. The steps here run eagerly too,
and equal `TransformerXL.step` and `FeedbackTransformerKV.step` (tested).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from labnn.nn.arguments import is_int, state_dtypes
from labnn.feedback.model import check_offset
from labnn.feedback.kv import FeedbackTransformerKV, KVState
from labnn.feedback.layer import RelativeBias
from labnn.xl.model import TransformerXL
from labnn.xl.cache import XLCache

if TYPE_CHECKING:
    from labnn.nn.attention import MultiHeadAttention


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
    first: $p \bmod C$ for $p = $ `count - n, ..., count - 1`.

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
            that does not fit would put the keys into the wrong slots. Any count
            `>= mem_len` gives the same ring once the cache is full (only distances
            matter).

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


def check_ring(model: TransformerXL | FeedbackTransformerKV, ring: XLRing | FeedbackRing,
               batch_size: int) -> None:
    """Raise a clear error unless `ring` could come from `xl_ring` (for a
    `TransformerXL`) or `feedback_ring` (for a `FeedbackTransformerKV`) of this model's
    cache, for `batch_size` streams.

    Every layer's shapes, the kind of positions, the window, dtype and device: a ring
    from another model would otherwise run silently on the model's first layers, or
    fail inside the compiler's tracing. Python on shapes only; `labnn.compiled.decoder`
    calls it once per generation, never the steps.
    """
    xl = isinstance(model, TransformerXL)
    kind = XLRing if xl else FeedbackRing
    if not isinstance(ring, kind):
        maker = "xl_ring" if xl else "feedback_ring"
        raise TypeError(f"ring must be an {kind.__name__} (from {maker}) for a "
                        f"{type(model).__name__}, got {type(ring).__name__}")
    weight = model.blocks[0].attn.qkv.weight if xl else model.kv.weight
    if xl:
        tensors = _check_xl_ring(model, ring, batch_size)
    else:
        tensors = [_check_feedback_ring(model, ring, batch_size)]
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


def _check_feedback_ring(model: FeedbackTransformerKV, ring: FeedbackRing,
                         b: int) -> torch.Tensor:
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
    return kv


def ring_attention(
    attn: MultiHeadAttention,
    x: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    slot: torch.Tensor,
    column: torch.Tensor,
    written: torch.Tensor,
    table: torch.Tensor | None,
) -> torch.Tensor:
    r"""One layer's attention for one new token over a ring: what `attend_one_token`
    (`labnn.xl.cache`) computes over a `KVBuffer`.

    The new token's key and value are written into its `slot` (in place); then the query
    scores all `C` slots. Slot $j$ holds the key at distance
    $\delta_j = (\text{slot} - j) \bmod C$, so with relative positions
    $$s_j = \tfrac{1}{\sqrt{d_h}}\big((q + u)^\top k_j
    + (q + v)^\top r_{\delta_j}\big),$$
    $r_\delta$ read from column $C - 1 - \delta$ of the table (`column`). With absolute
    positions (`table` None) only $q^\top k_j / \sqrt{d_h}$ remains. Slots not yet
    written get the score $-\infty$, hence the weight 0.

    Args:
        attn: the layer's attention (`RelativeMultiHeadAttention` when `table` is given).
        x: the new token's normalised state.
        keys_t, values: the layer's ring.
        slot: the new token's slot, 0-d.
        column: the table column of each slot, $C - 1 - \delta_j$.
        written: boolean, True = may attend (a slot already written).
        table: the relative keys of the distances `C - 1, ..., 0`.

    Shape:
        x `[B, D]`, keys_t `[B, H, D_h, C]`, values `[B, H, C, D_h]`, column and
        written `[C]`, table `[H, D_h, C]` -> `[B, D]`.
    """
    q, (k, v) = attn.project(x[:, None])  # each [B, H, 1, D_h]
    q = q.squeeze(2)
    # in the ring's dtype: under torch.autocast the projections return autocast's
    keys_t.index_copy_(3, slot.view(1), k.transpose(2, 3).to(keys_t.dtype))
    values.index_copy_(2, slot.view(1), v.to(values.dtype))
    if table is None:
        scores = (q.unsqueeze(2) @ keys_t).squeeze(2)  # [B, H, C]
    else:
        content = ((q + attn.content_bias).unsqueeze(2) @ keys_t).squeeze(2)
        by_distance = (q + attn.position_bias).transpose(0, 1) @ table  # [H, B, C]
        # slot j takes the term of its distance, found in column C - 1 - delta_j
        scores = content + by_distance.transpose(0, 1)[..., column]  # [B, H, C]
    scores = (scores / math.sqrt(attn.d_head)).masked_fill(~written, float("-inf"))
    y = (scores.softmax(dim=-1).unsqueeze(2) @ values).squeeze(2)  # [B, H, D_h]
    return attn.out_proj(y.flatten(1))


def xl_ring_step(model: TransformerXL, x: torch.Tensor, ring: XLRing) -> torch.Tensor:
    r"""`TransformerXL.step` for one token per stream over a ring, in eval mode; the
    ring is updated in place.

    The new token takes slot $\text{count} \bmod C$; slot $j$ lies at distance
    $\delta_j = (\text{count} - j) \bmod C$ and was written iff
    $\delta_j \le \text{count}$. Each block is
    $h \leftarrow h + \mathrm{Attn}(\mathrm{LN}(h))$, then
    $h \leftarrow h + \mathrm{FF}(\mathrm{LN}(h))$, as in `XLBlock`.

    Args:
        model: the model, every module in eval mode (the step has no dropout;
            `labnn.compiled.decoder` checks the mode once per generation, not here, at
            every token).
        x: the new token's embedding, `model.embed(token)`.
        ring: from `xl_ring`.

    Shape:
        x `[B, D]` -> logits `[B, V]`.
    """
    c = ring.values[0].size(2)
    slot = ring.count % c
    distance = (slot - torch.arange(c, device=x.device)) % c
    written, column = distance <= ring.count, c - 1 - distance
    for i, block in enumerate(model.blocks):
        table = None if ring.tables is None else ring.tables[i]
        x = x + ring_attention(block.attn, block.norm_attn(x), ring.keys_t[i],
                               ring.values[i], slot, column, written, table)
        x = x + block.ff(block.norm_ff(x))
    ring.count.add_(1)
    return model.head(model.norm(x))


def feedback_ring_step(
    model: FeedbackTransformerKV, x: torch.Tensor, ring: FeedbackRing
) -> torch.Tensor:
    r"""`FeedbackTransformerKV.step` over a ring, in eval mode; the ring is updated in
    place.

    Slot $j$ holds the memory vector of the latest earlier position $p \equiv j$
    (mod $W$), at distance $\delta_j = ((\text{count} - 1 - j) \bmod W) + 1$ (1 = the
    previous token), written iff $\delta_j \le \text{count}$. Each layer is the unchanged
    `FeedbackLayer.forward`, given the ring's keys and values and the relative bias of
    each slot's distance ($-\infty$ where a slot is empty; the slots' order does not
    matter, as the bias comes with each slot). Then the step's memory vector
    $m = \mathrm{LN}\big(\sum_{l=0}^{L} \mathrm{softmax}(w)_l\, x^l\big)$, $x^0$ the
    embedding, is projected to a key and value written into slot
    $\text{count} \bmod W$.

    Args:
        model: the model, every module in eval mode (checked by
            `labnn.compiled.decoder`, once per generation).
        x: the new token's embedding.
        ring: from `feedback_ring`, at least one slot written (with none, every score
            would be $-\infty$ and the softmax undefined; the eager model returns a zero
            attention output for the first token).

    Shape:
        x `[B, D]` -> logits `[B, V]`.
    """
    _, b, h, w, dh = ring.kv.shape
    distance = (ring.count - 1 - torch.arange(w, device=x.device)) % w + 1
    empty = distance > ring.count
    k, v = ring.kv.unbind(0)
    xs = [x]
    for layer in model.layers:
        bias = RelativeBias.at(layer.attn.rel.bias, distance)  # [H, W]
        xs.append(layer(xs[-1], k, v, bias=bias.masked_fill(empty, float("-inf"))))
    m = model.norm_mem(model.mix(torch.stack(xs)))
    row = model.kv(m).view(b, 2, h, dh).transpose(0, 1)  # [2, B, H, D_h]
    # in the ring's dtype: under torch.autocast the projection returns autocast's
    ring.kv.index_copy_(3, (ring.count % w).view(1), row.unsqueeze(3).to(ring.kv.dtype))
    ring.count.add_(1)
    return model.head(xs[-1])
