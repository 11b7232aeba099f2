"""Learner trial 17 (b): notebooks 03, 04 and 05, three or more new slips per exercise."""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
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
case = trial_case(CASES, XFAIL)


# ---- 03 · memory_vector ------------------------------------------------------------
def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_log_softmax", check_memory_vector,
     lambda xs, w: (w.log_softmax(0)[:, None, None] * xs).sum(0), r"log.?softmax|exp")
case("mv_linear_norm", check_memory_vector,
     lambda xs, w: ((w / w.sum())[:, None, None] * xs).sum(0), r"softmax")
case("mv_no_embedding", check_memory_vector,
     lambda xs, w: (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0),
     r"embedding|xs\[0\]")
case("mv_mean", check_memory_vector,
     lambda xs, w: (w.softmax(0)[:, None, None] * xs).mean(0), r"mean|L ?\+ ?1|sum")


case("mv_float32", check_memory_vector,
     lambda xs, w: (torch.softmax(w, 0, dtype=torch.float32)[:, None, None] * xs).sum(0),
     r"dtype|float32|float64")


# ---- 03 · relative_bias ------------------------------------------------------------
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1])
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias,
     lambda table, s: table[:, torch.arange(1, s + 1).clamp(max=table.shape[1]) - 1],
     r"oldest|order|revers|flip")
case("rb_wraparound", check_relative_bias,
     lambda table, s: table[:, (torch.arange(s, 0, -1) - 1) % table.shape[1]],
     r"clamp|max_distance|beyond")
case("rb_clamp_too_high", check_relative_bias,
     lambda table, s: table[:, (torch.arange(s, 0, -1) - 1).clamp(max=table.shape[1])],
     r"clamp|max_distance|d ?- ?1|last column")
case("rb_flip_shortcut", check_relative_bias,
     lambda table, s: table[:, :s].flip(1), r"clamp|max_distance|beyond")

case("rb_transposed", check_relative_bias,
     lambda table, s: table.T[torch.arange(s, 0, -1).clamp(max=table.shape[1]) - 1],
     r"\[H, ?S\]|transpos")


# ---- 03 · feedback_attention -------------------------------------------------------
def fa_right(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)


def fa_scale_by_s(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(k.shape[2]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_scale_dh(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.shape[-1] + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_empty_returns_q(q, k, v, bias):
    if k.shape[2] == 0:
        return q
    return fa_right(q, k, v, bias)


case("fa_scale_by_S", check_feedback_attention, fa_scale_by_s, r"sqrt|D_h|scal")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after,
     r"bias.*(before|after|inside)|(before|after).*softmax")
case("fa_scale_dh_no_sqrt", check_feedback_attention, fa_scale_dh, r"sqrt|square root")
case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q,
     r"zero|empty|S ?== ?0")



def fa_bias_heads_batch(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_bias_mixes_heads_batch", check_feedback_attention, fa_bias_heads_batch,
     r"bias.*(broadcast|\[H, ?S\]|head)|batch")


# ---- 03 · token_loop ---------------------------------------------------------------
def make_loop(memory_of=None, prepend=False, skip_append=False, first_kv=False):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :0])
        keys, values = list(keys), list(values)
        tops = []
        for t in range(tokens.shape[1]):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                j = 0 if first_kv else i
                outs.append(layer(outs[-1], keys[j], values[j]))
            tops.append(outs[-1])
            m = model.mix(torch.stack(outs)) if memory_of is None else memory_of(outs)
            if skip_append:
                continue
            nk, nv = model.project_memory(m[:, None])
            if prepend:
                keys = [torch.cat([b, a], 2) for a, b in zip(keys, nk)]
                values = [torch.cat([b, a], 2) for a, b in zip(values, nv)]
            else:
                keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
                values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
        return model.head(torch.stack(tops, 1))
    return token_loop


RIGHT["token_loop"] = (check_token_loop, make_loop())
case("tl_memory_is_top", check_token_loop, make_loop(memory_of=lambda o: o[-1]),
     r"mix|all (the )?(layers|outputs)|top")
case("tl_prepend_newest", check_token_loop, make_loop(prepend=True),
     r"append|order|oldest|newest|end")
case("tl_never_append", check_token_loop, make_loop(skip_append=True),
     r"append|memory.*(empty|never|grow)")

