r"""labnn's own GPU kernels for one Transformer-XL token over a ring (`backend="kernels"`
of `labnn.compiled.decoder`): six launches per layer, written in Triton.

Dimension letters (the package legend): `B` batch, `D` model width, `H` heads, `D_h`
head width, `F` feed-forward width, `V` vocabulary, `C` slots of the ring; `K` and `N`
the input and output width of one product (`linear`).

At batch 1 a generated token is a chain of matrix-*vector* products. Inductor turns
`xl_ring_step` into about 17 kernels per layer, and cuBLAS runs the batched products over
the ring's keys far below the GPU's memory bandwidth (`docs/benchmarks.md`, "On a
GPU"): the replayed step is bound by the number of kernels and their latency, not by
the bytes a token must read. Nothing maintained fuses these: `torch.compile` leaves the
products to cuBLAS, and the fused attention kernels of
`F.scaled_dot_product_attention` know no relative position term read by ring slot.
So this module writes the step as six kernels per layer:

1. `linear` with the layer norm in its prologue: $[q \mid k \mid v] = W\,\mathrm{LN}(x) + b$;
2. `_ring_partial`, flash-decoding over the ring: each program scores a run of slots
   (the scores $s_j$ of `labnn.xl.relative_attention.relative_scores`, slot $j$'s
   relative key that of its distance $\delta_j$), and keeps a running maximum, a sum
   of $e^{s_j}$ and a weighted sum of values; it also writes the new key and value into
   their slot;
3. `_ring_combine`: the programs' parts into $y = \mathrm{softmax}(s)\,V$;
4. `linear` with the residual in its epilogue: $x \leftarrow x + W^O y + b^O$;
5. `linear`, layer norm and GELU: $h = \mathrm{GELU}(W_1 \mathrm{LN}(x) + b_1)$;
6. `linear` and the residual: $x \leftarrow x + W_2 h + b_2$.

They compute what `xl_ring_step` computes, in another order of summation; the tests
hold them equal to it (`tests/test_kernels.py`, on the CPU under Triton's interpreter,
`TRITON_INTERPRET=1`). The eager step stays the reference. Float32 models only
(`labnn.compiled.decoding.check_model`).

On an NVIDIA H200 on 2026-11-26 (commit `c350eae`; again within 2 % in `make test-gpu` of
2026-11-27, commit `5179eb1`, another H200; timed by no GPU since), at the
attention lengths of the paper's Table 9 (Table 9 names no model size; here d 512, 8
heads, 12 layers, batch 1), a token took 0.34-0.48 ms at attention lengths 800-3,800,
against 0.59-0.72 ms for the ring step compiled by inductor. At 3,800 attention over the
ring was most of it (396 of the 596 µs the GPU was busy per token, with the kernels'
first tiling); at 800 it was about half (173 µs against 180 µs of products)
(`docs/benchmarks.md`, "On a GPU"). How the default `Tiling` was chosen, and why a CPU
cannot rerun that sweep (Triton's interpreter times no GPU): `Tiling`'s docstring.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from labnn.compiled.rings import XLRing

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class Tiling:
    """How `ring_attention` cuts the ring into runs for flash-decoding.

    The default, runs of 16 slots and about 2,048 programs, was the fastest of seven
    settings swept on one NVIDIA H200 on 2026-11-26 (recorded in `18d935e`, eight minutes
    after the kernels' commit `c350eae`; d 512, 8 heads, 12 layers, batch 1, 200 replayed
    tokens each): 0.493 and 0.354 ms per token at attention lengths 3,800 and 800, against
    0.623 and 0.407 ms with the first settings, 64 and 256 (`docs/benchmarks.md`, "On a
    GPU"). The sweep came from a throw-away script since lost; its command now,
    `python benchmarks/bench_xl_ring_kernels.py --device cuda --variants kernels`, has not
    yet run on a GPU (nor can a CPU time it: Triton's interpreter times no GPU). These
    settings were timed once more, by `make test-gpu` of 2026-11-27 (commit `5179eb1`,
    another H200), and by no GPU since.

    Attributes:
        slots: ring slots a program scores side by side (a power of two, at least 16,
            as `tl.arange` asks).
        programs: programs per layer to aim for, over all streams and heads; each
            program scores one run or more, so that there are not many more programs
            than this.
    """

    slots: int = 16
    programs: int = 2048

    def __post_init__(self):
        if not (isinstance(self.slots, int) and self.slots >= 16
                and self.slots & (self.slots - 1) == 0):
            raise ValueError(f"slots must be a power of two >= 16, got {self.slots!r}")
        if not (isinstance(self.programs, int) and self.programs >= 1):
            raise ValueError(f"programs must be a positive int, got {self.programs!r}")


TILING = Tiling()  # the fastest of a sweep on an H200, 2026-11-26 (`Tiling`'s docstring)


@triton.jit
def _linear(x_ptr, w_ptr, b_ptr, g_ptr, beta_ptr, r_ptr, y_ptr, N, eps, K: tl.constexpr,
            NORM: tl.constexpr, NORM_BIAS: tl.constexpr, BIAS: tl.constexpr,
            GELU: tl.constexpr, RESIDUAL: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Rows `BLOCK_N` of $y = \\mathrm{act}(W\\,\\mathrm{LN}(x) + b) + r$ for one stream."""
    row = tl.program_id(1)
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k0 = tl.arange(0, BLOCK_K)
    x_row = x_ptr + row * K
    if NORM:  # the mean and variance of x, each program on its own (K is small)
        total = tl.zeros([BLOCK_K], tl.float32)
        for start in range(0, K, BLOCK_K):
            k = start + k0
            total += tl.load(x_row + k, mask=k < K, other=0.0).to(tl.float32)
        mean = tl.sum(total, 0) / K
        squares = tl.zeros([BLOCK_K], tl.float32)
        for start in range(0, K, BLOCK_K):
            k = start + k0
            xk = tl.load(x_row + k, mask=k < K, other=0.0).to(tl.float32)
            squares += tl.where(k < K, (xk - mean) * (xk - mean), 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(squares, 0) / K + eps)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + k0
        xk = tl.load(x_row + k, mask=k < K, other=0.0).to(tl.float32)
        if NORM:
            xk = (xk - mean) * rstd * tl.load(g_ptr + k, mask=k < K, other=0.0).to(tl.float32)
            if NORM_BIAS:
                xk += tl.load(beta_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        inside = (n[:, None] < N) & (k[None, :] < K)
        w = tl.load(w_ptr + n[:, None] * K + k[None, :], mask=inside, other=0.0)
        acc += w.to(tl.float32) * xk[None, :]
    y = tl.sum(acc, 1)
    if BIAS:
        y += tl.load(b_ptr + n, mask=n < N, other=0.0).to(tl.float32)
    if GELU:  # the exact GELU of F.gelu
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    if RESIDUAL:
        y += tl.load(r_ptr + row * N + n, mask=n < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + n, y, mask=n < N)


_LINEAR_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w)
                   for n, k, w in [(1, 256, 2), (2, 128, 4), (2, 256, 4), (4, 128, 4),
                                   (4, 256, 4), (8, 128, 4), (8, 256, 8), (16, 128, 8)]]
# autotuned on a GPU during a decoder's warm-up calls (before recording); the interpreter
# runs one configuration
_linear_tuned = _linear if INTERPRETED else triton.autotune(_LINEAR_CONFIGS, key=["N", "K"])(
    _linear)


def linear(x: torch.Tensor, layer: torch.nn.Linear, *, norm: torch.nn.LayerNorm | None = None,
           gelu: bool = False, residual: torch.Tensor | None = None) -> torch.Tensor:
    r"""$\mathrm{act}(W\,\mathrm{LN}(x) + b) + r$ in one launch: `layer(norm(x))`, then
    GELU if `gelu`, then `+ residual`, each step only where asked.

    Shape:
        x `[B, K]`, residual `[B, N]` -> `[B, N]`, `N = layer.out_features`.
    """
    b, k = x.shape
    n = layer.out_features
    y = x.new_empty(b, n)
    unused = layer.weight  # a pointer for the arguments a flag switches off
    g = unused if norm is None else norm.weight
    beta = unused if norm is None or norm.bias is None else norm.bias
    blocks = {"BLOCK_N": 32, "BLOCK_K": 128} if INTERPRETED else {}
    _linear_tuned[lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), b)](
        x, layer.weight, unused if layer.bias is None else layer.bias, g, beta,
        unused if residual is None else residual, y, n, 1e-5 if norm is None else norm.eps,
        K=k,
        NORM=norm is not None, NORM_BIAS=norm is not None and norm.bias is not None,
        BIAS=layer.bias is not None, GELU=gelu, RESIDUAL=residual is not None, **blocks)
    return y


