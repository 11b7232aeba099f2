"""Learner trial 16 (b): notebooks 03, 04 and 05, three new slips per exercise."""

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
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---- 03 · memory_vector --------------------------------------------------------------
def mv_right(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax over the layers
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_no_embedding(xs, w):  # mixes the layers' outputs only, not the embedding xs[0]
    return (torch.softmax(w[1:], 0)[:, None, None] * xs[1:]).sum(0)


def mv_inplace(xs, w):  # scales the learner's xs in place
    return xs.mul_(torch.softmax(w, 0)[:, None, None]).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"softmax|sum to 1|normali")
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"embedding|xs\[0\]")
case("mv_inplace", check_memory_vector, mv_inplace, r"in[- ]place|modif|chang")


# ---- 03 · relative_bias --------------------------------------------------------------
def rb_right(table, s):
    d = (s - torch.arange(s)).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_newest_first(table, s):  # keys read newest first: key j at distance j + 1
    d = (torch.arange(s) + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_wrap(table, s):  # distances past max_distance wrap around instead of clamping
    d = s - torch.arange(s)
    return table[:, (d - 1) % table.size(1)]


def rb_no_minus_one(table, s):  # table[:, d] for distance d, clamped so it never fails
    d = (s - torch.arange(s)).clamp(max=table.size(1) - 1)
    return table[:, d]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first, r"oldest|newest|order|revers")
case("rb_wrap", check_relative_bias, rb_wrap, r"clamp|beyond|past max_distance|last bias")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one,
     r"d - 1|d-1|off by one|one entry|distance 1.*entry 0|entry 0")


# ---- 03 · feedback_attention ----------------------------------------------------------
def fa_right(q, k, v, bias):
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_scale_by_s(q, k, v, bias):  # divides by sqrt(S), the number of keys
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(max(k.size(2), 1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # adds the bias to the weights
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_empty_returns_q(q, k, v, bias):  # "nothing to read: pass the query through"
    if k.size(2) == 0:
        return q.clone()
    return fa_right(q, k, v, bias)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_scale_by_s", check_feedback_attention, fa_scale_by_s, r"sqrt|scal|d_h")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"bias.*(before|inside|score)|(score|before).*bias")
case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q,
     r"zero|empty|S == 0|S = 0")


# ---- 03 · token_loop -----------------------------------------------------------------
def _loop(model, tokens, head_on_memory=False, replace=False, from_embedding=False):
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(x[:, t] if from_embedding else h, k, v)
            xs.append(h)
        m = model.mix(torch.stack(xs))
        outs.append(m if head_on_memory else h)
        nk, nv = model.project_memory(m[:, None])
        if replace:
            keys, values = list(nk), list(nv)
        else:
            keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
            values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_head_on_memory(model, tokens):  # logits from the memory vector, not the top layer
    return _loop(model, tokens, head_on_memory=True)


def tl_replace(model, tokens):  # the cache replaced by the newest step, not appended to
    return _loop(model, tokens, replace=True)


def tl_from_embedding(model, tokens):  # every layer fed the embedding, not the layer below
    return _loop(model, tokens, from_embedding=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_head_on_memory", check_token_loop, tl_head_on_memory,
     r"memory vector|top layer|last layer")
case("tl_replace", check_token_loop, tl_replace, r"append|replac|only the (last|newest)|grow")
case("tl_from_embedding", check_token_loop, tl_from_embedding,
     r"layer below|previous layer|embedding")


# ---- 03 · cache_bytes ----------------------------------------------------------------
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    one = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * one, 2 * one


def cb_counts_memory(n_layers, d_model, n_tokens, bytes_per_number):  # 3 D: memory too
    one = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * one, 3 * one


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values
    one = d_model * n_tokens * bytes_per_number
    return n_layers * one, one


def cb_floats(n_layers, d_model, n_tokens, bytes_per_number):  # float arithmetic
    one = d_model * n_tokens * bytes_per_number / 1.0
    return 2.0 * n_layers * one, 2.0 * one


RIGHT["cache_bytes03"] = (check_cache_bytes, cb_right)
case("cb_counts_memory", check_cache_bytes, cb_counts_memory, r"memory vector|3 ?D")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"value")
case("cb_floats", check_cache_bytes, cb_floats, r"\bint")


