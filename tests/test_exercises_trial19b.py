"""Learner trial 19 (b): notebooks 03, 04 and 05."""
import math

import torch

from checker_helpers import trial_case, trial_tests
from labnn.data.recall import IGNORE
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

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)   # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 03 · memory_vector
def mv_right(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_mean(xs, w):  # averages the weighted layers instead of summing them
    return (torch.softmax(w, 0)[:, None, None] * xs).mean(0)


def mv_raw(xs, w):  # uses the logits w as weights, no softmax
    return torch.einsum("l,lbd->bd", w, xs)


def mv_no_embedding(xs, w):  # mixes the layer outputs only, drops xs[0]
    return (torch.softmax(w[1:], 0)[:, None, None] * xs[1:]).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_mean", check_memory_vector, mv_mean, r"(?i)mean|sum|divid|1\s*/\s*\(?L")
case("mv_raw", check_memory_vector, mv_raw, r"(?i)softmax")
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"(?i)embedding|xs\[0\]")


# ---------------------------------------------------------------- 03 · relative_bias
def rb_right(table, s):
    d = (s - torch.arange(s)).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_newest_first(table, s):  # key j at distance j + 1: newest first
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_no_minus_one(table, s):  # table[:, d] for distance d (forgets the -1)
    d = (s - torch.arange(s)).clamp(max=table.size(1) - 1)
    return table[:, d]


def rb_no_clamp(table, s):  # forgets to clamp far distances
    d = s - torch.arange(s)
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first,
     r"(?i)oldest|newest|revers|flip|order")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one,
     r"(?i)d\s*-\s*1|off by one|shifted|distance 1")
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"(?i)clamp|max_distance")


# ---------------------------------------------------------------- 03 · feedback_attention
def _fa(q, k, v, bias, how):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k)
    scale = math.sqrt(q.size(-1) * (q.size(1) if how == "D" else 1))
    if how == "after":
        a = torch.softmax(s / scale, -1) + bias
    elif how == "scaled_bias":
        a = torch.softmax((s + bias) / scale, -1)
    else:
        a = torch.softmax(s / scale + bias, -1)
    return torch.einsum("bhs,bhsd->bhd", a, v)


RIGHT["feedback_attention"] = (check_feedback_attention,
                               lambda q, k, v, b: _fa(q, k, v, b, "right"))
case("fa_bias_after_softmax", check_feedback_attention,
     lambda q, k, v, b: _fa(q, k, v, b, "after"), r"(?i)bias.*(before|after|inside)")
case("fa_bias_scaled", check_feedback_attention,
     lambda q, k, v, b: _fa(q, k, v, b, "scaled_bias"), r"(?i)bias.*(scal|sqrt|divid)")
case("fa_scale_model_width", check_feedback_attention,
     lambda q, k, v, b: _fa(q, k, v, b, "D"), r"(?i)sqrt.*(d_h|head)|scale")


# ---------------------------------------------------------------- 03 · token_loop
def _loop(model, tokens, how):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            j = 0 if how == "keys0" else i
            h = layer(h, keys[j], values[j])
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(m if how == "head_m" else h)
        nk, nv = model.project_memory(m[:, None])
        if how == "newest_first":
            keys = [torch.cat([n, o], 2) for o, n in zip(keys, nk)]
            values = [torch.cat([n, o], 2) for o, n in zip(values, nv)]
        else:
            keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
            values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


RIGHT["token_loop"] = (check_token_loop, lambda m, t: _loop(m, t, "right"))
case("tl_head_on_memory", check_token_loop, lambda m, t: _loop(m, t, "head_m"),
     r"(?i)head.*(top|last layer)|memory vector.*head")
case("tl_first_layer_kv_for_all", check_token_loop, lambda m, t: _loop(m, t, "keys0"),
     r"(?i)(its own|each layer|per layer|layer'?s own).*(key|projection)")
case("tl_newest_first", check_token_loop, lambda m, t: _loop(m, t, "newest_first"),
     r"(?i)append|end|order|oldest|newest|dim=2")


# ---------------------------------------------------------------- 03 · cache_bytes
def cb_right(n_layers, d_model, n_tokens, b):
    return 2 * n_layers * d_model * n_tokens * b, 2 * d_model * n_tokens * b


RIGHT["cache_bytes"] = (check_cache_bytes, cb_right)
case("cb_no_values", check_cache_bytes,
     lambda L, D, N, b: (L * D * N * b, D * N * b), r"(?i)value|factor.*2|twice|key and")
case("cb_memory_counted", check_cache_bytes,
     lambda L, D, N, b: (2 * L * D * N * b, 3 * D * N * b), r"(?i)memory vector")
