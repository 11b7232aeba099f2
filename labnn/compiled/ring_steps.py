r"""The steps over the rings of `labnn.compiled.rings`: one new token per stream through
the whole model (`TransformerLM`, Transformer-XL, the KV feedback model), every shape
fixed, the ring written in place.

Dimension letters (the package legend): `B` batch, `D` model width, `H` heads, `D_h`
head width, `V` vocabulary, `C` slots of a transformer's ring (`attn_len + 1`, or every
position read) or of an XL ring (`mem_len + 1`), `W` slots of a feedback ring.

What is the ring's own here is only where the keys come from: each slot's distance to the
new token follows from the 0-d tensor `count`, and slots not yet written get the score
$-\infty$ (`TransformerLM` on a CPU: False in the fused attention's mask). The rest is
the eager models' own code: every block is `TransformerBlock.residual`, XL's scores are
`labnn.xl.relative_attention.relative_scores` (`TransformerLM`'s too, on a GPU), the
feedback model's step is `feedback_step` and `memory_keys_values`. No step reads a value
back to the host or branches on one, so a step compiles to one graph and records as one
CUDA graph (`labnn.compiled.decoding`). The steps run eagerly too, and equal `TransformerLM`'s
cached forward, `TransformerXL.step` and `FeedbackTransformerKV.step` (tested).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from labnn.compiled.rings import FeedbackRing, TransformerRing, XLRing
from labnn.feedback.kv import FeedbackTransformerKV
from labnn.feedback.layer import RelativeBias, feedback_step, memory_keys_values
from labnn.transformer import TransformerLM
from labnn.xl.model import TransformerXL
from labnn.xl.relative_attention import relative_scores

if TYPE_CHECKING:
    from labnn.nn.attention import MultiHeadAttention


def ring_attention(
    attn: MultiHeadAttention,
    x: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    slot: torch.Tensor,
    column: torch.Tensor,
    written: torch.Tensor,
    table: torch.Tensor | None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    r"""One layer's attention for one new token over a ring: what `attend_one_token`
    (`labnn.xl.cache`) computes over a `KVBuffer`.

    The new token's key and value are written into its `slot` (in place); then the query
    scores all `C` slots with `relative_scores`. Slot $j$ holds the key at distance
    $\delta_j = (\text{slot} - j) \bmod C$, whose relative key is column
    $C - 1 - \delta_j$ of the table (`column`): the ring's alignment of the position
    term. With absolute positions (`table` None) only $q^\top k_j / \sqrt{d_h}$
    remains. Slots not yet written get the score $-\infty$, hence the weight 0.

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

    Returns:
        `(output, (keys_t, values))`, the ring's layer with the new token written.
    """
    q, (k, v) = attn.project(x[:, None])  # each [B, H, 1, D_h]
    # in the ring's dtype: under torch.autocast the projections return autocast's
    keys_t.index_copy_(3, slot.view(1), k.transpose(2, 3).to(keys_t.dtype))
    values.index_copy_(2, slot.view(1), v.to(values.dtype))
    if table is None:
        scores = relative_scores(q, keys_t)
    else:
        scores = relative_scores(q, keys_t, table, attn.content_bias, attn.position_bias,
                                 align=lambda by_column: by_column[..., column])
    scores = scores.squeeze(2).masked_fill(~written, float("-inf"))  # [B, H, C]
    y = (scores.softmax(dim=-1).unsqueeze(2) @ values).squeeze(2)  # [B, H, D_h]
    return attn.out_proj(y.flatten(1)), (keys_t, values)


def transformer_ring_step(model: TransformerLM, x: torch.Tensor,
                          ring: TransformerRing) -> torch.Tensor:
    r"""`TransformerLM`'s cached forward for one token per stream over a ring, in eval
    mode; the ring is updated in place.

    The new token takes slot $\text{count} \bmod C$; slot $j$ lies at distance
    $\delta_j = (\text{count} - j) \bmod C$ and was written iff
    $\delta_j \le \text{count}$: those are the keys it may attend (with `attn_len` = W
    the ring has $W + 1$ slots, so the band is the ring itself). Each block is
    `TransformerBlock.residual` around `one_query_attention` over the ring.

    Args:
        model: the model, every module in eval mode (checked by `labnn.compiled.decoder`,
            once per generation).
        x: the new token's embedding at its position, `model.embed(token, ring.count)`.
        ring: from `transformer_ring`.

    Shape:
        x `[B, D]` -> logits `[B, V]`.
    """
    c = ring.values[0].size(2)
    slot = ring.count % c
    written = (slot - torch.arange(c, device=x.device)) % c <= ring.count  # may attend
    for block, keys, values in zip(model.blocks, ring.keys, ring.values):
        x, _ = block.residual(x, lambda h: one_query_attention(
            block.attn, h, keys, values, slot, written))
    ring.count.add_(1)
    return model.head(model.norm(x))


def products_on(device: torch.device) -> bool:
    """Whether `one_query_attention` scores by plain products on `device` (any CUDA
    device), not by the fused attention (a CPU): the faster of the two where each was
    measured, one NVIDIA H200 and 2-core CPUs at batch 1; other GPUs were not."""
    return device.type == "cuda"


def one_query_attention(attn: MultiHeadAttention, x: torch.Tensor, keys: torch.Tensor,
                        values: torch.Tensor, slot: torch.Tensor,
                        written: torch.Tensor) -> tuple[torch.Tensor, tuple]:
    r"""One layer's attention for one new token over a ring of keys in rows: its key and
    value written into `slot` (in place), then attention over the `written` slots (True
    = may attend; the new token's own slot always is).

    The same $\mathrm{softmax}(q^\top k_j / \sqrt{d_h})$ two ways, by device
    (`products_on`). On a GPU, `ring_attention` without a table: plain products (the
    keys seen transposed, a view). The fused attention
    (`torch.nn.functional.scaled_dot_product_attention`) took 0.23 ms per layer on an
    NVIDIA H200 at 2,304 slots (d 128, batch 1, 4 heads), 92 % of the replayed step
    (`torch.profiler`, 2026-11-27): by its design it shares out its work by tiles of 64
    queries, so one query per stream and head gives it 4 blocks for 132
    multiprocessors. By products, the replay and `argmax` took 0.18 ms per token on
    another H200 the same day, against 1.03 ms with the fused attention (no GPU has timed
    either since). On a CPU the
    fused attention: there the compiled products were the slower, 0.78 against 0.55 ms
    per token at a context of 2,048 (equal at 256; `benchmarks/bench_generation.py
    --compile`, 2-core VM, same day).

    Shape:
        x `[B, D]`, keys and values `[B, H, C, D_h]`, written `[C]` -> `[B, D]`.
    """
    if products_on(keys.device):
        out, _ = ring_attention(attn, x, keys.transpose(2, 3), values, slot, None,
                                written, None)
        return out, (keys, values)
    q, (k, v) = attn.project(x[:, None])  # each [B, H, 1, D_h]
    # in the ring's dtype: under torch.autocast the projections return autocast's
    keys.index_copy_(2, slot.view(1), k.to(keys.dtype))
    values.index_copy_(2, slot.view(1), v.to(values.dtype))
    y = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype),
                                       attn_mask=written[None])  # [B, H, 1, D_h]
    return attn.out_proj(y.flatten(1)), (keys, values)


def xl_ring_step(model: TransformerXL, x: torch.Tensor, ring: XLRing) -> torch.Tensor:
    r"""`TransformerXL.step` for one token per stream over a ring, in eval mode; the
    ring is updated in place.

    The new token takes slot $\text{count} \bmod C$; slot $j$ lies at distance
    $\delta_j = (\text{count} - j) \bmod C$ and was written iff
    $\delta_j \le \text{count}$. Each block is `TransformerBlock.residual` around
    `ring_attention`.

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
        keys_t, values = ring.keys_t[i], ring.values[i]
        x, _ = block.residual(x, lambda h: ring_attention(
            block.attn, h, keys_t, values, slot, column, written, table))
    ring.count.add_(1)
    return model.head(model.norm(x))


def feedback_ring_step(
    model: FeedbackTransformerKV, x: torch.Tensor, ring: FeedbackRing
) -> torch.Tensor:
    r"""`FeedbackTransformerKV.step` over a ring, in eval mode; the ring is updated in
    place.

    Slot $j$ holds the key and value of the memory vector of the latest earlier
    position $p \equiv j$ (mod $W$), at distance
    $\delta_j = ((\text{count} - 1 - j) \bmod W) + 1$ (1 = the previous token), written
    iff $\delta_j \le \text{count}$. The step is the eager
    models' own `feedback_step` (`labnn.feedback.layer`), every layer given the ring's
    keys and values and the relative bias of each slot's distance ($-\infty$ where a
    slot is empty; the slots' order does not matter, as the bias comes with each slot).
    Its memory vector gives the key and value (`memory_keys_values`) written into slot
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
    h, w = ring.kv.size(2), ring.kv.size(3)
    distance = (ring.count - 1 - torch.arange(w, device=x.device)) % w + 1
    empty = distance > ring.count
    layers, (k, v) = model.layers, ring.kv.unbind(0)
    biases = [RelativeBias._at(layer.attn.rel.bias, distance).masked_fill(empty, float("-inf"))
              for layer in layers]  # each [H, W]
    top, m = feedback_step(layers, model.mix, x, [k] * len(layers), [v] * len(layers),
                           biases=biases)
    row = memory_keys_values(m, model.norm_mem, model.kv, h)  # [2, B, H, D_h]
    # in the ring's dtype: under torch.autocast the projection returns autocast's
    ring.kv.index_copy_(3, (ring.count % w).view(1), row.unsqueeze(3).to(ring.kv.dtype))
    ring.count.add_(1)
    return model.head(top)
