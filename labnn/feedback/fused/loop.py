r"""The shared-key/value feedback token loop as ONE autograd Function: backpropagation
through time by hand.

Dimension letters (the package legend): `B` batch, `T` steps of the block, `M` carried
memory steps, `C = M + T` capacity of the key/value buffer, `S` keys one step attends to
(at most `S_max`), `H` heads, `D` model width, `D_h` head width, `F` feed-forward width,
`L` layers.

With autograd, `FeedbackTransformerKV` records 32 autograd nodes per layer and step (14 of
them not views), and 19 more per step for the memory vector and its key and value (counted
in `tests/test_claims70.py`); `T x L` tiny operations then cost more bookkeeping than
arithmetic. `FeedbackLoop`
runs the same recurrence, mirroring `labnn.feedback.layer.feedback_step` and
`labnn.feedback.layer.memory_keys_values` operation for operation
(`tests/test_feedback_loop.py` compares its values and gradients with them token by
token), over the same parameters read by name (`LayerParams`), with autograd off. It
keeps what the backward pass needs in buffers allocated for this block
(`labnn.feedback.fused.buffers`: nothing survives the pass, nothing lives on a module),
then walks the steps in reverse (`labnn.feedback.fused.backward`). Per step it computes
only gradients with respect to activations, the chain the recurrence needs. Weight
gradients wait until every step is done and are then one large operation over all
`T x B` rows: the sum over steps written out in `labnn.feedback.step_linear.StepLinear`,
here `labnn.feedback.fused.buffers.linear_grads` (and `layer_norm_param_grads` for the
layer norms' $\gamma$ and $\beta$).

Three choices keep the loop fast on a CPU, where each step's products have only `B` rows
(measured with `benchmarks/bench_feedback_kv.py` on this project's 2-core x86-64 VM, 2
threads, torch 2.13, `D` = 256, `F` = 1,024, 2026-11-22):

* The feed-forward products are computed *feature-major*, $W x^\top$ (`[F, B]`) instead
  of $x W^\top$ (`[B, F]`): the BLAS library then splits the `F` output rows between the
  cores, which made these `B = 16`-row products 1.4 to 1.8x faster (1.3x for the product
  alone, timed beside other work on 2026-11-28). The backward pass likewise computes
  $W^\top g^\top$.
* Layer-norm and GELU outputs are not kept: the backward pass recomputes them, every
  step at once, from the kept inputs and statistics (in float32 the same bits as the
  forward's on the CPU, tested; in half precision, equal up to rounding).
* The largest buffers are kept one per layer (the feed-forward pre-activations, each
  `[T, F, B]`, not one `[L, T, F, B]`), and the attention weights are packed step after
  step (step `i` has `min(M + i, window)` of them) instead of being padded to `S_max`.
  The allocator serves blocks of this size from memory freed by the previous step;
  larger blocks come freshly mapped from the operating system every time, a page fault
  per 4 KiB touched (the layer inputs `x`, `[L+1, T, B, D]`, are one such block).

Every backward call allocates its own gradient buffers, so `backward(retain_graph=True)`
twice and `torch.autograd.grad` are exact; double backward raises. There is no dropout
here: `FeedbackTransformerKV` falls back to its autograd loop when it trains with dropout.

The loop computes in one dtype, its parameters' (the embeddings' `x.dtype`), forward and
backward, with `torch.autocast` off inside: under autocast it would otherwise round some
of its kernels' results (those without an `out=` buffer) to bfloat16 and not the others,
and its backward's `out=` kernels would refuse autocast's dtype. So under autocast the
fused loop is a float32 loop and returns a float32 state; `loop="autograd"` computes in
autocast's dtype.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from labnn.feedback.fused import backward as bptt
from labnn.feedback.fused.buffers import Activations, layer_norm
from labnn.nn.arguments import autocast_dtype


class LayerParams(NamedTuple):
    """One `FeedbackLayer`'s tensors, named after its modules (`norm_attn`, `attn.q`,
    `attn.out_proj`, `norm_ff`, `ff.up`, `ff.down`; `_w` weight, `_b` bias)."""

    norm_attn_w: torch.Tensor
    norm_attn_b: torch.Tensor
    q_w: torch.Tensor
    q_b: torch.Tensor
    out_proj_w: torch.Tensor
    out_proj_b: torch.Tensor
    norm_ff_w: torch.Tensor
    norm_ff_b: torch.Tensor
    up_w: torch.Tensor
    up_b: torch.Tensor
    down_w: torch.Tensor
    down_b: torch.Tensor

    @classmethod
    def of(cls, layer) -> LayerParams:
        """The parameters of a `labnn.feedback.layer.FeedbackLayer`."""
        modules = (layer.norm_attn, layer.attn.q, layer.attn.out_proj, layer.norm_ff,
                   layer.ff.up, layer.ff.down)
        return cls(*[p for module in modules for p in (module.weight, module.bias)])


class MemoryParams(NamedTuple):
    """The tensors that make a step's memory vector and its key/value: `mix.logits` ($w$),
    `norm_mem` and the shared projection `kv` of a `FeedbackTransformerKV`."""

    mix_logits: torch.Tensor
    norm_mem_w: torch.Tensor
    norm_mem_b: torch.Tensor
    kv_w: torch.Tensor
    kv_b: torch.Tensor

    @classmethod
    def of(cls, model) -> MemoryParams:
        """The memory parameters of a `labnn.feedback.kv.FeedbackTransformerKV`."""
        return cls(model.mix.logits, model.norm_mem.weight, model.norm_mem.bias,
                   model.kv.weight, model.kv.bias)


@dataclass(frozen=True)
class LoopSpec:
    """The loop's non-tensor arguments.

    Args:
        n_heads: attention heads `H`.
        window: keys a step attends to at most (`attn_len`, or `C` for all).
        eps: epsilon of every layer norm.
        keep_activations: keep activations for a backward pass; must be True whenever any
            tensor input requires grad (False under `torch.no_grad`: scratch space only).
    """

    n_heads: int
    window: int
    eps: float
    keep_activations: bool

    @classmethod
    def of(cls, model, window: int, keep_activations: bool) -> LoopSpec:
        """The spec of a `labnn.feedback.kv.FeedbackTransformerKV`'s loop; refuses a model
        whose layer norms do not share one epsilon (the loop has one)."""
        eps = model.norm_mem.eps
        for i, layer in enumerate(model.layers):  # 2 L reads: cheap at every decoded token
            for name in ("norm_attn", "norm_ff"):
                if getattr(layer, name).eps != eps:
                    raise ValueError(
                        f"layers.{i}.{name}.eps = {getattr(layer, name).eps} but "
                        f"norm_mem.eps = {eps}: the fused loop uses one layer-norm "
                        "epsilon; set them equal, or use FeedbackKVConfig(loop='autograd')")
        return cls(model.config.n_heads, window, eps, keep_activations)


def fused_loop(spec: LoopSpec, x, q0, memory, biases, shared: MemoryParams,
               layers: list[LayerParams]):
    """Run `FeedbackLoop` on named parameters (autograd sees each tensor as an input).

    Args:
        spec: the non-tensor arguments.
        x: the first layer's inputs (the embeddings).
        q0: the first layer's queries, computed before the loop (they read no memory).
        memory: carried keys then values, detached.
        biases: every layer's relative bias; the key `d` steps back in column `S_max - d`.
        shared: `MemoryParams`.
        layers: one `LayerParams` per layer, bottom first.

    Shape:
        x and q0 `[B, T, D]`, memory `[2, B, H, M, D_h]`, biases `[L, H, S_max]` -> top
        outputs `[B, T, D]`, keys/values `[2, B, H, C, D_h]` (no gradient flows back
        through these).
    """
    flat = [p for layer in layers for p in layer]
    q0, memory = q0.to(x.dtype), memory.to(x.dtype)  # autocast's, or an autocast state
    with _without_autocast(x.device):  # one dtype throughout (the module's note)
        return FeedbackLoop.apply(spec, len(layers), x, q0, memory, biases, *shared,
                                  *flat)


def _without_autocast(device: torch.device):
    """A context with `torch.autocast` off for `device`'s type, where it is on."""
    if autocast_dtype(device) is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


