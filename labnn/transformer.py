"""A causal (GPT-style) transformer language model with pre-norm blocks and a KV cache.

Dimension letters: `B` batch, `T` new tokens, `S` keys (cached + new), `D` model width, `V` vocabulary,
`L` layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVBuffer, KVCache, MultiHeadAttention, causal_mask
from .generation import check_sampling, is_int, sample_next
from .positions import sinusoidal_encoding

POSITIONS = ("learned", "sinusoidal", "none")
INIT_STD = 0.02  # GPT-2's initial weight scale


def check_tokens(
    tokens: torch.Tensor,
    vocab_size: int,
    name: str = "tokens",
    dims: int = 2,
    *,
    device: torch.device | None = None,
    min_len: int = 0,
    scan: bool = True,
) -> None:
    """Raise a clear error unless `tokens` is a `torch.long` (or `torch.int32`) tensor of `dims` dimensions,
    on `device` (when given), at least `min_len` long in its last dimension, with ids in `[0, vocab_size)`.

    The one validator of token ids for every model's `forward`, `step` and `generate`. All checks are O(1)
    except the range check, one `aminmax` pass over the ids (`scan=False` skips it, for a caller that
    checks only the type and shape).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.long, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype}")
    if tokens.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions, got shape {list(tokens.shape)}")
    if tokens.size(-1) < min_len:
        raise ValueError(f"{name} must hold at least {'one token' if min_len == 1 else f'{min_len} tokens'} per "
                         f"sequence, got shape {list(tokens.shape)}")
    if device is not None and tokens.device != device:
        raise ValueError(f"{name} is on {tokens.device}, but the model is on {device}: move one of them")
    if not scan:
        return
    low, high = (v.item() for v in torch.aminmax(tokens)) if tokens.numel() else (0, 0)
    if low < 0 or high >= vocab_size:
        bad = tokens[(tokens < 0) | (tokens >= vocab_size)][0].item()
        raise ValueError(f"{name} contains id {bad}, outside the vocabulary [0, {vocab_size})")


def check_dropout(dropout: float) -> None:
    """Raise a clear error unless `dropout` is a number in `[0, 1)`."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


@dataclass
class TransformerConfig:
    """Hyper-parameters of `TransformerLM`.

    Args:
        vocab_size: number of token ids `V`.
        seq_len: longest context; the size of the learned position table.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`.
        n_layers: number of blocks `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        dropout: dropout rate everywhere.
        positions: `"learned"` (a table of `seq_len` vectors), `"sinusoidal"` (no length limit) or `"none"`.
        bias: biases in linear layers and layer norms.
        attn_len: each token attends to itself and at most this many previous tokens (a banded causal mask);
            None = all previous tokens.
    """

    vocab_size: int
    seq_len: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    positions: str = "learned"
    bias: bool = True
    attn_len: int | None = None

    def __post_init__(self) -> None:
        for field in ("vocab_size", "seq_len", "d_model", "n_heads", "n_layers"):
            value = getattr(self, field)
            if not is_int(value) or value <= 0:
                raise ValueError(f"{field} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if not is_int(self.d_ff) or self.d_ff <= 0:
            raise ValueError(f"d_ff must be a positive int or None, got {self.d_ff!r}")
        check_dropout(self.dropout)
        if self.attn_len is not None and (not is_int(self.attn_len) or self.attn_len <= 0):
            raise ValueError(f"attn_len must be a positive int or None, got {self.attn_len!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network: $\mathrm{FF}(x) = W_2\,\mathrm{GELU}(W_1 x + b_1) + b_2$.

    Shape:
        `[..., D]` -> `[..., D]`.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class TransformerBlock(nn.Module):
    r"""Pre-norm block: $x \leftarrow x + \mathrm{MHA}(\mathrm{LN}(x))$, then $x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model, bias=bias)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout, bias)
        self.norm_ff = nn.LayerNorm(d_model, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout, bias)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, KVCache]:
        """Shape: x `[B, T, D]`, mask (True = may attend) `[T, S]` -> `[B, T, D]`; returns `(x, weights, cache)`."""
        a, weights, cache = self.attn(self.norm_attn(x), mask, cache=cache, need_weights=need_weights)
        x = x + a
        return x + self.ff(self.norm_ff(x)), weights, cache


