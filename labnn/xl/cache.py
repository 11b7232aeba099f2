r"""Generation with Transformer-XL: the memory as a cache of keys and values, read one
token at a time (`TransformerXL.step`).

Dimension letters (the package legend): `B` batch, `T` new tokens of a call, `M` cached
positions (at most `mem_len`), `S = M + T` keys a new token attends to, `D` model width,
`H` heads, `D_h` head width, `L` layers; `R = mem_len + 1` distances in a table of
relative keys.

Training keeps each layer's input *states* as its memory and projects them to keys and
values at every segment. For generation that projection would be repeated at every
token; with relative positions it need not be: a key (`XLBlock.memory_cache`) holds no
position, so once computed it means the same thing at every later step. The cache
therefore keeps each layer's keys and values of the last `mem_len` positions (a
`KVBuffer`), and the relative keys of the distances $\delta = 0 \dots$ `mem_len`
(`RelativeMultiHeadAttention.key_table`), projected once when the cache is created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from labnn.nn.attention import KVBuffer, causal_mask
from labnn.nn.arguments import autocast_dtype, compute_dtype, state_dtype_hint
from labnn.xl.memory import check_mem_len
from labnn.xl.relative_attention import relative_scores

if TYPE_CHECKING:
    from labnn.nn.attention import MultiHeadAttention
    from labnn.xl.model import TransformerXL
    from labnn.xl.relative_attention import RelativeMultiHeadAttention


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
    # keys stored transposed for the written-out scores q K^T (`KVBuffer`'s docstring)
    kv = [KVBuffer.empty(like, transposed=True) for _ in model.blocks]
    return XLCache(kv, tables, mem_len)


def check_cache(
    model: TransformerXL, cache: XLCache, tokens: torch.Tensor, mem_len: int | None
) -> None:
    """Raise a clear error unless `cache` could come from `model.step` for the ids
    `tokens [B, T]` (already checked: `step`'s door).

    Checks the layer count and the first layer's buffer and table (`step` makes every
    layer's alike): O(1) Python on shapes only, once per call of `step` (`generate`'s
    tokens go past it: the cache they read is the one each step made). The keys must
    have the dtype the projections return (autocast's under `torch.autocast`): a cache
    serves under the autocast it was made in.
    """
    if not isinstance(cache, XLCache):
        got = type(cache).__name__
        raise TypeError(f"cache must be an XLCache (from this model's step), got {got}")
    n, positions = len(model.blocks), model.config.positions
    if len(cache.kv) != n:
        raise ValueError(f"cache holds {len(cache.kv)} layers, but this model has {n} "
                         "(a cache from another model?)")
    if len(cache.rel_keys) != n:
        raise ValueError(f"cache holds the relative keys of {len(cache.rel_keys)} layers, "
                         f"but this model has {n} (cache.rel_keys was changed?)")
    if mem_len is not None and mem_len != cache.mem_len:
        raise ValueError(
            f"mem_len={mem_len!r} differs from the cache's {cache.mem_len}; it is "
            "fixed once the cache exists (pass None)"
        )
    attn, b, device = model.blocks[0].attn, tokens.size(0), tokens.device
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
    if values.dtype != dtype or values.device != device:
        hint = state_dtype_hint(values.dtype, attn.qkv.weight)
        if values.dtype != dtype and not hint and autocast_dtype(device) is not None:
            hint = " (a cache made outside torch.autocast, used under it?)"
        raise ValueError(
            f"cache.kv[0] is {values.dtype} on {values.device}, but the model runs "
            f"{dtype} on {device}{hint}"
        )
    if (table is None) != (positions == "absolute"):
        made = "absolute" if table is None else "relative"
        raise ValueError(
            f"cache was made by a model with {made} positions, "
            f"this one uses {positions}"
        )
    want = (attn.n_heads, attn.d_head, cache.mem_len + 1)
    if table is not None and (table.shape != want or table.dtype != dtype
                              or table.device != device):
        raise ValueError(
            f"cache.rel_keys[0] is {table.dtype} {list(table.shape)} on "
            f"{table.device}, expected {dtype} {list(want)} on {device}"
        )


def attend_one_token(
    attn: RelativeMultiHeadAttention | MultiHeadAttention,
    x: torch.Tensor,
    cache: KVBuffer,
    table: torch.Tensor | None,
) -> tuple[torch.Tensor, KVBuffer]:
    r"""Attention for one new token per stream: `attn.forward(x[:, None], cache=cache)`
    in eval mode (tested), in fewer and fused operations.

    The new token's key and value are appended to the cache, which then holds all `S`
    keys the query attends to. A single query is the last position, $i = S - 1$, so key
    $j$ lies at distance $\delta = S - 1 - j$: exactly what column $j$ of the table's
    last `S` columns holds, and `labnn.xl.relative_attention.relative_scores` needs no
    `relative_shift`. With absolute positions (`table` None) the scores are
    $q^\top k_j / \sqrt{d_h}$. Generation only: no dropout, so training mode is refused.

    Args:
        attn: the layer's attention.
        x: the new token's hidden state (already normalised).
        cache: keys and values of the earlier tokens.
        table: the relative keys from `attn.key_table(R)`, `R >= S`; its last `S`
            columns are used. None with absolute positions.

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
    q, kv = attn.project(x[:, None], cache)  # q [B, H, 1, D_h]
    s = len(kv)
    if table is None:
        scores = relative_scores(q, kv.keys_t)
    else:
        scores = relative_scores(q, kv.keys_t, table[:, :, -s:], attn.content_bias,
                                 attn.position_bias)
    # no mask: the buffer holds the new token and earlier ones only, every one a key it
    # may read; then $\sum_j a_j v_j$ per head, the heads concatenated
    weights = scores.view(b * h, 1, s).softmax(dim=-1)
    y = torch.bmm(weights, kv.values.reshape(b * h, s, dh)).view(b, h * dh)
    return attn.out_proj(y), kv


def read_one_token(
    blocks: nn.ModuleList, x: torch.Tensor, cache: XLCache
) -> tuple[torch.Tensor, XLCache]:
    r"""The generation step: one new token per stream through every layer, in eval mode.

    Layer $l$ receives the new token's state $h^{l-1}$ and returns $h^l$:
    `TransformerBlock.residual` around `attend_one_token` over the layer's cache and table of
    relative keys (computed once, `start_cache`).

    Shape:
        x `[B, D]` -> `([B, D], cache)`.
    """
    kv = []
    for block, layer_kv, table in zip(blocks, cache.kv, cache.rel_keys):
        x, layer_kv = block.residual(
            x, lambda h: attend_one_token(block.attn, h, layer_kv, table))
        # The cache update: the new key and value were appended to the layer's buffer;
        # only the last `mem_len` positions are kept,
        # $K \leftarrow [K \circ k_{new}]_{-\mathrm{mem\_len}:}$ (a narrower window over
        # the same storage, no copy).
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
        # causal by construction: no need to read the mask on the host to know it
        x, _, layer_kv = block(x, mask, layer_kv, sees_later=False)
        kv.append(layer_kv.last(cache.mem_len))
    return x, XLCache(kv, cache.rel_keys, cache.mem_len)
