"""Each checker of notebook 01 passes a correct solution and names each typical mistake."""

import math

import pytest
import torch

from labnn.exercises import attention as ex
from labnn.exercises.checking import ExerciseFailed, ExerciseNotDone


def fails_with(check, *fns, match):
    with pytest.raises(ExerciseFailed, match=match):
        check(*fns)


def passes(check, *fns, capsys):
    check(*fns)
    assert "✅" in capsys.readouterr().out


# ---------- attention weights ----------

def weights(q, k, scale=True, dim=-1, softmax=True):
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    return scores.softmax(dim=dim) if softmax else scores


def test_attention_weights_correct(capsys):
    passes(ex.check_attention_weights, weights, capsys=capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda q, k: weights(q, k, scale=False), r"forgot to divide the scores by sqrt\(d\)"),
    (lambda q, k: (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1), r"divided the scores by d; divide by sqrt\(d\)"),
    (lambda q, k: weights(q, k, dim=-2), r"softmax runs over the queries \(dim=-2\)"),
    (lambda q, k: weights(q, k, softmax=False), "these are the scaled scores"),
    (lambda q, k: weights(q, k, scale=False, softmax=False), "these are the raw dot products"),
    (lambda q, k: weights(k, q), r"rows must be queries and columns keys"),
    (lambda q, k: weights(q, k)[..., :3], r"has shape \[2, 5, 3\], expected \[2, 5, 7\]"),
    (lambda q, k: weights(q, k) * 0.5, "each row .* must sum to 1"),
    (lambda q, k: [1.0], "should return a torch.Tensor, but returned list"),
])
def test_attention_weights_mistakes(fn, match):
    fails_with(ex.check_attention_weights, fn, match="attention weights: .*" + match)


def test_stub_is_not_done():
    def stub(q, k):
        raise NotImplementedError("Compute q @ k^T / sqrt(d), then softmax over the keys.")

    with pytest.raises(ExerciseNotDone, match="not solved yet.*Hint: Compute q @ k"):
        ex.check_attention_weights(stub)


def test_learner_bug_surfaces_as_itself():
    with pytest.raises(RuntimeError):
        ex.check_attention_weights(lambda q, k: q @ k)  # shape mismatch inside the learner's code


# ---------- attention with a mask ----------

def attention(q, k, v, mask=None, fill=float("-inf"), invert=False, after=False, guard=True, scale=True, dim=-1):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
    if mask is not None and not after:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    w = scores.softmax(dim=dim)
    if mask is not None and after:
        w = w * mask
    if mask is not None and guard:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def test_attention_correct(capsys):
    passes(ex.check_attention, attention, capsys=capsys)


def test_attention_with_nan_to_num_is_accepted(capsys):
    passes(ex.check_attention, lambda q, k, v, mask=None: attention(q, k, v, mask, guard=False).nan_to_num(0.0),
           capsys=capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda q, k, v, mask=None: attention(q, k, v, None), "the mask is ignored"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, invert=True), "the mask is inverted: True means MAY attend"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, after=True), "zeroed the masked weights after the softmax"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, guard=False), "all False gives NaN"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, fill=-1e9, guard=False), "gets the mean of the values"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, scale=False), r"forgot to divide the scores by sqrt\(d\)"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, dim=-2), "softmax runs over the queries"),
    (lambda q, k, v, mask=None: (q @ k.transpose(-2, -1)).softmax(-1), "those are the weights"),
])
def test_attention_mistakes(fn, match):
    fails_with(ex.check_attention, fn, match="attention with a mask: .*" + match)


# ---------- causal mask ----------

