import pytest
import torch

from labnn.nn.generation import sample_next
from labnn.transformer import TransformerConfig, TransformerLM


def model(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=11, seq_len=32, d_model=32, n_heads=4, n_layers=2)
    return TransformerLM(TransformerConfig(**{**cfg, **kw})).eval()


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_cached_logits_equal_uncached(positions, device):
    m = model(positions=positions).to(device)
    x = torch.randint(0, 11, (2, 20), device=device)
    full, _ = m(x)
    logits, cache = m(x[:, :5], use_cache=True)
    steps = [logits]
    for t in range(5, 20):
        logits, cache = m(x[:, t : t + 1], cache, use_cache=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)


def test_causality_future_tokens_do_not_change_the_past():
    m = model()
    x = torch.randint(0, 11, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 11
    torch.testing.assert_close(m(x)[0][:, :10], m(y)[0][:, :10])
    assert not torch.allclose(m(x)[0][:, 10:], m(y)[0][:, 10:])


def test_attn_len_bands_the_causal_mask_and_the_cache_agrees():
    m = model(attn_len=3)
    mask = m.attention_mask(5, 0, "cpu")
    assert mask.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1]]
    x = torch.randint(0, 11, (2, 12))
    y = x.clone()
    y[:, :4] = (y[:, :4] + 1) % 11  # beyond the reach of the last token: 2 layers x 3 tokens back
    torch.testing.assert_close(m(x)[0][:, -1], m(y)[0][:, -1])
    full, _ = m(x)
    logits, cache = m(x[:, :1], use_cache=True)
    steps = [logits]
    for t in range(1, 12):
        logits, cache = m(x[:, t : t + 1], cache, use_cache=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="attn_len must be a positive int or None, got 0"):
        TransformerConfig(vocab_size=5, attn_len=0)


def test_generate_cached_equals_uncached():
    m = model()
    prompt = torch.randint(0, 11, (2, 3))
    a = m.generate(prompt, 25, temperature=0)
    b = m.generate(prompt, 25, temperature=0, use_cache=False)
    assert torch.equal(a, b) and a.shape == (2, 28)  # 28 <= seq_len: the cache covers every step
    c = m.generate(prompt, 40, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    d = m.generate(prompt, 40, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0), use_cache=False)
    assert torch.equal(c, d)  # past seq_len both paths slide the window


def test_head_is_tied_and_params_counted_once():
    m = model()
    assert m.head.weight is m.tok_emb.weight
    assert m.num_params() == sum(p.numel() for p in set(m.parameters()))


def test_top_k_and_greedy_sampling():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0]])
    assert sample_next(logits, 0).item() == 1
    draws = {sample_next(logits, 1.0, top_k=2, generator=torch.Generator().manual_seed(i)).item() for i in range(50)}
    assert draws == {1, 3}
    with pytest.raises(ValueError, match="temperature must be a number >= 0"):
        sample_next(logits, -1.0)
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        sample_next(logits, 1.0, top_k=0)


def test_attention_maps_are_causal_distributions():
    maps = model().attention_maps(torch.randint(0, 11, (1, 9)))
    assert len(maps) == 2 and maps[0].shape == (1, 4, 9, 9)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(1, 4, 9))
    assert torch.all(maps[0].triu(1) == 0)


