r"""The pre-norm transformer block, around any attention: `TransformerLM`'s blocks, and
Transformer-XL's with relative attention (`labnn.xl.block`).

Dimension letters (the package legend): `B` batch, `T` tokens read in this call, `S`
keys (cached, then the new ones), `D` model width, `H` heads.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import nn

from labnn.nn.attention import MultiHeadAttention
from labnn.nn.kv_cache import KVCache
from labnn.nn.layers import FeedForward


class TransformerBlock(nn.Module):
    r"""A pre-norm block: attention, then a feed-forward network, each added to its input.

    $$x \leftarrow x + \mathrm{MHA}(\mathrm{LN}(x)), \qquad
    x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$$

    Normalising the input of each sub-layer rather than its sum (pre-norm, as GPT-2)
    keeps an unnormalised path from the embedding to the output, which lets deep stacks
    train stably. Transformer-XL's block (`labnn.xl.block.XLBlock`) is this block with
    another attention.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, dropout: float = 0.0,
                 bias: bool = True, attn: nn.Module | None = None):
        """One norm before each sub-layer: `norm_attn` before the attention (`attn`, a
        `MultiHeadAttention` unless given), `norm_ff` before the feed-forward network
        of width `d_ff`."""
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model, bias=bias)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout,
                                       bias=bias) if attn is None else attn
        self.norm_ff = nn.LayerNorm(d_model, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, bias=bias)

    def residual(self, x: torch.Tensor, attend: Callable[[torch.Tensor], tuple]) -> tuple:
        r"""The block around a given attention, the one place in the package where its
        residual structure is written (the equations of the class).

        Each path supplies only its attention, that is, where the keys come from:
        `forward` (the tokens and a cache), XL's memory + segment, one token over a
        `KVBuffer` (`labnn.xl.cache`) or over a ring (`labnn.compiled.ring_steps`).

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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None = None,
                *, need_weights: bool = False,
                causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, KVCache]:
        """`residual` around the attention to `cache`'s keys and the tokens' own (with
        `causal`, the attention's causal flag instead of a mask: `MultiHeadAttention`).

        Shape:
            x `[B, T, D]`, mask (True = may attend) `[T, S]` -> `[B, T, D]`.

        Returns:
            `(x, weights or None, cache)`, the cache now covering all `S` keys.
        """
        return self.residual(x, partial(self.attn, mask=mask, cache=cache,
                                        need_weights=need_weights, causal=causal))
