r"""Scaled dot-product attention, written out, and multi-head attention.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries (the new
tokens), `M` cached or remembered tokens, `S = M + T` keys (those, then the new ones), `D`
model width (`d_model`), `D_h` head width (`d_head = d_model / n_heads`).

Masks are boolean with **True = may attend**, the convention of
`torch.nn.functional.scaled_dot_product_attention`, broadcastable to `[B, H, T, S]`.
Cached keys and values (`KVCache`, `KVBuffer`) are `labnn.nn.kv_cache`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from labnn.nn.arguments import check_bool, check_dropout, check_heads, check_int, int_error, is_int
from labnn.nn.attention_checks import check_attention_input, check_mask, check_qkv
from labnn.nn.kv_cache import KVBuffer, KVCache


def causal_mask(
    t: int, s: int | None = None, *, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""The boolean mask letting each query see itself and every earlier key.

    With `s > t` the first `s - t` keys are a memory or cache of earlier tokens: query $i$
    sits at absolute position $s - t + i$ and may attend key $j$ iff

    $$j \le s - t + i,$$

    the lower triangle of a `[T, S]` matrix shifted right by $s - t$.

    Args:
        t: number of queries.
        s: number of keys (default `t`); must be at least `t`.
        device: where to build the mask.

    Returns:
        `[T, S]` boolean tensor, True = may attend.
    """
    s = t if s is None else s
    if not (is_int(t) and is_int(s)) or t < 0 or s < t:
        raise int_error(t, s)(f"causal_mask needs ints 0 <= t <= s, got t={t!r}, s={s!r}")
    return torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    r"""Softmax over the keys, with weight exactly zero on the masked ones (mask False).

    $$w_{ij} = \frac{m_{ij}\, e^{s_{ij}}}{\sum_{j'} m_{ij'}\, e^{s_{ij'}}}$$

    Masked scores are set to the most negative finite number rather than $-\infty$: in a
    partly masked row they get weight zero all the same, and a fully masked row (no key
    to attend, $\sum_j m_{ij} = 0$) gets a finite softmax (uniform) instead of the NaN of
    $0/0$; multiplying each row by whether it has a key at all ($\max_j m_{ij}$, 0 there)
    then makes that row zeros.

    Shape:
        scores `[B, H, T, S]`, mask (True = may attend) broadcastable to it -> weights
        `[B, H, T, S]`.
    """
    if mask is None:
        return scores.softmax(dim=-1)
    b, h = (scores.size(0), scores.size(1)) if scores.dim() == 4 else (None, None)
    check_mask(mask, scores.size(-2), scores.size(-1), b=b, h=h, device=scores.device)
    lowest = torch.finfo(scores.dtype).min
    weights = scores.masked_fill(~mask, lowest).softmax(dim=-1)
    return weights * mask.any(dim=-1, keepdim=True)  # fully masked rows -> 0


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention written out, returning the output and the weights.

    $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_h}}
    \right) V$$

    Dividing by $\sqrt{d_h}$ keeps the scores' variance near 1 whatever the head width, so
    the softmax does not saturate. Masked keys get weight exactly zero; a fully masked row
    gives zeros, never NaN (`masked_softmax`).

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, True = may attend, broadcastable to `[B, H, T, S]`.
        dropout_p: dropout on the weights, applied only when `training`.
        training: whether to apply dropout.

    Shape:
        q `[B, H, T, D_h]`, k and v `[B, H, S, D_h]` -> output `[B, H, T, D_h]`, weights
        `[B, H, T, S]`.

    Returns:
        `(output, weights)`; weights are those before dropout.
    """
    check_qkv(q, k, v)
    check_dropout(dropout_p, "dropout_p")
    check_bool("training", training)
    d_head = q.size(-1)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d_head)
    weights = masked_softmax(scores, mask)
    dropped = F.dropout(weights, dropout_p, training) if dropout_p > 0 else weights
    return dropped @ v, weights


class MultiHeadAttention(nn.Module):
    r"""Multi-head self-attention with a fused query/key/value projection and a KV cache.

    $$\mathrm{MHA}(X) = \mathrm{concat}_h\big(\mathrm{Attention}(X W^Q_h, X W^K_h,
    X W^V_h)\big)\, W^O$$

    Uses `torch.nn.functional.scaled_dot_product_attention` (fused kernels) unless the
    weights are asked for.

    Args:
        d_model: model width `D`; must be divisible by `n_heads`.
        n_heads: number of heads `H`.
        dropout: dropout on the attention weights and on the output.
        bias: whether the projections have biases.
    """

    def __init__(self, d_model: int, n_heads: int, *, dropout: float = 0.0,
                 bias: bool = True):
        r"""One fused projection `qkv` (`nn.Linear(D, 3D)`, weight `[3D, D]`: the rows of
        $W^Q$, then $W^K$, then $W^V$) computes them for all heads in one product;
        `out_proj` is $W^O$."""
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        check_heads(d_model, n_heads)
        check_dropout(dropout)
        check_bool("bias", bias)
        self.n_heads, self.d_head, self.dropout = n_heads, d_model // n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_dropout = nn.Dropout(dropout)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """Cut the width into heads of `D_h` and move the head dimension forward: `H` heads
        of a width `D`; of the fused projection's `3D`, `3H` heads, those of $Q$, then $K$,
        then $V$ (`project` splits them in one view, a token's cost in generation).

        Shape:
            `[B, T, D]` -> `[B, H, T, D_h]`.
        """
        b, t, width = x.shape  # no -1: a view of no tokens (an empty memory) needs the count
        return x.view(b, t, width // self.d_head, self.d_head).transpose(1, 2)

    def project(
        self, x: torch.Tensor, cache: KVCache | KVBuffer | None = None
    ) -> tuple[torch.Tensor, KVCache | KVBuffer]:
        r"""Queries of the new tokens; keys and values of the cached tokens, then the new.

        $$[Q \mid K \mid V] = X\, [W^Q \mid W^K \mid W^V], \qquad
        K \leftarrow [K_{\mathrm{cache}}; K], \quad V \leftarrow [V_{\mathrm{cache}}; V]$$

        One matrix product gives all three. A `KVBuffer` cache comes back as a new
        `KVBuffer` (`KVBuffer.append`: written into the free room of its storage, or
        into a fresh copy where there is none), anything else as a `(k, v)` tuple.

        Shape:
            x `[B, T, D]`, cache `([B, H, M, D_h], [B, H, M, D_h])` -> q `[B, H, T, D_h]`,
            `(k, v)` each `[B, H, S, D_h]`.
        """
        q, k, v = self.split_heads(self.qkv(x)).chunk(3, dim=1)  # [B, 3H, T, D_h]
        if isinstance(cache, KVBuffer):
            return q, cache.append(k, v)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        return q, (k, v)

    def project_kv(self, x: torch.Tensor) -> KVCache:
        r"""Keys and values alone, for states that ask no query (a memory): the last
        `2D` rows of the fused projection, $[K \mid V] = X\, [W^K \mid W^V]$, without
        computing $Q$.

        Shape:
            x `[B, M, D]` -> `(k, v)`, each `[B, H, M, D_h]`.
        """
        d = self.qkv.in_features
        bias = None if self.qkv.bias is None else self.qkv.bias[d:]
        kv = F.linear(x, self.qkv.weight[d:], bias)
        k, v = self.split_heads(kv).chunk(2, dim=1)  # [B, 2H, M, D_h]
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        cache: KVCache | KVBuffer | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, KVCache | KVBuffer]:
        r"""Attend from the new tokens `x` to the cached keys and values and their own.

        Each head attends on its own, $Y_h = \mathrm{Attention}(Q_h, K_h, V_h)$; the heads
        are concatenated back to width `D` and mixed by $W^O$. The fused kernel does not
        return its weights, so `need_weights` takes the written-out path. A query with no
        key to attend gets zeros from either path's attention, so its output is the bias
        of `out_proj` alone.

        Args:
            x: the new tokens.
            mask: boolean, True = may attend, broadcastable to `[B, H, T, S]`; None
                attends everywhere.
            cache: `(k, v)` of earlier tokens, each `[B, H, M, D_h]`, or a `KVBuffer`.
            need_weights: also return the attention weights (the written-out path).
            causal: the causal mask of `x`'s own tokens (no `mask`, no `cache`), given to
                the fused kernel as `is_causal=True`: a mask tensor rules out flash
                attention on a GPU (its kernel takes none).

        Shape:
            x `[B, T, D]` -> output `[B, T, D]`, weights `[B, H, T, S]`.

        Returns:
            `(output, weights or None, kv)` where `kv` covers all `S` keys: the cache to
            pass next time (a `KVBuffer` if `cache` was one, else a `(k, v)` tuple).
        """
        check_attention_input(self, x, cache, need_weights)
        check_bool("causal", causal)
        if causal and (mask is not None or cache is not None):
            raise ValueError("causal=True is the causal mask of x's own tokens: pass no mask "
                             "and no cache with it")
        q, kv = self.project(x, cache)
        k, v = kv
        if mask is not None:
            check_mask(mask, q.size(2), k.size(2), b=q.size(0), h=q.size(1),
                       device=q.device)
        p = self.dropout if self.training else 0.0
        if need_weights:
            mask = causal_mask(q.size(2), device=q.device) if causal else mask
            y, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p,
                                                      training=self.training)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                               is_causal=causal)
            weights = None
            if mask is not None:  # fully masked rows -> 0
                y = y.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        y = y.transpose(1, 2).flatten(2)  # [B, T, D]
        return self.out_dropout(self.out_proj(y)), weights, kv
