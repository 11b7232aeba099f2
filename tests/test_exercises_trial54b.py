"""Trial 54b: a blind learner trial of notebook 03's exercises (221 answers).

Wrong answers that passed: relative_bias with distances in uint8 (wraps past 255; only s =
200 was tried) or an index made in the table's dtype (bfloat16 rounds past 256);
feedback_attention handing out one cached zeros tensor for every empty memory; an output
buffer reused across calls (relative_bias, feedback_attention; memory_vector was refused as
"differs from the reference"); a token loop calling model.zero_grad() (gradient accumulation
lost); cache_bytes in int32 (overflows past 2**31; only small sizes tried). A list or NumPy
ints stay accepted, as earlier trials decided. Misleading messages: a scale rounded to 2
decimals told to read sizes from the inputs; a memory detached at every step from step 40 on
told "every 4 steps"; `.reshape(-1, s)` at s = 0 told to index with torch.arange;
memory_vector changing xs in place only without a gradient told "differs" in bfloat16.
"""
import math

import numpy as np
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
BUFFER = r"(?i)overwr.*new tensor"


def _rb(table, s):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.shape[1])
    return table[:, d - 1]


def _fa(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def _mv(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def _loop(model, tokens, detach_from=None):
    x = model.embed(tokens)
    ks, vs = model.project_memory(x[:, :0])
    ks, vs, outs = list(ks), list(vs), []
    for t in range(tokens.size(1)):
        h, layers = x[:, t], [x[:, t]]
        for i, layer in enumerate(model.layers):
            h = layer(h, ks[i], vs[i])
            layers.append(h)
        outs.append(h)
        m = model.mix(torch.stack(layers))
        if detach_from is not None and t >= detach_from:
            m = m.detach()
        nk, nv = model.project_memory(m[:, None])
        ks = [torch.cat(p, 2) for p in zip(ks, nk)]
        vs = [torch.cat(p, 2) for p in zip(vs, nv)]
    return model.head(torch.stack(outs, 1))


# 1-2. distances or index in a small dtype
def rb_uint8(t, s):
    d = torch.arange(s, 0, -1, device=t.device, dtype=torch.uint8)
    return t[:, d.clamp(max=t.shape[1]).long() - 1]


def rb_table_dtype(t, s):
    d = torch.arange(s, 0, -1, device=t.device, dtype=t.dtype)
    return t[:, d.clamp(max=t.shape[1]).long() - 1]


case("rb_uint8_distances", check_relative_bias, rb_uint8, r"uint8.*int64")
case("rb_index_in_table_dtype", check_relative_bias, rb_table_dtype,
     r"bfloat16.*256.*int64")
RIGHT["rb_right"] = (check_relative_bias, _rb)
RIGHT["rb_int32_index"] = (check_relative_bias, lambda t, s: t[:, torch.arange(
    s, 0, -1, device=t.device, dtype=torch.int32).clamp(max=t.shape[1]) - 1])
RIGHT["rb_gather"] = (check_relative_bias, lambda t, s: torch.gather(t, 1, torch.arange(
    s - 1, -1, -1, device=t.device).clamp(max=t.shape[1] - 1)[None].expand(t.shape[0], -1)))


def _rb_loop(table, s):
    out = table.new_empty(table.shape[0], s)
    for j in range(s):
        out[:, j] = table[:, min(s - j, table.shape[1]) - 1]
    return out


RIGHT["rb_loop_new_empty"] = (check_relative_bias, _rb_loop)

# 3. one zeros tensor handed out for every empty memory
_ZEROS = {}


def fa_cached_zeros(q, k, v, b):
    if k.shape[2] == 0:
        key = (tuple(q.shape), q.dtype, q.device)
        if key not in _ZEROS:
            _ZEROS[key] = torch.zeros_like(q)
        return _ZEROS[key]
    return _fa(q, k, v, b)


case("fa_cached_zeros", check_feedback_attention, fa_cached_zeros,
     r"(?i)empty memory.*(same tensor|kept|between calls)")
RIGHT["fa_right"] = (check_feedback_attention, _fa)
RIGHT["fa_q_times_zero"] = (check_feedback_attention, lambda q, k, v, b: q * 0 if k.shape[
    2] == 0 else _fa(q, k, v, b))
RIGHT["fa_new_zeros"] = (check_feedback_attention, lambda q, k, v, b: q.new_zeros(
    q.shape) if k.shape[2] == 0 else _fa(q, k, v, b))


def _sdpa(q, k, v, b):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    return torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=b[None, :, None, :].to(q.dtype))[:, :, 0]


RIGHT["fa_sdpa"] = (check_feedback_attention, _sdpa)


# 4. an output buffer kept between calls
def _buffered(compute, shape_of):
    store = {}

    def fn(*args):
        x = args[0]
        key = (tuple(shape_of(*args)), x.dtype, x.device)
        if key not in store:
            store[key] = x.new_empty(shape_of(*args))
        return store[key].copy_(compute(*args))
    return fn


case("rb_reused_buffer", check_relative_bias,
     _buffered(_rb, lambda t, s: (t.shape[0], s)), BUFFER)
case("fa_reused_buffer", check_feedback_attention,
     _buffered(_fa, lambda q, k, v, b: q.shape), BUFFER)
case("mv_reused_buffer", check_memory_vector,
     _buffered(_mv, lambda xs, w: xs.shape[1:]), BUFFER)
RIGHT["mv_right"] = (check_memory_vector, _mv)
RIGHT["mv_einsum"] = (check_memory_vector,
                      lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(0), xs))