case("tl_first_layer_kv", check_token_loop, make_loop(first_kv=True),
     r"own (projection|keys)|keys\[i\]|each layer|per layer")


# ---- 03 · cache_bytes --------------------------------------------------------------
RIGHT["cache_bytes"] = (check_cache_bytes, lambda L, D, T, b: (2 * L * D * T * b, 2 * D * T * b))
case("cb_counts_memory", check_cache_bytes,
     lambda L, D, T, b: (2 * L * D * T * b, 3 * D * T * b), r"memory|3 ?D|only.*key")
case("cb_swapped", check_cache_bytes,
     lambda L, D, T, b: (2 * D * T * b, 2 * L * D * T * b), r"swap|order|first")
case("cb_tf_keys_only", check_cache_bytes,
     lambda L, D, T, b: (L * D * T * b, 2 * D * T * b), r"value|2 ?L ?D|factor 2|half")

case("cb_fb_one_vector", check_cache_bytes,
     lambda L, D, T, b: (2 * L * D * T * b, D * T * b), r"value|key AND|2 ?D|twice|half")


# ---- 04 · shared_kv ----------------------------------------------------------------
def skv_right(m, norm, kv, n_heads):
    y = kv(norm(m))
    y = y.view(m.shape[0], 2, n_heads, -1)
    return y[:, 0], y[:, 1]


RIGHT["shared_kv"] = (check_shared_kv, skv_right)


def skv_no_norm(m, norm, kv, n_heads):
    return skv_right(m, torch.nn.Identity(), kv, n_heads)


def skv_no_bias(m, norm, kv, n_heads):
    y = (norm(m) @ kv.weight.T).view(m.shape[0], 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_head_minor(m, norm, kv, n_heads):
    y = kv(norm(m)).view(m.shape[0], 2, -1, n_heads).transpose(-1, -2)
    return y[:, 0], y[:, 1]


def skv_swapped(m, norm, kv, n_heads):
    k, v = skv_right(m, norm, kv, n_heads)
    return v, k


case("skv_no_norm", check_shared_kv, skv_no_norm, r"norm")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")
case("skv_head_minor", check_shared_kv, skv_head_minor, r"head.*(contiguous|major|order|split)")
case("skv_swapped", check_shared_kv, skv_swapped, r"swap|first D|keys.*values")



def skv_chunk_batch(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, dim=0)
    return k.reshape(k.shape[0], n_heads, -1), v.reshape(v.shape[0], n_heads, -1)


case("skv_chunk_batch_axis", check_shared_kv, skv_chunk_batch,
     r"dim ?(-1|1)|last axis|batch|feature")


# ---- 04 · Square -------------------------------------------------------------------
def square_cls(backward_fn, save_output=False):
    class Sq(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * x
            ctx.save_for_backward(y if save_output else x)
            return y

        @staticmethod
        def backward(ctx, grad_output):
            (s,) = ctx.saved_tensors
            return backward_fn(s, grad_output)
    return Sq


RIGHT["square"] = (check_square, square_cls(lambda x, g: g * 2 * x))
case("sq_no_grad_output", check_square, square_cls(lambda x, g: 2 * x),
     r"grad_output|chain rule")
case("sq_missing_2", check_square, square_cls(lambda x, g: g * x), r"\b2\b|factor|2 ?x")
case("sq_sqrt_of_output", check_square,
     square_cls(lambda y, g: g * 2 * y.sqrt(), save_output=True), r"sign|negative|sqrt|x itself")


class SqInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


case("sq_forward_in_place", check_square, SqInPlace, r"in place|mul_|new tensor")
case("sq_grad_is_y", check_square, square_cls(lambda x, g: g * x * x), r"derivative|2 ?x|x²")


# ---- 04 · value_gradients ----------------------------------------------------------
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_align_end(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.shape[0] - t - 1:] += g
    return total


def vg_mean(read_grads):
    total = vg_right(read_grads)
    n = torch.arange(total.shape[0], 0, -1, dtype=total.dtype)[:, None]
    return total / n


def vg_own_read_only(read_grads):
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_in_place(read_grads):
    total = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        total[: t + 1] += g
    return total


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_align_end", check_value_gradients, vg_align_end, r"first|slot|rows 0|0\.\.t")
case("vg_mean", check_value_gradients, vg_mean, r"mean|sum|averag")
case("vg_own_read_only", check_value_gradients, vg_own_read_only,
     r"later|every read|t ?(>=|≥) ?j|own read")
case("vg_in_place_input", check_value_gradients, vg_in_place,
     r"in place|changed|modif|read_grads")



def vg_float32(read_grads):
    total = torch.zeros(read_grads[-1].shape)
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


case("vg_float32_zeros", check_value_gradients, vg_float32, r"dtype|float32|zeros_like")


# ---- 04 · Append -------------------------------------------------------------------
def append_cls(fwd=None, bwd=None):
    class Ap(torch.autograd.Function):
        @staticmethod
        def forward(ctx, top, value, buffer):
            if fwd is not None:
                return fwd(ctx, top, value, buffer)
            n = top.shape[1]
            buffer.data[:, n] = value
            ctx.n = n
            return buffer.data[:, : n + 1]

        @staticmethod
        def backward(ctx, grad):
            if bwd is not None:
                return bwd(ctx, grad)
            n = ctx.n
            return grad[:, :n], grad[:, n], None
    return Ap


def ap_cat(ctx, top, value, buffer):
    ctx.n = top.shape[1]
    return torch.cat([top, value[:, None]], 1)


def ap_batch_axis(ctx, top, value, buffer):
    n = top.shape[0]
    buffer.data[:, n] = value
    ctx.n = n
    return buffer.data[:, : n + 1]


RIGHT["append"] = (check_append, append_cls())
case("ap_value_grad_keepdim", check_append,
     append_cls(bwd=lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n:], None)),
     r"\[B, ?F\]|shape.*value|value.*shape|keep")
