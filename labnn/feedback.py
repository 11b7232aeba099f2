r"""The Feedback Transformer (Fan et al. 2020, "Addressing Some Limitations of Transformers with Feedback Memory").

Dimension letters: `B` batch, `T` new tokens, `M` memory vectors carried in the state, `S` keys a step
attends to (at most `attn_len`), `H` heads, `D` model width, `D_h = D / H` head width, `V` vocabulary,
`L` layers.

A standard transformer lets layer `l` at step `t` see only layer `l - 1` of the past. Here every step
writes ONE memory vector, a learned mix of its embedding and all its layer outputs,
$$m_t = \sum_{l=0}^{L} \mathrm{softmax}(w)_l\, x_t^l ,$$
and every layer of every later step attends to those memory vectors:
$$z_t^l = \mathrm{Attn}\big(x_t^{l-1},\ [m_{t-S}, \dots, m_{t-1}]\big).$$
As in the paper's equation, step `t` attends to the memory of *previous* steps only (its own `m_t` does
not exist until its top layer is done); the first step of a sequence without memory gets a zero attention
output. Scores carry a learned per-head bias for the distance `t - j` (distances `>= max_distance` share
the last bias), and `attn_len` keeps only the most recent memory vectors. Steps run one after the other:
the price of letting the bottom layer read the top of the past.

Reusable pieces (imported by `labnn.feedback_kv`, never copied):

* `LayerMix(n_inputs)`: `.logits [L+1]`; `mix(xs [L+1, B, D]) -> [B, D]`; `.weights()` = softmax.
* `RelativeBias(n_heads, max_distance)`: `.bias [H, max_distance]`; `rel(s) -> [H, S]`, oldest key first.
* `feedback_attention(q, k, v, bias, dropout_p, training)`: one query per head over `S` keys.
* `FeedbackLayer(d_model, n_heads, d_ff, max_distance, dropout, own_kv)`: `layer(x [B, D], k, v)`, k/v
  `[B, H, S, D_h]`; `layer.attn.kv` (Linear D->2D, keys then values) exists only when `own_kv`.
* `OutputHead(d_model, vocab_size)`: `head(x [..., D]) -> [..., V]` (final norm + linear).
* `split_kv(kv [B, S, 2D], n_heads) -> (k, v)` each `[B, H, S, D_h]`.

state_dict of `FeedbackTransformer(shared_kv=True)` (the layout `FeedbackTransformerKV` must load):

    embed.weight [V, D]    mix.logits [L+1]    norm_mem.{weight,bias} [D]
    kv.{weight [2D, D], bias [2D]}    ONE projection of norm_mem(m_t):
                                      keys = first D outputs, values = last D
    layers.{i}.norm_attn.{weight,bias}
    layers.{i}.attn.q.{weight,bias}    layers.{i}.attn.out_proj.{weight,bias}
    layers.{i}.attn.rel.bias [H, max_distance]
    layers.{i}.norm_ff.{weight,bias}
    layers.{i}.ff.up.{weight,bias}    layers.{i}.ff.down.{weight,bias}
    head.norm.{weight,bias}    head.proj.weight [V, D] (no bias, not tied)

With `shared_kv=False` there is no top-level `kv`; each `layers.{i}.attn.kv` projects `norm_mem(m_t)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .generation import check_sampling, sample_next
from .transformer import FeedForward, check_dropout, check_tokens, init_weights


@dataclass
class FeedbackConfig:
    """Hyper-parameters of `FeedbackTransformer`.

    Args:
        vocab_size: number of token ids `V`.
        d_model: model width `D`.
        n_heads: attention heads; must divide `d_model`.
        n_layers: number of layers `L`.
        d_ff: feed-forward width (default `4 * d_model`).
        attn_len: how many of the most recent memory vectors a step attends to; None = all of them (the
            state then grows without bound).
        max_distance: distances `t - j >= max_distance` share one learned relative bias.
        block_len: within one call, detach the memory every `block_len` tokens (truncated backpropagation);
            None = one block per call. The memory is always detached between calls.
        dropout: dropout rate on embeddings, attention weights and residual branches.
        shared_kv: one key/value projection of the memory shared by all layers (instead of one per layer).
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
        for field in ("vocab_size", "d_model", "n_heads", "n_layers", "max_distance"):
            _check_positive(field, getattr(self, field))
        for field in ("attn_len", "block_len"):
            if getattr(self, field) is not None:
                _check_positive(field, getattr(self, field), " or None")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        _check_positive("d_ff", self.d_ff)
        check_dropout(self.dropout)
        if not isinstance(self.shared_kv, bool):
            raise ValueError(f"shared_kv must be True or False, got {self.shared_kv!r}")


