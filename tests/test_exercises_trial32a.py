"""Learner trial 32 (a): notebook 03. A token loop whose memory keeps only the last few
steps (a window of 6, 7, 8, max_distance or `attn_len or 16`) or is detached every 8
steps, both invisible in 7 tokens; the notebook's global `feedback` model used in place
of the loop's argument; a float32 empty memory; a float32 step in the relative bias; the
package's own feedback_attention and RelativeBias.lookup called; a clamp at 16 written
out; a scale of 2.0 written out; a cache counted for 4 layers whatever `n_layers`; and
the right answers these checks must accept."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (
    check_cache_bytes, check_feedback_attention, check_memory_vector, check_relative_bias,
    check_token_loop)
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

with torch.random.fork_rng(devices=[]):  # the notebook's cell 4 model, a global there
    torch.manual_seed(0)
    feedback = FeedbackTransformer(FeedbackConfig(
        vocab_size=32, d_model=32, n_heads=2, n_layers=2, attn_len=4))


# ---- Exercise 4: token_loop ----
def _loop(window=lambda model: None, detach=None, mix=lambda model, outs: model.mix(
        torch.stack(outs)), head=lambda model, tops: model.head(torch.stack(tops, 1)),
          empty=lambda model, tokens, x: x[:, :0]):
    """The trial's CORRECT loop with one change: `window(model)` keys kept (None: all),
    `detach` the period of a truncated backprop, `mix`, `head` and the empty memory as
    given."""
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(empty(model, tokens, x))
        keys, values = list(keys), list(values)
        tops, n = [], window(model)
        for t in range(tokens.size(1)):
            xs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                xs.append(layer(xs[-1], keys[i], values[i]))
            m = mix(model, xs)
            tops.append(xs[-1])
            if detach and t % detach == detach - 1:
                keys, values = [k.detach() for k in keys], [v.detach() for v in values]
            nk, nv = model.project_memory(m[:, None])
            keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
            values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
            if n:
                keys, values = [k[:, :, -n:] for k in keys], [v[:, :, -n:] for v in values]
        return head(model, tops)
    return token_loop


def tl_reprojected(model, tokens):
    x = model.embed(tokens)
    memory, out = x[:, :0], []
    for t in range(tokens.size(1)):
        keys, values = model.project_memory(memory)
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            xs.append(h)
        memory = torch.cat([memory, model.mix(torch.stack(xs))[:, None]], 1)
        out.append(model.head(h))
    return torch.stack(out, 1)


def _stack(outs):  # a helper of the learner's, a global function: not a model
    return torch.stack(outs)


def tl_embed_per_step(model, tokens):
    keys, values = model.project_memory(model.embed(tokens[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [model.embed(tokens[:, t])]
        for layer, k, v in zip(model.layers, keys, values):
            outs.append(layer(outs[-1], k, v))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(_stack(outs))[:, None])
        keys = [torch.cat(pair, 2) for pair in zip(keys, nk)]
        values = [torch.cat(pair, 2) for pair in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


RIGHT["tl_correct"] = (check_token_loop, _loop())
RIGHT["tl_embed_per_step"] = (check_token_loop, tl_embed_per_step)
RIGHT["tl_reprojected"] = (check_token_loop, tl_reprojected)
RIGHT["tl_new_zeros"] = (check_token_loop, _loop(empty=lambda model, tokens, x: x.new_zeros(
    tokens.size(0), 0, model.config.d_model)))
RIGHT["tl_window_of_max_distance_past_the_check"] = (check_token_loop, _loop(
    window=lambda model: 1000))
for n in (6, 7, 8):
    case(f"tl_window_{n}", check_token_loop, _loop(window=lambda model, n=n: n),
         rf"keeps only the last {n} steps' keys and values.*no window.*every earlier step")
case("tl_window_max_distance", check_token_loop,
     _loop(window=lambda model: model.config.max_distance),
     r"keeps only the last 10 steps.*max_distance.*relative bias.*not the memory")
case("tl_window_attn_len_or_16", check_token_loop,
     _loop(window=lambda model: model.config.attn_len or 16),
     r"keeps only the last 16 steps.*no window")
case("tl_detach_every_8", check_token_loop, _loop(detach=8),
     r"detached every 8 steps.*truncated.*whole sequence")
case("tl_detach_every_4", check_token_loop, _loop(detach=4),
     r"detached at step 3.*truncated.*whole sequence")
case("tl_window_4", check_token_loop, _loop(window=lambda model: 4),
     r"keeps only the last 4 steps' keys and values.*from step t = 5 on.*no window")


def tl_blocks_of_8(model, tokens):  # the reference's block_len: detach before steps 8, 16
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        if t and t % 8 == 0:
            keys, values = [k.detach() for k in keys], [v.detach() for v in values]
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat(pair, 2) for pair in zip(keys, nk)]
        values = [torch.cat(pair, 2) for pair in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_blocks_of_8", check_token_loop, tl_blocks_of_8, r"detached every 8 steps")
def tl_preallocated(model, tokens):  # the memory written into a buffer that keys were read from
    x = model.embed(tokens)
    mem, tops = x.new_zeros(tokens.size(0), tokens.size(1), x.size(-1)), []
    for t in range(tokens.size(1)):
        keys, values = model.project_memory(mem[:, :t])
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        mem[:, t] = model.mix(torch.stack(outs))
        tops.append(outs[-1])
    return model.head(torch.stack(tops, 1))


case("tl_preallocated", check_token_loop, tl_preallocated,
     r"gradient.*cannot be computed.*changed in place.*mem\[:, t\] = .*list")
case("tl_global_mix", check_token_loop,
     _loop(mix=lambda model, outs: feedback.mix(torch.stack(outs))),
     r"uses feedback\.mix: `feedback` is a global of your notebook.*not the model.*model\.mix")
case("tl_global_head", check_token_loop,
     _loop(head=lambda model, tops: feedback.head(torch.stack(tops, 1))),
     r"uses feedback\.head: `feedback` is a global of your notebook.*not the model.*model\.head")
case("tl_zeros_without_dtype", check_token_loop,
     _loop(empty=lambda model, tokens, x: torch.zeros(tokens.size(0), 0, model.config.d_model)),
     r"float64 model.*float32.*torch\.zeros.*dtype=")


# ---- Exercise 2: relative_bias ----
def rb_right(table, s):
    return table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1]


def rb_float_step(table, s):
    return table.float()[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1].to(table.dtype)


def rb_lookup(table, s):
    from labnn.feedback.layer import RelativeBias
    return RelativeBias.lookup(table, s)


def rb_clamp_16(table, s):
    return table[:, torch.arange(s, 0, -1).clamp(max=16) - 1]


def rb_one_hot(table, s):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)) - 1  # where table is
    return table @ torch.nn.functional.one_hot(d, table.size(1)).to(table.dtype).T


RIGHT["rb_right"] = (check_relative_bias, rb_right)
RIGHT["rb_one_hot"] = (check_relative_bias, rb_one_hot)
RIGHT["rb_double_inside"] = (check_relative_bias, lambda table, s: rb_right(table.double(), s).to(
    table.dtype))
case("rb_float_step", check_relative_bias, rb_float_step, r"float64 but only float32")
case("rb_lookup", check_relative_bias, rb_lookup,
     r"runs labnn\.feedback\.layer\.RelativeBias\.lookup, the reference")
case("rb_private_at", check_relative_bias,  # the unchecked step the ring cache calls
     lambda table, s: __import__("labnn.feedback.layer").feedback.layer.RelativeBias._at(
         table, torch.arange(s, 0, -1)),
     r"runs labnn\.feedback\.layer\.RelativeBias\._at, the reference")
case("rb_clamp_16", check_relative_bias, rb_clamp_16,
     r"^(?!.*clamp them).*clamped the distances at 16.*table\.size\(1\)")


# ---- Exercise 3: feedback_attention ----
def fa_right(q, k, v, bias):
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_reference(q, k, v, bias):
    from labnn.feedback.layer import feedback_attention as ref
    return ref(q, k, v, bias)


def fa_halved(q, k, v, bias):
    s = torch.einsum("bhd,bhsd->bhs", q, k) / 2.0 + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_sdpa(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    return torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=bias[:, None]).squeeze(2)


RIGHT["fa_right"] = (check_feedback_attention, fa_right)
RIGHT["fa_sdpa"] = (check_feedback_attention, fa_sdpa)
case("fa_reference", check_feedback_attention, fa_reference,
     r"runs labnn\.feedback\.layer\.feedback_attention, the reference")
case("fa_halved", check_feedback_attention, fa_halved,
     r"^(?!.*zeros_like).*sqrt\(D_h\) = 3.*sqrt\(q\.size\(-1\)\)")


# ---- Exercise 5: cache_bytes ----
def cb_four_layers(n_layers, d_model, n_tokens, bytes_per_number):
    per = n_tokens * bytes_per_number
    return 2 * 4 * d_model * per, 2 * d_model * per


RIGHT["cb_right"] = (check_cache_bytes, lambda n, d, t, b: (2 * n * d * t * b, 2 * d * t * b))
case("cb_four_layers", check_cache_bytes, cb_four_layers,
     r"^(?!.*L \+ 1).*4 layers whatever n_layers.*n_layers")

# ---- in place after use: autograd's raw error, now named (every expect_gradients)
def mv_weights_changed(xs, w):
    p = w.softmax(0)
    out = (p[:, None, None] * xs).sum(0)
    p.mul_(1.0)  # p was saved by the product above
    return out


def fa_weights_changed(q, k, v, bias):
    s = (q.unsqueeze(-2) @ k.transpose(-2, -1)).squeeze(-2) / math.sqrt(q.size(-1))
    a = (s + bias).softmax(-1)
    out = (a.unsqueeze(-2) @ v).squeeze(-2)
    a.mul_(1.0)  # a was saved by the product above
    return out


case("mv_in_place_after_use", check_memory_vector, mv_weights_changed,
     r"cannot be computed: a tensor the backward pass needs.*changed in place after use")
case("fa_in_place_after_use", check_feedback_attention, fa_weights_changed,
     r"cannot be computed: a tensor the backward pass needs.*changed in place after use")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
