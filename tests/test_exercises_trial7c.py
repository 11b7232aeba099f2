"""Issue 28, seventh trial (notebooks 04 and 05): a fresh learner's wrong answers, one case
each, every one refused with a brief message naming the mistake."""
# flake8: noqa: E501,E701,E702,E731
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import judge
from labnn.data.recall import IGNORE
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES = {}


def case(tag, check, fns, pattern):
    CASES[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)


# ---- 04 Ex1 shared_kv ----
def skv(split=lambda y, B, H: [z.view(B, H, -1) for z in y.chunk(2, -1)],
        pre=lambda m, norm: norm(m),
        proj=lambda x, kv: kv(x)):
    def shared_kv(m, norm, kv, n_heads):
        return tuple(split(proj(pre(m, norm), kv), m.size(0), n_heads))
    return shared_kv
def sk_after(m, norm, kv, H):
    B, D = m.shape; y = kv(m); return norm(y[:, :D]).view(B, H, -1), norm(y[:, D:]).view(B, H, -1)
case("sk1", check_shared_kv, sk_after, r"normalized after projecting")
case("sk2", check_shared_kv,
     skv(split=lambda y, B, H: [z.view(B, -1, H).mT for z in y.chunk(2, -1)]),
     r"heads are split the wrong way")
case("sk3", check_shared_kv, skv(split=lambda y, B, H: [y.chunk(2, -1)[0].view(B, H, -1)] * 2),
     r"v (is|equals) k|same as the keys|last D outputs")
case("sk4", check_shared_kv, skv(pre=lambda m, norm: F.layer_norm(m, m.shape[-1:])),
     r"fresh layer_norm")
case("sk5", check_shared_kv, skv(proj=lambda x, kv: x @ kv.weight.T), r"bias is missing")
case("sk7", check_shared_kv, skv(split=lambda y, B, H: y.view(B, H, 2, -1).unbind(2)),
     r"interleaved per head")
