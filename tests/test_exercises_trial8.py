"""Issue 28, eighth trial (notebooks 01 to 03 Ex2): a fresh learner's wrong answers, one case
each, every one refused with a brief message naming the mistake, and the right answer once
(notebooks 03 Ex3 to 05: test_exercises_trial8b.py)."""
# flake8: noqa: E501,E701,E702,E731
import math

import pytest
import torch

from checker_helpers import judge, passes
from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.feedback_transformer.memory_vector import (
    check_memory_vector, check_relative_bias)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_distances import check_relative_distances
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.xl.relative_attention import relative_shift

CASES, RIGHT = {}, {}
pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`")


def case(tag, check, fns, pattern):
    CASES[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)


# ---- 01 Ex1 attention_weights ----
def aw(scale=lambda q: math.sqrt(q.size(-1)), norm=lambda s: s.softmax(-1)):
    return lambda q, k: norm(q @ k.mT / scale(q))
RIGHT["aw"] = (check_attention_weights, aw())
case("aw1", check_attention_weights, aw(scale=lambda q: q.size(-1) ** 1 / 2),
     r"d / 2|d/2|precedence|\*\* 0\.5")
case("aw2", check_attention_weights, lambda q, k: (q @ k.T / math.sqrt(q.size(-1))).softmax(-1),
     r"\.T.*(3-D|all axes)|mT|transpose\(-2, -1\)")
case("aw3", check_attention_weights, aw(norm=lambda s: s.exp() / s.exp().sum(-1)), r"keepdim")


# ---- 01 Ex2 attention ----
def att(fill=None, out=lambda w, v: w @ v, fix=None):
    def attention(q, k, v, mask=None):
        s = q @ k.mT / math.sqrt(q.size(-1))
        if mask is not None:
            s = fill(s, mask) if fill else s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        if mask is not None and fix is None: w = w.nan_to_num(0.0)
        o = out(w, v)
        return fix(o, mask) if fix and mask is not None else o
    return attention
def idx_fill(s, mask): s = s.clone(); s[:, ~mask] = float("-inf"); return s
RIGHT["at"] = (check_attention, att())
case("at1", check_attention, att(fill=idx_fill), r"\[B, T, S\]|broadcast|masked_fill")
case("at2", check_attention, att(fill=lambda s, m: s + (~m) * float("-inf")),
     r"0 \* -inf|NaN|masked_fill")
case("at3", check_attention, att(fix=lambda o, m: o.nan_to_num(0.0) * m.any(-1)),
     r"\[\.\.\., None\]|keepdim|last axis")


# ---- 01 Ex3 causal_mask ----
RIGHT["cm"] = (check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril())
case("cm1", check_causal_mask, lambda t: torch.tril_indices(t, t), r"tril_indices|indices")
case("cm2", check_causal_mask, lambda t: torch.ones(t, t + 1, dtype=torch.bool).tril(),
     r"t \+ 1|one column too many")
case("cm3", check_causal_mask, lambda t: torch.nn.Transformer.generate_square_subsequent_mask(t),
     r"additive|-inf|float.*bool")


# ---- 01 Ex4 split/merge heads ----
def split(x, H): B, T, D = x.shape; return x.view(B, T, H, D // H).transpose(1, 2)
def merge(x): B, H, T, Dh = x.shape; return x.transpose(1, 2).reshape(B, T, H * Dh)
RIGHT["hd"] = (check_heads, split, merge)
case("hd1", check_heads,
     (lambda x, H: x.view(*x.shape[:2], H, x.size(-1) / H).transpose(1, 2), merge),
     r"//|integer division")
case("hd2", check_heads, (lambda x, H: torch.stack(x.chunk(H, -1), 0), merge),
     r"\[H, B, T, D_h\]|head axis first")
case("hd3", check_heads, (lambda x, H: x.view(*x.shape[:2], H, -1).transpose(-2, -1), merge),
     r"transpose\(-2, -1\)|last two axes")


# ---- 01 Ex5 multi_head_attention ----
def mh(qkv=lambda x, m: m.qkv(x).chunk(3, -1), end=lambda x, o, m: m.out_proj(o)):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (split(t, mha.n_heads) for t in qkv(x, mha))
        s = q @ k.mT / math.sqrt(q.size(-1))
        if mask is not None: s = s.masked_fill(~mask, float("-inf"))
        return end(x, merge(s.softmax(-1).nan_to_num(0.0) @ v), mha)
    return multi_head_attention
RIGHT["mh"] = (check_multi_head_attention, mh())
case("mh1", check_multi_head_attention, mh(end=lambda x, o, m: x + m.out_proj(o)), r"residual|x \+")
case("mh2", check_multi_head_attention, mh(qkv=lambda x, m: m.qkv(x).chunk(3, 1)),
     r"along (time|the positions)|chunk\(3, dim=-1\)")
case("mh3", check_multi_head_attention, mh(qkv=lambda x, m: (*m.qkv(x).chunk(3, -1)[:2], x)),
     r"value projection|v = x|values are x")


# ---- 02 Ex1 update_memory ----
def um(join=lambda mem, h: torch.cat([mem, h], 1), keep=lambda c, h, n: c[:, c.size(1) - min(n,
        c.size(1)):],
       none=lambda mem: mem is None):
    def my_update_memory(mem, h, mem_len):
        c = h if none(mem) else join(mem, h)
        return keep(c, h, mem_len).detach()
    return my_update_memory
RIGHT["um"] = (check_update_memory, um())
case("um1", check_update_memory, um(none=lambda mem: not mem), r"mem is None|is None")
case("um2", check_update_memory, um(keep=lambda c, h, n: c[:, c.size(1) - n:]),
     r"negative|wrap|fewer than mem_len|max\(0")
case("um3", check_update_memory, um(join=lambda mem, h: torch.cat([mem, h], -1)),
     r"time axis|dim 1|features")


# ---- 02 Ex2 segment_mask ----
def sm(start=lambda i, L: (i // L) * L, hi=lambda i, s, L: i):
    def my_segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)
        s = start(i, seg_len)
        return (j >= s - mem_len) & (j <= hi(i, s, seg_len))
    return my_segment_mask
def sm_loop(n, seg_len, mem_len):
    m = torch.zeros(n, n, dtype=torch.bool)
    for s in range(0, n, seg_len): m[s:s + seg_len, s - mem_len:s + seg_len] = True
    return m.tril()
RIGHT["sm"] = (check_segment_mask, sm())
case("sm1", check_segment_mask, sm(start=lambda i, L: i / L * L), r"//|integer division|floor")
case("sm2", check_segment_mask, sm(hi=lambda i, s, L: s + L - 1), r"future|causal|j <= i")
case("sm3", check_segment_mask, sm_loop, r"negative|wrap|first segment|max\(0")


# ---- 02 Ex3 relative_distances ----
def rd(keys=lambda t, m: torch.arange(m + t), m_=lambda m: m):
    return lambda t, m: torch.arange(t)[:, None] + m_(m) - keys(t, m)[None]
RIGHT["rd"] = (check_relative_distances, rd())
case("rd1", check_relative_distances, rd(keys=lambda t, m: torch.arange(t)),
     r"memory keys|S = m \+ t|\[T, S\]")
case("rd2", check_relative_distances, rd(keys=lambda t, m: torch.arange(m)),
     r"S = m \+ t|m \+ t keys|\[T, S\]")
case("rd3", check_relative_distances, rd(m_=lambda m: 2), r"hard-cod|m = 2|uses m")


# ---- 02 Ex4 relative_shift ----
def rs_gather(x):
    T, S = x.shape[-2:]; i, j = torch.arange(T)[:, None], torch.arange(S)
    return x.gather(-1, (S - 1 - (i - j)).clamp(0, S - 1).expand_as(x))
def rs_loop(alias=True, rows=lambda T, S: range(T), stack=None):
    def my_relative_shift(x):
        T, S = x.shape[-2:]; out = x if alias else x.clone()
        ys = [x[..., i, :].roll(-(T - 1 - i), -1) for i in rows(T, S)]
        if stack is not None: return torch.stack(ys, stack)
        for i, y in enumerate(ys): out[..., i, :] = y
        return out
    return my_relative_shift
def rs_flip(x):
    T, S = x.shape[-2:]; M = S - T; f = x.flip(-1)
    return torch.stack([f[..., i, :].roll(M + i, -1) for i in range(T)], -2)
RIGHT["rs"] = (check_relative_shift, rs_loop(alias=False))
case("rs1", check_relative_shift, rs_loop(alias=False, stack=0), r"= \[T, B, H, S\]")
case("rs2", check_relative_shift, rs_loop(alias=False, rows=lambda T, S: range(S)),
     r"range\(T\)|S rows|T rows")
case("rs3", check_relative_shift, rs_flip, r"flip|distance.*key|reversed")


# ---- 02 Ex5 relative_scores ----
def sc(pre=False):
    def relative_scores(q, k, r, u, v):
        d = math.sqrt(q.size(-1)); q = q / d if pre else q
        ac = (q + u[:, None]) @ k.mT; bd = relative_shift((q + v[:, None]) @ r.permute(1, 2, 0))
        return ac + bd if pre else (ac + bd) / d
    return relative_scores
def sc_shift_r(q, k, r, u, v):
    rs = relative_shift(r.permute(1, 0, 2))  # [H, S, D_h], "shifted"
    return ((q + u[:, None]) @ k.mT + (q + v[:, None]) @ rs.mT) / math.sqrt(q.size(-1))
def sc_einsum(q, k, r, u, v):
    bd = relative_shift(torch.einsum("bhtd,hsd->bhts", q + v[:, None], r))
    return ((q + u[:, None]) @ k.mT + bd) / math.sqrt(q.size(-1))
RIGHT["sc"] = (check_relative_scores, sc())
case("sc1", check_relative_scores, sc(pre=True),
     r"biases.*(scaled|divided)|divide the sum|pre-?scal")
case("sc2", check_relative_scores, sc_shift_r,
     r"shift (the )?(product|scores)|not r|\(q \+ v\) r\^T")
case("sc3", check_relative_scores, sc_einsum, r"r is \[S, H, D_h\]|shd")


# ---- 03 Ex1 memory_vector ----
RIGHT["mv"] = (check_memory_vector, lambda xs, w: (w.softmax(0)[:, None, None] * xs).sum(0))
case("mv1", check_memory_vector, lambda xs, w: (w.softmax(0)[:, None, None] * xs).sum(0,
     keepdim=True),
     r"keepdim")
case("mv2", check_memory_vector, lambda xs, w: (torch.tensor(w.softmax(0).tolist())[:, None,
     None] * xs).sum(0),
     r"torch\.tensor|tolist|no gradient")
case("mv3", check_memory_vector, lambda xs, w: sum(w.softmax(0)[l] * xs[l] for l in range(3)),
     r"hard-cod|3 layers|range\(3\)|L \+ 1 = ")


# ---- 03 Ex2 relative_bias ----
def rb(index=lambda tb, d: tb[:, d - 1], cap=lambda tb: tb.size(1)):
    return lambda table, s: index(table, torch.arange(s, 0, -1).clamp(max=cap(table)))
RIGHT["rb"] = (check_relative_bias, rb())
case("rb1", check_relative_bias, lambda tb, s: tb.gather(1, torch.arange(s, 0,
     -1).clamp(max=tb.size(1)) - 1),
     r"gather.*\[H, s\]|expand")
case("rb2", check_relative_bias, rb(cap=lambda tb: tb.size(0)), r"size\(0\)|number of heads|H = 3")
case("rb3", check_relative_bias, lambda tb, s: tb[:, torch.arange(s, 0,
     -1.0).clamp(max=tb.size(1)) - 1],
     r"float|long|integer")


@pytest.mark.parametrize("tag", list(RIGHT))
def test_trial8_right_answer_passes(tag, capsys):
    passes(*RIGHT[tag], capsys)


@pytest.mark.parametrize("tag", list(CASES))
def test_trial8_case_is_named(tag, capsys):
    judge(*CASES[tag], capsys)
