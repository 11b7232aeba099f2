"""Learner trial 10b (issue 28): new slips on notebooks 03, 04 and 05."""

import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes as check_cache_bytes05
from labnn.exercises.three_memories.memory_limits import check_reach
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes, check_token_loop
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
IGNORE = -100


case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 03 memory_vector
def mv_right(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax over the layers
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_raw_logits(xs, w):  # the logits used as weights, no softmax
    return (w[:, None, None] * xs).sum(0)


def mv_linear_norm(xs, w):  # normalised by their sum instead of a softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def mv_mean(xs, w):  # weighted mean: the sum divided by L + 1 again
    return (torch.softmax(w, 0)[:, None, None] * xs).mean(0)


def mv_broadcast_last(xs, w):  # weights broadcast against D, the last axis
    return (xs * torch.softmax(w, 0)).sum(0)


def mv_log_softmax(xs, w):  # log_softmax: log-weights
    return (torch.log_softmax(w, 0)[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)sigmoid|softmax")
case("mv_raw_logits", check_memory_vector, mv_raw_logits, r"(?i)softmax|logits")
case("mv_linear_norm", check_memory_vector, mv_linear_norm, r"(?i)softmax|sum of w|w\.sum")
case("mv_mean", check_memory_vector, mv_mean, r"(?i)mean|L ?\+ ?1|sum")
case("mv_broadcast_last", check_memory_vector, mv_broadcast_last,
     r"(?i)\[:, None, None\]|layer axis|broadcast.*(L|layer)")
case("mv_log_softmax", check_memory_vector, mv_log_softmax, r"(?i)log_softmax|log")


# ---------------------------------------------------------------- 03 relative_bias
def rb_right(table, s):
    d = s - torch.arange(s, device=table.device)
    return table[:, d.clamp(max=table.size(1)) - 1]


def rb_newest_first(table, s):  # key j at distance j + 1: newest key first
    d = torch.arange(1, s + 1, device=table.device)
    return table[:, d.clamp(max=table.size(1)) - 1]


def rb_wrap(table, s):  # distances beyond max_distance wrap around (%) instead of clamping
    d = s - torch.arange(s, device=table.device)
    return table[:, (d - 1) % table.size(1)]


def rb_clamp_then_minus(table, s):  # clamps d - 1 at max_distance: index out of range
    d = s - torch.arange(s, device=table.device)
    return table[:, (d - 1).clamp(max=table.size(1))]


def rb_zero_beyond(table, s):  # far keys get no bias instead of sharing the last one
    d = s - torch.arange(s, device=table.device)
    out = table[:, (d.clamp(max=table.size(1)) - 1)].clone()
    out[:, d > table.size(1)] = 0
    return out


def rb_no_clamp(table, s):  # no clamp: far keys index past the table
    d = s - torch.arange(s, device=table.device)
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first, r"(?i)oldest|order|revers|flip")
case("rb_wrap", check_relative_bias, rb_wrap, r"(?i)clamp|wrap|%|modulo|share")
case("rb_clamp_then_minus", check_relative_bias, rb_clamp_then_minus,
     r"(?i)clamp.*(before|after|- ?1)|d - 1|max_distance - 1")
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"(?i)clamp|max_distance")
case("rb_zero_beyond", check_relative_bias, rb_zero_beyond,
     r"(?i)(beyond|past|far).*(share|last|clamp)|zero")


# ---------------------------------------------------------------- 03 feedback_attention
def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_scale_width(q, k, v, bias):  # scaled by sqrt(H * D_h), the model width
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(1) * q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after(q, k, v, bias):  # bias added to the probabilities after the softmax
    if k.size(2) == 0:
        return torch.zeros_like(q)
    p = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))).softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", p, v)


def fa_empty_q(q, k, v, bias):  # empty memory: passes the query through
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)


def fa_scale_dh(q, k, v, bias):  # divides by D_h, not its square root
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_unsqueeze(q, k, v, bias):  # bias[:, None]: [H, 1, S] against [B, H, S]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_scale_width", check_feedback_attention, fa_scale_width,
     r"(?i)sqrt.*(D_h|head)|head width|scal")
