r"""What the fused feedback loop (`labnn.feedback.fused.loop`) keeps between its passes, and
the ATen kernels it calls with `out=` buffers.

Dimension letters (the package legend): `B` batch, `T` steps of the block, `M` carried
memory steps, `S` keys one step attends to (at most `S_max`), `H` heads, `D` model
width, `D_h` head width, `F` feed-forward width, `L` layers.

Names follow the equations of `labnn.feedback.layer.FeedbackLayer` for layer `l` at step
`t`: $x^l$ the layer's input ($x^0$ the embedding, $x^L$ the top output), $q$ its query,
$z$ the attention output, $x' = x + W^O z + b^O$ the residual after attention,
$u = W_1 \mathrm{LN}_2(x') + b_1$ the feed-forward pre-activation, $m$ the step's memory
vector.
`Activations` holds those values, `Gradients` the loss's gradient with respect to them.
"""

from __future__ import annotations

from functools import partial

import torch

_aten = torch.ops.aten


def layer_norm(x, weight, bias, eps, out):
    """Layer norm over the last dimension, writing `out = (output, mean, 1 / std)`;
    returns the output."""
    _aten.native_layer_norm.out(x, (x.size(-1),), weight, bias, eps,
                                out0=out[0], out1=out[1], out2=out[2])
    return out[0]


def normalized(x, mean, rstd, weight, bias):
    r"""A layer norm's output again, $\gamma \odot (x - \mu)\, \sigma^{-1} + \beta$,
    from its input and saved statistics, computed in float32 at least and rounded once,
    as the kernel does: in float32 on the CPU the same bits as it returned (tested); in
    half precision equal up to rounding (its statistics may have been rounded too)."""
    wide = torch.promote_types(x.dtype, torch.float32)
    centred = (x.to(wide) - mean) * rstd
    return torch.addcmul(bias.to(wide), centred, weight.to(wide)).to(x.dtype)


def stats_dtype(like: torch.Tensor) -> torch.dtype:
    """The dtype of the mean and `1 / std` that `native_layer_norm` returns, and its `out=`
    form demands, for inputs and weights of `like`'s dtype and device: float32 for half
    precision on a GPU (its kernels accumulate in float32 and keep that), the input's own
    on a CPU. Asked of the kernel, on one number, rather than written as a rule per
    device."""
    one = like.new_ones(1, 1)
    return _aten.native_layer_norm(one, (1,), one[0], one[0], 1e-5)[1].dtype


def layer_norm_input_grad(grad, x, mean, rstd, weight):
    r"""$\partial\mathcal{L}/\partial x$ of a layer norm, given the gradient of its
    output."""
    return _aten.native_layer_norm_backward(grad, x, (x.size(-1),), mean, rstd, weight,
                                            None, [True, False, False])[0]


def layer_norm_param_grads(grad, x, mean, rstd, weight, bias):
    r"""$\partial\mathcal{L}/\partial\gamma = \sum g \odot \hat{x}$ and
    $\partial\mathcal{L}/\partial\beta = \sum g$, over all rows of `grad` and `x` `[...,
    D]`."""
    d = x.size(-1)
    _, grad_w, grad_b = _aten.native_layer_norm_backward(
        grad.reshape(-1, d), x.reshape(-1, d), (d,), mean.reshape(-1, 1),
        rstd.reshape(-1, 1), weight, bias, [False, True, True])
    return grad_w, grad_b


def linear_grads(grad_out, inputs):
    r"""$\partial\mathcal{L}/\partial W = G^\top X$ and
    $\partial\mathcal{L}/\partial b = \sum_{\text{rows}} G$ of a linear map, all rows
    at once.

    Shape:
        grad_out `[..., D_out]`, inputs `[..., D_in]` -> `[D_out, D_in]`, `[D_out]`.
    """
    g = grad_out.reshape(-1, grad_out.size(-1))
    x = inputs.reshape(-1, inputs.size(-1))
    return g.t() @ x, g.sum(0)


def gelu_grad(grad, u, out):
    r"""$\mathrm{GELU}'(u) \odot g$, written into `out`."""
    return _aten.gelu_backward.grad_input(grad, u, grad_input=out)


def softmax_grad(grad, p, out):
    r"""$p \odot (g - \sum_j p_j g_j)$ over the last dimension, written into `out`."""
    return _aten._softmax_backward_data.out(grad, p, -1, p.dtype, grad_input=out)


