"""Compiled generation (`labnn.compiled`, `labnn.ring_cache`) and compiled training loops.

The ring steps are compared with the eager models' `step` token after token, eagerly (fast); the
compiled paths run with the `eager`/`aot_eager` backends (dynamo's tracing without code
generation) and, where a C++ compiler is found, once with inductor.

Tolerance: float32 logits agree to 1e-5 absolute (the ring sums the same terms over more, masked,
slots and in another order; seen: about 2e-7); gradients to 1e-5.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from labnn import compiled
from labnn.feedback_kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.ring_cache import feedback_ring, feedback_ring_step, xl_ring, xl_ring_step
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl import TransformerXL, XLConfig

ATOL = 1e-5
VOCAB = 23


def jitter(model: torch.nn.Module) -> torch.nn.Module:
    """Nonzero biases `u`, `v` and relative biases (they start at zero), in eval mode."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def xl_model(**overrides) -> TransformerXL:
    torch.manual_seed(0)
    config = dict(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, mem_len=7)
    return jitter(TransformerXL(XLConfig(**{**config, **overrides})))


def feedback_model(**overrides) -> FeedbackTransformerKV:
    torch.manual_seed(0)
    config = dict(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                  max_distance=5, attn_len=6)
    return jitter(FeedbackTransformerKV(FeedbackKVConfig(**{**config, **overrides})))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test compiles from nothing (and leaves no graphs behind for the next)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("overrides", [
    {},  # relative positions, the ring wraps many times
    {"clamp_len": 3},
    {"positions": "absolute"},
])
@pytest.mark.parametrize("t0", [1, 5, 12])  # a prompt shorter and longer than mem_len
@torch.inference_mode()
def test_xl_ring_step_equals_step_token_after_token(overrides, t0):
    model = xl_model(**overrides)
    tokens = torch.randint(VOCAB, (3, t0 + 40))
    want, cache = model.step(tokens[:, :t0])
    ring = xl_ring(cache, t0)
    for i in range(t0, tokens.size(1)):
        want, cache = model.step(tokens[:, i : i + 1], cache)
        got = xl_ring_step(model, model.embed(tokens[:, i : i + 1])[:, 0], ring)
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert ring.count.item() == tokens.size(1)


