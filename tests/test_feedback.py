"""Tests of the Feedback Transformer: step() == forward(), prefixes, state across calls,
truncated gradients, the layer mix, cached generation, and every bad input's error
message."""

import pytest
import torch

from labnn.feedback.model import FeedbackConfig, FeedbackState, FeedbackTransformer
from labnn.feedback.layer import LayerMix, RelativeBias, feedback_attention

V = 13


def make(seed: int = 0, **overrides) -> FeedbackTransformer:
    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=V, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_distance=4
    )
    kwargs.update(overrides)
    model = FeedbackTransformer(FeedbackConfig(**kwargs)).eval()
    with (
        torch.no_grad()
    ):  # non-zero mix logits and relative biases (both start at zero) so tests see them
        model.mix.logits.normal_(0, 0.5)
        for layer in model.layers:
            layer.attn.rel.bias.normal_(0, 0.5)
    return model


def tokens(b: int = 3, t: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


CONFIGS = [
    dict(),
    dict(shared_kv=True),
    dict(attn_len=3),
    dict(attn_len=3, shared_kv=True, block_len=4),
    dict(n_layers=1, attn_len=1),
]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_step_equals_forward(overrides):
    model, x = make(**overrides), tokens()
    want, _ = model(x)
    state, got = None, []
    for t in range(x.size(1)):
        logits, state = model.step(x[:, t], state)
        got.append(logits)
    torch.testing.assert_close(torch.stack(got, 1), want, atol=1e-6, rtol=1e-5)
    assert state.offset == x.size(1)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_prefix_consistency_and_causality(overrides):
    model, x = make(**overrides), tokens()
    full, _ = model(x)
    for t in (0, 4, 9):
        prefix, _ = model(x[:, : t + 1])
        torch.testing.assert_close(prefix[:, t], full[:, t], atol=1e-6, rtol=1e-5)
    changed = x.clone()
    changed[:, 6] = (changed[:, 6] + 1) % V
    other, _ = model(changed)
    torch.testing.assert_close(other[:, :6], full[:, :6], atol=0, rtol=0)
    assert not torch.allclose(other[:, 6:], full[:, 6:])


@pytest.mark.parametrize("overrides", CONFIGS)
def test_state_carried_across_calls(overrides):
    model, x = make(**overrides), tokens(t=11)
    want, want_state = model(x)
    first, state = model(x[:, :5])
    second, state = model(x[:, 5:], state)
    torch.testing.assert_close(
        torch.cat([first, second], 1), want, atol=1e-6, rtol=1e-5
    )
    torch.testing.assert_close(state.memory, want_state.memory, atol=1e-6, rtol=1e-5)
    assert not state.memory.requires_grad and not any(
        k.requires_grad for k in state.keys
    )
    n = overrides.get("attn_len") or x.size(1)
    assert state.memory.shape == (3, n, 16)
    assert len(state.keys) == (
        1 if overrides.get("shared_kv") else model.config.n_layers
    )


def test_window_longer_than_input_changes_nothing():
    x = tokens(t=8)
    torch.testing.assert_close(make(attn_len=8)(x)[0], make()(x)[0], atol=0, rtol=0)
    assert not torch.allclose(make(attn_len=2)(x)[0], make()(x)[0])


def test_no_length_limit():
    model = make(attn_len=5)
    logits, state = model(tokens(b=1, t=300))
    assert (
        logits.shape == (1, 300, V)
        and state.memory.shape == (1, 5, 16)
        and torch.isfinite(logits).all()
    )


def test_empty_input_keeps_state():
    model = make()
    _, state = model(tokens(t=4))
    logits, same = model(tokens(t=0), state)
    assert logits.shape == (3, 0, V)
    torch.testing.assert_close(same.memory, state.memory)


def embedding_grad(model: FeedbackTransformer, x: torch.Tensor, t: int) -> torch.Tensor:
    """Gradient of the logits at step t with respect to the embedding of every step,
    `[T]` norms."""
    captured = {}

    def keep(module, args, out):
        out.retain_grad()
        captured["emb"] = out

    handle = model.embed.register_forward_hook(keep)
    logits, _ = model(x)
    handle.remove()
    logits[:, t].sum().backward()
    return captured["emb"].grad.norm(dim=(0, 2))


@pytest.mark.parametrize("shared_kv", [False, True])
def test_gradients_reach_earlier_memory_within_a_block_only(shared_kv):
    model, x = make(block_len=4, shared_kv=shared_kv), tokens(t=8)
    inside = embedding_grad(model, x, 3)
    assert (inside[:4] > 0).all() and (inside[4:] == 0).all()
    across = embedding_grad(model, x, 6)
    assert (across[:4] == 0).all(), "gradient crossed a block boundary"
    assert (across[4:7] > 0).all() and across[7] == 0
    unblocked = embedding_grad(make(shared_kv=shared_kv), x, 6)
    assert (unblocked[:7] > 0).all()


def test_layer_mix_sums_to_one_and_weights_layers():
    model = make(n_layers=3)
    w = model.layer_weights()
    assert w.shape == (4,) and not w.requires_grad
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))
    mix = LayerMix(3)
    with torch.no_grad():
        mix.logits.copy_(torch.tensor([0.0, 1.0, 2.0]))
    xs = torch.randn(3, 2, 5)
    want = sum(
        p * x for p, x in zip(torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0), xs)
    )
    torch.testing.assert_close(mix(xs), want)