@triton.jit
def _ring_partial(qkv_ptr, u_ptr, vb_ptr, kt_ptr, v_ptr, tab_ptr, count_ptr,
                  m_ptr, l_ptr, acc_ptr, H, C, SPLITS, scale,
                  TABLE: tl.constexpr, DH: tl.constexpr, BLOCK_C: tl.constexpr,
                  TILES: tl.constexpr):
    """One (stream, head)'s run of `TILES * BLOCK_C` slots: running max, sum, values."""
    split, bh = tl.program_id(0), tl.program_id(1)
    h = bh % H
    d = tl.arange(0, DH)
    count = tl.load(count_ptr)
    slot = count % C  # the new token's slot
    new = qkv_ptr + (bh // H) * 3 * H * DH + h * DH  # its q, then k and v D further
    q = tl.load(new + d).to(tl.float32)
    k_new, v_new = tl.load(new + H * DH + d), tl.load(new + 2 * H * DH + d)
    kt_head, v_head = kt_ptr + bh * DH * C, v_ptr + bh * C * DH
    if split == 0:  # the other programs read the new key from registers, not the ring
        tl.store(kt_head + d * C + slot, k_new)
        tl.store(v_head + slot * DH + d, v_new)
    q_content, q_position = q, q
    if TABLE:
        q_content += tl.load(u_ptr + h * DH + d).to(tl.float32)
        q_position += tl.load(vb_ptr + h * DH + d).to(tl.float32)
    m = tl.max(tl.full([BLOCK_C], -1e30, tl.float32), 0)
    l = tl.sum(tl.zeros([BLOCK_C], tl.float32), 0)
    acc = tl.zeros([DH], tl.float32)
    for t in range(TILES):
        j = (split * TILES + t) * BLOCK_C + tl.arange(0, BLOCK_C)
        distance = (slot - j + C) % C
        fresh, inside = j == slot, j < C
        old = inside & (j != slot)
        kt = tl.load(kt_head + d[:, None] * C + j[None, :], mask=old[None, :], other=0.0)
        kt = tl.where(fresh[None, :], k_new[:, None], kt).to(tl.float32)
        s = tl.sum(q_content[:, None] * kt, 0)
        if TABLE:  # column C - 1 - distance holds the relative key of that distance
            column = C - 1 - distance
            r = tl.load(tab_ptr + h * DH * C + d[:, None] * C + column[None, :],
                        mask=inside[None, :], other=0.0)
            s += tl.sum(q_position[:, None] * r.to(tl.float32), 0)
        s = tl.where(inside & (distance <= count), s * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p, alpha = tl.exp(s - m_new), tl.exp(m - m_new)
        vt = tl.load(v_head + j[:, None] * DH + d[None, :], mask=old[:, None], other=0.0)
        vt = tl.where(fresh[:, None], v_new[None, :], vt).to(tl.float32)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * vt, 0)
        m = m_new
    part = bh * SPLITS + split
    tl.store(m_ptr + part, m)
    tl.store(l_ptr + part, l)
    tl.store(acc_ptr + part * DH + d, acc)


@triton.jit
def _ring_combine(m_ptr, l_ptr, acc_ptr, y_ptr, SPLITS,
                  DH: tl.constexpr, BLOCK_S: tl.constexpr):
    """$y = \\sum_s e^{m_s - M} a_s / \\sum_s e^{m_s - M} l_s$ for one (stream, head)."""
    bh = tl.program_id(0)
    s, d = tl.arange(0, BLOCK_S), tl.arange(0, DH)
    inside = s < SPLITS
    m = tl.load(m_ptr + bh * SPLITS + s, mask=inside, other=-1e30)
    w = tl.where(inside, tl.exp(m - tl.max(m, 0)), 0.0)
    total = tl.sum(w * tl.load(l_ptr + bh * SPLITS + s, mask=inside, other=0.0), 0)
    acc = tl.load(acc_ptr + (bh * SPLITS + s)[:, None] * DH + d[None, :],
                  mask=inside[:, None], other=0.0)
    tl.store(y_ptr + bh * DH + d, tl.sum(w[:, None] * acc, 0) / total)


def ring_attention(qkv: torch.Tensor, attn, keys_t: torch.Tensor, values: torch.Tensor,
                   table: torch.Tensor | None, count: torch.Tensor,
                   tiling: Tiling = TILING) -> torch.Tensor:
    r"""One layer's attention of the new token over its ring, the new key and value
    written into slot `count % C`: what `labnn.compiled.ring_steps.ring_attention`
    computes between its projections.

    The `C` slots are cut into runs of `tiling.slots`, enough for about
    `tiling.programs` programs, scored side by side (flash-decoding); `_ring_combine`
    rescales each run's sums to the common maximum.

    Shape:
        qkv `[B, 3D]`, keys_t `[B, H, D_h, C]`, values `[B, H, C, D_h]`, table
        `[H, D_h, C]` -> `[B, D]`, the heads side by side.
    """
    b, h, dh, c = keys_t.shape
    runs = triton.cdiv(c, tiling.slots)
    tiles = triton.cdiv(runs, max(1, min(runs, tiling.programs // (b * h))))
    splits = triton.cdiv(runs, tiles)
    m = qkv.new_empty(b * h * splits, dtype=torch.float32)
    l, acc = torch.empty_like(m), m.new_empty(b * h * splits, dh)
    relative = table is not None
    _ring_partial[(splits, b * h)](
        qkv, attn.content_bias if relative else qkv, attn.position_bias if relative else qkv,
        keys_t, values, table if relative else qkv, count, m, l, acc, h, c, splits,
        1 / math.sqrt(dh), TABLE=relative, DH=dh, BLOCK_C=tiling.slots, TILES=tiles)
    y = qkv.new_empty(b, h * dh)
    _ring_combine[(b * h,)](m, l, acc, y, splits, DH=dh,
                            BLOCK_S=triton.next_power_of_2(splits))
    return y


def xl_kernel_step(model, x: torch.Tensor, ring: XLRing,
                   tiling: Tiling = TILING) -> torch.Tensor:
    r"""`labnn.compiled.ring_steps.xl_ring_step` in six launches per layer (the list at
    the top of this module), in eval mode; the ring is updated in place. `tiling`:
    how attention cuts the ring (`Tiling`).

    Each block is $x \leftarrow x + W^O\,\mathrm{Attn}(\mathrm{LN}(x))$, then
    $x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$ (`TransformerBlock.residual`).

    Shape:
        x `[B, D]` -> logits `[B, V]`.
    """
    for i, block in enumerate(model.blocks):
        attn = block.attn
        qkv = linear(x, attn.qkv, norm=block.norm_attn)
        table = None if ring.tables is None else ring.tables[i]
        y = ring_attention(qkv, attn, ring.keys_t[i], ring.values[i], table, ring.count,
                           tiling)
        x = linear(y, attn.out_proj, residual=x)
        hidden = linear(x, block.ff.up, norm=block.norm_ff, gelu=True)
        x = linear(hidden, block.ff.down, residual=x)
    ring.count.add_(1)
    return linear(x, model.head, norm=model.norm)
