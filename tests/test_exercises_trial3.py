"""Issue 28, third trial: every answer of the second learner's report that got a vague or
misleading message, or was accepted, is named (the cases of
/tmp/learner2/repro_nonnamed.py, copied)."""
# flake8: noqa: E501,E701,E731
import math

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import named_briefly
from labnn.exercises.grading import ExerciseFailed

pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`")
CASES = {}


def case(tag, check, *fns):
    CASES[tag] = (check, fns)


from labnn.data.recall import IGNORE
from labnn.exercises.self_attention.masked_attention import check_attention, check_attention_weights
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import check_relative_shift
from labnn.exercises.transformer_xl.segment_memory import check_update_memory
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import check_token_loop
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.memory_limits import check_reach

sc = lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
def att(q, k, v, mask, anydim=-1):
    s = sc(q, k)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = s.softmax(-1)
    if mask is not None: w = w.masked_fill(~mask.any(anydim, keepdim=True), 0.)
    return w @ v
sp = lambda x, h: x.view(*x.shape[:2], h, -1).transpose(1, 2)
mg = lambda x: x.transpose(1, 2).flatten(2)
# ---- 01
case("1.1 V batch-0 only", check_attention_weights, lambda q, k: (q[0] @ k[0].T / math.sqrt(q.size(-1))).softmax(-1).expand(q.size(0), -1, -1))
case("1.2 A any(dim=1)", check_attention, lambda q, k, v, mask=None: att(q, k, v, mask, anydim=1))
case("1.4 V split transpose_ in place", check_heads, lambda x, h: x.view(*x.shape[:2], h, -1).transpose_(1, 2), mg)
case("1.4 V merge reshape [B,D,T] then .T", check_heads, sp, lambda x: x.transpose(1, 2).reshape(x.size(0), -1, x.size(2)).transpose(1, 2))
def mha_causal(x, mha, mask=None):
    T = x.size(1); m = torch.ones(T, T, dtype=torch.bool).tril()
    m = m if mask is None else m & mask
    q, k, v = (sp(z, mha.n_heads) for z in mha.qkv(x).chunk(3, -1)); return mha.out_proj(mg(att(q, k, v, m)))
case("1.5 V always adds a causal mask", check_multi_head_attention, mha_causal)
def at_loopb(q, k, v, mask=None):  # per-batch loop that reuses mask[0]
    out = []
    for b in range(q.size(0)):
        m = mask if mask is None or mask.dim() == 2 else mask[0]
        out.append(att(q[b:b + 1], k[b:b + 1], v[b:b + 1], m)[0].nan_to_num())
    return torch.stack(out)
def at_2donly(q, k, v, mask=None):
    s = sc(q, k)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = s.softmax(-1)
    if mask is not None: w = w.masked_fill(~mask.any(1)[:, None], 0.)
    return w @ v
case("1.2 A per-batch loop with mask[0]", check_attention, at_loopb)
case("1.2 A mask.any(1)[:, None]", check_attention, at_2donly)
# ---- 02
def um_LT(mem, h, L):
    s = h if mem is None else torch.cat([mem, h], 1); return s[:, -min(L, h.size(1)):].detach() if L else s[:, :0].detach()
case("2.1 M keeps min(mem_len, T)", check_update_memory, um_LT)
def um_nograd(mem, h, L):
    with torch.no_grad():
        s = h if mem is None else torch.cat([mem, h], 1); return s[:, s.size(1) - min(L, s.size(1)):]
case("2.1 M torch.no_grad instead of detach", check_update_memory, um_nograd)
def rs_flat(x):
    *l, t, s = x.shape; p = F.pad(x, (1, 0)).reshape(-1)[t:]; return p[:x.numel()].reshape(*l, t, s)
case("2.4 V flattens across batch/heads", check_relative_shift, rs_flat)
case("2.4 V 2-D only", check_relative_shift, lambda x: x.view(x.size(-2), x.size(-1)))
# ---- 03
case("3.1 V p[:, None]", check_memory_vector, lambda xs, w: (w.softmax(0)[:, None] * xs).sum(0))
case("3.1 V w.softmax(0) @ xs", check_memory_vector, lambda xs, w: w.softmax(0) @ xs)
case("3.1 V softmax of w * xs", check_memory_vector, lambda xs, w: (w[:, None, None] * xs).softmax(0).sum(0))
case("3.2 M clamp after -1", check_relative_bias, lambda t, s: t[:, (torch.arange(s, 0, -1) - 1).clamp(max=t.size(1))])
case("3.2 V clamp(min=)", check_relative_bias, lambda t, s: t[:, torch.arange(s, 0, -1).clamp(min=t.size(1)) - 1])
def fa(q, k, v, b, swap=False, bT=False):
    if k.size(2) == 0: return torch.zeros_like(q)
    if swap: k, v = v, k
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + (b.T if bT else b)
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)
case("3.3 V k and v swapped", check_feedback_attention, lambda q, k, v, b: fa(q, k, v, b, swap=True))
case("3.3 V bias.T", check_feedback_attention, lambda q, k, v, b: fa(q, k, v, b, bT=True))
def tl_cat1(model, tokens):
    x = model.embed(tokens); keys, values = model.project_memory(x[:, :0]); tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers): outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1]); nk, nv = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat(p, 1) for p in zip(keys, nk)]; values = [torch.cat(p, 1) for p in zip(values, nv)]
    return model.head(torch.stack(tops, 1))
case("3.4 V cat along dim 1", check_token_loop, tl_cat1)
# ---- 04
case("4.1 V batch row 0 only", check_shared_kv, lambda m, n, kv, H: tuple(o.expand(m.size(0), -1, -1) for o in kv(n(m[0])).view(2, H, -1)))
mk = lambda f, b: type('S', (torch.autograd.Function,), {'forward': staticmethod(f), 'backward': staticmethod(b)})
def f_ok(ctx, x): ctx.save_for_backward(x); return x * x
case("4.2 V sign flip", check_square, mk(f_ok, lambda ctx, g: -2 * g * ctx.saved_tensors[0]))
case("4.2 V 2*g*g", check_square, mk(f_ok, lambda ctx, g: 2 * g * g))
case("4.2 V forgot save_for_backward", check_square, mk(lambda ctx, x: x * x, lambda ctx, g: 2 * g * ctx.saved_tensors[0]))
def vg_rev(rg):
    tot = torch.zeros_like(rg[-1]); T = len(rg)
    for t, g in enumerate(rg):
        if g.size(0) >= T - t: tot[t:] += g[:T - t]
    return tot
def b_unpack(ctx, g): (x,) = ctx.saved_tensors; return 2 * g * x
case("4.2 V forgot save_for_backward, unpacked", check_square, mk(lambda ctx, x: x * x, b_unpack))
case("4.3 V slots aligned from step t", check_value_gradients, vg_rev)
def af(ctx, top, value, buffer, nf=lambda t: t.size(1)):
    n = nf(top); buffer[:, n].copy_(value); ctx.n = n; return buffer.data[:, :n + 1]
case("4.4 V value grad from slot n-1", check_append, mk(af, lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n - 1], None)))
case("4.4 V n = top.size(0)", check_append, mk(lambda ctx, t, v, b: af(ctx, t, v, b, lambda t: t.size(0)), lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n], None)))
case("4.5 V G X^T", check_weight_gradient, lambda xs, gs: gs.flatten(0, 1) @ xs.flatten(0, 1).T)
# ---- 05
case("5.1 V L*M + T_s - 1", check_reach, lambda m, L, s, position=0: L * s if m == "window" else (L * s + s - 1 if m == "XL" else math.inf))
def mr(f, v, p, yv=None):
    x = f.clone(); x[torch.arange(len(v)), p] = v
    y = torch.where(torch.arange(f.size(1)) > p[:, None], v[:, None] if yv is None else yv(v), IGNORE); return x, y
case("5.2 V v[0] for every row", check_make_recall, lambda f, v, p: mr(f, v, p, yv=lambda v: v[0]))
case("5.2 V v not a column", check_make_recall, lambda f, v, p: mr(f, v, p, yv=lambda v: v))
def mr_row(f, v, p):
    x = f.clone(); x[torch.arange(len(v)), p] = v; y = torch.full_like(f, IGNORE); y[p] = v[:, None]; return x, y
case("5.2 V y[p] rows", check_make_recall, mr_row)
def acc(logits, y, D, k0=1, div=None):
    lab = y != IGNORE; d = lab.long().cumsum(1) * lab; hits = (logits.argmax(-1) == y).float()
    out = torch.full((D,), float('nan'))
    for k in range(k0, D + k0):
        s = d == k
        if s.any(): out[k - k0] = hits[s].sum() / (s.sum() if div is None else div(y)) if div != 'int' else hits[s].sum() // s.sum()
    return out
case("5.3 V distances 0..D-1", check_accuracy_by_distance, lambda l, y, D: acc(l, y, D, k0=0))
case("5.3 V divide by N rows", check_accuracy_by_distance, lambda l, y, D: acc(l, y, D, div=lambda y: y.size(0)))
case("5.3 V integer division", check_accuracy_by_distance, lambda l, y, D: acc(l, y, D, div='int'))

NAMED = {
    "1.1 V batch-0 only": r"batch row 0 is right but batch row 1 is not",
    "1.2 A any(dim=1)": r"reduces over the wrong axis of a \[B, T, S\] mask",
    "1.2 A per-batch loop with mask[0]": r"uses mask\[0\]",
    "1.2 A mask.any(1)[:, None]": r"reduces over the wrong axis of a \[B, T, S\] mask",
    "1.4 V split transpose_ in place": r"in place on the input",
    "1.4 V merge reshape [B,D,T] then .T": r"\[B, D, T\]",
    "1.5 V always adds a causal mask": r"combined with a causal mask",
    "2.1 M keeps min(mem_len, T)": r"kept at most T .*keep the last mem_len = \d+ of the concatenation",
    "2.1 M torch.no_grad instead of detach": r"no grad_fn.*\.detach\(\)",
    "2.4 V flattens across batch/heads": r"across",
    "2.4 V 2-D only": r"last two axes|\[B, H, T, S\]",
    "3.1 V p[:, None]": r"\[:, None, None\]",
    "3.1 V w.softmax(0) @ xs": r"\[:, None, None\]|broadcast",
    "3.1 V softmax of w * xs": r"softmax of w \* xs",
    "3.2 M clamp after -1": r"clamped d - 1 to max_distance",
    "3.2 V clamp(min=)": r"clamp\(min=",
    "3.3 V k and v swapped": r"k and v are swapped",
    "3.3 V bias.T": r"bias\.T|transposed",
    "3.4 V cat along dim 1": r"dim=1|dim=2",
    "4.1 V batch row 0 only": r"batch row 0 is right but batch row 1 is not",
    "4.2 V sign flip": r"sign",
    "4.2 V 2*g*g": r"2 \* g \* g|grad_output twice|instead of x",
    "4.2 V forgot save_for_backward": r"ctx\.saved_tensors is empty",
    "4.2 V forgot save_for_backward, unpacked": r"ctx\.saved_tensors is empty",
    "4.3 V slots aligned from step t": r"slot",
    "4.4 V value grad from slot n-1": r"slot n - 1|slot n-1",
    "4.4 V n = top.size(0)": r"top\.size\(0\)",
    "4.5 V G X^T": r"order|G X",
    "5.1 V L*M + T_s - 1": r"reach of the LAST position of a segment",
    "5.2 V v[0] for every row": r"values\[0\]",
    "5.2 V v not a column": r"column",
    "5.2 V y[p] rows": r"rows",
    "5.3 V distances 0..D-1": r"distance 0|start at 1",
    "5.3 V divide by N rows": r"number of rows|divided by N",
    "5.3 V integer division": r"integer division",
}


def test_every_trial_case_is_covered():
    assert sorted(NAMED) == sorted(CASES)


@pytest.mark.parametrize("tag", sorted(NAMED))
def test_trial_case_is_named(tag):
    check, fns = CASES[tag]
    named_briefly(check, fns, NAMED[tag])


def test_the_cache_bytes_reference_is_the_checks_own_count():
    from labnn.exercises.three_memories.memory_limits import _caches, cache_bytes, check_cache_bytes
    for dtype in (torch.float32, torch.float64):
        for name, cache, want, _ in _caches(dtype):
            assert cache_bytes(cache) == want, name
    with pytest.raises(ExerciseFailed, match="calls labnn's own `cache_bytes`"):
        check_cache_bytes(cache_bytes)


@pytest.mark.parametrize("check, fn", [
    (check_memory_vector, lambda xs, w: xs.sum(0) + torch.zeros(3)),
    (check_feedback_attention, lambda q, k, v, b: q + torch.zeros(5)),
    (check_make_recall, lambda f, v, p: (f, f + torch.zeros(3, dtype=f.dtype))),
    (check_weight_gradient, lambda xs, gs: xs.flatten(0, 1) @ xs.flatten(0, 1)),
    # no number written (trial 71: a size that stays when x's change is named)
    (check_relative_shift, lambda x: x.view(x.size(0), -1, x.size(-1) + 1)),
])
def test_an_error_no_known_slip_explains_stays_the_learners(check, fn):
    with pytest.raises(RuntimeError):
        check(fn)
