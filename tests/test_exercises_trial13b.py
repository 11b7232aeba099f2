"""Learner trial 13b (issue 28): typical slips on notebooks 03, 04 and 05."""

import math

import torch
import torch.nn.functional as F
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
from labnn.xl import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100

# ---------------------------------------------------------------- 03: memory_vector


def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)


def mv_sigmoid(xs, w):  # "learned gates": sigmoid, weights need not sum to one
    return (w.sigmoid()[:, None, None] * xs).sum(0)


def mv_unweighted(xs, w):  # a plain mean of the layers, w ignored
    return xs.mean(0)


def mv_no_embedding(xs, w):  # mixes only the layer outputs, xs[1:]
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


def mv_matmul(xs, w):  # "weights times layers" as a matmul
    return w.softmax(0) @ xs


def mv_log_softmax(xs, w):  # log_softmax instead of softmax
    return (w.log_softmax(0)[:, None, None] * xs).sum(0)


case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"softmax|sum to (one|1)")
case("mv_unweighted", check_memory_vector, mv_unweighted, r"\bw\b|weight|softmax")
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"embedding|xs\[0\]")
case("mv_matmul", check_memory_vector, mv_matmul, r"layer axis|dim(=| )0|sum over|\[L\+1")
case("mv_log_softmax", check_memory_vector, mv_log_softmax, r"log_softmax|softmax")

def mv_linear_norm(xs, w):  # weights normalized by their sum, not a softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def mv_inplace(xs, w):  # scales the caller's xs in place
    return xs.mul_(w.softmax(0)[:, None, None]).sum(0)


case("mv_linear_norm", check_memory_vector, mv_linear_norm, r"softmax|w ?/ ?w\.sum")
case("mv_inplace", check_memory_vector, mv_inplace, r"in place|xs.*(chang|modif)")

def mv_mean(xs, w):  # weighted, then a mean over the layers instead of a sum
    return (w.softmax(0)[:, None, None] * xs).mean(0)


case("mv_mean", check_memory_vector, mv_mean, r"\bsum\b|mean|L ?\+ ?1 times")

# ---------------------------------------------------------------- 03: relative_bias


def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)


def rb_newest_first(table, s):  # distances 1..s: keys read newest first
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_column_d(table, s):  # column d instead of d - 1 (clamped to stay in range)
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]


def rb_no_clamp(table, s):  # distances beyond max_distance not clamped
    d = torch.arange(s, 0, -1)
    return table[:, d - 1]


def rb_slice_flip(table, s):  # shortcut: the first s columns, reversed (no sharing)
    return table[:, :s].flip(-1)


def rb_float_arange(table, s):  # a float step makes a float tensor
    d = torch.arange(s, 0, -1.0).clamp(max=table.size(1))
    return table[:, d - 1]


case("rb_newest_first", check_relative_bias, rb_newest_first, r"oldest|order|revers|newest")
case("rb_column_d", check_relative_bias, rb_column_d, r"d ?- ?1|column d\b|off by one")
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"clamp|max_distance")
case("rb_slice_flip", check_relative_bias, rb_slice_flip, r"clamp|max_distance|beyond|share")
case("rb_float_arange", check_relative_bias, rb_float_arange, r"[Ll]ong|integer|float|dtype")

def rb_clamp_index(table, s):  # clamps the index d - 1 to max_distance: one past the end
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1).clamp(max=table.size(1))]


def rb_transposed(table, s):  # table.T[d - 1]: [s, H]
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table.T[d - 1]


case("rb_clamp_index", check_relative_bias, rb_clamp_index, r"clamp.*(max_distance ?- ?1|d\b)|"
     r"max=table\.size\(1\) ?- ?1|before .*- ?1")
case("rb_transposed", check_relative_bias, rb_transposed, r"\[H, s\]|\[H, S\]|transpos")

# ---------------------------------------------------------------- 03: feedback_attention


def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)


