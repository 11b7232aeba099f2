"""Learner trial 11 (b): notebooks 03, 04 and 05, wrong answers not tried before."""
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

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100

# ---------------------------------------------------------------- 03 · memory_vector


def mv_right(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


def mv_none1(xs, w):  # weights[:, None]: broadcasts over B, not over [B, D]
    return (w.softmax(0)[:, None] * xs).sum(0)


def mv_exp(xs, w):  # exponentiates the logits, then softmax again
    return (w.exp().softmax(0)[:, None, None] * xs).sum(0)


def mv_sum_last(xs, w):  # sums over the width, not the layers
    return (w.softmax(0)[:, None, None] * xs).sum(-1)


def mv_inplace(xs, w):  # scales the caller's xs in place
    return xs.mul_(w.softmax(0)[:, None, None]).sum(0)


def mv_unweighted(xs, w):  # "the weights sum to one": multiplies the plain sum by their sum
    return xs.sum(0) * w.softmax(0).sum()


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_none1", check_memory_vector, mv_none1, r"(None, None|\[N, 1, 1\])")
case("mv_exp", check_memory_vector, mv_exp, r"(exponentiat|\.exp\(\)|softmax twice)")
case("mv_sum_last", check_memory_vector, mv_sum_last, r"(layer axis|dim 0|sum over.*layer)")
case("mv_inplace", check_memory_vector, mv_inplace, r"(in place|changed|modif).*xs")
case("mv_unweighted", check_memory_vector, mv_unweighted,
     r"(unweighted|plain sum|weights? .*ignor)")

# ---------------------------------------------------------------- 03 · relative_bias


def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_clamp_heads(table, s):  # clamps at the number of heads, not the width
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]


def rb_slice_flip(table, s):  # shortcut, right only while s <= max_distance
    return table[:, :s].flip(1)


def rb_float(table, s):  # float distances cannot index
    d = torch.arange(s, 0, -1, dtype=torch.float).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_no_minus1(table, s):  # column d for distance d, clamped to the last column
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]


def rb_head0(table, s):  # the first head's row for every head
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[0, d - 1].expand(table.size(0), s)


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_clamp_heads", check_relative_bias, rb_clamp_heads, r"(clamp|max_distance|width|size\(1\))")
case("rb_slice_flip", check_relative_bias, rb_slice_flip, r"(clamp|beyond max_distance|s > max)")
case("rb_float", check_relative_bias, rb_float, r"(Long|integer|dtype|float)")
case("rb_no_minus1", check_relative_bias, rb_no_minus1, r"(d - 1|column d|off by one|shift)")
case("rb_head0", check_relative_bias, rb_head0, r"(head|row)")

# ---------------------------------------------------------------- 03 · feedback_attention


def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_by_dh(q, k, v, bias):  # divides by D_h, not its square root
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_scale_s(q, k, v, bias):  # k.size(-2): the number of keys, not the head width
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(k.size(-2)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_scaled(q, k, v, bias):  # adds the bias before scaling
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_empty_q(q, k, v, bias):  # empty memory: passes the query through
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)


def fa_matmul(q, k, v, bias):  # weights [B, H, S] @ v [B, H, S, D_h] without unsqueeze
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return s.softmax(-1) @ v


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_by_dh", check_feedback_attention, fa_by_dh, r"(square root|sqrt).*(D_h|d_h)")
case("fa_scale_s", check_feedback_attention, fa_scale_s, r"(sqrt\(S\)|number of (memory )?keys)")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled, r"bias.*(after|before|scal)")
case("fa_empty_q", check_feedback_attention, fa_empty_q, r"(zero|empty|S ?== ?0)")
case("fa_matmul", check_feedback_attention, fa_matmul,
     r"(unsqueeze|\[B, H, 1, S\]|None|weights.*v)")

def fa_zeros_f32(q, k, v, bias):  # torch.zeros(q.shape): float32 whatever q's dtype
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return fa_right(q, k, v, bias)


case("fa_zeros_f32", check_feedback_attention, fa_zeros_f32, r"(dtype|zeros_like|float32)")

