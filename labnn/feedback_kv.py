r"""The Feedback Transformer with keys and values shared by every layer, stacked without copies.

Dimension letters: `B` batch, `T` new tokens, `M` steps carried in the state, `S` keys a step attends to
(at most `attn_len`), `N = M + T` steps in one block's stack, `H` heads, `D` model width,
`D_h = D / H` head width, `V` vocabulary, `L` layers.

In `labnn.feedback` with `shared_kv=True` every layer reads the same keys and values
$$K_j = W^K \mathrm{LN}(m_j), \qquad V_j = W^V \mathrm{LN}(m_j),$$
so step `t` projects ONE new memory vector $m_t$ once and appends $(K_t, V_t)$ to what the earlier steps
already computed. `FeedbackTransformerKV` is that model (same `state_dict`, same outputs and gradients),
run with less work per step:

* keys and values live in a `labnn.stack.Stack` allocated per block (carried memory + block length):
  O(1) per step instead of `torch.cat`/`torch.stack` copying the whole history (`stack="torch"` keeps
  the `torch.stack` version for comparison);
* what does not depend on the recurrence is computed for the whole block at once: the embeddings, the
  first layer's queries, the relative-position biases, and the output head;
* the state is the keys and values alone, `2 M D` numbers per sequence, `L` times less than a
  transformer's KV cache (`2 L M D`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .feedback import (FeedbackConfig, FeedbackLayer, FeedbackState, FeedbackTransformer, RelativeBias,
                       feedback_attention)
from .feedback_loop import FeedbackLoop, LoopSpec
from .stack import ListStack, Stack, StepLinear
from .transformer import check_tokens

STACKS = {"buffer": Stack, "torch": ListStack}
LOOPS = ("fused", "autograd")


@dataclass
class FeedbackKVConfig(FeedbackConfig):
    """`FeedbackConfig` with shared keys/values (required) and how the token loop runs.

    Args:
        shared_kv: must be True (one key/value projection of the memory, shared by every layer).
        loop: `"fused"`: the whole token loop of a block is one autograd Function that backpropagates
            through time by hand (`labnn.feedback_loop`; the fastest; no double backward; training with
            dropout uses the autograd loop). `"autograd"`: each step's operations are recorded by autograd,
            keys and values go through `stack` (what notebook 04 builds).
        stack: for the autograd loop, `"buffer"` (`labnn.stack.Stack`, no copies) or `"torch"`
            (`torch.stack` every step).
        batch_grads: for the autograd loop, compute each linear layer's weight gradient once per block
            (`labnn.stack.StepLinear`) instead of once per step; False allows double backward.
    """

    shared_kv: bool = True
    loop: str = "fused"
    stack: str = "buffer"
    batch_grads: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shared_kv is not True:
            raise ValueError(f"shared_kv must be True for FeedbackTransformerKV, got {self.shared_kv!r}")
        if self.loop not in LOOPS:
            raise ValueError(f"loop must be one of {LOOPS}, got {self.loop!r}")
        if self.stack not in STACKS:
            raise ValueError(f"stack must be one of {tuple(STACKS)}, got {self.stack!r}")
        if not isinstance(self.batch_grads, bool):
            raise ValueError(f"batch_grads must be True or False, got {self.batch_grads!r}")


@dataclass
class KVState:
    """What a `FeedbackTransformerKV` carries from one call to the next (detached).

    Attributes:
        kv: keys then values of the last memory vectors, `[2, B, H, M, D_h]` (at most `attn_len` of them).
        offset: how many tokens the state has seen.
    """

    kv: torch.Tensor
    offset: int = 0

    def nbytes(self) -> int:
        """Bytes held by the cache."""
        return self.kv.numel() * self.kv.element_size()

    @classmethod
    def from_feedback(cls, state: FeedbackState) -> KVState:
        """The keys and values of a `FeedbackTransformer(shared_kv=True)` state (its memory vectors are not needed)."""
        if len(state.keys) != 1:
            raise ValueError(f"state has {len(state.keys)} key projections; only a shared_kv state (1) converts")
        return cls(torch.stack([state.keys[0], state.values[0]]), state.offset)


class FeedbackTransformerKV(FeedbackTransformer):
    """Feedback Transformer with shared keys/values kept in a `Stack`; loads `FeedbackTransformer(shared_kv=True)` weights.

    `logits, state = model(tokens, state)` runs the token loop (training and evaluation);
    `logits, state = model.step(token, state)` decodes one token; `model.generate(prompt, n)` samples.
    """

    def __init__(self, config: FeedbackKVConfig):
        if not isinstance(config, FeedbackKVConfig):
            raise TypeError(f"config must be a FeedbackKVConfig, got {type(config).__name__}")
        super().__init__(config)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> KVState:
        """An empty state (no memory) for `batch_size` sequences."""
        c = self.config
        kv = self.kv.weight.new_zeros(2, batch_size, c.n_heads, 0, c.d_model // c.n_heads, device=device)
        return KVState(kv, 0)

    def check_state(self, state: KVState, batch_size: int) -> None:
        """Raise a clear error unless `state` could come from this model for `batch_size` sequences."""
        if not isinstance(state, KVState):
            hint = " (convert one with KVState.from_feedback)" if isinstance(state, FeedbackState) else ""
            raise TypeError(f"state must be a KVState (from this model's forward or step){hint}, got {type(state).__name__}")
        c, kv = self.config, state.kv
        if not isinstance(state.offset, int) or isinstance(state.offset, bool) or state.offset < 0:
            raise ValueError(f"state.offset must be a non-negative int (tokens seen), got {state.offset!r}")
        if not isinstance(kv, torch.Tensor):
            raise TypeError(f"state.kv must be a tensor [2, B, H, M, D_h], got {type(kv).__name__}")
        want = (2, batch_size, c.n_heads, "M", c.d_model // c.n_heads)
        if kv.dim() != 5 or [n for i, n in enumerate(kv.shape) if i != 3] != [n for n in want if n != "M"]:
            raise ValueError(
                f"state.kv has shape {list(kv.shape)}, expected [{', '.join(map(str, want))}] "
                f"(batch size {batch_size}; a state from another batch or model?)"
            )
        weight = self.kv.weight
        if kv.dtype != weight.dtype or kv.device != weight.device:
            raise ValueError(
                f"state.kv is {kv.dtype} on {kv.device}, but the model is {weight.dtype} on {weight.device}"
            )

    def forward(self, tokens: torch.Tensor, state: KVState | None = None) -> tuple[torch.Tensor, KVState]:
        """Next-token logits for every position, one step after the other, block by block.

        Args:
            tokens: token ids.
            state: the state returned by the previous call (None = start with no memory).

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`.

        Returns:
            `(logits, state)`; the state holds the keys/values of the last `attn_len` steps (all if None),
            detached.
        """
        check_tokens(tokens, self.config.vocab_size, device=self.embed.weight.device)
        b, t = tokens.shape
        state = self.initial_state(b, tokens.device) if state is None else state
        self.check_state(state, b)
        x = self.dropout(self.embed(tokens))  # [B, T, D]
        first = self.layers[0]
        q0 = first.attn.q(first.norm_attn(x))  # the first layer's queries do not depend on the memory
        kv, tops = state.kv, []
        block = self.config.block_len or max(t, 1)
        for start in range(0, t, block):
            memory = self._recent(kv, 3).detach()  # truncated backpropagation: blocks share no graph
            top, kv = self._block(x[:, start : start + block], q0[:, start : start + block], memory)
            tops.append(top)
        logits = self.head(torch.cat(tops, 1) if tops else x)
        return logits, KVState(self._keep(kv), state.offset + t)

    def _block(self, x: torch.Tensor, q0: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The token loop over one block, gradients flowing through its stack of keys and values.

        Shape:
            x and q0 `[B, T, D]`, memory `[2, B, H, M, D_h]` -> top outputs `[B, T, D]`, kv `[2, B, H, M + T, D_h]`.
        """
        c = self.config
        if c.loop == "fused" and not (self.training and c.dropout > 0):
            return self._fused_block(x, q0, memory)
        (b, t, _), (_, _, h, m, dh) = x.shape, memory.shape
        stack = STACKS[self.config.stack](m + t, x.new_empty(2, b, h, dh), dim=3)
        kv = stack.extend(memory)
        window = self.config.attn_len or m + t
        longest = min(m + t - 1, window)
        biases = [layer.attn.rel(longest) for layer in self.layers]  # [H, S] per layer, nearest key last
        linears = [self._step_linears(layer, t, x[:, 0], query=j > 0) for j, layer in enumerate(self.layers)]
        project = self._step_linear(self.kv, t, x[:, 0])
        tops = []
        for x_i, q_i in zip(x.unbind(1), q0.unbind(1)):  # unbind once: indexing each step would copy [B, T, D] back
            s = min(kv.size(3), window)
            k, v = (kv if s == kv.size(3) else kv.narrow(3, kv.size(3) - s, s)).unbind(0)
            xs = [x_i]
            for j, layer in enumerate(self.layers):
                q = q_i if j == 0 else None
                xs.append(self._layer(layer, linears[j], xs[-1], k, v, biases[j][:, longest - s :], q))
            tops.append(xs[-1])
            m_t = self.norm_mem(self.mix(torch.stack(xs)))
            kv = stack.push(project(m_t).view(b, 2, h, dh).transpose(0, 1))
        return torch.stack(tops, 1), kv

    def _fused_block(self, x: torch.Tensor, q0: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`_block` as one `labnn.feedback_loop.FeedbackLoop`."""
        m, t = memory.size(3), x.size(1)
        window = self.config.attn_len or m + t
        tables = torch.stack([layer.attn.rel.bias for layer in self.layers])  # every layer's at once
        biases = RelativeBias.lookup(tables, min(m + t - 1, window))  # [L, H, S_max]
        params = [p for layer in self.layers for p in _loop_params(layer)]
        inputs = (x, q0, memory, biases, self.mix.logits, self.norm_mem.weight, self.norm_mem.bias,
                  self.kv.weight, self.kv.bias, *params)
        keep = torch.is_grad_enabled() and any(p.requires_grad for p in inputs)  # any input: a backward follows
        spec = LoopSpec(self.config.n_heads, window, self.norm_mem.eps, keep)
        return FeedbackLoop.apply(spec, *inputs)

    def _step_linear(self, linear: nn.Linear, steps: int, like: torch.Tensor):
        """`linear` itself, or a `StepLinear` computing its weight gradient once per block (`batch_grads`)."""
        use = self.config.batch_grads and torch.is_grad_enabled() and linear.weight.requires_grad
        return StepLinear(linear, steps, like) if use else linear

    def _step_linears(self, layer: FeedbackLayer, steps: int, like: torch.Tensor, query: bool) -> dict:
        """The linear maps of one layer for `_layer` (the query only where it is not computed in advance)."""
        ff = layer.ff
        names = {"out": layer.attn.out_proj, "up": ff.up, **({"q": layer.attn.q} if query else {})}
        lins = {k: self._step_linear(lin, steps, like) for k, lin in names.items()}
        lins["down"] = self._step_linear(ff.down, steps, like.new_empty(like.size(0), ff.up.out_features))
        return lins

    def _layer(
        self,
        layer: FeedbackLayer,
        lin: dict,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        q: torch.Tensor | None,
    ) -> torch.Tensor:
        """`layer(x, k, v)` with the relative bias (and, for the first layer, the query) computed in advance
        and the linear maps `lin` (see `_step_linears`).

        Shape: x and q `[B, D]`, k and v `[B, H, S, D_h]`, bias `[H, S]` -> `[B, D]`.
        """
        attn, ff = layer.attn, layer.ff
        q = lin["q"](layer.norm_attn(x)) if q is None else q
        z = feedback_attention(q.view(x.size(0), attn.n_heads, -1), k, v, bias, attn.dropout, self.training)
        x = x + layer.dropout(lin["out"](z.flatten(1)))
        return x + ff.dropout(lin["down"](F.gelu(lin["up"](layer.norm_ff(x)))))

    def _keep(self, kv: torch.Tensor) -> torch.Tensor:
        """The detached state: the last `attn_len` steps of `kv` (copied when shorter, so the block's buffer is freed)."""
        recent = self._recent(kv, 3).detach()
        return recent.clone() if recent.size(3) < kv.size(3) else recent


def _loop_params(layer: FeedbackLayer) -> list[torch.Tensor]:
    """A layer's tensors in the order `FeedbackLoop` takes them."""
    modules = (layer.norm_attn, layer.attn.q, layer.attn.out_proj, layer.norm_ff, layer.ff.up, layer.ff.down)
    return [p for module in modules for p in (module.weight, module.bias)]