case("sk8", check_shared_kv, skv(split=lambda y, B, H: [y[:, :y.size(1) // 2].view(B, -1, H).mT,
                                                         y[:, y.size(1) // 2:].view(B, H, -1)]),
     r"heads are split the wrong way")
case("sk9", check_shared_kv,
     skv(split=lambda y, B, H: [z.view(B, H, -1) for z in y.chunk(2, -1)][::-1]),
     r"keys and values are swapped")


# ---- 04 Ex2 Square ----
def fn(forward, backward, name="Square"):
    return type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})
def save(ctx, x): ctx.save_for_backward(x); return x * x
def x_of(ctx): return ctx.saved_tensors[0]
case("sq1", check_square, fn(save, lambda ctx, g: x_of(ctx) * g), r"missing the factor 2")
def save_y(ctx, x): y = x * x; ctx.save_for_backward(y); return y
case("sq2", check_square, fn(save_y, lambda ctx, g: 2 * x_of(ctx) * g), r"saved OUTPUT")
def square_in_place(ctx, x): ctx.save_for_backward(x.clone()); return x.mul_(x)
case("sq3", check_square, fn(square_in_place, lambda ctx, g: 2 * x_of(ctx) * g), r"in place")
case("sq4", check_square, fn(save, lambda ctx, g: (2 * x_of(ctx) * g).sum()), r"no \.sum\(\)")
case("sq6", check_square, fn(save, lambda ctx, g: 2 * x_of(ctx) + g),
     r"add\w* grad_output|multipl\w* .*grad_output")
case("sq7", check_square, fn(lambda ctx, x: x * x, lambda ctx, g: 2 * x_of(ctx) * g),
     r"saved_tensors is empty")
case("sq8", check_square, fn(save, lambda ctx, g: 2 * g * g), r"by itself instead of x")


# ---- 04 Ex3 value_gradients ----
def zeros(rg): return torch.zeros(len(rg), rg[0].size(-1), dtype=rg[0].dtype)
def vg_sum(rows=lambda out, t, T: out[:t + 1], dtype=True, mean=False):
    def value_gradients(rg):
        T = len(rg); out = zeros(rg) if dtype else torch.zeros(T, rg[0].size(-1)); n = zeros(rg)
        for t, g in enumerate(rg): rows(out, t, T).add_(g); rows(n, t, T).add_(1)
        return out / n if mean else out
    return value_gradients
case("vg1", check_value_gradients, lambda rg: torch.stack([g[t] for t, g in enumerate(rg)]),
     r"only the read at the step that pushed")
case("vg2", check_value_gradients, lambda rg: rg[-1].clone(), r"last read's gradient only")
case("vg3", check_value_gradients, vg_sum(dtype=False), r"float32, expected torch.float64")
case("vg4", check_value_gradients, vg_sum(rows=lambda out, t, T: out[T - t - 1:]),
     r"aligned at the end")
case("vg5", check_value_gradients, vg_sum(mean=True), r"averaged the reads")
case("vg9", check_value_gradients,
     lambda rg: torch.stack([sum(rg[t][j] for t in range(j + 1)) for j in range(len(rg))]),
     r"t >= j|later reads")
case("vg10", check_value_gradients,
     lambda rg: torch.stack([F.pad(g, (0, 0, 0, len(rg) - len(g))) for g in rg]).sum(0).cumsum(0),
     r"cumulative|cumsum")
case("vg11", check_value_gradients,
     lambda rg: torch.stack([F.pad(g, (0, 0, len(rg) - len(g), 0)) for g in rg]).sum(0),
     r"aligned at the end")


# ---- 04 Ex4 Append ----
def fw(n_of=lambda top: top.size(1), stop=lambda n: n + 1, n_saved=lambda n: n):
    def forward(ctx, top, value, buffer):
        n = n_of(top); buffer.data[:, n] = value; ctx.n = n_saved(n)
        return buffer.data[:, :stop(n)]
    return forward
def bw(top=lambda g, n: g[:, :n], value=lambda g, n: g[:, n]):
    return lambda ctx, g: (top(g, ctx.n), value(g, ctx.n), None)
def app(forward=None, backward=None): return fn(forward or fw(), backward or bw(), "Append")
case("ap1", check_append, app(backward=bw(value=lambda g, n: g[:, n - 1])), r"slot n - 1")
case("ap2", check_append, app(backward=bw(value=lambda g, n: g.sum(1))),
     r"(sum\w*|add\w*) (over )?(all|every) (the )?slots|grad\[:, n\]")
case("ap3", check_append, app(backward=bw(top=lambda g, n: g[:, 1:], value=lambda g, n: g[:, 0])),
     r"newest first")
case("ap4", check_append, app(forward=fw(n_of=lambda top: top.size(0))), r"batch size")
case("ap5", check_append, app(forward=fw(n_saved=lambda n: n + 1)),
     r"ctx\.n|n \+ 1")
case("ap7", check_append, app(backward=bw(top=lambda g, n: torch.zeros_like(g[:, :n]))),
     r"gradients stop at the newest value")
case("ap9", check_append, app(forward=fw(stop=lambda n: n)), r"include the new slot")
case("ap10", check_append, app(backward=bw(value=lambda g, n: g[:, n:])), r"wrong shape")
case("ap11", check_append, app(backward=lambda ctx, g: (g[:, :ctx.n], None, None)),
     r"`value` gets no gradient|None for `value`")


# ---- 04 Ex5 weight_gradient ----
def gx(xs, gs): return torch.einsum("tbo,tbi->oi", gs, xs)
case("wg1", check_weight_gradient, lambda xs, gs: gx(xs, gs).T, r"transposed")
case("wg2", check_weight_gradient, lambda xs, gs: gx(xs, gs) / xs.size(0),
     r"averaged over the steps")
case("wg3", check_weight_gradient, lambda xs, gs: gs[-1].T @ xs[-1], r"last step's gradient only")
case("wg4", check_weight_gradient, lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1).flip(0),
     r"pair|misaligned|order")
case("wg5", check_weight_gradient, lambda xs, gs: gs.sum(0).T @ xs.sum(0),
     r"summed over the steps before")
case("wg6", check_weight_gradient, lambda xs, gs: gx(xs, gs) / xs.size(1),
     r"divided by the batch size")
case("wg7", check_weight_gradient, lambda xs, gs: (gs.mT @ xs).mean(0), r"averaged over the steps")
case("wg8", check_weight_gradient, lambda xs, gs: gx(xs, gs).float(),
     r"float32, expected torch.float64")
case("wg9", check_weight_gradient, lambda xs, gs: gs[:, 0].T @ xs[:, 0], r"only batch element 0")


# ---- 05 Ex1 reach ----
def reach(window=lambda L, W, i: L * W, xl=lambda L, M, i: L * M + i, feedback=math.inf):
    def my_reach(memory, n_layers, span, position=0):
        if memory == "feedback": return feedback
        return (window if memory == "window" else xl)(n_layers, span, position)
    return my_reach
case("re1", check_reach, reach(window=lambda L, W, i: W), r"reach of one layer")
case("re2", check_reach, reach(xl=lambda L, M, i: L * M), r"left out the query's position")
case("re3", check_reach, reach(feedback=8), r"unbounded \(math.inf\)")
case("re4", check_reach, reach(xl=lambda L, M, i: (L + 1) * M + i), r"\(L \+ 1\) \* M")
case("re5", check_reach, reach(xl=lambda L, M, i: M + i), r"reach of one layer")
case("re6", check_reach, reach(feedback=float("nan")), r"got nan")
case("re7", check_reach, reach(window=lambda L, W, i: L * (W - 1)), r"off by one in every layer")
case("re8", check_reach, reach(window=lambda L, W, i: L * W + i), r"position adds nothing")
case("re9", check_reach, reach(xl=lambda L, M, i: L * (M + i)), r"not once per layer")
case("re10", check_reach, reach(feedback=sys.maxsize), r"unbounded \(math.inf\)")


# ---- 05 Ex2 make_recall ----
def recall(write=lambda x, v, p: x.__setitem__((torch.arange(len(p)), p), v),
           after=lambda t, p: t > p, fill=lambda f: torch.full_like(f, IGNORE),
           label=lambda x, v: v[:, None]):
    def make_recall(filler, values, positions):
        x = filler.clone(); write(x, values, positions)
        t = torch.arange(filler.size(1))[None]
        return x, torch.where(after(t, positions[:, None]), label(x, values), fill(filler))
    return make_recall
case("mr1", check_make_recall, recall(after=lambda t, p: t >= p), r"value's own position")
case("mr2", check_make_recall, recall(fill=lambda f: f), r"IGNORE.*not the filler|filler")
case("mr3", check_make_recall, recall(write=lambda x, v, p: x.scatter_(0, p[None], v[None])),
     r"dim(ension)? 1|scatter_\(1")
def only_next(f, v, p):
    x, _ = recall()(f, v, p); y = torch.full_like(f, IGNORE)
    y[torch.arange(len(p)), (p + 1).clamp(max=f.size(1) - 1)] = v; return x, y
case("mr4", check_make_recall, only_next, r"every position after it is labelled")
case("mr5", check_make_recall, recall(fill=lambda f: torch.full_like(f, -1)),
     r"-100|IGNORE.*-1\b")
case("mr6", check_make_recall, lambda f, v, p: (lambda x, y: (x, y.float()))(*recall()(f, v, p)),
     r"torch\.long")
case("mr9", check_make_recall,
     recall(write=lambda x, v, p: x.__setitem__(
         (torch.arange(len(p)), (p + 1).clamp(max=x.size(1) - 1)), v)),
     r"one position too late")
case("mr10", check_make_recall,
     recall(write=lambda x, v, p: x.__setitem__((slice(None), p), v[:, None])),
     r"every row at every position")
case("mr12", check_make_recall, recall(label=lambda x, v: x),
     r"holds the (filler|input)|the value itself")


# ---- 05 Ex3 accuracy_by_distance ----
def acc(dist=lambda t, p: t - p, sel=lambda lab: lab,
        score=lambda lg, y: (lg.argmax(-1) == y).float(),
        entry=lambda k: k - 1, post=lambda o: o):
    def accuracy_by_distance(logits, y, max_distance):
        lab = y != IGNORE; p = lab.int().argmax(1)[:, None] - 1
        d = dist(torch.arange(y.size(1))[None], p); s = score(logits, y)
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            m = sel(lab) & (d == k)
            if 0 <= entry(k) < max_distance and m.any(): out[entry(k)] = s[m].mean()
        return post(out)
    return accuracy_by_distance
case("ad1", check_accuracy_by_distance, acc(dist=lambda t, p: t - p - 1), r"off by one")
case("ad2", check_accuracy_by_distance, acc(post=lambda o: o.nan_to_num(0.0)), r"Return NaN")
case("ad3", check_accuracy_by_distance, acc(sel=lambda lab: torch.ones_like(lab)), r"denominator")
case("ad5", check_accuracy_by_distance, acc(entry=lambda k: k),
     r"entry d - 1|distance 1.*entry 0|one entry (too far|late)")
case("ad6", check_accuracy_by_distance, acc(post=lambda o: o.tolist()),
     r"torch.Tensor, but returned list")
case("ad7", check_accuracy_by_distance,
     acc(score=lambda lg, y: lg.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0]),
     r"softmax probability")