case("cb_swapped", check_cache_bytes,
     lambda L, D, N, b: cb_right(L, D, N, b)[::-1], r"(?i)order|swap|transformer.*first")


# ---------------------------------------------------------------- 04 · shared_kv
def _skv(m, norm, kv, n_heads, how):
    b, d = m.shape
    y = kv(m if how == "no_norm" else norm(m))
    if how == "interleaved":
        k, v = y.view(b, n_heads, 2 * d // n_heads).chunk(2, -1)
        return k, v
    k, v = y.split(d, -1)
    if how == "heads_last":
        return (k.view(b, d // n_heads, n_heads).transpose(1, 2),
                v.view(b, d // n_heads, n_heads).transpose(1, 2))
    return k.view(b, n_heads, d // n_heads), v.view(b, n_heads, d // n_heads)


RIGHT["shared_kv"] = (check_shared_kv, lambda m, n, kv, h: _skv(m, n, kv, h, "right"))
case("skv_no_norm", check_shared_kv, lambda m, n, kv, h: _skv(m, n, kv, h, "no_norm"),
     r"(?i)norm")
case("skv_interleaved", check_shared_kv,
     lambda m, n, kv, h: _skv(m, n, kv, h, "interleaved"),
     r"(?i)first D|split.*(keys|values)|chunk|interleav")
case("skv_heads_last", check_shared_kv, lambda m, n, kv, h: _skv(m, n, kv, h, "heads_last"),
     r"(?i)head.*(split|axis|order|contiguous)|view.*\[B, H, D_h\]|transpose")


# ---------------------------------------------------------------- 04 · Square
class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SquareNoChain(SquareRight):  # forgets to multiply by grad_output
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SquareNoTwo(SquareRight):  # d(x^2)/dx taken as x
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x


class SquareInPlace(SquareRight):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul_(x)


RIGHT["square"] = (check_square, SquareRight)
case("sq_no_chain_rule", check_square, SquareNoChain, r"(?i)grad_output|chain rule")
case("sq_missing_two", check_square, SquareNoTwo, r"(?i)2\s*\*?\s*x|factor.*2|half")
case("sq_in_place", check_square, SquareInPlace, r"(?i)in.place|modif|chang.*input")


# ---------------------------------------------------------------- 04 · value_gradients
def vg_right(read_grads):
    out = read_grads[0].new_zeros(len(read_grads), read_grads[-1].size(-1))
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_own_read(read_grads):  # only the read of its own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_in_place(read_grads):  # accumulates into the last read's gradient
    out = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        out[: t + 1] += g
    return out


def vg_right_aligned(read_grads):  # lines each read up with the end
    T = len(read_grads)
    out = read_grads[0].new_zeros(T, read_grads[-1].size(-1))
    for t, g in enumerate(read_grads):
        out[T - t - 1:] += g
    return out


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read_only", check_value_gradients, vg_own_read,
     r"(?i)(every|all|later) read|sum over t|t\s*>=?\s*j")
case("vg_in_place", check_value_gradients, vg_in_place,
     r"(?i)in.place|read_grads.*(chang|modif)|new tensor")
case("vg_right_aligned", check_value_gradients, vg_right_aligned,
     r"(?i)slot|first t\s*\+\s*1|align|slots? 0")


# ---------------------------------------------------------------- 04 · Append
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


class AppendCopy(AppendRight):  # a new tensor instead of a view of the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)


class AppendKeepAxis(AppendRight):  # value's gradient keeps the step axis
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:ctx.n + 1], None


class AppendNoData(AppendRight):  # writes into buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]


RIGHT["append"] = (check_append, AppendRight)
case("ap_copy", check_append, AppendCopy, r"(?i)view|copy|cat|buffer")
case("ap_keep_axis", check_append, AppendKeepAxis,
     r"(?i)value.*(\[B, F\]|shape|axis|squeeze)|grad\[:, n\]")
case("ap_no_data", check_append, AppendNoData, r"(?i)\.data|version")


# ---------------------------------------------------------------- 04 · weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient,
     lambda xs, gs: xs.flatten(0, 1).T @ gs.flatten(0, 1),
     r"(?i)\[D_out, D_in\]|transpos|G\^?T\s*X|order")
case("wg_mean_steps", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) / xs.size(0),
     r"(?i)sum|averag|add up|divi|/ ?T")
case("wg_sum_first", check_weight_gradient,
     lambda xs, gs: gs.sum((0, 1))[:, None] @ xs.sum((0, 1))[None],
     r"(?i)sum.*(before|first|product)|outer product|per (step|row)")


# ---------------------------------------------------------------- 05 · reach
def reach_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def reach_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    r = reach_right(memory, n_layers, span, position)
    return r if memory == "feedback" else r + 1


def reach_xl_no_position(memory, n_layers, span, position=0):
    return math.inf if memory == "feedback" else n_layers * span


def reach_xl_position_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return reach_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach_right)
case("reach_plus_one", check_reach, reach_plus_one, r"(?i)itself|\+ ?1|not count")
case("reach_xl_no_position", check_reach, reach_xl_no_position, r"(?i)position")
case("reach_xl_position_per_layer", check_reach, reach_xl_position_per_layer,
     r"(?i)position.*(once|not.*layer|per layer)|L\s*\*?\s*M\s*\+\s*i")