def unflatten(tensors, n_layers: int) -> tuple[MemoryParams, list[LayerParams]]:
    """Named parameters back from the flat inputs `fused_loop` passes (autograd sees only
    positional tensors)."""
    n, k = len(MemoryParams._fields), len(LayerParams._fields)
    layers = [LayerParams(*tensors[n + l * k : n + (l + 1) * k]) for l in range(n_layers)]
    return MemoryParams(*tensors[:n]), layers


class FeedbackLoop(torch.autograd.Function):
    """The token loop of one block; call it through `fused_loop`."""

    @staticmethod
    def forward(ctx, spec: LoopSpec, n_layers: int, x, q0, memory, biases, *tensors):
        r"""Step after step: every layer (`_layer_forward`), then the memory vector and
        its key/value (`_memory_forward`), written into the block's key/value buffer
        that the next step reads.

        Layer 0's queries arrive computed (`q0`): they read no memory, so the caller
        computes all `T` of them as one `[B T, D]` product before the loop (faster than
        `T` small ones), and their gradient, returned for `q0`, flows through autograd
        into `norm_attn` and `attn.q` of layer 0.
        """
        shared, layers = unflatten(tensors, n_layers)
        (b, t, d), (_, _, h, m, dh) = x.shape, memory.shape
        kv = memory.new_empty(2, b, h, m + t, dh)
        kv[:, :, :, :m] = memory
        keep, f = spec.keep_activations, layers[0].up_w.size(0)
        a = Activations(n_layers, m, t, b, d, f, h, spec.window, keep, x)
        a.x[0], a.q[0] = x.transpose(0, 1), q0.transpose(0, 1)
        mix = shared.mix_logits.softmax(0)
        for i in range(t):
            j, s = (i if keep else 0), min(m + i, spec.window)  # j: step i's slot in `a`
            keys, values = kv[:, :, :, m + i - s : m + i].flatten(1, 2)  # [B H, S, D_h]
            for l, p in enumerate(layers):
                bias = biases[l, :, biases.size(-1) - s :]  # [H, S]
                _layer_forward(p, l, i, j, keys, values, bias, a, spec)
            kv[:, :, :, m + i] = _memory_forward(shared, mix, i, j, a, spec, h)
        ctx.mark_non_differentiable(kv)
        if keep:
            ctx.spec, ctx.activations, ctx.n_layers = spec, a, n_layers
            ctx.m, ctx.t, ctx.s_max = m, t, biases.size(-1)
            ctx.save_for_backward(kv, *tensors)
        return a.x[n_layers].transpose(0, 1), kv

    @staticmethod
    def backward(ctx, grad_tops, _):
        """The steps in reverse (`labnn.feedback.fused.backward.backward`): its note
        derives each gradient."""
        if torch.is_grad_enabled():
            raise RuntimeError(
                "FeedbackLoop does not support double backward (create_graph=True); "
                "to differentiate twice, use FeedbackKVConfig(loop='autograd') in a "
                "subclass of FeedbackTransformerKV whose block_linear returns the "
                "nn.Linear itself (per-step weight gradients)")
        if not hasattr(ctx, "spec"):
            raise RuntimeError(
                "FeedbackLoop was run with LoopSpec(keep_activations=False), which keeps "
                "no activations; set it to True whenever any of its tensor inputs "
                "requires grad")
        kv, *tensors = ctx.saved_tensors
        shared, layers = unflatten(tensors, ctx.n_layers)
        with _without_autocast(kv.device):  # a backward called under autocast
            grads = bptt.backward(ctx.spec, ctx.activations, ctx.m, ctx.s_max, kv,
                                  shared, layers, grad_tops.to(kv.dtype))
        grad_x, grad_q0, grad_biases, grad_shared, grad_layers = grads
        # What the outputs do not depend on gets None, as from autograd's loop (AdamW
        # decays a parameter with a zero gradient, and skips one with None): a block's
        # last memory vector feeds no step of it, so with one step, no memory parameter;
        # with one step and no memory either, it attends to nothing (no query, no bias).
        if ctx.t == 1:
            grad_shared = [None] * len(grad_shared)
        if ctx.t == 1 and ctx.m == 0:
            grad_q0 = grad_biases = None
            grad_layers = [layer._replace(norm_attn_w=None, norm_attn_b=None, q_w=None,
                                          q_b=None) for layer in grad_layers]
        flat = (g for layer in grad_layers for g in layer)
        return (None, None, grad_x, grad_q0, None, grad_biases, *grad_shared, *flat)


