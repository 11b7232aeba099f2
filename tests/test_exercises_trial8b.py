"""Issue 28, eighth trial (notebooks 03 Ex3 to 05): a fresh learner's wrong answers, one case
each, every one refused with a brief message naming the mistake, and the right answer once
(notebooks 01 to 03 Ex2: test_exercises_trial8.py)."""
# flake8: noqa: E501,E701,E702,E731
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checker_helpers import judge, passes
from labnn.data.recall import IGNORE
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import (
    check_cache_bytes as check_cache_bytes_05, check_reach)
from labnn.exercises.feedback_transformer.memory_vector import check_feedback_attention
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes, check_token_loop
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT = {}, {}


def case(tag, check, fns, pattern):
    CASES[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)


# ---- 03 Ex3 feedback_attention ----
def fa(scale=lambda q: math.sqrt(q.size(-1)), end=lambda w, v: (w[:, :, None] @ v)[:, :, 0]):
    def feedback_attention(q, k, v, bias):
        s = (q[:, :, None] @ k.mT)[:, :, 0] / scale(q) + bias
        return end(s.softmax(-1), v) if k.size(2) else q.new_zeros(q.shape)
    return feedback_attention
def fa_sdpa(q, k, v, bias):
    if k.size(2) == 0: return torch.zeros_like(q)
    return F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=bias)[:, :, 0]
RIGHT["fa"] = (check_feedback_attention, fa())
case("fa1", check_feedback_attention, fa_sdpa, r"bias\[:, None\]|\[H, 1, S\]|attn_mask")
case("fa2", check_feedback_attention, fa(scale=lambda q: math.sqrt(q.size(1))),
     r"sqrt\(H\)|q\.size\(1\)|number of heads")
case("fa3", check_feedback_attention, fa(end=lambda w, v: (w[:, :, None] @ v).squeeze()),
     r"squeeze")


# ---- 03 Ex4 token_loop ----
def loop(nomem_dim=False, step=lambda x, t: x[:, t], mix=lambda model,
        xs: model.mix(torch.stack(xs))):
    def token_loop(model, tokens):
        x = model.embed(tokens); ks, vs = model.project_memory(x[:, :0]); outs = []
        for t in range(x.size(1)):
            h = step(x, t); xs = [h]
            for n, layer in enumerate(model.layers):
                h = layer(h, ks[n], vs[n]); xs.append(h)
            m = mix(model, xs); nk, nv = model.project_memory(m if nomem_dim else m[:,
     None])
            ks = [torch.cat([a, b], 2) for a, b in zip(ks, nk)]
            vs = [torch.cat([a, b], 2) for a, b in zip(vs, nv)]; outs.append(h)
        return model.head(torch.stack(outs, 1))
    return token_loop
RIGHT["tl"] = (check_token_loop, loop())
case("tl1", check_token_loop, loop(step=lambda x, t: x[:, t:t + 1]),
     r"x\[:, t\]|\[B, 1, D\]|\[B, D\]")
case("tl2", check_token_loop, loop(nomem_dim=True), r"m\[:, None\]|\[B, 1, D\]")
case("tl3", check_token_loop, loop(mix=lambda model, xs: torch.stack(xs).mean(0)),
     r"mean|learned (mix|weights)|instead of model\.mix")


# ---- 03 Ex5 cache_bytes ----
def cb(tr=lambda L, D, N, b: 2 * L * D * N * b, fb=lambda L, D, N, b: 2 * D * N * b, wrap=tuple):
    return lambda L, D, N, b: wrap((tr(L, D, N, b), fb(L, D, N, b)))
RIGHT["cb"] = (check_cache_bytes, cb())
case("cb1", check_cache_bytes, cb(wrap=lambda t: dict(transformer=t[0], feedback=t[1])),
     r"tuple|dict")
case("cb2", check_cache_bytes, cb(tr=lambda L, D, N, b: 2 * D * N * b),
     r"per layer|n_layers|every layer")
# stop 41: numpy integers are whole numbers of bytes too, as 05's reach accepts them
RIGHT["cb3"] = (check_cache_bytes, cb(wrap=lambda t: tuple(np.int64(v) for v in t)))