# ---------------------------------------------------------------- 05 · make_recall
def _recall(filler, values, positions, how):
    x = filler if how == "in_place" else filler.clone()
    n, t = filler.shape
    x[torch.arange(n, device=filler.device), positions] = values
    at = torch.arange(t, device=filler.device)[None]
    after = at >= positions[:, None] if how == "inclusive" else at > positions[:, None]
    if how == "flipped":
        after = ~after
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


RIGHT["make_recall"] = (check_make_recall, lambda f, v, p: _recall(f, v, p, "right"))
case("mr_in_place", check_make_recall, lambda f, v, p: _recall(f, v, p, "in_place"),
     r"(?i)filler.*(chang|modif|clone|copy)|in.place")
case("mr_inclusive", check_make_recall, lambda f, v, p: _recall(f, v, p, "inclusive"),
     r"(?i)after|own position|\+ ?1|>=|strictly")
case("mr_flipped", check_make_recall, lambda f, v, p: _recall(f, v, p, "flipped"),
     r"(?i)before|after|flip|revers|IGNORE")


# ---------------------------------------------------------------- 05 · accuracy_by_distance
def _acc(logits, y, max_distance, how):
    labelled = y != IGNORE
    first = labelled.long().argmax(1)
    p = first if how == "p_first" else first - 1
    t = torch.arange(y.size(1), device=y.device)[None]  # where y is (a GPU)
    d = t - p[:, None]
    correct = logits.argmax(-1) == y
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        mask = labelled & (d == k)
        if mask.any():
            out[k if how == "no_shift" and k < max_distance else k - 1] = \
                correct[mask].to(logits.dtype).mean()
        elif how == "zero":
            out[k - 1] = 0
    if how == "no_shift":
        out[0] = math.nan
    return out


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance,
                                 lambda lg, y, m: _acc(lg, y, m, "right"))
case("ad_p_first_label", check_accuracy_by_distance,
     lambda lg, y, m: _acc(lg, y, m, "p_first"), r"(?i)p\s*\+\s*1|first labelled|minus 1")
case("ad_zero_not_nan", check_accuracy_by_distance, lambda lg, y, m: _acc(lg, y, m, "zero"),
     r"(?i)nan")
case("ad_entry_d", check_accuracy_by_distance, lambda lg, y, m: _acc(lg, y, m, "no_shift"),
     r"(?i)entry d\s*-\s*1|d - 1|shift|off by one")


# ---------------------------------------------------------------- 05 · cache_bytes
def _nb(t):
    return t.numel() * t.element_size()


def cache_right(cache):
    if isinstance(cache, KVState):
        return cache.nbytes()
    pairs = cache.kv if hasattr(cache, "kv") else cache
    return sum(_nb(k) + _nb(v) for k, v in pairs)


def cache_keys_only(cache):
    if isinstance(cache, KVState):
        return _nb(cache.kv[0])
    pairs = cache.kv if hasattr(cache, "kv") else cache
    return sum(_nb(k) for k, v in pairs)


def cache_with_rel_keys(cache):  # XL: counts the relative-key tables too
    extra = 0
    if hasattr(cache, "rel_keys"):
        extra = sum(_nb(r) for r in cache.rel_keys if r is not None)
    return cache_right(cache) + extra


def cache_storage(cache):  # bytes of the storages, spare room included
    if isinstance(cache, KVState):
        return cache.kv.untyped_storage().nbytes()
    pairs = cache.kv if hasattr(cache, "kv") else cache
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes()
               for k, v in pairs)


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, cache_right)
case("cb5_keys_only", check_cache_bytes_05, cache_keys_only, r"(?i)values?")
case("cb5_rel_keys", check_cache_bytes_05, cache_with_rel_keys,
     r"(?i)rel(ative)?[_ ]keys|table")
case("cb5_storage", check_cache_bytes_05, cache_storage,
     r"(?i)storage|capacity|spare|positions? it (remembers|holds)")