def fa_no_scale(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_scaled(q, k, v, bias):  # the bias is divided by sqrt(D_h) too
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_scale_by_d(q, k, v, bias):  # divides by D_h, not its square root
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_empty_default_dtype(q, k, v, bias):  # torch.zeros(q.shape): float32 on the CPU
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return fa_right(q, k, v, bias)


case("fa_no_scale", check_feedback_attention, fa_no_scale, r"sqrt|scal")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled, r"bias.*(scal|sqrt|divid)|"
     r"(scal|sqrt|divid).*bias")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"bias.*(before|after|inside)|softmax.*bias")
case("fa_scale_by_d", check_feedback_attention, fa_scale_by_d, r"sqrt|square root")
case("fa_empty_default_dtype", check_feedback_attention, fa_empty_default_dtype,
     r"dtype|float64|device|zeros_like")

def fa_bias_per_batch(q, k, v, bias):  # bias[:, None]: [H, 1, S] lines H up with the batch
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_keeps_query_axis(q, k, v, bias):  # matmul with q[:, :, None], not squeezed back
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = q[:, :, None] @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + bias[:, None]
    return s.softmax(-1) @ v


case("fa_bias_per_batch", check_feedback_attention, fa_bias_per_batch,
     r"bias.*(\[H, S\]|broadcast|batch|head)")
case("fa_keeps_query_axis", check_feedback_attention, fa_keeps_query_axis,
     r"\[B, H, D_h\]|squeeze|query axis|extra axis")

def fa_softmax_float32(q, k, v, bias):  # softmax in float32 "for stability"
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1, dtype=torch.float32).to(v.dtype), v)


# Trial 13 counted it a borderline ACCEPTED; under the one dtype rule (float64 inputs give a
# float64-accurate result, as in every checker) its float32 step is named.
case("fa_softmax_float32", check_feedback_attention, fa_softmax_float32,
     r"float32-accurate|float32 step")

# ---------------------------------------------------------------- 03: token_loop


def _loop(model, tokens, own_kv=True, grow=True, mix=True, head_on="tops"):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops, mems = [], []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if own_kv else 0
            outs.append(layer(outs[-1], keys[j], values[j]))
        m = model.mix(torch.stack(outs)) if mix else outs[-1]
        tops.append(outs[-1])
        mems.append(m)
        nk, nv = model.project_memory(m[:, None])
        if grow:
            keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
            values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
        else:
            keys, values = nk, nv
    return model.head(torch.stack(tops if head_on == "tops" else mems, 1))


RIGHT["token_loop"] = (check_token_loop, _loop)


def tl_head_on_memory(model, tokens):  # predicts from the memory vector, not the top
    return _loop(model, tokens, head_on="mems")


def tl_last_memory_only(model, tokens):  # keys/values replaced, not appended
    return _loop(model, tokens, grow=False)


def tl_layer0_kv(model, tokens):  # every layer reads layer 0's keys and values
    return _loop(model, tokens, own_kv=False)


def tl_no_mix(model, tokens):  # memory = top layer, no mix
    return _loop(model, tokens, mix=False)


case("tl_head_on_memory", check_token_loop, tl_head_on_memory, r"top|last layer|memory vector")
case("tl_last_memory_only", check_token_loop, tl_last_memory_only,
     r"append|all (the )?(earlier|previous|past)|torch\.cat|only the last")
case("tl_layer0_kv", check_token_loop, tl_layer0_kv, r"own|each layer|its layer|first layer")
case("tl_no_mix", check_token_loop, tl_no_mix, r"mix")

def tl_stack_dim1(model, tokens):  # layer outputs stacked on dim 1: [B, L+1, D]
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs, 1))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
    return model.head(torch.stack(tops, 1))


case("tl_stack_dim1", check_token_loop, tl_stack_dim1,
     r"stack.*(dim(=| )0|\[L ?\+ ?1, B, D\])|layer axis")

def tl_seed_embedding(model, tokens):  # starts from the first embedding as memory
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :1])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
    return model.head(torch.stack(tops, 1))


