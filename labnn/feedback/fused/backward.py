r"""The backward pass of the fused feedback loop (`labnn.feedback.fused.loop.FeedbackLoop`): the
steps in reverse, each layer's gradients derived beside the code that computes them.

Dimension letters (the package legend): `B` batch, `T` steps of the block, `M` carried
memory steps, `S` keys one step attends to (at most `S_max`), `H` heads, `D` model width,
`D_h` head width, `F` feed-forward width, `L` layers. Value names as in
`labnn.feedback.fused.buffers`: $x^l$ the input of layer `l`, $q$, $z$, $x'$, $u$ inside a
layer, $m$ the memory vector; $g_v$ stands for $\partial\mathcal{L}/\partial v$.

Keys and values of step `j` receive gradient from every later step `t` and layer `l` that
read them:
$$g_{K_j} = \sum_{t > j,\ l} g_{s^l_{t,j}}\, \frac{q^l_t}{\sqrt{d_h}}, \qquad
g_{V_j} = \sum_{t > j,\ l} p^l_{t,j}\, g_{z^l_t} .$$
They are added in place into one gradient buffer shaped like the key/value buffer; when
the reverse walk reaches step `j`, slot `j` is complete and flows into the memory vector
$m_j$.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from labnn.feedback.fused.buffers import (Activations, Gradients, gelu_grad, layer_norm_input_grad,
                                          layer_norm_param_grads, linear_grads, normalized,
                                          softmax_grad)


def backward(spec, a: Activations, m: int, s_max: int, kv, shared, layers, grad_tops):
    r"""Gradients of the loss with respect to every input of the loop.

    Walking the steps from last to first, step `i` needs the gradient of its keys and
    values, which only later steps read: complete by now. From it come $g_{m_i}$
    (`_memory_backward`), then layer after layer from the top (`_layer_backward`), each
    output's gradient being what the head sent, what the memory vector sent, and what
    the layer above sent back. Last, the step's queries and attention weights add to the
    gradients of the keys and values it read (`_kv_backward`). Weight gradients come at
    the end, once, over all steps (`_layer_param_grads`, `_memory_param_grads`).

    Returns:
        `(grad_x, grad_q0, grad_biases, grad_shared, grad_layers)`: the gradients of the
        embeddings `[B, T, D]`, of layer 0's queries `[B, T, D]`, of the relative biases
        `[L, H, S_max]`, a `MemoryParams` and a `LayerParams` per layer.
    """
    n_layers, (t, b, d), h = len(layers), a.x.shape[1:], spec.n_heads
    g = Gradients(n_layers, t, b, d, a.ff_pre[0].size(1), h, s_max, kv)
    mix = shared.mix_logits.softmax(0)  # [L + 1]: 0-d tensors, never read on the host
    # the feed-forward weights transposed, contiguous: W^T g^T comes out feature-major
    up_t = [p.up_w.t().contiguous() for p in layers]
    down_t = [p.down_w.t().contiguous() for p in layers]
    grad_kv = torch.zeros_like(kv)
    if grad_tops is None:
        grad_tops = torch.zeros_like(a.x[0])
    else:
        grad_tops = grad_tops.transpose(0, 1)
    for i in reversed(range(t)):
        s = min(m + i, spec.window)
        keys, values = kv[:, :, :, m + i - s : m + i].flatten(1, 2)  # [B H, S, D_h]
        _memory_backward(shared, grad_kv[:, :, :, m + i], i, a, g)
        grad = torch.addcmul(grad_tops[i], g.memory[i], mix[n_layers],
                             out=g.layer_out[n_layers - 1][i])
        for l in reversed(range(n_layers)):
            grad = _layer_backward(layers[l], l, i, grad, keys, values, mix[l], a, g,
                                   spec, up_t[l], down_t[l])
        if s:
            grads = grad_kv[:, :, :, m + i - s : m + i].flatten(1, 2)
            _kv_backward(grads, i, s, a, g, spec)
    grad_layers = [_layer_param_grads(p, l, a, g) for l, p in enumerate(layers)]
    grad_shared = _memory_param_grads(shared, mix, a, g)
    grad_x, grad_q0 = g.x0.transpose(0, 1), g.q[0].transpose(0, 1)
    return grad_x, grad_q0, g.biases, grad_shared, grad_layers


def _memory_backward(shared, grad_kv_i, i, a: Activations, g: Gradients) -> None:
    r"""Step `i`'s key/value gradient into its memory vector: with
    $n = \mathrm{LN}(m_i)$ and $(K_i, V_i) = W^{KV} n + b^{KV}$,
    $$g_n = g_{(K_i, V_i)}\, W^{KV}, \qquad g_{m_i} = \mathrm{LN}'(m_i)^\top g_n .$$

    Shape:
        grad_kv_i `[2, B, H, D_h]`.
    """
    b = grad_kv_i.size(1)
    g.kv[i] = grad_kv_i.transpose(0, 1).reshape(b, g.kv.size(-1))
    torch.mm(g.kv[i], shared.kv_w, out=g.memory_normed[i])
    g.memory[i] = layer_norm_input_grad(g.memory_normed[i], a.memory[i], a.mean_mem[i],
                                        a.rstd_mem[i], shared.norm_mem_w)


def _layer_backward(p, l, i, grad, keys, values, alpha, a: Activations, g: Gradients,
                    spec, up_t, down_t):
    r"""Layer `l` at step `i` backwards: from $g_{x^{l+1}}$ (`grad`) to $g_{x^l}$.

    The layer's output is $x^{l+1} = x' + W_2\, \mathrm{GELU}(u) + b_2$ with
    $u = W_1 \mathrm{LN}_2(x') + b_1$, so
    $$g_u = \mathrm{GELU}'(u) \odot W_2^\top g_{x^{l+1}}, \qquad
    g_{x'} = g_{x^{l+1}} + \mathrm{LN}_2'(x')^\top W_1^\top g_u .$$
    Returns the gradient of the layer's input, written where the layer below (or the
    loop's input) keeps its output's gradient.
    """
    # Feed-forward, feature-major as in the forward pass: W_2^T g^T is [F, B].
    grad_up = torch.mm(down_t, grad.t())
    gelu_grad(grad_up, a.ff_pre[l][i], out=g.ff_pre[l][i])
    g.ff_normed[l, i] = torch.mm(up_t, g.ff_pre[l][i]).t()
    ln_grad = layer_norm_input_grad(g.ff_normed[l, i], a.x_mid[l, i], a.mean_ff[l, i],
                                    a.rstd_ff[l, i], p.norm_ff_w)
    grad = torch.add(grad, ln_grad, out=g.x_mid[l, i])
    _attention_backward(p, l, i, grad, keys, values, a, g, spec)
    # The input $x^l$ feeds the residual $x' = x^l + \dots$, the query
    # $q = W^Q \mathrm{LN}_1(x^l) + b^Q$ and the memory vector $m_i$ (weight $\alpha_l$):
    # $$g_{x^l} = g_{x'} + \mathrm{LN}_1'(x^l)^\top W^{Q\top} g_q + \alpha_l\, g_{m_i}
    # .$$ Layer 0's query term goes through autograd (its queries were computed before
    # the loop).
    below = g.layer_out[l - 1][i] if l else g.x0[i]
    if l:
        torch.mm(g.q[l, i], p.q_w, out=g.attn_normed[l, i])
        ln_grad = layer_norm_input_grad(g.attn_normed[l, i], a.x[l, i], a.mean_attn[l, i],
                                        a.rstd_attn[l, i], p.norm_attn_w)
        grad = torch.add(grad, ln_grad, out=below)
    return torch.addcmul(grad, g.memory[i], alpha, out=below)


def _attention_backward(p, l, i, grad_mid, keys, values, a: Activations, g: Gradients,
                        spec) -> None:
    r"""From $g_{x'}$ back through $x' = x + W^O z + b^O$ and the attention
    $z = p V$, $p = \mathrm{softmax}(\sigma)$,
    $\sigma = q K^\top / \sqrt{d_h} + b^{\mathrm{rel}}$:
    $$g_z = g_{x'} W^O, \qquad g_p = g_z V^\top, \qquad
    g_\sigma = p \odot \big(g_p - \textstyle\sum_j p_j\, (g_p)_j\big),$$
    $$g_q = g_\sigma K / \sqrt{d_h}, \qquad g_{b^{\mathrm{rel}}} \mathrel{+}= \textstyle
    \sum_{\text{batch}} g_\sigma .$$
    $g_\sigma$ and $g_z$ stay in the step's scratch rows for `_kv_backward`.
    """
    b, d = grad_mid.shape
    h = spec.n_heads
    grad_z = torch.mm(grad_mid, p.out_proj_w, out=g.z[l]).view(b * h, 1, d // h)
    s = keys.size(1)
    if not s:  # nothing was attended to: no query gradient
        g.q[l, i].zero_()
        return
    weights = a.weights(l, i, s)
    grad_p = torch.bmm(grad_z, values.transpose(1, 2)).view(b, h, s)
    scratch = g.scores[l, : b * h * s].view(b, h, s)
    grad_scores = softmax_grad(grad_p, weights, out=scratch)
    s_max = g.biases.size(-1)
    g.biases[l, :, s_max - s :] += grad_scores.sum(0)
    scale = 1 / math.sqrt(d // h)
    grad_q = g.q[l, i].view(b * h, 1, d // h)
    torch.bmm(grad_scores.view(b * h, 1, s), keys, out=grad_q).mul_(scale)


def _kv_backward(grads, i, s, a: Activations, g: Gradients, spec) -> None:
    r"""What step `i`'s layers add to the gradients of the `s` keys and values they read,
    $$g_{K} \mathrel{+}= \sum_l g_{\sigma^l}^\top\, q^l_i / \sqrt{d_h}, \qquad
    g_{V} \mathrel{+}= \sum_l p^{l\top} g_{z^l},$$
    one batched product over the layers (`[L, B H, *]` seen as `[B H, L, *]`).

    Shape:
        grads: the key and value gradient buffers, each `[B H, S, D_h]`.
    """
    grad_keys, grad_values = grads
    n_layers, b, h = a.q.size(0), a.q.size(2), spec.n_heads
    per_head = (n_layers, b * h, -1)
    grad_scores = g.scores[:, : b * h * s].view(per_head).transpose(0, 1)
    queries = a.q[:, i].reshape(per_head).transpose(0, 1)
    scale = 1 / math.sqrt(a.q.size(-1) // h)
    grad_keys.add_(torch.bmm(grad_scores.transpose(1, 2), queries), alpha=scale)
    weights = a.weights(slice(None), i, s).reshape(per_head).transpose(0, 1)
    grad_z = g.z.view(per_head).transpose(0, 1)
    grad_values.add_(torch.bmm(weights.transpose(1, 2), grad_z))


def _layer_param_grads(p, l, a: Activations, g: Gradients):
    r"""Layer `l`'s weight gradients, each one product over all `T B` rows:
    `linear_grads` for every linear map, `layer_norm_param_grads` for every layer norm
    (their outputs recomputed from the kept inputs). Layer 0's `norm_attn` and `attn.q`
    get theirs through autograd (None here).

    Returns:
        A `LayerParams` of gradients.
    """
    ff_in = normalized(a.x_mid[l], a.mean_ff[l], a.rstd_ff[l], p.norm_ff_w, p.norm_ff_b)
    norm_attn = q = (None, None)
    if l:
        attn_in = normalized(a.x[l], a.mean_attn[l], a.rstd_attn[l], p.norm_attn_w,
                             p.norm_attn_b)
        norm_attn = layer_norm_param_grads(g.attn_normed[l], a.x[l], a.mean_attn[l],
                                           a.rstd_attn[l], p.norm_attn_w, p.norm_attn_b)
        q = linear_grads(g.q[l], attn_in)
    out_proj = linear_grads(g.x_mid[l], a.z[l])
    norm_ff = layer_norm_param_grads(g.ff_normed[l], a.x_mid[l], a.mean_ff[l],
                                     a.rstd_ff[l], p.norm_ff_w, p.norm_ff_b)
    up = linear_grads(g.ff_pre[l].transpose(1, 2), ff_in)
    down = linear_grads(g.layer_out[l], F.gelu(a.ff_pre[l]).transpose(1, 2))
    return p._replace(
        norm_attn_w=norm_attn[0], norm_attn_b=norm_attn[1], q_w=q[0], q_b=q[1],
        out_proj_w=out_proj[0], out_proj_b=out_proj[1], norm_ff_w=norm_ff[0],
        norm_ff_b=norm_ff[1], up_w=up[0], up_b=up[1], down_w=down[0], down_b=down[1])


def _memory_param_grads(shared, mix, a: Activations, g: Gradients):
    r"""Gradients of the mixing logits, `norm_mem` and the key/value projection.

    With $m_t = \sum_l \alpha_l x^l_t$, $\alpha = \mathrm{softmax}(w)$:
    $g_{\alpha_l} = \sum_t \langle g_{m_t}, x^l_t \rangle$, then through the softmax
    $g_{w} = \alpha \odot (g_\alpha - \langle \alpha, g_\alpha \rangle)$.

    Returns:
        A `MemoryParams` of gradients.
    """
    grad_mix = torch.einsum("tbd,ltbd->l", g.memory, a.x)
    norm_w, norm_b = layer_norm_param_grads(g.memory_normed, a.memory, a.mean_mem,
                                            a.rstd_mem, shared.norm_mem_w,
                                            shared.norm_mem_b)
    kv_w, kv_b = linear_grads(g.kv, a.memory_normed)
    return shared._replace(mix_logits=mix * (grad_mix - (mix * grad_mix).sum()),
                           norm_mem_w=norm_w, norm_mem_b=norm_b, kv_w=kv_w, kv_b=kv_b)