# ---------------------------------------------------------------- 03 · token_loop


def _loop(model, tokens, *, keep=True, same_input=False, rev=False, time_first=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = len(model.layers) - 1 - i if rev else i
            below = x[:, t] if same_input else outs[-1]
            outs.append(layer(below, keys[j], values[j]))
        tops.append(outs[-1])
        m = model.mix(torch.stack(outs))
        k_new, v_new = model.project_memory(m[:, None])
        if keep:
            keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
            values = [torch.cat([a, b], dim=2) for a, b in zip(values, v_new)]
        else:  # the cat's result is never stored
            [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
    return model.head(torch.stack(tops, 0 if time_first else 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_no_append(model, tokens):
    return _loop(model, tokens, keep=False)


def tl_same_input(model, tokens):
    return _loop(model, tokens, same_input=True)


def tl_rev_keys(model, tokens):
    return _loop(model, tokens, rev=True)


def tl_time_first(model, tokens):
    return _loop(model, tokens, time_first=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_no_append", check_token_loop, tl_no_append, r"(memory|append|cat).*(never|not|grow|empty)")
case("tl_same_input", check_token_loop, tl_same_input,
     r"(below|previous layer|embedding).*(input|layer)")
case("tl_rev_keys", check_token_loop, tl_rev_keys,
     r"(reversed|wrong layer|layer i (read|got) .*keys of layer)")
case("tl_time_first", check_token_loop, tl_time_first,
     r"(\[B, T, V\]|batch.*(first|time)|time.*first)")

# ---------------------------------------------------------------- 03 · cache_bytes


def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 2 * per


def cb_memory(n_layers, d_model, n_tokens, bytes_per_number):  # counts the memory too: 3D
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 3 * per


def cb_float(n_layers, d_model, n_tokens, bytes_per_number):  # the ratio as a division
    tf = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return tf, tf / n_layers


def cb_next_token(n_layers, d_model, n_tokens, bytes_per_number):  # counts the new token too
    return cb_right(n_layers, d_model, n_tokens + 1, bytes_per_number)


def cb_embed_layer(n_layers, d_model, n_tokens, bytes_per_number):  # embedding as a layer
    return cb_right(n_layers + 1, d_model, n_tokens, bytes_per_number)


def cb_fb_per_layer(n_layers, d_model, n_tokens, bytes_per_number):  # every layer reads it
    tf, _ = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return tf, tf


RIGHT["cache_bytes03"] = (check_cache_bytes, cb_right)
case("cb_memory", check_cache_bytes, cb_memory, r"(memory vector|3 ?D|3 \* D|only.*key)")
case("cb_float", check_cache_bytes, cb_float, r"(int|float)")
case("cb_next_token", check_cache_bytes, cb_next_token,
     r"(n_tokens \+ 1|one token too many|extra token)")
case("cb_embed_layer", check_cache_bytes, cb_embed_layer, r"(n_layers \+ 1|embedding|layers)")
case("cb_fb_per_layer", check_cache_bytes, cb_fb_per_layer, r"(shared|once|per layer|1/L)")

# ---------------------------------------------------------------- 04 · shared_kv


def skv_right(m, norm, kv, n_heads):
    y = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_no_norm(m, norm, kv, n_heads):
    y = kv(m).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_heads_first(m, norm, kv, n_heads):  # [B, H, 2, D_h]
    y = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return y[:, :, 0], y[:, :, 1]


def skv_chunk0(m, norm, kv, n_heads):  # chunk over the batch
    k, v = kv(norm(m)).chunk(2, dim=0)
    return k.view(k.size(0), n_heads, -1), v.view(v.size(0), n_heads, -1)


def skv_no_bias(m, norm, kv, n_heads):  # the weight alone
    y = torch.nn.functional.linear(norm(m), kv.weight).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_head_minor(m, norm, kv, n_heads):  # [B, D_h, H] then transposed
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return (k.view(k.size(0), -1, n_heads).transpose(1, 2),
            v.view(v.size(0), -1, n_heads).transpose(1, 2))


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(norm|LayerNorm)")
case("skv_heads_first", check_shared_kv, skv_heads_first,
     r"(\[B, 2, H, D_h\]|keys.*first|order|head)")
case("skv_chunk0", check_shared_kv, skv_chunk0, r"(batch|dim=?-?1|last axis|dim 0)")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")
case("skv_head_minor", check_shared_kv, skv_head_minor,
     r"(contiguous|head-major|head.*(layout|order))")

def skv_fresh_ln(m, norm, kv, n_heads):  # a plain layer_norm: norm's own weight and bias lost
    y = kv(torch.nn.functional.layer_norm(m, m.shape[-1:])).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


case("skv_fresh_ln", check_shared_kv, skv_fresh_ln, r"(norm\(m\)|norm's|affine|weight and bias)")

# ---------------------------------------------------------------- 04 · Square


class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SqNo2(SqRight):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x


class SqGradSum(SqRight):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output.sum()


class SqTuple(SqRight):
    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors  # forgot to unpack
        return grad_output * 2 * x


class SqGradInplace(SqRight):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output.mul_(2 * x)


class SqFloat(SqRight):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.float() ** 2


RIGHT["square"] = (check_square, SqRight)
case("sq_no2", check_square, SqNo2, r"(2x|2 \* x|factor 2|derivative)")
case("sq_gradsum", check_square, SqGradSum, r"(sum|elementwise|element-wise|reduc)")
case("sq_tuple", check_square, SqTuple, r"(tuple|saved_tensors|unpack)")
case("sq_grad_inplace", check_square, SqGradInplace, r"(in place|mul_)")
case("sq_float", check_square, SqFloat, r"(dtype|float64|float32|\.float)")

# ---------------------------------------------------------------- 04 · value_gradients


def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_own_read(read_grads):  # each value's own read only
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[t] = g[t]
    return total


def vg_last_read(read_grads):  # only the last read
    return read_grads[-1].clone()


def vg_into_last(read_grads):  # accumulates into the caller's last tensor
    total = read_grads[-1]
    for g in read_grads[:-1]:
        total[: g.size(0)] += g
    return total


def vg_slot_sum(read_grads):  # sums the slots of each read
    return torch.stack([g.sum(0) for g in read_grads])


def vg_short(read_grads):  # [:t]: drops each read's own slot
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[:t] += g[:t]
    return total


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read", check_value_gradients, vg_own_read,
     r"(every (later )?read|t ?(>=|≥) ?j|later)")
case("vg_last_read", check_value_gradients, vg_last_read, r"(last read|every read|earlier reads)")
case("vg_into_last", check_value_gradients, vg_into_last,
     r"(changed|modif|in place).*(read_grads|input)")
case("vg_slot_sum", check_value_gradients, vg_slot_sum, r"(slot|sum.*(rows|slots)|per value)")
case("vg_short", check_value_gradients, vg_short, r"(t ?\+ ?1|own slot|slot t|off by one)")

def vg_assign(read_grads):  # = instead of +=: each read overwrites the earlier ones
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] = g
    return total


case("vg_assign", check_value_gradients, vg_assign, r"(\+=|add|overwr|replac|assign)")

# ---------------------------------------------------------------- 04 · Append


class ApRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], None


class ApNoData(ApRight):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]


class ApBatchN(ApRight):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)  # batch, not time
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApKeepDim(ApRight):
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n:], None