case("tl_seed_embedding", check_token_loop, tl_seed_embedding,
     r"empty memory|x\[:, :0\]|first step")

# ---------------------------------------------------------------- 03: cache_bytes


def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 2 * d_model * per


RIGHT["cache_bytes03"] = (check_cache_bytes, cb_right)


def cb_no_layers(n_layers, d_model, n_tokens, bytes_per_number):  # transformer: one layer
    return 2 * d_model * n_tokens * bytes_per_number, 2 * d_model * n_tokens * bytes_per_number


def cb_memory_too(n_layers, d_model, n_tokens, bytes_per_number):  # counts memory: 3D
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 3 * d_model * per


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values
    per = n_tokens * bytes_per_number
    return n_layers * d_model * per, d_model * per


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    t, f = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return f, t


def cb_ratio(n_layers, d_model, n_tokens, bytes_per_number):  # feedback as transformer / L
    t, _ = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return t, t / n_layers


case("cb_no_layers", check_cache_bytes, cb_no_layers, r"per layer|n_layers|layers")
case("cb_memory_too", check_cache_bytes, cb_memory_too, r"memory|3 ?D|three")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"value")
case("cb_swapped", check_cache_bytes, cb_swapped, r"order|swap|transformer.*first")
case("cb_ratio", check_cache_bytes, cb_ratio, r"\bint|float")

# ---------------------------------------------------------------- 04: shared_kv


def skv_right(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


RIGHT["shared_kv"] = (check_shared_kv, skv_right)


def skv_no_norm(m, norm, kv, n_heads):
    out = kv(m).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def skv_no_bias(m, norm, kv, n_heads):  # F.linear with the weight only
    out = F.linear(norm(m), kv.weight).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def skv_heads_first(m, norm, kv, n_heads):  # [B, H, 2, D_h]: k/v interleaved per head
    out = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return out[:, :, 0], out[:, :, 1]


def skv_swapped(m, norm, kv, n_heads):  # values first
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 1], out[:, 0]


def skv_head_minor(m, norm, kv, n_heads):  # each head strided, [B, D_h, H] then transposed
    k, v = kv(norm(m)).chunk(2, dim=-1)
    B = m.size(0)
    return (k.view(B, -1, n_heads).transpose(1, 2), v.view(B, -1, n_heads).transpose(1, 2))


case("skv_no_norm", check_shared_kv, skv_no_norm, r"norm")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")
case("skv_heads_first", check_shared_kv, skv_heads_first,
     r"first D|keys.*(first|then)|interleav|\[B, 2, H")
case("skv_swapped", check_shared_kv, skv_swapped, r"swap|first D.*key|keys.*first")
case("skv_head_minor", check_shared_kv, skv_head_minor, r"head-major|contiguous|heads?")

def skv_chunk_batch(m, norm, kv, n_heads):  # chunk on dim 0: splits the batch
    k, v = kv(norm(m)).chunk(2, dim=0)
    return (k.reshape(k.size(0), n_heads, -1), v.reshape(v.size(0), n_heads, -1))


case("skv_chunk_batch", check_shared_kv, skv_chunk_batch, r"batch|dim(=| )(0|-1|1)|last axis")

def skv_norm_each_half(m, norm, kv, n_heads):  # projects first, then norms k and v
    D = m.size(-1)
    out = kv(m)
    k, v = norm(out[:, :D]), norm(out[:, D:])
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


case("skv_norm_each_half", check_shared_kv, skv_norm_each_half,
     r"norm.*(before|first)|(before|first).*norm")

# ---------------------------------------------------------------- 04: Square


class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x


RIGHT["square"] = (check_square, SqRight)


class SqNoTwo(torch.autograd.Function):  # d(x^2)/dx written as x
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x


class SqSavesOutput(torch.autograd.Function):  # saves y, uses 2y
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * 2 * y


class SqNoChain(torch.autograd.Function):  # returns dy/dx, forgets grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqInplaceGrad(torch.autograd.Function):  # scales grad_output in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul_(2 * x)