def test_bad_inputs_are_named():
    m = model()
    with pytest.raises(TypeError, match="integer token ids.*float32"):
        m(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"contains id 11, outside the vocabulary \[0, 11\)"):
        m(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="longer than seq_len=32"):
        m(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        TransformerConfig(vocab_size=5, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="positions must be one of"):
        TransformerConfig(vocab_size=5, positions="rotary")
    m(torch.zeros(1, 40, dtype=torch.long)[:, :32])  # exactly seq_len is fine
    model(positions="sinusoidal")(torch.zeros(1, 64, dtype=torch.long))  # no length limit


def test_a_cache_passed_in_is_used_and_returned_without_use_cache():
    m = model()
    x = torch.randint(0, 11, (2, 6))
    full, _ = m(x)
    _, cache = m(x[:, :5], use_cache=True)
    logits, new_cache = m(x[:, 5:], cache)  # no use_cache: the cache must still be continued and returned
    torch.testing.assert_close(logits[:, 0], full[:, 5], atol=1e-5, rtol=1e-4)
    assert new_cache is not None and new_cache[0][0].size(2) == 6


def test_a_cache_of_another_model_batch_or_kind_is_refused():
    m = model()
    _, cache = m(torch.randint(0, 11, (2, 5)), use_cache=True)
    with pytest.raises(ValueError, match="cache has 2 layers, expected 3"):
        model(n_layers=3)(torch.randint(0, 11, (2, 1)), cache)
    with pytest.raises(ValueError, match=r"cache\[0\] has keys \[2, 4, 5, 8\].*batch size 3"):
        m(torch.randint(0, 11, (3, 1)), cache)
    with pytest.raises(ValueError, match=r"cache\[0\].*heads"):
        model(n_heads=2)(torch.randint(0, 11, (2, 1)), cache)
    with pytest.raises(ValueError, match=r"cache\[1\] holds 4 keys.*cache\[0\] holds 5"):
        m(torch.randint(0, 11, (2, 1)), [cache[0], (cache[1][0][:, :, 1:], cache[1][1][:, :, 1:])])
    with pytest.raises(ValueError, match=r"cache\[0\] is torch.float32.*float64"):
        model().double()(torch.randint(0, 11, (2, 1)), cache)
    with pytest.raises(TypeError, match="cache must be a list of"):
        m(torch.randint(0, 11, (2, 1)), cache[0][0])
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        m(torch.randint(0, 11, (2, 1)), use_cache="yes")


def test_generate_under_autocast_bfloat16():
    """Under `torch.autocast` the cache holds autocast's dtype: it was refused ("cache[0] is
    torch.bfloat16 on cpu, but the model is torch.float32 on cpu")."""
    m, prompt = model(), torch.randint(0, 11, (2, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m.generate(prompt, 5, temperature=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, cache = m(prompt, use_cache=True)
        m(prompt[:, :1], cache, use_cache=True)
    assert out.shape == (2, 8)
    with pytest.raises(ValueError, match=r"cache\[0\] is torch.bfloat16.*under torch.autocast"):
        m(prompt[:, :1], cache, use_cache=True)  # outside autocast


def test_generate_refuses_a_model_in_training_mode():
    """Sampling with dropout on is a silent wrong result: generate refuses it at its door, as
    the XL and feedback models do, naming the module and the fix."""
    m = TransformerLM(TransformerConfig(vocab_size=11, seq_len=16, d_model=16, n_heads=2, n_layers=1,
                                        dropout=0.1))
    prompt = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(RuntimeError, match=r"generation needs eval mode.*call model.eval\(\) first"):
        m.train().generate(prompt, 2)
    m.eval().generate(prompt, 2)


def _keys_seen(m):
    """The number of keys layer 0's attention read at each call of `m` (a forward hook)."""
    seen = []
    m.blocks[0].attn.register_forward_hook(lambda mod, args, out: seen.append(tuple(out[2])[0].size(2)))
    return seen


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
def test_a_windowed_generation_keeps_only_the_window(positions):
    """With `attn_len` = W a token reads itself and the W before it, so generation needs to
    hold only W keys and values per layer: the cache grew with the text (every key kept,
    the old ones masked), O(T) memory and time per token for a window of 3. Positions stay
    absolute after the cache is cut (sinusoids read the token's position, not the cache's
    length): the tokens equal those of recomputing the whole context."""
    m = model(attn_len=3, positions=positions, seq_len=64)
    seen = _keys_seen(m)
    prompt = torch.randint(0, 11, (2, 9))
    a = m.generate(prompt, 30, temperature=0)
    assert max(seen[1:]) == 4, seen  # W cached keys and the new token's own
    b = m.generate(prompt, 30, temperature=0, use_cache=False)
    assert torch.equal(a, b)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert torch.equal(m.generate(prompt, 30, top_k=4, generator=g()),
                       m.generate(prompt, 30, top_k=4, generator=g(), use_cache=False))


def test_generation_appends_keys_without_copying_the_cache():
    """`torch.cat([cached, new])` copies every cached key at every token (`KVBuffer`'s
    docstring): generation appends into a `KVBuffer` instead, and reads no mask per token."""
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    m, prompt = model(), torch.randint(0, 11, (2, 5))
    m.generate(prompt, 2, temperature=0)  # warm
    with Count() as few:
        m.generate(prompt, 2, temperature=0)
    with Count() as many:
        m.generate(prompt, 22, temperature=0)
    for name in ("cat", "ones"):  # as many as for 2 tokens: none per token
        assert many.calls.count(name) == few.calls.count(name), name


def test_a_whole_sequence_attends_with_the_fused_kernels_causal_flag(monkeypatch):
    """An explicit `[T, T]` mask rules out flash attention on a GPU (its kernel takes no
    mask): a sequence read from the start, with no band, asks the fused kernel for
    `is_causal=True` instead. Same values and gradients as the explicit mask (bitwise on
    this CPU); a cache or a band still passes its mask."""
    import labnn.nn.attention as attention
    seen, real = [], attention.F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen.append((attn_mask is None, kw.get("is_causal", False)))
        return real(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    m, x = model(), torch.randint(0, 11, (2, 9))
    m(x)
    assert seen == [(True, True)] * 2
    seen.clear()
    _, cache = m(x[:, :5], use_cache=True)
    m(x[:, 5:], cache)
    assert seen == [(True, True)] * 2 + [(False, False)] * 2
    seen.clear()
    model(attn_len=3)(x)
    assert seen == [(False, False)] * 2


def test_the_causal_flag_equals_the_causal_mask():
    from labnn.nn.attention import MultiHeadAttention, causal_mask
    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3)
    x = torch.randn(2, 7, 12, requires_grad=True)
    for need_weights in (False, True):
        a, wa, _ = attn(x, causal_mask(7), need_weights=need_weights)
        b, wb, _ = attn(x, causal=True, need_weights=need_weights)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert (wa is None) == (wb is None) and (wa is None or torch.equal(wa, wb))
        ga, = torch.autograd.grad(a.sum(), x)
        gb, = torch.autograd.grad(b.sum(), x)
        torch.testing.assert_close(ga, gb)
    with pytest.raises(ValueError, match="causal=True.*no mask and no cache"):
        attn(x, causal_mask(7), causal=True)