@pytest.mark.parametrize("attn_len", [6, None])
@pytest.mark.parametrize("t0", [1, 9])
@torch.inference_mode()
def test_feedback_ring_step_equals_step_token_after_token(attn_len, t0):
    model = feedback_model(attn_len=attn_len)  # distances beyond max_distance=5 share
    tokens = torch.randint(VOCAB, (2, t0 + 30))
    want, state = model(tokens[:, :t0])
    ring = feedback_ring(state, attn_len or tokens.size(1))
    for i in range(t0, tokens.size(1)):
        want, state = model.step(tokens[:, i], state)
        got = feedback_ring_step(model, model.embed(tokens[:, i]), ring)
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("make", [xl_model, feedback_model, lambda: feedback_model(attn_len=None)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_compiled_generate_samples_what_generate_samples(make, temperature):
    model = make()
    prompt = torch.randint(VOCAB, (2, 4))
    want = model.generate(prompt, 25, temperature, generator=torch.Generator().manual_seed(3))
    got = compiled.generate(model, prompt, 25, temperature, backend="eager",
                            generator=torch.Generator().manual_seed(3))
    assert torch.equal(got, want)


@pytest.mark.parametrize("make", [xl_model, lambda: feedback_model(attn_len=None)])
def test_a_300_token_generation_compiles_once(make):
    """The ring's shapes never change: one graph for every token, no recompilation; a second
    generation from another prompt (of a length that rounds to the same ring) reuses it."""
    counters = torch._dynamo.utils.counters
    counters.clear()
    model = make()
    out = compiled.generate(model, torch.randint(VOCAB, (1, 3)), 300, backend="eager")
    assert out.shape == (1, 303)
    compiled.generate(model, torch.randint(VOCAB, (1, 5)), 290, backend="eager")
    assert counters["stats"]["unique_graphs"] == 1
    assert sum(counters["recompiles"].values()) == 0


@pytest.mark.skipif(compiled.missing_compiler(torch.device("cpu")) is not None,
                    reason="inductor needs a C++ compiler")
@pytest.mark.parametrize("make", [xl_model, feedback_model])
def test_inductor_generation_equals_eager(make):
    model = make()
    prompt = torch.randint(VOCAB, (2, 3))
    want = model.generate(prompt, 20, temperature=0)
    got = compiled.generate(model, prompt, 20, temperature=0)
    assert torch.equal(got, want)


def test_without_a_compiler_one_warning_then_eager_generation(monkeypatch):
    monkeypatch.setattr(compiled, "missing_compiler", lambda device: "no C++ compiler found")
    model = xl_model()
    prompt = torch.randint(VOCAB, (1, 3))
    with pytest.warns(UserWarning, match="no C.. compiler found; generating eagerly") as seen:
        got = compiled.generate(model, prompt, 12, temperature=0)
    assert len(seen) == 1
    assert torch.equal(got, model.generate(prompt, 12, temperature=0))


def test_missing_compiler_names_what_is_missing(monkeypatch):
    builder = pytest.importorskip("torch._inductor.cpp_builder")  # torch >= 2.5

    def no_compiler():
        raise RuntimeError("Failed to find C++ compiler. Please specify via CXX")

    monkeypatch.setattr(builder, "get_cpp_compiler", no_compiler)
    why = compiled.missing_compiler(torch.device("cpu"))
    assert why.startswith("no C++ compiler found (Failed to find C++ compiler")


def test_missing_python_headers_are_named(monkeypatch, tmp_path):
    monkeypatch.setattr(compiled.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    why = compiled.missing_compiler(torch.device("cpu"))
    assert why.startswith("no Python headers") and "Python.h is missing" in why


def test_refuses_other_models_training_mode_and_unknown_backends():
    prompt = torch.randint(VOCAB, (1, 3))
    lm = TransformerLM(TransformerConfig(VOCAB, 8, 16, 2, 1)).eval()
    with pytest.raises(TypeError, match="TransformerXL or a FeedbackTransformerKV, got "
                                        "TransformerLM"):
        compiled.generate(lm, prompt, 2)
    with pytest.raises(RuntimeError, match="eval mode"):
        compiled.generate(xl_model().train(), prompt, 2)
    with pytest.raises(ValueError, match="backend must be one of"):
        compiled.generate(xl_model(), prompt, 2, backend="tvm")
    with pytest.raises(ValueError, match="prompt"):
        compiled.generate(xl_model(), torch.zeros(1, 0, dtype=torch.long), 2)


@pytest.mark.parametrize("loop", ["autograd", "fused"])
def test_torch_compile_of_the_training_loops_equals_eager(loop):
    """`torch.compile(model)` of either token loop: same logits and gradients. The autograd loop
    used to fail (`IndexError: tuple index out of range`): dynamo traced `StepLinear`'s backward,
    which recognises its buffer by storage identity that fake tensors do not carry; `Stack` and
    `StepLinear` now run outside the compiled graphs."""
    torch.manual_seed(0)
    config = FeedbackKVConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                              attn_len=4, block_len=3, loop=loop)
    model = FeedbackTransformerKV(config)
    tokens = torch.randint(VOCAB, (2, 7))  # three blocks, the last one short

    def run(forward):
        model.zero_grad()
        logits, _ = forward(tokens)
        F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    want_logits, want_grads = run(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamo's notes on its graph breaks
        got_logits, got_grads = run(torch.compile(model, backend="aot_eager"))
    torch.testing.assert_close(got_logits, want_logits, atol=ATOL, rtol=0)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