class Activations:
    r"""What the forward pass keeps for the backward pass, in `slots` steps (`T`, or 1
    when nothing is kept: scratch space).

    Attributes:
        x: `[L+1, T, B, D]`, $x^l_t$ (always `T` steps: they are also the loop's outputs).
        q: `[L, T, B, D]`, the queries.
        z, x_mid: `[L, slots, B, D]`, the attention output $z$ and $x'$.
        mean_attn, rstd_attn, mean_ff, rstd_ff: `[L, slots, B, 1]`, the statistics of
            $\mathrm{LN}_1$ and $\mathrm{LN}_2$.
        ff_pre: per layer `[slots, F, B]`, $u$ stored feature-major (see
            `labnn.feedback.fused.loop`).
        memory, memory_normed: `[slots, B, D]`, $m_t$ and $\mathrm{LN}(m_t)$;
            statistics `mean_mem`, `rstd_mem`.
        normed: `[B, D]`, scratch for the current layer norm's output (recomputed later).

    Layer norm and GELU outputs are not kept: the backward pass recomputes them, all
    steps at once. The feed-forward pre-activations are kept one `[T, F, B]` buffer per
    layer, not one `[L, T, F, B]`: larger blocks come freshly mapped from the operating
    system at every pass (a page fault per 4 KiB), smaller ones are reused (`x`,
    `[L+1, T, B, D]`, is one larger block).
    """

    def __init__(self, n_layers, m, t, b, d, f, h, window, keep, like):
        """Allocate every buffer for `t` steps (`slots` of them for what the backward
        pass needs), shaped, typed and placed like `like` (the layer norms' statistics
        typed as their kernel keeps them, `stats_dtype`).
        """
        new, slots = like.new_empty, (t if keep else 1)
        stats = partial(like.new_empty, dtype=stats_dtype(like))
        self.x = new(n_layers + 1, t, b, d)
        self.q = new(n_layers, t, b, d)
        self.z, self.x_mid = new(n_layers, slots, b, d), new(n_layers, slots, b, d)
        self.mean_attn, self.rstd_attn, self.mean_ff, self.rstd_ff = (
            stats(n_layers, slots, b, 1) for _ in range(4))
        self.ff_pre = [new(slots, f, b) for _ in range(n_layers)]
        self.memory, self.memory_normed = new(slots, b, d), new(slots, b, d)
        self.mean_mem, self.rstd_mem = stats(slots, b, 1), stats(slots, b, 1)
        self.normed = new(b, d)
        # attention weights packed step after step: step i's [B, H, S_i] at offset[i],
        # where S_i = min(M + i, window); a single step's room when nothing is kept
        keys = ([min(m + i, window) for i in range(t)] if keep
                else [min(m + t - 1, window)])
        self.offset = [0]
        for s in keys:
            self.offset.append(self.offset[-1] + b * h * s)
        self._weights, self._heads = new(n_layers, self.offset[-1]), (b, h)

    def weights(self, l, j, s):
        """Slot `j`'s attention weights over `s` keys in layer `l` (`l = slice(None)`:
        every layer's, `[L, B, H, S]`).

        Shape:
            -> `[B, H, S]`.
        """
        start, (b, h) = self.offset[j], self._heads
        return self._weights[l, start : start + b * h * s].unflatten(-1, (b, h, s))


class Gradients:
    r"""The loss's gradient with respect to the values `Activations` names, one slot per
    step.

    Attributes:
        x0: `[T, B, D]`, of the first layer's inputs $x^0$ (the loop's input).
        q, attn_normed: `[L, T, B, D]`, of the queries and of $\mathrm{LN}_1(x)$.
        x_mid, ff_normed: `[L, T, B, D]`, of $x'$ and of $\mathrm{LN}_2(x')$.
        layer_out: per layer `[T, B, D]`, of its output $x^{l+1}$.
        ff_pre: per layer `[T, F, B]`, of $u$ (feature-major, like $u$).
        memory, memory_normed, kv: `[T, B, D]`, `[T, B, D]`, `[T, B, 2D]`, of $m_t$,
            $\mathrm{LN}(m_t)$ and its key/value projection.
        biases: `[L, H, S_max]`, of the relative biases (summed over the block). scores,
        z: of the current step only: each layer's scores `[B, H, S]` packed in a row
            of `[L, B H S_max]`, and its attention output `[L, B, D]`.
    """

    def __init__(self, n_layers, t, b, d, f, h, s_max, like):
        """Allocate the gradient buffers of one backward pass (new ones every call, so
        repeated backward passes are exact); the bias gradient starts at zero.
        """
        new = like.new_empty
        self.x0 = new(t, b, d)
        self.q, self.attn_normed, self.x_mid, self.ff_normed = (
            new(n_layers, t, b, d) for _ in range(4))
        self.layer_out = [new(t, b, d) for _ in range(n_layers)]
        self.ff_pre = [new(t, f, b) for _ in range(n_layers)]
        self.memory, self.memory_normed = new(t, b, d), new(t, b, d)
        self.kv = new(t, b, 2 * d)
        self.biases = like.new_zeros(n_layers, h, s_max)
        self.scores, self.z = new(n_layers, b * h * s_max), new(n_layers, b, d)