# ---------------------------------------------------------------- second round: subtler slips
def mv_sigmoid(xs, w):  # normalises sigmoid(w) instead of taking softmax(w)
    a = torch.sigmoid(w)
    return ((a / a.sum())[:, None, None] * xs).sum(0)


case("mv_sigmoid_normalised", check_memory_vector, mv_sigmoid, r"(?i)softmax")


def rb_clamp_heads(table, s):  # clamps at table.size(0), the head count
    d = (s - torch.arange(s)).clamp(max=table.size(0))
    return table[:, d - 1]


case("rb_clamp_at_heads", check_relative_bias, rb_clamp_heads,
     r"(?i)size\(1\)|max_distance|heads")


def fa_empty_returns_q(q, k, v, bias):  # no memory: hands the query back
    if k.size(2) == 0:
        return q
    return _fa(q, k, v, bias, "right")


def fa_keys_as_values(q, k, v, bias):  # weights the keys instead of the values
    return _fa(q, k, k, bias, "right")


case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q,
     r"(?i)zero|empty")
case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values,
     r"(?i)value|\bv\b")


def _loop2(model, tokens, how):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            outs.append(h)
        if how == "top_as_memory":
            m = h
        elif how == "embedding_memory":
            m = x[:, t]
        else:  # "reversed_mix": the stack top layer first
            m = model.mix(torch.stack(outs[::-1]))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
        values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_top_as_memory", check_token_loop, lambda m, t: _loop2(m, t, "top_as_memory"),
     r"(?i)mix|memory vector")
case("tl_embedding_memory", check_token_loop,
     lambda m, t: _loop2(m, t, "embedding_memory"), r"(?i)mix|memory vector")
case("tl_reversed_mix", check_token_loop, lambda m, t: _loop2(m, t, "reversed_mix"),
     r"(?i)order|embedding first|revers|xs\[0\]")

case("cb_float_division", check_cache_bytes,
     lambda L, D, N, b: (2 * L * D * N * b, 2 * L * D * N * b / L), r"(?i)\bint|float")


def skv_swapped(m, norm, kv, n_heads):  # values taken from the first D outputs
    k, v = _skv(m, norm, kv, n_heads, "right")
    return v, k


case("skv_keys_values_swapped", check_shared_kv, skv_swapped,
     r"(?i)swap|first D.*keys|keys.*first")


class SquareFromOutput(SquareRight):  # saves y = x², backward 2 * sqrt(y)
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * 2 * y.sqrt()


case("sq_sqrt_of_output", check_square, SquareFromOutput, r"(?i)sign|negative|sqrt|\|x\|")


def vg_last_read(read_grads):  # only the last read, which covers every slot
    return read_grads[-1].clone()


def vg_average(read_grads):  # averages the reads of each value
    out = vg_right(read_grads)
    T = len(read_grads)
    return out / torch.arange(T, 0, -1, dtype=out.dtype)[:, None]


case("vg_last_read_only", check_value_gradients, vg_last_read,
     r"(?i)(every|all|earlier) read|sum over t|t\s*>=?\s*j|only the last")
case("vg_average", check_value_gradients, vg_average, r"(?i)averag|mean|sum|divid")


class AppendShort(AppendRight):  # returns the prefix without the new slot
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, :n]


case("ap_prefix_too_short", check_append, AppendShort, r"(?i)n ?\+ ?1|new (slot|value)")


def wg_misaligned(xs, gs):  # flattens x batch-major but g time-major
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def wg_last_step(xs, gs):  # only the last step's product
    return gs[-1].T @ xs[-1]


case("wg_rows_misaligned", check_weight_gradient, wg_misaligned,
     r"(?i)align|same (order|row)|transpose|flatten")
case("wg_last_step_only", check_weight_gradient, wg_last_step,
     r"(?i)(every|all) steps?|last step|sum over")


def reach_xl_minus_one(memory, n_layers, span, position=0):  # reads "L M + T_s - 1"
    if memory == "XL":
        return n_layers * span + position - 1
    return reach_right(memory, n_layers, span, position)


def reach_feedback_bounded(memory, n_layers, span, position=0):
    return n_layers * span if memory == "feedback" else reach_right(memory, n_layers, span,
                                                                   position)


case("reach_xl_minus_one", check_reach, reach_xl_minus_one, r"(?i)off by one|- ?1|position")
case("reach_feedback_bounded", check_reach, reach_feedback_bounded,
     r"(?i)inf|unbounded|feedback")


def mr_one_label(filler, values, positions):  # labels only p + 1
    x, y = _recall(filler, values, positions, "right")
    n, t = filler.shape
    at = torch.arange(t, device=filler.device)[None]
    keep = at == positions[:, None] + 1
    return x, torch.where(keep, y, torch.full_like(y, IGNORE))


