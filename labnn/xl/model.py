r"""Transformer-XL (Dai et al. 2019): segment-level recurrence with relative positional
attention.

Dimension letters (the package legend): `B` batch, `T` tokens of the current segment
(queries), `T0` of a prompt, `M` memory length, `S = M + T` keys (memory + segment), `D`
model width, `H` heads, `D_h` head width, `F` feed-forward width, `V` vocabulary, `L` layers.

The model reads a long text segment by segment. Each layer keeps the hidden states it
received for the last `mem_len` positions (its *memory*, `[B, M, D]`, detached so no
gradient reaches an earlier segment; `labnn.xl.memory`) and lets the next segment attend
to them. The memory enters attention exactly like a KV cache: its keys and values are
projections of the stored states. Because positions are *relative* (a score depends on
the distance $i - j$, never on where a segment starts; `labnn.xl.relative_attention`), a
stored state means the same thing at every later step. Generation keeps the keys and
values themselves (`labnn.xl.cache`); the loss over long streams is
`labnn.training.evaluate.stream_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from labnn.nn.attention import causal_mask
from labnn.nn.arguments import (check_bool, check_choice, check_dropout, check_eval_mode,
                                check_heads, check_int, check_sampling, check_tokens)
from labnn.nn.generation import OnToken, generate
from labnn.nn.layers import INIT_STD, evaluating, init_weights, num_params, past_the_door
from labnn.nn.positions import sinusoidal_encoding
from labnn.nn.attention_checks import check_mask, check_polarity
from labnn.xl.relative_attention import check_clamp_len, sees_later_keys
from labnn.xl.block import XLBlock
from labnn.xl.cache import XLCache, check_cache, read_one_token, read_tokens, start_cache
from labnn.xl.memory import check_mem_len, check_mems, update_memory

POSITIONS = ("relative", "absolute")


@dataclass(frozen=True)
class XLConfig:
    """Hyper-parameters of `TransformerXL`, checked here and read when the model is built:
    frozen, so that a model never runs under values it was not built for
    (`dataclasses.replace(config, ...)` makes another, for another model).

    Args:
        vocab_size: number of token ids `V`.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`, which must be even (the
            sinusoids pair a sine and a cosine per frequency).
        n_layers: number of blocks `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        mem_len: states each layer remembers (`M`, default memory length; a call may
            override it).
        clamp_len: relative distances beyond it share one encoding (None: no clamping).
        dropout: dropout rate everywhere.
        positions: `"relative"` (Transformer-XL) or `"absolute"` (sinusoids of the
            position inside the segment added to the input, as a vanilla transformer
            would, but with the memory; the paper's Table 6 tries them without memory only).
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
        """Check every field by the package's one rule for its kind (`labnn.nn.arguments`): an
        int field never accepts a bool; `d_ff` defaults to `4 * d_model`."""
        for name in ("vocab_size", "d_model", "n_heads", "n_layers"):
            check_int(name, getattr(self, name))
        check_heads(self.d_model, self.n_heads, even=True)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen: set once, here
        check_int("d_ff", self.d_ff, allow_none=True)
        check_mem_len(self.mem_len)
        check_clamp_len(self.clamp_len)
        check_dropout(self.dropout)
        check_bool("bias", self.bias)
        check_choice("positions", self.positions, POSITIONS)


class TransformerXL(nn.Module):
    """Transformer-XL language model: `logits, mems = model(tokens, mems)`.

    `mems` is a list with one `[B, M, D]` tensor per layer: the states that layer
    received for the last `M <= mem_len` positions, detached. Feed them back with the
    next segment of the same streams.

    Example:
        >>> config = XLConfig(10, d_model=16, n_heads=2, n_layers=2, mem_len=4)
        >>> model = TransformerXL(config)
        >>> x = torch.randint(10, (3, 5))
        >>> logits, mems = model(x)
        >>> logits, mems = model(x, mems)
        >>> list(logits.shape), [list(m.shape) for m in mems]
        ([3, 5, 10], [[3, 4, 16], [3, 4, 16]])
    """

    def __init__(self, config: XLConfig):
        r"""Token embeddings $E$, `n_layers` blocks, a final layer norm and an output
        head that shares the embedding matrix (weight tying):
        $\ell = E\,\mathrm{LN}(h^L)$."""
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        relative = c.positions == "relative"
        # Absolute positions: sinusoids (RMS about 0.7) would drown the tokens (std
        # 0.02); a learned scale starts them level.
        self.pos_scale = None if relative else nn.Parameter(torch.tensor(INIT_STD))
        self.blocks = nn.ModuleList([
            XLBlock(c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, bias=c.bias,
                    relative=relative, clamp_len=c.clamp_len)
            for _ in range(c.n_layers)
        ])
        self.norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters (`labnn.nn.layers.num_params`)."""
        return num_params(self)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings (+ sinusoids of the positions `0 .. T-1` inside the segment,
        times a learned scale `pos_scale`, when absolute).

        The ids are not checked here: the public calls check them once, at the door.

        Shape: `[B, T]` -> `[B, T, D]`.
        """
        x = self.tok_emb(tokens)
        if self.pos_scale is not None:
            where = torch.arange(tokens.size(1), device=tokens.device)
            x = x + self.pos_scale * sinusoidal_encoding(where, x.size(-1)).to(x.dtype)
        return self.dropout(x)

    def forward(self, tokens: torch.Tensor, mems: list[torch.Tensor] | None = None, *,
                mem_len: int | None = None, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for a segment, attending to the memory; returns the updated
        memory. The ids' range is checked here (one read back to the host; the training
        and evaluation loops, which check their corpus once, call `forward_checked_ids`).

        Args:
            tokens: the segment's token ids.
            mems: per-layer memory from the previous segment of the same streams (None:
                start afresh).
            mem_len: how many states to keep (default `config.mem_len`); evaluation may
                use more than training.
            mask: boolean, True = may attend, `[T, S]`; default `causal_mask(T, M + T)`
                (all memory + the past). A mask that lets a query see later keys scores
                them at their negative distance (see
                `RelativeMultiHeadAttention.forward`).

        Shape:
            tokens `[B, T]`, mems `L x [B, M, D]` -> logits `[B, T, V]`,
            mems `L x [B, min(M + T, mem_len), D]`.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        return self.forward_checked_ids(tokens, mems, mem_len=mem_len, mask=mask)

    def forward_checked_ids(self, tokens: torch.Tensor, mems: list[torch.Tensor] | None = None,
                            *, mem_len: int | None = None, mask: torch.Tensor | None = None
                            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """`forward` less its scan of the ids' range (a read back to the host per call), for
        ids checked where they entered (the `Trainer`'s corpus, `evaluate`, `stream_loss`):
        an id outside the vocabulary is not caught here; call the model on other ids."""
        logits, mems, _ = self._read_segment(tokens, mems, mem_len, mask, need_weights=False)
        return logits, mems

    def stream_logits(self, tokens: torch.Tensor, mems: list[torch.Tensor] | None = None, *,
                      mem_len: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One segment of a stream, `[B, T]` -> `(logits [B, T, V], mems)`: `forward` with
        the memory carried, `mem_len` states kept (default `config.mem_len`), the ids' range
        checked (one host read per call; `stream_loss` checks its corpus once and calls
        `stream_logits_checked_ids`)."""
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        return self.stream_logits_checked_ids(tokens, mems, mem_len=mem_len)

    def stream_logits_checked_ids(self, tokens: torch.Tensor, mems=None, *, mem_len=None):
        """`stream_logits` past the door (`past_the_door`), for ids checked already."""
        return past_the_door(self)(tokens, mems, mem_len=mem_len)

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor,
                       mems: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Attention weights of every layer over memory + segment, for plots: the model as
        evaluated (in eval mode for the call, every module's mode restored after).

        Shape:
            tokens `[B, T]`, mems `L x [B, M, D]` -> a list of `L` tensors
                `[B, H, T, M + T]`.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        with evaluating(self):
            return self._read_segment(tokens, mems, None, None, need_weights=True)[2]

    def _read_segment(self, tokens, mems, mem_len, mask, need_weights):
        """`forward`, with each layer's attention weights when `need_weights`.

        Each layer $l$ first records its memory for the next segment,
        `update_memory(mems[l], x, mem_len)`, from the states it receives; then attends
        from those states to its memory and itself. The ids' range is the caller's to
        check (their type, shape and device are checked here).
        """
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device, scan=False)
        mem_len = self.config.mem_len if mem_len is None else mem_len
        check_mem_len(mem_len)
        x = self.embed(tokens)
        check_mems(mems, len(self.blocks), x)
        t, s = x.size(1), x.size(1) + (0 if mems is None else mems[0].size(1))
        if mask is not None:  # decided here once, not by each layer (a host read each)
            check_mask(mask, t, s, b=x.size(0), h=self.config.n_heads, device=x.device)
        later = mask is not None and sees_later_keys(mask, t, s) and check_polarity(mask, t, s)
        mask = causal_mask(t, s, device=x.device) if mask is None else mask
        new_mems, maps = [], []
        for i, block in enumerate(self.blocks):
            mem = None if mems is None else mems[i]
            new_mems.append(update_memory(mem, x, mem_len))
            memory = block.memory_cache(mem)  # (k, v) of the memory, or None
            x, weights, _ = block(x, mask, memory, need_weights=need_weights,
                                  sees_later=later)
            maps.append(weights)
        return self.head(self.norm(x)), new_mems, maps

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, cache: XLCache | None = None, *,
             mem_len: int | None = None) -> tuple[torch.Tensor, XLCache]:
        """Read `tokens` after the cached positions; return the last token's logits and
        the new cache (`labnn.xl.cache`).

        The cache keeps each layer's keys and values of the last `mem_len` positions
        instead of the states they are projected from. With relative positions a key
        never changes once computed (no position is baked into it), so no cached key is
        projected again. Equals `model(tokens, mems, mem_len=mem_len)` call after call (in
        eval mode, which decoding needs: every module, checked here). One token per
        stream goes through `read_one_token`, the same computation in fewer operations,
        with the encodings of the distances `0 .. mem_len` projected once, when the cache
        is created; a call of several tokens (a prompt) goes through each block's
        `forward`, which projects those of its `S` distances again, in every layer. Its
        door checks the ids' range, one read back to the host per call; `generate` checks
        the prompt once and reads nothing back per token.

        Args:
            tokens: the new tokens (a whole prompt, or one token per step).
            cache: as returned by the previous step (None: start afresh).
            mem_len: positions to keep (default `config.mem_len`); fixed once the cache
                exists.

        Shape:
            tokens `[B, T]` -> logits `[B, V]`; cache keys/values
            `L x [B, H, min(S, mem_len), D_h]`.
        """
        check_eval_mode(self, "step() is for decoding and")
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        if tokens.size(1) == 0:
            raise ValueError(
                "tokens must hold at least one token per stream, got shape "
                f"{list(tokens.shape)}"
            )
        if cache is not None:
            check_cache(self, cache, tokens, mem_len)
        return self._step(tokens, cache, mem_len)

    def _step(self, tokens, cache, mem_len):
        """`step` past its door, for ids and a cache already checked: `generate` checks
        its prompt once, and the cache it passes is the one `_step` made (`start_cache`,
        then each step's own), right by construction. Nothing is checked per token, and
        nothing read back to the host."""
        x = self.embed(tokens)
        if cache is None:
            cache = start_cache(self, x, mem_len)
        if x.size(1) == 1:  # generation: the single-token path
            x, cache = read_one_token(self.blocks, x[:, 0], cache)
        else:
            x, cache = read_tokens(self.blocks, x, cache)
            x = x[:, -1]
        return self.head(self.norm(x)), cache

    @torch.inference_mode()
    def generate(self, prompt: torch.Tensor, n: int, temperature: float = 1.0,
                 top_k: int | None = None, *, mem_len: int | None = None,
                 generator: torch.Generator | None = None,
                 on_token: OnToken | None = None) -> torch.Tensor:
        """Append `n` sampled tokens to `prompt`, one token per `step`, the memory
        serving as the cache (`labnn.nn.generation.generate`).

        The prompt is read as one segment; then each new token attends to the last
        `mem_len` positions. Every module must be in eval mode (checked once, here).
        With `positions="absolute"` each new token is a segment of one, at position 0.

        Args:
            prompt, n: the token ids to continue, and how many tokens to append.
            temperature, top_k, generator: how to sample (`sample_next`).
            mem_len: positions each new token attends to (default `config.mem_len`).
            on_token: called with each new token `[B]` as it is drawn (`generate`).

        Shape:
            prompt `[B, T0]` -> `[B, T0 + n]`: the prompt, then the new tokens.
        """
        check_sampling(temperature, top_k, n)
        check_eval_mode(self, "generation")
        device = self.tok_emb.weight.device
        check_tokens(prompt, self.config.vocab_size, "prompt", device=device, min_len=1)

        def next_logits(new, seen, cache):
            return self._step(new, cache, mem_len)

        return generate(next_logits, prompt, n, temperature, top_k, generator, on_token)