class TransformerLM(nn.Module):
    """Causal language model: token embedding + positions, `L` pre-norm blocks, final norm, tied output head.

    `logits, cache = model(tokens)` trains on whole sequences; with `use_cache=True` it also returns each
    layer's keys and values, and `model(next_tokens, cache, use_cache=True)` continues from them.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.seq_len, c.d_model) if c.positions == "learned" else None
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            [TransformerBlock(c.d_model, c.n_heads, c.d_ff, c.dropout, c.bias) for _ in range(c.n_layers)]
        )
        self.norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def embed(self, tokens: torch.Tensor, offset: int) -> torch.Tensor:
        """Token embeddings plus the positions `offset .. offset + T - 1`. Shape: `[B, T]` -> `[B, T, D]`."""
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        t = tokens.size(1)
        x = self.tok_emb(tokens)
        if self.config.positions != "none":
            pos = torch.arange(offset, offset + t, device=tokens.device)
            if self.pos_emb is None:
                x = x + sinusoidal_encoding(pos, self.config.d_model).to(x.dtype)
            elif offset + t > self.config.seq_len:
                raise ValueError(
                    f"sequence of {offset + t} tokens (cache {offset} + tokens {t}) is longer than "
                    f"seq_len={self.config.seq_len}, the size of the learned position table"
                )
            else:
                x = x + self.pos_emb(pos)
        return self.dropout(x)

    def forward(
        self, tokens: torch.Tensor, cache: list[KVCache] | None = None, *, use_cache: bool = False
    ) -> tuple[torch.Tensor, list[KVCache] | None]:
        """Next-token logits for every position.

        Args:
            tokens: token ids.
            cache: per-layer `(k, v)` of earlier tokens, as returned by a previous call with `use_cache=True`;
                the tokens continue it, and the updated cache is returned whatever `use_cache` says.
            use_cache: return the updated cache (otherwise None, unless a `cache` was passed in).

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`; cache entries `[B, H, S, D_h]`.
        """
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")
        offset = 0 if cache is None else self.check_cache(cache, tokens)
        x = self.embed(tokens, offset)
        mask = self.attention_mask(tokens.size(1), offset, tokens.device)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, _, layer_cache = block(x, mask, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        return self.head(self.norm(x)), (new_cache if use_cache or cache is not None else None)

    def check_cache(self, cache: list[KVCache], tokens: torch.Tensor) -> int:
        """Raise a clear error unless `cache` could come from this model for `tokens [B, T]`; return its
        length `S`. O(L) Python on shapes only (it runs at every generated token)."""
        if not isinstance(cache, (list, tuple)) or not all(isinstance(kv, (tuple, KVBuffer)) for kv in cache):
            raise TypeError("cache must be a list of (k, v) pairs, one per layer, as returned with "
                            f"use_cache=True; got {type(cache).__name__}")
        if len(cache) != len(self.blocks):
            raise ValueError(f"cache has {len(cache)} layers, expected {len(self.blocks)}")
        attn, weight = self.blocks[0].attn, self.tok_emb.weight
        check_tokens(tokens, self.config.vocab_size, device=weight.device, scan=False)
        b, s = tokens.size(0), None
        for i, kv in enumerate(cache):
            k, v = kv
            tensors = isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            if not tensors or k.dim() != 4 or k.shape != v.shape:
                raise ValueError(f"cache[{i}] must be (k, v), each [B, H, S, D_h]")
            if (k.size(0), k.size(1), k.size(3)) != (b, attn.n_heads, attn.d_head):
                raise ValueError(
                    f"cache[{i}] has keys {list(k.shape)}, expected [B, H, S, D_h] with batch size {b} (the "
                    f"tokens'), {attn.n_heads} heads of width {attn.d_head} (a cache from another model?)"
                )
            if k.dtype != weight.dtype or k.device != weight.device:
                raise ValueError(f"cache[{i}] is {k.dtype} on {k.device}, but the model is {weight.dtype} on "
                                 f"{weight.device}")
            s = k.size(2) if s is None else s
            if k.size(2) != s:
                raise ValueError(f"cache[{i}] holds {k.size(2)} keys, but cache[0] holds {s}")
        return s

    def attention_mask(self, t: int, offset: int, device: torch.device) -> torch.Tensor | None:
        """Causal mask (True = may attend) of `t` new tokens after `offset` cached ones, banded to `attn_len`.

        Query `i` (position `offset + i`) may attend key `j` iff `offset + i - attn_len <= j <= offset + i`.

        Shape:
            -> `[T, offset + T]`, or None when nothing needs masking (one new token, no band).
        """
        if t == 1 and self.config.attn_len is None:
            return None
        mask = causal_mask(t, offset + t, device=device)
        return mask if self.config.attn_len is None else mask.triu(offset - self.config.attn_len)

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Attention weights of every layer for one causal pass, for plots.

        Shape:
            tokens `[B, T]` -> a list of `L` tensors `[B, H, T, T]`.
        """
        x = self.embed(tokens, 0)
        mask = self.attention_mask(tokens.size(1), 0, tokens.device)
        maps = []
        for block in self.blocks:
            x, weights, _ = block(x, mask, need_weights=True)
            maps.append(weights)
        return maps

    @torch.inference_mode()
    def generate(
        self,
        prompt: torch.Tensor,
        n: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        *,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append `n` sampled tokens to `prompt`.

        With `use_cache` each step feeds only the newest token and reuses every earlier key and value; without
        it each step recomputes the whole (last `seq_len` tokens of the) context. Once a learned-position model's
        context is full the window must slide, which absolute positions cannot do incrementally, so both paths
        then recompute the last `seq_len` tokens.

        Shape:
            prompt `[B, T0]` -> `[B, T0 + n]`.
        """
        check_sampling(temperature, top_k, n)
        check_tokens(prompt, self.config.vocab_size, "prompt", device=self.tok_emb.weight.device, min_len=1)
        limit = self.config.seq_len if self.pos_emb is not None else None
        out, cache = prompt, None
        for _ in range(n):
            full = limit is not None and out.size(1) >= limit
            if use_cache and cache is not None and not full:
                logits, cache = self(out[:, -1:], cache, use_cache=True)
            else:
                context = out if limit is None else out[:, -limit:]
                logits, cache = self(context, use_cache=use_cache)
            out = torch.cat([out, sample_next(logits[:, -1], temperature, top_k, generator)[:, None]], dim=1)
        return out


def init_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation, for `model.apply`: normal(0, `INIT_STD`) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
