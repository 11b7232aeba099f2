"""`labnn.feedback.fused.loop.FeedbackLoop` on its own: its hand-written backward against
finite differences (`gradcheck`, float64), its values and gradients against the one
definition of a step (`labnn.feedback.layer.feedback_step`) stepped token by token, and
against autograd's loop over the same parameters."""

from __future__ import annotations

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.layer import RelativeBias, feedback_step, memory_keys_values
from labnn.feedback.fused.loop import LayerParams, LoopSpec, MemoryParams, fused_loop

B, T, D, H, F, L = 2, 3, 8, 2, 16, 2
CASES = [
    (0, None),
    (2, None),
    (2, 2),
]  # (M carried steps, window < M + T or None = all)


def model(window: int | None, seed: int = 0) -> FeedbackTransformerKV:
    """A tiny float64 KV model with every parameter random (biases and mix logits too)."""
    torch.manual_seed(seed)
    config = FeedbackKVConfig(
        vocab_size=5,
        d_model=D,
        n_heads=H,
        n_layers=L,
        d_ff=F,
        max_distance=4,
        attn_len=window,
    )
    kv = FeedbackTransformerKV(config).double()
    with torch.no_grad():
        for p in kv.parameters():
            p.normal_(0, 0.5)
    return kv


def inputs(m: int, seed: int = 1):
    """Embeddings, first-layer queries `[B, T, D]` and carried keys/values `[2, B, H, M,
    D_h]`."""
    gen = torch.Generator().manual_seed(seed)
    x, q0 = (torch.randn(B, T, D, generator=gen, dtype=torch.float64) for _ in range(2))
    memory = torch.randn(2, B, H, m, D // H, generator=gen, dtype=torch.float64)
    return x, q0, memory


@pytest.mark.parametrize("m, window", CASES, ids=lambda c: str(c))
def test_gradcheck_float64(m, window):
    kv = model(window)
    x, q0, memory = inputs(m)
    w = window or m + T
    tables = torch.stack([layer.attn.rel.bias for layer in kv.layers]).detach()
    biases = RelativeBias.lookup(tables, min(m + T - 1, w))
    shared = MemoryParams.of(kv)
    layers = [LayerParams.of(layer) for layer in kv.layers]
    n = len(MemoryParams._fields)
    k = len(LayerParams._fields)

    def f(x, q0, biases, *tensors):
        named = [LayerParams(*tensors[n + i * k : n + (i + 1) * k]) for i in range(L)]
        spec = LoopSpec(H, w, 1e-5, keep_activations=True)
        return fused_loop(
            spec, x, q0, memory, biases, MemoryParams(*tensors[:n]), named
        )[0]

    leaves = [
        t.detach().clone().requires_grad_()
        for t in (x, q0, biases, *shared, *(p for layer in layers for p in layer))
    ]
    assert torch.autograd.gradcheck(
        f, tuple(leaves), eps=1e-6, atol=1e-5, fast_mode=True
    )


def step_the_definition(kv: FeedbackTransformerKV, x, q0, memory, window: int):
    """The block's loop written with the one definition only: per token
    `feedback_step` (each layer's own relative bias, layer 0's query given), then
    `memory_keys_values` appended to the keys/values the next token reads."""
    n_layers, keys_values, tops = len(kv.layers), memory, []
    for i in range(x.size(1)):
        s = min(keys_values.size(3), window)
        k, v = keys_values.narrow(3, keys_values.size(3) - s, s).unbind(0)
        top, m_i = feedback_step(kv.layers, kv.mix, x[:, i], [k] * n_layers,
                                 [v] * n_layers, query=q0[:, i])
        new = memory_keys_values(m_i, kv.norm_mem, kv.kv, H)  # [2, B, H, D_h]
        keys_values = torch.cat([keys_values, new[:, :, :, None]], 3)
        tops.append(top)
    return torch.stack(tops, 1), keys_values


@pytest.mark.parametrize("m, window", CASES + [(0, 2)], ids=lambda c: str(c))
def test_fused_loop_mirrors_the_one_feedback_step_token_by_token(m, window):
    kv = model(window)
    x, q0, memory = inputs(m)
    x, q0 = x.requires_grad_(), q0.requires_grad_()
    w = window or m + T
    wanted = [x, q0, *kv.parameters()]
    results = []
    for loop in (kv._fused_block, lambda *a: step_the_definition(kv, *a, w)):
        tops, keys_values = loop(x, q0, memory)
        weight = torch.linspace(-1, 1, tops.numel(), dtype=tops.dtype).view_as(tops)
        grads = torch.autograd.grad((tops * weight).sum(), wanted, allow_unused=True)
        results.append((tops, keys_values, grads))
    (tops, keys_values, got), (want_tops, want_kv, want) = results
    for i in range(T):  # every token's top output and memory key/value
        torch.testing.assert_close(tops[:, i], want_tops[:, i])
        torch.testing.assert_close(keys_values[..., m + i, :], want_kv[..., m + i, :].detach())
    torch.testing.assert_close(keys_values[..., :m, :], memory)
    for name, g, w in zip(["x", "q0", *dict(kv.named_parameters())], got, want):
        if name.endswith(("0.norm_attn.weight", "0.norm_attn.bias", "0.attn.q.weight",
                          "0.attn.q.bias")):
            assert g is None and w is None, name  # layer 0's query came computed
        else:
            torch.testing.assert_close(g, w, msg=lambda text: f"{name}: {text}")
    grad_x = got[0]
    for i in range(T):  # per token: the gradient reaching each embedding
        torch.testing.assert_close(grad_x[:, i], want[0][:, i])


@pytest.mark.parametrize("m, window", CASES, ids=lambda c: str(c))
def test_same_outputs_and_gradients_as_the_autograd_loop(m, window):
    kv = model(window)
    x, q0, memory = inputs(m)
    x, q0 = x.requires_grad_(), q0.requires_grad_()
    wanted = [x, q0, *kv.parameters()]
    results = []
    for block in (kv._fused_block, kv._autograd_block):
        tops, keys_values = block(x, q0, memory)
        weight = torch.linspace(-1, 1, tops.numel(), dtype=tops.dtype).view_as(tops)
        grads = torch.autograd.grad((tops * weight).sum(), wanted, allow_unused=True)
        results.append((tops, keys_values, grads))
    (tops, keys_values, got), (want_tops, want_kv, want) = results
    torch.testing.assert_close(tops, want_tops)
    torch.testing.assert_close(keys_values, want_kv.detach())
    for g, w in zip(got, want):
        if g is None or w is None:
            assert (g if g is not None else w) is None or not (
                g if g is not None else w
            ).any()
        else:
            torch.testing.assert_close(g, w)


def test_layer_params_are_the_layers_own_tensors_by_name():
    kv = model(None)
    layer = kv.layers[1]
    p = LayerParams.of(layer)
    assert p.norm_attn_w is layer.norm_attn.weight and p.q_b is layer.attn.q.bias
    assert (
        p.out_proj_w is layer.attn.out_proj.weight and p.norm_ff_b is layer.norm_ff.bias
    )
    assert p.up_w is layer.ff.up.weight and p.down_b is layer.ff.down.bias
    shared = MemoryParams.of(kv)
    assert shared.mix_logits is kv.mix.logits and shared.kv_w is kv.kv.weight


def test_double_backward_and_a_backward_without_activations_are_clear_errors():
    kv = model(None)
    x, q0, memory = inputs(2)
    x.requires_grad_()
    layers = [LayerParams.of(layer) for layer in kv.layers]
    biases = torch.zeros(H, 4, dtype=torch.float64).expand(L, H, 4)
    for keep, match in ((True, "double backward"), (False, "keeps no activations")):
        spec = LoopSpec(H, 2 + T, 1e-5, keep_activations=keep)
        tops, _ = fused_loop(spec, x, q0, memory, biases, MemoryParams.of(kv), layers)
        with pytest.raises(RuntimeError, match=match):
            torch.autograd.grad(tops.sum(), x, create_graph=keep)


def loop_values_and_grads(kv, x, q0, memory, autocast: bool):
    """`_fused_block`'s outputs and the gradients of a weighted sum of its top outputs,
    forward and backward both inside `torch.autocast('cpu', bfloat16)` when `autocast`."""
    x, q0 = x.detach().requires_grad_(), q0.detach().requires_grad_()
    wanted = [x, q0, *kv.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        tops, keys_values = kv._fused_block(x, q0, memory)
        weight = torch.linspace(-1, 1, tops.numel()).view_as(tops)
        grads = torch.autograd.grad((tops * weight).sum(), wanted, allow_unused=True)
    return tops, keys_values, grads


def test_under_autocast_the_fused_loop_computes_in_the_parameters_dtype():
    """Autocast reached some of the loop's kernels and not others: the memory's keys and
    values and the feed-forward's down projection were rounded to bfloat16, the rest was
    float32, so the loop's outputs were neither the float32 loop's nor the autograd loop's
    under autocast (0.04 from float32's here), and a backward under autocast crashed. The
    loop now runs, forward and backward, in the dtype of its parameters (its note)."""
    kv = model(2).float()
    x, q0, memory = (t.float() for t in inputs(2))
    (tops, keys_values, got), (want_tops, want_kv, want) = (
        loop_values_and_grads(kv, x, q0, memory, autocast) for autocast in (True, False))
    assert tops.dtype == keys_values.dtype == torch.float32
    torch.testing.assert_close(tops, want_tops, rtol=0, atol=0)
    torch.testing.assert_close(keys_values, want_kv, rtol=0, atol=0)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_a_layer_norm_of_another_epsilon_is_refused_by_the_fused_loop():
    """The loop used `norm_mem.eps` for every layer norm: a layer whose norm had another
    epsilon got silently different outputs from the autograd loop's."""
    kv = model(None)
    kv.layers[1].norm_ff.eps = 1e-2
    x, q0, memory = inputs(2)
    with pytest.raises(ValueError, match=r"layers\.1\.norm_ff\.eps = 0\.01.*norm_mem\.eps "
                                         r"= 1e-05.*loop='autograd'"):
        kv._fused_block(x, q0, memory)
    kv.config = FeedbackKVConfig(**{**vars(kv.config), "loop": "autograd"})
    kv(torch.zeros(B, T, dtype=torch.long))  # the autograd loop reads each norm's own


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_model_trains_with_the_fused_loop(device, dtype):
    """A model cast to half precision: its layer norms' statistics are kept as their kernel
    keeps them (float32 on a GPU, where the `out=` kernel refused half-precision buffers:
    "Expected out tensor to have dtype float"; the input's own dtype on a CPU). Forward and
    backward run in that dtype and agree with the autograd loop up to its rounding."""
    kv = model(2).to(device=device, dtype=dtype)
    x, q0, memory = (t.to(device=device, dtype=dtype) for t in inputs(2))
    tops, keys_values, got = loop_values_and_grads(kv, x, q0, memory, autocast=False)
    assert tops.dtype == keys_values.dtype == dtype
    reference = model(2)  # float64, the same parameters before the cast
    with torch.no_grad():
        for p, q in zip(reference.parameters(), kv.parameters()):
            p.copy_(q.double())
    x64, q64, m64 = (t.double().cpu() for t in (x, q0, memory))
    want_tops, _, want = loop_values_and_grads(reference, x64, q64, m64, autocast=False)
    torch.testing.assert_close(tops.double().cpu(), want_tops, rtol=0.05, atol=0.05)
    for g, w in zip(got, want):
        if w is not None:
            scale = w.abs().max().item() + 1e-3
            assert (g.double().cpu() - w).abs().max().item() < 0.1 * scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_recomputed_layer_norm_is_the_forwards(dtype):
    """What the backward recomputes from the kept statistics (`normalized`) is what the
    forward's kernel returned: the same bits in float32 (the loop's note says so); in half
    precision, in its dtype, up to rounding (on a CPU the statistics themselves are kept in
    half precision: bfloat16 differs by up to 0.0625 here)."""
    from labnn.feedback.fused.buffers import layer_norm, normalized, stats_dtype

    torch.manual_seed(0)
    x = (torch.randn(64, 256) * 3 + 1).to(dtype)
    w, b = torch.randn(256).to(dtype), torch.randn(256).to(dtype)
    out = (torch.empty_like(x), *(x.new_empty(64, 1, dtype=stats_dtype(x)) for _ in "ms"))
    y = layer_norm(x, w, b, 1e-5, out).clone()
    again = normalized(x, out[1], out[2], w, b)
    assert again.dtype == dtype and stats_dtype(x) == dtype  # on a CPU
    if dtype == torch.float32:
        assert torch.equal(again, y)
    else:
        rounding = 8 * torch.finfo(dtype).eps * y.float().abs().max()
        assert (again.float() - y.float()).abs().max() <= rounding
