"""Compiled generation of `TransformerLM` (notebook 01's model and the CLI's default): its
cache in a ring of fixed shape, one compiled step for every token after the prompt, replayed
as a CUDA graph on a GPU, as for XL and the feedback model (`tests/test_compiled.py`, which
also runs the tests common to all three: on CUDA, one graph per generation, inductor).

Tolerance: float32 logits agree to 1e-5 absolute (the ring sums over more, masked, slots)."""

from __future__ import annotations

import pytest
import torch

from labnn.compiled import decoding as compiled
from labnn.compiled import ring_steps
from labnn.compiled.ring_steps import transformer_ring_step
from labnn.compiled.rings import transformer_ring
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.transformer import TransformerLM
from test_compiled import ATOL, VOCAB, fresh_dynamo, transformer_model  # noqa: F401


def lm(**overrides) -> TransformerLM:
    """A small model with every weight jittered off its initialisation, in eval mode."""
    return transformer_model(**{"attn_len": None, **overrides})


@pytest.mark.parametrize("overrides", [
    {}, {"positions": "sinusoidal"}, {"positions": "none"},
    {"attn_len": 4},  # the ring of 5 slots wraps many times
    {"attn_len": 4, "positions": "sinusoidal"},
])
@pytest.mark.parametrize("t0", [1, 9])
@torch.inference_mode()
def test_ring_step_equals_the_cached_forward_token_after_token(overrides, t0):
    model = lm(**overrides)
    tokens = torch.randint(VOCAB, (3, t0 + 40))
    want, cache = model(tokens[:, :t0], use_cache=True)
    band = model.config.attn_len
    ring = transformer_ring(cache, t0, tokens.size(1) if band is None else band + 1)
    for i in range(t0, tokens.size(1)):
        want, cache = model(tokens[:, i : i + 1], cache, use_cache=True)
        x = compiled.embed_one(model, tokens[:, i : i + 1], ring.count)
        got = transformer_ring_step(model, x, ring)
        torch.testing.assert_close(got, want[:, 0], atol=ATOL, rtol=0)
    assert ring.count.item() == tokens.size(1)


@pytest.mark.parametrize("overrides", [{}, {"attn_len": 4, "positions": "sinusoidal"}])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_compiled_generate_samples_what_generate_samples(overrides, temperature):
    model = lm(**overrides)
    prompt = torch.randint(VOCAB, (2, 4))
    want = model.generate(prompt, 25, temperature, generator=torch.Generator().manual_seed(3))
    got = compiled.generate(model, prompt, 25, temperature, backend="eager",
                            generator=torch.Generator().manual_seed(3))
    assert torch.equal(got, want)


def test_learned_positions_past_seq_len_are_refused_at_the_door():
    """Past `seq_len` absolute positions cannot slide (the eager model recomputes its window):
    a ring cannot follow, so the generation is refused before anything compiles."""
    model, prompt = lm(seq_len=16), torch.randint(VOCAB, (1, 10))
    compiled.generate(model, prompt, 7, backend="eager")  # the last token read is position 15
    with pytest.raises(ValueError,
                       match=r"10 \+ 8 - 1 = 17 positions.*seq_len=16.*model\.generate"):
        compiled.generate(model, prompt, 8, backend="eager")


@torch.inference_mode()
def test_the_ring_is_checked_against_the_model():
    model = lm(attn_len=4)
    _, cache = model(torch.randint(VOCAB, (2, 6)), use_cache=True)
    token = torch.zeros(2, 1, dtype=torch.long)
    with pytest.raises(ValueError, match=r"6 slots.*attn_len=4"):
        compiled.decoder(model, transformer_ring(cache, 6, 6), token, backend="eager")
    with pytest.raises(ValueError, match=r"ring.keys\[0\] has shape \[2, 2, 5, 8\], expected "
                                         r"\[B=3"):
        compiled.decoder(model, transformer_ring(cache, 6, 5), torch.zeros(3, 1, dtype=torch.long),
                         backend="eager")
    with pytest.raises(ValueError, match="count=3 does not fit the cache: it holds 6"):
        transformer_ring(cache, 3, 5)


def test_other_models_are_named():
    model = FeedbackTransformer(FeedbackConfig(VOCAB, d_model=16, n_heads=2, n_layers=1)).eval()
    with pytest.raises(TypeError, match="TransformerLM, a TransformerXL or a "
                                        "FeedbackTransformerKV, got FeedbackTransformer"):
        compiled.generate(model, torch.zeros(1, 2, dtype=torch.long), 2)


