r"""The Feedback Transformer (Fan et al. 2020, "Addressing Some Limitations of
Transformers with Feedback Memory").

Dimension letters (the package legend): `B` batch, `T` tokens read in this call, `M`
memory vectors carried in the state, `S` keys a step attends to (at most `W =
attn_len`), `H` heads, `D` model width, `D_h = D / H` head width, `V` vocabulary, `L`
layers.

A standard transformer lets layer `l` at step `t` see only layer `l - 1` of the past.
Here every step writes ONE memory vector $m_t$, a learned mix of its embedding $x_t^0$
and all its layer outputs $x_t^1, \dots, x_t^L$ (`labnn.feedback.layer.LayerMix`), and
every layer of every later step attends to those memory vectors:
$$z_t^l = \mathrm{Attn}\big(x_t^{l-1},\ [m_{t-S}, \dots, m_{t-1}]\big).$$
As in the paper's code (facebookresearch/transformer-sequential, `models/feedback.py`),
step `t` attends to the memory of *previous* steps only (its own $m_t$ does not exist until
its top layer is done). The first step of a sequence without memory gets a zero attention
output here; the paper's code instead fills its memory with `attn_lim` zero vectors before
the first step (`init_hid_cache`) and attends to them. Scores carry a learned per-head bias
for the distance `t - j`, and `attn_len` keeps only the most recent memory vectors. Steps
run one after the other: the price of letting the bottom layer read the top of the past.

The pieces of one step (`LayerMix`, `RelativeBias`, `feedback_attention`, `FeedbackLayer`,
`OutputHead`) and the step itself (`feedback_step`, `memory_keys_values`) live in
`labnn.feedback.layer`; the modules, `step` and `generate` in `labnn.feedback.base`; the
`state_dict` layout is listed in `labnn.feedback.kv`, whose model loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# check_offset: also imported from here by labnn.compiled.rings
from labnn.feedback.base import FeedbackBase, check_offset  # noqa: F401
from labnn.feedback.layer import feedback_step, memory_keys_values
from labnn.nn.arguments import (check_bool, check_dropout, check_heads, check_int, check_tokens,
                                state_dtype_hint, state_dtypes)


@dataclass(frozen=True)
class FeedbackConfig:
    """Hyper-parameters of `FeedbackTransformer`, checked here and read when the model is built:
    frozen, so that a model never runs under values it was not built for
    (`dataclasses.replace(config, ...)` makes another, for another model).

    Args:
        vocab_size: number of token ids `V`.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`.
        n_layers: number of layers `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        attn_len: how many of the most recent memory vectors a step attends to; None =
            all of them (the state then grows without bound).
        max_distance: distances `t - j >= max_distance` share one learned relative bias.
        block_len: within one call, detach the memory every `block_len` tokens
            (truncated backpropagation); None = one block per call. The memory is always
            detached between calls.
        dropout: dropout rate on embeddings, attention weights and residual branches.
        shared_kv: one key/value projection of the memory shared by all layers (instead
            of one per layer).
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None
    attn_len: int | None = None
    max_distance: int = 64
    block_len: int | None = None
    dropout: float = 0.0
    shared_kv: bool = False

    def __post_init__(self) -> None:
        """Check every field with `labnn.nn.arguments` (one rule per kind of field)."""
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_distance"):
            check_int(name, getattr(self, name))
        for name in ("attn_len", "block_len"):
            check_int(name, getattr(self, name), allow_none=True)
        check_heads(self.d_model, self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen: set once, here
        check_int("d_ff", self.d_ff)
        check_dropout(self.dropout)
        check_bool("shared_kv", self.shared_kv)


@dataclass
class FeedbackState:
    """What a `FeedbackTransformer` carries from one call to the next (detached).

    Attributes:
        memory: the last memory vectors `[B, M, D]` (at most `attn_len` of them).
        keys: the keys of those vectors, one `[B, H, M, D_h]` per key/value projection
            (1 if `shared_kv`, else `L`), so a step projects only its own new vector.
        values: the matching values, same shapes.
        offset: how many tokens the state has seen.
    """

    memory: torch.Tensor
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    offset: int = 0

    def nbytes(self) -> int:
        """Bytes held by the cache (memory, keys and values)."""
        tensors = (self.memory, *self.keys, *self.values)
        return sum(t.numel() * t.element_size() for t in tensors)


class FeedbackTransformer(FeedbackBase):
    """Feedback Transformer LM: every layer of step `t` attends to the memory vectors of
    earlier steps.

    `logits, state = model(tokens, state)` runs the token loop over `[B, T]` (training
    and evaluation); `logits, state = model.step(token, state)` decodes one token with
    the state as the cache. The modules, `step` and `generate` come from
    `labnn.feedback.base.FeedbackBase`.
    """

    def project_memory(self, memory: torch.Tensor) -> tuple[tuple, tuple]:
        r"""Keys and values of memory vectors (`memory_keys_values`), one pair per
        projection (1 if `shared_kv`, else `L`).

        Shape:
            memory `[B, M, D]` -> keys and values, tuples of `[B, H, M, D_h]`.
        """
        shared = self.kv is not None
        projections = [self.kv] if shared else [layer.attn.kv for layer in self.layers]
        pairs = [memory_keys_values(memory, self.norm_mem, p, self.config.n_heads)
                 for p in projections]
        return tuple(k for k, _ in pairs), tuple(v for _, v in pairs)

    def initial_state(self, batch_size: int, device=None) -> FeedbackState:
        """An empty state (no memory) for `batch_size` sequences, on the model's device
        (`device`, when given, must name it)."""
        check_int("batch_size", batch_size, low=0)
        weight = self.embed.weight
        memory = weight.new_zeros(batch_size, 0, self.config.d_model,
                                  device=self._state_device(device))
        keys, values = self.project_memory(memory)
        return FeedbackState(memory, keys, values, 0)

    def forward(self, tokens: torch.Tensor, state: FeedbackState | None = None
                ) -> tuple[torch.Tensor, FeedbackState]:
        """Next-token logits for every position, one token after the other.

        Each token runs `_token` (every layer, then its memory vector $m_t$), whose key
        and value are appended to what later tokens read. The ids' range is checked here
        (one read back to the host; the training and evaluation loops, which check their
        corpus once, call `forward_checked_ids`).

        Args:
            tokens: token ids.
            state: the state returned by the previous call (None = start with no memory);
                of one holding more than `attn_len` memory vectors, the last `attn_len`.

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`.

        Returns:
            `(logits, state)`; the state holds the last `attn_len` memory vectors (all if
            None), detached. Within the call, the memory is also detached every
            `config.block_len` tokens.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.embed.weight.device)
        return self._forward(tokens, state)  # type, shape and range checked once, above

    def _forward(self, tokens: torch.Tensor, state: FeedbackState | None):
        """`forward` for ids already checked (`step` and `generate` check theirs once):
        no pass over the ids, so no host synchronisation per generated token."""
        b = tokens.size(0)
        state = self.initial_state(b, tokens.device) if state is None else state
        self.check_state(state, b)
        x = self.dropout(self.embed(tokens))
        # a longer state (from a model with a wider window) is read through this one's
        memory = [self._recent(state.memory, 1)]
        keys, values = ([self._recent(t, 2) for t in ts] for ts in (state.keys, state.values))
        block_len, tops = self.config.block_len, []
        for t in range(tokens.size(1)):
            if block_len is not None and t and t % block_len == 0:  # truncated backprop
                memory = [torch.cat(memory, 1).detach()]
                keys, values = _detach(keys), _detach(values)
            top, m = self._token(x[:, t], keys, values)
            tops.append(top)
            memory.append(m[:, None])
            new_keys, new_values = self.project_memory(m[:, None])
            keys = [self._recent(torch.cat(kv, 2), 2) for kv in zip(keys, new_keys)]
            values = [self._recent(torch.cat(kv, 2), 2) for kv in zip(values, new_values)]
        logits = self.head(torch.stack(tops, 1) if tops else x)
        memory = self._recent(torch.cat(memory, 1), 1).detach()
        offset = state.offset + tokens.size(1)
        return logits, FeedbackState(memory, _detach(keys), _detach(values), offset)

    def _token(self, x: torch.Tensor, keys: list, values: list):
        r"""All layers for one token, then its memory vector $m_t$ (`feedback_step`).

        Shape:
            x `[B, D]` -> top output `[B, D]`, memory vector `[B, D]`.
        """
        n_layers = len(self.layers)
        if self.kv is not None:  # one shared pair, read by every layer
            keys, values = keys * n_layers, values * n_layers
        return feedback_step(self.layers, self.mix, x, keys, values)

    def check_state(self, state: FeedbackState, batch_size: int) -> None:
        """Raise a clear error unless `state` could come from this model for `batch_size`
        sequences."""
        if not isinstance(state, FeedbackState):
            raise TypeError("state must be a FeedbackState (from this model's forward or "
                            f"step), got {type(state).__name__}")
        c, n_proj = self.config, 1 if self.kv is not None else self.config.n_layers
        check_offset(state.offset)
        w, memory = self.embed.weight, state.memory
        dtypes = state_dtypes(w)  # under torch.autocast, also autocast's
        for t in (memory, *state.keys, *state.values):
            ok = isinstance(t, torch.Tensor)
            if not ok or t.dtype not in dtypes or t.device != w.device:
                got = f"{t.dtype} on {t.device}" if ok else type(t).__name__
                hint = state_dtype_hint(t.dtype, w) if ok else ""
                raise ValueError(f"state holds {got}, but the model is {w.dtype} on "
                                 f"{w.device}{hint}")
        if memory.dim() != 3 or memory.size(0) != batch_size:
            raise ValueError(f"state has memory of shape {list(memory.shape)}, expected "
                             f"batch size {batch_size} (the tokens' batch size)")
        want = (batch_size, c.n_heads, memory.size(1), c.d_model // c.n_heads)
        kvs = (*state.keys, *state.values)
        if (memory.size(2) != c.d_model or len(state.keys) != n_proj
                or len(kvs) != 2 * n_proj or any(tuple(t.shape) != want for t in kvs)):
            shapes = [list(k.shape) for k in state.keys][:1]
            raise ValueError(
                f"state does not fit this model: memory {list(memory.shape)} with "
                f"{len(state.keys)} key projection(s) of shape {shapes}, expected "
                f"d_model={c.d_model} and {n_proj} projection(s) of shape {list(want)} "
                "(a state from another model?)"
            )


def _detach(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor detached: what a later block reads, without the graph behind it."""
    return [t.detach() for t in tensors]
