r"""The Feedback Transformer with keys and values shared by every layer, stacked without
copies.

Dimension letters (the package legend): `B` batch, `T` tokens of a block, `M` steps
carried in the state, `C = M + T` capacity of a block's key/value stack, `S` keys a step
attends to (at most `W = attn_len`; `S_max` the most of a block's steps), `H` heads, `D`
model width, `D_h = D / H` head width, `V` vocabulary, `L` layers.

In `labnn.feedback.model` with `shared_kv=True` every layer reads the same keys and values
$(K_j, V_j)$ of the memory vectors $m_j$ (`labnn.feedback.layer.memory_keys_values`),
so step `t` projects ONE new memory vector $m_t$ once and appends $(K_t, V_t)$ to what
the earlier steps already computed. `FeedbackTransformerKV` is that model (same
`state_dict`, same outputs and gradients), run with less work per step:

* keys and values live in a `labnn.feedback.stack.Stack` allocated per block (carried memory +
  block length): a push copies one step instead of `torch.cat` copying the whole history
  (the backward pass still hands each prefix's gradient down: `labnn.feedback.stack`);
* what does not depend on the recurrence is computed for the whole block at once: the
  embeddings, the first layer's queries, the relative-position biases, and the output
  head;
* the state is the keys and values alone, `2 M D` numbers per sequence, `L` times less
  than a transformer's KV cache (`2 L M D`).

Two token loops compute the same thing: `loop="autograd"` records every step's
operations (each `FeedbackLayer` applied as it is, its weight gradients taken once per
block by `labnn.feedback.step_linear.StepLinear`; what notebook 04 builds) and `loop="fused"` (the
default, the fastest) runs the block as one `labnn.feedback.fused.loop.FeedbackLoop` over the
same named parameters.

The `state_dict` of `FeedbackTransformer(shared_kv=True)`, which this model loads:

    embed.weight [V, D]    mix.logits [L+1]    norm_mem.{weight,bias} [D]
    kv.{weight [2D, D], bias [2D]}    ONE projection of norm_mem(m_t):
                                      keys = first D outputs, values = last D
    layers.{i}.norm_attn.{weight,bias}
    layers.{i}.attn.q.{weight,bias}    layers.{i}.attn.out_proj.{weight,bias}
    layers.{i}.attn.rel.bias [H, max_distance]
    layers.{i}.norm_ff.{weight,bias}
    layers.{i}.ff.up.{weight,bias}    layers.{i}.ff.down.{weight,bias}
    head.norm.{weight,bias}    head.proj.weight [V, D] (no bias, not tied)

With `shared_kv=False` there is no top-level `kv`; each `layers.{i}.attn.kv` projects
`norm_mem(m_t)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from labnn.feedback.base import FeedbackBase, check_offset
from labnn.feedback.fused.loop import LayerParams, LoopSpec, MemoryParams, fused_loop
from labnn.feedback.layer import (FeedbackLayer, LayerMaps, RelativeBias, feedback_step,
                                  memory_keys_values)
from labnn.feedback.model import FeedbackConfig, FeedbackState
from labnn.feedback.stack import Stack
from labnn.feedback.step_linear import StepLinear
from labnn.nn.arguments import (check_choice, check_int, check_tokens, compute_dtype,
                                state_dtype_hint, state_dtypes)

LOOPS = ("fused", "autograd")


@dataclass(frozen=True)
class FeedbackKVConfig(FeedbackConfig):
    """`FeedbackConfig` with shared keys/values and a choice of token loop.

    Args:
        shared_kv: always True (one key/value projection of the memory, shared by every
            layer); anything else is an error.
        loop: `"fused"`: the whole token loop of a block is one autograd Function that
            backpropagates through time by hand (`labnn.feedback.fused.loop`; the fastest; no
            double backward; training with dropout uses the autograd loop; float32
            under `torch.autocast`).
            `"autograd"`: autograd records each step (what notebook 04 builds).
    """

    shared_kv: bool = True
    loop: str = "fused"

    def __post_init__(self) -> None:
        """`FeedbackConfig`'s checks, then the two of this model."""
        super().__post_init__()
        if self.shared_kv is not True:
            raise ValueError("shared_kv must be True for FeedbackTransformerKV, got "
                             f"{self.shared_kv!r}")
        check_choice("loop", self.loop, LOOPS)