def _layer_forward(p: LayerParams, l, i, j, keys, values, bias, a: Activations,
                   spec: LoopSpec) -> None:
    r"""Layer `l` at step `i`: the equations of `labnn.feedback.layer.FeedbackLayer`
    from its input $x^l$ to its output $x^{l+1}$, every result written into the
    activation buffers (slot `j`) under the names of `labnn.feedback.fused.buffers`
    ($q$, $z$, $x'$, and $u$ the feed-forward pre-activation).

    Shape:
        keys and values `[B H, S, D_h]`, bias `[H, S]`.
    """
    x_in, z, x_mid, q = a.x[l, i], a.z[l, j], a.x_mid[l, j], a.q[l, i]
    (b, d), h = x_in.shape, spec.n_heads
    dh = d // h
    if l:  # layer 0's queries came computed
        stats = (a.normed, a.mean_attn[l, j], a.rstd_attn[l, j])
        normed = layer_norm(x_in, p.norm_attn_w, p.norm_attn_b, spec.eps, stats)
        torch.addmm(p.q_b, normed, p.q_w.t(), out=q)
    # Attention over the `S` keys this step may read, one query per head:
    # $\sigma = q K^\top / \sqrt{d_h} + b^{\mathrm{rel}}$, $p = \mathrm{softmax}(\sigma)$
    # (kept for the backward pass), $z = p V$.
    s = keys.size(1)
    if s:
        scale = 1 / math.sqrt(dh)
        scores = torch.bmm(q.view(b * h, 1, dh), keys.transpose(1, 2)).view(b, h, s)
        weights = torch.softmax(torch.add(bias, scores, alpha=scale), -1,
                                out=a.weights(l, j, s))
        torch.bmm(weights.view(b * h, 1, s), values, out=z.view(b * h, 1, dh))
    else:  # nothing to attend to yet: a zero attention output
        z.zero_()
    # The residual $x' = x + W^O z + b^O$, then the feed-forward network. Its products
    # run feature-major: $u = W_1 \mathrm{LN}_2(x')^\top + b_1$ is `[F, B]` (see the
    # module's note), and so is $\mathrm{GELU}(u)$ on its way down.
    torch.addmm(p.out_proj_b, z, p.out_proj_w.t(), out=x_mid).add_(x_in)
    stats = (a.normed, a.mean_ff[l, j], a.rstd_ff[l, j])
    normed = layer_norm(x_mid, p.norm_ff_w, p.norm_ff_b, spec.eps, stats)
    u = torch.addmm(p.up_b[:, None], p.up_w, normed.t(), out=a.ff_pre[l][j])
    down = torch.addmm(p.down_b[:, None], p.down_w, F.gelu(u))  # [D, B]
    torch.add(x_mid, down.t(), out=a.x[l + 1, i])


def _memory_forward(shared: MemoryParams, mix, i, j, a: Activations, spec: LoopSpec, h):
    r"""Step `i`'s memory vector $m_i$ (`labnn.feedback.layer.LayerMix`) and its key and
    value (`labnn.feedback.layer.memory_keys_values`), slot `j`, as `feedback_step`
    computes them.

    Shape:
        mix `[L+1]` -> keys then values `[2, B, H, D_h]`.
    """
    xs = a.x[:, i]  # [L+1, B, D]
    _, b, d = xs.shape
    torch.mm(mix[None], xs.reshape(xs.size(0), b * d), out=a.memory[j].view(1, b * d))
    stats = (a.memory_normed[j], a.mean_mem[j], a.rstd_mem[j])
    normed = layer_norm(a.memory[j], shared.norm_mem_w, shared.norm_mem_b, spec.eps,
                        stats)
    kv = torch.addmm(shared.kv_b, normed, shared.kv_w.t())  # [B, 2D]
    return kv.view(b, 2, h, d // h).transpose(0, 1)