case("fa_bias_after", check_feedback_attention, fa_bias_after,
     r"(?i)bias.*(before|after|inside|score)")
case("fa_empty_q", check_feedback_attention, fa_empty_q, r"(?i)zero|empty")
case("fa_bias_unsqueeze", check_feedback_attention, fa_bias_unsqueeze,
     r"(?i)bias.*(\[H, S\]|broadcast|\[None\]|batch)")
case("fa_scale_dh", check_feedback_attention, fa_scale_dh, r"(?i)sqrt|square root")


# ---------------------------------------------------------------- 03 token_loop
def _loop(model, tokens, mem="mix", head_on="top", kv_layer=None, cat_dim=2, stack_dim=0):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(x.size(1)):
        h = x[:, t]
        hs = [h]
        for i, layer in enumerate(model.layers):
            j = i if kv_layer is None else kv_layer
            h = layer(h, keys[j], values[j])
            hs.append(h)
        m = model.mix(torch.stack(hs, dim=stack_dim)) if mem == "mix" else h
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], dim=cat_dim) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=cat_dim) for a, b in zip(values, nv))
        outs.append(h if head_on == "top" else m)
    return model.head(torch.stack(outs, dim=1))


RIGHT["token_loop"] = (check_token_loop, _loop)
case("tl_memory_top", check_token_loop, lambda m, t: _loop(m, t, mem="top"),
     r"(?i)mix|top layer")
case("tl_head_on_mix", check_token_loop, lambda m, t: _loop(m, t, head_on="mix"),
     r"(?i)head.*(top|last layer)|memory vector.*head|mix")
case("tl_layer0_kv", check_token_loop, lambda m, t: _loop(m, t, kv_layer=0),
     r"(?i)(own|its|each) layer|keys\[0\]|layer 0|first layer")
case("tl_cat_dim1", check_token_loop, lambda m, t: _loop(m, t, cat_dim=1),
     r"(?i)dim ?= ?2|key axis|along.*keys")
case("tl_stack_dim1", check_token_loop, lambda m, t: _loop(m, t, stack_dim=1),
     r"(?i)\[L ?\+ ?1, B, D\]|stack.*dim ?= ?0|dim=0|layer axis")


# ---------------------------------------------------------------- 03 cache_bytes
def cb_right(n_layers, d_model, n_tokens, b):
    return 2 * n_layers * d_model * n_tokens * b, 2 * d_model * n_tokens * b


RIGHT["cache_bytes"] = (check_cache_bytes, cb_right)
case("cb_count_memory", check_cache_bytes,
     lambda L, D, n, b: (2 * L * D * n * b, 3 * D * n * b),
     r"(?i)memory vector|3 ?D|only.*keys and values")
case("cb_keys_only", check_cache_bytes, lambda L, D, n, b: (L * D * n * b, D * n * b),
     r"(?i)value|factor (of )?2|2 ?\*|twice")
case("cb_swapped", check_cache_bytes, lambda L, D, n, b: cb_right(L, D, n, b)[::-1],
     r"(?i)order|swap|\(transformer.*feedback\)|transformer first")
case("cb_per_token", check_cache_bytes, lambda L, D, n, b: cb_right(L, D, 1, b),
     r"(?i)n_tokens|per token|tokens")
case("cb_bits", check_cache_bytes, lambda L, D, n, b: cb_right(L, D, n, 8 * b),
     r"(?i)bits|8 ?\*|bytes_per_number")
case("cb_fb_per_layer", check_cache_bytes, lambda L, D, n, b: (2 * L * D * n * b,) * 2,
     r"(?i)shared|once|one key.*per token|not per layer|no L")


