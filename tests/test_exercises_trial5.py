"""Issue 28, fifth trial: the answers of the fourth learner's report that got a vague or
misleading message, or were accepted, are named (the cases of /tmp/learner4/nonnamed.py,
copied)."""
# flake8: noqa: E501,E701,E731
import math
import re

import pytest
import torch

from labnn.data.recall import IGNORE
from checker_helpers import named_briefly
from labnn.exercises.self_attention.masked_attention import check_attention, check_attention_weights
from labnn.exercises.transformer_xl.relative_scores import check_relative_scores
from labnn.exercises.transformer_xl.segment_memory import check_update_memory
from labnn.exercises.feedback_transformer.token_loop import check_token_loop
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.xl import relative_shift

CASES = {}


def case(tag, check, fn, pattern):
    CASES[tag] = (check, fn, pattern)


def att_boolidx(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s[..., ~mask] = float("-inf")
    return s.softmax(-1).nan_to_num(0) @ v
case("A1", check_attention, att_boolidx, r"broadcastable to \[B, T, S\].*\[B, 1, S\].*masked_fill")

aw_float = lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1).float()
case("A2", check_attention_weights, aw_float, r"float64.*float32|float32.*float64")


def rs_T(q, k, r, u, v):
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = (q + v[:, None]) @ r.transpose(0, 2)
    return (ac + relative_shift(bd)) / math.sqrt(q.size(-1))
case("M1", check_relative_scores, rs_T, r"r must be \[H, D_h, S\].*permute\(1, 2, 0\)")


def um_dim0(mem, h, L):
    c = h if mem is None else torch.cat([mem, h], 1)
    return c[max(0, c.size(0) - L):].detach()
case("V1", check_update_memory, um_dim0, r"dim 0, the batch.*dim 1")


def loop(model, tokens, include_self=False, late=False):
    x = model.embed(tokens); mem, out, pending = [], [], None
    for t in range(x.size(1)):
        ms = mem + [x[:, t]] if include_self else mem
        ks, vs = model.project_memory(torch.stack(ms, 1) if ms else x[:, :0])
        if late and pending is not None: mem.append(pending)
        h = x[:, t]; xs = [h]
        for l, layer in enumerate(model.layers):
            h = layer(h, ks[l], vs[l]); xs.append(h)
        m = model.mix(torch.stack(xs))
        if late: pending = m
        else: mem.append(m)
        out.append(model.head(h))
    return torch.stack(out, 1)
case("M2", check_token_loop, lambda m, t: loop(m, t, include_self=True),
     r"reads its own memory: its embedding.*only after the step")
case("V2", check_token_loop, lambda m, t: loop(m, t, late=True), r"one step late")

def kv_dim0(m, norm, kv, H):
    return tuple(t.reshape(t.size(0), H, -1) for t in kv(norm(m)).chunk(2, 0))
case("V3", check_shared_kv, kv_dim0,
     r"chunk.*batch \(dim 0\).*chunk\(2, dim=-1\)")


def acc_row0(lo, y, md):
    T = y.size(1); p = int((y[0] != IGNORE).float().argmax()) - 1
    ok = lo[0].argmax(-1) == y[0]; out = torch.full((md,), float("nan"))
    for t in range(p + 1, T):
        if t - p <= md: out[t - p - 1] = ok[t].float()
    return out
case("V4", check_accuracy_by_distance, acc_row0, r"only row 0 of the batch is scored")

@pytest.mark.parametrize("tag", sorted(CASES))
def test_trial_case_is_named(tag):
    check, fn, pattern = CASES[tag]
    named_briefly(check, (fn,), pattern, re.S)
