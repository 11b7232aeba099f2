r"""One layer of Transformer-XL: attention over memory + segment, then a feed-forward
network, each behind a layer norm and a residual connection.

Dimension letters (the package legend): `B` batch, `T` tokens of the segment, `M` memory
length, `S = M + T` keys, `D` model width, `H` heads, `D_h` head width, `F` feed-forward
width.
"""

from __future__ import annotations

from functools import partial

import torch

from labnn.nn.attention import KVBuffer, KVCache
from labnn.nn.block import TransformerBlock
from labnn.xl.relative_attention import RelativeMultiHeadAttention


class XLBlock(TransformerBlock):
    r"""Pre-norm block attending over memory + segment:
    $x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x) \mid \mathrm{LN}(m))$, then
    $x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$: `TransformerBlock` (its `residual`)
    with relative attention, and the memory's keys and values.

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
        """`TransformerBlock`'s two sublayers, the attention relative or not."""
        attn = RelativeMultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias,
                                          clamp_len=clamp_len) if relative else None
        super().__init__(d_model, n_heads, d_ff, dropout=dropout, bias=bias, attn=attn)

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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | KVBuffer | None = None, *, need_weights: bool = False,
                sees_later: bool | None = None):
        """`residual` (`TransformerBlock`'s) around the attention over memory + segment.

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