def test_relative_bias_clamps_distances():
    rel = RelativeBias(n_heads=2, max_distance=3)
    with torch.no_grad():
        rel.bias.copy_(torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]))
    torch.testing.assert_close(
        rel(5),
        torch.tensor([[3.0, 3.0, 3.0, 2.0, 1.0], [30.0, 30.0, 30.0, 20.0, 10.0]]),
    )
    assert rel(0).shape == (2, 0)


def test_feedback_attention_gradcheck_and_empty_memory():
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 2, 3), (2, 2, 4, 3), (2, 2, 4, 3)]
    q, k, v = (
        torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
        for s in shapes
    )
    bias = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(feedback_attention, (q, k, v, bias))
    empty = torch.zeros(2, 2, 0, 3)
    assert (
        feedback_attention(torch.randn(2, 2, 3), empty, empty, torch.zeros(2, 0)) == 0
    ).all()


def test_shared_kv_has_one_projection():
    shared, separate = make(shared_kv=True), make()
    keys = shared.state_dict().keys()
    assert "kv.weight" in keys and not any(
        k.startswith("layers.") and ".kv." in k for k in keys
    )
    assert (
        "layers.0.attn.kv.weight" in separate.state_dict()
        and "kv.weight" not in separate.state_dict()
    )
    assert separate.num_params() - shared.num_params() == (
        separate.config.n_layers - 1
    ) * (2 * 16 * 16 + 2 * 16)


@pytest.mark.parametrize("overrides", [dict(), dict(attn_len=3, shared_kv=True)])
def test_generation_with_cache_equals_recomputation(overrides):
    model, prompt = make(**overrides), tokens(t=3)
    for temperature, top_k in [(0, None), (1.0, 5)]:
        runs = [
            model.generate(
                prompt,
                8,
                temperature,
                top_k,
                use_cache=cache,
                generator=torch.Generator().manual_seed(7),
            )
            for cache in (True, False)
        ]
        assert runs[0].shape == (3, 11)
        assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(attn_len=0), "attn_len must be a positive int or None, got 0"),
        (dict(attn_len=-3), "attn_len must be a positive int or None, got -3"),
        (dict(block_len=0), "block_len must be a positive int or None, got 0"),
        (dict(max_distance=0), "max_distance must be a positive int, got 0"),
        (dict(d_model=10, n_heads=3), "d_model=10 must be divisible by n_heads=3"),
        (dict(dropout=1.0), r"dropout must be in \[0, 1\), got 1.0"),
    ],
)
def test_bad_config(overrides, match):
    kwargs = dict(vocab_size=V, d_model=16, n_heads=2)
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=match):
        FeedbackConfig(**kwargs)


def test_state_from_another_batch_size_or_model():
    model = make()
    _, state = model(tokens(b=3, t=4))
    with pytest.raises(
        ValueError,
        match=r"expected batch size 2 \(the tokens' batch "
        r"size\)",
    ):
        model(tokens(b=2, t=4), state)
    with pytest.raises(ValueError, match=r"expected batch size 2"):
        model.step(tokens(b=2, t=1)[:, 0], state)
    for other in (make(d_model=8), make(shared_kv=True), make(n_layers=3)):
        _, foreign = other(tokens(b=3, t=4))
        with pytest.raises(
            ValueError,
            match=r"state does not fit this model.*another "
            r"model",
        ):
            model(tokens(b=3, t=4), foreign)
    with pytest.raises(TypeError, match="state must be a FeedbackState.*got list"):
        model(tokens(b=3, t=4), [state.memory])


