"""Issue 28, seventh trial (notebooks 01 and 02): a fresh learner's wrong answers, one case
each, every one refused with a brief message naming the mistake (the pattern: the words that
name it)."""
# flake8: noqa: E501,E701,E702,E731
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checker_helpers import judge
from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention

CASES = {}


def case(tag, check, fns, pattern):
    CASES[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)


def scores(q, k): return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
def sm(s): return s.softmax(-1)


# ---- 01 Ex1 attention_weights ----
case("aw1", check_attention_weights, lambda q, k: (q @ k.mT).softmax(-1) / math.sqrt(q.size(-1)),
     r"sum to 1.*softmax")
case("aw2", check_attention_weights, lambda q, k: (q @ k.mT / q.size(-1) ** (1 // 2)).softmax(-1),
     r"forgot to divide.*sqrt\(d\)")
case("aw3", check_attention_weights, lambda q, k: sm(scores(q, k)).float(),
     r"float64 in, float64 out")
case("aw4", check_attention_weights, lambda q, k: scores(q, k).exp() / scores(q, k).exp().sum(),
     r"sum to 1")
case("aw5", check_attention_weights, lambda q, k: scores(q, k).sigmoid(), r"sum to 1.*softmax")
case("aw6", check_attention_weights, lambda q, k: (q @ k.mT * math.sqrt(q.size(-1))).softmax(-1),
     r"multiplied.*divide")
case("aw7", check_attention_weights, lambda q, k: (q @ k.mT / math.sqrt(k.size(1))).softmax(-1),
     r"number of keys")
case("aw8", check_attention_weights, lambda q, k: sm(scores(q, k)).detach(), r"detached")
case("aw10", check_attention_weights, lambda q, k: scores(q, k).softmax(1), r"over the queries")
def aw_naive(q, k):  # NaN once a score passes ~88 (float32)
    e = scores(q, k).exp(); return e / e.sum(-1, keepdim=True)
case("aw11", check_attention_weights, aw_naive,
     r"overflow|max")
def aw_inplace(q, k): q /= math.sqrt(q.size(-1)); return (q @ k.mT).softmax(-1)
case("aw12", check_attention_weights, aw_inplace, r"modified its input `q` in place")
case("aw13", check_attention_weights, lambda q,
     k: sm(scores(q[:1], k[:1])).expand(q.size(0), -1, -1),
     r"only batch row 0")


# ---- 01 Ex2 attention ----
def att(fill=float("-inf"), after=None, cond=lambda m: m is not None, dv=False, mview=lambda m: m):
    def attention(q, k, v, mask=None):
        s = q @ k.mT / math.sqrt((v if dv else q).size(-1))
        if cond(mask): s = s.masked_fill(~mview(mask), fill)
        w = s.softmax(-1)
        return (after(w, mask) if after else w.nan_to_num(0.0)) @ v
    return attention
case("at1", check_attention, att(fill=-1e9, after=lambda w, m: w), r"mean of the values.*zeros")
def at_post(q, k, v, mask=None):
    w = sm(scores(q, k)); return (w * mask if mask is not None else w) @ v
case("at2", check_attention, at_post, r"after the softmax.*before the softmax")
def at_log(q, k, v, mask=None):
    s = scores(q, k) + (torch.log(mask.to(q.dtype)) if mask is not None else 0); w = s.softmax(-1)
    return torch.where(torch.isnan(w), 0, w) @ v
case("at3", check_attention, at_log, r"NaN.*backward")
case("at5", check_attention, att(after=lambda w, m: w.masked_fill(w != w, 1 / w.size(-1))),
     r"(replac\w*|turn\w*) (the )?NaN.*uniform|uniform.*NaN")
def at_dv(q, k, v, mask=None): return att()(q, k, v.detach(), mask)
case("at6", check_attention, at_dv, r"`v` gets no gradient")
def at_times(q, k, v, mask=None):
    s = scores(q, k); return (s * mask if mask is not None else s).softmax(-1) @ v
case("at7", check_attention, at_times, r"filled the masked scores with 0")
def at_nan_(w, m): w.nan_to_num_(0.0); return w
case("at8", check_attention, att(after=at_nan_),
     r"in place.*softmax")
case("at9", check_attention, att(cond=lambda m: bool(m) if m is not None else False),
     r"mask is not None")
case("at10", check_attention, att(dv=True),
     r"v\.size\(-1\)|width of the values")
case("at11", check_attention, att(mview=lambda m: m.unsqueeze(1)),
     r"\[T, 1, S\]|unsqueeze\(1\)")


# ---- 01 Ex3 causal mask ----
case("cm1", check_causal_mask, lambda t: torch.ones(t, t).tril(), r"dtype torch.float32.*bool")
case("cm2", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1),
     r"forbids the diagonal")
case("cm3", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).triu(), r"transposed")
case("cm5", check_causal_mask, lambda t: ~torch.ones(t, t, dtype=torch.bool).tril(), r"inverted")
case("cm6", check_causal_mask, lambda t: torch.ones(8, 8, dtype=torch.bool).tril()[:t, :t],
     r"causal_mask\(\d\d+\)|shape")
case("cm7", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril(1), r"next token")
case("cm8", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.uint8).tril(), r"uint8.*bool")
case("cm9", check_causal_mask, lambda t: np.tril(np.ones((t, t), bool)), r"torch.Tensor.*ndarray")
case("cm10", check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril()[None],
     r"shape \[1, 4, 4\]")
def cm_loop(t):
    m = torch.zeros(t, t, dtype=torch.bool)
    for i in range(1, t): m[i, :i + 1] = True
    return m
