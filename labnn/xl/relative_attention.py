r"""Relative positional attention (Dai et al. 2019, Transformer-XL): scores that depend
on the distance between query and key, never on where a segment starts.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries (the segment),
`M` memory, `S` keys one query attends to (`M + T`), `R` relative distances in a table,
`D` model width, `D_h` head width. In einsum strings `i` indexes queries, `j` keys, `r`
relative distances, `d` head features. Masks are boolean with True = may attend.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from labnn.nn.attention import KVBuffer, KVCache, MultiHeadAttention, causal_mask, masked_softmax
from labnn.nn.attention_checks import (check_aligned, check_attention_input, check_mask,
                                       check_rel_keys, check_scores_input)
from labnn.nn.arguments import check_bool, check_heads, check_int, int_error, is_int
from labnn.nn.positions import sinusoidal_encoding


def check_clamp_len(clamp_len: int | None) -> None:
    """Raise a clear error unless `clamp_len` is None (no clamping) or a positive int."""
    if clamp_len is not None and (not is_int(clamp_len) or clamp_len <= 0):
        raise int_error(clamp_len)(
            f"clamp_len must be None (no clamping) or a positive int, got {clamp_len!r}")


def sees_later_keys(mask: torch.Tensor | None, t: int, s: int) -> bool:
    """Whether `mask` (boolean, True = may attend) lets some query `i` (at position
    `S - T + i`) attend a key `j > S - T + i`.

    None attends everywhere: true as soon as there are two queries. A mask is compared
    with `causal_mask` (one pass over its `[..., T, S]` entries, against the
    `B H T S D_h` work of the scores).
    """
    if mask is None:
        return t > 1
    return t > 1 and bool((mask & ~causal_mask(t, s, device=mask.device)).any())


def relative_shift(x: torch.Tensor) -> torch.Tensor:
    r"""Turn scores indexed by (query, relative distance) into scores indexed by (query,
    key).

    Column `r` of the input holds distance `S - 1 - r` (distances descending, `S - 1`
    down to `0`). Query `i` sits at position `M + i` of the keys, so key `j` is at
    distance `M + i - j`, found in column `r = T - 1 - i + j`: row `i` must slide left
    by `T - 1 - i`. Instead of a loop over rows:

    1. pad one zero column in front: `[T, S + 1]`, column `c` of `x` now at `c + 1`;
    2. read it as `[S + 1, T]`, drop the first row: the padded rows less their first `T` slots;
    3. read the rest as `[T, S]`: its row `i` starts at slot $T + iS = i(S + 1) + (T - i)$
       of the padded rows, at column $T - i$ of padded row `i`, which is row `i` of `x`
       slid left by $T - 1 - i$ as long as it does not run into the next row:

    $$\mathrm{out}_{i,j} = x_{i,\,j + T - 1 - i} \qquad \text{for } j \le M + i$$

    Entries with `j > M + i` (later keys) hold leftovers from the next row. A table that
    also holds the negative distances `-1, ..., -(T - 1)` in `T - 1` extra columns makes
    every entry a true distance: `RelativeMultiHeadAttention.scores` shifts
    `[T, S + T - 1]` and keeps the first `S` columns.

    Shape:
        `[..., T, S]` -> `[..., T, S]`, with `S >= T`.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        got = getattr(x, "shape", type(x).__name__)
        raise ValueError(f"relative_shift needs a tensor [..., T, S], got {got}")
    *lead, t, s = x.shape
    if s < t:
        raise ValueError(
            f"relative_shift needs at least as many keys as queries, got T={t}, S={s}"
        )
    if t == 1:  # one query (generation): column j already holds distance M - j
        return x
    padded = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return padded[..., 1:, :].reshape(*lead, t, s)


