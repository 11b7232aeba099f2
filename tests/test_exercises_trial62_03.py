"""Trial 62, notebook 03 (a learner's trial): a `cache_bytes` that kept its result in a
dict keyed on n_tokens alone passed Exercise 5 (every argument differed across the check's
three calls), and an attention that transposed the bias whenever it was square passed
Exercise 3 (the check never had H == S). Misnamed: a relative bias right only for s <= 2
and for s > max_distance (blamed on something kept between calls: the check's own s were
2 and 7 only), a token loop that stopped one token early, and one whose logits came one
step late (both "check what later steps read" or "check the embedding"), a float32 output
buffer on a float64 model ("the inputs' dtype": the inputs are token ids), and an
attention reshaped to [2, 2, 6] (labelled "[B=2, B=2, S=6]").
"""
import functools
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_relative_bias, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# Exercise 5: a result kept between calls, keyed on some of the arguments
def _memo(*keep):
    kept = {}

    def cache_bytes(n_layers, d_model, n_tokens, bytes_per_number):
        args = (n_layers, d_model, n_tokens, bytes_per_number)
        key = tuple(args[i] for i in keep)
        if key not in kept:
            kept[key] = (2 * n_layers * d_model * n_tokens * bytes_per_number,
                         2 * d_model * n_tokens * bytes_per_number)
        return kept[key]
    return cache_bytes


case("cache_bytes_kept_per_n_tokens", check_cache_bytes, _memo(2),
     r"result of the earlier call cache_bytes\(3, 128, 256, 4\), with the same n_tokens: a "
     r"result kept between calls")
case("cache_bytes_kept_per_bytes", check_cache_bytes, _memo(3),
     r"result of the earlier call cache_bytes\(8, 512, 100, 2\), with the same "
     r"bytes_per_number: a result kept between calls")
case("cache_bytes_kept_per_layers_and_tokens", check_cache_bytes, _memo(0, 2),
     r"result of the earlier call cache_bytes\(3, 128, 256, 4\), with the same n_layers and "
     r"n_tokens: a result kept between calls")
RIGHT["cache_bytes_kept_per_all_arguments"] = (check_cache_bytes, _memo(0, 1, 2, 3))


@functools.lru_cache(maxsize=None)
def _cache_bytes_lru(n_layers, d_model, n_tokens, bytes_per_number):
    per_token = 2 * d_model * bytes_per_number
    return n_layers * per_token * n_tokens, per_token * n_tokens


RIGHT["cache_bytes_lru_cache"] = (check_cache_bytes, _cache_bytes_lru)
RIGHT["cache_bytes_prod"] = (check_cache_bytes, lambda n_layers, d_model, n_tokens, size: (
    math.prod([2, n_layers, d_model, n_tokens, size]), math.prod([2, d_model, n_tokens, size])))


# Exercise 3: the bias transposed when it is square; a reshape with a size written wrong
def _attention(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("feedback_attention_bias_transposed_when_square", check_feedback_attention,
     lambda q, k, v, bias: _attention(q, k, v, bias.T if bias.size(0) == bias.size(1) else bias),
     r"H = S = 2.*bias\.T.*\[H, S\]")
case("feedback_attention_reshaped_2_heads", check_feedback_attention,
     lambda q, k, v, bias: _attention(q, k, v, bias).reshape(q.size(0), 2, -1),
     r"^(?!.*B=2, B=2).*has shape \[2, 2, 6\], expected \[B=2, H=3, D_h=4\].*same 24 numbers")
RIGHT["feedback_attention_einsum"] = (check_feedback_attention, _attention)
RIGHT["feedback_attention_sdpa"] = (check_feedback_attention, lambda q, k, v, bias: (
    torch.zeros_like(q) if k.size(2) == 0 else F.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=bias[:, None, :])[:, :, 0]))
RIGHT["feedback_attention_matmul"] = (check_feedback_attention, lambda q, k, v, bias: (
    q.new_zeros(q.shape) if k.size(2) == 0 else ((q[:, :, None] @ k.transpose(-1, -2))[:, :, 0]
                                                 / q.size(-1) ** 0.5 + bias).softmax(-1)[
        :, :, None].matmul(v).squeeze(2)))


# Exercise 2: keys in the wrong order for 3 <= s <= max_distance only
def _rolled(table, s):
    m = table.size(1)
    if s <= m:
        return table[:, :s].roll(1, 1)  # reversed only for s <= 2
    return torch.cat([table[:, -1:].expand(-1, s - m), table.flip(1)], 1)


def _swapped_pairs(table, s):
    d = torch.arange(1, s + 1, device=table.device).clamp(max=table.size(1))
    if s >= 2:
        d[-2:] = d[-2:].flip(0)  # only the last two keys reversed
    d = d.flip(0) if s > table.size(1) else d
    return table[:, d - 1]


case("relative_bias_rolled_for_small_s", check_relative_bias, _rolled,
     r"^(?!.*kept between calls).*relative_bias\(table, 4\)")
case("relative_bias_last_two_swapped", check_relative_bias, _swapped_pairs,
     r"^(?!.*kept between calls).*relative_bias\(table, 4\)")
RIGHT["relative_bias_take_along_dim"] = (check_relative_bias, lambda table, s: torch.take_along_dim(
    table, torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)).sub(1).expand(
        table.size(0), -1), dim=1))
RIGHT["relative_bias_index"] = (check_relative_bias, lambda table, s: table[
    :, torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)) - 1])


# Exercise 4: a loop one token short, logits one step late, a float32 buffer
def _loop(model, tokens, buffer=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    out = torch.zeros(*tokens.shape, model.config.vocab_size, device=x.device,
                      dtype=None if buffer == "float32" else x.dtype) if buffer else None
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        if buffer:
            out[:, t] = model.head(outs[-1])
        tops.append(outs[-1])
        k, v = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat(p, 2) for p in zip(keys, k)]
        values = [torch.cat(p, 2) for p in zip(values, v)]
    return out if buffer else model.head(torch.stack(tops, 1))


def _one_token_short(model, tokens):
    out = _loop(model, tokens[:, :-1])  # range(T - 1): the last logits copied
    return torch.cat([out, out[:, -1:]], 1)


def _one_step_late(model, tokens):
    out = _loop(model, tokens)
    return torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], 1)


case("token_loop_one_token_short", check_token_loop, _one_token_short,
     r"last step, t = 6, repeats step t = 5.*range\(T - 1\)")
case("token_loop_logits_one_step_late", check_token_loop, _one_step_late,
     r"one step late.*step t - 1")
case("token_loop_float32_buffer", check_token_loop, lambda m, t: _loop(m, t, "float32"),
     r"^(?!.*inputs' dtype).*float64 model.*float32.*the model's dtype")
RIGHT["token_loop_stacked"] = (check_token_loop, _loop)
RIGHT["token_loop_buffer"] = (check_token_loop, lambda m, t: _loop(m, t, buffer=True))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
