"""Transformer-XL: the relative shift, the four score terms, memory == banded one-pass,
generation, errors."""

from __future__ import annotations

import math

import pytest
import torch

from labnn.nn.attention import KVBuffer, causal_mask
from labnn.training.trainer import TrainConfig, Trainer
from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_shift
from labnn.nn.positions import sinusoidal_encoding
from labnn.training.evaluate import stream_loss
from labnn.xl.model import TransformerXL, XLConfig
from labnn.xl.memory import segment_mask, update_memory
from labnn.xl.cache import attend_one_token

V, D, H, L = 11, 16, 2, 2


def make_model(**overrides) -> TransformerXL:
    torch.manual_seed(0)
    sizes = dict(vocab_size=V, d_model=D, n_heads=H, n_layers=L, mem_len=4)
    config = XLConfig(**{**sizes, **overrides})
    model = TransformerXL(config).eval()
    # u and v start at zero; give them values so terms (c) and (d) are tested
    for block in model.blocks:
        biases = ("content_bias", "position_bias")
        for p in (getattr(block.attn, name, None) for name in biases):
            if p is not None:
                torch.nn.init.normal_(p, std=0.5)
    return model


def segments(tokens: torch.Tensor, seg_len: int) -> list[torch.Tensor]:
    return list(tokens.split(seg_len, dim=1))


def run_segments(model, tokens, seg_len, mem_len=None):
    mems, outs = None, []
    for x in segments(tokens, seg_len):
        logits, mems = model(x, mems, mem_len=mem_len)
        outs.append(logits)
    return torch.cat(outs, dim=1), mems


# ---------------------------------------------------------------- relative shift

@pytest.mark.parametrize("t,m", [(1, 0), (1, 5), (3, 0), (4, 3), (5, 7), (6, 2)])
def test_relative_shift_puts_distance_i_minus_j_at_every_visible_key(t, m):
    s = m + t
    # column r holds distance S - 1 - r
    distance_of_column = torch.arange(s - 1, -1, -1).float()
    # [B, H, T, S]
    x = (100 * torch.arange(t).float()[:, None] + distance_of_column).expand(2, 3, t, s)
    out = relative_shift(x)
    for i in range(t):
        for j in range(m + i + 1):
            assert out[1, 2, i, j].item() == 100 * i + (m + i - j), (i, j)


def test_relative_shift_matches_a_python_loop_on_random_scores():
    t, s = 5, 9
    x = torch.randn(2, 3, t, s)
    want = torch.zeros_like(x)
    for i in range(t):
        for j in range(s - t + i + 1):
            want[..., i, j] = x[..., i, j + t - 1 - i]
    visible = causal_mask(t, s)
    torch.testing.assert_close(relative_shift(x)[..., visible], want[..., visible])


def test_relative_shift_rejects_fewer_keys_than_queries():
    with pytest.raises(ValueError, match="T=4, S=3"):
        relative_shift(torch.zeros(4, 3))


# ---------------------------------------------------------------- relative attention

