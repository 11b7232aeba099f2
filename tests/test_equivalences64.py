"""Equivalences every model keeps, tested in float64 on tiny models (x-transformers' way:
behaviour, not shapes): a batch of two is two batches of one (values and gradients, over
a carried state), greedy generation of a batch is each row's own, XL's `step` token by
token is one forward over the segment, and generation with a cache gives the logits of
a forward over everything generated. None of the models takes a padding mask: the only
masks are XL's `[T, S]` masks, one for the whole batch (tested shared below).
The rest (segments with memory == one banded pass, the feedback loops, gradcheck, rings,
checkpoints) is tested in test_xl, test_feedback_loop, test_stack, test_compiled and
test_equivalences64b (whose compiled decoder, batch of two, equals the eager logits that
equal each row's own here)."""

from __future__ import annotations

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.memory import segment_mask
from labnn.xl.model import TransformerXL, XLConfig

V = 11
SIZES = dict(vocab_size=V, d_model=8, n_heads=2, n_layers=2)
FEEDBACK = dict(d_ff=16, max_distance=4)
KINDS = ["transformer", "transformer-band", "xl", "xl-absolute", "feedback", "feedback-window",
         "feedback-kv", "feedback-kv-autograd"]


def build(kind: str, dtype=torch.float64, **overrides) -> torch.nn.Module:
    """A tiny model of `kind` in eval mode, every parameter jittered (XL's u, v, the
    feedback mix and relative biases start at zero, which would hide their terms)."""
    torch.manual_seed(0)
    if kind.startswith("transformer"):
        band = dict(attn_len=3, positions="sinusoidal") if kind.endswith("band") else {}
        model = TransformerLM(TransformerConfig(**{**SIZES, "seq_len": 32, **band,
                                                   **overrides}))
    elif kind.startswith("xl"):
        positions = "absolute" if kind.endswith("absolute") else "relative"
        model = TransformerXL(XLConfig(**{**SIZES, "mem_len": 4, "positions": positions,
                                          **overrides}))
    elif kind.startswith("feedback-kv"):
        loop = "autograd" if kind.endswith("autograd") else "fused"
        config = {**SIZES, **FEEDBACK, "attn_len": 3, "loop": loop, **overrides}
        model = FeedbackTransformerKV(FeedbackKVConfig(**config))
    else:
        window = 3 if kind.endswith("window") else None
        config = {**SIZES, **FEEDBACK, "attn_len": window, **overrides}
        model = FeedbackTransformer(FeedbackConfig(**config))
    model = model.to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def call(model, tokens, state):
    """One call of any model, continuing `state`: `(logits [B, T, V], state)`."""
    if isinstance(model, TransformerLM):
        return model(tokens, state, use_cache=True)
    return model(tokens, state)


def rows(state, b: int):
    """Row `b` of a carried state (a cache, memories, a feedback state), batch kept."""
    if state is None:
        return None
    if isinstance(state, list):  # transformer caches [(k, v)] or XL memories
        return [tuple(t[b : b + 1] for t in s) if isinstance(s, tuple) else s[b : b + 1]
                for s in state]
    raise TypeError(type(state))


def weighted(logits: torch.Tensor, seed: int) -> torch.Tensor:
    """A loss weighing every row, position and logit differently."""
    gen = torch.Generator().manual_seed(seed)
    return (logits * torch.randn(logits.shape, generator=gen, dtype=logits.dtype)).sum()