def _check_positive(field: str, value, extra: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{field} must be a positive int{extra}, got {value!r}")


@dataclass
class FeedbackState:
    """What a `FeedbackTransformer` carries from one call to the next (detached).

    Attributes:
        memory: the last memory vectors `[B, M, D]` (at most `attn_len` of them).
        keys: the keys of those vectors, one `[B, H, M, D_h]` per key/value projection (1 if `shared_kv`,
            else `L`), so a step projects only its own new memory vector.
        values: the matching values, same shapes.
        offset: how many tokens the state has seen.
    """

    memory: torch.Tensor
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    offset: int = 0

    def nbytes(self) -> int:
        """Bytes held by the cache (memory, keys and values)."""
        return sum(t.numel() * t.element_size() for t in (self.memory, *self.keys, *self.values))


class LayerMix(nn.Module):
    r"""Softmax-weighted sum of the embedding and every layer's output: $m = \sum_l \mathrm{softmax}(w)_l\, x^l$."""

    def __init__(self, n_inputs: int):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(n_inputs))

    def weights(self) -> torch.Tensor:
        """The mixing weights `[L+1]` (they sum to one)."""
        return self.logits.softmax(dim=0)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        """Shape: `[L+1, B, D]` -> `[B, D]`."""
        return torch.einsum("l,lbd->bd", self.weights(), xs)


class RelativeBias(nn.Module):
    """A learned score bias per head and distance; distances `>= max_distance` share the last entry."""

    def __init__(self, n_heads: int, max_distance: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_heads, max_distance))

    def forward(self, s: int) -> torch.Tensor:
        """Bias for `s` keys ordered oldest first: key `j` sits at distance `s - j` (1 = previous step).

        Returns:
            `[H, S]`.
        """
        return self.lookup(self.bias, s)

    @staticmethod
    def lookup(table: torch.Tensor, s: int) -> torch.Tensor:
        """`forward` for any table of biases by distance, e.g. every layer's stacked: `[..., max_distance]` ->
        `[..., S]`."""
        distance = torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(-1))
        return table[..., distance - 1]


def feedback_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    dropout_p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    r"""One query per head attends over `S` memory keys with a relative bias.

    $$z = \mathrm{softmax}\!\left(\frac{q K^\top}{\sqrt{d_h}} + b\right) V$$
    Every key is in the past, so there is no mask; with `S = 0` the output is zero.

    Shape:
        q `[B, H, D_h]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, H, D_h]`.
    """
    if k.size(2) == 0:
        return torch.zeros_like(q)
    # batched matmuls rather than einsum: this runs T x L times per sequence, where dispatch cost shows
    scores = (q.unsqueeze(2) @ k.transpose(-1, -2)).squeeze(2) / math.sqrt(q.size(-1)) + bias  # [B, H, S]
    weights = scores.softmax(dim=-1)
    if training and dropout_p > 0:
        weights = F.dropout(weights, dropout_p, training)
    return (weights.unsqueeze(2) @ v).squeeze(2)


