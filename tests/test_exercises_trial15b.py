"""Learner trial 15b: notebooks 03, 04 and 05, wrong answers a hurried learner writes."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes as check_cache_bytes5
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
IGNORE = -100

# ---------------------------------------------------------------- 03.1 memory_vector


def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_mean_of_weighted", check_memory_vector,
     lambda xs, w: (w.softmax(0)[:, None, None] * xs).mean(0), r"(?i)mean|sum")
case("mv_sigmoid", check_memory_vector,
     lambda xs, w: (w.sigmoid()[:, None, None] * xs).sum(0), r"(?i)softmax|sum to (one|1)")
case("mv_normalise_by_sum", check_memory_vector,
     lambda xs, w: (w / w.sum())[:, None, None].mul(xs).sum(0), r"(?i)softmax")
case("mv_skip_embedding", check_memory_vector,
     lambda xs, w: (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0), r"(?i)embedding|xs\[0\]")
case("mv_log_softmax", check_memory_vector,
     lambda xs, w: (w.log_softmax(0)[:, None, None] * xs).sum(0), r"(?i)log|softmax")
case("mv_softmax_of_product", check_memory_vector,
     lambda xs, w: ((w[:, None, None] * xs).softmax(0) * xs).sum(0), r"(?i)softmax.*(w|weight)")

# ---------------------------------------------------------------- 03.2 relative_bias


def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias,
     lambda t, s: t[:, torch.arange(1, s + 1).clamp(max=t.size(1)) - 1],
     r"(?i)order|oldest|revers|flip")
case("rb_column_d_not_d_minus_1", check_relative_bias,
     lambda t, s: t[:, torch.arange(s, 0, -1).clamp(max=t.size(1) - 1)],
     r"(?i)d\s*-\s*1|off by one|column")
case("rb_no_clamp", check_relative_bias,
     lambda t, s: t[:, torch.arange(s, 0, -1) - 1], r"(?i)clamp|max_distance")
case("rb_wrap_modulo", check_relative_bias,
     lambda t, s: t[:, (torch.arange(s, 0, -1) - 1) % t.size(1)],
     r"(?i)clamp|max_distance|last (column|bias)")
case("rb_float_arange", check_relative_bias,
     lambda t, s: t[:, torch.arange(float(s), 0, -1).clamp(max=t.size(1)) - 1],
     r"(?i)long|integer|dtype")
case("rb_first_columns_flipped", check_relative_bias,
     lambda t, s: t[:, :s].flip(-1), r"(?i)clamp|max_distance|beyond")

# ---------------------------------------------------------------- 03.3 feedback_attention


def _fa(scale=True, bias_after=False, scale_after_bias=False, axis=-1, by=None):
    def fa(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum("bhd,bhsd->bhs", q, k)
        d = q.size(-1)
        if by == "S":
            s = s / math.sqrt(k.size(2))
        elif by == "d":
            s = s / d
        elif scale and not scale_after_bias:
            s = s / math.sqrt(d)
        if not bias_after:
            s = s + bias
        if scale_after_bias:
            s = s / math.sqrt(d)
        p = s.softmax(axis)
        if bias_after:
            p = p + bias
        return torch.einsum("bhs,bhsd->bhd", p, v)
    return fa


RIGHT["feedback_attention"] = (check_feedback_attention, _fa())
case("fa_no_scale", check_feedback_attention, _fa(scale=False), r"(?i)sqrt|scal|√")
case("fa_scale_after_bias", check_feedback_attention, _fa(scale_after_bias=True),
     r"(?i)bias.*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")
case("fa_bias_after_softmax", check_feedback_attention, _fa(bias_after=True),
     r"(?i)bias.*(before|after|inside).*softmax|softmax.*bias")
case("fa_sqrt_of_S", check_feedback_attention, _fa(by="S"), r"(?i)D_h|head width|sqrt.*d")
case("fa_divide_by_dh", check_feedback_attention, _fa(by="d"), r"(?i)sqrt|square root|√")
case("fa_softmax_over_heads", check_feedback_attention, _fa(axis=1),
     r"(?i)softmax.*(axis|dim|keys|last)")


def fa_zeros_default_dtype(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return _fa()(q, k, v, bias)


case("fa_empty_default_dtype", check_feedback_attention, fa_zeros_default_dtype,
     r"(?i)dtype|zeros_like|float64|device")

# ---------------------------------------------------------------- 03.4 token_loop


def _loop(kind=None):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :0])
        keys, values = list(keys), list(values)
        tops = []
        for t in range(tokens.size(1)):
            e = x[:, t]
            outs, h = [e], e
            for i, layer in enumerate(model.layers):
                j = 0 if kind == "layer0_kv" else i
                inp = e if kind == "embed_each_layer" else h
                h = layer(inp, keys[j], values[j])
                outs.append(h)
            tops.append(h)
            if kind == "top_as_memory":
                m = h
            elif kind == "mix_layers_only":
                m = model.mix(torch.stack(outs[1:]))
            else:
                m = model.mix(torch.stack(outs))
            if kind == "head_on_memory":
                tops[-1] = m
            nk, nv = model.project_memory(m[:, None])
            if kind == "no_accumulate":
                keys, values = list(nk), list(nv)
            else:
                keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, nk)]
                values = [torch.cat([a, b], dim=2) for a, b in zip(values, nv)]
        return model.head(torch.stack(tops, dim=1))
    return token_loop


RIGHT["token_loop"] = (check_token_loop, _loop())
case("tl_no_accumulate", check_token_loop, _loop("no_accumulate"),
     r"(?i)(append|cat|accumulat|grow|all (the )?(previous|earlier))")
case("tl_layer0_kv_everywhere", check_token_loop, _loop("layer0_kv"),
     r"(?i)(each|own|its) layer'?s? (own )?(keys|projection)|first layer's keys")
case("tl_embedding_to_every_layer", check_token_loop, _loop("embed_each_layer"),
     r"(?i)(output|layer) below|output of layer|not chained")
case("tl_top_as_memory", check_token_loop, _loop("top_as_memory"),
     r"(?i)mix|memory vector")
case("tl_head_on_memory", check_token_loop, _loop("head_on_memory"),
     r"(?i)top (layer|output)|head.*(memory|mix)")
case("tl_mix_without_embedding", check_token_loop, _loop("mix_layers_only"),
     r"(?i)embedding|L\s*\+\s*1")

# ---------------------------------------------------------------- 03.5 cache_bytes


def cb_right(n_layers, d_model, n_tokens, b):
    return 2 * n_layers * d_model * n_tokens * b, 2 * d_model * n_tokens * b


RIGHT["cache_bytes"] = (check_cache_bytes, cb_right)
case("cb_feedback_counts_memory", check_cache_bytes,
     lambda L, D, T, b: (2 * L * D * T * b, 3 * D * T * b), r"(?i)memory vector|3\s*D|only")
case("cb_no_key_and_value", check_cache_bytes,
     lambda L, D, T, b: (L * D * T * b, D * T * b), r"(?i)key and (a )?value|2|twice")
case("cb_swapped", check_cache_bytes,
     lambda L, D, T, b: cb_right(L, D, T, b)[::-1], r"(?i)order|swap")
case("cb_float_division", check_cache_bytes,
     lambda L, D, T, b: tuple(x / 1 for x in cb_right(L, D, T, b)), r"(?i)\bint")
case("cb_bits", check_cache_bytes,
     lambda L, D, T, b: tuple(8 * x for x in cb_right(L, D, T, b)), r"(?i)bits|8")
case("cb_layers_plus_embedding", check_cache_bytes,
     lambda L, D, T, b: (2 * (L + 1) * D * T * b, 2 * D * T * b), r"(?i)layer|L\s*\+\s*1")
case("cb_feedback_per_layer", check_cache_bytes,
     lambda L, D, T, b: (2 * L * D * T * b, 2 * L * D * T * b), r"(?i)shared|one key")

# ---------------------------------------------------------------- 04.1 shared_kv


def sk_right(m, norm, kv, n_heads):
    y = kv(norm(m))
    y = y.view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def sk_heads_first(m, norm, kv, n_heads):
    y = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return y[:, :, 0], y[:, :, 1]


def sk_chunk_batch(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, dim=-1)
    b = m.size(0)
    return k.reshape(b, -1, n_heads).transpose(1, 2), v.reshape(b, -1, n_heads).transpose(1, 2)


RIGHT["shared_kv"] = (check_shared_kv, sk_right)
case("sk_no_norm", check_shared_kv, lambda m, n, kv, h: sk_right(m, lambda x: x, kv, h),
     r"(?i)norm")
case("sk_no_bias", check_shared_kv,
     lambda m, n, kv, h: sk_right(m, n, lambda x: F.linear(x, kv.weight), h), r"(?i)bias")
case("sk_swap_k_v", check_shared_kv, lambda m, n, kv, h: sk_right(m, n, kv, h)[::-1],
     r"(?i)first .*keys|swap|order")
case("sk_heads_first", check_shared_kv, sk_heads_first, r"(?i)view|order|head-major|\[B, 2")
case("sk_head_interleaved", check_shared_kv, sk_chunk_batch,
     r"(?i)contiguous|head-major|interleav|D_h, H")


def sk_norm_each_half(m, norm, kv, n_heads):
    k, v = kv(m).chunk(2, dim=-1)
    b = m.size(0)
    return norm(k).view(b, n_heads, -1), norm(v).view(b, n_heads, -1)


case("sk_norm_after_projection", check_shared_kv, sk_norm_each_half,
     r"(?i)norm.*(before|first|then)")

# ---------------------------------------------------------------- 04.2 Square


def _square(kind=None):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.mul_(x) if kind == "inplace" else x * x
            ctx.save_for_backward(y if kind == "save_y" else x)
            return y

        @staticmethod
        def backward(ctx, grad_output):
            if kind == "unpack":
                x = ctx.saved_tensors
                return grad_output * 2 * x
            (x,) = ctx.saved_tensors
            if kind == "no_grad_output":
                return 2 * x
            if kind == "no_two":
                return grad_output * x
            if kind == "save_y":
                return grad_output * 2 * x
            if kind == "extra_none":
                return grad_output * 2 * x, None
            if kind == "mean_grad":
                return grad_output.mean() * 2 * x
            return grad_output * 2 * x
    return Square


RIGHT["square"] = (check_square, _square())
case("sq_no_grad_output", check_square, _square("no_grad_output"),
     r"(?i)grad_output|chain rule")
case("sq_missing_two", check_square, _square("no_two"), r"(?i)2\s*x|factor|twice")
case("sq_saves_y", check_square, _square("save_y"), r"(?i)sav.*(x|input)|y instead")
case("sq_saved_tensors_tuple", check_square, _square("unpack"),
     r"(?i)saved_tensors.*tuple|unpack|\(x,\)")
# a trailing None beyond the inputs is allowed by torch: a right answer, not a case
RIGHT["square_extra_none"] = (check_square, _square("extra_none"))
case("sq_forward_in_place", check_square, _square("inplace"),
     r"(?i)in place|in-place|mul_|modif")
case("sq_mean_of_grad", check_square, _square("mean_grad"), r"(?i)grad_output|element")

# ---------------------------------------------------------------- 04.3 value_gradients


def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_align_end(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_own_read_only(read_grads):
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_average(read_grads):
    total = vg_right(read_grads)
    n = len(read_grads)
    return total / torch.arange(n, 0, -1, dtype=total.dtype)[:, None]


def vg_into_last(read_grads):
    total = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        total[: t + 1] += g
    return total


def vg_slot_t(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g[t]
    return total


def vg_first_read_only(read_grads):
    return torch.stack([read_grads[-1][j] for j in range(len(read_grads))])


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_align_to_end", check_value_gradients, vg_align_end, r"(?i)first t\s*\+\s*1|slot j")
case("vg_own_read_only", check_value_gradients, vg_own_read_only,
     r"(?i)every (later )?read|t\s*>=?\s*j|all (the )?reads|later")
case("vg_average", check_value_gradients, vg_average, r"(?i)sum|mean|averag")
case("vg_adds_into_input", check_value_gradients, vg_into_last,
     r"(?i)input|read_grads|caller|in place")
case("vg_slot_t_not_j", check_value_gradients, vg_slot_t, r"(?i)slot|row j|g\[t\]")
case("vg_last_read_only", check_value_gradients, vg_first_read_only,
     r"(?i)every read|all (the )?reads|last read")

# ---------------------------------------------------------------- 04.4 Append


def _append(kind=None):
    class Append(torch.autograd.Function):
        @staticmethod
        def forward(ctx, top, value, buffer):
            n = top.size(0) if kind == "batch_axis" else top.size(1)
            if kind == "cat":
                ctx.n = n
                return torch.cat([top, value[:, None]], dim=1)
            buffer[:, n] = value
            ctx.n = n
            return buffer.data[:, : n + 1]

        @staticmethod
        def backward(ctx, grad):
            n = ctx.n
            if kind == "swap":
                return grad[:, n], grad[:, :n], None
            if kind == "keepdim":
                return grad[:, :n], grad[:, n:n + 1], None
            if kind == "two_grads":
                return grad[:, :n], grad[:, n]
            if kind == "value_first":
                return grad[:, 1:], grad[:, 0], None
            if kind == "clone_top_only":
                return grad[:, :n].clone(), grad[:, -1].clone(), None
            return grad[:, :n], grad[:, n], None
    return Append


RIGHT["append"] = (check_append, _append())
case("ap_cat_copy", check_append, _append("cat"), r"(?i)copy|view|buffer")
case("ap_n_from_batch_axis", check_append, _append("batch_axis"),
     r"(?i)dim 1|time|batch|size\(1\)")
case("ap_value_grad_keepdim", check_append, _append("keepdim"),
     r"(?i)\[B, F\]|shape|slot n\b|squeeze|keep")
case("ap_backward_two_grads", check_append, _append("two_grads"),
     r"(?i)three|None for buffer|one per input")
case("ap_value_grad_slot0", check_append, _append("value_first"),
     r"(?i)slot n|last slot|oldest first")
case("ap_swap_grads", check_append, _append("swap"), r"(?i)swap|order|top.*value")

# ---------------------------------------------------------------- 04.5 weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, lambda xs, gs: xs.flatten(0, 1).T @ gs.flatten(0, 1),
     r"(?i)G\^?T\s*X|transpos|\[D_out, D_in\]|order")
case("wg_mean", check_weight_gradient, lambda xs, gs: wg_right(xs, gs) / (xs.size(0) * xs.size(1)),
     r"(?i)mean|sum")
case("wg_flatten_orders_differ", check_weight_gradient,
     lambda xs, gs: gs.transpose(0, 1).flatten(0, 1).T @ xs.flatten(0, 1),
     r"(?i)same (way|order)|row r|pair|flatten")
case("wg_last_step", check_weight_gradient, lambda xs, gs: gs[-1].T @ xs[-1],
     r"(?i)every step|all steps|sum over (the )?steps|T\b")
case("wg_sum_before_product", check_weight_gradient,
     lambda xs, gs: gs.sum(0).T @ xs.sum(0), r"(?i)sum.*(before|first)|outer|pair|cross")
case("wg_mean_over_batch", check_weight_gradient,
     lambda xs, gs: wg_right(xs, gs) / xs.size(1), r"(?i)mean|batch|sum")

# ---------------------------------------------------------------- 05.1 reach


def _reach(win=lambda L, W: L * W, xl=lambda L, M, p: L * M + p, fb=lambda L, W: math.inf):
    def my_reach(memory, n_layers, span, position=0):
        if memory == "window":
            return win(n_layers, span)
        if memory == "XL":
            return xl(n_layers, span, position)
        return fb(n_layers, span)
    return my_reach


RIGHT["reach"] = (check_reach, _reach())
case("re_window_counts_itself", check_reach, _reach(win=lambda L, W: L * W + 1),
     r"(?i)itself|\+\s*1|does not count")
case("re_window_ignores_layers", check_reach, _reach(win=lambda L, W: W),
     r"(?i)one layer|L \* W")
case("re_xl_position_per_layer", check_reach, _reach(xl=lambda L, M, p: L * (M + p)),
     r"(?i)once|position")
case("re_xl_no_position", check_reach, _reach(xl=lambda L, M, p: L * M), r"(?i)position|segment")
case("re_xl_whole_segment", check_reach, _reach(xl=lambda L, M, p: L * M + M - 1),
     r"(?i)position|before it")
case("re_feedback_like_window", check_reach, _reach(fb=lambda L, W: L * W),
     r"(?i)inf|unbounded")
case("re_feedback_span", check_reach, _reach(fb=lambda L, W: W), r"(?i)inf|unbounded")

# ---------------------------------------------------------------- 05.2 make_recall


def _recall(kind=None):
    def my_make_recall(filler, values, positions):
        n, t = filler.shape
        x = filler if kind == "inplace" else filler.clone()
        if kind == "slice":
            x[:, positions] = values[:, None]
        else:
            x[torch.arange(n, device=filler.device), positions] = values
        cols = torch.arange(t, device=filler.device)[None, :]
        p = positions[:, None]
        after = {"ge": cols >= p, "lt": cols < p, "next": cols == p + 1}.get(kind, cols > p)
        fill = 0 if kind == "zero" else IGNORE
        if kind == "long_value":
            return x, torch.where(after, values[:, None].float(), float(IGNORE))
        return x, torch.where(after, values[:, None], torch.full_like(values[:, None], fill))
    return my_make_recall


RIGHT["make_recall"] = (check_make_recall, _recall())
case("mr_label_at_p_too", check_make_recall, _recall("ge"),
     r"(?i)strictly|own position|positions\[n\] \+ 1")
case("mr_labels_before", check_make_recall, _recall("lt"), r"(?i)after|before")
case("mr_only_next_position", check_make_recall, _recall("next"),
     r"(?i)every (later )?position|all positions after|only")
case("mr_zero_not_ignore", check_make_recall, _recall("zero"), r"(?i)IGNORE|-100")
case("mr_modifies_filler", check_make_recall, _recall("inplace"), r"(?i)filler|clone|copy|in place")
case("mr_slice_all_rows", check_make_recall, _recall("slice"),
     r"(?i)one entry per row|pair|index.*together|row")
case("mr_float_labels", check_make_recall, _recall("long_value"), r"(?i)dtype|long|int")

# ---------------------------------------------------------------- 05.3 accuracy_by_distance


def _acc(kind=None):
    def my_accuracy_by_distance(logits, y, max_distance):
        lab = y != IGNORE
        d = lab.long().cumsum(1)
        if kind == "p_is_first_labelled":
            d = d - 1
        pred = logits.argmax(-1)
        hits = pred == y
        out = []
        for k in range(1, max_distance + 1):
            at = lab & (d == k)
            if at.sum() == 0:
                out.append(0.0 if kind == "zero_empty" else float("nan"))
            else:
                out.append(hits[at].float().mean().item())
        res = torch.tensor(out, dtype=logits.dtype, device=logits.device)
        if kind == "overall":
            res = torch.full((max_distance,), hits[lab].float().mean().item())
        return res
    return my_accuracy_by_distance


def acc_argmax_time(logits, y, max_distance):
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hits = logits.argmax(1)[:, : y.size(1)] == y[:, : logits.size(2)]  # argmax over time
    out = [hits[(lab & (d == k))[:, : hits.size(1)]].float().mean().item()
           for k in range(1, max_distance + 1)]
    return torch.tensor(out)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, _acc())
case("ad_p_is_first_labelled", check_accuracy_by_distance, _acc("p_is_first_labelled"),
     r"(?i)off by one|d\s*-\s*1|p\s*\+\s*1|distance 1")
case("ad_zero_not_nan", check_accuracy_by_distance, _acc("zero_empty"), r"(?i)nan")
case("ad_overall_accuracy", check_accuracy_by_distance, _acc("overall"),
     r"(?i)per distance|each distance|same for every")


def acc_bincount(logits, y, max_distance):
    lab = y != IGNORE
    d = lab.long().cumsum(1)[lab]
    hit = (logits.argmax(-1) == y)[lab].float()
    n = torch.bincount(d, minlength=max_distance + 1)[1:]
    h = torch.bincount(d, weights=hit, minlength=max_distance + 1)[1:]
    return (h / n).float()


case("ad_bincount_no_cut", check_accuracy_by_distance, acc_bincount,
     r"(?i)max_distance|beyond|longer|more than")
case("ad_argmax_over_time", check_accuracy_by_distance, acc_argmax_time,
     r"(?i)argmax.*(axis|dim|vocab|last)")


def acc_float_mean_of_bools(logits, y, max_distance):
    res = _acc()(logits, y, max_distance)
    return res.double()


case("ad_float64_result", check_accuracy_by_distance, acc_float_mean_of_bools,
     r"(?i)dtype|float32|float64")

# ---------------------------------------------------------------- 05.4 cache_bytes


def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return list(cache)


def c5_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


def c5_keys_only(cache):
    return sum(k.nbytes for k, v in _pairs(cache))


def c5_first_layer(cache):
    k, v = _pairs(cache)[0]
    return k.nbytes + v.nbytes


def c5_numel(cache):
    return sum(k.numel() + v.numel() for k, v in _pairs(cache))


def c5_iterate_xlcache(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


def c5_method_not_called(cache):
    if isinstance(cache, KVState):
        return cache.nbytes
    return c5_right(cache)


def c5_xl_storage_values(cache):
    if isinstance(cache, XLCache):
        return sum(2 * b.storage_values.nbytes for b in cache.kv)
    return c5_right(cache)


def c5_kv_state_halved(cache):
    if isinstance(cache, KVState):
        return cache.kv.nbytes // 2
    return c5_right(cache)


RIGHT["cache_bytes_05"] = (check_cache_bytes5, c5_right)
case("c5_keys_only", check_cache_bytes5, c5_keys_only, r"(?i)values|keys and values")
case("c5_first_layer_only", check_cache_bytes5, c5_first_layer, r"(?i)every layer|all layers|layer")
case("c5_numel_not_bytes", check_cache_bytes5, c5_numel, r"(?i)element_size|bytes|numel")
case("c5_iterate_xlcache", check_cache_bytes5, c5_iterate_xlcache,
     r"(?i)XLCache.*\.kv|cache\.kv|KVBuffer")
case("c5_nbytes_not_called", check_cache_bytes5, c5_method_not_called,
     r"(?i)nbytes\(\)|call")
case("c5_xl_storage", check_cache_bytes5, c5_xl_storage_values,
     r"(?i)storage|spare|remembered|view")
case("c5_kvstate_halved", check_cache_bytes5, c5_kv_state_halved,
     r"(?i)keys only|values too")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