case("sq_no_two", check_square, SqNoTwo, r"2 ?\*? ?x|factor (of )?2|twice")
case("sq_saves_output", check_square, SqSavesOutput, r"\by\b|output|2 ?y|x\b.*not")
case("sq_no_chain", check_square, SqNoChain, r"grad_output|chain rule")
case("sq_inplace_grad", check_square, SqInplaceGrad, r"in[- ]place|grad_output.*(chang|modif)")

class SqExtraNone(torch.autograd.Function):  # returns a gradient for ctx as well
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return None, g * 2 * x


case("sq_extra_none", check_square, SqExtraNone, r"one (gradient )?per input|too many|ctx")

# ---------------------------------------------------------------- 04: value_gradients


def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


RIGHT["value_gradients"] = (check_value_gradients, vg_right)


def vg_last_only(read_grads):  # only the last read (it has all the slots)
    return read_grads[-1].clone()


def vg_into_input(read_grads):  # accumulates into the last read's gradient
    total = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        total[: t + 1] += g
    return total


def vg_align_end(read_grads):  # read t added into the LAST t+1 rows
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_mean(read_grads):  # averaged over the reads that saw each value
    total = vg_right(read_grads)
    T = total.size(0)
    count = torch.arange(T, 0, -1, dtype=total.dtype)[:, None]
    return total / count


def vg_own_read(read_grads):  # only the read of its own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


case("vg_last_only", check_value_gradients, vg_last_only, r"every read|all (the )?reads|sum")
case("vg_into_input", check_value_gradients, vg_into_input,
     r"in place|read_grads.*(chang|modif)|caller|new tensor")
case("vg_align_end", check_value_gradients, vg_align_end, r"first|slot|rows")
case("vg_mean", check_value_gradients, vg_mean, r"\bsum\b|mean|average|divid")
case("vg_own_read", check_value_gradients, vg_own_read, r"later|every read|all (the )?reads")

def vg_float32(read_grads):  # torch.zeros(T, F): the default dtype
    T, F_ = read_grads[-1].shape
    total = torch.zeros(T, F_)
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


case("vg_float32", check_value_gradients, vg_float32, r"dtype|float32|float64|zeros_like")

# ---------------------------------------------------------------- 04: Append


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


RIGHT["append"] = (check_append, ApRight)


class ApClone(torch.autograd.Function):  # returns a copy of the prefix
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApSplitFront(torch.autograd.Function):  # value taken as slot 0, top as the rest
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApBatchN(torch.autograd.Function):  # n read from dim 0 (the batch)
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApValueKeepdim(torch.autograd.Function):  # value's gradient [B, 1, F]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


class ApWriteAfterSlice(torch.autograd.Function):  # writes at n + 1 (after the prefix)
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n + 1] = value
        ctx.n = n
        return buffer.data[:, : n + 2]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n + 1], None


case("ap_clone", check_append, ApClone, r"view|cop(y|ies)|clone")
case("ap_split_front", check_append, ApSplitFront, r"slot n|first n|last slot|slot 0|newest first")
case("ap_batch_n", check_append, ApBatchN, r"dim 1|time|batch|size\(1\)")
case("ap_value_keepdim", check_append, ApValueKeepdim, r"\[B, F\]|shape|keepdim|slice")
case("ap_write_after", check_append, ApWriteAfterSlice, r"slot n\b|n \+ 1|off by one")

class ApNoData(torch.autograd.Function):  # view of buffer itself, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApTwoGrads(torch.autograd.Function):  # no None for the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n]


case("ap_no_data", check_append, ApNoData, r"\.data|version")
case("ap_two_grads", check_append, ApTwoGrads, r"three|None.*buffer|one per input")

# ---------------------------------------------------------------- 04: weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mean(xs, gs):  # divided by the number of rows
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1))


def wg_sum_first(xs, gs):  # sums over steps before the product
    return gs.sum(0).T @ xs.sum(0)


def wg_rows_mismatched(xs, gs):  # G flattened batch-major, X step-major
    return gs.transpose(0, 1).flatten(0, 1).T @ xs.flatten(0, 1)


