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
        "xl": TransformerXL(XLConfig(V, mem_len=8, **size)),
        "feedback": FeedbackTransformer(FeedbackConfig(V, **size)),
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


@pytest.mark.parametrize("name", ["transformer", "xl", "feedback", "feedback-kv"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_reads_no_value_per_token(name, temperature, count_reads):
    torch.manual_seed(0)
    model = models()[name].eval()
    prompt = torch.randint(V, (2, 5))

    def generate(n):
        return model.generate(prompt, n, temperature, generator=torch.Generator().manual_seed(0))

    few, many = reads_for(generate, 10, count_reads), reads_for(generate, 40, count_reads)
    assert many <= few, f"{name}: {few} host reads for 10 tokens, {many} for 40"


@pytest.mark.parametrize("name", ["xl", "feedback-kv"])
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