case("cm11", check_causal_mask, cm_loop, r"i=0 may attend key j=0")


# ---- 01 Ex4 split / merge heads ----
def sp(x, h): B, T, D = x.shape; return x.view(B, T, h, D // h).transpose(1, 2)
def mg(x): B, H, T, Dh = x.shape; return x.transpose(1, 2).reshape(B, T, H * Dh)
def sp_inter(x, h): B, T, D = x.shape; return x.view(B, T, D // h, h).permute(0, 3, 1, 2)
case("hd1", check_heads, (sp_inter, lambda x: x.permute(0, 2, 3, 1).flatten(-2)),
     r"interleaves the heads")
case("hd2", check_heads, (sp, lambda x: x.reshape(x.size(0), x.size(2), -1)), r"mixes positions")
case("hd3", check_heads, (sp, lambda x: x.transpose(2, 3).reshape(x.size(0), x.size(2), -1)),
     r"transpose\(2, 3\)")
case("hd4", check_heads,
     (lambda x, h: x.view(*x.shape[:2], h, -1).transpose(0, 2),
      lambda x: x.transpose(0, 2).flatten(-2)),
     r"\[H, T, B, D_h\]")
case("hd5", check_heads, (lambda x, h: sp(x, h).detach(), mg), r"detached")
case("hd6", check_heads, (lambda x, h: x.reshape(x.size(0), h, x.size(1), -1), mg),
     r"mixes features of different positions")
case("hd7", check_heads,
     (lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 3, 1),
      lambda x: x.permute(0, 3, 1, 2).flatten(-2)),
     r"\[B, H, D_h, T\]")
case("hd8", check_heads, (sp, lambda x: mg(x)[..., :x.size(-1)]), r"\[B, T, D_h\]")
case("hd9", check_heads, (sp, lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1)),
     r"not contiguous.*reshape")
case("hd10", check_heads,
     (lambda x, h: torch.stack(torch.split(x, h, -1), 1), lambda x: torch.cat(x.unbind(1), -1)),
     r"head count and head width swapped")
case("hd11", check_heads, (sp, lambda x: x.mean(1).repeat(1, 1, x.size(1))),
     r"mean|averag")


# ---- 01 Ex5 multi-head attention ----
def mha_fn(qkv=lambda x, m: m.qkv(x).chunk(3, -1), heads=lambda m: m.n_heads, scale=None,
           out=lambda y, m: m.out_proj(y), order=(0, 1, 2)):
    def multi_head_attention(x, mha, mask=None):
        parts = qkv(x, mha); q, k, v = (sp(parts[i], heads(mha)) for i in order)
        s = q @ k.mT / math.sqrt(scale(x) if scale else q.size(-1))
        if mask is not None: s = s.masked_fill(~mask, float("-inf"))
        return out(mg(s.softmax(-1).nan_to_num(0.0) @ v), mha)
    return multi_head_attention
case("mh1", check_multi_head_attention,
     mha_fn(qkv=lambda x, m: m.qkv(x).view(*x.shape, 3).unbind(-1)),
     r"interleaved")
case("mh2", check_multi_head_attention, mha_fn(scale=lambda x: x.size(-1)), r"sqrt\(d_model\)")
case("mh3", check_multi_head_attention, mha_fn(out=lambda y, m: F.linear(y, m.out_proj.weight)),
     r"bias of the output projection")
case("mh4", check_multi_head_attention,
     mha_fn(out=lambda y, m: y @ m.out_proj.weight + m.out_proj.bias),
     r"transpos|weight\.T|\.mT")
def mh_sdpa(inv=False, causal=False):
    def f(x, mha, mask=None):
        q, k, v = (sp(z, mha.n_heads) for z in mha.qkv(x).chunk(3, -1))
        m = None if mask is None else (~mask if inv else mask)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal and mask is None)
        return mha.out_proj(mg(o))
    return f
case("mh5", check_multi_head_attention, mh_sdpa(inv=True), r"mask is inverted")
case("mh6", check_multi_head_attention, mh_sdpa(causal=True), r"mask=None must attend everywhere")
case("mh7", check_multi_head_attention, mha_fn(heads=lambda m: m.d_head),
     r"d_head heads|n_heads.*d_head.*swapped|swapped")
case("mh8", check_multi_head_attention, mha_fn(order=(1, 0, 2)), r"wrong order")
case("mh9", check_multi_head_attention, lambda x, mha,
     mask=None: mha.out_proj(att()(*mha.qkv(x).chunk(3, -1), mask)),
     r"single head")
case("mh10", check_multi_head_attention, mha_fn(out=lambda y, m: y), r"output projection")


@pytest.mark.parametrize("tag", list(CASES))
def test_trial7_case_is_named(tag, capsys):
    judge(*CASES[tag], capsys)


def test_truth_of_a_tensor_computed_from_the_mask_is_not_blamed_on_if_mask(capsys):
    def attention(q, k, v, mask=None):  # bool() of the scores, not of the mask
        s = scores(q, k)
        if mask is not None and (s > 0):
            s = s.masked_fill(~mask, float("-inf"))
        return sm(s) @ v
    with pytest.raises(RuntimeError, match="Boolean value of Tensor"):
        check_attention(attention)
    assert "is not None" not in capsys.readouterr().err


def test_a_softmax_that_subtracts_the_row_max_passes_with_large_scores(capsys):
    def attention_weights(q, k):
        s = scores(q, k); e = (s - s.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    check_attention_weights(attention_weights)
    assert "✅" in capsys.readouterr().out
