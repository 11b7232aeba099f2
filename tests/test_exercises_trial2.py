"""Issue 28, second trial: every answer of the learner's report that got a vague or
misleading message, or was accepted, is named (the cases of /tmp/learner/repro_nonnamed.py,
copied)."""
# flake8: noqa: E501,E701,E731
import math

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import named_briefly

pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`")
CASES = {}


def case(tag, check, *fns):
    CASES[tag] = (check, fns)


from labnn.data.recall import IGNORE
from labnn.nn import causal_mask
from labnn.xl import relative_shift
from labnn.exercises.self_attention.masked_attention import check_attention, check_attention_weights
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.segment_memory import check_update_memory
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_shift, check_relative_scores)
from labnn.exercises.feedback_transformer.memory_vector import (
    check_memory_vector, check_relative_bias, check_feedback_attention)
from labnn.exercises.feedback_transformer.token_loop import check_token_loop
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.three_memories.memory_limits import check_reach
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance

sc = lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
def att(q, k, v, mask=None, s=None):
    s = sc(q, k) if s is None else s
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = s.softmax(-1)
    if mask is not None: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w @ v
# ---- 01
case("01-E1 times sqrt(d)", check_attention_weights, lambda q, k: (q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))).softmax(-1))
case("01-E1 s/s.sum, no exp", check_attention_weights, lambda q, k: (lambda s: s / s.sum(-1, keepdim=True))(sc(q, k)))
case("01-E1 cosine", check_attention_weights, lambda q, k: sc(F.normalize(q, dim=-1), F.normalize(k, dim=-1)).softmax(-1))
case("01-E1 q @ k.T on 3-D", check_attention_weights, lambda q, k: (q @ k.T / math.sqrt(q.size(-1))).softmax(-1))
case("01-E2 w @ k", check_attention, lambda q, k, v, mask=None: att(q, k, k, mask))
case("01-E2 mask.mT", check_attention, lambda q, k, v, mask=None: att(q, k, v, None if mask is None else mask.mT))
def no_keepdim(q, k, v, mask=None):
    s = sc(q, k)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = s.softmax(-1)
    if mask is not None: w = w.masked_fill(~mask.any(-1), 0.0)
    return w @ v
case("01-E2 any(-1) no keepdim", check_attention, no_keepdim)
case("01-E2 sqrt(S)", check_attention, lambda q, k, v, mask=None: att(q, k, v, mask, s=q @ k.transpose(-2, -1) / math.sqrt(k.size(1))))
case("01-E2 batch 0 only", check_attention, lambda q, k, v, mask=None: att(q[:1], k[:1], v[:1], mask).expand_as(q))
case("01-E2 mask=None -> causal", check_attention, lambda q, k, v, mask=None: att(q, k, v, causal_mask(q.size(1), k.size(1)) if mask is None else mask))
case("01-E2 always causal", check_attention, lambda q, k, v, mask=None: att(q, k, v, causal_mask(q.size(1), k.size(1))))
split = lambda x, h: x.view(x.size(0), x.size(1), h, -1).transpose(1, 2)
merge = lambda x: x.transpose(1, 2).reshape(x.size(0), x.size(2), -1)
case("01-E4 merge .view after transpose", check_heads, split, lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1))
case("01-E4 merge transpose(2, 3)", check_heads, split, lambda x: x.transpose(2, 3).reshape(x.size(0), x.size(2), -1))
case("01-E4 merge cat(unbind(1), dim=1)", check_heads, split, lambda x: torch.cat(x.unbind(1), dim=1))
def mha(x, m, mask=None, causal=None, v_is_k=False, sdpa_inv=False, resid=False, scale=None):
    h = m.n_heads; q, k, v = (split(t, h) for t in m.qkv(x).chunk(3, -1))
    if v_is_k: v = k
    if causal == "always" or (causal == "default" and mask is None):
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    if sdpa_inv: y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask)
    else: y = att(q, k, v, mask, s=None if scale is None else q @ k.transpose(-2, -1) / math.sqrt(scale(q, h)))
    y = m.out_proj(merge(y))
    return x + y if resid else y
case("01-E5 ACCEPTED mask=None -> causal", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, causal="default"))
case("01-E5 ACCEPTED ignores mask, always causal", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, causal="always"))
case("01-E5 v = k", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, v_is_k=True))
case("01-E5 F.sdpa(attn_mask=~mask)", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, sdpa_inv=True))
case("01-E5 returns x + attention", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, resid=True))
case("01-E5 sqrt(n_heads)", check_multi_head_attention, lambda x, m, mask=None: mha(x, m, mask, scale=lambda q, h: h))
# ---- 02
cat = lambda mem, h: h if mem is None else torch.cat([mem, h], 1)
case("02-X1 x[:, x.size(1) - n:] (negative start wraps)", check_update_memory, lambda mem, h, n: (lambda x: x[:, x.size(1) - n:].detach())(cat(mem, h)))
upd = lambda mem, h, n: (lambda x: x[:, max(0, x.size(1) - n):].detach())(cat(mem, h))
case("02-X1 stale mem returned when full", check_update_memory, lambda mem, h, n: mem if mem is not None and mem.size(1) >= n else upd(mem, h, n))
case("02-X1 newest first (flip)", check_update_memory, lambda mem, h, n: upd(mem, h, n).flip(1))
dist = lambda t, m: m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]
case("02-X3 keys numbered from -m (2m + i - j)", check_relative_distances, lambda t, m: dist(t, m) + m)
case("02-X3 column only (S - 1 - j)", check_relative_distances, lambda t, m: (m + t - 1 - torch.arange(m + t)[None, :]).expand(t, m + t).clone())
case("02-X4 drop first column [..., 1:]", check_relative_shift, lambda x: F.pad(x, (1, 0)).reshape(*x.shape[:-2], x.size(-1) + 1, x.size(-2))[..., 1:].reshape(x.shape))
case("02-X4 pad 2 columns", check_relative_shift, lambda x: F.pad(x, (2, 0)).flatten(-2)[..., 2:][..., :x.size(-2) * x.size(-1)].reshape(x.shape))
rs_bd = lambda q, r, v: relative_shift(torch.einsum("bhid,shd->bhis", q + v[:, None], r))
case("02-X5 scale only the position term", check_relative_scores, lambda q, k, r, u, v: (q + u[:, None]) @ k.transpose(-2, -1) + rs_bd(q, r, v) / math.sqrt(q.size(-1)))
case("02-X5 v added to r, not q", check_relative_scores, lambda q, k, r, u, v: ((q + u[:, None]) @ k.transpose(-2, -1) + relative_shift(torch.einsum("bhid,shd->bhis", q, r + v[None]))) / math.sqrt(q.size(-1)))
case("02-X5 k in the position term", check_relative_scores, lambda q, k, r, u, v: ((q + u[:, None]) @ k.transpose(-2, -1) + rs_bd(k[..., -q.size(2):, :], r, v)) / math.sqrt(q.size(-1)))
# ---- 03
case("03-F1 w / w.sum(), no softmax", check_memory_vector, lambda xs, w: (w[:, None, None] * xs).sum(0) / w.sum())
case("03-F1 weights on the last axis (permute)", check_memory_vector, lambda xs, w: (w.softmax(0) * xs.permute(1, 2, 0)).sum(1))
case("03-F1 sum over the batch", check_memory_vector, lambda xs, w: (w.softmax(0)[:, None, None] * xs).sum(1))
case("03-F2 table[:, -d]", check_relative_bias, lambda t, s: t[:, -(s - torch.arange(s)).clamp(max=t.size(1))])
case("03-F2 table[:, :s].flip(-1)", check_relative_bias, lambda t, s: t[:, :s].flip(-1))
case("03-F2 index the heads axis", check_relative_bias, lambda t, s: t[(s - torch.arange(s)).clamp(max=t.size(0)) - 1].T)
def fa(q, k, v, b, zero=lambda q: torch.zeros_like(q), mix=lambda w: w, bias=lambda b: b):
    if k.size(2) == 0: return zero(q)
    w = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias(b)).softmax(-1)
    return mix(torch.einsum("bhs,bhsd->bhd", w, v))
case("03-F3 sums over heads", check_feedback_attention, lambda q, k, v, b: torch.zeros_like(q) if k.size(2) == 0 else torch.einsum("bhs,bgsd->bhd", (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + b).softmax(-1), v) / q.size(1))
case("03-F3 bias averaged over heads", check_feedback_attention, lambda q, k, v, b: fa(q, k, v, b, bias=lambda b: b.mean(0, keepdim=True)))
case("03-F3 ACCEPTED torch.zeros(q.shape)", check_feedback_attention, lambda q, k, v, b: fa(q, k, v, b, zero=lambda q: torch.zeros(q.shape)))
def loop(model, tokens, idx=lambda l: l, b0=False):
    x = model.embed(tokens); B = x.size(0)
    if b0: x = x[:1]
    mem, outs = x[:, :0], []
    for t in range(x.size(1)):
        ks, vs = model.project_memory(mem); h = x[:, t]; hs = [h]
        for l, layer in enumerate(model.layers): h = layer(h, ks[idx(l)], vs[idx(l)]); hs.append(h)
        mem = torch.cat([mem, model.mix(torch.stack(hs))[:, None]], 1); outs.append(model.head(h))
    out = torch.stack(outs, 1)
    return out.expand(B, *out.shape[1:]) if b0 else out
case("03-F4 every layer reads the last projection", check_token_loop, lambda m, t: loop(m, t, idx=lambda l: -1))
case("03-F4 MISLEADING batch row 0 only, expanded", check_token_loop, lambda m, t: loop(m, t, b0=True))
# ---- 04
def skv(m, norm, kv, H, swap=False, post=False):
    z = F.layer_norm(kv(m), (kv.out_features,)) if post else kv(norm(m))
    return tuple(t.view(m.size(0), -1, H) if swap else t.view(m.size(0), H, -1) for t in z.chunk(2, -1))
case("04-K1 view(B, D_h, H)", check_shared_kv, lambda m, n, kv, H: skv(m, n, kv, H, swap=True))
case("04-K1 LayerNorm after the projection", check_shared_kv, lambda m, n, kv, H: skv(m, n, kv, H, post=True))
class SqSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): ctx.save_for_backward(x); return x * x
    @staticmethod
    def backward(ctx, g): x, = ctx.saved_tensors; return (2 * x * g).sum()
case("04-S2 backward sums to a scalar", check_square, SqSum)
case("04-V3 rg[-1] (last read only, no copy)", check_value_gradients, lambda rg: rg[-1])
case("04-V3 sum over t <= j", check_value_gradients, lambda rg: torch.stack([sum(rg[t][t] for t in range(j + 1)) for j in range(len(rg))]))
case("04-V3 padded reads summed over slots", check_value_gradients, lambda rg: torch.stack([F.pad(g, (0, 0, 0, len(rg) - g.size(0))) for g in rg]).sum(1))
class ApN1(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = n = top.size(1); buffer.data[:, n + 1] = value; return buffer.data[:, 1:n + 2]
    @staticmethod
    def backward(ctx, g): return g[:, :ctx.n], g[:, ctx.n], None
case("04-A4 MISLEADING writes slot n+1, returns buffer.data[:, 1:n+2]", check_append, ApN1)
# ---- 05
def reach(xl=lambda n, s, p: n * s + p, win=lambda n, s, p: n * s):
    return lambda memory, n_layers, span, position=0: {"window": win, "XL": xl, "feedback": lambda n, s, p: math.inf}[memory](n_layers, span, position)
case("05-R1 XL (n + 1) * M", check_reach, reach(xl=lambda n, s, p: (n + 1) * s))
case("05-R1 window n * W + position", check_reach, reach(win=lambda n, s, p: n * s + p))
def mr(f, v, p, cols=False, row0=False):
    N, T = f.shape; x = f.clone()
    if cols: x[:, p] = v
    elif row0: x[0, p[0]] = v[0]
    else: x[torch.arange(N), p] = v
    y = torch.where(torch.arange(T)[None] > p[:, None], v[:, None], torch.full_like(f, IGNORE))
    return x, y
case("05-M2 x[:, positions] = values", check_make_recall, lambda f, v, p: mr(f, v, p, cols=True))
case("05-M2 row 0 only (loop body)", check_make_recall, lambda f, v, p: mr(f, v, p, row0=True))
def abd(logits, y, m, prob=False):
    lab = y != IGNORE; p = lab.long().argmax(1) - 1; d = torch.arange(y.size(1))[None] - p[:, None]
    c = logits.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0] if prob else (logits.argmax(-1) == y).float()
    out = torch.full((m,), float('nan'))
    for dd in range(1, m + 1):
        sel = lab & (d == dd)
        if sel.any(): out[dd - 1] = c[sel].mean()
    return out
case("05-D3 probability of the answer, not argmax accuracy", check_accuracy_by_distance, lambda l, y, m: abd(l, y, m, prob=True))


NAMED = {
    "01-E1 times sqrt(d)": r"multiplied the scores by sqrt\(d\)",
    "01-E1 s/s.sum, no exp": r"by their sum, with no exp",
    "01-E1 cosine": r"cosine similarity",
    "01-E1 q @ k.T on 3-D": r"k\.T reverses all three axes",
    "01-E2 w @ k": r"you weighted the keys \(w @ k\)",
    "01-E2 mask.mT": r"the mask is transposed",
    "01-E2 any(-1) no keepdim": r"without keepdim=True has shape \[T\]",
    "01-E2 sqrt(S)": r"divided the scores by sqrt\(7\) = sqrt\(k\.size\(1\)\)",
    "01-E2 batch 0 only": r"batch row 0 is right but batch row 1 is not",
    "01-E2 mask=None -> causal": r"mask=None must attend everywhere",
    "01-E2 always causal": r"the mask argument is ignored",
    "01-E5 v = k": r"you weighted the keys \(v = k\)",
    "01-E5 F.sdpa(attn_mask=~mask)": r"the mask is inverted \(attn_mask=~mask\?\)",
    "01-E5 returns x + attention": r"you returned x \+ attention",
    "01-E5 sqrt(n_heads)": r"divided the scores by sqrt\(n_heads\)",
    "01-E4 merge .view after transpose": r"calls \.view on the transposed heads.*\.reshape",
    "01-E4 merge transpose(2, 3)": r"swaps the positions and head features",
    "01-E4 merge cat(unbind(1), dim=1)": r"\[B, H\*T, D_h\].*along the features",
    "02-X1 x[:, x.size(1) - n:] (negative start wraps)": r"negative index.*max\(0,",
    "02-X1 stale mem returned when full": r"returned the old memory unchanged",
    "02-X1 newest first (flip)": r"newest state first \(\.flip\)",
    "02-X3 keys numbered from -m (2m + i - j)": r"numbers the keys from -m",
    "02-X3 column only (S - 1 - j)": r"depends on the key only",
    "02-X4 drop first column [..., 1:]": r"drops a column.*drop the first ROW",
    "02-X4 pad 2 columns": r"padded two zero columns",
    "02-X5 scale only the position term": r"only the position term is divided",
    "02-X5 v added to r, not q": r"v is added to r",
    "02-X5 k in the position term": r"the position term uses k",
    "03-F1 w / w.sum(), no softmax": r"divided w by its sum, with no exp",
    "03-F1 weights on the last axis (permute)": r"the sum ran over D, not over L\+1",
    "03-F1 sum over the batch": r"the sum ran over B, not over L\+1",
    "03-F2 table[:, -d]": r"indexes from the end \(table\[:, -d\]\)",
    "03-F2 table[:, :s].flip(-1)": r"\[H, max_distance\]",
    "03-F2 index the heads axis": r"\[max_distance, S\]: you indexed the heads axis",
    "03-F3 sums over heads": r"einsum mixes the heads",
    "03-F3 bias averaged over heads": r"bias is averaged over the heads",
    "04-K1 view(B, D_h, H)": r"\[B, D_h, H\].*swapped",
    "04-K1 LayerNorm after the projection": r"normalized after projecting",
    "04-S2 backward sums to a scalar": r"gradient of shape \[\], x is \[4, 3\]",
    "04-V3 rg[-1] (last read only, no copy)": r"the last read's gradient only",
    "04-V3 sum over t <= j": r"summed the reads t <= j",
    "04-V3 padded reads summed over slots": r"sums read t over its slots",
    "05-R1 XL (n + 1) * M": r"\(L \+ 1\) \* M",
    "05-R1 window n * W + position": r"L \* W \+ position",
    "05-M2 x[:, positions] = values": r"x\[:, positions\] = values writes into every row",
    "05-M2 row 0 only (loop body)": r"row 0 is right but row 1 is not",
    "05-D3 probability of the answer, not argmax accuracy": r"softmax probability",
    "03-F4 every layer reads the last projection": r"every layer reads the last layer's keys",
    "01-E5 ACCEPTED mask=None -> causal": r"mask=None must attend everywhere",
    "01-E5 ACCEPTED ignores mask, always causal": r"the mask argument is ignored",
    "03-F3 ACCEPTED torch.zeros(q.shape)": r"float64.*q\.new_zeros.*torch\.zeros_like",
    "04-A4 MISLEADING writes slot n+1, returns buffer.data[:, 1:n+2]":
        r"a view of the buffer starting at slot 1, not 0",
    "03-F4 MISLEADING batch row 0 only, expanded": r"batch row 0 is right but batch row 1",
}


def test_every_trial_case_is_covered():
    assert sorted(NAMED) == sorted(CASES)


@pytest.mark.parametrize("tag", sorted(NAMED))
def test_trial_case_is_named(tag):
    check, fns = CASES[tag]
    named_briefly(check, fns, NAMED[tag])


def test_a_broadcast_error_no_known_slip_explains_stays_the_learners():
    def weights(q, k):  # fails on every shape: no rerun explains it
        return (q @ k.transpose(-2, -1) + torch.zeros(3, 1, 1)).softmax(-1)

    def masked(q, k, v, mask=None):  # fails only with a mask, for no known reason
        return att(q, k, v) + (0 if mask is None else torch.zeros(3, 1, 1))

    for check, fn in ((check_attention_weights, weights), (check_attention, masked)):
        with pytest.raises(RuntimeError, match="must match the size"):
            check(fn)


def test_a_right_multi_head_attention_passes_with_none_and_padding_masks(capsys):
    check_multi_head_attention(lambda x, m, mask=None: mha(x, m, mask))
    assert "✅" in capsys.readouterr().out


def test_a_multi_head_attention_that_cannot_take_none_is_told_what_none_means(capsys):
    def no_none(x, m, mask=None):
        return mha(x, m, ~~mask)

    with pytest.raises(TypeError):
        check_multi_head_attention(no_none)
    assert "mask=None means no mask" in capsys.readouterr().err