def test_scores_equal_the_four_terms_written_out():
    torch.manual_seed(1)
    attn = RelativeMultiHeadAttention(D, H)
    torch.nn.init.normal_(attn.content_bias)
    torch.nn.init.normal_(attn.position_bias)
    b, t, m = 2, 3, 4
    s = m + t
    q, k = torch.randn(b, H, t, D // H), torch.randn(b, H, s, D // H)
    r = attn.relative_keys(s)  # row S - 1 - delta holds distance delta
    got = attn.scores(q, k, r)
    u, v = attn.content_bias, attn.position_bias
    for i in range(t):
        for j in range(m + i + 1):
            r_ij = r[s - 1 - (m + i - j)]  # [H, D_h]
            a = (q[:, :, i] * k[:, :, j]).sum(-1)
            b_ = (q[:, :, i] * r_ij).sum(-1)
            c = (u * k[:, :, j]).sum(-1)
            d = (v * r_ij).sum(-1)
            want = (a + b_ + c + d) / math.sqrt(D // H)
            torch.testing.assert_close(got[:, :, i, j], want)


def test_clamp_len_gives_far_distances_the_encoding_of_clamp_len():
    attn = RelativeMultiHeadAttention(D, H, clamp_len=3)
    r = attn.relative_keys(8)  # distances 7, 6, ..., 0
    for row in range(0, 4):  # distances 7, 6, 5, 4 -> clamped to 3 (row 4)
        torch.testing.assert_close(r[row], r[4])
    assert not torch.allclose(r[4], r[5])


def test_relative_attention_gradcheck_float64():
    torch.manual_seed(2)
    attn = RelativeMultiHeadAttention(8, 2).double()
    torch.nn.init.normal_(attn.position_bias)
    x = torch.randn(2, 3, 8, dtype=torch.double, requires_grad=True)
    k_mem = torch.randn(2, 2, 2, 4, dtype=torch.double, requires_grad=True)
    v_mem = torch.randn(2, 2, 2, 4, dtype=torch.double, requires_grad=True)
    mask = causal_mask(3, 5)
    def attend(x, k, v):
        return attn(x, mask, cache=(k, v))[0]

    assert torch.autograd.gradcheck(attend, (x, k_mem, v_mem))


# ---------------------------------------------------------------- model behaviour

@pytest.mark.parametrize("seg_len,mem_len", [(4, 4), (3, 5), (5, 2), (4, 0)])
def test_segments_with_memory_equal_one_banded_pass(seg_len, mem_len):
    model = make_model()
    tokens = torch.randint(V, (2, 15))
    got, _ = run_segments(model, tokens, seg_len, mem_len)
    want, _ = model(tokens, mask=segment_mask(15, seg_len, mem_len))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_token_by_token_with_unbounded_memory_equals_full_causal_pass():
    model = make_model()
    tokens = torch.randint(V, (2, 12))
    got, mems = run_segments(model, tokens, 1, mem_len=100)
    want, _ = model(tokens)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert [list(m.shape) for m in mems] == [[2, 12, D]] * L


def test_absolute_positions_break_when_memory_is_reused():
    model = make_model(positions="absolute")
    tokens = torch.randint(V, (2, 8))
    got, _ = run_segments(model, tokens, 4, mem_len=4)
    want, _ = model(tokens, mask=segment_mask(8, 4, 4))
    # first segment: no memory, same positions
    torch.testing.assert_close(got[:, :4], want[:, :4])
    # positions restart at 0 in segment 2
    assert not torch.allclose(got[:, 4:], want[:, 4:], atol=1e-3)


def test_changing_future_tokens_never_changes_earlier_outputs():
    model = make_model()
    tokens = torch.randint(V, (1, 12))
    changed = tokens.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % V
    got, _ = run_segments(model, tokens, 4)
    other, _ = run_segments(model, changed, 4)
    torch.testing.assert_close(got[:, :7], other[:, :7])
    assert not torch.allclose(got[:, 7:], other[:, 7:])


def test_memory_is_detached_and_truncated():
    model = make_model().train()
    x1, x2 = torch.randint(V, (2, 2, 6))
    logits1, mems = model(x1)
    assert all(m.grad_fn is None and not m.requires_grad for m in mems)
    assert [list(m.shape) for m in mems] == [[2, 4, D]] * L
    logits2, _ = model(x2, mems)
    # reaches no node of segment 1: its graph is still intact afterwards
    logits2.sum().backward()
    logits1.sum().backward()


def test_memory_states_are_the_inputs_of_each_layer():
    model = make_model()
    x = torch.randint(V, (2, 6))
    _, mems = model(x, mem_len=6)
    torch.testing.assert_close(mems[0], model.embed(x))


def test_eval_memory_may_be_longer_than_training_memory():
    model = make_model()
    mems = None
    for x in segments(torch.randint(V, (2, 20)), 4):
        _, mems = model(x, mems, mem_len=12)
    assert [m.size(1) for m in mems] == [12] * L
    _, mems = model(x, mems)  # back to config.mem_len
    assert [m.size(1) for m in mems] == [4] * L
    _, mems = model(x, mems, mem_len=0)
    assert [list(m.shape) for m in mems] == [[2, 0, D]] * L
    logits, _ = model(x, mems)  # an empty memory is a valid memory
    assert logits.shape == (2, 4, V)


@pytest.mark.parametrize("positions", ["relative", "absolute"])
def test_generate_equals_token_by_token_forward(positions):
    model = make_model(positions=positions)
    prompt = torch.randint(V, (2, 5))
    got = model.generate(prompt, 7, temperature=0, mem_len=3)
    logits, mems = model(prompt, mem_len=3)
    out = prompt
    for _ in range(7):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        logits, mems = model(nxt, mems, mem_len=3)
    assert torch.equal(got, out)


def test_generate_samples_reproducibly_with_a_generator():
    model = make_model()
    prompt = torch.randint(V, (1, 3))
    a = model.generate(prompt, 6, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (1, 9)


def test_relative_model_has_position_projection_and_biases_more():
    rel, ab = make_model(), make_model(positions="absolute")
    # W_R, u, v vs. pos_scale
    assert rel.num_params() - ab.num_params() == L * (D * D + 2 * D) - 1


def test_trains_on_contiguous_streams_with_memory_carried():
    torch.manual_seed(0)
    ids = torch.arange(400) % 7  # a periodic text: memory helps
    model = TransformerXL(XLConfig(7, d_model=16, n_heads=2, n_layers=1, mem_len=8))
    config = TrainConfig(max_iters=30, batch_size=4, seq_len=8, lr=1e-2, warmup_iters=0,
                         eval_interval=30, eval_iters=2, stream=True,
                         show_progress=False)
    trainer = Trainer(model, ids[:300], ids[300:], config)
    history = trainer.fit()
    assert history["val_loss"][-1] < math.log(7) / 2
    assert [m.size(1) for m in trainer.state] == [8]


# ---------------------------------------------------------------- bad input

def test_memory_with_wrong_batch_width_or_layers_is_rejected():
    model = make_model()
    x = torch.randint(V, (2, 3))
    _, mems = model(x)
    with pytest.raises(ValueError, match=r"mems\[0\] has shape \[3, 3, 16\], expected "
                                         r"\[B=2"):
        model(x, [torch.zeros(3, 3, D)] * L)
    with pytest.raises(ValueError, match=r"mems\[1\] has shape \[2, 3, 8\].*D=16"):
        model(x, [mems[0], torch.zeros(2, 3, 8)])
    with pytest.raises(ValueError, match="list of 2 tensors.*got 1"):
        model(x, mems[:1])
    with pytest.raises(ValueError, match=r"mems\[1\] has shape \[2, 2, 16\], expected "
                                         r"\[B=2, M=3"):
        model(x, [mems[0], mems[1][:, :2]])


def test_memory_on_another_dtype_or_device_is_rejected():
    model = make_model()
    x = torch.randint(V, (2, 3))
    _, mems = model(x)
    with pytest.raises(ValueError, match=r"mems\[0\] is torch.float64 on cpu, but the "
                                         r"model runs torch.float32"):
        model(x, [m.double() for m in mems])
    with pytest.raises(ValueError, match=r"mems\[0\] is torch.float32 on meta"):
        model(x, [m.to("meta") for m in mems])


def test_bad_tokens_are_rejected():
    model = make_model()
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="contains id 11"):
        model(torch.tensor([[1, 11]]))


@pytest.mark.parametrize("mem_len", [-1, 2.5, "4"])
def test_negative_mem_len_is_rejected(mem_len):
    with pytest.raises(ValueError, match="mem_len must be a non-negative int"):
        XLConfig(vocab_size=V, mem_len=mem_len)
    with pytest.raises(ValueError, match="mem_len must be a non-negative int"):
        make_model()(torch.randint(V, (1, 2)), mem_len=mem_len)


@pytest.mark.parametrize("clamp_len", [0, -3, 1.5, True])
def test_invalid_clamp_len_is_rejected(clamp_len):
    with pytest.raises(ValueError, match="clamp_len must be None .* got "
                                         f"{clamp_len!r}"):
        XLConfig(vocab_size=V, clamp_len=clamp_len)
    with pytest.raises(ValueError, match="clamp_len must be None"):
        RelativeMultiHeadAttention(D, H, clamp_len=clamp_len)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("positions", "learned", "positions must be one of"),
        ("n_heads", 3, "d_model=128 must be even and divisible by n_heads=3"),
        ("dropout", 1.0, r"dropout must be in \[0, 1\)"),
        ("n_layers", 0, "n_layers must be a positive int, got 0"),
    ],
)
def test_config_names_the_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        XLConfig(vocab_size=V, **{field: value})


