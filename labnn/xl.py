"""Transformer-XL (Dai et al. 2019): segment-level recurrence with relative positional attention.

Dimension letters: `B` batch, `T` tokens of the current segment (queries), `M` memory length,
`S = M + T` keys (memory + segment), `D` model width, `H` heads, `D_h` head width, `V` vocabulary,
`L` layers. In einsum strings `i` indexes queries, `j` keys, `r` relative distances, `d` head features.

The model reads a long text segment by segment. Each layer keeps the hidden states it received for the last
`mem_len` positions (its *memory*, `[B, M, D]`, detached so no gradient reaches an earlier segment) and lets
the next segment attend to them. The memory enters attention exactly like a KV cache: its keys and values are
projections of the stored states. Because positions are *relative* (a score depends on the distance
`i - j`, never on where a segment starts), a stored state means the same thing at every later step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVBuffer, KVCache, MultiHeadAttention, causal_mask
from .generation import check_sampling, sample_next
from .data.batching import num_stream_batches, stream_batch
from .positions import sinusoidal_encoding
from .relative_attention import RelativeMultiHeadAttention, check_clamp_len
from .train import lm_loss
from .transformer import INIT_STD, FeedForward, check_dropout, check_tokens, init_weights

POSITIONS = ("relative", "absolute")


def check_mem_len(mem_len: int) -> None:
    """Raise a clear error unless `mem_len` is a non-negative int."""
    if not isinstance(mem_len, int) or isinstance(mem_len, bool) or mem_len < 0:
        raise ValueError(f"mem_len must be a non-negative int, got {mem_len!r}")


class XLBlock(nn.Module):
    r"""Pre-norm block attending over memory + segment: $x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x) \mid
    \mathrm{LN}(m))$, then $x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$.

    Args:
        d_model, n_heads, d_ff, dropout, bias: as in `TransformerBlock`.
        relative: relative attention (`RelativeMultiHeadAttention`) or plain `MultiHeadAttention`
            (for a model with absolute positions added to its input).
        clamp_len: see `RelativeMultiHeadAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True,
                 relative: bool = True, clamp_len: int | None = None):
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model, bias=bias)
        self.attn = (RelativeMultiHeadAttention(d_model, n_heads, dropout, bias, clamp_len) if relative
                     else MultiHeadAttention(d_model, n_heads, dropout, bias))
        self.norm_ff = nn.LayerNorm(d_model, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout, bias)

    def memory_cache(self, mem: torch.Tensor | None) -> KVCache | None:
        """Keys and values of the memory: the normalised states through the key/value projections.

        Shape:
            mem `[B, M, D]` -> `(k, v)`, each `[B, H, M, D_h]`.
        """
        if mem is None:
            return None
        qkv, d = self.attn.qkv, mem.size(-1)  # rows D: of the fused projection make keys and values
        kv = F.linear(self.norm_attn(mem), qkv.weight[d:], None if qkv.bias is None else qkv.bias[d:])
        k, v = (self.attn.split_heads(z) for z in kv.chunk(2, dim=-1))
        return k, v

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | KVBuffer | None = None, *,
                need_weights: bool = False, rel_keys: torch.Tensor | None = None):
        """Shape: x `[B, T, D]`, mask (True = may attend) `[T, S]` -> `[B, T, D]`; returns `(x, weights, (k, v))`."""
        extra = {} if rel_keys is None else {"rel_keys": rel_keys}
        a, weights, kv = self.attn(self.norm_attn(x), mask, cache=cache, need_weights=need_weights, **extra)
        x = x + a
        return x + self.ff(self.norm_ff(x)), weights, kv

    def step(self, x: torch.Tensor, cache: KVBuffer, table: torch.Tensor | None) -> tuple[torch.Tensor, KVBuffer]:
        """`forward` for one new token per stream in eval mode (generation), through
        `RelativeMultiHeadAttention.step`.

        Args:
            x: the new token's state.
            cache: keys and values of the earlier tokens.
            table: `[H, D_h, R]`, see `RelativeMultiHeadAttention.step` (None with absolute positions).

        Shape:
            x `[B, D]` -> `[B, D]`; returns `(x, kv)`.
        """
        if table is None:
            a, _, kv = self.attn(self.norm_attn(x)[:, None], cache=cache)
            a = a[:, 0]
        else:
            a, kv = self.attn.step(self.norm_attn(x), cache, table)
        x = x + a
        return x + self.ff(self.norm_ff(x)), kv


@dataclass
class XLConfig:
    """Hyper-parameters of `TransformerXL`.

    Args:
        vocab_size: number of token ids `V`.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`.
        n_layers: number of blocks `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        mem_len: states each layer remembers (`M`, default memory length; a call may override it).
        clamp_len: relative distances beyond it share one encoding (None: no clamping).
        dropout: dropout rate everywhere.
        positions: `"relative"` (Transformer-XL) or `"absolute"` (sinusoids of the position inside the
            segment added to the input, as a vanilla transformer would; the ablation of the paper's Table 6).
        bias: biases in linear layers and layer norms.
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int | None = None
    mem_len: int = 64
    clamp_len: int | None = None
    dropout: float = 0.0
    positions: str = "relative"
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads or self.d_model % 2:
            raise ValueError(f"d_model={self.d_model} must be even and divisible by n_heads={self.n_heads}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if not isinstance(self.d_ff, int) or isinstance(self.d_ff, bool) or self.d_ff <= 0:
            raise ValueError(f"d_ff must be a positive int or None, got {self.d_ff!r}")
        check_mem_len(self.mem_len)
        check_clamp_len(self.clamp_len)
        check_dropout(self.dropout)
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")


class TransformerXL(nn.Module):
    """Transformer-XL language model: `logits, mems = model(tokens, mems)`.

    `mems` is a list with one `[B, M, D]` tensor per layer: the states that layer received for the last
    `M <= mem_len` positions, detached. Feed them back with the next segment of the same streams.

    Example:
        >>> model = TransformerXL(XLConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2, mem_len=4))
        >>> x = torch.randint(10, (3, 5))
        >>> logits, mems = model(x)
        >>> logits, mems = model(x, mems)
        >>> list(logits.shape), [list(m.shape) for m in mems]
        ([3, 5, 10], [[3, 4, 16], [3, 4, 16]])
    """

    def __init__(self, config: XLConfig):
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        relative = c.positions == "relative"
        # absolute: sinusoids (RMS ~0.7) would drown the tokens (std 0.02); a learned scale starts them level
        self.pos_scale = None if relative else nn.Parameter(torch.tensor(INIT_STD))
        self.blocks = nn.ModuleList(
            [XLBlock(c.d_model, c.n_heads, c.d_ff, c.dropout, c.bias, relative, c.clamp_len) for _ in range(c.n_layers)]
        )
        self.norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings (+ sinusoids of the positions `0 .. T-1` inside the segment, times a learned
        scale `pos_scale`, when absolute).

        Shape: `[B, T]` -> `[B, T, D]`.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        x = self.tok_emb(tokens)
        if self.pos_scale is not None:
            positions = sinusoidal_encoding(torch.arange(tokens.size(1), device=tokens.device), x.size(-1))
            x = x + self.pos_scale * positions.to(x.dtype)
        return self.dropout(x)

    def check_mems(self, mems: list[torch.Tensor] | None, x: torch.Tensor) -> None:
        """Raise a clear error unless `mems` fits `x [B, T, D]`: one `[B, M, D]` per layer, same M, device, dtype."""
        if mems is None:
            return
        if not isinstance(mems, (list, tuple)) or len(mems) != len(self.blocks):
            got = len(mems) if isinstance(mems, (list, tuple)) else type(mems).__name__
            raise ValueError(f"mems must be a list of {len(self.blocks)} tensors (one per layer), got {got}")
        b, _, d = x.shape
        m = mems[0].size(1) if isinstance(mems[0], torch.Tensor) and mems[0].dim() == 3 else None
        for i, mem in enumerate(mems):
            if not isinstance(mem, torch.Tensor) or mem.dim() != 3 or mem.shape[0] != b or mem.shape[1:] != (m, d):
                got = list(mem.shape) if isinstance(mem, torch.Tensor) else type(mem).__name__
                raise ValueError(f"mems[{i}] has shape {got}, expected [B={b}, M={m}, D={d}] like tokens and mems[0]")
            if mem.device != x.device or mem.dtype != x.dtype:
                raise ValueError(
                    f"mems[{i}] is {mem.dtype} on {mem.device}, but the model runs {x.dtype} on {x.device}"
                )

    def check_cache(self, cache: XLCache, x: torch.Tensor, mem_len: int | None) -> None:
        """Raise a clear error unless `cache` could come from this model's `step` for the states `x [B, T, D]`.

        Checks the layer count and the first layer's buffer and table (`step` makes every layer's alike):
        O(1) Python on shapes only, as it runs at every generated token.
        """
        if not isinstance(cache, XLCache):
            raise TypeError(f"cache must be an XLCache (from this model's step), got {type(cache).__name__}")
        n, c = len(self.blocks), self.config
        if len(cache.kv) != n or len(cache.rel_keys) != n:
            raise ValueError(
                f"cache holds {len(cache.kv)} layers, but this model has {n} (a cache from another model?)"
            )
        if mem_len is not None and mem_len != cache.mem_len:
            raise ValueError(f"mem_len={mem_len!r} differs from the cache's {cache.mem_len}; it is fixed once the "
                             "cache exists (pass None)")
        attn, b = self.blocks[0].attn, x.size(0)
        for i, (kv, table) in enumerate(zip(cache.kv[:1], cache.rel_keys[:1])):
            if not isinstance(kv, KVBuffer):
                raise TypeError(f"cache.kv[{i}] must be a KVBuffer, got {type(kv).__name__}")
            values = kv.storage_values  # [B, H, C, D_h], no view made: this runs at every token
            if values.size(0) != b:
                raise ValueError(f"cache holds streams of batch size {values.size(0)}, but the tokens have "
                                 f"batch size {b}")
            if (values.size(1), values.size(3)) != (attn.n_heads, attn.d_head):
                raise ValueError(f"cache.kv[{i}] holds {values.size(1)} heads of width {values.size(3)}, but this "
                                 f"model has {attn.n_heads} heads of width {attn.d_head}")
            if values.dtype != x.dtype or values.device != x.device:
                raise ValueError(f"cache.kv[{i}] is {values.dtype} on {values.device}, but the model runs "
                                 f"{x.dtype} on {x.device}")
            if (table is None) != (c.positions == "absolute"):
                made = "absolute" if table is None else "relative"
                raise ValueError(f"cache was made by a model with {made} positions, this one uses {c.positions}")
            if table is not None and (table.shape != (attn.n_heads, attn.d_head, cache.mem_len + 1)
                                      or table.dtype != x.dtype or table.device != x.device):
                raise ValueError(
                    f"cache.rel_keys[{i}] is {table.dtype} {list(table.shape)} on {table.device}, expected "
                    f"{x.dtype} {[attn.n_heads, attn.d_head, cache.mem_len + 1]} on {x.device}"
                )

    def forward(
        self,
        tokens: torch.Tensor,
        mems: list[torch.Tensor] | None = None,
        *,
        mem_len: int | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for a segment, attending to the memory; returns the updated memory.

        Args:
            tokens: the segment's token ids.
            mems: per-layer memory from the previous segment of the same streams (None: start afresh).
            mem_len: how many states to keep (default `config.mem_len`); evaluation may use more than training.
            mask: boolean, True = may attend, `[T, S]`; default `causal_mask(T, M + T)` (all memory + the past).
                A mask that lets a query see later keys scores them at their negative distance (relative
                positions; see `RelativeMultiHeadAttention.forward`).

        Shape:
            tokens `[B, T]`, mems `L x [B, M, D]` -> logits `[B, T, V]`, mems `L x [B, min(M + T, mem_len), D]`.
        """
        logits, mems, _ = self._run(tokens, mems, mem_len, mask, need_weights=False)
        return logits, mems

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor, mems: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Attention weights of every layer over memory + segment, for plots.

        Shape:
            tokens `[B, T]`, mems `L x [B, M, D]` -> a list of `L` tensors `[B, H, T, M + T]`.
        """
        return self._run(tokens, mems, None, None, need_weights=True)[2]

    def _run(self, tokens, mems, mem_len, mask, need_weights):
        mem_len = self.config.mem_len if mem_len is None else mem_len
        check_mem_len(mem_len)
        x = self.embed(tokens)
        self.check_mems(mems, x)
        t, s = x.size(1), x.size(1) + (0 if mems is None else mems[0].size(1))
        mask = causal_mask(t, s, device=x.device) if mask is None else mask
        new_mems, maps = [], []
        for i, block in enumerate(self.blocks):
            mem = None if mems is None else mems[i]
            new_mems.append(update_memory(mem, x, mem_len))
            x, weights, _ = block(x, mask, block.memory_cache(mem), need_weights=need_weights)
            maps.append(weights)
        return self.head(self.norm(x)), new_mems, maps

    @torch.inference_mode()
    def step(
        self, tokens: torch.Tensor, cache: XLCache | None = None, *, mem_len: int | None = None
    ) -> tuple[torch.Tensor, XLCache]:
        """Read `tokens` after the cached positions; return the last token's logits and the new cache.

        The cache keeps each layer's keys and values of the last `mem_len` positions instead of the states
        they are projected from. With relative positions a key never changes once computed (no position is
        baked into it), so nothing is recomputed; the encodings of the distances `0 .. mem_len` are projected
        once, when the cache is created. Equals `model(tokens, mems, mem_len=mem_len)` call after call. In eval
        mode one token per stream goes through `XLBlock.step`, the same computation in fewer operations.

        Args:
            tokens: the new tokens (a whole prompt, or one token per step).
            cache: as returned by the previous step (None: start afresh).
            mem_len: positions to keep (default `config.mem_len`); fixed once the cache exists.

        Shape:
            tokens `[B, T]` -> logits `[B, V]`; cache keys/values `L x [B, H, min(S, mem_len), D_h]`.
        """
        x = self.embed(tokens)
        if x.size(1) == 0:
            raise ValueError(f"tokens must hold at least one token per stream, got shape {list(tokens.shape)}")
        if cache is not None:
            self.check_cache(cache, x, mem_len)
        else:
            mem_len = self.config.mem_len if mem_len is None else mem_len
            check_mem_len(mem_len)
            relative = self.config.positions == "relative"
            # [H, D_h, mem_len + 1]: each head's table one contiguous matrix (`RelativeMultiHeadAttention.step`)
            tables = [block.attn.relative_keys(mem_len + 1).permute(1, 2, 0).contiguous() if relative else None
                      for block in self.blocks]
            attn = self.blocks[0].attn
            empty = [KVBuffer.empty(x.new_empty(x.size(0), attn.n_heads, 0, attn.d_head)) for _ in self.blocks]
            cache = XLCache(empty, tables, mem_len)
        t, kv = x.size(1), []
        if t == 1 and not self.training:  # generation: each block's single-token path
            x = x[:, 0]
            for block, layer_cache, table in zip(self.blocks, cache.kv, cache.rel_keys):
                x, layer_kv = block.step(x, layer_cache, table)
                kv.append(layer_kv.last(cache.mem_len))
            return self.head(self.norm(x)), XLCache(kv, cache.rel_keys, cache.mem_len)
        s = t + len(cache.kv[0])
        mask = causal_mask(t, s, device=x.device)
        for block, layer_cache, table in zip(self.blocks, cache.kv, cache.rel_keys):
            # as [S, H, D_h], unless a long prompt needs more distances than the table (then computed inside)
            rel_keys = table.permute(2, 0, 1) if table is not None and table.size(-1) >= s else None
            x, _, layer_kv = block(x, mask, layer_cache, rel_keys=rel_keys)
            kv.append(layer_kv.last(cache.mem_len))
        return self.head(self.norm(x[:, -1])), XLCache(kv, cache.rel_keys, cache.mem_len)

    @torch.inference_mode()
    def generate(
        self,
        prompt: torch.Tensor,
        n: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        *,
        mem_len: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append `n` sampled tokens to `prompt`, one token per `step`, the memory serving as the cache.

        The prompt is read as one segment; then each new token attends to the last `mem_len` positions.

        Shape:
            prompt `[B, T0]` -> `[B, T0 + n]`.
        """
        check_sampling(temperature, top_k, n)
        check_tokens(prompt, self.config.vocab_size, "prompt", device=self.tok_emb.weight.device, min_len=1)
        out, cache, new = prompt, None, prompt
        for _ in range(n):
            logits, cache = self.step(new, cache, mem_len=mem_len)
            new = sample_next(logits, temperature, top_k, generator)[:, None]
            out = torch.cat([out, new], dim=1)
        return out


class XLCache(NamedTuple):
    """What `TransformerXL.step` keeps between calls.

    Attributes:
        kv: per layer, a `KVBuffer` of the keys and values of the last `mem_len` positions, each
            `[B, H, M, D_h]` (`k, v = cache.kv[i]`).
        rel_keys: per layer, `relative_keys(mem_len + 1)` stored head by head, `[H, D_h, mem_len + 1]`
            (None with absolute positions).
        mem_len: how many positions are kept.
    """

    kv: list[KVBuffer]
    rel_keys: list[torch.Tensor | None]
    mem_len: int


def update_memory(mem: torch.Tensor | None, h: torch.Tensor, mem_len: int) -> torch.Tensor:
    r"""The next memory of one layer: the last `mem_len` of its remembered and new input states, detached.

    $$m_{\tau+1} = \mathrm{SG}\big([m_\tau \circ h_\tau]_{-\mathrm{mem\_len}:}\big)$$

    `SG` (stop-gradient, `detach`) keeps backpropagation inside the current segment.

    Shape:
        mem `[B, M, D]` (or None), h `[B, T, D]` -> `[B, min(M + T, mem_len), D]`.
    """
    check_mem_len(mem_len)
    states = h if mem is None else torch.cat([mem, h], dim=1)
    return states[:, states.size(1) - min(mem_len, states.size(1)):].detach()  # [:, -0:] would keep everything


def segment_mask(n: int, seg_len: int, mem_len: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """The mask under which one pass over `n` tokens equals reading them segment by segment with memory.

    Query `i` sees key `j` iff `start(i) - mem_len <= j <= i`, where `start(i)` is the first position of
    `i`'s segment: its own segment up to itself, plus the `mem_len` positions before the segment.

    Returns:
        `[N, N]` boolean tensor, True = may attend.
    """
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


@torch.no_grad()
def stream_loss(
    model: nn.Module, ids: torch.Tensor, *, batch_size: int, seq_len: int, mem_len: int | None = None,
    skip: int = 0, max_batches: int | None = None,
) -> float:
    """Mean next-token loss over contiguous streams read segment by segment (`labnn.data.stream_batch`).

    A `TransformerXL` carries its memory (of `mem_len` states, default its own) from segment to segment; any
    other model is called as `model(x)` and sees each segment alone (context fragmentation). The first `skip`
    segments are read but not scored, so that every memory length is scored on the same tokens.

    Shape:
        ids `[N]` -> a float.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    n = num_stream_batches(ids, batch_size, seq_len)
    n = n if max_batches is None else min(n, max_batches)
    if not 0 <= skip < n:
        raise ValueError(f"skip must be in [0, {n}) (segments available), got {skip!r}")
    mems, losses = None, []
    for i in range(n):
        x, y = (z.to(device) for z in stream_batch(ids, batch_size, seq_len, i))
        if isinstance(model, TransformerXL):
            logits, mems = model(x, mems, mem_len=mem_len)
        else:
            logits, _ = model(x)
        if i >= skip:
            losses.append(lm_loss(logits, y).item())
    model.train(was_training)
    return sum(losses) / len(losses)