# ---- 04 · shared_kv ------------------------------------------------------------------
def skv_right(m, norm, kv, n_heads):
    b, d = m.shape
    k, v = kv(norm(m)).split(d, -1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def skv_no_norm(m, norm, kv, n_heads):  # projects m without the LayerNorm
    return skv_right(m, torch.nn.Identity(), kv, n_heads)


def skv_interleaved(m, norm, kv, n_heads):  # even outputs keys, odd outputs values
    b, d = m.shape
    y = kv(norm(m))
    k, v = y[:, 0::2], y[:, 1::2]
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def skv_heads_strided(m, norm, kv, n_heads):  # heads as [D_h, H], then transposed
    b, d = m.shape
    k, v = kv(norm(m)).split(d, -1)
    return (k.reshape(b, d // n_heads, n_heads).transpose(1, 2),
            v.reshape(b, d // n_heads, n_heads).transpose(1, 2))


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"norm")
case("skv_interleaved", check_shared_kv, skv_interleaved,
     r"first D|last D|halves|interleav|even|split")
case("skv_heads_strided", check_shared_kv, skv_heads_strided, r"head")


# ---- 04 · Square ---------------------------------------------------------------------
class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


class SqNoTwo(SquareRight):  # d(x^2)/dx written as x
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x * grad_output


class SqInplace(SquareRight):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul_(x)


class SqUsesOutput(torch.autograd.Function):  # saves the output, backward 2 * y * g
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y * grad_output


RIGHT["square"] = (check_square, SquareRight)
case("sq_no_two", check_square, SqNoTwo, r"\b2\b|factor|twice|2x|2 \* x")
case("sq_inplace", check_square, SqInplace, r"in[- ]place|modif|chang")
case("sq_uses_output", check_square, SqUsesOutput, r"output|input x|saved")


# ---- 04 · value_gradients ------------------------------------------------------------
def vg_right(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_own_read(read_grads):  # only the read of its own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_mutates(read_grads):  # accumulates into the last read's gradient
    out = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        out[: t + 1] += g
    return out


def vg_suffix(read_grads):  # aligns each read with the last slots, not the first
    out = torch.zeros_like(read_grads[-1])
    T = len(read_grads)
    for t, g in enumerate(read_grads):
        out[T - 1 - t:] += g
    return out


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read", check_value_gradients, vg_own_read, r"later|every read|all.*read|t ?≥ ?j")
case("vg_mutates", check_value_gradients, vg_mutates, r"read_grads|unchanged|in[- ]place|modif")
case("vg_suffix", check_value_gradients, vg_suffix, r"slot|first|prefix|0\.\.t|align")


# ---- 04 · Append ---------------------------------------------------------------------
class AppendRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApCat(AppendRight):  # torch.cat: right values, but a copy, buffer unused
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)


class ApFirstSlot(AppendRight):  # the value's gradient taken from slot 0
    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApNoData(AppendRight):  # writes through `buffer`, not `buffer.data`
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]


RIGHT["append"] = (check_append, AppendRight)
case("ap_cat", check_append, ApCat, r"view|cop|buffer")
case("ap_first_slot", check_append, ApFirstSlot, r"newest|last slot|slot n|grad\[:, n\]")
case("ap_no_data", check_append, ApNoData, r"\.data|version")


# ---- 04 · weight_gradient ------------------------------------------------------------
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mean(xs, gs):  # averaged over the steps
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / xs.size(0)


def wg_misaligned(xs, gs):  # gs flattened batch-major, xs step-major
    return gs.transpose(0, 1).reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, wg_transposed, r"transpos|\[D_out, D_in\]|G\^?T")
case("wg_mean", check_weight_gradient, wg_mean, r"sum|mean|averag|divid")
case("wg_misaligned", check_weight_gradient, wg_misaligned,
     r"order|pair|align|same (step|row)|flatten")


# ---- 05 · reach ----------------------------------------------------------------------
def reach_right(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position,
            "feedback": math.inf}[memory]


def reach_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    return reach_right(memory, n_layers, span, position) + 1


def reach_xl_worst(memory, n_layers, span, position=0):  # XL at the segment's last query
    if memory == "XL":
        return n_layers * span + span - 1
    return reach_right(memory, n_layers, span, position)


def reach_feedback_window(memory, n_layers, span, position=0):  # feedback like a window
    if memory == "feedback":
        return n_layers * span
    return reach_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach_right)
