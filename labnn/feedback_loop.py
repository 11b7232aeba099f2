r"""The shared-key/value feedback token loop as ONE autograd Function: backpropagation through time by hand.

Dimension letters: `B` batch, `T` steps of the block, `M` carried memory steps, `N = M + T` slots of the
key/value buffer, `S` keys one step attends to (at most `S_max`), `H` heads, `D` model width, `D_h` head
width, `F` feed-forward width, `L` layers.

With autograd, `FeedbackTransformerKV` records about fifteen graph nodes per layer and step; `T x L` tiny
operations then cost more bookkeeping than arithmetic. `FeedbackLoop` runs the same recurrence (equations in
`labnn.feedback`) with autograd off, keeping what the backward pass needs in `[T, ...]` buffers allocated for
this block (nothing survives the pass, nothing lives on a module), then walks the steps in reverse. Per step
it computes only gradients with respect to activations, the chain the recurrence needs. The rest waits until
every step is done and is then one large operation over all `T x B` rows:

$$\frac{\partial\mathcal{L}}{\partial W} = \sum_t g_t^\top x_t = G^\top X \quad \text{for every linear map;}$$

$$\frac{\partial\mathcal{L}}{\partial \gamma} = \sum_t g_t \odot \hat{x}_t, \qquad
\frac{\partial\mathcal{L}}{\partial \beta} = \sum_t g_t \quad \text{for every layer norm.}$$

Keys and values of step `j` receive gradient from every later step `t` and layer `l` that read them:
$$\frac{\partial\mathcal{L}}{\partial K_j} = \sum_{t > j,\ l} \frac{\partial\mathcal{L}}{\partial s^l_{t,j}}\,
\frac{q^l_t}{\sqrt{d_h}}, \qquad \frac{\partial\mathcal{L}}{\partial V_j} = \sum_{t > j,\ l} p^l_{t,j}\,
\frac{\partial\mathcal{L}}{\partial z^l_t}.$$
They are added in place into one gradient buffer shaped like the key/value buffer; when the reverse walk
reaches step `j`, slot `j` is complete and flows into the memory vector $m_j$.

Three choices keep the loop fast on a CPU, where each step's products have only `B` rows (measured with
`benchmarks/bench_feedback_kv.py`, 2 threads):

* The feed-forward products are computed *feature-major*, $W x^\top$ (`[F, B]`) instead of $x W^\top$
  (`[B, F]`): the BLAS library then splits the `F` output rows between the cores, which makes these
  `B = 16`-row products 1.4 to 1.8x faster. The backward pass likewise computes $W^\top g^\top$.
* Layer-norm and GELU outputs are not kept: the backward pass recomputes them, every step at once, from the
  kept inputs and statistics (exactly: the same operations on the same numbers).
* No buffer is larger than `[T, B, F]`, and the attention weights are packed step after step (step `i` has
  `min(M + i, window)` of them) instead of being padded to `S_max`. The allocator serves blocks of this size
  from memory freed by the previous step; larger blocks come freshly mapped from the operating system every
  time, a page fault per 4 KiB touched.

Every backward call allocates its own gradient buffers, so `backward(retain_graph=True)` twice and
`torch.autograd.grad` are exact; double backward raises. There is no dropout here:
`FeedbackTransformerKV` falls back to its autograd loop when it trains with dropout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Per layer, in this order (as `FeedbackLayer` names them): norm_attn.{weight,bias}, attn.q.{weight,bias},
# attn.out_proj.{weight,bias}, norm_ff.{weight,bias}, ff.up.{weight,bias}, ff.down.{weight,bias}.
# The first layer's norm_attn and q are used outside the loop (its queries do not depend on the memory).
PER_LAYER = 12
UP_W, DOWN_W = 8, 10  # where ff.up.weight and ff.down.weight sit among a layer's tensors


@dataclass(frozen=True)
class LoopSpec:
    """The loop's non-tensor arguments.

    Args:
        n_heads: attention heads `H`.
        window: keys a step attends to at most (`attn_len`, or `N` for all).
        eps: epsilon of every layer norm.
        keep: keep activations for a backward pass; must be True whenever any tensor input requires grad
            (False under `torch.no_grad`: scratch space only).
    """

    n_heads: int
    window: int
    eps: float
    keep: bool


def _layer_norm(x, weight, bias, eps, out):
    """Layer norm over the last dimension, writing `out = (output, mean, 1 / std)`."""
    torch.ops.aten.native_layer_norm.out(x, (x.size(-1),), weight, bias, eps, out0=out[0], out1=out[1], out2=out[2])
    return out[0]


def _normalized(x, mean, rstd, weight, bias):
    """A layer norm's output again, from its input and saved statistics (exactly what it returned)."""
    return torch.addcmul(bias, (x - mean) * rstd, weight)


