"""Trial 52b: a blind learner trial of notebook 03's exercises, a second round after 50b's
fixes (190 answers).

Wrong answers that passed: a relative bias caching its index per s (ignoring the table's
width), a token loop memoizing its logits per model and tokens (stale once an optimizer
changes the weights in place), an attention whose scale is a float32 tensor (the float64
round used D_h = 4, whose float32 root is exact), a bias that returns a view of the table for
one key, a memory vector that returns a view of xs for a single layer. Misleading: a memory
mix that leaves the embedding out (softmax of model.mix.logits[1:]) was told that the loop
never calls model.mix.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STATE = r"(?i)between calls"


def _index(table, s):
    return torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)) - 1


def rb_state_cache_idx(table, s, _c={}):  # noqa: B006 (the slip itself)
    if s not in _c:
        _c[s] = _index(table, s)
    return table[:, _c[s]]


def rb_right_cache_by_width(table, s, _c={}):  # noqa: B006 (a cache keyed by all it reads)
    key = (s, table.size(1), table.device)
    if key not in _c:
        _c[key] = _index(table, s)
    return table[:, _c[key]]


case("rb_state_cache_idx", check_relative_bias, rb_state_cache_idx, STATE)
case("rb_view1", check_relative_bias,
     lambda t, s: t[:, :1] if s == 1 else t[:, _index(t, s)], r"(?i)view of .*table")
RIGHT["rb_right_cache_by_width"] = (check_relative_bias, rb_right_cache_by_width)
RIGHT["rb_right_clone1"] = (check_relative_bias,
                            lambda t, s: t[:, :1].clone() if s == 1 else t[:, _index(t, s)])


def _mix(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


case("mv_view_single", check_memory_vector,
     lambda xs, w: xs[0] if xs.size(0) == 1 else _mix(xs, w), r"(?i)view of .*xs")
RIGHT["mv_right_single_clone"] = (check_memory_vector,
                                  lambda xs, w: xs[0].clone() if xs.size(0) == 1 else _mix(xs, w))
RIGHT["mv_right"] = (check_memory_vector, _mix)


def _attention(q, k, v, bias, scale=None):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    root = scale(q) if scale else q.size(-1) ** 0.5
    s = torch.einsum("bhd,bhsd->bhs", q, k) / root + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_scale_tensor_f32", check_feedback_attention, lambda *a: _attention(
    *a, scale=lambda q: torch.sqrt(torch.tensor(float(q.size(-1)))).to(q.device)),
     r"(?i)float64 but only float32-accurate.*(scale|sqrt)")
RIGHT["fa_right_scale_tensor_dtype"] = (check_feedback_attention, lambda *a: _attention(
    *a, scale=lambda q: torch.tensor(q.size(-1), dtype=q.dtype, device=q.device).sqrt()))
RIGHT["fa_right"] = (check_feedback_attention, _attention)


def _loop(model, tokens, mix=None):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            outs.append(h)
        m = mix(model, outs) if mix else model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(pair, 2) for pair in zip(keys, nk)]
        values = [torch.cat(pair, 2) for pair in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


MEMO = {}


def tl_memo_logits(model, tokens):
    key = (id(model), model.embed.weight.data_ptr(), tokens.shape,
           tuple(tokens.flatten().tolist()), model.embed.weight.dtype)
    if key not in MEMO:
        MEMO[key] = _loop(model, tokens)
    return MEMO[key]


case("tl_memo_logits", check_token_loop, tl_memo_logits, r"(?i)weights.*changed.*between calls")
case("tl_layers_only_mix", check_token_loop, lambda m, t: _loop(m, t, mix=lambda model, outs: (
    torch.einsum("l,lbd->bd", model.mix.logits[1:].softmax(0), torch.stack(outs[1:])))),
     r"(?i)(leaves|left) the embedding out")
RIGHT["tl_right"] = (check_token_loop, _loop)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