def split_kv(kv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a projection `[B, S, 2D]` (keys first) into keys and values `[B, H, S, D_h]`."""
    b, s, two_d = kv.shape
    k, v = kv.view(b, s, 2, n_heads, two_d // (2 * n_heads)).permute(2, 0, 3, 1, 4)
    return k, v


class FeedbackAttention(nn.Module):
    """Query projection, relative-bias attention over memory keys/values, output projection."""

    def __init__(self, d_model: int, n_heads: int, max_distance: int, dropout: float = 0.0, own_kv: bool = True):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model) if own_kv else None
        self.rel = RelativeBias(n_heads, max_distance)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Shape: x `[B, D]`, k and v `[B, H, S, D_h]` -> `[B, D]`."""
        q = self.q(x).view(x.size(0), self.n_heads, x.size(1) // self.n_heads)
        z = feedback_attention(q, k, v, self.rel(k.size(2)), self.dropout, self.training)
        return self.out_proj(z.flatten(1))


class FeedbackLayer(nn.Module):
    r"""Pre-norm layer for one step over memory keys/values.

    $$x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x), K, V), \qquad x \leftarrow x + \mathrm{FF}(\mathrm{LN}(x))$$
    """

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, max_distance: int, dropout: float = 0.0, own_kv: bool = True
    ):
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = FeedbackAttention(d_model, n_heads, max_distance, dropout, own_kv)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Shape: x `[B, D]`, k and v `[B, H, S, D_h]` -> `[B, D]`."""
        x = x + self.dropout(self.attn(self.norm_attn(x), k, v))
        return x + self.ff(self.norm_ff(x))


class OutputHead(nn.Module):
    """Final layer norm and projection to the vocabulary. Shape: `[..., D]` -> `[..., V]`."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


class FeedbackTransformer(nn.Module):
    """Feedback Transformer LM: every layer of step `t` attends to the memory vectors of earlier steps.

    `logits, state = model(tokens, state)` runs the token loop over `[B, T]` (training and evaluation);
    `logits, state = model.step(token, state)` decodes one token with the state as the cache.
    """

    def __init__(self, config: FeedbackConfig):
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        own_kv = not c.shared_kv
        self.layers = nn.ModuleList(
            [
                FeedbackLayer(c.d_model, c.n_heads, c.d_ff, c.max_distance, c.dropout, own_kv)
                for _ in range(c.n_layers)
            ]
        )
        self.mix = LayerMix(c.n_layers + 1)
        self.norm_mem = nn.LayerNorm(c.d_model)
        self.kv = nn.Linear(c.d_model, 2 * c.d_model) if c.shared_kv else None
        self.head = OutputHead(c.d_model, c.vocab_size)
        self.apply(init_weights)

    def num_params(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def layer_weights(self) -> torch.Tensor:
        """softmax of the learned layer weights `[L+1]` (embedding first; they sum to one), detached."""
        return self.mix.weights().detach()

    def project_memory(self, memory: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Keys and values of memory vectors, one pair per projection (1 if `shared_kv`, else `L`).

        Shape:
            memory `[B, M, D]` -> keys and values, tuples of `[B, H, M, D_h]`.
        """
        normed = self.norm_mem(memory)
        projections = [self.kv] if self.kv is not None else [layer.attn.kv for layer in self.layers]
        pairs = [split_kv(p(normed), self.config.n_heads) for p in projections]
        return tuple(k for k, _ in pairs), tuple(v for _, v in pairs)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> FeedbackState:
        """An empty state (no memory) for `batch_size` sequences."""
        memory = torch.zeros(batch_size, 0, self.config.d_model, device=device, dtype=self.embed.weight.dtype)
        keys, values = self.project_memory(memory)
        return FeedbackState(memory, keys, values, 0)

    def forward(self, tokens: torch.Tensor, state: FeedbackState | None = None) -> tuple[torch.Tensor, FeedbackState]:
        """Next-token logits for every position, one step after the other.

        Args:
            tokens: token ids.
            state: the state returned by the previous call (None = start with no memory).

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`.

        Returns:
            `(logits, state)`; the state holds the last `attn_len` memory vectors (all if None), detached.
            Within the call, the memory is also detached every `config.block_len` tokens.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.embed.weight.device)
        state = self.initial_state(tokens.size(0), tokens.device) if state is None else state
        self.check_state(state, tokens.size(0))
        x = self.dropout(self.embed(tokens))
        memory, keys, values = [state.memory], list(state.keys), list(state.values)
        block_len, tops = self.config.block_len, []
        for t in range(tokens.size(1)):
            if block_len is not None and t and t % block_len == 0:  # truncated backpropagation
                memory, keys, values = [torch.cat(memory, 1).detach()], _detach(keys), _detach(values)
            top, m = self._step(x[:, t], keys, values)
            tops.append(top)
            memory.append(m[:, None])
            new_keys, new_values = self.project_memory(m[:, None])
            keys = [self._recent(torch.cat(kv, 2), 2) for kv in zip(keys, new_keys)]
            values = [self._recent(torch.cat(kv, 2), 2) for kv in zip(values, new_values)]
        logits = self.head(torch.stack(tops, 1) if tops else x)
        memory = self._recent(torch.cat(memory, 1), 1).detach()
        return logits, FeedbackState(memory, _detach(keys), _detach(values), state.offset + tokens.size(1))

    def _step(
        self, x: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """All layers for one token. Shape: x `[B, D]` -> top output `[B, D]`, memory vector `[B, D]`."""
        xs = [x]
        for i, layer in enumerate(self.layers):
            j = 0 if self.kv is not None else i
            xs.append(layer(xs[-1], keys[j], values[j]))
        return xs[-1], self.mix(torch.stack(xs))

    def _recent(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """The last `attn_len` entries of `t` along `dim` (all of them if `attn_len` is None)."""
        n = self.config.attn_len
        return t if n is None or t.size(dim) <= n else t.narrow(dim, t.size(dim) - n, n)

    def check_state(self, state: FeedbackState, batch_size: int) -> None:
        """Raise a clear error unless `state` could come from this model for `batch_size` sequences."""
        if not isinstance(state, FeedbackState):
            raise TypeError(
                f"state must be a FeedbackState (from this model's forward or step), got {type(state).__name__}"
            )
        c, n_proj = self.config, 1 if self.kv is not None else self.config.n_layers
        if not isinstance(state.offset, int) or isinstance(state.offset, bool) or state.offset < 0:
            raise ValueError(f"state.offset must be a non-negative int (tokens seen), got {state.offset!r}")
        weight = self.embed.weight
        for t in (state.memory, *state.keys, *state.values):
            if not isinstance(t, torch.Tensor) or t.dtype != weight.dtype or t.device != weight.device:
                got = f"{t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"state holds {got}, but the model is {weight.dtype} on {weight.device}")
        if state.memory.dim() != 3 or state.memory.size(0) != batch_size:
            raise ValueError(
                f"state has memory of shape {list(state.memory.shape)}, expected batch size {batch_size} "
                "(the tokens' batch size)"
            )
        m = state.memory.size(1)
        want = (batch_size, c.n_heads, m, c.d_model // c.n_heads)
        if state.memory.size(2) != c.d_model or len(state.keys) != n_proj or len(state.values) != n_proj or any(
            tuple(t.shape) != want for t in (*state.keys, *state.values)
        ):
            raise ValueError(
                f"state does not fit this model: memory {list(state.memory.shape)} with {len(state.keys)} key "
                f"projection(s) of shape {[list(k.shape) for k in state.keys][:1]}, expected d_model={c.d_model} "
                f"and {n_proj} projection(s) of shape {list(want)} (a state from another model?)"
            )

    def step(self, token: torch.Tensor, state: FeedbackState | None = None) -> tuple[torch.Tensor, FeedbackState]:
        """Decode one token: the state (memory keys and values) is the cache.

        Shape:
            token `[B]` -> logits `[B, V]`.
        """
        if self.training:
            raise RuntimeError(
                "step() is for decoding and needs eval mode (model.training is True: dropout would be applied); "
                "call model.eval() first, or train with model(tokens, state)"
            )
        check_tokens(token, self.config.vocab_size, "token", dims=1, device=self.embed.weight.device)
        logits, state = self(token[:, None], state)
        return logits[:, 0], state

    @torch.no_grad()
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
        """Append `n` sampled tokens to `prompt`; with `use_cache` each new token costs one step, otherwise
        each step recomputes the whole sequence.

        Shape:
            prompt `[B, T0]` (T0 >= 1) -> `[B, T0 + n]`.
        """
        check_sampling(temperature, top_k, n)
        check_tokens(prompt, self.config.vocab_size, "prompt", device=self.embed.weight.device, min_len=1)
        out = prompt
        logits, state = self(prompt)
        for _ in range(n):
            out = torch.cat([out, sample_next(logits[:, -1], temperature, top_k, generator)[:, None]], dim=1)
            logits, state = self(out[:, -1:], state) if use_cache else self(out)
        return out


def _detach(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach() for t in tensors]