case("mr_one_label_only", check_make_recall, mr_one_label,
     r"(?i)every position after|all positions after|up to the last")


def ad_shifted(logits, y, max_distance):  # reads logits[t] as the prediction for t + 1
    labelled = y[:, 1:] != IGNORE
    p = (y != IGNORE).long().argmax(1) - 1
    d = torch.arange(1, y.size(1))[None] - p[:, None]
    correct = logits[:, :-1].argmax(-1) == y[:, 1:]
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        mask = labelled & (d == k)
        if mask.any():
            out[k - 1] = correct[mask].to(logits.dtype).mean()
    return out


def ad_p_from_count(logits, y, max_distance):  # p = T - count (one late)
    count = (y != IGNORE).sum(1)
    labelled = y != IGNORE
    p = y.size(1) - count
    d = torch.arange(y.size(1))[None] - p[:, None]
    correct = logits.argmax(-1) == y
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        mask = labelled & (d == k)
        if mask.any():
            out[k - 1] = correct[mask].to(logits.dtype).mean()
    return out


case("ad_logits_shifted", check_accuracy_by_distance, ad_shifted,
     r"(?i)shift|logits\[:, ?t\]|same position|already|next token")
case("ad_p_from_count", check_accuracy_by_distance, ad_p_from_count,
     r"(?i)off by one|p \+ 1|one (short|late|early)|d - 1")


def cache_iterates_namedtuple(cache):  # treats an XLCache as a list of (k, v)
    if isinstance(cache, KVState):
        return cache.nbytes()
    return sum(_nb(k) + _nb(v) for k, v in cache)


case("cb5_xlcache_as_list", check_cache_bytes_05, cache_iterates_namedtuple,
     r"(?i)XLCache.*\.kv|cache\.kv")


# ---------------------------------------------------------------- third round
def rb_loop(table, s):  # a loop of columns: torch.stack of nothing when s == 0
    md = table.size(1)
    return torch.stack([table[:, min(s - j, md) - 1] for j in range(s)], 1)


case("rb_stack_empty", check_relative_bias, rb_loop, r"(?i)s ?== ?0|no keys|empty")


def fa_sdpa(q, k, v, bias):  # PyTorch's attention, no branch for S == 0
    out = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=bias[:, None].to(q.dtype))
    return out[:, :, 0]


# not a mistake: SDPA returns zeros over no keys (checked), so it is a second right answer
RIGHT["feedback_attention_sdpa"] = (check_feedback_attention, fa_sdpa)


class SquareNotSaved(SquareRight):  # forgets to save x
    @staticmethod
    def forward(ctx, x):
        return x * x


case("sq_not_saved", check_square, SquareNotSaved, r"(?i)save_for_backward|saved")


def reach_window_position(memory, n_layers, span, position=0):  # adds i for the window too
    r = reach_right(memory, n_layers, span, position)
    return r + position if memory == "window" else r


case("reach_window_position", check_reach, reach_window_position,
     r"(?i)window.*position|position.*window|segment")


def mr_mask_assign(filler, values, positions):  # y[mask] = values
    x, _ = _recall(filler, values, positions, "right")
    at = torch.arange(filler.size(1), device=filler.device)[None]
    y = torch.full_like(filler, IGNORE)
    y[at > positions[:, None]] = values
    return x, y


case("mr_mask_assign_values", check_make_recall, mr_mask_assign,
     r"(?i)values\[:, ?None\]|broadcast|expand|per row|each row")


def ad_no_label_mask(logits, y, max_distance):  # counts every position at distance d
    p = (y != IGNORE).long().argmax(1) - 1
    d = torch.arange(y.size(1))[None] - p[:, None]
    correct = logits.argmax(-1) == y
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        mask = d == k
        if mask.any():
            out[k - 1] = correct[mask].to(logits.dtype).mean()
    return out


case("ad_rows_without_labels", check_accuracy_by_distance, ad_no_label_mask,
     r"(?i)no label|unlabelled|IGNORE|labelled")



def fa_bias_scrambled(q, k, v, bias):  # "fixes" a shape error with bias.T.reshape
    return _fa(q, k, v, bias.T.reshape(bias.shape), "right")


case("fa_bias_T_reshaped", check_feedback_attention, fa_bias_scrambled,
     r"(?i)bias.*(head|scrambl|\[H, S\])")
case("mv_uniform_mean", check_memory_vector, lambda xs, w: xs.mean(0),
     r"(?i)softmax\(w\)|plain average|uniform")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
