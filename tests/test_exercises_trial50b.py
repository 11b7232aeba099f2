"""Trial 50b: a blind learner trial of notebook 03's exercises (about 256 answers).

Wrong answers that passed: a token loop keeping its keys between calls (on the model, or in
a global reset only for another model: every check call used a new model), making its empty
keys without dtype= (a float64 model promotes them; a bfloat16 one raises), detaching the
memory every 32 or 64 steps (gradients were checked up to 24 tokens); an attention scaled by
math.isqrt(D_h) (the widths tried, 4 and 9, are squares), or whose one-key shortcut is
detached; a relative bias of the first 3 heads only (H = 4 never tried); a memory vector
caching softmax(w) between calls. Misleading: a global cache reset when B changes was told
of a float32 tensor, and contrived caches of a crash or of mix weights by layer count.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STATE = r"(?i)between calls"


def _body(model, x, keys, values):
    outs = []
    for t in range(x.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        m = model.mix(torch.stack(xs))
        outs.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([k, n], 2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], 2) for v, n in zip(values, nv)]
    return outs, keys, values


def _loop(model, tokens, empty=None, every=0):
    x = model.embed(tokens)
    keys, values = map(list, empty(model, x) if empty else model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        if every and t and t % every == 0:
            keys, values = [k.detach() for k in keys], [v.detach() for v in values]
        step, keys, values = _body(model, x[:, t:t + 1], keys, values)
        outs += step
    return model.head(torch.stack(outs, 1))


def tl_state_on_model(model, tokens):
    x = model.embed(tokens)
    if not hasattr(model, "_kv_cache"):
        model._kv_cache = tuple(map(list, model.project_memory(x[:, :0])))
    outs, keys, values = _body(model, x, *model._kv_cache)
    model._kv_cache = ([k.detach() for k in keys], [v.detach() for v in values])
    return model.head(torch.stack(outs, 1))


def _global(reset):
    store = {}

    def loop(model, tokens):
        x = model.embed(tokens)
        if "kv" not in store or reset(store, model, tokens):
            store["model"] = model
            store["kv"] = tuple(map(list, model.project_memory(x[:, :0])))
        outs, keys, values = _body(model, x, *store["kv"])
        store["kv"] = (keys, values)
        return model.head(torch.stack(outs, 1))
    return loop


def _global_try():
    store = {}

    def loop(model, tokens):
        x = model.embed(tokens)
        fresh = tuple(map(list, model.project_memory(x[:, :0])))
        try:
            outs, keys, values = _body(model, x, *store.get("kv", fresh))
        except RuntimeError:
            outs, keys, values = _body(model, x, *fresh)
        store["kv"] = ([k.detach() for k in keys], [v.detach() for v in values])
        return model.head(torch.stack(outs, 1))
    return loop


def tl_mix_cached(model, tokens, _cache={}):  # noqa: B006 (the slip itself)
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    n = len(model.layers) + 1
    if n not in _cache:
        _cache[n] = model.mix.logits.softmax(0)
    wts = _cache[n]
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        p = wts if wts.dtype == h.dtype and wts.device == h.device else (
            model.mix.logits.softmax(0))
        m = torch.einsum("l,lbd->bd", p, torch.stack(xs))
        outs.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([k, n], 2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], 2) for v, n in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


def _zeros(dtype):
    def empty(model, x):
        b, h = x.size(0), model.config.n_heads
        d = model.config.d_model // h
        kw = {"device": x.device} if dtype is None else {"device": x.device, "dtype": x.dtype}
        keys = [torch.zeros(b, h, 0, d, **kw) for _ in model.layers]
        return keys, list(keys)
    return empty


def tl_right_debug_attribute(model, tokens):  # writes state it never reads: right
    out = _loop(model, tokens)
    model.last_tokens = tokens
    return out


case("tl_state_on_model", check_token_loop, tl_state_on_model, STATE)
case("tl_state_global_reset_on_model", check_token_loop,
     _global(lambda s, model, tokens: s["model"] is not model), STATE)
case("tl_state_global_reset_on_B", check_token_loop,
     _global(lambda s, model, tokens: s["kv"][0][0].size(0) != tokens.size(0)), STATE)
case("tl_state_global_try", check_token_loop, _global_try(), STATE)
case("tl_mix_cached_by_layers", check_token_loop, tl_mix_cached, STATE)
case("tl_empty_keys_no_dtype", check_token_loop,
     lambda m, t: _loop(m, t, empty=_zeros(None)), r"dtype=")
for p in (32, 64):
    case(f"tl_detached_every_{p}", check_token_loop,
         lambda m, t, p=p: _loop(m, t, every=p),
         rf"(?i)detached (every {p} steps|at step {p}\b)")
RIGHT["tl_right"] = (check_token_loop, _loop)
RIGHT["tl_right_zeros_dtype"] = (check_token_loop, lambda m, t: _loop(m, t, _zeros(True)))
RIGHT["tl_right_debug_attribute"] = (check_token_loop, tl_right_debug_attribute)


def _attention(q, k, v, bias, scale=math.sqrt, one_key=None):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    if one_key and k.size(2) == 1:
        return one_key(v)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / scale(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_isqrt", check_feedback_attention, lambda *a: _attention(*a, scale=math.isqrt),
     r"(?i)isqrt|round")
case("fa_int_pow", check_feedback_attention,
     lambda *a: _attention(*a, scale=lambda d: int(d ** 0.5)), r"(?i)isqrt|round")
case("fa_one_key_detached", check_feedback_attention,
     lambda *a: _attention(*a, one_key=lambda v: v[:, :, 0].clone().detach()),
     r"(?i)one memory key.*(detach|gradient)")
case("fa_one_key_new_tensor", check_feedback_attention, lambda *a: _attention(
    *a, one_key=lambda v: torch.tensor(v[:, :, 0].tolist(), dtype=v.dtype)),
     r"(?i)one memory key.*(leaf|gradient)")
RIGHT["fa_right"] = (check_feedback_attention, _attention)
RIGHT["fa_right_one_key_clone"] = (check_feedback_attention,
                                   lambda *a: _attention(*a, one_key=lambda v: v[:, :, 0] + 0))
RIGHT["fa_right_scale_pow"] = (check_feedback_attention,
                               lambda *a: _attention(*a, scale=lambda d: d ** 0.5))


def _bias(table, s, heads=None):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1))
    return table[:heads, d - 1]


case("rb_heads_capped_at_3", check_relative_bias, lambda t, s: _bias(t, s, 3),
     r"(?i)3 heads|heads?.*(number|hard)")
RIGHT["rb_right"] = (check_relative_bias, _bias)


def mv_softmax_cached(xs, w, _cache={}):  # noqa: B006 (the slip itself)
    if "p" not in _cache:
        _cache["p"] = w.softmax(0)
    p = _cache["p"]
    if p.shape != w.shape or p.dtype != w.dtype or p.device != w.device:
        p = w.softmax(0)
    return torch.einsum("l,lbd->bd", p, xs)


case("mv_softmax_cached", check_memory_vector, mv_softmax_cached, STATE)
RIGHT["mv_right"] = (check_memory_vector,
                     lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(0), xs))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
