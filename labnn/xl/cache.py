r"""Generation with Transformer-XL: the memory as a cache of keys and values, read one
token at a time (`TransformerXL.step`).

Dimension letters (the package legend): `B` batch, `T` new tokens of a call, `M` cached
positions (at most `mem_len`), `S = M + T` keys a new token attends to, `D` model width,
`H` heads, `D_h` head width, `L` layers; `R = mem_len + 1` distances in a table of
relative keys.

Training keeps each layer's input *states* as its memory and projects them to keys and
values at every segment. For generation that projection would be repeated at every
token; with relative positions it need not be: a key $k_j = W_{k,E}\,\mathrm{LN}(h_j)$
holds no position, so once computed it means the same thing at every later step. The
cache therefore keeps each layer's keys and values of the last `mem_len` positions (a
`KVBuffer`), and the relative keys $r_\delta = W_{k,R} R_\delta$ of the distances
$\delta = 0 \dots$ `mem_len`, projected once when the cache is created.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from labnn.nn.attention import KVBuffer, causal_mask
from labnn.nn.arguments import compute_dtype, state_dtype_hint
from labnn.xl.memory import check_mem_len

if TYPE_CHECKING:
    from labnn.xl.relative_attention import RelativeMultiHeadAttention
    from labnn.xl.model import TransformerXL
    from labnn.xl.block import XLBlock


class XLCache(NamedTuple):
    """What `TransformerXL.step` keeps between calls.

    Attributes:
        kv: per layer, a `KVBuffer` of the keys and values of the last `mem_len`
            positions, each `[B, H, M, D_h]` (`k, v = cache.kv[i]`).
        rel_keys: per layer, the relative keys from
            `RelativeMultiHeadAttention.key_table`, `[H, D_h, R]` (None with absolute
            positions).
        mem_len: how many positions are kept.
    """

    kv: list[KVBuffer]
    rel_keys: list[torch.Tensor | None]
    mem_len: int


def start_cache(model: TransformerXL, x: torch.Tensor, mem_len: int | None) -> XLCache:
    r"""An empty cache for the streams of `x`, with each layer's table of relative keys.

    A new token attends to at most `mem_len` cached keys and itself, at the distances
    $\delta = 0, \dots, \mathrm{mem\_len}$: each layer projects the encodings of those
    `mem_len + 1` distances once, here, instead of at every token.

    The buffers hold the dtype the key projections return: the model's, or autocast's
    under `torch.autocast` (so is the table, projected here).

    Shape:
        x `[B, T, D]` -> a cache of `L` empty buffers `[B, H, 0, D_h]`.
    """
    mem_len = model.config.mem_len if mem_len is None else mem_len
    check_mem_len(mem_len)
    relative = model.config.positions == "relative"
    tables = [
        block.attn.key_table(mem_len + 1) if relative else None
        for block in model.blocks
    ]
    attn = model.blocks[0].attn
    dtype = compute_dtype(attn.qkv.weight)
    like = x.new_empty(x.size(0), attn.n_heads, 0, attn.d_head, dtype=dtype)
    return XLCache([KVBuffer.empty(like) for _ in model.blocks], tables, mem_len)


def check_cache(
    model: TransformerXL, cache: XLCache, x: torch.Tensor, mem_len: int | None
) -> None:
    """Raise a clear error unless `cache` could come from `model.step` for the states
    `x [B, T, D]`.

    Checks the layer count and the first layer's buffer and table (`step` makes every
    layer's alike): O(1) Python on shapes only, as it runs at every generated token.
    The keys must have the dtype the projections return (autocast's under
    `torch.autocast`): a cache serves under the autocast it was made in.
    """
    if not isinstance(cache, XLCache):
        got = type(cache).__name__
        raise TypeError(f"cache must be an XLCache (from this model's step), got {got}")
    n, positions = len(model.blocks), model.config.positions
    if len(cache.kv) != n or len(cache.rel_keys) != n:
        raise ValueError(f"cache holds {len(cache.kv)} layers, but this model has {n} "
                         "(a cache from another model?)")
    if mem_len is not None and mem_len != cache.mem_len:
        raise ValueError(
            f"mem_len={mem_len!r} differs from the cache's {cache.mem_len}; it is "
            "fixed once the cache exists (pass None)"
        )
    attn, b = model.blocks[0].attn, x.size(0)
    kv, table = cache.kv[0], cache.rel_keys[0]
    if not isinstance(kv, KVBuffer):
        raise TypeError(f"cache.kv[0] must be a KVBuffer, got {type(kv).__name__}")
    values = kv.storage_values  # [B, H, C, D_h], no view made: this runs at every token
    if values.size(0) != b:
        raise ValueError(
            f"cache holds streams of batch size {values.size(0)}, but the tokens "
            f"have batch size {b}"
        )
    if (values.size(1), values.size(3)) != (attn.n_heads, attn.d_head):
        raise ValueError(
            f"cache.kv[0] holds {values.size(1)} heads of width {values.size(3)}, "
            f"but this model has {attn.n_heads} heads of width {attn.d_head}"
        )
    dtype = compute_dtype(attn.qkv.weight)  # what the new keys will be
    if values.dtype != dtype or values.device != x.device:
        hint = state_dtype_hint(values.dtype, attn.qkv.weight)
        if values.dtype != dtype and not hint:
            hint = " (a cache made outside torch.autocast, used under it?)"
        raise ValueError(
            f"cache.kv[0] is {values.dtype} on {values.device}, but the model runs "
            f"{dtype} on {x.device}{hint}"
        )
    if (table is None) != (positions == "absolute"):
        made = "absolute" if table is None else "relative"
        raise ValueError(
            f"cache was made by a model with {made} positions, "
            f"this one uses {positions}"
        )
    want = (attn.n_heads, attn.d_head, cache.mem_len + 1)
    if table is not None and (table.shape != want or table.dtype != dtype
                              or table.device != x.device):
        raise ValueError(
            f"cache.rel_keys[0] is {table.dtype} {list(table.shape)} on "
            f"{table.device}, expected {dtype} {list(want)} on {x.device}"
        )


def attend_one_token(
    attn: RelativeMultiHeadAttention,
    x: torch.Tensor,
    cache: KVBuffer,
    table: torch.Tensor,
) -> tuple[torch.Tensor, KVBuffer]:
    r"""Relative attention for one new token per stream: `attn.forward(x[:, None],
    cache=cache)` in eval mode (tested), in fewer and fused operations.

    About 20 tensor operations instead of 40: on a CPU the number of operations, more
    than their arithmetic, makes the time of a generation step. Generation only: no
    dropout, so training mode is refused.

    Args:
        attn: the layer's attention.
        x: the new token's hidden state (already normalised).
        cache: keys and values of the earlier tokens.
        table: the relative keys from `attn.key_table(R)`, `R >= S`; its last `S`
            columns are used.

    Shape:
        x `[B, D]`, table `[H, D_h, R]` -> output `[B, D]`.

    Returns:
        `(output, kv)`, `kv` the cache with the new token appended.
    """
    if attn.training:
        raise RuntimeError(
            "attend_one_token is for generation: call model.eval() first"
        )
    b, h, dh = x.size(0), attn.n_heads, attn.d_head
    # The new token's query $q$, key and value; the key and value are appended to the
    # cache, which then holds all $S$ keys $k_j$ the query attends to.
    q, kv = attn.project(x[:, None], cache)
    q = q.squeeze(2)  # [B, H, D_h]
    s, scale = len(kv), 1 / math.sqrt(dh)
    # A single query is the last position, $i = S - 1$, so key $j$ lies at distance
    # $\delta = S - 1 - j$: exactly what column $j$ of the table's last $S$ columns
    # holds. No `relative_shift` is needed. Terms (b) + (d), $(q + v)^\top r_{S-1-j}$:
    # each head's table serves the $B$ queries of that head in one product.
    position = torch.bmm((q + attn.position_bias).transpose(0, 1), table[:, :, -s:])
    # Terms (a) + (c), $(q + u)^\top k_j$, are added to them and both are scaled in one
    # `baddbmm`, $s_j = \tfrac{1}{\sqrt{d_h}}\big((q + v)^\top r_{S-1-j}
    # + (q + u)^\top k_j\big)$, reading each head's keys as the contiguous $K^\top$
    # that `KVBuffer` stores.
    content_query = (q + attn.content_bias).view(b * h, 1, dh)
    keys_t = kv.keys_t.reshape(b * h, dh, s)
    position = position.transpose(0, 1).reshape(b * h, 1, s)  # [B * H, 1, S]
    scores = torch.baddbmm(position, content_query, keys_t, beta=scale, alpha=scale)
    # The output is the softmax-weighted sum of the values, $\sum_j a_j v_j$, its heads
    # concatenated and projected back to the model width.
    values = kv.values.reshape(b * h, s, dh)
    y = torch.bmm(scores.softmax(dim=-1), values).view(b, h * dh)
    return attn.out_proj(y), kv


def block_one_token(
    block: XLBlock, x: torch.Tensor, cache: KVBuffer, table: torch.Tensor | None
) -> tuple[torch.Tensor, KVBuffer]:
    r"""`XLBlock.forward` for one new token per stream in eval mode:
    $h \leftarrow h + \mathrm{Attn}(\mathrm{LN}(h))$, then
    $h \leftarrow h + \mathrm{FF}(\mathrm{LN}(h))$.

    With absolute positions (`table` None) the attention is the plain one, over the
    cache.

    Shape:
        x `[B, D]` -> `([B, D], kv)`.
    """
    if table is None:
        a, _, kv = block.attn(block.norm_attn(x)[:, None], cache=cache)
        a = a[:, 0]
    else:
        a, kv = attend_one_token(block.attn, block.norm_attn(x), cache, table)
    x = x + a
    return x + block.ff(block.norm_ff(x)), kv


def read_one_token(
    blocks: nn.ModuleList, x: torch.Tensor, cache: XLCache
) -> tuple[torch.Tensor, XLCache]:
    r"""The generation step: one new token per stream through every layer, in eval mode.

    Layer $l$ receives the new token's state $h^{l-1}$ and returns $h^l$ through
    `block_one_token`: its normalised state is projected to a query $q$, a key and a
    value; the key and value join the layer's cache, and the query attends to all
    $S = M + 1$ keys with the four terms of relative attention,

    $$s_j = \tfrac{1}{\sqrt{d_h}}\big((q + u)^\top k_j + (q + v)^\top r_{S-1-j}\big),$$

    where $r_{S-1-j}$ comes from the layer's table, computed once (`start_cache`).

    Shape:
        x `[B, D]` -> `([B, D], cache)`.
    """
    kv = []
    for block, layer_kv, table in zip(blocks, cache.kv, cache.rel_keys):
        x, layer_kv = block_one_token(block, x, layer_kv, table)
        # The cache update: the new key and value were appended to the layer's buffer;
        # only the last `mem_len` positions are kept,
        # $K \leftarrow [K \circ k_{new}]_{-M:}$ (a narrower window over the same
        # storage, no copy).
        kv.append(layer_kv.last(cache.mem_len))
    return x, XLCache(kv, cache.rel_keys, cache.mem_len)


def read_tokens(
    blocks: nn.ModuleList, x: torch.Tensor, cache: XLCache
) -> tuple[torch.Tensor, XLCache]:
    """Several new tokens per stream (a prompt): each block's `forward` over the cached
    keys and the new tokens, under the causal mask.

    Equals `TransformerXL.forward` over the same positions, with the memory's keys and
    values taken from the cache instead of projected from stored states.

    Shape:
        x `[B, T, D]` -> `([B, T, D], cache)`.
    """
    t = x.size(1)
    mask = causal_mask(t, t + len(cache.kv[0]), device=x.device)
    kv = []
    for block, layer_kv in zip(blocks, cache.kv):
        x, _, layer_kv = block(x, mask, layer_kv)
        kv.append(layer_kv.last(cache.mem_len))
    return x, XLCache(kv, cache.rel_keys, cache.mem_len)