@dataclass
class KVState:
    """What a `FeedbackTransformerKV` carries from one call to the next (detached).

    Attributes:
        kv: keys then values of the last memory vectors, `[2, B, H, M, D_h]` (at most
            `attn_len` of them).
        offset: how many tokens the state has seen.
    """

    kv: torch.Tensor
    offset: int = 0

    def nbytes(self) -> int:
        """Bytes held by the cache."""
        return self.kv.numel() * self.kv.element_size()

    @classmethod
    def from_feedback(cls, state: FeedbackState) -> KVState:
        """The keys and values of a `FeedbackTransformer(shared_kv=True)` state (its
        memory vectors are not needed)."""
        if not isinstance(state, FeedbackState):
            raise TypeError("state must be a FeedbackState (from FeedbackTransformer("
                            f"shared_kv=True)), got {type(state).__name__}")
        if len(state.keys) != 1:
            raise ValueError(f"state has {len(state.keys)} key projections; only a "
                             "shared_kv state (1) converts")
        return cls(torch.stack([state.keys[0], state.values[0]]), state.offset)


class FeedbackTransformerKV(FeedbackBase):
    """Feedback Transformer with shared keys/values kept in a `Stack`; loads the weights
    of `FeedbackTransformer(shared_kv=True)` (both build their modules in
    `labnn.feedback.base.FeedbackBase`).

    `logits, state = model(tokens, state)` runs the token loop (training and
    evaluation); `logits, state = model.step(token, state)` decodes one token;
    `model.generate(prompt, n)` samples.
    """

    def __init__(self, config: FeedbackKVConfig):
        """The `FeedbackTransformer(shared_kv=True)` modules; refuses a config that is not
        a `FeedbackKVConfig` (it would lack `loop`).
        """
        if not isinstance(config, FeedbackKVConfig):
            raise TypeError("config must be a FeedbackKVConfig, got "
                            f"{type(config).__name__}")
        super().__init__(config)

    def initial_state(self, batch_size: int, device=None) -> KVState:
        """An empty state (no memory) for `batch_size` sequences, on the model's device
        (`device`, when given, must name it)."""
        check_int("batch_size", batch_size, low=0)
        c = self.config
        shape = (2, batch_size, c.n_heads, 0, c.d_model // c.n_heads)
        return KVState(self.kv.weight.new_zeros(shape, device=self._state_device(device)), 0)

    def check_state(self, state: KVState, batch_size: int) -> None:
        """Raise a clear error unless `state` could come from this model for `batch_size`
        sequences."""
        if not isinstance(state, KVState):
            hint = (" (convert one with KVState.from_feedback)"
                    if isinstance(state, FeedbackState) else "")
            raise TypeError("state must be a KVState (from this model's forward or step)"
                            f"{hint}, got {type(state).__name__}")
        c, kv = self.config, state.kv
        check_offset(state.offset)
        if not isinstance(kv, torch.Tensor):
            raise TypeError(f"state.kv must be a tensor [2, B, H, M, D_h], got "
                            f"{type(kv).__name__}")
        want = (2, batch_size, c.n_heads, "M", c.d_model // c.n_heads)
        fixed = [n for i, n in enumerate(kv.shape) if i != 3]
        if kv.dim() != 5 or fixed != [n for n in want if n != "M"]:
            raise ValueError(
                f"state.kv has shape {list(kv.shape)}, expected "
                f"[{', '.join(map(str, want))}] "
                f"(batch size {batch_size}; a state from another batch or model?)"
            )
        weight = self.kv.weight
        if kv.dtype not in state_dtypes(weight) or kv.device != weight.device:
            raise ValueError(f"state.kv is {kv.dtype} on {kv.device}, but the model is "
                             f"{weight.dtype} on {weight.device}"
                             f"{state_dtype_hint(kv.dtype, weight)}")

    def forward(self, tokens: torch.Tensor, state: KVState | None = None
                ) -> tuple[torch.Tensor, KVState]:
        r"""Next-token logits for every position, one step after the other, block by block.

        The embeddings and the first layer's queries $q^1_t = W^Q \mathrm{LN}_1(x^0_t)$
        do not depend on the memory: they are computed for all `T` tokens at once,
        before the loop. Each block then starts from the detached keys/values of the
        last `attn_len` steps (truncated backpropagation: blocks share no graph). The ids'
        range is checked here (one read back to the host; the training and evaluation
        loops, which check their corpus once, call `forward_checked_ids`).

        Args:
            tokens: token ids.
            state: the state returned by the previous call (None = start with no memory).

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`.

        Returns:
            `(logits, state)`; the state holds the keys/values of the last `attn_len`
            steps (all if None), detached.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.embed.weight.device)
        return self._forward(tokens, state)  # type, shape and range checked once, above

    def _forward(self, tokens: torch.Tensor, state: KVState | None):
        """`forward` for ids already checked (`step` and `generate` check theirs once):
        no pass over the ids, so no host synchronisation per generated token."""
        b, t = tokens.shape
        state = self.initial_state(b, tokens.device) if state is None else state
        self.check_state(state, b)
        x = self.dropout(self.embed(tokens))  # [B, T, D]
        first = self.layers[0]
        q0 = first.attn.q(first.norm_attn(x))
        kv, tops = state.kv, []
        block = self.config.block_len or max(t, 1)
        for start in range(0, t, block):
            memory = self._recent(kv, 3).detach()
            span = slice(start, start + block)
            top, kv = self._block(x[:, span], q0[:, span], memory)
            tops.append(top)
        logits = self.head(torch.cat(tops, 1) if tops else x)
        return logits, KVState(self._trimmed(kv), state.offset + t)

    def _block(self, x: torch.Tensor, q0: torch.Tensor, memory: torch.Tensor):
        """The token loop over one block, by the fused loop or by autograd (dropout in
        training needs autograd's loop: the fused loop has no dropout). Each module's
        own mode decides, as in `nn.Module`: one layer left in training mode applies its
        dropout even when the model is in eval mode.

        Shape:
            x and q0 `[B, T, D]`, memory `[2, B, H, M, D_h]` -> top outputs `[B, T, D]`,
            keys/values `[2, B, H, M + T, D_h]`.
        """
        c = self.config
        dropout = c.dropout > 0 and any(m.training for m in self.modules())
        if c.loop == "fused" and not dropout:
            return self._fused_block(x, q0, memory)
        return self._autograd_block(x, q0, memory)

    def _autograd_block(self, x: torch.Tensor, q0: torch.Tensor, memory: torch.Tensor):
        r"""`_block` recorded by autograd: each step is `labnn.feedback.layer.feedback_step`
        (every `FeedbackLayer` as it is, then the memory vector $m_t$), whose key and
        value $(K_t, V_t)$ (`labnn.feedback.layer.memory_keys_values`) go onto the
        block's stack, which step `t + 1` reads (the last `W` entries).
        """
        (b, t, _), (_, _, h, m, dh) = x.shape, memory.shape
        # what `project` returns: the model's dtype, or autocast's under autocast
        dtype = compute_dtype(self.kv.weight)
        stack = self.make_stack(m + t, x.new_empty(2, b, h, dh, dtype=dtype))
        kv = stack.extend(memory.to(dtype))
        window = self.config.attn_len or m + t
        longest = min(m + t - 1, window)
        # each layer's relative bias [H, S], the nearest key last
        biases = [layer.attn.rel(longest) for layer in self.layers]
        maps = [self._layer_maps(layer, t, x[:, 0], j == 0)
                for j, layer in enumerate(self.layers)]
        project = self.block_linear(self.kv, t, x[:, 0])
        n_layers, tops = len(self.layers), []
        # unbind once: indexing [B, T, D] at each step would copy it again in the backward
        for x_i, q_i in zip(x.unbind(1), q0.unbind(1)):
            s = min(kv.size(3), window)
            k, v = (kv if s == kv.size(3) else kv.narrow(3, kv.size(3) - s, s)).unbind(0)
            top, m_t = feedback_step(self.layers, self.mix, x_i, [k] * n_layers,
                                     [v] * n_layers, query=q_i, maps=maps,
                                     biases=[bias[:, longest - s:] for bias in biases])
            tops.append(top)
            kv = stack.push(memory_keys_values(m_t, self.norm_mem, project, h))
        return torch.stack(tops, 1), kv

    def _fused_block(self, x: torch.Tensor, q0: torch.Tensor, memory: torch.Tensor):
        """`_block` as one `labnn.feedback.fused.loop.FeedbackLoop`, over the parameters of
        every `FeedbackLayer` read by name (`LayerParams`)."""
        m, t = memory.size(3), x.size(1)
        window = self.config.attn_len or m + t
        tables = torch.stack([layer.attn.rel.bias for layer in self.layers])
        biases = RelativeBias.lookup(tables, min(m + t - 1, window))  # [L, H, S_max]
        shared = MemoryParams.of(self)
        layers = [LayerParams.of(layer) for layer in self.layers]
        tensors = [x, q0, biases, *shared, *[p for layer in layers for p in layer]]
        # keep activations whenever a backward pass may follow: any input requires grad
        keep = torch.is_grad_enabled() and any(p.requires_grad for p in tensors)
        spec = LoopSpec.of(self, window, keep)
        return fused_loop(spec, x, q0, memory, biases, shared, layers)

    def make_stack(self, capacity: int, like: torch.Tensor):
        """The stack of one block's keys/values (`Stack`; benchmarks override it to
        compare `labnn.feedback.stack.ListStack`).

        Shape:
            like `[2, B, H, D_h]` (one step) -> a stack of `[2, B, H, n, D_h]`.
        """
        return Stack(capacity, like, dim=3)

    def block_linear(self, linear: nn.Linear, steps: int, like: torch.Tensor):
        """What applies `linear` at each of a block's `steps`: a `StepLinear`, which
        takes the weight gradient once per block, when one is needed (a baseline for
        double backward overrides this to return `linear` itself: per-step weight
        gradients)."""
        if torch.is_grad_enabled() and linear.weight.requires_grad:
            return StepLinear(linear, steps, like)
        return linear

    def _layer_maps(self, layer: FeedbackLayer, steps: int, like: torch.Tensor,
                    first: bool) -> LayerMaps:
        """The linear maps of one layer for the autograd loop (the first layer's query is
        computed before the loop, so it keeps its `nn.Linear`)."""
        ff, attn = layer.ff, layer.attn
        wide = like.new_empty(like.size(0), ff.up.out_features)  # [B, F]
        return LayerMaps(
            q=attn.q if first else self.block_linear(attn.q, steps, like),
            out_proj=self.block_linear(attn.out_proj, steps, like),
            up=self.block_linear(ff.up, steps, like),
            down=self.block_linear(ff.down, steps, wide),
        )

    def _trimmed(self, kv: torch.Tensor) -> torch.Tensor:
        """The detached state: the last `attn_len` steps of `kv` (copied when shorter,
        so the block's buffer is freed)."""
        recent = self._recent(kv, 3).detach()
        return recent.clone() if recent.size(3) < kv.size(3) else recent