def heads_first(r: torch.Tensor) -> torch.Tensor:
    r"""The one change of layout of the relative keys: from a row per distance to a
    matrix per head.

    `relative_keys` returns a row per distance, `[R, H, D_h]`, the layout of the paper's
    code (its `r_head_k`) and of notebook 02's exercise (`einsum('bhid,rhd->bhir', ...)`).
    Both products with the position keys, $(q_i + v)^\top r_\delta$ in `scores` and in
    generation, read each head's keys as one `[D_h, R]` matrix: this view. `key_table`
    makes it contiguous, once per cache.

    Shape:
        `[R, H, D_h]` -> `[H, D_h, R]` (a view).
    """
    return r.permute(1, 2, 0)


def relative_scores(
    q: torch.Tensor,
    keys_t: torch.Tensor,
    rel_keys: torch.Tensor | None = None,
    u: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    *,
    align: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    r"""Relative attention scores, the four terms (a)-(d) of Dai et al. (2019), section 3.3
    (unnumbered there): the one place PyTorch computes them, for a segment
    (`RelativeMultiHeadAttention.scores`), one new token over a cache
    (`labnn.xl.cache.attend_one_token`) and over a ring (`ring_steps.ring_attention`);
    `labnn.compiled.kernels` recomputes them in Triton.

    With $E_{x}$ a token's hidden state, $W_q, W_{k,E}$ the query/key projections and
    $R_\delta$ the sinusoid of distance $\delta = i - j$, the absolute-position score
    $(E_{x_i} + U_i)^\top W_q^\top W_k (E_{x_j} + U_j)$ is rewritten so that only
    $i - j$ appears:

    $$A^{\mathrm{rel}}_{i,j} =
    \underbrace{E_{x_i}^\top W_q^\top W_{k,E} E_{x_j}}_{(a)\ \text{content}}
    + \underbrace{E_{x_i}^\top W_q^\top W_{k,R} R_{i-j}}
      _{(b)\ \text{content-position}}
    + \underbrace{u^\top W_{k,E} E_{x_j}}_{(c)\ \text{global content bias}}
    + \underbrace{v^\top W_{k,R} R_{i-j}}_{(d)\ \text{global position bias}}$$

    (a) is ordinary attention; (b) lets a query prefer some distances; (c) replaces the
    query's absolute position by a learned $u$ shared by all positions, so some keys are
    attended to wherever the query is; (d) is a learned preference for distances alone.
    With $q = W_q E$, $k = W_{k,E} E$ and $r_\delta = W_{k,R} R_\delta$, grouping by what is
    multiplied with what, and dividing by $\sqrt{d_h}$ as ordinary attention does:

    $$s_{i,j} = \tfrac{1}{\sqrt{d_h}}\big((q_i + u)^\top k_j
    + (q_i + v)^\top r_{i-j}\big).$$

    The second product is computed for every (query, column of `rel_keys`) pair, each
    head's table serving all `B * T` queries of that head at once; `align`, which only
    the caller can know, then gives each key the column of its distance (a segment:
    `relative_shift`; a ring: one column per slot). The first product is added and both
    are scaled in one `baddbmm`. Without `rel_keys`, only $q_i^\top k_j / \sqrt{d_h}$.

    Args:
        q: queries.
        keys_t: content keys, transposed as `KVBuffer` stores them.
        rel_keys: each head's relative keys as one matrix, column `c` holding a
            distance (`heads_first(r)`, `RelativeMultiHeadAttention.key_table`); None
            for absolute positions.
        u, v: the content and position biases; None adds none.
        align: maps the position term by (query, column) `[B, H, T, R]` to (query,
            key) `[B, H, T, S]`; None when column `j` holds key `j`'s distance.

    Shape:
        q `[B, H, T, D_h]`, keys_t `[B, H, D_h, S]`, rel_keys `[H, D_h, R]`, u and v
            `[H, D_h]` -> scores `[B, H, T, S]`.
    """
    check_scores_input(q, keys_t, rel_keys, u, v, aligned=align is not None)
    b, h, t, dh = q.shape
    s, scale = keys_t.size(-1), 1 / math.sqrt(dh)
    content_query = (q if u is None else q + u.unsqueeze(1)).reshape(b * h, t, dh)
    keys_t = keys_t.reshape(b * h, dh, s)
    if rel_keys is None:
        return torch.bmm(content_query, keys_t).mul_(scale).view(b, h, t, s)
    queries = (q if v is None else q + v.unsqueeze(1)).transpose(0, 1).reshape(h, b * t, dh)
    position = torch.bmm(queries, rel_keys).view(h, b, t, rel_keys.size(-1))
    position = position.transpose(0, 1)  # [B, H, T, R]: by (query, column)
    if align is not None:
        position = align(position)  # [B, H, T, S]: by (query, key)
        check_aligned(position, b, h, t, s)
    position = position.reshape(b * h, t, s)
    scores = torch.baddbmm(position, content_query, keys_t, beta=scale, alpha=scale)
    return scores.view(b, h, t, s)


class RelativeMultiHeadAttention(MultiHeadAttention):
    r"""Multi-head attention over memory + segment with relative positions, biases `u`
    and `v`.

    Adds to `MultiHeadAttention` a projection $W_{k,R}$ (`pos_proj`) of sinusoidal
    encodings of relative distances, the global content bias $u$ (`content_bias`) and
    position bias $v$ (`position_bias`).

    Args:
        d_model: model width `D`; must be divisible by `n_heads`.
        n_heads: number of heads `H`.
        dropout: dropout on the attention weights and on the output.
        bias: whether the projections have biases.
        clamp_len: distances beyond it use the encoding of `clamp_len` (None: no
            clamping).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        clamp_len: int | None = None,
    ):
        r"""Everything of `MultiHeadAttention` ($W_q$, $W_{k,E}$, $W_v$ in `qkv`, and
        `out_proj`), plus $W_{k,R}$ and the biases $u$ and $v$, which start at zero."""
        super().__init__(d_model, n_heads, dropout=dropout, bias=bias)
        check_heads(d_model, n_heads, even=True)  # sinusoids pair sines with cosines
        check_clamp_len(clamp_len)
        self.clamp_len = clamp_len
        self.pos_proj = nn.Linear(d_model, d_model, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))
        self.position_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))

    def relative_keys(self, s: int, later: int = 0) -> torch.Tensor:
        r"""Projected encodings $r_\delta = W_{k,R} R_\delta$ of the distances
        `S - 1, ..., 1, 0` and, with `later > 0`, of the negative distances
        `-1, ..., -later` of keys after the query (clamped to `±clamp_len`).

        Shape:
            -> `[S + later, H, D_h]`, row `r` holding distance `S - 1 - r`.
        """
        check_int("s", s, low=0)
        check_int("later", later, low=0)
        w = self.pos_proj.weight
        distances = torch.arange(s - 1, -later - 1, -1, device=w.device)
        if self.clamp_len is not None:
            distances = distances.clamp(-self.clamp_len, self.clamp_len)
        encodings = sinusoidal_encoding(distances, w.size(1)).to(w.dtype)
        return self.pos_proj(encodings).view(s + later, self.n_heads, self.d_head)

    def key_table(self, n: int) -> torch.Tensor:
        r"""The relative keys of the distances `n - 1, ..., 0`, stored for generation:
        each head's a contiguous `[D_h, n]` matrix, as `KVBuffer` stores the content
        keys.

        Why a second layout: generation (`labnn.xl.cache.attend_one_token`) multiplies each
        head's query by this matrix at every token, once per layer. Read from a contiguous
        matrix, that product took 9-13 µs instead of 15 µs for 4 heads of width 32 over
        1,024 distances (15-16 vs. 30 µs over 2,048; `benchmarks/key_layouts.py`, one thread
        of a 2-core x86_64 VM, torch 2.13.0, two runs beside other jobs, 2026-11-27).
        Training and prompts read the view `heads_first(r)` instead. Made once per cache.

        Shape:
            -> `[H, D_h, n]`, column `c` holding distance `n - 1 - c`.
        """
        check_int("n", n, low=0)
        return heads_first(self.relative_keys(n)).contiguous()

    def scores(self, q: torch.Tensor, k: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        r"""The scores of a segment over memory + segment: `relative_scores` with this
        layer's $u$ and $v$, the position term moved from (query, distance) to (query,
        key) by `relative_shift`.

        Args:
            q: queries of the segment.
            k: content keys of memory + segment.
            r: projected relative encodings of the distances `S - 1, ..., 0`, as from
                `relative_keys(S)`, or of `S - 1, ..., -(T - 1)`, as from
                `relative_keys(S, T - 1)`, for masks that let a query see later keys.

        Shape:
            q `[B, H, T, D_h]`, k `[B, H, S, D_h]`, r `[S, H, D_h]` or
                `[S + T - 1, H, D_h]` -> scores `[B, H, T, S]`. With `S` rows in `r`,
                entries of later keys (`j > M + i`) are meaningless and must be masked.
        """
        t, s, n = q.size(2), k.size(2), r.size(0)
        if n not in (s, s + t - 1):
            raise ValueError(f"r covers {n} distances, expected S={s} or S + T - 1={s + t - 1}")
        return relative_scores(q, k.transpose(2, 3), heads_first(r), self.content_bias,
                               self.position_bias, align=lambda p: relative_shift(p)[..., :s])

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        cache: KVCache | KVBuffer | None = None,
        need_weights: bool = False,
        rel_keys: torch.Tensor | None = None,
        sees_later: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, KVCache | KVBuffer]:
        """Attend from the segment `x` to the memory's keys/values (`cache`) and its own.

        Args:
            x: the segment (already normalised).
            mask: boolean, True = may attend, broadcastable to `[B, H, T, S]`; None
                attends everywhere. Where it lets query `i` see a later key `j > M + i`,
                that score uses the negative distance `M + i - j` (`T - 1` relative
                keys more than the causal case: `relative_keys(S, T - 1)`).
            cache: `(k, v)` of the memory, each `[B, H, M, D_h]` (see
                `XLBlock.memory_cache`), or a `KVBuffer`.
            need_weights: also return the attention weights.
            rel_keys: a precomputed `relative_keys(R)` with `R >= S`; its last `S` rows
                are used, as distances `S - 1, ..., 0` (`relative_keys(R, later)` with
                `later > 0` ends with negative ones: not this). Computed here when None,
                or when `mask` sees later keys.
            sees_later: `sees_later_keys(mask, T, S)`, when the caller knows it (trusted:
                not checked against the mask); None reads it from the mask, one host read.

        Shape:
            x `[B, T, D]` -> output `[B, T, D]`, weights `[B, H, T, S]`.

        Returns:
            `(output, weights or None, kv)` with `kv` over all `S` keys (a `KVBuffer` if
                `cache` was one).
        """
        check_attention_input(self, x, cache, need_weights)
        check_bool("sees_later", sees_later, allow_none=True)
        q, kv = self.project(x, cache)
        k, v = kv
        t, s = q.size(2), k.size(2)
        if mask is not None:
            check_mask(mask, t, s, b=q.size(0), h=q.size(1), device=q.device)
        if rel_keys is not None:
            check_rel_keys(rel_keys, s, q)
        if sees_later_keys(mask, t, s) if sees_later is None else sees_later:
            r = self.relative_keys(s, t - 1)
        else:
            r = self.relative_keys(s) if rel_keys is None else rel_keys[-s:]
        weights = masked_softmax(self.scores(q, k, r), mask)
        dropped = F.dropout(weights, self.dropout, self.training) if self.dropout > 0 else weights
        y = (dropped @ v).transpose(1, 2).flatten(2)  # [B, H, T, D_h] -> [B, T, D]
        return self.out_dropout(self.out_proj(y)), (weights if need_weights else None), kv