class ApSlot0(ApRight):
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, 1:], grad[:, 0], None


class ApNoNew(ApRight):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, :n]


RIGHT["append"] = (check_append, ApRight)
case("ap_no_data", check_append, ApNoData, r"(\.data|version)")
case("ap_batch_n", check_append, ApBatchN, r"(size\(1\)|dim 1|time|along time|batch)")
case("ap_keep_dim", check_append, ApKeepDim,
     r"(\[B, F\]|grad\[:, n\]|keeps? .*(axis|dim)|slot n\b)")
case("ap_slot0", check_append, ApSlot0, r"(newest first|oldest first)")
case("ap_no_new", check_append, ApNoNew, r"(n ?\+ ?1|new value|includ)")

class ApTopNone(ApRight):
    @staticmethod
    def backward(ctx, grad):
        return None, grad[:, ctx.n], None  # "top is in the buffer, it needs no gradient"


case("ap_top_none", check_append, ApTopNone, r"top.*(None|no gradient|grad\[:, :n\])")

# ---------------------------------------------------------------- 04 · weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_mismatch(xs, gs):  # xs flattened batch-major, gs time-major
    return gs.reshape(-1, gs.size(-1)).T @ xs.transpose(0, 1).reshape(-1, xs.size(-1))


def wg_batch0(xs, gs):  # the first sequence only
    return gs[:, 0].T @ xs[:, 0]


