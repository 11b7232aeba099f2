import math

import pytest
import torch
import torch.nn.functional as F

from labnn.nn.attention import KVBuffer, MultiHeadAttention, causal_mask, scaled_dot_product_attention


def qkv(b=2, h=3, t=5, s=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, t, d, generator=g), torch.randn(b, h, s, d, generator=g), torch.randn(b, h, s, d, generator=g))


def test_causal_mask_with_memory_offset():
    m = causal_mask(2, 5)
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert torch.equal(causal_mask(4), torch.ones(4, 4).tril().bool())
    with pytest.raises(ValueError, match="t=3, s=2"):
        causal_mask(3, 2)


@pytest.mark.parametrize("masked", [False, True])
def test_matches_pytorch_sdpa(masked):
    q, k, v = qkv()
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(1)) > 0.3 if masked else None
    if masked:
        mask[..., 0] = True  # no fully masked row: NaN there on torch 2.3 (compatibility.md)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_weights_are_softmax_of_scaled_scores():
    q, k, v = qkv()
    _, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, (q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1))


def test_mask_true_means_may_attend_and_fully_masked_row_is_zero():
    q, k, v = qkv()
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[0, 2] = True  # query 0 sees only key 2; the other queries see nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 2])
    assert torch.all(out[:, :, 1:] == 0) and torch.all(weights[:, :, 1:] == 0)
    q.requires_grad_(True)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_gives_a_fully_masked_query_the_out_proj_bias_and_finite_gradients(need_weights):
    """MultiHeadAttention's docstring and notebook 01 (Exercises 2 and 5): a query that may attend no
    key gets zeros from either path's attention, so out_proj's bias, and finite gradients. The fused
    path relies on torch's kernel for the gradients (finite on torch 2.13's CPU kernel)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = causal_mask(5)
    mask[2] = False  # query 2 may attend nothing
    y, _, _ = mha(x, mask, need_weights=need_weights)
    torch.testing.assert_close(y[:, 2], mha.out_proj.bias.expand(2, 16))
    assert torch.isfinite(y).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_bad_masks_are_named():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"mask has shape \[5, 5\].*T=5, S=7"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool tensor"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7))


def test_mha_equals_nn_multiheadattention_with_copied_weights():
    torch.manual_seed(0)
    d, h, t = 16, 4, 6
    mine, ref = MultiHeadAttention(d, h), torch.nn.MultiheadAttention(d, h, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(mine.qkv.weight)
        ref.in_proj_bias.copy_(mine.qkv.bias)
        ref.out_proj.weight.copy_(mine.out_proj.weight)
        ref.out_proj.bias.copy_(mine.out_proj.bias)
    x = torch.randn(3, t, d)
    mask = causal_mask(t)
    want, want_w = ref(x, x, x, attn_mask=~mask, average_attn_weights=False)  # PyTorch's polarity: True = blocked
    for need_weights in (False, True):
        got, got_w, _ = mine(x, mask, need_weights=need_weights)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-5)


def test_mha_cache_equals_full_pass():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    full, _, _ = mha(x, causal_mask(7))
    first, _, cache = mha(x[:, :4], causal_mask(4))
    rest, _, _ = mha(x[:, 4:], causal_mask(3, 7), cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-6, rtol=1e-5)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model=10 must be divisible by n_heads=4"):
        MultiHeadAttention(10, 4)


def _kv(t, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, t, 4, generator=g), torch.randn(2, 3, t, 4, generator=g)


@pytest.mark.parametrize("transposed", [False, True])
def test_kv_buffer_equals_concatenation_and_older_buffers_never_change(transposed):
    parts = [_kv(t, seed) for seed, t in enumerate([3, 1, 1, 2, 1, 1, 1])]
    buf, history = KVBuffer.empty(parts[0][0], transposed=transposed), []
    for k, v in parts:
        buf = buf.append(k, v).last(4)  # a sliding window of 4, as generation keeps
        history.append(buf)
    keys = torch.cat([k for k, _ in parts], 2)
    values = torch.cat([v for _, v in parts], 2)
    for i, old in enumerate(history):  # every window ever returned still holds its own tokens
        n = sum(k.size(2) for k, _ in parts[: i + 1])
        k, v = old
        torch.testing.assert_close(k, keys[:, :, max(0, n - 4) : n], rtol=0, atol=0)
        torch.testing.assert_close(v, values[:, :, max(0, n - 4) : n], rtol=0, atol=0)
    # two continuations of one cache (a branch) are independent
    a, b = history[2].append(*_kv(1, 10)), history[2].append(*_kv(1, 11))
    torch.testing.assert_close(list(a)[0][:, :, -1:], _kv(1, 10)[0], rtol=0, atol=0)
    torch.testing.assert_close(list(b)[0][:, :, -1:], _kv(1, 11)[0], rtol=0, atol=0)
    torch.testing.assert_close(list(a)[0][:, :, :-1], list(history[2])[0], rtol=0, atol=0)
    k, _ = a  # transposed: q @ k.transpose(2, 3) reads rows of K^T, contiguous along S;
    assert k.stride(2 if transposed else 3) == 1  # else rows of K, as the fused kernel wants
    assert torch.equal(a.keys_t, k.transpose(2, 3)) and a.allocated_bytes == sum(
        t.untyped_storage().nbytes() for t in a)


def test_kv_buffer_refuses_gradients_and_wrong_shapes():
    k, v = _kv(2, 0)
    buf = KVBuffer.empty(k)
    with pytest.raises(RuntimeError, match="for inference"):
        buf.append(k.requires_grad_(), v)
    with pytest.raises(ValueError, match=r"must both be \[B, H, T, D_h\] = \[2, 3, 4\]"):
        buf.append(torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5))


@torch.no_grad()
def test_attention_with_kv_buffer_equals_tuple_cache():
    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3).eval()
    x = torch.randn(2, 6, 12)
    tuple_cache, buffer_cache = None, KVBuffer.empty(torch.empty(2, 3, 0, 4))
    for i in range(6):
        want, _, tuple_cache = attn(x[:, i : i + 1], cache=tuple_cache)
        got, _, buffer_cache = attn(x[:, i : i + 1], cache=buffer_cache)
        torch.testing.assert_close(got, want)
    assert isinstance(buffer_cache, KVBuffer) and len(buffer_cache) == 6


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("shape", [(3, 1, 5, 5), (2, 3, 5, 5), (3, 5, 5), (2, 5, 5)])
def test_a_mask_of_another_batch_size_or_head_count_is_named(shape, relative, need_weights):
    """A boolean mask that does not broadcast to [B, H, T, S] got torch's raw "The size of
    tensor a (2) must match the size of tensor b (3)"; a 3-D one is refused whatever B and
    H are (torch would read [B, T, S] as one mask per head)."""
    from labnn.xl.relative_attention import RelativeMultiHeadAttention

    mha = (RelativeMultiHeadAttention if relative else MultiHeadAttention)(8, 2)
    mask = torch.ones(shape, dtype=torch.bool)
    want = r"mask has shape \[" + ", ".join(map(str, shape)) + r"\], expected one broadcastable " \
           r"to \[B=2, H=2, T=5, S=5\].*True = may attend"
    if len(shape) == 3:
        want = r"mask of shape \[\d, 5, 5\] is ambiguous.*mask\[:, None\].*\(True = may attend\)"
    with pytest.raises(ValueError, match=want):
        mha(torch.randn(2, 5, 8), mask, need_weights=need_weights)
    q = torch.randn(2, 2, 5, 4)
    with pytest.raises(ValueError, match=want):
        scaled_dot_product_attention(q, q, q, mask)
    for fine in [(2, 1, 5, 5), (1, 2, 5, 5), (1, 5, 5), (1, 5), (5, 5)]:  # broadcastable
        mha(torch.randn(2, 5, 8), torch.ones(fine, dtype=torch.bool), need_weights=need_weights)


def test_project_kv_gives_the_keys_and_values_of_project():
    # the memory's keys and values come from the same rows of the fused projection
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    _, (k, v) = mha.project(x)
    k2, v2 = mha.project_kv(x)
    torch.testing.assert_close(k2, k)
    torch.testing.assert_close(v2, v)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("relative", [False, True])
def test_a_mask_on_another_device_is_named(relative, need_weights):
    """`check_mask` promised device checks it did not make: a mask on another device than
    the scores (a host mask for a model on a GPU; here `meta` against the CPU) failed
    inside torch. Now a ValueError at the door, naming both devices."""
    from labnn.xl.relative_attention import RelativeMultiHeadAttention

    mha = (RelativeMultiHeadAttention if relative else MultiHeadAttention)(8, 2)
    mask = causal_mask(5, device="meta")
    want = r"mask is on meta, but the scores are on cpu: move it, mask\.to\('cpu'\)"
    with pytest.raises(ValueError, match=want):
        mha(torch.randn(2, 5, 8), mask, need_weights=need_weights)
    q = torch.randn(2, 2, 5, 4)
    with pytest.raises(ValueError, match=want):
        scaled_dot_product_attention(q, q, q, mask)


def test_a_mask_on_another_device_is_named_by_the_xl_model():
    from labnn.xl.model import TransformerXL, XLConfig

    model = TransformerXL(XLConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1,
                                   mem_len=3))
    with pytest.raises(ValueError, match=r"mask is on meta, but the scores are on cpu"):
        model(torch.zeros(1, 4, dtype=torch.long), mask=causal_mask(4, device="meta"))