def _layer_norm_input_grad(grad, x, mean, rstd, weight):
    return torch.ops.aten.native_layer_norm_backward(grad, x, (x.size(-1),), mean, rstd, weight, None,
                                                     [True, False, False])[0]


def _layer_norm_param_grads(grad, x, mean, rstd, weight, bias):
    """dγ and dβ summed over all rows of `grad` and `x` `[..., D]`."""
    d = x.size(-1)
    _, gw, gb = torch.ops.aten.native_layer_norm_backward(grad.reshape(-1, d), x.reshape(-1, d), (d,),
                                                          mean.reshape(-1, 1), rstd.reshape(-1, 1), weight,
                                                          bias, [False, True, True])
    return gw, gb


def _linear_grads(grad_out, inputs):
    """dW = G^T X and db = the sum of G over all rows (`[..., D_out]` and `[..., D_in]`)."""
    g, x = grad_out.reshape(-1, grad_out.size(-1)), inputs.reshape(-1, inputs.size(-1))
    return g.t() @ x, g.sum(0)


class FeedbackLoop(torch.autograd.Function):
    r"""`tops, kv = FeedbackLoop.apply(spec, x, q0, memory, biases, mix_logits, mem_w, mem_b, kv_w, kv_b, *params)`.

    `mem_w, mem_b` are `norm_mem`'s, `kv_w, kv_b` the shared key/value projection's, `params` the
    `PER_LAYER` tensors of each layer.

    Shape:
        x (the first layer's inputs) and q0 (its queries) `[B, T, D]`; memory (carried keys then values,
        detached) `[2, B, H, M, D_h]`; biases `[L, H, S_max]`, the relative bias of the key `d` steps back in
        column `S_max - d` -> tops `[B, T, D]`, kv `[2, B, H, N, D_h]` (no gradient flows back through kv).
    """

    @staticmethod
    def forward(ctx, spec: LoopSpec, x, q0, memory, biases, mix_logits, mem_w, mem_b, kv_w, kv_b, *params):
        (b, t, d), (_, _, h, m, dh), n_layers = x.shape, memory.shape, len(params) // PER_LAYER
        kv = memory.new_empty(2, b, h, m + t, dh)
        kv[:, :, :, :m] = memory
        mix, scale, s_max = mix_logits.softmax(0), 1 / math.sqrt(dh), biases.size(-1)
        a = _Activations(n_layers, m, t, spec, b, d, params[UP_W].size(0), h, x)
        a.xs[0], a.q[0] = x.transpose(0, 1), q0.transpose(0, 1)
        for i in range(t):
            j, s = (i if spec.keep else 0), min(m + i, spec.window)  # j: this step's slot in the buffers
            keys, values = kv[:, :, :, m + i - s : m + i].flatten(1, 2)  # [B*H, S, D_h] each
            for l in range(n_layers):
                ln1_w, ln1_b, q_w, q_b, o_w, o_b, ln2_w, ln2_b, up_w, up_b, down_w, down_b = _layer(params, l)
                x_in, z, x1 = a.xs[l, i], a.z[l, j], a.x1[l, j]
                if l:
                    normed = _layer_norm(x_in, ln1_w, ln1_b, spec.eps, (a.normed, a.mean1[l, j], a.rstd1[l, j]))
                    torch.addmm(q_b, normed, q_w.t(), out=a.q[l, i])
                if s:
                    qk = torch.bmm(a.q[l, i].view(b * h, 1, dh), keys.transpose(1, 2)).view(b, h, s)
                    p = torch.softmax(torch.add(biases[l, :, s_max - s :], qk, alpha=scale), -1, out=a.weights(l, j, s))
                    torch.bmm(p.view(b * h, 1, s), values, out=z.view(b * h, 1, dh))
                else:  # nothing to attend to yet: a zero attention output
                    z.zero_()
                torch.addmm(o_b, z, o_w.t(), out=x1).add_(x_in)
                normed = _layer_norm(x1, ln2_w, ln2_b, spec.eps, (a.normed, a.mean2[l, j], a.rstd2[l, j]))
                u = torch.addmm(up_b[:, None], up_w, normed.t(), out=a.u[l][j])  # feature-major: [F, B]
                torch.add(x1, torch.addmm(down_b[:, None], down_w, F.gelu(u)).t(), out=a.xs[l + 1, i])
            torch.mm(mix[None], a.xs[:, i].reshape(n_layers + 1, -1), out=a.mm[j].view(1, -1))  # m_i = sum_l w_l x^l_i
            normed = _layer_norm(a.mm[j], mem_w, mem_b, spec.eps, (a.nm[j], a.mean_m[j], a.rstd_m[j]))
            kv[:, :, :, m + i] = torch.addmm(kv_b, normed, kv_w.t()).view(b, 2, h, dh).transpose(0, 1)
        ctx.mark_non_differentiable(kv)
        if spec.keep:
            ctx.spec, ctx.saved, ctx.m, ctx.s_max = spec, a, m, s_max
            ctx.save_for_backward(kv, mix_logits, mem_w, mem_b, kv_w, *params)
        return a.xs[n_layers].transpose(0, 1), kv

    @staticmethod
    def backward(ctx, grad_tops, _):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "FeedbackLoop does not support double backward (create_graph=True); to differentiate twice, "
                "use FeedbackKVConfig(loop='autograd', batch_grads=False)"
            )
        if not hasattr(ctx, "spec"):
            raise RuntimeError("FeedbackLoop was run with LoopSpec(keep=False), which keeps no activations; set "
                               "keep=True whenever any of its tensor inputs requires grad")
        spec, a, m, s_max = ctx.spec, ctx.saved, ctx.m, ctx.s_max
        kv, mix_logits, mem_w, mem_b, kv_w, *params = ctx.saved_tensors
        n_layers, (t, b, d), h = len(params) // PER_LAYER, a.xs.shape[1:], spec.n_heads
        dh = d // h
        scale, mix = 1 / math.sqrt(dh), mix_logits.softmax(0)
        alphas = mix.tolist()  # the mixing weights as Python numbers, for torch.add(..., alpha=)
        g = _Gradients(n_layers, t, b, d, a.u[0].size(1), h, s_max, kv)
        # the feed-forward weights transposed, contiguous: products W^T g^T come out feature-major (see above)
        up_t = [_layer(params, l)[UP_W].t().contiguous() for l in range(n_layers)]
        down_t = [_layer(params, l)[DOWN_W].t().contiguous() for l in range(n_layers)]
        grad_kv = torch.zeros_like(kv)
        grad_tops = torch.zeros_like(a.xs[0]) if grad_tops is None else grad_tops.transpose(0, 1)
        for i in reversed(range(t)):
            s = min(m + i, spec.window)
            keys, values = kv[:, :, :, m + i - s : m + i].flatten(1, 2)
            grad_keys, grad_values = grad_kv[:, :, :, m + i - s : m + i].flatten(1, 2)
            # slot m + i is complete: every later step has added what it read; on into m_i
            g.kv[i] = grad_kv[:, :, :, m + i].transpose(0, 1).reshape(b, 2 * d)
            torch.mm(g.kv[i], kv_w, out=g.nm[i])
            g.mm[i] = _layer_norm_input_grad(g.nm[i], a.mm[i], a.mean_m[i], a.rstd_m[i], mem_w)
            # dL/d(top output): from the head and from m_i
            grad = torch.add(grad_tops[i], g.mm[i], alpha=alphas[n_layers], out=g.down[n_layers - 1][i])
            for l in reversed(range(n_layers)):  # grad: dL/d(layer l's output), kept in g.down[l][i]
                ln1_w, _, q_w, _, o_w, _, ln2_w, *_ = _layer(params, l)
                grad_up = torch.mm(down_t[l], grad.t())  # feature-major [F, B], like u
                torch.ops.aten.gelu_backward.grad_input(grad_up, a.u[l][i], grad_input=g.up[l][i])
                g.c[l, i] = torch.mm(up_t[l], g.up[l][i]).t()
                ln2_grad = _layer_norm_input_grad(g.c[l, i], a.x1[l, i], a.mean2[l, i], a.rstd2[l, i], ln2_w)
                grad = torch.add(grad, ln2_grad, out=g.out[l, i])
                grad_z = torch.mm(grad, o_w, out=g.z[l]).view(b * h, 1, dh)
                if s:
                    p = a.weights(l, i, s)
                    grad_p = torch.bmm(grad_z, values.transpose(1, 2)).view(b, h, s)
                    grad_scores = torch.ops.aten._softmax_backward_data.out(
                        grad_p, p, -1, p.dtype, grad_input=g.scores[l, : b * h * s].view(b, h, s))
                    g.biases[l, :, s_max - s :] += grad_scores.sum(0)
                    torch.bmm(grad_scores.view(b * h, 1, s), keys, out=g.q[l, i].view(b * h, 1, dh)).mul_(scale)
                else:
                    g.q[l, i].zero_()
                below = g.down[l - 1][i] if l else g.xs[0, i]  # dL/d(layer l's input) and the layer below's output
                if l:
                    torch.mm(g.q[l, i], q_w, out=g.a[l, i])
                    ln1_grad = _layer_norm_input_grad(g.a[l, i], a.xs[l, i], a.mean1[l, i], a.rstd1[l, i], ln1_w)
                    grad = torch.add(grad, ln1_grad, out=below)
                grad = torch.add(grad, g.mm[i], alpha=alphas[l], out=below)
            if s:  # what this step's layers add to the gradients of the keys and values they read
                per_head = (n_layers, b * h, -1)  # [L, B*H, *] -> [B*H, L, *] for one matmul over the layers
                grad_scores = g.scores[:, : b * h * s].view(per_head).transpose(0, 1)
                queries = a.q[:, i].reshape(per_head).transpose(0, 1)
                grad_keys.add_(torch.bmm(grad_scores.transpose(1, 2), queries), alpha=scale)
                weights = a.weights(slice(None), i, s).reshape(per_head).transpose(0, 1)
                grad_values.add_(torch.bmm(weights.transpose(1, 2), g.z.view(per_head).transpose(0, 1)))
        grad_params = []
        for l in range(n_layers):
            ln1_w, ln1_b, _, _, _, _, ln2_w, ln2_b, _, _, _, _ = _layer(params, l)
            c = _normalized(a.x1[l], a.mean2[l], a.rstd2[l], ln2_w, ln2_b)
            if l:
                normed = _normalized(a.xs[l], a.mean1[l], a.rstd1[l], ln1_w, ln1_b)
                grad_params += [*_layer_norm_param_grads(g.a[l], a.xs[l], a.mean1[l], a.rstd1[l], ln1_w, ln1_b),
                                *_linear_grads(g.q[l], normed)]
            else:
                grad_params += [None] * 4
            grad_params += [
                *_linear_grads(g.out[l], a.z[l]),
                *_layer_norm_param_grads(g.c[l], a.x1[l], a.mean2[l], a.rstd2[l], ln2_w, ln2_b),
                *_linear_grads(g.up[l].transpose(1, 2), c),
                *_linear_grads(g.down[l], F.gelu(a.u[l]).transpose(1, 2)),
            ]
        grad_mix = torch.einsum("tbd,ltbd->l", g.mm, a.xs)  # dL/dw_l, then through the softmax
        grad_logits = mix * (grad_mix - (mix * grad_mix).sum())
        return (None, g.xs[0].transpose(0, 1), g.q[0].transpose(0, 1), None, g.biases, grad_logits,
                *_layer_norm_param_grads(g.nm, a.mm, a.mean_m, a.rstd_m, mem_w, mem_b), *_linear_grads(g.kv, a.nm),
                *grad_params)