case("reach_plus_one", check_reach, reach_plus_one, r"itself|\+ ?1|one too")
case("reach_xl_worst", check_reach, reach_xl_worst, r"position")
case("reach_feedback_window", check_reach, reach_feedback_window, r"inf|unbounded")


# ---- 05 · make_recall ----------------------------------------------------------------
def mr_right(filler, values, positions):
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


def mr_label_at_p(filler, values, positions):  # labels from p on, p included
    x, _ = mr_right(filler, values, positions)
    at = torch.arange(filler.size(1), device=filler.device)[None] >= positions[:, None]
    return x, torch.where(at, values[:, None], torch.full_like(filler, IGNORE))


def mr_mutates_filler(filler, values, positions):  # writes into filler itself
    _, y = mr_right(filler, values, positions)
    filler[torch.arange(filler.size(0), device=filler.device), positions] = values
    return filler, y


def mr_column_index(filler, values, positions):  # x[:, positions]: every row, every p
    _, y = mr_right(filler, values, positions)
    x = filler.clone()
    x[:, positions] = values
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_label_at_p", check_make_recall, mr_label_at_p, r"after|p ?\+ ?1|the value's own|itself")
case("mr_mutates_filler", check_make_recall, mr_mutates_filler,
     r"filler.*(chang|modif|in[- ]place)|clone|copy")
case("mr_column_index", check_make_recall, mr_column_index,
     r"row|every position|x\[:, positions\]|its own")


# ---- 05 · accuracy_by_distance -------------------------------------------------------
def _abd(logits, y, max_distance, shift=1, empty=math.nan, dtype=None):
    labelled = y != IGNORE
    first = labelled.float().argmax(1)
    d = torch.arange(y.size(1), device=y.device)[None] - (first[:, None] - shift)  # where y is
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), empty, dtype=dtype or logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_right(logits, y, max_distance):
    return _abd(logits, y, max_distance)


def ad_from_first_label(logits, y, max_distance):  # d measured from p + 1, not p
    return _abd(logits, y, max_distance, shift=0)


def ad_zero_not_nan(logits, y, max_distance):  # 0 where nothing lies at d
    return _abd(logits, y, max_distance, empty=0.0)


def ad_float32(logits, y, max_distance):  # default dtype, not logits.dtype
    return _abd(logits, y, max_distance, dtype=torch.float32)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_from_first_label", check_accuracy_by_distance, ad_from_first_label,
     r"p ?\+ ?1|first labelled|off by one|shift")
case("ad_zero_not_nan", check_accuracy_by_distance, ad_zero_not_nan, r"NaN|nan")
case("ad_float32", check_accuracy_by_distance, ad_float32, r"dtype|float64|logits\.dtype")


# ---- 05 · cache_bytes ----------------------------------------------------------------
def _nb(t):
    return t.numel() * t.element_size()


def cbx_right(cache):
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(_nb(k) + _nb(v) for k, v in pairs)


def cbx_rel_keys(cache):  # XL: adds the relative-position keys
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(_nb(r) for r in cache.rel_keys if r is not None)
    return cbx_right(cache) + extra


def cbx_storage(cache):  # the storage behind each tensor, spare room included
    if isinstance(cache, KVState):
        return cache.kv.untyped_storage().nbytes()
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in pairs)


def cbx_keys_only(cache):  # only the keys
    if isinstance(cache, KVState):
        return _nb(cache.kv[0])
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(_nb(k) for k, v in pairs)


RIGHT["cache_bytes05"] = (check_cache_bytes05, cbx_right)
case("cbx_rel_keys", check_cache_bytes05, cbx_rel_keys, r"rel_keys|relative")
case("cbx_storage", check_cache_bytes05, cbx_storage, r"storage|capacity|spare|room")
case("cbx_keys_only", check_cache_bytes05, cbx_keys_only, r"value")


# ---- second batch: one more slip per exercise ----------------------------------------
def mv_raw_logits(xs, w):  # the logits w used as weights, no softmax
    return torch.einsum("l,lbd->bd", w, xs)


def rb_flip_prefix(table, s):  # first s entries reversed: no clamp for s > max_distance
    return table[:, :s].flip(-1)


def fa_reads_keys(q, k, v, bias):  # weights applied to the keys
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), k)


def tl_detach_memory(model, tokens):  # detaches each memory vector before projecting it
    mix = model.mix

    class Detached(torch.nn.Module):
        def forward(self, stacked):
            return mix(stacked).detach()

    model.mix = Detached()
    try:
        return _loop(model, tokens)
    finally:
        model.mix = mix