@torch.inference_mode()
def test_the_cuda_graphs_warm_up_copy_of_every_ring():
    """`record` warms the step up on a spare copy of the ring (what the step writes: slots
    and count); it knew XL's and the feedback model's rings only, so recording the
    transformer's on a GPU failed (`'TransformerRing' has no attribute 'kv'`). Checked
    here without a GPU: every ring kind's copy is equal and shares no memory."""
    from labnn.compiled.cuda_graph import spare_ring
    model = lm()
    _, cache = model(torch.randint(VOCAB, (2, 6)), use_cache=True)
    ring = transformer_ring(cache, 6, 8)
    spare = spare_ring(ring)
    assert type(spare) is type(ring)
    for a, b in zip([*ring.keys, *ring.values, ring.count], [*spare.keys, *spare.values,
                                                            spare.count]):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()


def three_rings():
    """`(model, ring, step)` of each model with a ring, after a prompt of 5 tokens, batch 2."""
    from labnn.compiled.ring_steps import feedback_ring_step, xl_ring_step
    from labnn.compiled.rings import feedback_ring, xl_ring
    from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
    from labnn.xl.model import TransformerXL, XLConfig
    torch.manual_seed(0)
    size = dict(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2)
    prompt = torch.randint(VOCAB, (2, 5))
    transformer = lm()
    xl = TransformerXL(XLConfig(**size, mem_len=7)).eval()
    feedback = FeedbackTransformerKV(FeedbackKVConfig(**size, attn_len=6)).eval()
    return [
        (transformer, transformer_ring(transformer(prompt, use_cache=True)[1], 5, 8),
         transformer_ring_step),
        (xl, xl_ring(xl.step(prompt)[1], 5), xl_ring_step),
        (feedback, feedback_ring(feedback(prompt)[1], 6), feedback_ring_step),
    ]


@pytest.fixture
def cuda_stood_in(monkeypatch):
    """torch.cuda's streams, graphs and device context stood in, for `record` on a CPU: the
    stand-in runs the step at capture and nothing at replay (a GPU the reverse). Returns
    the devices `record` made current."""
    import contextlib

    class Stream:
        def wait_stream(self, other):
            pass

    class Graph:
        def replay(self):
            pass

    devices = []

    def on_device(device):
        devices.append(device)
        return contextlib.nullcontext()

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", on_device)
    return devices


def ring_run(model, step):
    """`run(token, ring) -> logits`, as `decoder` hands it to `record`."""
    return lambda t, r: step(model, compiled.embed_one(model, t, r.count), r)


@torch.inference_mode()
def test_recording_warms_up_and_captures_every_ring_kind_with_cuda_stood_in(cuda_stood_in):
    """`record` runs only on a GPU, so a ring kind it did not know failed there alone. Stood
    in, its warm-up (on a spare ring) and its capture run here for all three models;
    recording and one replay leave the ring one token further (the warm-up leaves it as it
    was) with the step's logits for that token, on a GPU as here. All of it on the token's
    GPU: torch.cuda's streams and graphs use the current device, which for a model on
    cuda:1 was cuda:0 (the graph then captured nothing: every replay, the same logits)."""
    from labnn.compiled import cuda_graph
    from labnn.compiled.cuda_graph import spare_ring

    token = torch.full((2, 1), 3)
    for model, ring, step in three_rings():
        before = spare_ring(ring)
        want = ring_run(model, step)(token, before)
        logits = cuda_graph.record(ring_run(model, step), token, ring)(token)
        assert ring.count.item() == before.count.item()  # one token further, not four
        torch.testing.assert_close(logits, want)
    assert cuda_stood_in == [token.device] * 3


@torch.inference_mode()
def test_recording_next_to_the_end_of_a_learned_table_warms_up_inside_it(cuda_stood_in):
    """The warm-up's three calls embedded positions count, count + 1 and count + 2: after a
    prompt of seq_len - 1 tokens, two past the learned table (on a GPU a device-side assert,
    which loses the session). The spare ring counts from 0."""
    from labnn.compiled import cuda_graph

    model = lm(seq_len=8)
    ring = transformer_ring(model(torch.randint(VOCAB, (2, 7)), use_cache=True)[1], 7, 8)
    logits = cuda_graph.record(ring_run(model, transformer_ring_step), torch.full((2, 1), 3),
                               ring)(torch.full((2, 1), 3))
    assert logits.shape == (2, VOCAB) and ring.count.item() == 8