def wg_outer_sums(xs, gs):  # outer product of the sums
    return gs.sum((0, 1))[:, None] * xs.sum((0, 1))[None]


def wg_per_step(xs, gs):  # one gradient per step, never summed
    return gs.transpose(1, 2) @ xs


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_mismatch", check_weight_gradient, wg_mismatch, r"(same (way|order)|row|pair|flatten)")
case("wg_batch0", check_weight_gradient, wg_batch0, r"(batch|every sequence|sum over b)")
case("wg_outer_sums", check_weight_gradient, wg_outer_sums, r"product of the sums")
case("wg_per_step", check_weight_gradient, wg_per_step,
     r"(sum over (the )?steps|\[T, D_out, D_in\]|T gradients)")

# ---------------------------------------------------------------- 05 · reach


def rc_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def rc_pos_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return rc_right(memory, n_layers, span, position)


def rc_xl_no_pos(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * span
    return rc_right(memory, n_layers, span, position)


def rc_fb_window(memory, n_layers, span, position=0):
    if memory == "feedback":
        return n_layers * span
    return rc_right(memory, n_layers, span, position)


def rc_minus1(memory, n_layers, span, position=0):
    if memory == "feedback":
        return -1  # "no limit"
    return rc_right(memory, n_layers, span, position)


def rc_power(memory, n_layers, span, position=0):
    if memory == "window":
        return span ** n_layers
    return rc_right(memory, n_layers, span, position)


def rc_lower(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "xl":
        return n_layers * span + position
    return math.inf


RIGHT["reach"] = (check_reach, rc_right)
case("rc_pos_per_layer", check_reach, rc_pos_per_layer, r"(once|not .*per layer|position.*layer)")
case("rc_xl_no_pos", check_reach, rc_xl_no_pos, r"(position|own segment|\+ i)")
case("rc_fb_window", check_reach, rc_fb_window, r"(unbounded|math\.inf|feedback)")
case("rc_minus1", check_reach, rc_minus1, r"(math\.inf|unbounded)")
case("rc_power", check_reach, rc_power, r"(L ?[·*] ?W|n_layers \* span|adds|not multipl)")
case("rc_lower", check_reach, rc_lower, r"(\"XL\"|'XL'|XL)")

def rc_window_pos(memory, n_layers, span, position=0):  # adds the position to the window too
    if memory == "window":
        return n_layers * span + position
    return rc_right(memory, n_layers, span, position)


case("rc_window_pos", check_reach, rc_window_pos, r"(window.*position|position.*window)")

# ---------------------------------------------------------------- 05 · make_recall


def mr_right(filler, values, positions):
    x = filler.clone()
    rows = torch.arange(filler.size(0), device=filler.device)
    x[rows, positions] = values
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


def mr_ge(filler, values, positions):  # labels the value's own position too
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None] >= positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


def mr_all_rows(filler, values, positions):  # x[:, positions]: every row, every position
    x = filler.clone()
    x[:, positions] = values
    _, y = mr_right(filler, values, positions)
    return x, y


def mr_no_clone(filler, values, positions):
    x = filler
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    _, y = mr_right(filler.clone(), values, positions)
    return x, y


def mr_tokens(filler, values, positions):  # labels = the tokens at those positions
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    return x, torch.where(after, x, torch.full_like(filler, IGNORE))


def mr_values_flat(filler, values, positions):  # values without [:, None]
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    return x, torch.where(after, values, torch.full_like(filler, IGNORE))


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_ge", check_make_recall, mr_ge, r"(strictly|after|>=|own position|at p\b)")
case("mr_all_rows", check_make_recall, mr_all_rows,
     r"(every row|one entry per row|rows? and positions together|x\[:, )")
case("mr_no_clone", check_make_recall, mr_no_clone, r"(clone|filler.*(chang|modif))")
case("mr_tokens", check_make_recall, mr_tokens,
     r"(value|values\[n\]).*(not|instead).*(token|filler)|token")
case("mr_values_flat", check_make_recall, mr_values_flat,
     r"(\[:, None\]|column|broadcast|row's value)")

def mr_scatter_1d(filler, values, positions):  # scatter_ with a 1-D src
    x = filler.clone().scatter_(1, positions[:, None], values)
    _, y = mr_right(filler, values, positions)
    return x, y


case("mr_scatter_1d", check_make_recall, mr_scatter_1d, r"(values\[:, None\]|src|\[N, 1\])")

# ---------------------------------------------------------------- 05 · accuracy_by_distance


def ad_right(logits, y, max_distance):
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_zero_based(logits, y, max_distance):  # distances from 0
    lab = y != IGNORE
    d = lab.long().cumsum(1) - 1
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_clamp(logits, y, max_distance):  # far positions pooled into the last entry
    lab = y != IGNORE
    d = lab.long().cumsum(1).clamp(max=max_distance)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_list(logits, y, max_distance):
    return ad_right(logits, y, max_distance).tolist()


def ad_over_n(logits, y, max_distance):  # divides by every row, not the rows at d
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().sum() / y.size(0)
    return out


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_zero_based", check_accuracy_by_distance, ad_zero_based,
     r"(d = 1|first labelled|from 1|shift|off by one)")
