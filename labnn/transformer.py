r"""A causal (GPT-style) transformer language model: pre-norm blocks and a KV cache.

Dimension letters (the package legend, `labnn`): `B` batch, `T` tokens read in this
call, `M` tokens already in the cache, `S = M + T` keys, `H` heads, `D` model width,
`D_h` head width, `V` vocabulary, `L` layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from labnn.nn.attention import causal_mask
from labnn.nn.arguments import (check_bool, check_choice, check_dropout, check_eval_mode,
                                check_heads, check_int, check_tokens)
from labnn.nn.generation import OnToken, generate
from labnn.nn.block import TransformerBlock
from labnn.nn.kv_cache import KVBuffer, KVCache, check_layer_caches
from labnn.nn.layers import evaluating, init_weights, num_params
from labnn.nn.positions import sinusoidal_encoding

POSITIONS = ("learned", "sinusoidal", "none")


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of `TransformerLM`, checked here and read when the model is built:
    frozen, so that a model never runs under values it was not built for
    (`dataclasses.replace(config, ...)` makes another, for another model).

    Args:
        vocab_size: number of token ids `V`.
        seq_len: longest context; the size of the learned position table.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`.
        n_layers: number of blocks `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        dropout: dropout rate everywhere.
        positions: `"learned"` (a table of `seq_len` vectors), `"sinusoidal"` (no length
            limit) or `"none"`.
        bias: biases in linear layers and layer norms.
        attn_len: each token attends to itself and at most this many previous tokens (a
            banded causal mask); None = all previous tokens.
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
        """Check every field (one rule per kind, `labnn.nn.arguments`) and fill in `d_ff`."""
        for field in ("vocab_size", "seq_len", "d_model", "n_heads", "n_layers"):
            check_int(field, getattr(self, field))
        check_choice("positions", self.positions, POSITIONS)
        # sinusoids pair a sine and a cosine per frequency
        check_heads(self.d_model, self.n_heads, even=self.positions == "sinusoidal")
        # the feed-forward width defaults to 4 D, as in GPT-2
        check_int("d_ff", self.d_ff, allow_none=True)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen: set once, here
        check_dropout(self.dropout)
        check_int("attn_len", self.attn_len, allow_none=True)
        check_bool("bias", self.bias)


class TransformerLM(nn.Module):
    r"""Causal language model: embeddings, `L` pre-norm blocks, a final norm, a tied head.

    $$p(x_{t+1} \mid x_{\le t}) = \mathrm{softmax}\big(\mathrm{LN}(h^L_t)\, E^\top\big)$$

    where $h^L_t$ is the last block's output at position $t$ and $E$ the token embedding
    (the output head shares its weights). `logits, cache = model(tokens)` trains on whole
    sequences; with `use_cache=True` it also returns each layer's keys and values, and
    `model(next_tokens, cache, use_cache=True)` continues from them.
    """

    def __init__(self, config: TransformerConfig):
        """Build the layers of `config` and initialise them as GPT-2 does
        (`labnn.nn.layers.init_weights`). The output head is the token embedding itself
        (weight tying): one matrix $E$ `[V, D]` both reads and writes tokens."""
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        learned = c.positions == "learned"
        self.pos_emb = nn.Embedding(c.seq_len, c.d_model) if learned else None
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            [TransformerBlock(c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, bias=c.bias)
             for _ in range(c.n_layers)])
        self.norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters (`labnn.nn.layers.num_params`)."""
        return num_params(self)

    def embed(self, tokens: torch.Tensor, offset: int | torch.Tensor) -> torch.Tensor:
        r"""Token embeddings plus the positions `offset .. offset + T - 1`.

        $$x_t = E[\mathrm{token}_t] + P[\mathrm{offset} + t]$$

        with $P$ the learned table, the sinusoids of `labnn.nn.positions`, or nothing.
        The ids are not checked here: the public calls check them once, at the door.
        `offset` is an int, or a 0-d tensor in a compiled step (`labnn.compiled`), whose
        caller has checked the length at its door (no value is read back here).

        Shape:
            `[B, T]` -> `[B, T, D]`.
        """
        t = tokens.size(1)
        x = self.tok_emb(tokens)
        if self.config.positions != "none":
            pos = offset + torch.arange(t, device=tokens.device)
            if self.pos_emb is None:
                x = x + sinusoidal_encoding(pos, self.config.d_model).to(x.dtype)
                return self.dropout(x)
            if isinstance(offset, int) and offset + t > self.config.seq_len:
                raise ValueError(
                    f"sequence of {offset + t} tokens (cache {offset} + tokens {t}) is "
                    f"longer than seq_len={self.config.seq_len}, the size of the learned "
                    "position table")
            x = x + self.pos_emb(pos)
        return self.dropout(x)

    def forward(self, tokens: torch.Tensor, cache: list[KVCache] | None = None, *,
                use_cache: bool = False) -> tuple[torch.Tensor, list[KVCache] | None]:
        """Next-token logits for every position. The ids' range is checked here (one read
        back to the host; the training and evaluation loops, which check their corpus
        once, call `forward_checked_ids`).

        Args:
            tokens: token ids.
            cache: per-layer `(k, v)` of earlier tokens, as returned by a previous call
                with `use_cache=True`; the tokens continue it, and the updated cache is
                returned whatever `use_cache` says.
            use_cache: return the updated cache (otherwise None, unless a `cache` was
                passed in).

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`; cache entries `[B, H, S, D_h]`.
        """
        return self._checked(tokens, cache, use_cache, scan=True)

    def forward_checked_ids(self, tokens: torch.Tensor, cache: list[KVCache] | None = None,
                            *, use_cache: bool = False
                            ) -> tuple[torch.Tensor, list[KVCache] | None]:
        """`forward` less its scan of the ids' range (a read back to the host, a GPU
        synchronisation per training step), for ids checked where they entered (the
        `Trainer`'s corpus, the door of `evaluate` and `stream_loss`). An id outside the
        vocabulary is not caught here: call the model itself on ids you did not check."""
        return self._checked(tokens, cache, use_cache, scan=False)

    def _checked(self, tokens, cache, use_cache, scan):
        """The door of `forward` (`scan`: the ids' range too) and of `forward_checked_ids`:
        each argument checked once, then `_forward`."""
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device,
                     scan=scan)
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")
        m = 0 if cache is None else self.check_cache(cache, tokens)
        return self._forward(tokens, cache, use_cache, m)

    def _forward(self, tokens, cache, use_cache, m=0, offset=None):
        """`forward` past its door: the ids and the `m` cached tokens' keys and values
        already checked (by `forward`; `generate` checks its prompt once, and the tokens it
        samples and the cache it builds are right by construction), so nothing is checked
        per token and no value is read back. `offset`, the position of the first token,
        is `m` unless given (`generate` drops keys no token will read again)."""
        x = self.embed(tokens, m if offset is None else offset)
        # a sequence from its start, no band: the fused kernel's own causal flag
        causal = cache is None and self.config.attn_len is None
        mask = None if causal else self.attention_mask(tokens.size(1), m, tokens.device)
        # each block reads its cached keys and returns them with the new tokens' appended
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, _, layer_cache = block(x, mask, None if cache is None else cache[i],
                                      causal=causal)
            new_cache.append(layer_cache)
        keep = use_cache or cache is not None
        return self.head(self.norm(x)), (new_cache if keep else None)

    def check_cache(self, cache: list[KVCache], tokens: torch.Tensor) -> int:
        """Raise a clear error unless `cache` could come from this model for `tokens`
        (`labnn.nn.kv_cache.check_layer_caches`). `tokens` is checked by the caller
        (`forward`, with `labnn.nn.arguments.check_tokens`), not again here.

        Shape:
            tokens `[B, T]`, cache entries `[B, H, M, D_h]`.

        Returns:
            The number `M` of cached tokens.
        """
        attn, weight = self.blocks[0].attn, self.tok_emb.weight
        return check_layer_caches(cache, len(self.blocks), (tokens.size(0), attn.n_heads,
                                                            attn.d_head), weight)

    def attention_mask(self, t: int, offset: int,
                       device: torch.device) -> torch.Tensor | None:
        r"""Causal mask (True = may attend) of `t` new tokens after `offset` cached ones.

        Query $i$ sits at position $\mathrm{offset} + i$ and may attend key $j$ iff

        $$\mathrm{offset} + i - \mathrm{attn\_len} \le j \le \mathrm{offset} + i,$$

        the lower bound only when `attn_len` is set (a band).

        Shape:
            -> `[T, S]` with `S = offset + T`, or None when nothing needs masking (one new
            token after at most `attn_len` cached ones).
        """
        band = self.config.attn_len
        if t == 1 and (band is None or offset <= band):
            return None
        mask = causal_mask(t, offset + t, device=device)
        return mask if band is None else mask.triu(offset - band)

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Attention weights of every layer for one causal pass, for plots: the model as
        evaluated (in eval mode for the call, every module's mode restored after).

        Shape:
            tokens `[B, T]` -> a list of `L` tensors `[B, H, T, T]`.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.tok_emb.weight.device)
        mask = self.attention_mask(tokens.size(1), 0, tokens.device)
        maps = []
        with evaluating(self):
            x = self.embed(tokens, 0)
            for block in self.blocks:
                x, weights, _ = block(x, mask, need_weights=True)
                maps.append(weights)
        return maps

    @torch.inference_mode()
    def generate(self, prompt: torch.Tensor, n: int, temperature: float = 1.0,
                 top_k: int | None = None, *, use_cache: bool = True,
                 generator: torch.Generator | None = None,
                 on_token: OnToken | None = None) -> torch.Tensor:
        """Append `n` sampled tokens to `prompt` (the loop: `labnn.nn.generation.generate`).

        With `use_cache` each step feeds only the newest token and reuses the earlier
        keys and values, appended into a `KVBuffer` per layer (no copy of the cache per
        token); with `attn_len` = W only the last W are kept, all a new token reads, so
        the memory stays bounded. Without `use_cache` each step recomputes the whole
        (last `seq_len` tokens of the) context. Once a learned-position model's context
        is full the window must slide, which absolute positions cannot do
        incrementally, so both paths then recompute the last `seq_len` tokens.

        Args:
            prompt, n: the token ids to continue, and how many tokens to append.
            temperature, top_k, generator: how to sample (`sample_next`).
            use_cache: reuse the keys and values (False: recompute all, to compare).
            on_token: called with each new token `[B]` as it is drawn (`generate`).

        Shape:
            prompt `[B, T]` -> `[B, T + n]`: the prompt, then the new tokens.
        """
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")
        check_eval_mode(self, "generation")
        check_tokens(prompt, self.config.vocab_size, "prompt",
                     device=self.tok_emb.weight.device, min_len=1)
        limit = self.config.seq_len if self.pos_emb is not None else None
        band = self.config.attn_len
        keep = slice(None) if band is None else slice(-band, None)
        room = n if band is None else band + 1

        # the logits of the token after `seen`: with the cache only the `new` tokens are
        # read, but a full learned-position context again from its last `seq_len` tokens
        def next_logits(new, seen, cache):
            if not use_cache or (limit is not None and seen.size(1) >= limit):
                context = seen if limit is None else seen[:, -limit:]
                return self._forward(context, None, False)[0][:, -1], None
            if cache is None:  # the prompt: the keys and values it leaves, into buffers
                logits, kv = self._forward(new, None, True)
                cache = [KVBuffer.of(k[:, :, keep], v[:, :, keep], room) for k, v in kv]
            else:
                at = seen.size(1) - new.size(1)
                logits, cache = self._forward(new, cache, True, len(cache[0]), offset=at)
            if band is not None:  # no later token reads further back than `band` keys
                cache = [buffer.last(band) for buffer in cache]
            return logits[:, -1], cache

        return generate(next_logits, prompt, n, temperature, top_k, generator, on_token)