# ---- 04 Ex1 shared_kv ----
def skv(pre=lambda m, norm: norm(m), split=lambda y, B, H: [z.reshape(B, H,
        -1) for z in y.chunk(2, -1)],
        grad=True):
    def shared_kv(m, norm, kv, n_heads):
        with torch.set_grad_enabled(grad): y = kv(pre(m, norm))
        return tuple(split(y, m.size(0), n_heads))
    return shared_kv
RIGHT["sk"] = (check_shared_kv, skv())
case("sk1", check_shared_kv, skv(split=lambda y, B, H: [z.reshape(B, H, -1) for z in y.split(H,
     -1)[:2]]),
     r"split\(H|chunk\(2")
case("sk2", check_shared_kv, skv(pre=lambda m, norm: m * norm.weight + norm.bias),
     r"normaliz|norm\(m\)|affine")
case("sk3", check_shared_kv, skv(grad=False), r"no_grad|no gradient|detached")


# ---- 04 Ex2 Square ----
def fn(forward, backward, name="Square"):
    return type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})
def save(ctx, x): ctx.save_for_backward(x); return x * x
RIGHT["sq"] = (check_square, fn(save, lambda ctx, g: 2 * ctx.saved_tensors[0] * g))
case("sq1", check_square, fn(save, lambda ctx, g: 2 * ctx.saved_tensors[0] @ g),
     r"@|matrix product|elementwise")
case("sq2", check_square, fn(save, lambda ctx, g: 2 * ctx.saved_tensors * g),
     r"saved_tensors\[0\]|tuple")
case("sq3", check_square, fn(save, lambda ctx, g: 2 * g), r"multiply by x")


# ---- 04 Ex3 value_gradients ----
def vg(T=len, stop=lambda T: T):
    def value_gradients(rg):
        n = T(rg); out = rg[0].new_zeros(n, rg[0].size(-1))
        for j in range(n):
            for t in range(j, stop(len(rg))): out[j] += rg[t][j]
        return out
    return value_gradients
RIGHT["vg"] = (check_value_gradients, vg())
case("vg1", check_value_gradients, vg(T=lambda rg: rg[0].size(0)),
     r"len\(read_grads\)|T = |one row per")
case("vg2", check_value_gradients, lambda rg: torch.cat(rg).sum(0),
     r"\[F\]|every value|all reads|\[T, F\]")
case("vg3", check_value_gradients, vg(stop=lambda T: T - 1), r"last read|t = T - 1|range")


# ---- 04 Ex4 Append ----
def ap_fwd(ctx, top, value, buffer):
    n = top.size(1); buffer.data[:, n] = value; ctx.n = n; return buffer.data[:, :n + 1]
def ap_cat(ctx, top, value, buffer):
    ctx.n = top.size(1); return torch.cat([top, value[:, None]], 1)
def ap_fwd_n(n_of=lambda top, buf: top.size(1), view=lambda b: b.data):
    def forward(ctx, top, value, buffer):
        n = n_of(top, buffer); view(buffer)[:, n] = value; ctx.n = n; return view(buffer)[:, :n + 1]
    return forward
def ap_bw(ctx, g): return g[:, :ctx.n], g[:, ctx.n], None
RIGHT["ap"] = (check_append, fn(ap_fwd, ap_bw, "Append"))
case("ap1", check_append, fn(ap_fwd_n(lambda top, buf: buf.size(1)), ap_bw, "Append"),
     r"buffer\.size\(1\)|capacity")
case("ap2", check_append, fn(ap_fwd_n(view=lambda b: b), ap_bw, "Append"), r"buffer\.data|version")
case("ap3", check_append, fn(ap_fwd, lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n:], None), "Append"),
     r"g(rad)?\[:, n\]|\[B, 1, F\]|keeps the slot axis")


# ---- 04 Ex5 weight_gradient ----
RIGHT["wg"] = (check_weight_gradient, lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1))
case("wg1", check_weight_gradient, lambda xs, gs: torch.bmm(gs.transpose(1, 2), xs),
     r"sum over (the )?steps|\.sum\(0\)|\[T, D_out, D_in\]")
case("wg2", check_weight_gradient, lambda xs, gs: torch.tensordot(gs, xs, dims=2),
     r"tensordot|dims=\(\[0, 1\]")
case("wg3", check_weight_gradient, lambda xs, gs: (xs.flatten(0, 1).T @ gs.flatten(0,
     1)).reshape(gs.size(-1), -1), r"reshape.*transpose|\.T|transpos")