def test_generate_rejects_bad_arguments():
    model = make_model()
    prompt = torch.randint(V, (1, 2))
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        model.generate(prompt, -1)
    with pytest.raises(ValueError, match="mem_len must be a non-negative int, got -2"):
        model.generate(prompt, 2, mem_len=-2)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 2, temperature=-1.0)


def test_relative_keys_table_too_short_is_rejected():
    attn = RelativeMultiHeadAttention(D, H)
    with pytest.raises(ValueError, match="rel_keys covers 3 distances, need at least "
                                         "S=5"):
        attn(torch.randn(1, 5, D), causal_mask(5), rel_keys=attn.relative_keys(3))


@pytest.mark.parametrize(
    "overrides", [{}, {"clamp_len": 2}, {"positions": "absolute"}], ids=str
)
def test_step_logits_equal_forward_logits(overrides):
    model = make_model(**overrides)
    tokens = torch.randint(V, (2, 9))
    logits, cache = model.step(tokens[:, :4], mem_len=3)
    full, mems = model(tokens[:, :4], mem_len=3)
    torch.testing.assert_close(logits, full[:, -1])
    for i in range(4, 9):
        logits, cache = model.step(tokens[:, i : i + 1], cache)
        full, mems = model(tokens[:, i : i + 1], mems, mem_len=3)
        torch.testing.assert_close(logits, full[:, -1], atol=1e-5, rtol=1e-5)
    assert [k.size(2) for k, _ in cache.kv] == [3] * L