def cb_numbers(n_layers, d_model, n_tokens, bytes_per_number):  # counts numbers, not bytes
    return 2 * n_layers * d_model * n_tokens, 2 * d_model * n_tokens


def skv_swapped(m, norm, kv, n_heads):  # values first
    k, v = skv_right(m, norm, kv, n_heads)
    return v, k


class SqNoGradOutput(SquareRight):  # backward ignores grad_output
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


def vg_last_read_only(read_grads):  # "the last read covers every slot"
    return read_grads[-1].clone()


class ApValueKeepdim(AppendRight):  # value's gradient keeps the slot axis: [B, 1, F]
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:ctx.n + 1], None


def wg_product_of_sums(xs, gs):  # sums over steps first, then one outer product
    return gs.sum(0).T @ xs.sum(0)


def reach_window_no_layers(memory, n_layers, span, position=0):  # window: W, not L * W
    if memory == "window":
        return span
    return reach_right(memory, n_layers, span, position)


def mr_y_float(filler, values, positions):  # y built with a float fill: float labels
    x, y = mr_right(filler, values, positions)
    return x, y.float()


def ad_divide_by_n(logits, y, max_distance):  # hits at d over all N rows
    labelled = y != IGNORE
    first = labelled.float().argmax(1)
    d = torch.arange(y.size(1))[None] - (first[:, None] - 1)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().sum() / y.size(0)
    return out


def cbx_one_layer(cache):  # the first layer's keys and values only
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    k, v = pairs[0]
    return _nb(k) + _nb(v)


case("mv_raw_logits", check_memory_vector, mv_raw_logits, r"softmax")
case("rb_flip_prefix", check_relative_bias, rb_flip_prefix, r"clamp|beyond|max_distance")
case("fa_reads_keys", check_feedback_attention, fa_reads_keys, r"\bv\b|values? ")
case("tl_detach_memory", check_token_loop, tl_detach_memory, r"detach|gradient")
case("cb_numbers", check_cache_bytes, cb_numbers, r"bytes_per_number|bytes per number")
case("skv_swapped", check_shared_kv, skv_swapped, r"swap|first D.*keys|keys first")
case("sq_no_grad_output", check_square, SqNoGradOutput, r"grad_output|chain")
case("vg_last_read_only", check_value_gradients, vg_last_read_only,
     r"every read|all.*reads|earlier reads|sum")
case("ap_value_keepdim", check_append, ApValueKeepdim, r"\[B, F\]|shape|slot axis|1, F")
case("wg_product_of_sums", check_weight_gradient, wg_product_of_sums,
     r"summed over the steps before|cross terms|product of (the )?sums")
case("reach_window_no_layers", check_reach, reach_window_no_layers, r"layer")
case("mr_y_float", check_make_recall, mr_y_float, r"dtype|long|int|float")
case("ad_divide_by_n", check_accuracy_by_distance, ad_divide_by_n,
     r"rows? (at|with)|labelled position|denominator|N\b|all rows")
case("cbx_one_layer", check_cache_bytes05, cbx_one_layer, r"layer")


# ---- third batch ---------------------------------------------------------------------
def mv_normalized(xs, w):  # w / w.sum() instead of a softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def rb_clamp_short(table, s):  # clamps at max_distance - 1: far keys get the second-last entry
    d = (s - torch.arange(s)).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


def fa_scale_dmodel(q, k, v, bias):  # sqrt(d_model) = sqrt(H * D_h)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(1) * q.size(2)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_unsqueezed(q, k, v, bias):  # bias[:, None]: [H, 1, S] against [B, H, S]
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def tl_project_top(model, tokens):  # projects the top layer's output, not the mix m
    mix = model.mix

    class Top(torch.nn.Module):
        def forward(self, stacked):
            return stacked[-1]

    model.mix = Top()
    try:
        return _loop(model, tokens)
    finally:
        model.mix = mix


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    a, b = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return b, a


def skv_chunk_batch(m, norm, kv, n_heads):  # chunk(2) along dim 0, the batch
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2)
    return k.reshape(b, n_heads, -1), v.reshape(b, n_heads, -1)


class SqFloat(SquareRight):  # forward casts to float32
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).float()


def vg_sum_slots(read_grads):  # sums each read over its slots
    return torch.stack([g.sum(0) for g in read_grads])