# ---- 05 Ex1 reach ----
def reach(xl="XL", win=lambda L, s, p: L * s, xlr=lambda L, s, p: L * s + p, inf=math.inf):
    def my_reach(memory, n_layers, span, position=0):
        if memory == "window": return win(n_layers, span, position)
        if memory == xl: return xlr(n_layers, span, position)
        return inf
    return my_reach
RIGHT["re"] = (check_reach, reach())
case("re1", check_reach, reach(xl="xl"), r"but 16 for 'xl'.*fell through")
case("re2", check_reach, reach(inf=None), r"math\.inf|None")
case("re3", check_reach, reach(xlr=lambda L, s, p: L * s + s - 1 - p),
     r"LAST position of a segment")


# ---- 05 Ex2 make_recall ----
def mr(y_of=lambda after, v: torch.where(after, v[:, None], IGNORE), after=lambda T,
        p: torch.arange(T, device=p.device) > p[:, None]):
    def my_make_recall(filler, values, positions):
        x = filler.clone(); x[torch.arange(len(x), device=filler.device), positions] = values
        return x, y_of(after(x.size(1), positions), values)
    return my_make_recall
def y_mask(after, v): y = torch.full(after.shape, IGNORE); y[after] = v; return y
RIGHT["mr"] = (check_make_recall, mr())
case("mr1", check_make_recall, mr(y_of=lambda after, v: torch.where(after, v, IGNORE)),
     r"values\[:, None\]|broadcast|per row")
case("mr2", check_make_recall, mr(y_of=y_mask), r"one value per row.*values\[:, None\]\.expand_as")
case("mr3", check_make_recall, mr(after=lambda T, p: torch.arange(T) > p),
     r"positions\[:, None\].*every time step")


# ---- 05 Ex3 accuracy_by_distance ----
def ad(p_of=lambda y: (y != IGNORE).int().argmax(1) - 1, div=lambda a, b: a / b, far=lambda d, m: d,
       pred=lambda lg: lg.argmax(-1)):
    def my_accuracy_by_distance(logits, y, max_distance):
        lab = y != IGNORE; d = torch.arange(y.size(1), device=y.device) - p_of(y)[:, None]
        d = far(d, max_distance); ok = (pred(logits) == y) & lab; out = []
        for k in range(1, max_distance + 1):
            sel = lab & (d == k); n = int(sel.sum())
            out.append(div(int(ok[sel].sum()), n) if n else math.nan)
        return torch.tensor(out, dtype=logits.dtype, device=logits.device)  # where logits is
    return my_accuracy_by_distance
RIGHT["ad"] = (check_accuracy_by_distance, ad())
case("ad1", check_accuracy_by_distance, ad(pred=lambda lg: F.pad(lg.argmax(-1)[:, :-1], (1, 0))),
     r"previous position's prediction.*already aligned")
case("ad2", check_accuracy_by_distance, ad(pred=lambda lg: lg.max(-1)[0]),
     r"max values.*index of the max")
case("ad3", check_accuracy_by_distance, ad(far=lambda d, m: d.clamp(max=m)),
     r"beyond max_distance.*leave them out")


# ---- 05 Ex4 cache_bytes ----
def nbytes(t): return t.numel() * t.element_size()
def cb5(size=nbytes, scale=1, kind=lambda c: isinstance(c, KVState)):
    def my_cache_bytes(cache):
        if kind(cache): return size(cache.kv) * scale
        ls = cache.kv if isinstance(cache, XLCache) else cache
        return sum(size(t) for p in ls for t in p) * scale
    return my_cache_bytes
RIGHT["c5"] = (check_cache_bytes_05, cb5())
case("c51", check_cache_bytes_05, cb5(size=lambda t: t.numel() * t.element_size),
     r"element_size\(\)|call it")
case("c52", check_cache_bytes_05,
     cb5(size=lambda t: t.element_size() * t.shape[-1] * t.shape[-2]),
     r"last two axes.*\[B, H\] left out.*numel")
case("c53", check_cache_bytes_05, cb5(kind=lambda c: hasattr(c, "kv")),
     r"XLCache also has \.kv.*isinstance")


@pytest.mark.parametrize("tag", list(RIGHT))
def test_trial8b_right_answer_passes(tag, capsys):
    passes(*RIGHT[tag], capsys)


@pytest.mark.parametrize("tag", list(CASES))
def test_trial8b_case_is_named(tag, capsys):
    judge(*CASES[tag], capsys)