case("ap_cat_copy", check_append, append_cls(fwd=ap_cat), r"view|cop(y|ies)|buffer")
case("ap_batch_axis_n", check_append, append_cls(fwd=ap_batch_axis),
     r"dim 1|batch size|size\(1\)|top\.shape\[1\]")
case("ap_backward_reversed", check_append,
     append_cls(bwd=lambda ctx, g: (g[:, 1:], g[:, 0], None)),
     r"first n|last slot|slot n|value.*slot")



def ap_no_data(ctx, top, value, buffer):
    n = top.shape[1]
    buffer[:, n] = value
    ctx.n = n
    return buffer[:, : n + 1]


case("ap_no_data_alias", check_append, append_cls(fwd=ap_no_data),
     r"\.data|version")


# ---- 04 · weight_gradient ----------------------------------------------------------
RIGHT["weight_gradient"] = (check_weight_gradient,
                            lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1))
case("wg_transposed", check_weight_gradient,
     lambda xs, gs: xs.flatten(0, 1).T @ gs.flatten(0, 1), r"transpos|D_out, ?D_in|G\^?T ?X")
case("wg_mean", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.shape[0] * xs.shape[1]),
     r"mean|sum|divid")
case("wg_rows_mismatched", check_weight_gradient,
     lambda xs, gs: gs.transpose(0, 1).flatten(0, 1).T @ xs.flatten(0, 1),
     r"same (way|order)|row|flatten|pair")
case("wg_cross_steps", check_weight_gradient,
     lambda xs, gs: torch.einsum("tbo,sbi->oi", gs, xs), r"same step|cross|pair|outer")

case("wg_last_step_only", check_weight_gradient,
     lambda xs, gs: gs[-1].T @ xs[-1], r"every step|all steps|last step")


# ---- 05 · reach --------------------------------------------------------------------
def reach_fn(window=None, xl=None, feedback=None):
    def reach(memory, n_layers, span, position=0):
        if memory == "window":
            return window(n_layers, span) if window else n_layers * span
        if memory == "XL":
            return xl(n_layers, span, position) if xl else n_layers * span + position
        return feedback(n_layers, span) if feedback else math.inf
    return reach


RIGHT["reach"] = (check_reach, reach_fn())
case("re_xl_position_per_layer", check_reach, reach_fn(xl=lambda L, M, p: L * (M + p)),
     r"once|per layer|position")
case("re_window_counts_itself", check_reach, reach_fn(window=lambda L, W: L * (W + 1)),
     r"itself|\+ ?1|not count")
case("re_feedback_one_hop", check_reach, reach_fn(feedback=lambda L, W: W),
     r"unbounded|inf|chain|t ?- ?2")
case("re_xl_no_position", check_reach, reach_fn(xl=lambda L, M, p: L * M),
     r"position|own segment")