# ---------------------------------------------------------------- 04 shared_kv
def sk_right(m, norm, kv, n_heads):
    B, D = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return k.reshape(B, n_heads, D // n_heads), v.reshape(B, n_heads, D // n_heads)


def sk_no_norm(m, norm, kv, n_heads):  # forgets the LayerNorm
    return sk_right(m, torch.nn.Identity(), kv, n_heads)


def sk_interleaved(m, norm, kv, n_heads):  # even outputs keys, odd outputs values
    B, D = m.shape
    y = kv(norm(m))
    k, v = y[:, 0::2], y[:, 1::2]
    return k.reshape(B, n_heads, -1), v.reshape(B, n_heads, -1)


def sk_swapped(m, norm, kv, n_heads):  # values first
    k, v = sk_right(m, norm, kv, n_heads)
    return v, k


def sk_heads_order(m, norm, kv, n_heads):  # splits D as [D_h, H], then transposes
    B, D = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return (k.reshape(B, D // n_heads, n_heads).transpose(1, 2),
            v.reshape(B, D // n_heads, n_heads).transpose(1, 2))


def sk_norm_after(m, norm, kv, n_heads):  # normalises the keys and values instead of m
    B, D = m.shape
    k, v = kv(m).chunk(2, dim=-1)
    k, v = norm(k), norm(v)
    return k.reshape(B, n_heads, D // n_heads), v.reshape(B, n_heads, D // n_heads)


def sk_shape_dh_h(m, norm, kv, n_heads):  # reshape(B, D_h, H): the axes swapped
    B, D = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return k.reshape(B, D // n_heads, n_heads), v.reshape(B, D // n_heads, n_heads)


RIGHT["shared_kv"] = (check_shared_kv, sk_right)
case("sk_no_norm", check_shared_kv, sk_no_norm, r"(?i)norm")
case("sk_interleaved", check_shared_kv, sk_interleaved,
     r"(?i)first D|interleav|halves|chunk|0::2")
case("sk_swapped", check_shared_kv, sk_swapped, r"(?i)swap|first D.*key|keys.*values")
case("sk_heads_order", check_shared_kv, sk_heads_order,
     r"(?i)\[B, H, D_h\]|head.*(order|split|contiguous)|transpose")
case("sk_norm_after", check_shared_kv, sk_norm_after,
     r"(?i)norm.*(before|m\b|input|memory)|after the projection")
case("sk_shape_dh_h", check_shared_kv, sk_shape_dh_h,
     r"(?i)\[B, H, D_h\]|heads? (axis )?(first|second)|n_heads")


# ---------------------------------------------------------------- 04 Square
class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SqNoChain(torch.autograd.Function):  # forgets grad_output: returns dy/dx alone
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqSavesY(torch.autograd.Function):  # saves the output and uses 2 y
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g


class SqNo2(torch.autograd.Function):  # forgets the factor 2
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x * g


class SqTuple(torch.autograd.Function):  # x = ctx.saved_tensors: a tuple, not unpacked
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x = ctx.saved_tensors
        return 2 * x * g


class SqInplace(torch.autograd.Function):  # squares x in place in forward
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


RIGHT["square"] = (check_square, SqRight)
case("sq_no_chain", check_square, SqNoChain, r"(?i)grad_output|chain rule")
case("sq_saves_y", check_square, SqSavesY, r"(?i)output|y\b|save.*x|2 ?y")
case("sq_no_2", check_square, SqNo2, r"(?i)factor (of )?2|2 ?x|2 \*")
case("sq_tuple", check_square, SqTuple, r"(?i)saved_tensors.*tuple|unpack|\(x,\)|x, ?=")
case("sq_inplace", check_square, SqInplace, r"(?i)in[ -]place|mul_|changes? (its |the )?input")


# ---------------------------------------------------------------- 04 value_gradients
def vg_right(read_grads):
    T = len(read_grads)
    out = read_grads[-1].new_zeros(T, read_grads[-1].size(-1))
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_own_read(read_grads):  # only the read of its own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_last_read(read_grads):  # only the last read (the whole stack)
    return read_grads[-1].clone()


def vg_inplace(read_grads):  # accumulates into the last read's tensor
    out = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        out[: t + 1] += g
    return out


def vg_mean(read_grads):  # averages the reads of each value instead of summing
    T = len(read_grads)
    out = vg_right(read_grads)
    return out / torch.arange(T, 0, -1, dtype=out.dtype)[:, None]


def vg_float32(read_grads):  # a float32 accumulator, whatever the gradients' dtype
    T, Fd = len(read_grads), read_grads[-1].size(-1)
    out = torch.zeros(T, Fd)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_right_aligned(read_grads):  # each read added to the LAST t + 1 slots
    T = len(read_grads)
    out = read_grads[-1].new_zeros(T, read_grads[-1].size(-1))
    for t, g in enumerate(read_grads):
        out[T - t - 1:] += g
    return out


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read", check_value_gradients, vg_own_read,
     r"(?i)own (step|read)|every later|later reads|t ?>=? ?j")
case("vg_last_read", check_value_gradients, vg_last_read,
     r"(?i)last read|only.*read|every read|all.*reads")
case("vg_inplace", check_value_gradients, vg_inplace,
     r"(?i)read_grads.*(chang|modif)|in[ -]place|unchanged")
case("vg_mean", check_value_gradients, vg_mean, r"(?i)mean|average|sum")
case("vg_float32", check_value_gradients, vg_float32, r"(?i)dtype|float32|float64")
case("vg_right_aligned", check_value_gradients, vg_right_aligned,
     r"(?i)slots? 0\.\.t|first t ?\+ ?1|\[: ?t ?\+ ?1\]|align")


# ---------------------------------------------------------------- 04 Append
class ApRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


def _append(back):
    class Ap(torch.autograd.Function):
        @staticmethod
        def forward(ctx, top, value, buffer):
            return ApRight.forward(ctx, top, value, buffer)

        @staticmethod
        def backward(ctx, grad):
            return back(ctx, grad)
    return Ap


class ApCat(torch.autograd.Function):  # copies: torch.cat instead of a view of the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], dim=1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApNoData(torch.autograd.Function):  # writes through buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


RIGHT["append"] = (check_append, ApRight)
case("ap_top_full", check_append, _append(lambda c, g: (g, g[:, c.n], None)),
     r"(?i)first n|\[:, ?:n\]|top.*(n slots|prefix)")
case("ap_value_slot0", check_append, _append(lambda c, g: (g[:, : c.n], g[:, 0], None)),
     r"(?i)last slot|slot n|new slot|\[:, ?n\]")
case("ap_two_grads", check_append, _append(lambda c, g: (g[:, : c.n], g[:, c.n])),
     r"(?i)three|None.*buffer|buffer.*None|one (gradient )?per input")
case("ap_value_keepdim", check_append,
     _append(lambda c, g: (g[:, : c.n], g[:, c.n: c.n + 1], None)),
     r"(?i)\[B, F\]|keep.*dim|n ?: ?n ?\+ ?1|value'?s? shape")
case("ap_cat", check_append, ApCat, r"(?i)view|copy|cat")
case("ap_no_data", check_append, ApNoData, r"(?i)\.data|version")


# ---------------------------------------------------------------- 04 weight_gradient
def wg_right(xs, gs):
    return gs.reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, lambda xs, gs: wg_right(xs, gs).T,
     r"(?i)transpos|\[D_out, D_in\]|G\^?T ?X|gs.*T.*xs")
case("wg_last_step", check_weight_gradient, lambda xs, gs: gs[-1].T @ xs[-1],
     r"(?i)every step|all steps|last step|sum over (the )?steps")
case("wg_mean", check_weight_gradient, lambda xs, gs: wg_right(xs, gs) / xs.size(0),
     r"(?i)mean|average|divid|sum")
case("wg_mismatched_flatten", check_weight_gradient,
     lambda xs, gs: gs.reshape(-1, gs.size(-1)).T
     @ xs.transpose(0, 1).reshape(-1, xs.size(-1)),
     r"(?i)same order|pair|transpose|match|row.*order")
case("wg_first_batch", check_weight_gradient, lambda xs, gs: gs[:, 0].T @ xs[:, 0],
     r"(?i)batch")
case("wg_sum_then_outer", check_weight_gradient,
     lambda xs, gs: gs.sum((0, 1))[:, None] @ xs.sum((0, 1))[None],
     r"(?i)sum(s|med)? (first|before)|product of (the )?sums|pair")


# ---------------------------------------------------------------- 05 reach
def re_right(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position,
            "feedback": math.inf}[memory]


def _reach(**over):
    def reach(memory, n_layers, span, position=0):
        f = over.get(memory)
        return f(n_layers, span, position) if f else re_right(memory, n_layers, span, position)
    return reach


RIGHT["reach"] = (check_reach, re_right)
case("re_window_plus1", check_reach, _reach(window=lambda L, W, p: L * W + 1),
     r"(?i)itself|\+ ?1|token itself")
case("re_xl_no_position", check_reach, _reach(XL=lambda L, M, p: L * M),
     r"(?i)position")
case("re_xl_last_position", check_reach, _reach(XL=lambda L, M, p: L * M + M - 1),
     r"(?i)position")
case("re_feedback_window", check_reach, _reach(feedback=lambda L, W, p: L * W),
     r"(?i)inf|unbounded")
case("re_xl_one_layer", check_reach, _reach(XL=lambda L, M, p: M + p),
     r"(?i)layer|n_layers|L ?\*|L ?·")
case("re_window_one_layer", check_reach, _reach(window=lambda L, W, p: W),
     r"(?i)layer|n_layers|L ?\*|L ?·")


# ---------------------------------------------------------------- 05 make_recall
def mr_right(filler, values, positions):
    N, T = filler.shape
    x = filler.clone()
    x[torch.arange(N, device=filler.device), positions] = values
    after = torch.arange(T, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


def mr_inplace(filler, values, positions):  # writes into the filler itself
    x, y = mr_right(filler, values, positions)
    filler.copy_(x)
    return filler, y


def mr_label_at_p(filler, values, positions):  # labels from p on, not from p + 1
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None, :] >= positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


def mr_ignore_minus1(filler, values, positions):  # -1 as "ignore"
    x, y = mr_right(filler, values, positions)
    return x, y.masked_fill(y == IGNORE, -1)


def mr_float_y(filler, values, positions):  # labels built with torch.full(..., -100.0)
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None, :] > positions[:, None]
    y = torch.full(filler.shape, -100.0)
    y[after] = values[:, None].expand_as(y)[after].float()
    return x, y


def mr_x_filled_after(filler, values, positions):  # the value copied into x after p too
    x, y = mr_right(filler, values, positions)
    return torch.where(y != IGNORE, y, x), y


def mr_value_after(filler, values, positions):  # value written at p + 1 (one late)
    _, y = mr_right(filler, values, positions)
    x = filler.clone()
    N, T = filler.shape
    ok = positions + 1 < T
    x[torch.arange(N, device=filler.device)[ok], positions[ok] + 1] = values[ok]
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_inplace", check_make_recall, mr_inplace, r"(?i)filler.*(chang|modif)|clone|copy")
case("mr_label_at_p", check_make_recall, mr_label_at_p,
     r"(?i)after|\+ ?1|own position|>=")
case("mr_ignore_minus1", check_make_recall, mr_ignore_minus1, r"(?i)-100|IGNORE")
case("mr_float_y", check_make_recall, mr_float_y, r"(?i)dtype|long|int|float")
case("mr_value_after", check_make_recall, mr_value_after,
     r"(?i)positions\[n\]( |,|:|$)|one (position )?late|p ?\+ ?1|shift")
case("mr_x_filled_after", check_make_recall, mr_x_filled_after,
     r"(?i)x.*(filler|once|only at|one position)")


# ---------------------------------------------------------------- 05 accuracy_by_distance
def ad_right(logits, y, max_distance, shift=0, empty=float("nan"), integer=False):
    N, T = y.shape
    labelled = y != IGNORE
    p = labelled.int().argmax(1) - 1 + shift  # first labelled position is p + 1
    d = torch.arange(T, device=y.device)[None, :] - p[:, None]  # where y is (a GPU)
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        n = int(sel.sum())
        if n == 0:
            out[k - 1] = empty
        elif integer:
            out[k - 1] = int(correct[sel].sum()) // n
        else:
            out[k - 1] = correct[sel].float().mean()
    return out


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_d_from_first", check_accuracy_by_distance,
     lambda lg, y, m: ad_right(lg, y, m, shift=1),
     r"(?i)p ?\+ ?1|first labelled|distance.*(one|1)")
case("ad_zero_not_nan", check_accuracy_by_distance,
     lambda lg, y, m: ad_right(lg, y, m, empty=0.0), r"(?i)nan")
case("ad_misses_last", check_accuracy_by_distance,
     lambda lg, y, m: _ad_short(lg, y, m),
     r"(?i)last (distance|entry)|range\(1, ?max_distance\)|max_distance ?\+ ?1|skipp|miss")
case("ad_int_division", check_accuracy_by_distance,
     lambda lg, y, m: ad_right(lg, y, m, integer=True),
     r"(?i)integer|//|float|division")


def ad_first_row_p(logits, y, max_distance):  # p of row 0 used for every row
    y0 = y[:1].expand_as(y)
    labelled = y != IGNORE
    p = (y0 != IGNORE).int().argmax(1) - 1
    d = torch.arange(y.size(1))[None, :] - p[:, None]
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        if sel.any():
            out[k - 1] = correct[sel].float().mean()
    return out


def ad_length_T(logits, y, max_distance):  # one entry per distance up to T - 1
    return ad_right(logits, y, y.size(1) - 1)


case("ad_first_row_p", check_accuracy_by_distance, ad_first_row_p,
     r"(?i)(each|every|its own) row|per row|row 0|first row")
case("ad_length_T", check_accuracy_by_distance, ad_length_T,
     r"(?i)max_distance (entries|long|values)|T ?- ?1|one entry per distance")


def _ad_short(logits, y, max_distance):  # range(1, max_distance): the last distance left NaN
    out = ad_right(logits, y, max_distance)
    out[-1] = float("nan")
    return out


# ---------------------------------------------------------------- 05 cache_bytes
def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return [tuple(p) for p in cache]


def c5_right(cache):
    return sum(t.numel() * t.element_size() for p in _pairs(cache) for t in p)


def c5_storage(cache):  # the bytes of the storage behind each tensor, spare room included
    return sum(t.untyped_storage().nbytes() for p in _pairs(cache) for t in p)


def c5_keys_only(cache):
    return sum(k.numel() * k.element_size() for k, _ in _pairs(cache))


def c5_rel_keys(cache):  # XL's relative-key tables counted too
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(r.numel() * r.element_size() for r in cache.rel_keys if r is not None)
    return c5_right(cache) + extra


def c5_first_layer(cache):  # only the first layer's pair
    k, v = _pairs(cache)[0]
    return k.numel() * k.element_size() + v.numel() * v.element_size()


def c5_per_sequence(cache):  # bytes per sequence: divides by the batch
    return sum(t.numel() * t.element_size() // t.size(0) for p in _pairs(cache) for t in p)


RIGHT["cache_bytes05"] = (check_cache_bytes05, c5_right)
case("c5_storage", check_cache_bytes05, c5_storage,
     r"(?i)storage|spare|capacity|window|room")
case("c5_keys_only", check_cache_bytes05, c5_keys_only, r"(?i)value")
case("c5_rel_keys", check_cache_bytes05, c5_rel_keys, r"(?i)rel_keys|relative")
case("c5_first_layer", check_cache_bytes05, c5_first_layer, r"(?i)every layer|each layer|layers")
case("c5_per_sequence", check_cache_bytes05, c5_per_sequence, r"(?i)batch|\[B\]")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