def wg_last_step(xs, gs):  # only the last step
    return gs[-1].T @ xs[-1]


case("wg_transposed", check_weight_gradient, wg_transposed, r"\[D_out, D_in\]|transpos|G.?\^?T")
case("wg_mean", check_weight_gradient, wg_mean, r"\bsum\b|mean|divid")
case("wg_sum_first", check_weight_gradient, wg_sum_first,
     r"(sum|add)(s|ed)? .*before|before .*product|outer products?")
case("wg_rows_mismatched", check_weight_gradient, wg_rows_mismatched,
     r"same (way|order|\(t, b\))|rows?|flatten")
case("wg_last_step", check_weight_gradient, wg_last_step, r"every step|all (the )?steps")

def wg_mean_steps(xs, gs):  # per-step products averaged over the steps
    return (gs.transpose(1, 2) @ xs).mean(0)


case("wg_mean_steps", check_weight_gradient, wg_mean_steps, r"\bsum\b|mean|divid|average")

# ---------------------------------------------------------------- 05: reach


def re_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


RIGHT["reach"] = (check_reach, re_right)


def re_window_plus1(memory, n_layers, span, position=0):  # counts the token itself
    if memory == "window":
        return n_layers * span + 1
    return re_right(memory, n_layers, span, position)


def re_xl_position_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)


def re_xl_no_position(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * span
    return re_right(memory, n_layers, span, position)


def re_feedback_window(memory, n_layers, span, position=0):  # feedback like a window
    if memory == "feedback":
        return n_layers * span
    return re_right(memory, n_layers, span, position)


def re_window_one_layer(memory, n_layers, span, position=0):  # window = W, layers ignored
    if memory == "window":
        return span
    return re_right(memory, n_layers, span, position)


case("re_window_plus1", check_reach, re_window_plus1, r"itself|\+ ?1")
case("re_xl_position_per_layer", check_reach, re_xl_position_per_layer,
     r"once|per layer|position")
case("re_xl_no_position", check_reach, re_xl_no_position, r"position|own segment")
case("re_feedback_window", check_reach, re_feedback_window, r"inf|unbounded")
case("re_window_one_layer", check_reach, re_window_one_layer, r"layer")

def re_xl_whole_segment(memory, n_layers, span, position=0):  # sees all of its segment
    if memory == "XL":
        return n_layers * span + span
    return re_right(memory, n_layers, span, position)


case("re_xl_whole_segment", check_reach, re_xl_whole_segment,
     r"position|before it|causal|whole segment")

# ---------------------------------------------------------------- 05: make_recall


def mr_right(filler, values, positions):
    x = filler.clone()
    rows = torch.arange(filler.size(0), device=filler.device)
    x[rows, positions] = values
    cols = torch.arange(filler.size(1), device=filler.device)
    after = cols[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)


def mr_inplace(filler, values, positions):  # writes into the caller's filler
    x = filler
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    return x, mr_right(filler, values, positions)[1]


def mr_geq(filler, values, positions):  # labels from p on, not after p
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None, :] >= positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


def mr_column_index(filler, values, positions):  # x[:, positions]: whole columns
    x = filler.clone()
    x[:, positions] = values
    return x, mr_right(filler, values, positions)[1]


def mr_ignore_zero(filler, values, positions):  # 0 where unlabelled
    x, y = mr_right(filler, values, positions)
    return x, torch.where(y == IGNORE, torch.zeros_like(y), y)


def mr_labels_tokens(filler, values, positions):  # labels the next token (LM habit)
    x, y = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, x, torch.full_like(x, IGNORE))


case("mr_inplace", check_make_recall, mr_inplace, r"filler.*(chang|modif)|clone|in place")
case("mr_geq", check_make_recall, mr_geq, r"strictly|after|(p|positions\[n\]) ?\+ ?1|own position")
case("mr_column_index", check_make_recall, mr_column_index,
     r"one (entry )?per row|each row|every row|column")
