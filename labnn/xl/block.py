r"""One layer of Transformer-XL: attention over memory + segment, then a feed-forward
network, each behind a layer norm and a residual connection.

Dimension letters (the package legend): `B` batch, `T` tokens of the segment, `M` memory
length, `S = M + T` keys, `D` model width, `H` heads, `D_h` head width, `F` feed-forward
width.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import nn

from labnn.nn.attention import KVBuffer, KVCache, MultiHeadAttention
from labnn.nn.layers import FeedForward
from labnn.xl.relative_attention import RelativeMultiHeadAttention


class XLBlock(nn.Module):
    r"""Pre-norm block attending over memory + segment:
    $x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x) \mid \mathrm{LN}(m))$, then
    $x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$.

    Args:
        d_model, n_heads, d_ff, dropout, bias: as in `TransformerBlock`.
        relative: relative attention (`RelativeMultiHeadAttention`) or plain
            `MultiHeadAttention` (for a model with absolute positions added to its
            input).
        clamp_len: see `RelativeMultiHeadAttention`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        relative: bool = True,
        clamp_len: int | None = None,
    ):
        """The two sublayers, each behind its own layer norm (`norm_attn`,
        `norm_ff`)."""
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model, bias=bias)
        if relative:
            self.attn = RelativeMultiHeadAttention(
                d_model, n_heads, dropout=dropout, bias=bias, clamp_len=clamp_len
            )
        else:
            self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.norm_ff = nn.LayerNorm(d_model, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, bias=bias)

    def memory_cache(self, mem: torch.Tensor | None) -> KVCache | None:
        r"""Keys and values of the memory: the normalised states through the key/value
        projections, $k_j = W_{k,E}\,\mathrm{LN}(m_j)$ and
        $v_j = W_v\,\mathrm{LN}(m_j)$.

        Shape:
            mem `[B, M, D]` -> `(k, v)`, each `[B, H, M, D_h]`.
        """
        if mem is None:
            return None
        return self.attn.project_kv(self.norm_attn(mem))

    def residual(self, x: torch.Tensor, attend: Callable[[torch.Tensor], tuple]) -> tuple:
        r"""The block around a given attention, the one place its residual structure is
        written: $h \leftarrow h + \mathrm{Attn}(\mathrm{LN}(h))$, then
        $h \leftarrow h + \mathrm{FF}(\mathrm{LN}(h))$.

        Each path supplies only its attention, that is, where the keys come from:
        `forward` (memory + segment), `labnn.xl.cache.read_one_token` (one token over a
        `KVBuffer`), `labnn.compiled.ring_steps.xl_ring_step` (one token over a ring).

        Args:
            x: the block's input states.
            attend: maps the normalised states to `(output, *rest)`, its output shaped
                as `x`; the rest (weights, keys and values) is passed through.

        Shape:
            x `[B, T, D]` or `[B, D]` -> `(x, *rest)`, x shaped as given.
        """
        a, *rest = attend(self.norm_attn(x))
        x = x + a
        return x + self.ff(self.norm_ff(x)), *rest

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | KVBuffer | None = None, *, need_weights: bool = False,
                sees_later: bool | None = None):
        """`residual` around the layer's attention over memory + segment.

        Args:
            x: the segment's hidden states.
            mask: True = may attend, over memory + segment; None = every key.
            cache: the memory's keys and values (a `KVBuffer` is appended to).
            need_weights: also return the attention weights.
            sees_later: whether `mask` lets a query see a later key, when the caller
                knows; None = relative attention reads it from the mask (one read back
                to the host).

        Shape:
            x `[B, T, D]`, mask `[T, S]` -> x `[B, T, D]`, weights `[B, H, T, S]`.

        Returns:
            `(x, weights or None, cache)`: the cache with the segment's keys and values.
        """
        known = {"sees_later": sees_later} if isinstance(
            self.attn, RelativeMultiHeadAttention) else {}
        return self.residual(x, partial(self.attn, mask=mask, cache=cache,
                                        need_weights=need_weights, **known))
