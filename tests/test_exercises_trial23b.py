"""Learner trial 23b: notebooks 03, 04 and 05 (issue 28)."""
import math

import torch
import torch.nn.functional as F
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
case = trial_case(CASES, XFAIL)   # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 03 memory_vector
def mv_right(xs, w):
    return (w.softmax(dim=0)[:, None, None] * xs).sum(dim=0)


def mv_mean_not_weighted(xs, w):  # softmax applied, then mean instead of sum
    return (w.softmax(dim=0)[:, None, None] * xs).mean(dim=0)


def mv_top_layers_only(xs, w):  # drops the embedding: softmax over w[1:] on xs[1:]
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax
    return (w.sigmoid()[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_mean", check_memory_vector, mv_mean_not_weighted, r"mean|sum|L ?\+ ?1|divid")
case("mv_no_embedding", check_memory_vector, mv_top_layers_only, r"embedding|xs\[0\]")
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"softmax|sum to (one|1)")


# ---------------------------------------------------------------- 03 relative_bias
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_newest_first(table, s):  # distances 1..s instead of s..1
    d = torch.arange(1, s + 1).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_clamp_before_shift(table, s):  # clamps d-1 to max_distance, not max_distance-1 ... via %
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.shape[1]]


def rb_no_minus_one(table, s):  # distance d looked up at column d, clamped to the last
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1] - 1)
    return table[:, d]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first, r"oldest|order|revers|flip")
case("rb_wrap_modulo", check_relative_bias, rb_clamp_before_shift, r"clamp|max_distance|beyond")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one, r"d ?- ?1|column|off by one|shift")


# ---------------------------------------------------------------- 03 feedback_attention
def fa_right(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # bias added to the weights, not the scores
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    w = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1])).softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", w, v)


def fa_bias_scaled(q, k, v, bias):  # bias inside the 1/sqrt(d) scaling
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_transposed_heads(q, k, v, bias):  # bias flipped along keys (newest first)
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias.flip(-1)
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"bias.*(before|scores|inside)|softmax.*bias")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"bias.*(scal|sqrt|after)|sqrt.*bias")
case("fa_bias_flipped", check_feedback_attention, fa_bias_transposed_heads,
     r"bias.*(order|flip|revers|key)")


