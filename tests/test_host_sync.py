"""Generation never waits for the device per token: the prompt is checked once, at the
door, and the per-token path reads no tensor value on the host (`.item()`,
`.tolist()`, `bool(tensor)`, ...). On a GPU each such read is a synchronisation that
stalls the launch queue, and it forbids recording the step as a CUDA graph."""

import pytest
import torch

from labnn import compiled
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")
V = 11


def models():
    size = dict(d_model=16, n_heads=2, n_layers=2)
    return {
        "transformer": TransformerLM(TransformerConfig(V, seq_len=64, **size)),
        # a band: the mask of a prompt, and each token's cache cut to its last W keys
        "transformer-band": TransformerLM(TransformerConfig(V, seq_len=64, attn_len=4, **size)),
        "xl": TransformerXL(XLConfig(V, mem_len=8, **size)),
        "feedback": FeedbackTransformer(FeedbackConfig(V, **size)),
        # one key/value projection read by every layer, a window trimmed at every token
        "feedback-shared": FeedbackTransformer(FeedbackConfig(V, attn_len=4, shared_kv=True,
                                                              **size)),
        "feedback-kv": FeedbackTransformerKV(FeedbackKVConfig(V, attn_len=8, **size)),
    }


@pytest.fixture
def count_reads(monkeypatch):
    """A counter of host reads of tensor values, by every method in READS."""
    counts = {"n": 0}
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            counts["n"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def reads_for(generate, n, counts):
    counts["n"] = 0
    generate(n)
    return counts["n"]


@pytest.mark.parametrize("name", ["transformer", "transformer-band", "xl", "feedback",
                                  "feedback-shared", "feedback-kv"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_reads_no_value_per_token(name, temperature, use_cache, count_reads):
    """Both paths of every model's `generate`: the cached one, and the one that reads the
    whole sequence again at every token (`use_cache=False`; XL has only its cache)."""
    if name == "xl" and not use_cache:
        pytest.skip("TransformerXL.generate always decodes with its cache")
    torch.manual_seed(0)
    model = models()[name].eval()
    prompt = torch.randint(V, (2, 5))
    cache = {} if name == "xl" else {"use_cache": use_cache}

    def generate(n):
        return model.generate(prompt, n, temperature, generator=torch.Generator().manual_seed(0),
                              **cache)

    few, many = reads_for(generate, 10, count_reads), reads_for(generate, 40, count_reads)
    assert many <= few, f"{name}: {few} host reads for 10 tokens, {many} for 40"


@pytest.mark.parametrize("name", ["transformer", "transformer-band", "xl", "feedback-kv"])
def test_compiled_generate_reads_no_value_per_token(name, count_reads):
    torch.manual_seed(0)
    model = models()[name].eval()
    prompt = torch.randint(V, (2, 5))

    def generate(n):
        return compiled.generate(model, prompt, n, backend="eager")

    few, many = reads_for(generate, 10, count_reads), reads_for(generate, 40, count_reads)
    assert many <= few, f"{name}: {few} host reads for 10 tokens, {many} for 40"


def test_prompt_still_checked_once_at_the_door():
    model = models()["xl"].eval()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate(torch.tensor([[1, V]]), 3)


@pytest.mark.parametrize("mask", [None, "causal", "bidirectional"])
def test_an_xl_forward_reads_no_value_per_layer(mask, count_reads):
    """Each layer's attention read `bool((mask & ~causal).any())` to choose its table of
    relative keys: a synchronisation per layer of every training step on a GPU. The
    forward now decides once, at its door, and only for a mask it was given."""
    tokens = torch.randint(V, (2, 6))
    given = {None: None, "causal": torch.ones(6, 6).tril().bool(),
             "bidirectional": torch.ones(6, 6, dtype=torch.bool)}[mask]
    reads = []
    for n_layers in (1, 4):
        torch.manual_seed(0)
        model = TransformerXL(XLConfig(V, mem_len=8, d_model=16, n_heads=2, n_layers=n_layers))
        count_reads["n"] = 0
        model(tokens, mask=given)
        reads.append(count_reads["n"])
    assert reads[1] == reads[0], f"{reads[0]} host reads with 1 layer, {reads[1]} with 4"


def test_the_id_range_is_one_read(count_reads):
    """`check_tokens` read the smallest and the largest id back one at a time: two
    synchronisations per call of a model, where one reads both."""
    from labnn.nn.arguments import check_tokens

    count_reads["n"] = 0
    check_tokens(torch.randint(V, (2, 5)), V)
    assert count_reads["n"] == 1
    with pytest.raises(ValueError, match=r"contains id 11, outside the vocabulary \[0, 11\)"):
        check_tokens(torch.tensor([[3, V]]), V)


@pytest.mark.parametrize("name", ["transformer", "xl", "feedback", "feedback-kv"])
def test_reading_a_prompt_reads_no_value_per_layer(name, count_reads):
    """XL's prompt read asked every layer whether its mask lets a query see a later key
    (one host read per layer, per prompt or chunk); the mask is causal by construction."""
    def reads(n_layers):
        torch.manual_seed(0)
        size = dict(d_model=16, n_heads=2, n_layers=n_layers)
        model = {"transformer": lambda: TransformerLM(TransformerConfig(V, seq_len=64, **size)),
                 "xl": lambda: TransformerXL(XLConfig(V, mem_len=8, **size)),
                 "feedback": lambda: FeedbackTransformer(FeedbackConfig(V, **size)),
                 "feedback-kv": lambda: FeedbackTransformerKV(
                     FeedbackKVConfig(V, attn_len=8, **size))}[name]().eval()
        prompt = torch.randint(V, (2, 5))
        return reads_for(lambda n: model.generate(prompt, n, 0.0), 3, count_reads)

    assert reads(1) == reads(4)


def native_reads(fn) -> int:
    """Host reads made in torch's C++ (`aten::_local_scalar_dense`, behind every `.item()`),
    which `count_reads` cannot see: `torch.multinomial` checks its probabilities so."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_local_scalar_dense")


@pytest.mark.parametrize("name", ["transformer", "transformer-band", "xl", "feedback",
                                  "feedback-kv"])
def test_sampling_reads_no_value_per_token_in_torch_either(name):
    """`torch.multinomial(probs, 1)` read two checks of `probs` back to the host at every
    sampled token (its one-sample path), so generation at a temperature waited for the GPU
    twice per token: 20 reads for 10 tokens, 80 for 40."""
    torch.manual_seed(0)
    model = models()[name].eval()
    prompt = torch.randint(V, (2, 5))

    def reads(n):
        g = torch.Generator().manual_seed(0)
        return native_reads(lambda: model.generate(prompt, n, 1.0, generator=g))

    few, many = reads(10), reads(40)
    assert many <= few, f"{name}: {few} host reads in torch for 10 tokens, {many} for 40"


def test_a_draw_is_multinomials_draw():
    """The same tokens as `torch.multinomial(probs, 1)` from the same generator state, over
    rows with ruled-out tokens (top-k) too: its one-sample path is this race, less its check."""
    from labnn.nn.generation import sample_next

    for seed in range(50):
        logits = torch.randn(4, 37, generator=torch.Generator().manual_seed(1000 + seed))
        for top_k in (None, 5):
            got = sample_next(logits, 0.7, top_k, torch.Generator().manual_seed(seed))
            probs = (logits / 0.7).masked_fill(
                logits < logits.topk(top_k or 37, -1).values[:, -1:], float("-inf")
            ).softmax(-1)
            want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))
            assert torch.equal(got, want.squeeze(-1)), (seed, top_k)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "all -inf"])
def test_generate_names_logits_nothing_can_be_drawn_from(temperature, bad):
    """NaN or +inf logits, or a row of -inf (a diverged model), give no distribution to draw
    from; the tokens drawn are arbitrary. `generate` says so once, after its loop (one host
    read per call, not per token)."""
    def next_logits(new, seen, cache):
        logits = torch.zeros(2, V)
        if seen.size(1) == 6:  # the second token
            logits[1] = float("-inf") if bad == "all -inf" else 0.0
            logits[1, 3] = bad if bad != "all -inf" else float("-inf")
        return logits, cache

    from labnn.nn.generation import generate
    with pytest.raises(RuntimeError, match=r"logits were NaN, \+inf or all -inf at row 1, "
                                           r"token 6 \(and maybe later\)"):
        generate(next_logits, torch.zeros(2, 5, dtype=torch.long), 4, temperature)


@pytest.mark.parametrize("loop", ["fused", "autograd"])
def test_a_feedback_training_step_reads_no_value_per_block(loop, count_reads):
    """The fused loop's backward read the memory's mixing weights back to the host
    (`mix.tolist()`, for `torch.add(alpha=)`) once per block: T / block_len waits for the
    GPU in every training step, one per token at block_len = 1."""
    def reads(block_len):
        torch.manual_seed(0)
        model = FeedbackTransformerKV(FeedbackKVConfig(
            V, attn_len=4, block_len=block_len, loop=loop, d_model=16, n_heads=2, n_layers=2))
        tokens = torch.randint(V, (2, 8))
        count_reads["n"] = 0
        native = native_reads(lambda: model(tokens)[0].sum().backward())
        return native + count_reads["n"]

    assert reads(1) <= reads(8), f"{reads(1)} host reads in blocks of 1, {reads(8)} in one block"


@pytest.mark.parametrize("block_len", [None, 2])
def test_the_plain_feedback_token_loop_reads_no_value_per_token(block_len, count_reads):
    """`FeedbackTransformer` trains one token after the other (its `_forward`), cutting the
    graph every `block_len` tokens: neither the loop nor its backward may read a value
    back to the host per token, in Python or in torch."""
    def reads(t):
        torch.manual_seed(0)
        model = FeedbackTransformer(FeedbackConfig(V, attn_len=4, block_len=block_len,
                                                   d_model=16, n_heads=2, n_layers=2))
        tokens = torch.randint(V, (2, t))
        count_reads["n"] = 0
        native = native_reads(lambda: model(tokens)[0].sum().backward())
        return native + count_reads["n"]

    few, many = reads(4), reads(16)
    assert many <= few, f"{few} host reads for 4 tokens, {many} for 16"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make test-gpu)")
def test_cuda_feedback_backward_never_waits_for_the_gpu():
    """The fused loop's backward, in blocks of 2 tokens, under CUDA's sync debug mode: any
    read of a value back to the host is an error."""
    torch.manual_seed(0)
    model = FeedbackTransformerKV(FeedbackKVConfig(
        V, attn_len=4, block_len=2, d_model=16, n_heads=2, n_layers=2)).cuda()
    loss = model(torch.randint(V, (2, 8), device="cuda"))[0].float().sum()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
