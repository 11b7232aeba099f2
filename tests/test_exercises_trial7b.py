"""Issue 28, seventh trial (notebooks 02 and 03): a fresh learner's wrong answers, one case
each, every one refused with a brief message naming the mistake."""
# flake8: noqa: E501,E701,E702,E731
import math

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import judge
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.transformer_xl.relative_distances import check_relative_distances
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes, check_token_loop
from labnn.xl.relative_attention import relative_shift

CASES = {}


def case(tag, check, fns, pattern):
    CASES[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)


# ---- 02 Ex1 update_memory ----
def um(order=lambda m, h: [m, h], keep=lambda c, L: c[:, max(0, c.size(1) - L):], dim=1,
       post=lambda c: c.detach(), none_post=None):
    def update_memory(mem, h, mem_len):
        if mem is None and none_post: return none_post(keep(h, mem_len))
        c = h if mem is None else torch.cat(order(mem, h), dim)
        return post(keep(c, mem_len))
    return update_memory
case("um1", check_update_memory, um(keep=lambda c, L: c[:, :L]), r"kept the oldest")
case("um2", check_update_memory, um(post=lambda c: c, order=lambda m, h: [m.detach(), h]),
     r"still attached to the graph.*detach")
case("um3", check_update_memory, lambda mem, h, L: None if L == 0 else um()(mem, h, L),
     r"should return a torch.Tensor, but returned NoneType")
case("um4", check_update_memory, um(dim=0), r"along the batch axis")
case("um5", check_update_memory, lambda mem, h, L: um()(None, h, L), r"dropped the old memory")
case("um6", check_update_memory, um(order=lambda m, h: [h, m]), r"wrong order")
case("um11", check_update_memory,
     um(order=lambda m, h: [m, h.detach_()], none_post=lambda c: c.detach_()),
     r"in place")
case("um12", check_update_memory, um(post=lambda c: c.detach().float()),
     r"float64 in, float64 out: don't convert")
case("um13", check_update_memory, um(keep=lambda c, L: c[:, -L:] if c.size(1) > L else c),
     r"mem_len = 0.*-0")
case("um14", check_update_memory,
     lambda mem, h, L: (h[:, -L:] if mem is None else torch.cat([mem, h[:, -L:]], 1)).detach(),
     r"kept all 9 states")


# ---- 02 Ex2 segment mask ----
def seg(rule):
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return rule(i, j, seg_len, mem_len)
    return segment_mask
case("sm1", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j >= j // s * s - m)),
     r"plain causal mask.*query's index i")
case("sm2", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j >= i - m)), r"sliding window")
case("sm3", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j >= (i + s - 1) // s * s - m)),
     r"rounds i / seg_len UP")
case("sm4", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j >= i % s - m)),
     r"start\(i\) = \(i // seg_len\) \* seg_len")
case("sm5", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j > i // s * s - m)),
     r"off by one at the far end")