# ---------------------------------------------------------------- 03 token_loop
def _loop(model, tokens, top_only=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if len(keys) > 1 else 0
            outs.append(layer(outs[-1], keys[j], values[j]))
        tops.append(outs[-1])
        m = outs[-1] if top_only else model.mix(torch.stack(outs))
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([k, n], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_top_only(model, tokens):  # memory = top layer, as in a plain recurrent stack
    return _loop(model, tokens, top_only=True)


def tl_prepend(model, tokens):  # new keys put in front (newest first)
    x = model.embed(tokens)
    keys, values = (list(p) for p in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat([n, k], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([n, v], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_mix_before_head(model, tokens):  # head applied to the memory vector, not the top
    x = model.embed(tokens)
    keys, values = (list(p) for p in model.project_memory(x[:, :0]))
    ms = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        ms.append(m)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([k, n], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(ms, 1))


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_top_only", check_token_loop, tl_top_only, r"mix|all (the )?(layers|outputs)|embedding")
case("tl_prepend", check_token_loop, tl_prepend, r"order|append|oldest|end|front|prepend")
case("tl_head_on_memory", check_token_loop, tl_mix_before_head,
     r"head.*(top|last layer)|memory vector.*head|top")


# ---------------------------------------------------------------- 03 cache_bytes
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, 2 * d_model * n_tokens * bytes_per_number


def cb_three_d(n_layers, d_model, n_tokens, bytes_per_number):  # counts memory too (3D)
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, 3 * d_model * n_tokens * bytes_per_number


def cb_ratio(n_layers, d_model, n_tokens, bytes_per_number):  # feedback = transformer // L, float
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, t / n_layers


def cb_bits(n_layers, d_model, n_tokens, bytes_per_number):  # bits, not bytes
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number * 8
    return t, 2 * d_model * n_tokens * bytes_per_number * 8


RIGHT["cache_bytes03"] = (check_cache_bytes, cb_right)
case("cb_memory_counted", check_cache_bytes, cb_three_d, r"memory|3 ?D|keys and values only")
case("cb_float_ratio", check_cache_bytes, cb_ratio, r"int|float|/ |//")
case("cb_bits", check_cache_bytes, cb_bits, r"bits|8|bytes")


# ---------------------------------------------------------------- 04 shared_kv
def skv_right(m, norm, kv, n_heads):
    b, d = m.shape
    k, v = kv(norm(m)).view(b, 2, n_heads, d // n_heads).unbind(1)
    return k, v


def skv_heads_first(m, norm, kv, n_heads):  # view as [B, H, 2, D_h]: interleaves k and v
    b, d = m.shape
    k, v = kv(norm(m)).view(b, n_heads, 2, d // n_heads).unbind(2)
    return k, v


def skv_norm_after(m, norm, kv, n_heads):  # normalises the projection's halves, not m
    b, d = m.shape
    k, v = kv(m).view(b, 2, d).unbind(1)
    return norm(k).view(b, n_heads, -1), norm(v).view(b, n_heads, -1)


def skv_chunk_heads_dim(m, norm, kv, n_heads):  # heads cut with view(b, d_h, H).transpose
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, dim=-1)
    return (k.view(b, d // n_heads, n_heads).transpose(1, 2),
            v.view(b, d // n_heads, n_heads).transpose(1, 2))


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_heads_first", check_shared_kv, skv_heads_first, r"interleav|\[B, 2, H|keys.*first|order")
case("skv_norm_after", check_shared_kv, skv_norm_after, r"norm.*(before|first|m\b)|normaliz")
case("skv_head_major", check_shared_kv, skv_chunk_heads_dim, r"head-major|contiguous|transpose")


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


class SqSaveY(torch.autograd.Function):  # saves y = x², backward uses 2 * y
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g


class SqNoFactor2(torch.autograd.Function):  # derivative x instead of 2x
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x


class SqNoChain(torch.autograd.Function):  # backward returns dy/dx, ignores grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.pow(2)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x


RIGHT["square"] = (check_square, SqRight)
case("sq_save_output", check_square, SqSaveY, r"saved? (the )?(output|y)|save the input")
case("sq_no_factor_2", check_square, SqNoFactor2, r"factor 2|2 ?\* ?x|2x|half")
case("sq_no_chain_rule", check_square, SqNoChain, r"grad_output|chain rule")


# ---------------------------------------------------------------- 04 value_gradients
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_last_slot(read_grads):  # takes only the diagonal: value j's own read
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_last_rows(read_grads):  # adds read t into the LAST t+1 rows
    total = torch.zeros_like(read_grads[-1])
    T = len(read_grads)
    for t, g in enumerate(read_grads):
        total[T - t - 1:] += g
    return total


def vg_mean(read_grads):  # averages over the reads that saw the value
    total = torch.zeros_like(read_grads[-1])
    count = torch.zeros(len(read_grads), 1, dtype=total.dtype)
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
        count[: t + 1] += 1
    return total / count


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read_only", check_value_gradients, vg_last_slot,
     r"every (later )?read|later reads|all reads|t ?>= ?j")
case("vg_last_rows", check_value_gradients, vg_last_rows, r"first t ?\+ ?1|slots 0|last rows|align")
case("vg_mean", check_value_gradients, vg_mean, r"mean|average|sum|divid")


# ---------------------------------------------------------------- 04 Append
class ApRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApGradFirstSlot(torch.autograd.Function):  # value's gradient taken from slot 0
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApCloneOut(torch.autograd.Function):  # returns a copy (cat), not a view
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return torch.cat([top, value[:, None]], dim=1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApGradKeepdim(torch.autograd.Function):  # value's gradient kept as [B, 1, F]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


RIGHT["append"] = (check_append, ApRight)
case("ap_grad_first_slot", check_append, ApGradFirstSlot, r"slot n|last slot|slot 0|first")
case("ap_copy_not_view", check_append, ApCloneOut, r"view|cop(y|ies)|cat")
case("ap_grad_keepdim", check_append, ApGradKeepdim, r"\[B, F\]|shape|slot n\b|keep|squeeze")


# ---------------------------------------------------------------- 04 weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out], transposed for square layers
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mismatched_flatten(xs, gs):  # X flattened step-major, G batch-major
    return gs.transpose(0, 1).flatten(0, 1).T @ xs.flatten(0, 1)


def wg_batch_mean(xs, gs):  # mean over the batch (as a loss would)
    return (gs.transpose(1, 2) @ xs).mean(0) * xs.shape[0] / xs.shape[1]


def wg_last_step(xs, gs):  # only the batch sum of the last step
    return gs[-1].T @ xs[-1]


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_mismatched_flatten", check_weight_gradient, wg_mismatched_flatten,
     r"same way|same \(t, b\)|order|transpose")
case("wg_scaled_mean", check_weight_gradient, wg_batch_mean, r"mean|sum|divid|scal")
case("wg_last_step", check_weight_gradient, wg_last_step,
     r"every step|all steps|last step|sum over")


# ---------------------------------------------------------------- 05 reach
def reach_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def reach_xl_position_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return reach_right(memory, n_layers, span, position)


def reach_xl_no_position(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * span
    return reach_right(memory, n_layers, span, position)


def reach_feedback_span(memory, n_layers, span, position=0):  # only its direct span W
    if memory == "feedback":
        return span
    return reach_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach_right)
case("reach_xl_pos_per_layer", check_reach, reach_xl_position_per_layer,
     r"once|per layer|position.*(not|once)")
case("reach_xl_no_position", check_reach, reach_xl_no_position, r"position|own segment")
case("reach_feedback_span", check_reach, reach_feedback_span, r"inf|unbounded|chain|t ?- ?2")


# ---------------------------------------------------------------- 05 make_recall
def mr_right(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    y = torch.where(cols > positions[:, None], values[:, None], IGNORE)
    return x, y


def mr_broadcast_write(filler, values, positions):  # x[:, positions]: every row, every pos
    x = filler.clone()
    x[:, positions] = values
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    return x, torch.where(cols > positions[:, None], values[:, None], IGNORE)


def mr_label_value_position(filler, values, positions):  # >=: labels the value itself
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    return x, torch.where(cols >= positions[:, None], values[:, None], IGNORE)


def mr_labels_before(filler, values, positions):  # labels before p, IGNORE after (flip)
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    return x, torch.where(cols > positions[:, None], IGNORE, values[:, None])


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_broadcast_write", check_make_recall, mr_broadcast_write,
     r"one entry per row|every row|index.*rows|arange")
case("mr_label_at_value", check_make_recall, mr_label_value_position,
     r"strictly|own position|at the value|>=|p ?\+ ?1")
case("mr_flipped_labels", check_make_recall, mr_labels_before,
     r"before|flip|revers|swap|after")


# ---------------------------------------------------------------- 05 accuracy_by_distance
def ad_right(logits, y, max_distance):
    mask = y != IGNORE
    dist = mask.long().cumsum(1)
    hits = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for d in range(1, max_distance + 1):
        sel = mask & (dist == d)
        if sel.any():
            out[d - 1] = hits[sel].to(logits.dtype).mean()
    return out


def ad_from_first_label(logits, y, max_distance):  # d = t - first labelled t: d starts at 0
    mask = y != IGNORE
    first = mask.long().argmax(1, keepdim=True)
    dist = torch.arange(y.shape[1])[None] - first
    hits = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for d in range(1, max_distance + 1):
        sel = mask & (dist == d)
        if sel.any():
            out[d - 1] = hits[sel].to(logits.dtype).mean()
    return out


def ad_zero_not_nan(logits, y, max_distance):  # 0 where no position lies at d
    mask = y != IGNORE
    dist = mask.long().cumsum(1)
    hits = logits.argmax(-1) == y
    out = torch.zeros(max_distance, dtype=logits.dtype)
    for d in range(1, max_distance + 1):
        sel = mask & (dist == d)
        out[d - 1] = hits[sel].to(logits.dtype).sum() / sel.sum().clamp(min=1)
    return out


def ad_softmax_time(logits, y, max_distance):  # probabilities over the wrong axis first
    return ad_right(logits.softmax(dim=1), y, max_distance)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_from_first_label", check_accuracy_by_distance, ad_from_first_label,
     r"p ?\+ ?1|off by one|first labelled|distance 1")
case("ad_zero_not_nan", check_accuracy_by_distance, ad_zero_not_nan, r"NaN|nan")
case("ad_softmax_time", check_accuracy_by_distance, ad_softmax_time,
     r"softmax|vocab|axis|dim")


# ---------------------------------------------------------------- 05 cache_bytes
def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv,)]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return [tuple(p) for p in cache]


def cb5_right(cache):
    return sum(t.nbytes for p in _pairs(cache) for t in p)


def cb5_rel_keys(cache):  # XL: also counts the relative-key tables
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(r.nbytes for r in cache.rel_keys if r is not None)
    return cb5_right(cache) + extra


def cb5_keys_only(cache):  # transformer: counts k of each pair, forgets v
    if isinstance(cache, (KVState, XLCache)):
        return cb5_right(cache)
    return sum(k.nbytes for k, v in cache)


def cb5_kvstate_doubled(cache):  # KVState.kv read as the keys, times 2 for the values
    if isinstance(cache, KVState):
        return 2 * cache.kv.nbytes
    return cb5_right(cache)


RIGHT["cache_bytes05"] = (check_cache_bytes05, cb5_right)
case("cb5_rel_keys", check_cache_bytes05, cb5_rel_keys, r"rel(ative)?[_ ]keys|relative")
case("cb5_keys_only", check_cache_bytes05, cb5_keys_only, r"values|v\b|keys only")
case("cb5_kvstate_doubled", check_cache_bytes05, cb5_kvstate_doubled,
     r"KVState.*(both|already|keys (and|then) values)|twice|double")



# ---------------------------------------------------------------- more slips, all exercises
def mv_inplace(xs, w):  # scales the caller's xs in place
    return xs.mul_(w.softmax(0)[:, None, None]).sum(0)


def mv_normalised_logits(xs, w):  # w / w.sum() instead of a softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)


case("mv_inplace", check_memory_vector, mv_inplace, r"in place|in-place|mul_|changed")
case("mv_w_over_sum", check_memory_vector, mv_normalised_logits, r"softmax|w ?/ ?w\.sum|negative")


def rb_flip_shortcut(table, s):  # table[:, :s].flip: right only while s <= max_distance
    return table[:, :s].flip(-1)


def rb_negative_slice(table, s):  # table[:, -s:] ... reversed
    return table[:, -s:].flip(-1) if s else table[:, :0]


case("rb_flip_shortcut", check_relative_bias, rb_flip_shortcut, r"clamp|max_distance|beyond")
case("rb_negative_slice", check_relative_bias, rb_negative_slice, r"columns?|distances?|clamp")


def fa_empty_returns_q(q, k, v, bias):  # an empty memory hands the query back
    return q.clone() if k.shape[2] == 0 else fa_right(q, k, v, bias)


def fa_keys_as_values(q, k, v, bias):  # the weights multiply the keys, not the values
    return fa_right(q, k, k, bias)


case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q, r"zero|S ?== ?0|empty")
case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values, r"values?|\bv\b")


def tl_same_input(model, tokens):  # every layer reads the embedding, not the layer below
    x = model.embed(tokens)
    keys, values = (list(p) for p in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(x[:, t], keys[i], values[i]))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat([k, n], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_first_layer_keys(model, tokens):  # every layer reads layer 0's keys and values
    x = model.embed(tokens)
    keys, values = (list(p) for p in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for layer in model.layers:
            outs.append(layer(outs[-1], keys[0], values[0]))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat([k, n], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_layers_read_embedding", check_token_loop, tl_same_input,
     r"layer below|previous (layer|output)|outs\[-1\]")
case("tl_first_layer_keys", check_token_loop, tl_first_layer_keys,
     r"its own|each layer|keys\[i\]|layer's (own )?keys")


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    return cb_right(n_layers, d_model, n_tokens, bytes_per_number)[::-1]


def cb_feedback_per_layer(n_layers, d_model, n_tokens, bytes_per_number):  # L keys, one value
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, (n_layers + 1) * d_model * n_tokens * bytes_per_number


case("cb_swapped", check_cache_bytes, cb_swapped, r"order|swap|transformer.*first")
case("cb_keys_per_layer", check_cache_bytes, cb_feedback_per_layer,
     r"shared|one key and one value|all (its )?layers")


def skv_no_bias(m, norm, kv, n_heads):  # x @ W^T without the Linear's bias
    b, d = m.shape
    return (norm(m) @ kv.weight.T).view(b, 2, n_heads, d // n_heads).unbind(1)


def skv_plain_layer_norm(m, norm, kv, n_heads):  # F.layer_norm without norm's weights
    b, d = m.shape
    return kv(F.layer_norm(m, (d,))).view(b, 2, n_heads, d // n_heads).unbind(1)


case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")
case("skv_plain_layer_norm", check_shared_kv, skv_plain_layer_norm,
     r"norm's (own )?(weight|affine|parameters)|learned|affine|`norm`")


class SqMatmul(torch.autograd.Function):  # backward multiplies as matrices, not entrywise
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x @ g


class SqGradSquared(torch.autograd.Function):  # chain rule applied as (dy/dx)(grad)^2
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g * g


case("sq_matmul", check_square, SqMatmul, r"@|matrix product|entrywise|element")
case("sq_grad_squared", check_square, SqGradSquared, r"grad_output|chain rule|once")


def vg_start_from_last(read_grads):  # starts from the last read, then adds every read again
    total = read_grads[-1].clone()
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_sum_slots(read_grads):  # sums each read over its slots
    return torch.stack([g.sum(0) for g in read_grads])


case("vg_last_twice", check_value_gradients, vg_start_from_last, r"twice|zeros|double|last read")
case("vg_sum_slots", check_value_gradients, vg_sum_slots, r"slot|rows|sum(med)? over")


class ApForgetsNew(torch.autograd.Function):  # returns the first n slots: the new one left out
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, :n]

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class ApWriteNext(torch.autograd.Function):  # writes at slot n + 1
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n + 1] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_forgets_new_slot", check_append, ApForgetsNew, r"n ?\+ ?1|new (slot|value)|include")
case("ap_write_next_slot", check_append, ApWriteNext, r"slot n\b|off by one|n ?\+ ?1")

case("wg_transposed", check_weight_gradient, wg_transposed, r"transpos|\[D_out, D_in\]|G\^T X")


def wg_steps_mean(xs, gs):  # averages over the steps
    return torch.einsum("tbo,tbi->oi", gs, xs) / xs.shape[0]


case("wg_steps_mean", check_weight_gradient, wg_steps_mean, r"mean|sum|divid|steps")


def reach_window_one_layer(memory, n_layers, span, position=0):  # W: one layer's span
    return span if memory == "window" else reach_right(memory, n_layers, span, position)


def reach_xl_full_segment(memory, n_layers, span, position=0):  # L M + T_s - 1, any position
    if memory == "XL":
        return n_layers * span + span - 1
    return reach_right(memory, n_layers, span, position)


case("reach_window_one_layer", check_reach, reach_window_one_layer,
     r"per layer|each layer|L ?\*|layers")
case("reach_xl_full_segment", check_reach, reach_xl_full_segment, r"position")


def mr_labels_are_tokens(filler, values, positions):  # labels the tokens of x, not the value
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    return x, torch.where(cols > positions[:, None], x, IGNORE)


def mr_y_int32(filler, values, positions):  # labels built as int32 (a dtype slip)
    x, y = mr_right(filler, values, positions)
    return x, y.int()


case("mr_labels_are_tokens", check_make_recall, mr_labels_are_tokens,
     r"values\[n\]|the value|filler")
case("mr_y_int32", check_make_recall, mr_y_int32, r"dtype|int32|int64|long")


def ad_cumsum_batch(logits, y, max_distance):  # cumsum over the batch axis
    mask = y != IGNORE
    dist = mask.long().cumsum(0)
    hits = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for d in range(1, max_distance + 1):
        sel = mask & (dist == d)
        if sel.any():
            out[d - 1] = hits[sel].to(logits.dtype).mean()
    return out


def ad_shifted(logits, y, max_distance):  # shifts as in LM training: logits[t] vs y[t + 1]
    dist = (y != IGNORE).long().cumsum(1)[:, 1:]
    hits = logits[:, :-1].argmax(-1) == y[:, 1:]
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for d in range(1, max_distance + 1):
        sel = dist == d
        if sel.any():
            out[d - 1] = hits[sel].to(logits.dtype).mean()
    return out


case("ad_cumsum_batch", check_accuracy_by_distance, ad_cumsum_batch, r"axis|dim|time|batch")
case("ad_shifted", check_accuracy_by_distance, ad_shifted,
     r"shift|t ?\+ ?1|already aligned|same position")


def cb5_iterate_all(cache):  # one generic loop: `for k, v in cache` for every kind
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


def cb5_element_from_first(cache):  # numel of all pairs times the size of the first tensor's
    ts = [t for p in _pairs(cache) for t in p]
    return sum(t.numel() for t in ts) * 4


case("cb5_iterate_xlcache", check_cache_bytes05, cb5_iterate_all, r"XLCache|\.kv|KVBuffer")
case("cb5_four_bytes", check_cache_bytes05, cb5_element_from_first, r"element_size|dtype|4 bytes")



# ---------------------------------------------------------------- a third round
def rb_float_distances(table, s):  # distances from linspace: floats cannot index
    d = torch.linspace(s, 1, s).clamp(max=table.shape[1])
    return table[:, d - 1]


case("rb_float_index", check_relative_bias, rb_float_distances, r"long|integer|float|index")


def fa_sdpa_bias_unbroadcast(q, k, v, bias):  # attn_mask=bias, [H, S] read as [1, S] per query
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    out = F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=bias)
    return out[:, :, 0]


case("fa_sdpa_mask_shape", check_feedback_attention, fa_sdpa_bias_unbroadcast,
     r"bias\[:, None\]|\[H, 1, S\]|broadcast")


def tl_detached_memory(model, tokens):  # memory vectors detached: no gradient through time
    x = model.embed(tokens)
    keys, values = (list(p) for p in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(outs)).detach()[:, None])
        keys = [torch.cat([k, n], dim=2) for k, n in zip(keys, nk)]
        values = [torch.cat([v, n], dim=2) for v, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_detached_memory", check_token_loop, tl_detached_memory, r"detach|gradient")


class SqInplaceGrad(torch.autograd.Function):  # backward scales grad_output in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul_(2 * x)


case("sq_inplace_grad_output", check_square, SqInplaceGrad, r"in place|in-place|mul_")


class ApLenIsBatch(torch.autograd.Function):  # n = len(top): the batch size, not the length
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = len(top)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_len_is_batch", check_append, ApLenIsBatch, r"len|dim 1|batch|size\(1\)|shape\[1\]")


def wg_flatten_features(xs, gs):  # flatten(1): merges batch and features
    return gs.flatten(1).T @ xs.flatten(1)


case("wg_flatten_features", check_weight_gradient, wg_flatten_features,
     r"flatten\(0, 1\)|first two axes|steps and batch")


def mr_scatter_inplace(filler, values, positions):  # scatter_ into the caller's filler
    x = filler.scatter_(1, positions[:, None], values[:, None])
    cols = torch.arange(x.shape[1], device=filler.device)[None, :]
    return x, torch.where(cols > positions[:, None], values[:, None], IGNORE)


case("mr_scatter_inplace", check_make_recall, mr_scatter_inplace, r"in place|clone|filler")


def ad_per_row_mean(logits, y, max_distance):  # mean over rows of per-row accuracies at d <= D
    mask = y != IGNORE
    dist = mask.long().cumsum(1)
    hits = (logits.argmax(-1) == y) & mask
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for d in range(1, max_distance + 1):
        rows = (mask & (dist == d)).any(1)
        if rows.any():
            upto = (hits & (dist <= d)).sum(1)[rows] / (mask & (dist <= d)).sum(1)[rows]
            out[d - 1] = upto.to(logits.dtype).mean()
    return out


case("ad_cumulative", check_accuracy_by_distance, ad_per_row_mean,
     r"at (exactly )?d|up to|cumulative|<=")
test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