def test_step_from_one_cache_twice_gives_the_same_logits():
    model = make_model()
    tokens = torch.randint(V, (2, 6))
    _, cache = model.step(tokens[:, :5], mem_len=4)
    first, later = model.step(tokens[:, 5:], cache)
    # the cache kept growing in place: stepping from the old one must not see that
    for _ in range(3):
        _, later = model.step(tokens[:, 5:], later)
    again, _ = model.step(tokens[:, 5:], cache)
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_segment_mask_is_the_written_out_rule():
    mask = segment_mask(7, 3, 2)
    for i in range(7):
        for j in range(7):
            assert mask[i, j].item() == (3 * (i // 3) - 2 <= j <= i)


def test_update_memory_keeps_the_last_states_detached():
    mem, h = torch.randn(2, 3, 4), torch.randn(2, 2, 4, requires_grad=True)
    new = update_memory(mem, h, 4)
    torch.testing.assert_close(new, torch.cat([mem, h], 1)[:, 1:].detach())
    assert not new.requires_grad
    assert update_memory(mem, h, 0).shape == (2, 0, 4)
    assert update_memory(None, h, 9).shape == (2, 2, 4)


@pytest.mark.parametrize("mem, match", [
    (torch.zeros(3, 4, 2), r"mem has shape \[3, 4, 2\], expected \[B=2, M, D=4\] like h"),
    (torch.zeros(4, 2), r"mem has shape \[4, 2\], expected \[B=2, M, D=4\]"),
    (torch.zeros(2, 3, 4, dtype=torch.float64), r"mem is torch.float64 on cpu, but h is "
     r"torch.float32 on cpu"),
    (torch.zeros(2, 3, 4, device="meta"), r"mem is torch.float32 on meta, but h is"),
])
def test_update_memory_refuses_a_memory_that_does_not_fit_h(mem, match):
    """No check at the door: a float64 memory silently made the new memory float64; one of
    another shape or device failed inside torch's `cat`, 2-D `h` too."""
    with pytest.raises(ValueError, match=match):
        update_memory(mem, torch.zeros(2, 2, 4), 6)
    with pytest.raises(ValueError, match=r"h must be the layer's input states \[B, T, D\]"):
        update_memory(None, torch.zeros(2, 4), 6)


def test_stream_loss_scores_the_same_tokens_for_every_memory():
    model = make_model()
    ids = torch.randint(V, (200,))
    short = stream_loss(model, ids, batch_size=2, seq_len=5, mem_len=0, skip=3)
    long = stream_loss(model, ids, batch_size=2, seq_len=5, mem_len=15, skip=3)
    assert math.isfinite(short) and math.isfinite(long) and short != long
    with pytest.raises(ValueError, match="skip must be in"):
        stream_loss(model, ids, batch_size=2, seq_len=5, skip=100)


def test_single_token_attention_step_is_for_generation_only():
    attn = RelativeMultiHeadAttention(D, H)  # a new module is in training mode
    table = attn.key_table(3)
    cache = KVBuffer.empty(torch.empty(1, H, 0, D // H))
    with pytest.raises(RuntimeError, match=r"for generation: call model.eval\(\) "
                                           r"first"):
        attend_one_token(attn, torch.randn(1, D), cache, table)
    # decoding needs eval mode, checked at the door (it used to take the general path,
    # dropout and all; a submodule alone in training mode raised from here)
    model = make_model().train()
    with pytest.raises(RuntimeError, match=r"needs eval mode, but the model \(TransformerXL\)"):
        model.step(torch.randint(V, (2, 1)))


# ------------------------------------- masks that let a query see later keys (issue 12)

def relative_attention_written_out(attn, x, mask, cache=None):
    """Relative attention with every score's four terms written out with the SIGNED
    distance `M + i - j` (negative for later keys), then masked softmax, values and
    output projection."""
    q, (k, v) = attn.project(x, cache)
    b, h, t, dh = q.shape
    s = k.size(2)
    m = s - t
    u, w = attn.content_bias, attn.position_bias
    scores = torch.empty(b, h, t, s, dtype=q.dtype)
    for i in range(t):
        for j in range(s):
            delta = torch.tensor([m + i - j])
            if attn.clamp_len is not None:
                delta = delta.clamp(-attn.clamp_len, attn.clamp_len)
            enc = sinusoidal_encoding(delta, attn.pos_proj.in_features).to(q.dtype)
            r = attn.pos_proj(enc).view(h, dh)
            term = (q[:, :, i] + u) * k[:, :, j] + (q[:, :, i] + w) * r
            scores[:, :, i, j] = term.sum(-1) / math.sqrt(dh)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    y = scores.softmax(-1) @ v
    return attn.out_proj(y.transpose(1, 2).flatten(2))


@pytest.mark.parametrize("m", [0, 3])
@pytest.mark.parametrize("mask_kind", ["none", "all", "band", "bidirectional_window"])
@pytest.mark.parametrize("clamp_len", [None, 2])
def test_masks_that_see_later_keys_use_the_signed_distance(m, mask_kind, clamp_len):
    torch.manual_seed(3)
    attn = RelativeMultiHeadAttention(D, H, clamp_len=clamp_len).double().eval()
    torch.nn.init.normal_(attn.content_bias)
    torch.nn.init.normal_(attn.position_bias)
    t, s = 4, m + 4
    x = torch.randn(2, t, D, dtype=torch.double)
    cache = None if m == 0 else (torch.randn(2, H, m, D // H, dtype=torch.double),) * 2
    i, j = torch.arange(t)[:, None] + m, torch.arange(s)[None, :]
    mask = {"none": None, "all": torch.ones(t, s, dtype=torch.bool),
            "band": (j - i).abs() <= 1, "bidirectional_window": j >= i - 2}[mask_kind]
    got, _, _ = attn(x, mask, cache=cache)
    want = relative_attention_written_out(attn, x, mask, cache)
    torch.testing.assert_close(got, want)


def test_causal_masks_still_equal_the_written_out_four_terms():
    torch.manual_seed(4)
    attn = RelativeMultiHeadAttention(D, H).double().eval()
    torch.nn.init.normal_(attn.position_bias)
    x = torch.randn(2, 5, D, dtype=torch.double)
    cache = (torch.randn(2, H, 2, D // H, dtype=torch.double),) * 2
    mask = causal_mask(5, 7)
    want = relative_attention_written_out(attn, x, mask, cache)
    torch.testing.assert_close(attn(x, mask, cache=cache)[0], want)


def test_xl_model_with_mask_none_sees_every_key_with_signed_distances():
    model = make_model().double()
    x = torch.randint(0, V, (2, 5))
    full = torch.ones(5, 5, dtype=torch.bool)
    logits_none, _ = model(x, mask=full)
    # a bidirectional model: changing the last token must change the first position's
    # logits
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % V
    assert not torch.allclose(model(y, mask=full)[0][:, 0], logits_none[:, 0])


# ------------------------------------------------------------ cache misuse (issue 12)

def test_step_refuses_a_cache_of_another_layer_count():
    small, big = make_model(), make_model(n_layers=3)
    _, cache = small.step(torch.randint(0, V, (2, 3)))
    with pytest.raises(ValueError, match="cache.*2 layers.*3"):
        big.step(torch.randint(0, V, (2, 1)), cache)


def test_step_names_the_relative_keys_when_only_they_are_missing():
    """A cache whose relative keys were cleared (trial 47b) was told it held 2 layers where the
    model has 2."""
    model = make_model()
    _, cache = model.step(torch.randint(0, V, (2, 3)))
    cache.rel_keys.clear()
    with pytest.raises(ValueError, match=r"relative keys of 0 layers, but this model has 2"):
        model.step(torch.randint(0, V, (2, 1)), cache)


def test_step_refuses_a_cache_of_another_batch_size_width_or_kind():
    model = make_model()
    _, cache = model.step(torch.randint(0, V, (2, 3)))
    with pytest.raises(ValueError, match="batch size 2.*tokens.*3"):
        model.step(torch.randint(0, V, (3, 1)), cache)
    with pytest.raises(TypeError, match="cache must be an XLCache"):
        model.step(torch.randint(0, V, (2, 1)), [torch.zeros(2, 4, D)] * L)
    other = make_model(n_heads=4)
    with pytest.raises(ValueError, match="heads"):
        other.step(torch.randint(0, V, (2, 1)), cache)
    absolute = make_model(positions="absolute")
    with pytest.raises(ValueError, match="relative"):
        absolute.step(torch.randint(0, V, (2, 1)), cache)
    with pytest.raises(ValueError, match="dtype|float64"):
        make_model().double().step(torch.randint(0, V, (2, 1)), cache)