def test_a_gpu_scores_one_query_by_products_and_a_cpu_by_the_fused_attention():
    """On an NVIDIA H200 the fused attention (`scaled_dot_product_attention`, its
    memory-efficient kernel, tiles of 64 queries) took 0.23 ms per layer for one query
    over 2,304 slots, 92 % of the replayed step; by products the replay took 0.18 ms per
    token on another H200, against 1.03; on a CPU the products were the slower
    (torch.profiler, transformer_ring_replay.py and bench_generation.py, 2026-11-27)."""
    assert ring_steps.products_on(torch.device("cuda"))
    assert ring_steps.products_on(torch.device("cuda", 0))
    assert not ring_steps.products_on(torch.device("cpu"))


class _Calls(torch.overrides.TorchFunctionMode):
    """The names of the torch functions called inside it."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("products", [True, False], ids=["products (GPU)", "fused (CPU)"])
@pytest.mark.parametrize("overrides", [{}, {"attn_len": 4, "positions": "sinusoidal"}])
@torch.inference_mode()
def test_both_ways_of_one_query_equal_the_cached_forward(overrides, products, monkeypatch):
    monkeypatch.setattr(ring_steps, "products_on", lambda device: products)
    model = lm(**overrides)
    tokens = torch.randint(VOCAB, (2, 30))
    want, cache = model(tokens[:, :5], use_cache=True)
    band = model.config.attn_len
    ring = transformer_ring(cache, 5, 30 if band is None else band + 1)
    calls = _Calls()
    for i in range(5, 30):
        want, cache = model(tokens[:, i : i + 1], cache, use_cache=True)
        with calls:
            x = compiled.embed_one(model, tokens[:, i : i + 1], ring.count)
            got = transformer_ring_step(model, x, ring)
        torch.testing.assert_close(got, want[:, 0], atol=ATOL, rtol=0)
    fused = "scaled_dot_product_attention" in calls.names
    assert fused != products, calls.names


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_products_compile_and_sample_what_generate_samples(backend, monkeypatch):
    """The GPU's way, compiled here on the CPU: the ring's keys are written through a
    transposed view, which the compiled graph must write back into the ring."""
    monkeypatch.setattr(ring_steps, "products_on", lambda device: True)
    model = lm(attn_len=4)
    prompt = torch.randint(VOCAB, (2, 4))
    want = model.generate(prompt, 20, 0.0)
    got = compiled.generate(model, prompt, 20, 0.0, backend=backend)
    assert torch.equal(got, want)


@torch.inference_mode()
def test_a_decoder_overwrites_its_logits_on_a_cpu_as_a_cuda_graph_does():
    """On a GPU `decoder` returns the CUDA graph's own logits, overwritten by the next call;
    on a CPU each call gave a new tensor, so logits kept without `.clone()` were right here
    and all the last token's there. Now one tensor on every device."""
    model = lm()
    ring = transformer_ring(model(torch.randint(VOCAB, (2, 5)), use_cache=True)[1], 5, 8)
    decode = compiled.decoder(model, ring, torch.zeros(2, 1, dtype=torch.long), backend="eager")
    first = decode(torch.full((2, 1), 1))
    kept = first.clone()
    second = decode(torch.full((2, 1), 2))
    assert second is first and not torch.equal(first, kept)


@torch.inference_mode()
def test_a_decoder_refuses_a_token_past_the_learned_positions():
    """`generate` sizes its ring within `seq_len` (`ring_slots`), but `decoder` took any
    number of calls: past the learned table, an IndexError here and a device-side assert
    on a GPU (the session lost). The calls are counted on the host, never read back."""
    model = lm(seq_len=8)
    ring = transformer_ring(model(torch.randint(VOCAB, (2, 6)), use_cache=True)[1], 6, 8)
    decode = compiled.decoder(model, ring, torch.zeros(2, 1, dtype=torch.long), backend="eager")
    decode(torch.full((2, 1), 1))
    decode(torch.full((2, 1), 2))
    with pytest.raises(ValueError, match=r"reached the model's seq_len=8 learned positions"):
        decode(torch.full((2, 1), 3))
    assert ring.count.item() == 8
