"""Learner trial 18 (b): notebooks 03, 04 and 05, new typical slips per exercise."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes as check_cache_bytes_05
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
case = trial_case(CASES, XFAIL)   # case(tag, check, fns, pattern, xfail="<class>: <one line>")

# ---------------------------------------------------------------- 03: memory_vector


def memory_vector(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


RIGHT["memory_vector"] = (check_memory_vector, memory_vector)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax over the layers
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_plain_mean(xs, w):  # the mix starts uniform: a plain mean "is" softmax(w)
    return xs.mean(0)


def mv_layers_only(xs, w):  # mixes the layer outputs only, the embedding left out
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)sigmoid|softmax|sum to 1")
case("mv_plain_mean", check_memory_vector, mv_plain_mean,
     r"(?i)ignor\w* w|uniform|plain (mean|average)")
case("mv_layers_only", check_memory_vector, mv_layers_only, r"(?i)embedding|xs\[0\]")

# ---------------------------------------------------------------- 03: relative_bias


def relative_bias(table, s):
    d = (s - torch.arange(s, device=table.device)).clamp(max=table.size(1))
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, relative_bias)


def rb_newest_first(table, s):  # distances 1..s in key order: forgot the keys are oldest first
    d = (torch.arange(s, device=table.device) + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_clamp_one_short(table, s):  # clamps to max_distance - 1: the last bias never used
    d = (s - torch.arange(s, device=table.device)).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


def rb_no_clamp(table, s):  # no clamp at all
    d = s - torch.arange(s, device=table.device)
    return table[:, d - 1]


case("rb_newest_first", check_relative_bias, rb_newest_first,
     r"(?i)oldest first|reversed|flip|newest")
case("rb_clamp_one_short", check_relative_bias, rb_clamp_one_short,
     r"(?i)clamp.*max_distance|last (bias|entry|column)")
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"(?i)clamp|max_distance")

# ---------------------------------------------------------------- 03: feedback_attention


def feedback_attention(q, k, v, bias):
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, feedback_attention)


def fa_no_scale(q, k, v, bias):  # forgot the 1/sqrt(d_h)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # adds the bias to the probabilities
    p = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))).softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", p, v)


def fa_scale_by_dh(q, k, v, bias):  # divides by d_h, not its square root
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_no_scale", check_feedback_attention, fa_no_scale, r"(?i)sqrt|scal")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|inside|after) (the )?softmax|softmax.*bias")
case("fa_scale_by_dh", check_feedback_attention, fa_scale_by_dh, r"(?i)sqrt|square root")

# ---------------------------------------------------------------- 03: token_loop


def token_loop(model, tokens):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs))
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


RIGHT["token_loop"] = (check_token_loop, token_loop)


def tl_first_layer_kv(model, tokens):  # every layer reads layer 0's keys and values
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer in model.layers:
            h = layer(h, keys[0], values[0])
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_head_on_memory(model, tokens):  # predicts from the memory vector, not the top layer
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        m = model.mix(torch.stack(xs))
        outs.append(m)
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_not_chained(model, tokens):  # every layer gets the embedding, not the layer below
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        xs = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            xs.append(layer(x[:, t], k, v))
        outs.append(xs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


case("tl_first_layer_kv", check_token_loop, tl_first_layer_kv,
     r"(?i)(own|its|each layer'?s?) (keys|projection)|keys\[0\]|layer 0")
case("tl_head_on_memory", check_token_loop, tl_head_on_memory,
     r"(?i)memory vector.*head|head.*(top|last) layer|top layer")
case("tl_not_chained", check_token_loop, tl_not_chained,
     r"(?i)layer below|previous layer|chain|output of (the )?layer")

# ---------------------------------------------------------------- 03: cache_bytes


def cache_bytes(n_layers, d_model, n_tokens, bytes_per_number):
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 2 * per


RIGHT["cache_bytes_03"] = (check_cache_bytes, cache_bytes)


def cb_feedback_per_layer(n_layers, d_model, n_tokens, bytes_per_number):  # no sharing
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 2 * n_layers * per


def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # counts m_t too (3D)
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 3 * per


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgot the values
    per = d_model * n_tokens * bytes_per_number
    return n_layers * per, per


case("cb_feedback_per_layer", check_cache_bytes, cb_feedback_per_layer,
     r"(?i)shared|per layer|not.*layers")
case("cb_with_memory", check_cache_bytes, cb_with_memory, r"(?i)memory vector|3\s*D|only.*keys")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)values?|factor (of )?2|half")

# ---------------------------------------------------------------- 04: shared_kv


def shared_kv(m, norm, kv, n_heads):
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


RIGHT["shared_kv"] = (check_shared_kv, shared_kv)


def sk_no_norm(m, norm, kv, n_heads):  # forgot the LayerNorm
    b, d = m.shape
    k, v = kv(m).chunk(2, dim=-1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def sk_values_first(m, norm, kv, n_heads):  # takes the first D outputs as the values
    b, d = m.shape
    v, k = kv(norm(m)).chunk(2, dim=-1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def sk_heads_interleaved(m, norm, kv, n_heads):  # [B, D_h, H] then transpose: heads strided
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return (k.reshape(b, d // n_heads, n_heads).transpose(1, 2),
            v.reshape(b, d // n_heads, n_heads).transpose(1, 2))


case("sk_no_norm", check_shared_kv, sk_no_norm, r"(?i)norm")
case("sk_values_first", check_shared_kv, sk_values_first,
     r"(?i)(keys|values).*(first|last|swapped)|swapped")
case("sk_heads_interleaved", check_shared_kv, sk_heads_interleaved,
     r"(?i)head.*(contiguous|consecutive|interleav|stride|split)|\[B, H, D_h\]")

# ---------------------------------------------------------------- 04: Square


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


RIGHT["Square"] = (check_square, Square)


class SqIgnoresGrad(torch.autograd.Function):  # returns dy/dx, not dL/dx
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqMissingTwo(torch.autograd.Function):  # d(x^2)/dx written as x
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x * grad_output


class SqInPlace(torch.autograd.Function):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


case("sq_ignores_grad", check_square, SqIgnoresGrad, r"(?i)grad_output|chain rule")
case("sq_missing_two", check_square, SqMissingTwo, r"(?i)2\s*\*?\s*x|factor (of )?2|half")
case("sq_in_place", check_square, SqInPlace, r"(?i)in[- ]place|modif|mul_|changed")

# ---------------------------------------------------------------- 04: value_gradients


def value_gradients(read_grads):
    t_total = len(read_grads)
    out = read_grads[0].new_zeros(t_total, read_grads[0].size(-1))
    for g in read_grads:
        out[: g.size(0)] += g
    return out


RIGHT["value_gradients"] = (check_value_gradients, value_gradients)


def vg_accumulate_in_place(read_grads):  # sums into the last read's tensor
    out = read_grads[-1]
    for g in read_grads[:-1]:
        out[: g.size(0)] += g
    return out


def vg_own_read_only(read_grads):  # only the read of its own step: the diagonal
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_mean_of_reads(read_grads):  # averages over the reads instead of summing
    t_total = len(read_grads)
    out = read_grads[0].new_zeros(t_total, read_grads[0].size(-1))
    for g in read_grads:
        out[: g.size(0)] += g
    counts = torch.arange(t_total, 0, -1, dtype=out.dtype)[:, None]
    return out / counts


case("vg_accumulate_in_place", check_value_gradients, vg_accumulate_in_place,
     r"(?i)read_grads.*(chang|modif)|in[- ]place|new tensor")
case("vg_own_read_only", check_value_gradients, vg_own_read_only,
     r"(?i)later (reads|steps)|every read|t ?>= ?j|only.*own")
case("vg_mean_of_reads", check_value_gradients, vg_mean_of_reads, r"(?i)sum|mean|average")

# ---------------------------------------------------------------- 04: Append


class Append(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


RIGHT["Append"] = (check_append, Append)


class ApNewestFirst(torch.autograd.Function):  # backward reads the new value's slot as slot 0
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApClone(torch.autograd.Function):  # returns a copy of the prefix, not a view
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()

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


case("ap_newest_first", check_append, ApNewestFirst,
     r"(?i)last slot|first n|slot n|grad\[:, ?-1\]|newest")
case("ap_clone", check_append, ApClone, r"(?i)view|cop(y|ies)|clone")
case("ap_two_grads", check_append, ApTwoGrads,
     r"(?i)three|one per input|None for (the )?buffer")

# ---------------------------------------------------------------- 04: weight_gradient


def weight_gradient(xs, gs):
    return gs.reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


RIGHT["weight_gradient"] = (check_weight_gradient, weight_gradient)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.reshape(-1, xs.size(-1)).T @ gs.reshape(-1, gs.size(-1))


def wg_mean_over_batch(xs, gs):  # a mean over the batch, like a loss
    return gs.reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1)) / xs.size(1)


def wg_last_step(xs, gs):  # only the last step's product
    return gs[-1].T @ xs[-1]


case("wg_transposed", check_weight_gradient, wg_transposed,
     r"(?i)transpos|\[D_out, D_in\]|G\^?T ?X")
case("wg_mean_over_batch", check_weight_gradient, wg_mean_over_batch,
     r"(?i)sum.*(batch|B)|divid|mean")
case("wg_last_step", check_weight_gradient, wg_last_step,
     r"(?i)every step|all (the )?steps|sum over (t|steps|time)")

# ---------------------------------------------------------------- 05: reach


def reach(memory, n_layers, span, position=0):
    if memory == "feedback":
        return math.inf
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span


RIGHT["reach"] = (check_reach, reach)


def re_counts_itself(memory, n_layers, span, position=0):  # L*W + 1: counts the token itself
    if memory == "feedback":
        return math.inf
    return n_layers * span + position + 1 if memory == "XL" else n_layers * span + 1


def re_xl_no_position(memory, n_layers, span, position=0):  # XL: L*M whatever the position
    if memory == "feedback":
        return math.inf
    return n_layers * span


def re_feedback_window(memory, n_layers, span, position=0):  # feedback read as a window
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span


case("re_counts_itself", check_reach, re_counts_itself, r"(?i)itself|\+ ?1|not count")
case("re_xl_no_position", check_reach, re_xl_no_position, r"(?i)position")
case("re_feedback_window", check_reach, re_feedback_window, r"(?i)inf|unbounded")

# ---------------------------------------------------------------- 05: make_recall


def make_recall(filler, values, positions):
    n, t = filler.shape
    rows = torch.arange(n, device=filler.device)
    x = filler.clone()
    x[rows, positions] = values.to(x.dtype)
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None].to(filler.dtype), torch.full_like(filler, -100))
    return x, y


RIGHT["make_recall"] = (check_make_recall, make_recall)


def mr_label_from_p(filler, values, positions):  # labels p itself too (>= instead of >)
    x, _ = make_recall(filler, values, positions)
    t = filler.size(1)
    after = torch.arange(t, device=filler.device)[None, :] >= positions[:, None]
    y = torch.where(after, values[:, None].to(filler.dtype), torch.full_like(filler, -100))
    return x, y


def mr_writes_filler(filler, values, positions):  # x = filler: no copy
    _, y = make_recall(filler, values, positions)
    x = filler
    x[torch.arange(filler.size(0)), positions] = values.to(x.dtype)
    return x, y


def mr_column_index(filler, values, positions):  # x[:, positions]: every row, every position
    _, y = make_recall(filler, values, positions)
    x = filler.clone()
    x[:, positions] = values.to(x.dtype)
    return x, y


case("mr_label_from_p", check_make_recall, mr_label_from_p,
     r"(?i)own position|\] ?\+ ?1|p ?\+ ?1")
case("mr_writes_filler", check_make_recall, mr_writes_filler,
     r"(?i)filler.*(chang|modif)|copy|clone|in place")
case("mr_column_index", check_make_recall, mr_column_index,
     r"(?i)row|x\[:, ?positions\]|each row|one position per row")

# ---------------------------------------------------------------- 05: accuracy_by_distance


def accuracy_by_distance(logits, y, max_distance):
    n, t = y.shape
    labelled = y != -100
    first = torch.where(labelled.any(1), labelled.float().argmax(1),
                        torch.full((n,), t, device=y.device))  # where y is (a GPU)
    p = first - 1
    d = torch.arange(t, device=y.device)[None, :] - p[:, None]
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = correct[at].to(logits.dtype).mean()
    return out


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, accuracy_by_distance)


def _acc(logits, y, max_distance, shift=0, empty=float("nan"), clip=False):
    n, t = y.shape
    labelled = y != -100
    first = torch.where(labelled.any(1), labelled.float().argmax(1), torch.full((n,), t))
    d = torch.arange(t)[None, :] - (first - 1 + shift)[:, None]
    if clip:
        d = d.clamp(max=max_distance)
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), empty, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = correct[at].to(logits.dtype).mean()
    return out


def ad_p_is_first_label(logits, y, max_distance):  # p = the first labelled position
    return _acc(logits, y, max_distance, shift=1)


def ad_zero_for_empty(logits, y, max_distance):  # 0 where no position lies at d
    return _acc(logits, y, max_distance, empty=0.0)


def ad_far_into_last(logits, y, max_distance):  # distances past max_distance in the last bin
    return _acc(logits, y, max_distance, clip=True)


case("ad_p_is_first_label", check_accuracy_by_distance, ad_p_is_first_label,
     r"(?i)p ?\+ ?1|first labell?ed position|one (too )?(far|short|off)")
case("ad_zero_for_empty", check_accuracy_by_distance, ad_zero_for_empty, r"(?i)nan")
case("ad_far_into_last", check_accuracy_by_distance, ad_far_into_last,
     r"(?i)beyond max_distance|past max_distance|last (entry|bin)|clamp|drop")

# ---------------------------------------------------------------- 05: cache_bytes


def _nb(t):
    return t.numel() * t.element_size()


def cache_bytes_05(cache):
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(_nb(k) + _nb(v) for k, v in pairs)


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, cache_bytes_05)


def cc_storage_bytes(cache):  # the bytes of the storage under each view
    if isinstance(cache, KVState):
        return cache.kv.untyped_storage().nbytes()
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in pairs)


def cc_keys_only(cache):  # keys only (the values forgotten)
    if isinstance(cache, KVState):
        return _nb(cache.kv[0])
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(_nb(k) for k, v in pairs)


def cc_one_layer(cache):  # counts only the first layer's keys and values
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    k, v = pairs[0]
    return _nb(k) + _nb(v)


case("cc_storage_bytes", check_cache_bytes_05, cc_storage_bytes,
     r"(?i)storage|capacity|room|free|window")
case("cc_keys_only", check_cache_bytes_05, cc_keys_only, r"(?i)values")
case("cc_one_layer", check_cache_bytes_05, cc_one_layer, r"(?i)every layer|all (the )?layers|layer")

# ---------------------------------------------------------------- a fourth, subtler slip each


def mv_weights_2d(xs, w):  # softmax(w)[:, None]: lines up with B, not the layer axis
    return (w.softmax(0)[:, None] * xs).sum(0)


case("mv_weights_2d", check_memory_vector, mv_weights_2d,
     r"(?i)\[:, ?None, ?None\]|layer axis|broadcast")


def rb_transposed(table, s):  # one column per key stacked: [s, H]
    d = (s - torch.arange(s, device=table.device)).clamp(max=table.size(1))
    return torch.stack([table[:, i - 1] for i in d.tolist()])


case("rb_transposed", check_relative_bias, rb_transposed, r"(?i)\[H, s\]|transpos")


def fa_bias_scaled(q, k, v, bias):  # the bias inside the 1/sqrt(d_h) scaling
    scores = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(after|outside|not).*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")


def tl_replace_cache(model, tokens):  # the cache replaced by the last step's keys, not grown
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        keys, values = model.project_memory(model.mix(torch.stack(xs))[:, None])
    return model.head(torch.stack(outs, 1))


def tl_newest_first(model, tokens):  # new keys put in front: the cache newest first
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([b, a], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([b, a], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


case("tl_replace_cache", check_token_loop, tl_replace_cache,
     r"(?i)append|grow|only the (last|previous)|torch\.cat")
case("tl_newest_first", check_token_loop, tl_newest_first,
     r"(?i)oldest first|newest first|order|end of the cache|after the old")


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    per = d_model * n_tokens * bytes_per_number
    return 2 * per, 2 * n_layers * per


case("cb_swapped", check_cache_bytes, cb_swapped, r"(?i)order|swapped|transformer.*first")


def sk_no_bias(m, norm, kv, n_heads):  # m @ kv.weight.T: the Linear's bias left out
    b, d = m.shape
    k, v = (norm(m) @ kv.weight.T).chunk(2, dim=-1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


case("sk_no_bias", check_shared_kv, sk_no_bias, r"(?i)bias")


class SqSavesOutput(torch.autograd.Function):  # saves y = x^2 and uses it as x
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y * grad_output


case("sq_saves_output", check_square, SqSavesOutput,
     r"(?i)(output|y|x²|x\*\*2).*(instead of|not) (the )?(input|x)|save.*x\b")


def vg_right_aligned(read_grads):  # each read added to the LAST slots
    t_total = len(read_grads)
    out = read_grads[0].new_zeros(t_total, read_grads[0].size(-1))
    for g in read_grads:
        out[t_total - g.size(0):] += g
    return out


case("vg_right_aligned", check_value_gradients, vg_right_aligned,
     r"(?i)slots? 0\.\.t|first t ?\+ ?1|align|oldest|slot j")


class ApKeepdimValue(torch.autograd.Function):  # value's gradient kept as [B, 1, F]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


case("ap_keepdim_value", check_append, ApKeepdimValue,
     r"(?i)\[B, F\]|grad\[:, ?n\]|shape of value|value's shape")


def wg_misaligned_rows(xs, gs):  # xs flattened step-major, gs batch-major
    return gs.transpose(0, 1).reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


case("wg_misaligned_rows", check_weight_gradient, wg_misaligned_rows,
     r"(?i)same order|pair|align|transpose\(0, ?1\)|each x_t with (its )?g_t")


def re_xl_position_per_layer(memory, n_layers, span, position=0):  # L * (M + i)
    if memory == "feedback":
        return math.inf
    return n_layers * (span + position) if memory == "XL" else n_layers * span


case("re_xl_position_per_layer", check_reach, re_xl_position_per_layer,
     r"(?i)(position|i)\b.*once|not.*(per|every) layer|L ?[·*] ?M ?\+ ?i")


def mr_last_unlabelled(filler, values, positions):  # range(p + 1, T - 1): last left out
    x, y = make_recall(filler, values, positions)
    y = y.clone()
    y[:, -1] = -100
    return x, y


case("mr_last_unlabelled", check_make_recall, mr_last_unlabelled,
     r"(?i)last position|T ?- ?1|every position after|through the end")


def ad_no_label_rows(logits, y, max_distance):  # rows without labels: p = -1, all counted
    n, t = y.shape
    labelled = y != -100
    p = labelled.int().argmax(1) - 1
    d = torch.arange(t)[None, :] - p[:, None]
    correct = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = d == k
        if at.any():
            out[k - 1] = correct[at].to(logits.dtype).mean()
    return out


case("ad_no_label_rows", check_accuracy_by_distance, ad_no_label_rows,
     r"(?i)no labell?ed|without (a )?label|unlabell?ed|IGNORE")


def cc_with_rel_keys(cache):  # XL: the relative keys counted as keys too
    base = cache_bytes_05(cache)
    if isinstance(cache, XLCache):
        base += sum(_nb(r) for r in cache.rel_keys if r is not None)
    return base


case("cc_with_rel_keys", check_cache_bytes_05, cc_with_rel_keys,
     r"(?i)rel_keys|relative")

# ---------------------------------------------------------------- shortcuts and misreadings


def rb_flip_slice(table, s):  # the first s entries reversed: right only while s <= max_distance
    return table[:, :s].flip(-1)


case("rb_flip_slice", check_relative_bias, rb_flip_slice, r"(?i)clamp|max_distance|share")


def fa_sdpa(q, k, v, bias):  # PyTorch's fused attention (a right answer: zeros for S = 0)
    out = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=bias[:, None, :])
    return out[:, :, 0]


RIGHT["feedback_attention_sdpa"] = (check_feedback_attention, fa_sdpa)


def fa_keys_as_values(q, k, v, bias):  # weights the keys, not the values (k for v)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), k)


def fa_bias_subtracted(q, k, v, bias):  # the bias read as a distance penalty: subtracted
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) - bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values,
     r"(?i)values?.*(not|instead of).*keys|weight(s|ed)? (the )?v|\bv\b")
case("fa_bias_subtracted", check_feedback_attention, fa_bias_subtracted,
     r"(?i)subtract|sign|\+ bias|add the bias")


def tl_top_as_memory(model, tokens):  # the memory is the top layer alone, no mix
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
        outs.append(h)
        nk, nv = model.project_memory(h[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_embedding_as_memory(model, tokens):  # projects the step's embedding, not its mix
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
        outs.append(h)
        nk, nv = model.project_memory(x[:, t:t + 1])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_mix_without_embedding(model, tokens):  # mixes the L layer outputs only
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = []
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


case("tl_top_as_memory", check_token_loop, tl_top_as_memory,
     r"(?i)model\.mix|mix of (all|every)|not (just|only) the top")
case("tl_embedding_as_memory", check_token_loop, tl_embedding_as_memory,
     r"(?i)model\.mix|embedding.*memory|memory.*embedding")
case("tl_mix_without_embedding", check_token_loop, tl_mix_without_embedding,
     r"(?i)embedding|L ?\+ ?1|x\[:, ?t\]")


def tl_zero_memory(model, tokens):  # starts from one zero memory vector, not an empty one
    x = model.embed(tokens)
    keys, values = model.project_memory(torch.zeros_like(x[:, :1]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_mix_top_first(model, tokens):  # stacks the layers top first for the mix
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs[::-1]))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


case("tl_zero_memory", check_token_loop, tl_zero_memory,
     r"(?i)empty memory|zero memory|x\[:, ?:0\]|first step")
case("tl_mix_top_first", check_token_loop, tl_mix_top_first,
     r"(?i)embedding first|order of the layers|reversed|top first")


def sk_view_per_head_kv(m, norm, kv, n_heads):  # [B, H, 2, D_h]: k and v interleaved per head
    b, d = m.shape
    k, v = kv(norm(m)).view(b, n_heads, 2, d // n_heads).unbind(2)
    return k, v


case("sk_view_per_head_kv", check_shared_kv, sk_view_per_head_kv,
     r"(?i)first D|keys.*first|split.*(keys|values)|\[B, 2, H")


class SqSavedTuple(torch.autograd.Function):  # ctx.saved_tensors not unpacked
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors
        return 2 * x * grad_output


case("sq_saved_tuple", check_square, SqSavedTuple, r"(?i)tuple|unpack|\(x,\)|saved_tensors\[0\]")


def wg_sum_steps_first(xs, gs):  # sums over the steps, then one product
    return gs.sum(0).T @ xs.sum(0)


case("wg_sum_steps_first", check_weight_gradient, wg_sum_steps_first,
     r"(?i)sum.*(before|first)|cross|each step's|flatten")


def re_window_one_layer(memory, n_layers, span, position=0):  # window: W, as for one layer
    if memory == "feedback":
        return math.inf
    return n_layers * span + position if memory == "XL" else span


case("re_window_one_layer", check_reach, re_window_one_layer,
     r"(?i)per layer|each layer|layers|L ?[·*] ?W")


def mr_float_labels(filler, values, positions):  # torch.full(..., -100.0): float labels
    x, y = make_recall(filler, values, positions)
    return x, y.float()


case("mr_float_labels", check_make_recall, mr_float_labels, r"(?i)dtype|long|int|float")


def ad_length_t(logits, y, max_distance):  # one entry per distance 1..T-1, not max_distance
    return _acc(logits, y, y.size(1) - 1)


case("ad_length_t", check_accuracy_by_distance, ad_length_t,
     r"(?i)max_distance.*entr|\[max_distance\]|length|entries")


def cc_hasattr(cache):  # hasattr(cache, "kv"): KVState taken for an XLCache
    pairs = cache.kv if hasattr(cache, "kv") else cache
    return sum(_nb(k) + _nb(v) for k, v in pairs)


case("cc_hasattr", check_cache_bytes_05, cc_hasattr, r"(?i)KVState|isinstance|\[2, B")

# ---------------------------------------------------------------- a last round


def mv_weighted_mean(xs, w):  # .mean(0) of the weighted layers: a sum divided by L+1
    return (w.softmax(0)[:, None, None] * xs).mean(0)


case("mv_weighted_mean", check_memory_vector, mv_weighted_mean,
     r"(?i)\.sum|sum, not|mean|L ?\+ ?1")


def rb_newest_at_zero(table, s):  # distance s - 1 - j: the newest key at 0, index -1 wraps
    d = (s - 1 - torch.arange(s, device=table.device)).clamp(max=table.size(1))
    return table[:, d - 1]


case("rb_newest_at_zero", check_relative_bias, rb_newest_at_zero,
     r"(?i)distance 1|one (too )?short|off by one|s - j\b")


def fa_scales_q_in_place(q, k, v, bias):  # q /= sqrt(d_h): the caller's q changed
    q /= math.sqrt(q.size(-1))
    scores = torch.einsum("bhd,bhsd->bhs", q, k) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_scales_q_in_place", check_feedback_attention, fa_scales_q_in_place,
     r"(?i)in[- ]place|modif")


def tl_memory_one_step_late(model, tokens):  # appends the previous m, keeps this one for later
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs, prev = [], None
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs))
        if prev is not None:
            nk, nv = model.project_memory(prev[:, None])
            keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
            values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nv))
        prev = m
    return model.head(torch.stack(outs, 1))


case("tl_memory_one_step_late", check_token_loop, tl_memory_one_step_late,
     r"(?i)step t - 1|previous step'?s? memory|one step late|after each step")


def mr_value_one_late(filler, values, positions):  # writes the value at p + 1
    _, y = make_recall(filler, values, positions)
    x = filler.clone()
    ok = positions + 1 < filler.size(1)
    rows = torch.arange(filler.size(0))[ok]
    x[rows, positions[ok] + 1] = values[ok].to(x.dtype)
    return x, y


case("mr_value_one_late", check_make_recall, mr_value_one_late,
     r"(?i)positions\[n\]\b|at p\b|one (position )?(too )?late|off by one")

def tl_values_get_keys(model, tokens):  # copy-paste slip: the value cache grows with keys
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=2) for a, b in zip(values, nk))
    return model.head(torch.stack(outs, 1))


def tl_cat_last_dim(model, tokens):  # torch.cat(..., dim=-1): the habit, not the key axis
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = tuple(torch.cat([a, b], dim=-1) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], dim=-1) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


case("tl_values_get_keys", check_token_loop, tl_values_get_keys,
     r"(?i)values?.*(new keys|keys instead)|nv\b")
case("tl_cat_last_dim", check_token_loop, tl_cat_last_dim,
     r"(?i)dim(=| )2|key axis|along the keys")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