# ---- 05 · make_recall --------------------------------------------------------------
def recall_fn(ge=False, all_rows=False, before=False, label_x=False, no_clone=False):
    def make(filler, values, positions):
        n, t = filler.shape
        x = filler if no_clone else filler.clone()
        if all_rows:
            x[:, positions] = values
        else:
            x[torch.arange(n, device=filler.device), positions] = values
        cols = torch.arange(t, device=filler.device)[None]
        p = positions[:, None]
        mask = cols >= p if ge else (cols < p if before else cols > p)
        y = torch.where(mask, x if label_x else values[:, None], torch.tensor(IGNORE))
        return x, y
    return make


RIGHT["make_recall"] = (check_make_recall, recall_fn())
case("mr_label_at_p", check_make_recall, recall_fn(ge=True), r"strictly|own position|\] ?\+ ?1|>=")
case("mr_all_rows", check_make_recall, recall_fn(all_rows=True),
     r"row|each row|one entry per row|other rows")
case("mr_mask_before", check_make_recall, recall_fn(before=True),
     r"after|before|flip|revers")
case("mr_label_filler", check_make_recall, recall_fn(label_x=True),
     r"value|filler|labels? .*(x|token)")

case("mr_no_clone", check_make_recall, recall_fn(no_clone=True), r"clone|filler.*(chang|modif)")


# ---- 05 · accuracy_by_distance -----------------------------------------------------
def acc_fn(shift=0, nan_zero=False, denom_all=False, dist_is_t=False, dtype=None):
    def acc(logits, y, max_distance):
        lab = y != IGNORE
        d = lab.cumsum(1) + shift
        if dist_is_t:
            d = torch.arange(y.shape[1]).expand_as(y)
        hit = (logits.argmax(-1) == y) & lab
        out = torch.full((max_distance,), math.nan, dtype=dtype or logits.dtype, device=logits.device)
        for dd in range(1, max_distance + 1):
            sel = lab & (d == dd)
            n = int(sel.sum())
            if denom_all:
                out[dd - 1] = hit[sel].sum() / max(int(lab.sum()), 1) if n else math.nan
            elif n or nan_zero:
                out[dd - 1] = hit[sel].sum() / max(n, 1)
        return out
    return acc


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, acc_fn())
case("ad_distance_from_zero", check_accuracy_by_distance, acc_fn(shift=-1),
     r"d ?- ?1|entry|off by one|p ?\+ ?1|distance 1")
case("ad_nan_to_zero", check_accuracy_by_distance, acc_fn(nan_zero=True), r"NaN|nan")
case("ad_denominator_all", check_accuracy_by_distance, acc_fn(denom_all=True),
     r"denominator|positions at|each distance|per distance")
case("ad_distance_is_t", check_accuracy_by_distance, acc_fn(dist_is_t=True),
     r"position|p\b|t ?- ?p|value")

case("ad_float32_result", check_accuracy_by_distance, acc_fn(dtype=torch.float32),
     r"dtype|float32|float64")


# ---- 05 · cache_bytes --------------------------------------------------------------
def pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return list(cache)


def cb5_right(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in pairs(cache))


def cb5_storage(cache):
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes()
               for k, v in pairs(cache))


def cb5_kvstate_double(cache):
    if isinstance(cache, KVState):
        return 2 * cache.kv.nbytes
    return cb5_right(cache)


def cb5_numel(cache):
    return sum(k.numel() + v.numel() for k, v in pairs(cache))


def cb5_rel_keys(cache):
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(r.nbytes for r in cache.rel_keys if r is not None)
    return cb5_right(cache) + extra


RIGHT["cache_bytes05"] = (check_cache_bytes05, cb5_right)
case("cb5_storage", check_cache_bytes05, cb5_storage, r"storage|view|spare|own entries")
case("cb5_kvstate_double", check_cache_bytes05, cb5_kvstate_double,
     r"KVState.*(both|keys and values|already)|twice|2 ?x|double")
case("cb5_numel", check_cache_bytes05, cb5_numel, r"element_size|bytes per|numel")
case("cb5_rel_keys", check_cache_bytes05, cb5_rel_keys, r"rel_keys|relative")


def cb5_xl_as_list(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


case("cb5_xl_as_list", check_cache_bytes05, cb5_xl_as_list, r"XLCache|\.kv|rel_keys")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
