r"""The pieces of a Feedback Transformer step: the layer mix, the relative bias, the
attention over memory, the layer, one token's step, the memory's keys and values, the
output head.

Dimension letters (the package legend): `B` batch, `S` memory keys one step attends to,
`H` heads, `D` model width, `D_h = D / H` head width, `F` feed-forward width, `L`
layers, `V` vocabulary.

`FeedbackLayer` is the ONE definition of what a layer computes at one step,
`feedback_step` of one token's step (every layer, then the memory vector) and
`memory_keys_values` of the memory's keys and values. The plain model
(`labnn.feedback.model`) and the key/value-sharing model's autograd loop
(`labnn.feedback.kv`) call them; the hand-differentiated loop (`labnn.feedback.fused.loop`,
which reads the same parameters by name) mirrors them, operation for operation, and
`tests/test_feedback_loop.py` compares its values and gradients with `feedback_step`
token by token.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from labnn.nn.arguments import check_int
from labnn.nn.layers import FeedForward


class LayerMix(nn.Module):
    r"""Softmax-weighted sum of the embedding and every layer's output.

    The memory vector of a step mixes all $L + 1$ of its representations,
    $$m = \sum_{l=0}^{L} \mathrm{softmax}(w)_l\, x^l ,$$
    with one learned logit $w_l$ per input (all zero at first: an even mix).
    """

    def __init__(self, n_inputs: int):
        """One logit per mixed input, all zero: the mix starts as a plain average."""
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(n_inputs))

    def weights(self) -> torch.Tensor:
        r"""The mixing weights $\mathrm{softmax}(w)$, `[L+1]`; they sum to one."""
        return self.logits.softmax(dim=0)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        """Mix the stacked outputs of one step.

        Shape:
            `[L+1, B, D]` -> `[B, D]`.
        """
        return torch.einsum("l,lbd->bd", self.weights(), xs)


class RelativeBias(nn.Module):
    r"""A learned score bias $b_{h,\delta}$ per head and distance $\delta = t - j$.

    Distances $\delta \ge$ `max_distance` share the last entry, so the table stays finite.
    """

    def __init__(self, n_heads: int, max_distance: int):
        """A zero bias for every head and distance: scores start unbiased."""
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_heads, max_distance))

    def forward(self, s: int) -> torch.Tensor:
        """The bias for `s` keys ordered oldest first: the `k`-th (from 0) sits at
        distance `s - k` (1 = the previous step).

        Shape:
            -> `[H, S]`.
        """
        return self.lookup(self.bias, s)

    @staticmethod
    def lookup(table: torch.Tensor, s: int) -> torch.Tensor:
        """`forward` for any table of biases by distance, e.g. every layer's stacked.

        Shape:
            table `[..., max_distance]` -> `[..., S]`.
        """
        check_int("s", s, low=0)  # a Python int: no tensor value is read
        return RelativeBias._at(table, torch.arange(s, 0, -1, device=table.device))

    @staticmethod
    def at(table: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        r"""The biases of any distances $\delta \ge 1$ (beyond the table: its last entry),
        checked (one host read); the ring step of `labnn.compiled.ring_steps` calls `_at`.

        Shape:
            table `[..., max_distance]`, distance `[S]` -> `[..., S]`.

        Raises:
            TypeError: `distance` is not a tensor of integers.
            ValueError: a distance is < 1.
        """
        if getattr(distance, "dtype", None) not in (torch.int64, torch.int32):
            got = distance.dtype if torch.is_tensor(distance) else type(distance).__name__
            raise TypeError("distance must be a tensor of integer distances (int64 or int32; "
                            f"1 = the previous step), got {got}")
        if distance.numel() and bool((distance < 1).any()):
            raise ValueError(f"distance must hold distances >= 1 (1 = the previous step; "
                             f"0 would read the last entry), got {distance.min().item()}")
        return RelativeBias._at(table, distance)

    @staticmethod
    def _at(table: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """`at` without its check, for distances the caller built >= 1 (no value read)."""
        return table[..., distance.clamp(max=table.size(-1)) - 1]


def feedback_weights(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    r"""The attention weights of one query per head over `S` memory keys, biased by $b$:

    $$p = \mathrm{softmax}\!\left(\frac{q K^\top}{\sqrt{d_h}} + b\right).$$

    Shape:
        q `[B, H, D_h]`, k `[B, H, S, D_h]`, bias `[H, S]` -> `[B, H, S]`.
    """
    scores = (q.unsqueeze(2) @ k.transpose(-1, -2)).squeeze(2)  # [B, H, S]
    return (scores / math.sqrt(q.size(-1)) + bias).softmax(dim=-1)


def feedback_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                       *, dropout_p: float = 0.0, training: bool = False) -> torch.Tensor:
    r"""One query per head attends over `S` memory keys with a relative bias:
    $z = p V$, with the weights $p$ of `feedback_weights`.

    Every key is in the past, so there is no mask; with `S = 0` the output is zero.
    Batched matrix products rather than `einsum`: this runs `T x L` times per sequence,
    where the cost of dispatching an operation shows.

    Shape:
        q `[B, H, D_h]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, H, D_h]`.
    """
    if k.size(2) == 0:
        return torch.zeros_like(q)
    weights = feedback_weights(q, k, bias)
    if training and dropout_p > 0:
        weights = F.dropout(weights, dropout_p, training)
    return (weights.unsqueeze(2) @ v).squeeze(2)


class FeedbackAttention(nn.Module):
    """The attention's parameters: query projection `q`, relative bias `rel`, output
    projection `out_proj`, and (only with `own_kv`) this layer's own key/value
    projection `kv`.

    `FeedbackLayer.forward` applies them.
    """

    def __init__(self, d_model: int, n_heads: int, max_distance: int, *,
                 dropout: float = 0.0, own_kv: bool = True):
        """The attention's linear maps and relative bias (`kv` only when the layer
        projects the memory itself)."""
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model) if own_kv else None
        self.rel = RelativeBias(n_heads, max_distance)
        self.out_proj = nn.Linear(d_model, d_model)


class LayerMaps(NamedTuple):
    """What applies each linear map of a `FeedbackLayer` (by default the `nn.Linear`
    itself; `labnn.feedback.kv` passes `labnn.feedback.step_linear.StepLinear`s)."""

    q: Callable[[torch.Tensor], torch.Tensor]
    out_proj: Callable[[torch.Tensor], torch.Tensor]
    up: Callable[[torch.Tensor], torch.Tensor]
    down: Callable[[torch.Tensor], torch.Tensor]


class FeedbackLayer(nn.Module):
    r"""Pre-norm layer for one step, reading memory keys and values.

    $$q = W^Q \mathrm{LN}_1(x) + b^Q, \qquad
    z = p V,$$
    $$x' = x + W^O z + b^O, \qquad
    y = x' + W_2\, \mathrm{GELU}\big(W_1 \mathrm{LN}_2(x') + b_1\big) + b_2 ,$$

    $p$ the weights of `feedback_weights` over the memory keys $K$, with the bias
    $b^{\mathrm{rel}}$ of each key's distance (`RelativeBias`).

    Parameter names (the state_dict's, and `labnn.feedback.fused.loop.LayerParams`'):
    `norm_attn` ($\mathrm{LN}_1$), `attn.q`, `attn.rel`, `attn.out_proj`, `norm_ff`
    ($\mathrm{LN}_2$), `ff.up` ($W_1$), `ff.down` ($W_2$).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, max_distance: int, *,
                 dropout: float = 0.0, own_kv: bool = True):
        """The two layer norms, the attention's parameters, the feed-forward network and
        the residual dropout."""
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = FeedbackAttention(d_model, n_heads, max_distance, dropout=dropout,
                                      own_kv=own_kv)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def maps(self) -> LayerMaps:
        """The layer's own linear maps."""
        return LayerMaps(self.attn.q, self.attn.out_proj, self.ff.up, self.ff.down)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                bias: torch.Tensor | None = None, query: torch.Tensor | None = None,
                maps: LayerMaps | None = None) -> torch.Tensor:
        """The layer's equations for one step.

        Args:
            x: the layer's input (the layer below's output).
            k, v: memory keys and values, oldest first.
            bias: the relative bias, when computed in advance (default: `attn.rel`).
            query: this step's query $q$, when computed in advance (the first layer's
                queries do not depend on the memory, so a caller may compute them at
                once).
            maps: what applies the linear maps (default: `self.maps()`).

        Shape:
            x and query `[B, D]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, D]`.
        """
        f = maps or self.maps()
        heads, bias = self._query(x, k, bias, query, f)
        z = feedback_attention(heads, k, v, bias, dropout_p=self.attn.dropout,
                               training=self.training)
        x = x + self.dropout(f.out_proj(z.flatten(1)))
        return x + self.ff(self.norm_ff(x), up=f.up, down=f.down)

    def attention_weights(self, x: torch.Tensor, k: torch.Tensor, *,
                          bias: torch.Tensor | None = None, query: torch.Tensor | None = None,
                          maps: LayerMaps | None = None) -> torch.Tensor:
        """The weights `forward` attends with, given the same arguments (for plots).

        Shape:
            x `[B, D]`, k `[B, H, S, D_h]` -> `[B, H, S]`.
        """
        heads, bias = self._query(x, k, bias, query, maps or self.maps())
        return feedback_weights(heads, k, bias)

    def _query(self, x, k, bias, query, f: LayerMaps) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's query by head `[B, H, D_h]` and the bias over its `S` keys."""
        q, h = f.q(self.norm_attn(x)) if query is None else query, self.attn.n_heads
        bias = self.attn.rel(k.size(2)) if bias is None else bias
        return q.view(x.size(0), h, x.size(1) // h), bias


def feedback_step(layers: Sequence[FeedbackLayer], mix: LayerMix, x: torch.Tensor,
                  keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], *,
                  biases: Sequence[torch.Tensor] | None = None, query: torch.Tensor | None = None,
                  maps: Sequence[LayerMaps] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""One token through every layer, then its memory vector $m$ (`LayerMix` of
    $x^0, \dots, x^L$):
    $$x^l = \mathrm{FeedbackLayer}_l\big(x^{l-1}, K^l, V^l\big), \quad l = 1, \dots, L.$$

    The ONE definition of a step: both models run it, and the fused loop
    (`labnn.feedback.fused.loop`) mirrors it, a test comparing them token by token.

    Args:
        layers: the layers, bottom first.
        mix: the layer mix $w$.
        x: the token's embedding $x^0$.
        keys, values: the memory keys and values each layer reads (the same pair for
            every layer when they are shared).
        biases: each layer's relative bias, when computed in advance.
        query: the first layer's query, when computed in advance.
        maps: what applies each layer's linear maps (default: the layer's own).

    Shape:
        x and query `[B, D]`, keys and values `[B, H, S, D_h]`, biases `[H, S]` ->
        top output $x^L$ `[B, D]`, memory vector $m$ `[B, D]`.
    """
    xs = [x]
    for l, layer in enumerate(layers):
        xs.append(layer(xs[-1], keys[l], values[l], bias=None if biases is None else biases[l],
                        query=query if l == 0 else None, maps=None if maps is None else maps[l]))
    return xs[-1], mix(torch.stack(xs))


def memory_keys_values(m: torch.Tensor, norm: nn.Module, projection, n_heads: int
                       ) -> torch.Tensor:
    r"""The keys and values of memory vectors,
    $$(K, V) = W^{KV} \mathrm{LN}(m) + b^{KV},$$
    keys the projection's first `D` outputs, values its last `D`.

    Args:
        m: memory vectors (one step's, or a sequence of them).
        norm: the memory's layer norm.
        projection: what applies $W^{KV}$ (an `nn.Linear`, or a
            `labnn.feedback.step_linear.StepLinear` for one step).
        n_heads: heads `H`.

    Shape:
        m `[B, D]` -> keys then values `[2, B, H, D_h]`; m `[B, S, D]` ->
        `[2, B, H, S, D_h]`.
    """
    kv = projection(norm(m)).unflatten(-1, (2, n_heads, -1))  # [B, (S,) 2, H, D_h]
    return kv.movedim(-3, 0) if m.dim() == 2 else kv.permute(2, 0, 3, 1, 4)


class OutputHead(nn.Module):
    r"""Final layer norm and projection to the vocabulary,
    $\ell = W^{\mathrm{head}}\, \mathrm{LN}(x)$ (no bias, not tied to the embedding).

    Shape:
        `[..., D]` -> `[..., V]`.
    """

    def __init__(self, d_model: int, vocab_size: int):
        """The final layer norm and the vocabulary projection (no bias)."""
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the next token."""
        return self.proj(self.norm(x))