class ApWholeBuffer(AppendRight):  # returns the whole buffer, not the first n + 1 slots
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data


def wg_last_step(xs, gs):  # the last step's product only
    return gs[-1].T @ xs[-1]


def reach_xl_per_layer_position(memory, n_layers, span, position=0):  # L * (M + i)
    if memory == "XL":
        return n_layers * (span + position)
    return reach_right(memory, n_layers, span, position)


def mr_last_unlabelled(filler, values, positions):  # labels stop one short of the end
    x, y = mr_right(filler, values, positions)
    y = y.clone()
    y[:, -1] = IGNORE
    return x, y


def ad_shared_p(logits, y, max_distance):  # one p for the batch: first labelled column
    labelled = y != IGNORE
    first = int(labelled.any(0).float().argmax())
    d = torch.arange(y.size(1))[None].expand_as(y) - (first - 1)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_float64(logits, y, max_distance):  # always float64
    return _abd(logits, y, max_distance, dtype=torch.float64)


def cbx_per_sequence(cache):  # per sequence: divided by the batch size
    if isinstance(cache, KVState):
        return cbx_right(cache) // cache.kv.size(1)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return cbx_right(cache) // next(iter(pairs))[0].size(0)


case("mv_normalized", check_memory_vector, mv_normalized, r"softmax")
case("rb_clamp_short", check_relative_bias, rb_clamp_short,
     r"last entry|max_distance - 1|clamp")
case("fa_scale_dmodel", check_feedback_attention, fa_scale_dmodel, r"d_h|d_head|head")
case("fa_bias_unsqueezed", check_feedback_attention, fa_bias_unsqueezed,
     r"bias.*(\[1, H, S\]|\[H, 1, S\]|broadcast|bias\[None\])")
case("tl_project_top", check_token_loop, tl_project_top, r"mix|memory vector")
case("cb_swapped", check_cache_bytes, cb_swapped, r"swap|order|transformer.*first")
case("skv_chunk_batch", check_shared_kv, skv_chunk_batch, r"dim|last axis|batch")
case("sq_float", check_square, SqFloat, r"dtype|float32|float\(\)")
case("vg_sum_slots", check_value_gradients, vg_sum_slots, r"slot|over the reads|sum")
case("ap_whole_buffer", check_append, ApWholeBuffer, r"n ?\+ ?1|prefix|first|whole")
case("wg_last_step", check_weight_gradient, wg_last_step, r"every step|all steps|last step")
case("reach_xl_per_layer_position", check_reach, reach_xl_per_layer_position,
     r"position.*once|L \* M \+ position|only once")
case("mr_last_unlabelled", check_make_recall, mr_last_unlabelled, r"last|every position")
case("ad_shared_p", check_accuracy_by_distance, ad_shared_p, r"each row|per row|own p")
case("ad_float64", check_accuracy_by_distance, ad_float64, r"dtype|logits\.dtype|float")
case("cbx_per_sequence", check_cache_bytes05, cbx_per_sequence,
     r"batch|sequence|\[B\] left out")


# ---- fourth batch: dtype shortcuts and a lost bias -----------------------------------
def mv_float(xs, w):  # softmax(w).float(): mixes in float32 whatever xs is
    return (torch.softmax(w, 0).float()[:, None, None] * xs.float()).sum(0)


def rb_float(table, s):  # bias returned as float32
    return rb_right(table, s).float()


def vg_zeros_default(read_grads):  # torch.zeros(T, F): float32 whatever the reads are
    out = torch.zeros(len(read_grads), read_grads[-1].size(-1))
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def skv_no_bias(m, norm, kv, n_heads):  # kv's weight split by hand, its bias forgotten
    b, d = m.shape
    y = norm(m)
    k, v = y @ kv.weight[:d].T, y @ kv.weight[d:].T
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def wg_float(xs, gs):  # computed in float32
    return gs.flatten(0, 1).float().T @ xs.flatten(0, 1).float()


case("mv_float", check_memory_vector, mv_float, r"dtype|float32|float\(\)")
case("rb_float", check_relative_bias, rb_float, r"dtype|float32|float\(\)")
case("vg_zeros_default", check_value_gradients, vg_zeros_default,
     r"dtype|float32|zeros_like")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")
case("wg_float", check_weight_gradient, wg_float, r"dtype|float32|float\(\)")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