def test_causal_mask_correct(capsys):
    passes(ex.check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril(), capsys=capsys)
    passes(ex.check_causal_mask, lambda t: torch.arange(t)[None, :] <= torch.arange(t)[:, None], capsys=capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1), r"forbids the diagonal.*j <= i, not j < i"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril(1), "lets query i see key i \\+ 1"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).triu(1), "is inverted"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).triu(), "is transposed"),
    (lambda t: torch.ones(t, t, dtype=torch.bool), "lets every query see every key"),
    (lambda t: torch.ones(t, t).tril(), "has dtype torch.float32; masks are booleans"),
    (lambda t: torch.ones(t, t + 1, dtype=torch.bool).tril(), r"has shape \[4, 5\], expected \[4, 4\]"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril().index_fill(0, torch.tensor([t - 1]), False),
     r"causal_mask\(4\)\[3, 0\] is False: query 3 may attend key 0"),
])
def test_causal_mask_mistakes(fn, match):
    fails_with(ex.check_causal_mask, fn, match="causal mask: .*" + match)


# ---------- split and merge heads ----------

def split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def test_heads_correct(capsys):
    passes(ex.check_heads, split, merge, capsys=capsys)


@pytest.mark.parametrize("split_fn, merge_fn, match", [
    (lambda x, h: x.reshape(x.size(0), h, x.size(1), -1), merge, r"reshapes \[B, T, D\] straight to \[B, H, T, D_h\]"),
    (lambda x, h: x.view(*x.shape[:2], h, -1), merge, r"has shape \[B, T, H, D_h\].*transpose\(1, 2\)"),
    (lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), merge, "interleaves the heads"),
    (split, lambda x: x.reshape(x.size(0), x.size(2), -1), r"merge_heads\(x\) reshapes \[B, H, T, D_h\] straight"),
    (split, lambda x: x.transpose(1, 2).reshape(x.size(0), x.size(2), -1)[..., :8],
     r"has shape \[2, 5, 8\], expected \[2, 5, 16\]"),
])
def test_heads_mistakes(split_fn, merge_fn, match):
    fails_with(ex.check_heads, split_fn, merge_fn, match="split and merge heads: .*" + match)


# ---------- multi-head attention ----------

def mha_fn(x, mha, mask=None, *, scale_width=None, split_fn=split, merge_fn=merge, out_proj=True, order=(0, 1, 2),
           use_mask=True):
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_fn(parts[i], mha.n_heads) for i in order)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_width or q.size(-1))
    if mask is not None and use_mask:
        scores = scores.masked_fill(~mask, float("-inf"))
    y = merge_fn(scores.softmax(-1) @ v)
    return mha.out_proj(y) if out_proj else y


def test_multi_head_attention_correct(capsys):
    passes(ex.check_multi_head_attention, mha_fn, capsys=capsys)


def test_multi_head_attention_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    ex.check_multi_head_attention(mha_fn)
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale_width=16), r"divided by sqrt\(d_model\).*sqrt\(d_head\)"),
    (dict(split_fn=lambda z, h: z[:, None], merge_fn=lambda y: y[:, 0]), "single head of width d_model"),
    (dict(split_fn=lambda z, h: z.reshape(z.size(0), h, z.size(1), -1)), "split with a plain reshape"),
    (dict(merge_fn=lambda y: y.reshape(y.size(0), y.size(2), -1)), "merged with a plain reshape"),
    (dict(out_proj=False), "forgot the output projection"),
    (dict(use_mask=False), "the mask is ignored"),
    (dict(order=(1, 0, 2)), "q, k and v are taken in the wrong order"),
    (dict(order=(2, 1, 0)), "q, k and v are taken in the wrong order"),
])
def test_multi_head_attention_mistakes(kwargs, match):
    fails_with(ex.check_multi_head_attention, lambda x, mha, mask=None: mha_fn(x, mha, mask, **kwargs),
               match="multi-head attention: .*" + match)


def test_in_place_edits_do_not_fool_the_checker(capsys):
    def in_place(q, k):
        q /= math.sqrt(q.size(-1))  # edits the checker's tensor in place
        return (q @ k.transpose(-2, -1)).softmax(dim=-1)

    passes(ex.check_attention_weights, in_place, capsys=capsys)
    def in_place_wrong_axis(q, k):
        q /= math.sqrt(q.size(-1))
        return (q @ k.transpose(-2, -1)).softmax(dim=-2)

    fails_with(ex.check_attention_weights, in_place_wrong_axis, match="softmax runs over the queries")