case("ad9", check_accuracy_by_distance, acc(sel=lambda lab: ~lab), r"y != IGNORE")
def overall(logits, y, max_distance):
    lab = y != IGNORE; return (logits.argmax(-1) == y)[lab].float().mean().repeat(max_distance)
case("ad10", check_accuracy_by_distance, overall, r"overall accuracy repeated")


# ---- 05 Ex4 cache_bytes ----
def nbytes(t, size=lambda t: t.element_size()): return t.numel() * size(t)
def cbytes(kv=lambda c: nbytes(c.kv), pairs=lambda p: sum(nbytes(t) for t in p),
           layers=lambda ls: ls,
           xl_extra=lambda c: 0, scale=1):
    def my_cache_bytes(cache):
        if isinstance(cache, KVState): return kv(cache) * scale
        ls = cache.kv if isinstance(cache, XLCache) else cache
        extra = xl_extra(cache) if isinstance(cache, XLCache) else 0
        return (sum(pairs(p) for p in layers(ls)) + extra) * scale
    return my_cache_bytes
case("cb1", check_cache_bytes,
     cbytes(kv=lambda c: c.kv.numel() * 4, pairs=lambda p: sum(t.numel() * 4 for t in p)),
     r"assumes 4 bytes")
case("cb2", check_cache_bytes,
     cbytes(kv=lambda c: c.kv.numel(), pairs=lambda p: sum(t.numel() for t in p)),
     r"counts numbers, not bytes")
case("cb3", check_cache_bytes,
     cbytes(xl_extra=lambda c: sum(nbytes(r) for r in c.rel_keys if r is not None)),
     r"relative-position keys")
case("cb4", check_cache_bytes, cbytes(kv=lambda c: nbytes(c.kv[0])), r"keys only")
case("cb5", check_cache_bytes,
     cbytes(kv=lambda c: c.kv.untyped_storage().nbytes(),
            pairs=lambda p: sum(t.untyped_storage().nbytes() for t in p)), r"whole storage")
case("cb6", check_cache_bytes, cbytes(layers=lambda ls: list(ls)[:1]), r"one layer's keys and values")
case("cb7", check_cache_bytes, cbytes(pairs=lambda p: nbytes(p[0])), r"keys only")
case("cb9", check_cache_bytes, cbytes(scale=1 / 1024), r"KiB")


@pytest.mark.parametrize("tag", list(CASES))
def test_trial7_case_is_named(tag, capsys):
    judge(*CASES[tag], capsys)