case("ad_clamp", check_accuracy_by_distance, ad_clamp,
     r"(beyond max_distance|clamp|pool|last entry)")
case("ad_list", check_accuracy_by_distance, ad_list, r"(tensor|list)")
case("ad_over_n", check_accuracy_by_distance, ad_over_n,
     r"(rows|positions) at (that )?d|denominator|every row|all N")

# ---------------------------------------------------------------- 05 · cache_bytes


def _pairs(cache):
    if isinstance(cache, list):
        return cache
    if hasattr(cache, "rel_keys"):
        return [tuple(b) for b in cache.kv]
    return [(cache.kv[0], cache.kv[1])]


def cb5_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


def cb5_numel(cache):  # numbers, not bytes
    return sum(k.numel() + v.numel() for k, v in _pairs(cache))


def cb5_capacity(cache):  # the XL storages' full capacity
    if hasattr(cache, "rel_keys"):
        return sum(b.allocated_bytes for b in cache.kv)
    return cb5_right(cache)


def cb5_per_seq(cache):  # per sequence: divided by the batch
    k0 = _pairs(cache)[0][0]
    return cb5_right(cache) // k0.size(0)


def cb5_rel_keys(cache):  # XL: forgets the list, counts the first layer only
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache)[:1])


RIGHT["cache_bytes05"] = (check_cache_bytes05, cb5_right)
case("cb5_numel", check_cache_bytes05, cb5_numel, r"(nbytes|element_size|numbers.*bytes|bytes)")
case("cb5_capacity", check_cache_bytes05, cb5_capacity, r"(room|capacity|spare|storage)")
case("cb5_per_seq", check_cache_bytes05, cb5_per_seq, r"(batch|per sequence|\[B\] left out)")
case("cb5_first_layer", check_cache_bytes05, cb5_rel_keys, r"(every layer|layers|one layer)")

def cb5_pair_nbytes(cache):  # the transformer's list holds (k, v) pairs, not tensors
    if isinstance(cache, list):
        return sum(pair.nbytes for pair in cache)
    return cb5_right(cache)


case("cb5_pair_nbytes", check_cache_bytes05, cb5_pair_nbytes, r"(pairs?\b|\(k, v\)|unpack)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