case("mr_ignore_zero", check_make_recall, mr_ignore_zero, r"-100|IGNORE")
case("mr_labels_tokens", check_make_recall, mr_labels_tokens, r"value|filler")

def mr_values_unbroadcast(filler, values, positions):  # values [N] lined up with T
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, values, torch.full_like(filler, IGNORE))


case("mr_values_unbroadcast", check_make_recall, mr_values_unbroadcast,
     r"values\[:, None\]|broadcast|column|each row")

# ---------------------------------------------------------------- 05: accuracy_by_distance


def _acc(logits, y, max_distance, dist=None, empty=float("nan"), denom=None):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) if dist is None else dist(labelled)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), empty, dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        n = int(at.sum()) if denom is None else denom(y)
        if int(at.sum()):
            out[k - 1] = (hit & at).sum().item() / n
    return out


def ad_right(logits, y, max_distance):
    return _acc(logits, y, max_distance)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)


def ad_zero_empty(logits, y, max_distance):  # 0 where no position lies at d
    return _acc(logits, y, max_distance, empty=0.0)


def ad_position_as_distance(logits, y, max_distance):  # d = t + 1, the position itself
    pos = torch.arange(1, y.size(1) + 1)[None, :].expand_as(y)
    return _acc(logits, y, max_distance, dist=lambda lab: pos)


def ad_over_rows(logits, y, max_distance):  # hits at d / number of rows
    return _acc(logits, y, max_distance, denom=lambda y: y.size(0))


def ad_clamp_far(logits, y, max_distance):  # farther distances counted in the last bin
    return _acc(logits, y, max_distance,
                dist=lambda lab: lab.long().cumsum(1).clamp(max=max_distance))


case("ad_zero_empty", check_accuracy_by_distance, ad_zero_empty, r"NaN|nan")
case("ad_position_as_distance", check_accuracy_by_distance, ad_position_as_distance,
     r"t ?- ?p\b|position itself|absolute position|position index")
case("ad_over_rows", check_accuracy_by_distance, ad_over_rows,
     r"rows|positions at|divid|denominator")
case("ad_clamp_far", check_accuracy_by_distance, ad_clamp_far, r"beyond|max_distance|farther|last")

def ad_range_short(logits, y, max_distance):  # range(1, max_distance): last entry left NaN
    out = _acc(logits, y, max_distance)
    out[-1] = float("nan")
    return out


case("ad_range_short", check_accuracy_by_distance, ad_range_short,
     r"last entry|max_distance|range|off by one")

# ---------------------------------------------------------------- 05: cache_bytes


def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return list(cache)


def cb5_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


RIGHT["cache_bytes05"] = (check_cache_bytes05, cb5_right)


def cb5_numel(cache):  # counts numbers, not bytes
    return sum(k.numel() + v.numel() for k, v in _pairs(cache))


def cb5_keys_only(cache):
    return sum(k.nbytes for k, v in _pairs(cache))


def cb5_first_layer(cache):  # only the first layer's pair
    k, v = _pairs(cache)[0]
    return k.nbytes + v.nbytes


def cb5_storage(cache):  # the whole storage behind each view
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes()
               for k, v in _pairs(cache))



def cb5_kvstate_pairs(cache):  # KVState.kv iterated like a list of (k, v) pairs
    if isinstance(cache, KVState):
        return sum(k.nbytes + v.nbytes for k, v in cache.kv)
    return cb5_right(cache)


case("cb5_kvstate_pairs", check_cache_bytes05, cb5_kvstate_pairs,
     r"kv\[0\]|k, v = (state|cache)\.kv|\[2, B|first axis|keys then values")
case("cb5_numel", check_cache_bytes05, cb5_numel, r"bytes|element_size|numel")
case("cb5_keys_only", check_cache_bytes05, cb5_keys_only, r"value")
case("cb5_first_layer", check_cache_bytes05, cb5_first_layer, r"layer|every")
case("cb5_storage", check_cache_bytes05, cb5_storage, r"storage|spare|remembered")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
