r"""What both Feedback Transformers share: their modules, decoding and sampling, and the
checks and trims of a state that both carry.

Dimension letters (the package legend): `B` batch, `T` tokens read in this call, `T0`
those of a prompt, `M` memory vectors carried in the state, `H` heads, `D` model width,
`V` vocabulary, `L` layers.

`labnn.feedback.model` (`FeedbackTransformer`, memory vectors and a key/value pair per
projection) and `labnn.feedback.kv` (`FeedbackTransformerKV`, one shared key/value stack)
are siblings above this module: each writes its own `initial_state`, `check_state` and
token loop `_forward`, and inherits the rest from `FeedbackBase`, so a call of either
model reads straight down, never through the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from labnn.feedback.layer import FeedbackLayer, LayerMix, OutputHead
from labnn.nn.arguments import check_eval_mode, check_tokens, int_error, is_int
from labnn.nn.generation import OnToken, generate
from labnn.nn.layers import init_weights, num_params, past_the_door

if TYPE_CHECKING:
    from labnn.feedback.model import FeedbackConfig


def check_offset(offset) -> None:
    """Raise a clear error unless a state's `offset` (tokens seen) is an int >= 0."""
    if not is_int(offset) or offset < 0:
        raise int_error(offset)(
            f"state.offset must be a non-negative int (tokens seen), got {offset!r}")


def recent(t: torch.Tensor, dim: int, n: int | None) -> torch.Tensor:
    """The last `n` entries of `t` along `dim` (all of them if `n` is None)."""
    return t if n is None or t.size(dim) <= n else t.narrow(dim, t.size(dim) - n, n)


class FeedbackBase(nn.Module):
    """The modules of a Feedback Transformer (their names make the `state_dict` listed in
    `labnn.feedback.kv`) and what runs the same way for both models: `step` and
    `generate`, over the model's own `_forward`.
    """

    def __init__(self, config: FeedbackConfig):
        """The embedding, the layers, the layer mix, the memory norm and the head."""
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        own_kv = not c.shared_kv
        self.layers = nn.ModuleList([
            FeedbackLayer(c.d_model, c.n_heads, c.d_ff, c.max_distance, dropout=c.dropout,
                          own_kv=own_kv)
            for _ in range(c.n_layers)
        ])
        self.mix = LayerMix(c.n_layers + 1)
        self.norm_mem = nn.LayerNorm(c.d_model)
        self.kv = nn.Linear(c.d_model, 2 * c.d_model) if c.shared_kv else None
        self.head = OutputHead(c.d_model, c.vocab_size)
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters (`labnn.nn.layers.num_params`)."""
        return num_params(self)

    def layer_weights(self) -> torch.Tensor:
        r"""The mixing weights $\mathrm{softmax}(w)$ `[L+1]` (embedding first),
        detached."""
        return self.mix.weights().detach()

    def _state_device(self, device) -> torch.device:
        """The device of a new state: the model's (`device`, when given, must name it)."""
        here = self.embed.weight.device
        there = here if device is None else torch.device(device)
        if there.type != here.type or None not in (there.index, here.index) and (
                there.index != here.index):
            raise ValueError(f"device is {there}, but the model is on {here}: a state lives "
                             "where its model does (leave device out)")
        return here

    def _recent(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """The last `attn_len` entries of `t` along `dim` (all of them if `attn_len` is
        None)."""
        return recent(t, dim, self.config.attn_len)

    def forward_checked_ids(self, tokens: torch.Tensor, state=None):
        """`forward` less its scan of the ids' range (a read back to the host, a GPU
        synchronisation per training step), for ids checked where they entered (the
        `Trainer`'s corpus, the door of `evaluate` and `stream_loss`). An id outside the
        vocabulary is not caught here: call the model itself on ids you did not check."""
        device = self.embed.weight.device
        check_tokens(tokens, self.config.vocab_size, device=device, scan=False)
        return self._forward(tokens, state)

    def stream_logits(self, tokens: torch.Tensor, state=None, *, mem_len: int | None = None):
        """One segment of a stream: `forward` with the memory carried from segment to
        segment, as training carries it. The ids' range is checked here, one read back to
        the host per call; `labnn.training.evaluate.stream_loss`, which checks its corpus
        once, calls `stream_logits_checked_ids`.

        Args:
            tokens: the segment's token ids.
            state: what the previous segment returned (None: the stream's start).
            mem_len: must be None: a feedback model reads back `config.attn_len` steps
                (all of them if None), fixed when it is built.

        Shape:
            tokens `[B, T]` -> `(logits [B, T, V], state)`.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.embed.weight.device)
        return self.stream_logits_checked_ids(tokens, state, mem_len=mem_len)

    def stream_logits_checked_ids(self, tokens: torch.Tensor, state=None, *,
                                  mem_len: int | None = None):
        """`stream_logits` less its scan of the ids' range, past the door
        (`past_the_door`), for ids checked where they entered."""
        if mem_len is not None:
            n = self.config.attn_len
            reach = f"attn_len = {n} steps" if n else "every earlier step (attn_len=None)"
            raise ValueError(f"mem_len must be None for a feedback model, got {mem_len!r}: "
                             f"it reads back {reach}, set when it is built (build one "
                             "with another attn_len to compare)")
        return past_the_door(self)(tokens, state)

    @torch.no_grad()
    def step(self, token: torch.Tensor, state=None):
        """Decode one token: the state (memory keys and values) is the cache. Every module
        must be in eval mode, and no graph is built (to train, call
        `model(tokens, state)`). The door checks the id's range, one read back to the
        host per call; `generate` checks its prompt once and reads nothing back per token.

        Args:
            token: one token id per stream.
            state: the state returned by the previous call (None = start with no memory).

        Shape:
            token `[B]` -> logits `[B, V]`.

        Returns:
            `(logits, state)`: the next token's logits, and the state holding this token's
            memory too.
        """
        check_eval_mode(self, "step() is for decoding and")
        device = self.embed.weight.device
        check_tokens(token, self.config.vocab_size, "token", dims=1, device=device)
        logits, state = self._forward(token[:, None], state)
        return logits[:, 0], state

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, n: int, temperature: float = 1.0,
                 top_k: int | None = None, *, use_cache: bool = True,
                 generator: torch.Generator | None = None,
                 on_token: OnToken | None = None) -> torch.Tensor:
        """Append `n` sampled tokens to `prompt` (`labnn.nn.generation.generate`); with
        `use_cache` a new token costs one step, else the whole sequence is recomputed.
        Every module must be in eval mode (checked once, here).

        Args:
            prompt: the token ids to continue, at least one per stream.
            n: how many tokens to append.
            temperature, top_k: how to sample (`labnn.nn.generation.sample_next`; a
                temperature of 0 is greedy).
            use_cache: carry the state from token to token (False: recompute all).
            generator: the random numbers of the sampling (None: torch's global ones).
            on_token: called with each new token `[B]` as it is drawn (`generate`).

        Shape:
            prompt `[B, T0]` (T0 >= 1) -> `[B, T0 + n]`.

        Returns:
            The prompt followed by the `n` new tokens.
        """
        check_eval_mode(self, "generation")
        device = self.embed.weight.device
        check_tokens(prompt, self.config.vocab_size, "prompt", device=device, min_len=1)
        if not isinstance(use_cache, bool):  # as TransformerLM.generate says it
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")

        def next_logits(new, seen, state):
            """The last logits: from the new tokens and the cached state, or from all."""
            logits, state = self._forward(new, state) if use_cache else self._forward(
                seen, None)
            return logits[:, -1], state

        return generate(next_logits, prompt, n, temperature, top_k, generator, on_token)