def _layer(params, l):
    return params[l * PER_LAYER : (l + 1) * PER_LAYER]


class _Activations:
    """What the forward pass keeps for the backward pass, `slots` steps of it (`T`, or 1 when nothing is kept):
    each layer's input and queries, the attention output, the statistics of each layer norm, the feed-forward
    pre-activations and the attention weights. Layer norm outputs and GELU outputs are not kept: the backward
    pass recomputes them, all steps at once. No buffer exceeds `[T, B, F]`: larger blocks would come freshly
    mapped from the operating system at every pass (a page fault per 4 KiB), smaller ones are reused."""

    def __init__(self, n_layers, m, t, spec, b, d, f, h, like):
        new, slots = like.new_empty, (t if spec.keep else 1)
        self.xs = new(n_layers + 1, t, b, d)  # each layer's input; xs[L] is the top output
        self.q = new(n_layers, t, b, d)
        self.z, self.x1 = new(n_layers, slots, b, d), new(n_layers, slots, b, d)
        self.mean1, self.rstd1, self.mean2, self.rstd2 = (new(n_layers, slots, b, 1) for _ in range(4))
        self.u = [new(slots, f, b) for _ in range(n_layers)]  # feature-major
        self.mm, self.nm = new(slots, b, d), new(slots, b, d)
        self.mean_m, self.rstd_m = new(slots, b, 1), new(slots, b, 1)
        self.normed = new(b, d)  # scratch: the current layer norm's output
        # attention weights packed step after step: step i's [B, H, S_i] at offset[i], S_i = min(M + i, window)
        keys = [min(m + i, spec.window) for i in range(t)] if spec.keep else [min(m + t - 1, spec.window)]
        self.offset = [0]
        for s in keys:
            self.offset.append(self.offset[-1] + b * h * s)
        self.p, self.shape = new(n_layers, self.offset[-1]), (b, h)

    def weights(self, l, j, s):
        """Slot `j`'s attention weights over `s` keys in layer `l` (`l = slice(None)`: all layers, `[L, ...]`).

        Shape:
            -> `[B, H, S]`.
        """
        start = self.offset[j]
        return self.p[l, start : start + self.shape[0] * self.shape[1] * s].unflatten(-1, (*self.shape, s))


class _Gradients:
    """Gradients of the loss with respect to the outputs of each linear map and layer norm (and the first
    layer's inputs and queries), one slot per step; `kv` holds those of the memory's key/value projection."""

    def __init__(self, n_layers, t, b, d, f, h, s_max, like):
        new = like.new_empty
        self.xs = new(1, t, b, d)
        self.q, self.a, self.out, self.c = (new(n_layers, t, b, d) for _ in range(4))
        self.down = [new(t, b, d) for _ in range(n_layers)]
        self.up = [new(t, f, b) for _ in range(n_layers)]  # feature-major, like the activations
        self.mm, self.nm, self.kv = new(t, b, d), new(t, b, d), new(t, b, 2 * d)
        self.biases = like.new_zeros(n_layers, h, s_max)
        # of the current step only; each layer's [B, H, S] scores contiguous (the `out=` of the softmax gradient)
        self.scores, self.z = new(n_layers, b * h * s_max), new(n_layers, b, d)
