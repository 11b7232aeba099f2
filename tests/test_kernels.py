"""labnn's Triton kernels for XL's token step (`labnn.compiled.kernels`) equal the ring step
they replace. Without a GPU they run under Triton's interpreter (`TRITON_INTERPRET=1`, set by
conftest.py); on a GPU (`make test-gpu`) compiled for it."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from labnn.compiled import decoding
from labnn.compiled.ring_steps import xl_ring_step
from labnn.compiled.rings import xl_ring
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.xl.model import TransformerXL, XLConfig

pytest.importorskip("triton")
assert torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", (
    "tests/conftest.py sets TRITON_INTERPRET=1 on a machine without a GPU")
from labnn.compiled import kernels  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
VOCAB = 23


def xl_model(**overrides) -> TransformerXL:
    """A small XL whose every parameter, the zero biases u, v too, is jittered."""
    torch.manual_seed(0)
    config = dict(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, mem_len=7)
    model = TransformerXL(XLConfig(**{**config, **overrides})).to(DEVICE)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("overrides", [
    {},  # relative positions; mem_len 7: the ring of 8 slots wraps
    {"clamp_len": 3},
    {"positions": "absolute"},
    {"bias": False},  # no biases in the projections and layer norms
])
@torch.inference_mode()
def test_kernel_step_equals_the_ring_step_token_after_token(overrides):
    model = xl_model(**overrides)
    tokens = torch.randint(VOCAB, (2, 14), device=DEVICE)
    _, cache = model.step(tokens[:, :4])
    want_ring, got_ring = xl_ring(cache, 4), xl_ring(cache, 4)
    for i in range(4, tokens.size(1)):
        x = model.embed(tokens[:, i : i + 1])[:, 0]
        want = xl_ring_step(model, x, want_ring)
        got = kernels.xl_kernel_step(model, x, got_ring)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for got, want in zip(got_ring.keys_t + got_ring.values, want_ring.keys_t + want_ring.values):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert got_ring.count.item() == want_ring.count.item() == 14


@pytest.mark.parametrize("tiling", [
    kernels.Tiling(slots=16, programs=20),  # 4 (stream, head) pairs: 5 splits of 2 runs
    kernels.Tiling(slots=32, programs=1),  # one program per pair: every run in one
    kernels.Tiling(slots=256, programs=4096),  # one run of 256 holds all 151 slots
])
@torch.inference_mode()
def test_runs_of_slots_combine_to_one_softmax(tiling):
    """A ring of 151 slots cut into runs (of 16, two runs per program, and others): the
    partial maxima and sums combine to the softmax over all slots, empty slots (the ring
    not yet full) weigh nothing."""
    model = xl_model(mem_len=150)
    tokens = torch.randint(VOCAB, (2, 95), device=DEVICE)
    _, cache = model.step(tokens[:, :90])  # 90 of 150 memory slots written
    want_ring, got_ring = xl_ring(cache, 90), xl_ring(cache, 90)
    for i in range(90, 95):
        x = model.embed(tokens[:, i : i + 1])[:, 0]
        want = xl_ring_step(model, x, want_ring)
        torch.testing.assert_close(kernels.xl_kernel_step(model, x, got_ring, tiling), want,
                                   atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("fields, match", [
    (dict(slots=24), "slots must be a power of two >= 16, got 24"),
    (dict(slots=8), "slots must be a power of two >= 16, got 8"),
    (dict(programs=0), "programs must be a positive int, got 0"),
    (dict(programs=2.5), "programs must be a positive int, got 2.5"),
])
def test_a_tiling_the_kernel_cannot_run_is_refused_at_the_door(fields, match):
    with pytest.raises(ValueError, match=match):
        kernels.Tiling(**fields)


@pytest.mark.parametrize("norm, gelu, residual", [
    (False, False, False), (True, False, False), (True, True, False), (False, False, True)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_norm_then_product_then_gelu_then_residual(norm, gelu, residual, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(300, 23, bias=bias).to(DEVICE)  # K over two blocks, N odd
    ln = torch.nn.LayerNorm(300, bias=bias).to(DEVICE)
    with torch.no_grad():
        ln.weight.add_(torch.randn_like(ln.weight))
    x, r = torch.randn(3, 300, device=DEVICE), torch.randn(3, 23, device=DEVICE)
    with torch.inference_mode():
        want = layer(ln(x) if norm else x)
        want = F.gelu(want) if gelu else want
        want = want + r if residual else want
        got = kernels.linear(x, layer, norm=ln if norm else None, gelu=gelu,
                             residual=r if residual else None)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@torch.inference_mode()
def test_generation_with_the_kernels_samples_what_generate_samples():
    model = xl_model()
    prompt = torch.randint(VOCAB, (2, 5), device=DEVICE)
    want = model.generate(prompt, 12, temperature=0)
    got = decoding.generate(model, prompt, 12, temperature=0, backend="kernels")
    assert torch.equal(got, want)


def test_the_kernels_serve_float32_xl_only_and_say_so_at_the_door():
    torch.manual_seed(0)
    config = FeedbackKVConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                              attn_len=6)
    model = FeedbackTransformerKV(config).eval()
    prompt = torch.randint(VOCAB, (1, 3))
    with pytest.raises(ValueError, match="backend='kernels' has kernels for TransformerXL only"):
        decoding.generate(model, prompt, 4, backend="kernels")
    with pytest.raises(ValueError, match="runs float32 models, this one is torch.float64"):
        decoding.generate(xl_model().double(), prompt, 4, backend="kernels")
    # tl.arange needs a power of two: d_head 12 failed inside Triton, naming no argument
    with pytest.raises(ValueError, match=r"d_head = d_model / n_heads that is a power of two, "
                                         r"this model's is d_head = 12; use 'inductor'"):
        decoding.generate(xl_model(d_model=24), prompt, 4, backend="kernels")


@pytest.mark.parametrize("why, patch", [
    ("Triton is not installed", lambda mp: mp.setattr(
        "torch.utils._triton.has_triton_package", lambda: False)),
    ("labnn's kernels run on CUDA, not on cpu", lambda mp: mp.delenv("TRITON_INTERPRET", raising=False)),
])
@torch.inference_mode()
def test_where_the_kernels_cannot_run_one_warning_then_the_ring_step(monkeypatch, why, patch):
    model = xl_model().cpu()
    prompt = torch.randint(VOCAB, (1, 5))
    want = model.generate(prompt, 6, temperature=0)
    patch(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = decoding.generate(model, prompt, 6, temperature=0, backend="kernels")
    assert [str(w.message) for w in caught] == [
        f"labnn.compiled: {why}; running the ring step eagerly instead"]
    assert torch.equal(got, want)