def test_bad_tokens():
    model = make()
    with pytest.raises(
        ValueError,
        match=rf"tokens contains id {V}, outside the "
        rf"vocabulary \[0, {V}\)",
    ):
        model(torch.full((1, 3), V))
    with pytest.raises(ValueError, match=r"token contains id -1"):
        model.step(torch.tensor([-1]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(
        ValueError,
        match=r"token must have 1 dimension, got shape "
        r"\[1, 1\]",
    ):
        model.step(torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt must hold at least one token"):
        model.generate(torch.zeros(2, 0, dtype=torch.long), 3)


def test_step_needs_eval_mode():
    model = make().train()
    with pytest.raises(
        RuntimeError,
        match=r"step\(\) is for decoding and needs eval "
        r"mode.*model.eval\(\)",
    ):
        model.step(torch.tensor([1, 2]))
    model(tokens())  # training itself runs the token loop through forward()


def test_state_nbytes_and_dataclass():
    model = make(attn_len=3, shared_kv=True)
    _, state = model(tokens(b=1, t=5))
    assert isinstance(state, FeedbackState)
    assert state.nbytes() == 4 * (3 * 16 + 2 * 3 * 16)


@pytest.mark.parametrize("shared_kv", [True, False])
def test_a_training_step_under_autocast_bfloat16(shared_kv):
    """Under autocast the state holds autocast's dtype: it was refused ("state holds
    torch.bfloat16 ... but the model is torch.float32")."""
    model, x = make(shared_kv=shared_kv, attn_len=3, block_len=2).train(), tokens(t=10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, state = model(x[:, :5])
        logits, state = model(x[:, 5:], state)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                 x[:, 5:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.eval().generate(x[:, :2], 3)
        model.step(x[:, 0], state)
    with pytest.raises(ValueError, match=r"state holds torch.bfloat16.*made under torch.autocast"):
        model(x[:, :2], state)  # outside autocast


@pytest.mark.parametrize("attn_len, reach", [(4, "attn_len = 4 steps"),
                                             (None, r"every earlier step \(attn_len=None\)")])
def test_stream_logits_refuses_a_mem_len_naming_what_the_model_reads(attn_len, reach):
    """With attn_len=None the message said "it reads back attn_len = None steps"."""
    model = FeedbackTransformer(FeedbackConfig(vocab_size=5, d_model=8, n_heads=2,
                                               n_layers=1, attn_len=attn_len))
    with pytest.raises(ValueError, match=r"mem_len must be None for a feedback model, got 3: "
                                         rf"it reads back {reach}, set when it is built"):
        model.stream_logits(torch.zeros(1, 2, dtype=torch.long), mem_len=3)


def test_a_state_longer_than_the_window_is_read_through_the_window():
    """A state of 10 memory vectors (from the same weights built with no window) given to a
    model with attn_len=4: its first token attended to all 10, past its window, while the
    key/value-sharing model (same weights) trims the state at its door. Both now read the
    last 4, as the state they return holds."""
    import dataclasses

    from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState

    torch.manual_seed(0)
    size = dict(vocab_size=11, d_model=16, n_heads=2, n_layers=2)
    wide = FeedbackTransformer(FeedbackConfig(**size, shared_kv=True)).eval()
    narrow = FeedbackTransformer(FeedbackConfig(**size, shared_kv=True, attn_len=4)).eval()
    narrow.load_state_dict(wide.state_dict())
    kv_model = FeedbackTransformerKV(FeedbackKVConfig(**size, attn_len=4)).eval()
    kv_model.load_state_dict(wide.state_dict())
    with torch.no_grad():
        _, state = wide(torch.randint(0, 11, (1, 10)))
        last4 = dataclasses.replace(
            state, memory=state.memory[:, -4:], keys=tuple(k[:, :, -4:] for k in state.keys),
            values=tuple(v[:, :, -4:] for v in state.values))
        y = torch.randint(0, 11, (1, 3))
        got, kept = narrow(y, state)
        want, _ = narrow(y, last4)
        kv_logits, _ = kv_model(y, KVState.from_feedback(state))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, kv_logits)
    assert kept.memory.size(1) == 4
