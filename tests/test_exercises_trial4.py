"""Issue 28, fourth trial: the answers of the third learner's report that got a vague or
misleading message, or were accepted, are named (the cases of
/tmp/learner3/repro_nonnamed.py, copied)."""
# flake8: noqa: E501,E701,E731
import math
import re

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import named_briefly
from labnn.exercises.self_attention.masked_attention import check_attention
from labnn.exercises.self_attention.multi_head import check_multi_head_attention
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_shift, check_relative_scores)
from labnn.exercises.feedback_transformer.memory_vector import check_feedback_attention
from labnn.exercises.feedback_transformer.token_loop import check_token_loop, check_cache_bytes
from labnn.exercises.kv_sharing_stack.custom_backward import check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_weight_gradient
from labnn.xl import relative_shift

CASES = {}


def case(tag, check, fn, pattern):
    CASES[tag] = (check, fn, pattern)


def v1(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    out = s.softmax(-1) @ v
    if mask is not None: out[~mask.any(-1)] = 0
    return out
case("V1", check_attention, v1, r"first axis.*the batch.*out\[:, ~mask\.any\(-1\)\]")


def a1(x, mha, mask=None):
    B, T, D = x.shape; H = mha.n_heads
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in mha.qkv(x).chunk(3, -1))
    s = q @ k.transpose(-2, -1) / math.sqrt(D // H)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    return mha.out_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
case("A1", check_multi_head_attention, a1, r"mask row is all False.*gives NaN.*keepdim=True")


def m1(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    start = (i // seg_len) * seg_len
    return (j >= start - seg_len) & (j <= i)
case("M1", check_segment_mask, m1, r"seg_len where mem_len belongs")


def m2(x):
    *lead, T, S = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, S + 1, T)[1:].reshape(*lead, T, S)
case("M2", check_relative_shift, m2, r"\[1:\] drops the first batch entry.*\[\.\.\., 1:, :\]")


def v2(q, k, r, u, v):
    S, H, Dh = r.shape
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = (q + v[:, None]) @ r.reshape(H, Dh, S)
    return (ac + relative_shift(bd)) / math.sqrt(Dh)
case("V2", check_relative_scores, v2, r"r\.reshape.*permute\(1, 2, 0\)")


def v3(q, k, v, bias):
    return ((q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1)) + bias).softmax(-1) @ v
case("V3", check_feedback_attention, v3, r"q has no query axis.*unsqueeze\(-2\)")


def loop(model, tokens, variant):
    x = model.embed(tokens); mem = x[:, :0]; outs = []
    for t in range(tokens.size(1)):
        ks, vs = model.project_memory(mem); h = x[:, t]; xs = [h]
        for l, layer in enumerate(model.layers): h = layer(h, ks[l], vs[l]); xs.append(h)
        if variant == 'noemb': st = torch.stack([xs[1]] + xs[1:])
        else: s1 = torch.stack(xs, 1); st = s1.reshape(s1.size(1), s1.size(0), -1)
        mem = torch.cat([mem, model.mix(st)[:, None]], 1); outs.append(model.head(h))
    return torch.stack(outs, 1)
case("V5", check_token_loop, lambda m, t: loop(m, t, 'noemb'), r"input of model\.mix.*embedding")
case("V6", check_token_loop, lambda m, t: loop(m, t, 'reshape'),
     r"input of model\.mix.*\[L \+ 1, B, D\]")
case("V7", check_cache_bytes, lambda L, D, n, b: (2 * (L + 1) * D * n * b, 2 * D * n * b),
     r"counted L \+ 1 layers")


def v8(rg):
    T = len(rg); out = rg[-1].new_zeros(T, rg[-1].size(-1))
    for t, g in enumerate(rg): out[t:] += g[:T - t]
    return out
case("V8", check_value_gradients, v8, r"read_grads\[t\]")
case("V9", check_value_gradients,
     lambda rg: torch.stack([F.pad(g, (0, len(rg) - g.size(0))) for g in rg]).sum(0),
     r"F\.pad.*last axis")
case("V10", check_weight_gradient,
     lambda xs, gs: gs.reshape(gs.size(-1), -1) @ xs.reshape(-1, xs.size(-1)),
     r"reshape reorders the entries.*transpose")


@pytest.mark.parametrize("tag", sorted(CASES))
def test_trial_case_is_named(tag):
    check, fn, pattern = CASES[tag]
    named_briefly(check, (fn,), pattern, re.S)


def test_the_call_line_says_the_shapes_once(capsys):
    def fn(q, k, v, mask=None):
        if mask is not None:
            raise ValueError("not yet")
        return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v
    with pytest.raises(ValueError):
        check_attention(fn)
    err = capsys.readouterr().err
    assert err.count("q [2, 5, 24]") == 1, err