case("sm6", check_segment_mask, seg(lambda i, j, s, m: ((j <= i) & (j >= i // s * s - m)).T),
     r"transposed")
case("sm7", check_segment_mask, lambda n, mem_len, seg_len: seg(
    lambda i, j, s, m: (j <= i) & (j >= i // s * s - m))(n, seg_len, mem_len),
     r"calls segment_mask\(n, seg_len, mem_len\).*your parameters are \(n, mem_len, seg_len\)")
case("sm8", check_segment_mask,
     seg(lambda i, j, s, m: (j < i // s * s + s) & (j >= i // s * s - m)),
     r"future key")
case("sm9", check_segment_mask, seg(lambda i, j, s, m: ((j <= i) & (j >= i // s * s - m)).float()),
     r"float32.*bool")
case("sm11", check_segment_mask, seg(lambda i, j, s, m: (j <= i) & (j >= i // s * s - m * s)),
     r"counts mem_len in segments")


# ---- 02 Ex3 relative distances ----
def rd(f): return lambda t, m: f(torch.arange(t)[:, None], torch.arange(m + t)[None, :], t, m)
case("rd1", check_relative_distances, rd(lambda i, j, t, m: (m + i - j).clamp(min=0)),
     r"get 0.*negative")
case("rd2", check_relative_distances, rd(lambda i, j, t, m: (m + i - j).abs()), r"absolute value")
case("rd3", check_relative_distances, rd(lambda i, j, t, m: i - j), r"computed i - j")
case("rd4", check_relative_distances, rd(lambda i, j, t, m: (m + i - j).float()), r"LongTensor")
case("rd5", check_relative_distances, rd(lambda i, j, t, m: (m + t - 1 - j).expand(t, -1)),
     r"depends on the key only")
case("rd7", check_relative_distances, rd(lambda i, j, t, m: (m + i - j).int()), r"int32.*int64")
case("rd8", check_relative_distances, rd(lambda i, j, t, m: (j - m - i).T), r"\[S, T\]")
case("rd9", check_relative_distances, rd(lambda i, j, t, m: j - m - i), r"sign is flipped")
case("rd10", check_relative_distances, rd(lambda i, j, t, m: t + i - j),
     r"m \+ i exactly|t where m belongs")
case("rd11", check_relative_distances, rd(lambda i, j, t, m: (m + i - j).tril(m)),
     r"get 0.*negative")


# ---- 02 Ex4 relative shift ----
def shift(pad=(1, 0), rows=slice(1, None)):
    def relative_shift_mine(x):
        *lead, T, S = x.shape
        p = F.pad(x, pad).reshape(*lead, S + 1, T)
        return p[..., rows, :].reshape(*lead, T, S)
    return relative_shift_mine
case("rs1", check_relative_shift, shift(pad=(0, 1)), r"one place too far.*pad on the left")
case("rs2", check_relative_shift, shift(rows=slice(None, -1)), r"dropped the last row")
case("rs3", check_relative_shift, lambda x: F.pad(x, (1, 0))[..., 1:], r"unshifted")
def rs_asc(x):
    *lead, T, S = x.shape; i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    return x.gather(-1, (S - 1 - (S - 1 - (S - T + i - j).clamp(0, S - 1))).expand(*lead, T, S))
case("rs4", check_relative_shift, rs_asc, r"ascending order")
def rs_rows(x):
    *lead, T, S = x.shape; p = F.pad(x, (0, 0, 1, 0)).reshape(*lead, S, T + 1)
    return p[..., 1:].reshape(*lead, T, S)
case("rs6", check_relative_shift, rs_rows, r"padded along T")
case("rs8", check_relative_shift, lambda x: shift()(x.data), r"detached")


# ---- 02 Ex5 relative scores ----
def rsc(qu=lambda q, u: q + u[:, None], ku=lambda k, u: k, rr=lambda r: r.permute(1, 2, 0),
        combine=lambda ac, bd, d: (ac + relative_shift(bd)) / math.sqrt(d), det=False):
    def relative_scores(q, k, r, u, v):
        if det: u, v = u.detach(), v.detach()
        ac = qu(q, u) @ ku(k, u).mT
        bd = qu(q, v) @ rr(r)
        return combine(ac, bd, q.size(-1))
    return relative_scores
case("rsc1", check_relative_scores,
     rsc(combine=lambda a, b, d: relative_shift(a + b) / math.sqrt(d)),
     r"shifted the sum")
case("rsc2", check_relative_scores, rsc(qu=lambda q, u: q, ku=lambda k, u: k + u[:, None]),
     r"query-side biases: \(q \+ u\) k\^T and \(q \+ v\) r\^T.*adds u to the keys")
case("rsc3", check_relative_scores, rsc(rr=lambda r: r.reshape(r.size(1), r.size(0), -1).mT),
     r"reshape.*transpose")
case("rsc4", check_relative_scores, rsc(qu=lambda q, u: q + u[None, None]), r"u\[:, None\]")
case("rsc5", check_relative_scores, rsc(rr=lambda r: r.flip(0).permute(1, 2, 0)), r"reversed")
case("rsc6", check_relative_scores,
     rsc(combine=lambda a, b, d: a / math.sqrt(d) + relative_shift(b)),
     r"only the content term")
case("rsc7", check_relative_scores, rsc(det=True), r"`u`( and `v`)? gets? no gradient")


# ---- 03 Ex1 memory_vector ----
def mix(xs, w): return torch.tensordot(w, xs, 1)
case("mv1", check_memory_vector, lambda xs, w: mix(xs, w / w.sum()), r"divided w by its sum")
case("mv2", check_memory_vector, lambda xs, w: mix(xs[1:], w[1:].softmax(0)),
     r"embedding xs\[0\] is left out")
def mv_nograd(xs, w):
    with torch.no_grad(): a = w.softmax(0)
    return mix(xs, a)
case("mv3", check_memory_vector, mv_nograd, r"`w` gets no gradient")
case("mv4", check_memory_vector, lambda xs, w: mix(xs, w.log_softmax(0)), r"log_softmax")
case("mv5", check_memory_vector, lambda xs, w: mix(xs, w.softmax(0)).softmax(-1),
     r"no softmax over D.*the softmax is over the L\+1 layer weights only")
case("mv6", check_memory_vector, lambda xs, w: (xs * w.softmax(0).view(-1, 1, 1)).mean(0),
     r"SUM over")
case("mv8", check_memory_vector, lambda xs, w: (xs.softmax(0) * w[:, None, None]).sum(0),
     r"softmax of the layer outputs")
case("mv11", check_memory_vector, lambda xs, w: (w.softmax(0)[None, :, None] * xs).sum(1),
     r"(p|w\.softmax\(0\))\[:, None, None\]")
case("mv12", check_memory_vector, lambda xs, w: mix(xs, w.softmax(0)).detach(), r"detached")


# ---- 03 Ex2 relative_bias ----
def dist(s): return s - torch.arange(s)
case("rb1", check_relative_bias, lambda table, s: table[:, :s].flip(-1),
     r"one column per table entry")
case("rb2", check_relative_bias, lambda table, s: table[:, dist(s).clamp(max=table.size(1) - 1)],
     r"off by one")
case("rb3", check_relative_bias, lambda table,
     s: table[:, (torch.arange(s) + 1).clamp(max=table.size(1)) - 1],
     r"wrong way.*oldest first")
case("rb4", check_relative_bias, lambda table, s: table[:, (dist(s) - 1) % table.size(1)],
     r"wrap around")
case("rb5", check_relative_bias, lambda table,
     s: table[:, dist(s).clamp(1, table.size(1)).flip(0) - 1],
     r"wrong way")
case("rb6", check_relative_bias, lambda table, s: table[:, dist(s) - 1], r"clamp")
case("rb7", check_relative_bias, lambda table, s: table.T[dist(s).clamp(max=table.size(1)) - 1],
     r"\[S, H\]")


# ---- 03 Ex3 feedback_attention ----
def fb(pre=lambda s, b, d: s / math.sqrt(d) + b, post=lambda w, b: w, vals=lambda k, v: v,
       axis=-1, empty=None):
    def feedback_attention(q, k, v, bias):
        if empty and k.size(2) == 0: return empty(q)
        s = pre(torch.einsum("bhd,bhsd->bhs", q, k), bias, q.size(-1))
        return torch.einsum("bhs,bhsd->bhd", post(s.softmax(axis), bias), vals(k, v))
    return feedback_attention
case("fa1", check_feedback_attention, fb(pre=lambda s, b, d: (s + b) / math.sqrt(d)),
     r"divided the bias by sqrt")
case("fa2", check_feedback_attention,
     fb(pre=lambda s, b, d: s / math.sqrt(d), post=lambda w, b: w + b),
     r"after the softmax")
case("fa3", check_feedback_attention, fb(empty=lambda q: q), r"zeros, not q")
case("fa4", check_feedback_attention, fb(axis=1), r"over the heads")
case("fa5", check_feedback_attention, fb(pre=lambda s, b, d: s / math.sqrt(d) + b.flip(-1)),
     r"reversed")
def fa_sdpa(q, k, v, bias):  # the bias exponentiated, as if attn_mask multiplied the weights
    o = F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=bias[:, None].exp())
    return o[:, :, 0]
case("fa6", check_feedback_attention, fa_sdpa,
     r"bias\.exp\(\).*add the bias as it is.*attn_mask is added")
case("fa9", check_feedback_attention, fb(empty=lambda q: torch.zeros(q.shape)),
     r"new_zeros|zeros_like")
case("fa10", check_feedback_attention, fb(pre=lambda s, b, d: s / math.sqrt(6) + b), r"sqrt\(S\)")
case("fa11", check_feedback_attention, fb(vals=lambda k, v: k), r"weighted the keys")


# ---- 03 Ex4 token_loop ----
def loop(detach=False, top=False, head_m=False, first=False, once=False, front=False,
         pre=False, reset=False, nohead=False, steps_dim=1):
    def token_loop(model, tokens):
        x = model.embed(tokens); mem = x[:, :0]; outs = []; kv0 = model.project_memory(mem)
        for t in range(x.size(1)):
            keys, values = kv0 if once else model.project_memory(mem); h = x[:, t]; xs = [h]
            for n, layer in enumerate(model.layers):
                if pre: xs.append(h)
                h = layer(h, keys[0 if first else n], values[0 if first else n])
                if not pre: xs.append(h)
            m = h if top else model.mix(torch.stack(xs)); m = m.detach() if detach else m
            new = [m[:, None], mem][::-1 if not front else 1]
            mem = m[:, None] if reset else torch.cat(new, 1); outs.append(m if head_m else h)
        o = torch.stack(outs, steps_dim); return o if nohead else model.head(o)
    return token_loop
case("tl1", check_token_loop, loop(detach=True), r"gets no gradient.*detached")
case("tl2", check_token_loop, loop(top=True), r"top layer's output.*model.mix")
case("tl3", check_token_loop, loop(head_m=True), r"logits come from the memory vector")
case("tl4", check_token_loop, loop(first=True), r"first layer's keys")
case("tl5", check_token_loop, loop(once=True), r"never grows")
case("tl6", check_token_loop, loop(front=True), r"in front")
case("tl7", check_token_loop, loop(steps_dim=0), r"\[T, B, V\]")
case("tl8", check_token_loop, loop(pre=True), r"input of model.mix")
case("tl9", check_token_loop, loop(reset=True), r"only the previous step's memory")
case("tl10", check_token_loop, loop(nohead=True), r"model.head")


# ---- 03 Ex5 cache_bytes ----
case("cb1", check_cache_bytes, lambda L, D, n, b: (2 * L * D * n * b, 3 * D * n * b),
     r"not the memory vectors")
case("cb2", check_cache_bytes, lambda L, D, n, b: (L * D * n * b, D * n * b), r"keys AND values")
case("cb3", check_cache_bytes, lambda L, D, n, b: (2 * L * D * n * b / 8, 2 * D * n * b / 8),
     r"transformer_bytes and feedback_bytes are 8 times too small: bytes_per_number "
     r"already counts bytes")
case("cb4", check_cache_bytes, lambda L, D, n, b: (2 * (L + 1) * D * n * b, 2 * D * n * b),
     r"L \+ 1 layers")
case("cb5", check_cache_bytes, lambda L, D, n, b: (float(2 * L * D * n * b), float(2 * D * n * b)),
     r"floats")
case("cb6", check_cache_bytes, lambda L, D, n, b: (2 * L * D * n, 2 * D * n), r"numbers, not bytes")
case("cb8", check_cache_bytes, lambda L, D, n, b: (2 * L * D * n * b, 2 * L * D * n * b),
     r"do not multiply by n_layers")


@pytest.mark.parametrize("tag", list(CASES))
def test_trial7_case_is_named(tag, capsys):
    judge(*CASES[tag], capsys)