def tokens(b: int, t: int, seed: int) -> torch.Tensor:
    return torch.randint(V, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_of_two_is_two_batches_of_one_in_values_and_gradients(kind):
    """No row leaks into another: not in attention, not in a carried state, and not in
    the gradients (the fused loop sums its weight gradients over the batch by hand)."""
    model = build(kind).train()  # dropout is 0: train mode runs the training loops
    first, second = tokens(2, 5, 1), tokens(2, 4, 2)
    params = list(model.parameters())

    def run(x1, x2, row_seed):
        out1, state = call(model, x1, None)
        out2, _ = call(model, x2, state)
        loss = weighted(out1, row_seed) + weighted(out2, row_seed + 10)
        return out1, out2, torch.autograd.grad(loss, params, allow_unused=True)

    alone = [run(first[b : b + 1], second[b : b + 1], b) for b in range(2)]
    out1, out2, _ = run(first, second, 0)
    for b in range(2):
        torch.testing.assert_close(out1[b : b + 1], alone[b][0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(out2[b : b + 1], alone[b][1], rtol=1e-10, atol=1e-10)
    # the batch's loss, each row weighed as when it ran alone
    out1, state = call(model, first, None)
    out2, _ = call(model, second, state)
    loss = sum(weighted(out1[b : b + 1], b) + weighted(out2[b : b + 1], b + 10)
               for b in range(2))
    got = torch.autograd.grad(loss, params, allow_unused=True)
    for name, g, g0, g1 in zip(dict(model.named_parameters()), got, alone[0][2], alone[1][2]):
        if g is None:
            assert g0 is None and g1 is None, name
            continue
        torch.testing.assert_close(g, g0 + g1, rtol=1e-9, atol=1e-10,
                                   msg=lambda text: f"{name}: {text}")


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_of_a_batch_is_each_rows_own(kind):
    model = build(kind)
    prompt = tokens(2, 4, 3)
    both = model.generate(prompt, 9, temperature=0)
    for b in range(2):
        assert torch.equal(both[b : b + 1], model.generate(prompt[b : b + 1], 9, temperature=0))


def test_one_xl_mask_serves_the_whole_batch_as_it_serves_each_row():
    model = build("xl")
    x = tokens(2, 9, 5)
    mask = segment_mask(9, 3, 2)
    both, mems = model(x, mask=mask)
    for b in range(2):
        one, one_mems = model(x[b : b + 1], mask=mask)
        torch.testing.assert_close(both[b : b + 1], one, rtol=1e-10, atol=1e-10)
        for m, m1 in zip(mems, one_mems):
            torch.testing.assert_close(m[b : b + 1], m1, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("first", [1, 4])
def test_xl_step_token_by_token_equals_one_forward_over_the_segment(first):
    """With room for the whole segment in the cache, each step's logits are the logits
    of one causal forward over the segment at that position (relative positions only:
    absolute ones restart at every segment, so no single pass equals them)."""
    model = build("xl")
    x = tokens(2, 10, 6)
    full, _ = model(x)
    logits, cache = model.step(x[:, :first], mem_len=16)
    torch.testing.assert_close(logits, full[:, first - 1], rtol=1e-10, atol=1e-10)
    for t in range(first, 10):
        logits, cache = model.step(x[:, t : t + 1], cache)
        torch.testing.assert_close(logits, full[:, t], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mem_len", [1, 3])
def test_xl_step_with_a_short_memory_equals_the_banded_pass(mem_len):
    """Token by token with `mem_len` states kept == one pass whose mask lets each token
    see itself and the `mem_len` before it."""
    model = build("xl")
    x = tokens(2, 10, 7)
    want, _ = model(x, mask=segment_mask(10, 1, mem_len))
    logits, cache = model.step(x[:, :1], mem_len=mem_len)
    got = [logits]
    for t in range(1, 10):
        logits, cache = model.step(x[:, t : t + 1], cache)
        got.append(logits)
    torch.testing.assert_close(torch.stack(got, 1), want, rtol=1e-10, atol=1e-10)


def step_logits(model, seq: torch.Tensor, t0: int) -> torch.Tensor:
    """The logits a cached decoder sees after the prompt `seq[:, :t0]` and then each
    later token of `seq` one at a time: `[B, T - t0 + 1, V]`."""
    if isinstance(model, TransformerLM):
        out, cache = model(seq[:, :t0], use_cache=True)
        got = [out[:, -1]]
        for t in range(t0, seq.size(1)):
            out, cache = model(seq[:, t : t + 1], cache, use_cache=True)
            got.append(out[:, -1])
    elif isinstance(model, TransformerXL):
        logits, cache = model.step(seq[:, :t0], mem_len=seq.size(1))
        got = [logits]
        for t in range(t0, seq.size(1)):
            logits, cache = model.step(seq[:, t : t + 1], cache)
            got.append(logits)
    else:
        out, state = model(seq[:, :t0])
        got = [out[:, -1]]
        for t in range(t0, seq.size(1)):
            logits, state = model.step(seq[:, t], state)
            got.append(logits)
    return torch.stack(got, 1)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "xl-absolute"])
@torch.no_grad()
def test_cached_generation_gives_the_tokens_and_logits_of_recomputing_everything(kind):
    model = build(kind)
    prompt = tokens(2, 3, 8)
    kwargs = dict(mem_len=16) if kind.startswith("xl") else {}
    seq = model.generate(prompt, 8, temperature=0, **kwargs).clone()  # out of inference mode
    if "use_cache" in model.generate.__code__.co_varnames:
        assert torch.equal(seq, model.generate(prompt, 8, temperature=0, use_cache=False))
    full, _ = model(seq)  # one forward over everything generated
    cached = step_logits(model, seq, 3)
    torch.testing.assert_close(cached, full[:, 2:], rtol=1e-10, atol=1e-10)
    assert torch.equal(full[:, 2:-1].argmax(-1), seq[:, 3:])  # greedy: argmax of each