def _mv_accumulate(xs, w):
    p = torch.softmax(w, 0)
    out = xs[0] * p[0]
    for i in range(1, len(xs)):
        out += p[i] * xs[i]
    return out


RIGHT["mv_accumulate_in_place"] = (check_memory_vector, _mv_accumulate)


# 5. the token loop clears the model's gradients
def tl_zero_grad(model, tokens):
    model.zero_grad()
    return _loop(model, tokens)


case("tl_zero_grad", check_token_loop, tl_zero_grad, r"zero_grad.*training loop")
RIGHT["tl_right"] = (check_token_loop, _loop)


# 6-7. cache_bytes: int32, a list, NumPy ints
def _cb(n_layers, d_model, n_tokens, size):
    return 2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size


case("cb_int32_prod", check_cache_bytes, lambda L, D, T, b: (
    int(np.prod([2, L, D, T, b], dtype=np.int32)), int(np.prod([2, D, T, b], dtype=np.int32))),
     r"2\*\*31.*int32.*Python int")
# a list and NumPy ints stay right answers (trials 8b, 12b, 29b, 45b; test_exercises_feedback)
RIGHT["cb_list"] = (check_cache_bytes, lambda *a: list(_cb(*a)))
RIGHT["cb_numpy_int64"] = (check_cache_bytes, lambda *a: tuple(np.int64(x) for x in _cb(*a)))
RIGHT["cb_right"] = (check_cache_bytes, _cb)
RIGHT["cb_math_prod"] = (check_cache_bytes, lambda L, D, T, b: (
    math.prod((2, L, D, T, b)), math.prod((2, D, T, b))))
RIGHT["cb_int_of_tensor"] = (check_cache_bytes, lambda L, D, T, b: tuple(
    int(torch.tensor(x, dtype=torch.int64)) for x in _cb(L, D, T, b)))
RIGHT["cb_int_of_numpy"] = (check_cache_bytes, lambda L, D, T, b: (
    int(np.prod([2, L, D, T, b])), int(np.prod([2, D, T, b]))))


# M1. a scale rounded to two decimals
def fa_scale_rounded(q, k, v, b):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) * (1 / round(math.sqrt(q.shape[-1]), 2)) + b
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_scale_rounded_2dp", check_feedback_attention, fa_scale_rounded,
     r"(?i)^(?!.*read every size).*rounded")


# M2. the memory detached at every step from step 40 on
def tl_detach_from_40(model, tokens):
    return _loop(model, tokens, detach_from=40)


case("tl_detach_from_step_40", check_token_loop, tl_detach_from_40,
     r"^(?!.*every 4 steps).*detached")


# M3. .reshape(-1, s), ambiguous for s = 0
def rb_reshape_minus_one(t, s):
    idx = torch.arange(s - 1, -1, -1, device=t.device).clamp(max=t.shape[1] - 1)
    return t[:, idx].reshape(2, s) if t.shape[0] == 2 else t[:, idx].reshape(-1, s)


case("rb_reshape_minus_one", check_relative_bias, rb_reshape_minus_one,
     r"reshape\(-1, s\).*reshape\(")


# M4. xs changed in place only when it has no gradient
def mv_in_place_without_grad(xs, w):
    p = torch.softmax(w, 0)
    if xs.requires_grad:
        return (p[:, None, None] * xs).sum(0)
    xs.mul_(p[:, None, None])
    return xs.sum(0)


case("mv_in_place_without_grad", check_memory_vector, mv_in_place_without_grad,
     r"(?i)in place|changed")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
