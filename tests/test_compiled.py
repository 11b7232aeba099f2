"""Compiled generation (`labnn.compiled`, `labnn.compiled.rings`) and compiled training loops.

The ring steps are compared with the eager models' `step` token after token, eagerly (fast); the
compiled paths run with the `eager`/`aot_eager` backends (dynamo's tracing without code
generation) and, where a C++ compiler is found, once with inductor.

Tolerance: float32 logits agree to 1e-5 absolute (the ring sums the same terms over more, masked,
slots and in another order; seen: about 2e-7); gradients to 1e-5.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from labnn.compiled import backends
from labnn.compiled import decoding as compiled
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.compiled.ring_steps import feedback_ring_step, xl_ring_step
from labnn.compiled.rings import feedback_ring, xl_ring
from labnn.xl.model import TransformerXL, XLConfig

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


def transformer_model(**overrides) -> TransformerLM:
    torch.manual_seed(0)
    config = dict(vocab_size=VOCAB, seq_len=64, d_model=16, n_heads=2, n_layers=2, attn_len=6)
    return jitter(TransformerLM(TransformerConfig(**{**config, **overrides})))


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


@pytest.mark.parametrize("positions", ["relative", "absolute"])
@torch.inference_mode()
def test_xl_paths_share_one_scores_function_and_one_block(monkeypatch, positions):
    """Each equation once (issue 26): the parallel forward, the single-token step and the
    ring step compute their scores with `relative_scores` and their blocks with
    `TransformerBlock.residual` (as XLBlock's), one call per layer each; no path keeps a copy of
    either."""
    import labnn.compiled.ring_steps as ring_steps
    import labnn.xl.cache as xl_cache
    import labnn.xl.relative_attention as relative_attention
    from labnn.xl.block import XLBlock

    calls = {"scores": [], "block": []}
    one_scores, one_block = relative_attention.relative_scores, XLBlock.residual

    def counted_scores(q, keys_t, rel_keys=None, *args, **kwargs):
        calls["scores"].append(rel_keys is not None)
        return one_scores(q, keys_t, rel_keys, *args, **kwargs)

    def counted_block(self, x, attend):
        calls["block"].append(x.dim())
        return one_block(self, x, attend)

    for module in (relative_attention, xl_cache, ring_steps):
        assert module.relative_scores is one_scores  # the same function, imported
        monkeypatch.setattr(module, "relative_scores", counted_scores)
    monkeypatch.setattr(XLBlock, "residual", counted_block)
    model = xl_model(positions=positions)
    n, relative = len(model.blocks), positions == "relative"
    tokens = torch.randint(VOCAB, (2, 6))

    def count(run):
        calls["scores"].clear(), calls["block"].clear()
        out = run()
        return out, dict(calls)

    want, seen = count(lambda: model(tokens)[0][:, -1])  # the parallel forward
    if relative:  # with absolute positions, MultiHeadAttention over memory + segment
        assert seen["scores"] == [True] * n
    assert seen["block"] == [3] * n
    _, cache = model.step(tokens[:, :5])
    ring = xl_ring(cache, 5)
    got, seen = count(lambda: model.step(tokens[:, 5:], cache)[0])  # the cached step
    assert seen == {"scores": [relative] * n, "block": [2] * n}
    if relative:  # absolute positions restart at 0 in every segment
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    want = got
    got, seen = count(lambda: xl_ring_step(model, model.embed(tokens[:, 5:])[:, 0], ring))
    assert seen == {"scores": [relative] * n, "block": [2] * n}
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


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


@pytest.mark.parametrize("make", [
    xl_model, lambda: feedback_model(attn_len=None),
    lambda: transformer_model(attn_len=None, positions="sinusoidal")])
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


@pytest.mark.skipif(backends.missing_compiler(torch.device("cpu")) is not None,
                    reason="inductor needs a C++ compiler")
@pytest.mark.parametrize("make", [xl_model, feedback_model, transformer_model])
def test_inductor_generation_equals_eager(make):
    model = make()
    prompt = torch.randint(VOCAB, (2, 3))
    want = model.generate(prompt, 20, temperature=0)
    got = compiled.generate(model, prompt, 20, temperature=0)
    assert torch.equal(got, want)


def test_without_a_compiler_one_warning_then_eager_generation(monkeypatch):
    monkeypatch.setattr(backends, "missing_compiler", lambda device: "no C++ compiler found")
    model = xl_model()
    prompt = torch.randint(VOCAB, (1, 3))
    with pytest.warns(UserWarning, match="no C.. compiler found; generating eagerly") as seen:
        got = compiled.generate(model, prompt, 12, temperature=0)
    assert len(seen) == 1 and seen[0].filename == __file__  # points at the caller
    assert torch.equal(got, model.generate(prompt, 12, temperature=0))


def test_missing_compiler_names_what_is_missing(monkeypatch):
    from torch._inductor import cpp_builder as builder

    def no_compiler():
        raise RuntimeError("Failed to find C++ compiler. Please specify via CXX")

    monkeypatch.setattr(builder, "get_cpp_compiler", no_compiler)
    why = backends.missing_compiler(torch.device("cpu"))
    assert why.startswith("no C++ compiler found (Failed to find C++ compiler")


@pytest.mark.parametrize("case, why", [
    ("no package", "Triton is not installed"),
    ("old GPU", r"Triton cannot compile for this GPU \(compute capability 6\.0; it needs 7\.0"),
    ("no C compiler", r"no C compiler for Triton's launcher \(gcc or clang on the PATH, or CC\)"),
    ("ready", None),
])
def test_what_triton_lacks_on_a_gpu_is_named(monkeypatch, case, why):
    """On a GPU the compiled step asked only `has_triton()`: a P100 (compute capability 6.0)
    was told Triton is not installed, and a machine without gcc or clang failed inside
    Triton's launcher build, after which the unrecorded step compiled, and failed, again.
    Stood in here: torch's Triton queries, the device's capability and the PATH."""
    from torch.utils import _triton

    monkeypatch.setattr(_triton, "has_triton_package", lambda: case != "no package")
    monkeypatch.setattr(_triton, "has_triton", lambda: case not in ("no package", "old GPU"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 0))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(backends.shutil, "which",
                        lambda name: None if case == "no C compiler" else f"/usr/bin/{name}")
    for device in (torch.device("cuda"), torch.device("cuda", 1)):
        got = backends.missing_compiler(device)
        assert got is None if why is None else re.match(why, got), got
    if why is not None:  # labnn's own kernels need the same
        with pytest.warns(UserWarning, match=why):
            assert backends.kernel_step("step", torch.device("cuda")) == "step"


def test_missing_python_headers_are_named(monkeypatch, tmp_path):
    monkeypatch.setattr(backends.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    why = backends.missing_compiler(torch.device("cpu"))
    assert why.startswith("no Python headers") and "Python.h is missing" in why


def test_refuses_other_models_training_mode_and_unknown_backends():
    prompt = torch.randint(VOCAB, (1, 3))  # other models: tests/test_compiled_transformer.py
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


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("make", [transformer_model, xl_model, feedback_model])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_cuda_graph_decoder_equals_the_eager_ring_step(make, backend):
    """The recorded step, replayed token after token, gives the ring step's logits and
    leaves the ring as the eager step does."""
    model = make().cuda()
    tokens = torch.randint(VOCAB, (2, 30), device="cuda")
    with torch.inference_mode():
        slots = compiled.ring_slots(model, 5, 26)
        rings = [compiled.read_prompt(model, tokens[:, :5], slots)[1] for _ in range(2)]
        step = compiled.STEPS[type(model)]
        decode = compiled.decoder(model, rings[0], tokens[:, 5:6], backend=backend)
        for i in range(5, 30):
            got = decode(tokens[:, i : i + 1]).clone()
            x = compiled.embed_one(model, tokens[:, i : i + 1], rings[1].count)
            want = step(model, x, rings[1])
            torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-4)
        assert rings[0].count.item() == rings[1].count.item() == 30


@cuda
@pytest.mark.parametrize("make", [transformer_model, xl_model, feedback_model])
def test_cuda_generation_never_waits_for_the_gpu_per_token(make):
    """After the prompt, no token reads a value back to the host: torch's sync debug mode
    turns any synchronisation into an error. The same tokens as eager generation."""
    model = make().cuda()
    prompt = torch.randint(VOCAB, (2, 5), device="cuda")
    want = model.generate(prompt, 40, temperature=0)
    compiled.generate(model, prompt, 2, temperature=0, backend="eager")  # warm
    torch.cuda.synchronize()
    calls = []

    def no_sync_decoder(*args, **kwargs):
        decode = real(*args, **kwargs)

        def checked(token):
            torch.cuda.set_sync_debug_mode("error")
            try:
                return decode(token)
            finally:
                torch.cuda.set_sync_debug_mode(0)
                calls.append(1)

        return checked

    real = compiled.decoder
    compiled.decoder = no_sync_decoder
    try:
        got = compiled.generate(model, prompt, 40, temperature=0, backend="eager")
    finally:
        compiled.decoder = real
    assert len(calls) == 39
    same_tokens_but_near_ties(model, got, want, prompt.size(1))


def eager_logits(model, tokens: torch.Tensor, t0: int) -> torch.Tensor:
    """The eager model's logits for every token after the first `t0`, fed `tokens` one by one
    as its generation reads them (`[B, T - t0, V]`)."""
    xl, lm = isinstance(model, TransformerXL), isinstance(model, TransformerLM)

    def read(new, state=None):  # the next token's logits [B, V], and the state
        if xl:
            return model.step(new, state)
        logits, state = model(new, state, use_cache=True) if lm else model(new, state)
        return logits[:, -1], state

    with torch.inference_mode():
        logits, state = read(tokens[:, :t0])
        out = [logits]
        for i in range(t0, tokens.size(1) - 1):
            logits, state = read(tokens[:, i : i + 1], state)
            out.append(logits)
    return torch.stack(out, 1)


@cuda
@pytest.mark.parametrize("make", [transformer_model, xl_model, feedback_model])
def test_cuda_sampling_never_waits_for_the_gpu_per_token(make, monkeypatch):
    """Sampling too (temperature 1 and top-k, `torch.multinomial` on the GPU): no token
    reads a value back to the host, in the ring step or in the draw."""
    from labnn.nn import generation

    model = make().cuda()
    prompt = torch.randint(VOCAB, (2, 5), device="cuda")
    gen = torch.Generator("cuda").manual_seed(0)
    compiled.generate(model, prompt, 2, top_k=5, backend="eager", generator=gen)  # warm
    torch.cuda.synchronize()
    draws, real = [], generation.sample_next

    def checked(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
            draws.append(1)

    monkeypatch.setattr(generation, "sample_next", checked)
    out = compiled.generate(model, prompt, 40, top_k=5, backend="eager", generator=gen)
    assert len(draws) == 40 and out.shape == (2, 45)
    assert bool(((out >= 0) & (out < VOCAB)).all())


def same_tokens_but_near_ties(model, got, want, t0: int, tie: float = 1e-4) -> None:
    """Greedy generations agree token for token up to the first place where the eager
    model's two best logits lie within `tie` of each other: there float rounding (another
    order of summation on a GPU) may pick either, and the generations part ways."""
    differ = (got != want).any(0).nonzero().flatten()
    if len(differ) == 0:
        return
    t = differ[0].item()
    best = eager_logits(model, want, t0)[:, t - t0].topk(2, -1).values
    gaps = (best[:, 0] - best[:, 1])[got[:, t] != want[:, t]]
    assert gaps.max().item() < tie, (
        f"the generations part at token {t} where the eager logits' top-2 gaps are "
        f"{gaps.tolist()} (not a near tie): {got[:, t].tolist()} vs {want[:, t].tolist()}")


# ------------------------------------------------- the doors of the ring helpers (issue 29)

@torch.inference_mode()
def test_xl_ring_checks_its_count():
    """A count that does not fit the cache put the positions in the wrong slots: logits off by
    0.02-0.4 (count 3 or 20 for 5 positions), NaN for count -1."""
    model = xl_model()  # mem_len 7
    tokens = torch.randint(VOCAB, (2, 12))
    _, cache = model.step(tokens[:, :5])  # 5 positions seen, all 5 held
    for count, want in [(3, "exactly 5"), (20, "exactly 5"), (-1, "exactly 5"), (5.0, "int")]:
        with pytest.raises(ValueError, match=rf"count={count!r} does not fit the cache.*{want}"):
            xl_ring(cache, count)
    _, full = model.step(tokens[:, 5:], cache)  # 12 seen, the last 7 held
    with pytest.raises(ValueError, match="count=6 does not fit the cache.*at least 7"):
        xl_ring(full, 6)
    ring = xl_ring(full, 40)  # any count >= mem_len holds the same ring: distances are relative
    x = model.embed(tokens[:, :1])[:, 0]
    torch.testing.assert_close(xl_ring_step(model, x, ring),
                               xl_ring_step(model, x, xl_ring(full, 12)), atol=ATOL, rtol=0)
    with pytest.raises(TypeError, match="cache must be an XLCache.*got tuple"):
        xl_ring(tuple(full), 12)


@torch.inference_mode()
def test_feedback_ring_checks_its_window_and_state():
    """A window smaller than the state overwrote slots (logits off by 0.04), one larger than the
    model's attn_len attended too far (off by 0.05), 0 raised ZeroDivisionError; an empty state
    gave NaN at the next step."""
    model = feedback_model()  # attn_len 6
    _, state = model(torch.randint(VOCAB, (2, 9)))  # 9 seen, the last 6 held
    for window, want in [(4, "exactly 6"), (8, "exactly 6"), (0, "positive int"),
                         (True, "positive int")]:
        with pytest.raises(ValueError, match=rf"window={window!r} .*{want}"):
            feedback_ring(state, window)
    _, short = model(torch.randint(VOCAB, (2, 3)))  # 3 seen, 3 held: any window >= 3
    assert feedback_ring(short, 3).kv.size(3) == 3 and feedback_ring(short, 9).kv.size(3) == 9
    with pytest.raises(ValueError, match="window=2 .*at least 3"):
        feedback_ring(short, 2)
    with pytest.raises(ValueError, match="state holds no memory vector yet"):
        feedback_ring(model.initial_state(2), 6)
    with pytest.raises(TypeError, match="state must be a KVState.*got tuple"):
        feedback_ring((state.kv, state.offset), 6)


def ring_after(model, tokens: torch.Tensor, mode):
    """The 6-slot ring of the cache `model` leaves after reading `tokens`, made under `mode`
    (`torch.no_grad` or `torch.inference_mode`)."""
    with mode():
        if isinstance(model, TransformerXL):
            return xl_ring(model.step(tokens)[1], 6)
        return feedback_ring(model(tokens)[1], 6)


@pytest.mark.parametrize("make", [xl_model, feedback_model])
def test_decoder_refuses_a_model_in_training_mode(make):
    """The ring steps have no dropout: `decoder`, the door of every compiled generation, refuses
    a model with a module in training mode (`xl_ring_step` silently ignored its dropout)."""
    model = make()
    tokens = torch.randint(VOCAB, (2, 6))
    ring = ring_after(model, tokens, torch.inference_mode)
    model.train()
    with pytest.raises(RuntimeError, match=r"compiled generation needs eval mode, but the model"):
        compiled.decoder(model, ring, tokens[:, :1], backend="eager")


def test_more_shapes_than_the_recompile_limit_warn_once_and_generate():
    """Each batch size compiles a graph of its own; past torch's limit of graphs per function (8)
    a `fullgraph` compile raised `FailOnRecompileLimitHit` with no hint. Now one warning says
    what happened (the compiled graphs are cleared) and generation goes on, correctly."""
    model, limit = xl_model(), 2  # the default 8 behaves alike, slower to reach
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else \
        "cache_size_limit"  # torch 2.6
    with torch._dynamo.config.patch(**{name: limit}):
        for b in range(1, limit + 1):
            compiled.generate(model, torch.randint(VOCAB, (b, 3)), 2, backend="eager")
        prompt = torch.randint(VOCAB, (limit + 1, 3))
        with pytest.warns(UserWarning, match=r"recompile limit.*torch.compiler.reset\(\)") as seen:
            got = compiled.generate(model, prompt, 4, temperature=0, backend="eager")
    hits = [w for w in seen if "recompile limit" in str(w.message)]
    assert len(hits) == 1 and hits[0].filename == __file__
    assert torch.equal(got, model.generate(prompt, 4, temperature=0))


@torch.inference_mode()
def test_decoder_refuses_a_ring_that_does_not_fit_the_model():
    """A ring from another model ran silently on the model's first layers (3 layers into 2), with
    too wide a window (6 slots for attn_len 4), or failed inside dynamo's tracing (other widths,
    heads, dtype, batch size, kind of ring)."""
    tokens = torch.randint(VOCAB, (2, 6))
    xl, fb = xl_model(), feedback_model(attn_len=4)

    def xl_ring_of(model, b=2):
        return xl_ring(model.step(tokens[:b])[1], 6)

    def fb_ring_of(model, window=4):
        return feedback_ring(model(tokens)[1], window)

    cases = [
        (xl, xl_ring_of(xl_model(n_layers=3)), "3 layers, but this model has 2"),
        (xl, xl_ring_of(xl_model(d_model=32)), r"keys_t\[0\] has shape \[2, 2, 16, 8\], expected "
                                               r"\[B=2, H=2, D_h=8, C=8\]"),
        (xl, xl_ring_of(xl_model(positions="absolute")), "absolute positions, this one relative"),
        (xl, xl_ring_of(xl), None),
        (xl, xl_ring_of(xl, b=1), r"keys_t\[0\] has shape \[1, "),
        (xl, fb_ring_of(fb), "ring must be an XLRing .*got FeedbackRing"),
        (fb, fb_ring_of(feedback_model(attn_len=8), 6), r"window of 6 slots, but this model "
                                                        r"attends to attn_len=4"),
        (fb, fb_ring_of(feedback_model(attn_len=4, n_heads=4)),
         r"kv has shape \[2, 2, 4, 4, 4\], expected \[2, B=2, H=2, W, D_h=8\]"),
        (fb, fb_ring_of(feedback_model(attn_len=4).double()), "ring is torch.float64 on cpu, "
                                                              "but the model is torch.float32"),
        (fb, fb_ring_of(fb), None),
    ]
    for model, ring, match in cases:
        if match is None:  # the ring fits
            compiled.decoder(model, ring, tokens[:, :1], backend="eager")(tokens[:, :1])
            continue
        with pytest.raises((ValueError, TypeError), match=match):
            compiled.decoder(model, ring, tokens[:, :1], backend="eager")


@pytest.mark.parametrize("make", [xl_model, feedback_model])
def test_generation_under_autocast_bfloat16(make):
    """Under `torch.autocast` the caches hold autocast's dtype: XL's step refused its own keys
    ("keys are torch.bfloat16 on cpu, but this buffer holds torch.float32 ... (a cache of another
    model?)"), the compiled feedback step failed in `index_copy_` (a float32 ring, bfloat16
    keys). Eager and compiled generation sample from the same (bfloat16) logits."""
    model, prompt = make(), torch.randint(VOCAB, (2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = model.generate(prompt, 8, temperature=0)
        got = compiled.generate(model, prompt, 8, temperature=0, backend="eager")
    assert want.shape == got.shape == (2, 13)
    # the first new token comes from the prompt, read by the same eager code in both; later
    # ones may part at a near tie (bfloat16 rounds differently in the ring step)
    assert torch.equal(got[:, :6], want[:, :6])
    assert ((got >= 0) & (got < VOCAB)).all()


@torch.inference_mode()
def test_decoder_names_a_token_of_another_device_or_shape():
    """The example token went straight into the compiled step: a token on another device than
    the model, or of shape [B, 2], failed inside dynamo's tracing."""
    model, tokens = xl_model(), torch.randint(VOCAB, (2, 6))
    ring = xl_ring(model.step(tokens)[1], 6)
    with pytest.raises(ValueError, match="token is on meta, but the model is on cpu"):
        compiled.decoder(model, ring, tokens[:, :1].to("meta"), backend="eager")
    with pytest.raises(ValueError, match=r"token must be \[B, 1\].*\[2, 2\]"):
        compiled.decoder(model, ring, tokens[:, :2], backend="eager")


@pytest.mark.parametrize("make", [xl_model, feedback_model])
def test_a_decoder_called_with_gradients_on_records_no_graph(make):
    """`decoder` is public; called outside `torch.no_grad()` its step recorded autograd's
    graph into the ring at every token (312 nodes behind the ring after 3 tokens, 797 after
    8: memory that grows without bound), and its logits required grad."""
    model = make()
    tokens = torch.randint(VOCAB, (2, 6))
    ring = ring_after(model, tokens, torch.no_grad)
    decode = compiled.decoder(model, ring, tokens[:, :1], backend="eager")
    for _ in range(3):
        logits = decode(tokens[:, :1])
    assert not logits.requires_grad
    assert all(t.grad_fn is None for t in ring if isinstance(t, torch.Tensor))
