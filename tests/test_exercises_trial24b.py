"""Learner trial 24 (b): notebooks 03, 04 and 05, new wrong answers (issue 28)."""
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
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- 03, memory_vector -------------------------------------------------------------------
def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid weights: positive but not summing to one
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_plain_mean(xs, w):  # the mean of the layers: w ignored
    return xs.mean(0)


def mv_skip_embedding(xs, w):  # the layers only, embedding left out
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)softmax|sum to (one|1)|normali")
case("mv_plain_mean", check_memory_vector, mv_plain_mean, r"(?i)\bw\b|weight|uniform|mean")
case("mv_skip_embedding", check_memory_vector, mv_skip_embedding,
     r"(?i)embedding|xs\[0\]")


# ---- 03, relative_bias -------------------------------------------------------------------
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_wrap(table, s):  # wraps far distances around instead of clamping
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]


def rb_oldest_nearest(table, s):  # ascending distances: oldest key at distance 1
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_column_d(table, s):  # column d instead of d - 1 (clamped to stay in range)
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_wrap", check_relative_bias, rb_wrap, r"(?i)clamp|max_distance|share the last")
case("rb_oldest_nearest", check_relative_bias, rb_oldest_nearest,
     r"(?i)oldest|order|reversed|flip|ascending|decreasing")
case("rb_column_d", check_relative_bias, rb_column_d, r"(?i)d ?- ?1|column|off.by.one|shift")


# ---- 03, feedback_attention ------------------------------------------------------------------
def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # bias added to the weights, not the scores
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_scale_d_model(q, k, v, bias):  # sqrt of the model width H * D_h
    if k.size(2) == 0:
        return torch.zeros_like(q)
    d = q.size(1) * q.size(-1)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(d) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_keys_as_values(q, k, v, bias):  # typo: the weights multiply k
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), k)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|scores|inside)|(before|inside).*softmax")
case("fa_scale_d_model", check_feedback_attention, fa_scale_d_model,
     r"(?i)sqrt.*(D_h|head width|d_head)|scal")
case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values,
     r"(?i)\bv\b|values?\b.*(not|instead)|keys? instead")


# ---- 03, token_loop ---------------------------------------------------------------------
def _loop(model, tokens, memory="mix", grow=True, logits_from="top"):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            h.append(layer(h[-1], k, v))
        m = model.mix(torch.stack(h)) if memory == "mix" else h[-1]
        nk, nv = model.project_memory(m[:, None])
        if grow:
            keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
            values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
        else:
            keys, values = nk, nv
        outs.append(h[-1] if logits_from == "top" else m)
    return model.head(torch.stack(outs, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_top_as_memory(model, tokens):  # memory = the top layer, no layer mix
    return _loop(model, tokens, memory="top")


def tl_last_step_only(model, tokens):  # the cache replaced, not appended to
    return _loop(model, tokens, grow=False)


def tl_logits_of_memory(model, tokens):  # head applied to m_t instead of the top
    return _loop(model, tokens, logits_from="memory")


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_top_as_memory", check_token_loop, tl_top_as_memory,
     r"(?i)mix|every layer|all (the )?(layers|outputs)")
case("tl_last_step_only", check_token_loop, tl_last_step_only,
     r"(?i)append|grow|cat|all (the )?previous|only the last")
case("tl_logits_of_memory", check_token_loop, tl_logits_of_memory,
     r"(?i)top|memory vector.*(head|logits)|head.*memory")


# ---- 03, cache_bytes --------------------------------------------------------------------
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 2 * d_model * per


def cb_count_memory(n_layers, d_model, n_tokens, bytes_per_number):  # 3D, memory counted
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 3 * d_model * per


def cb_ratio_float(n_layers, d_model, n_tokens, bytes_per_number):  # / L gives a float
    tf = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return tf, tf / n_layers


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # values forgotten
    per = n_tokens * bytes_per_number
    return n_layers * d_model * per, d_model * per


RIGHT["cache_bytes_03"] = (check_cache_bytes, cb_right)
case("cb_count_memory", check_cache_bytes, cb_count_memory, r"(?i)memory vector|3 ?D")
case("cb_ratio_float", check_cache_bytes, cb_ratio_float, r"(?i)\bint|float")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)values?|key and|2 ?[·*x×]")


# ---- 04, shared_kv ----------------------------------------------------------------------
def skv_right(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


def skv_no_norm(m, norm, kv, n_heads):
    k, v = kv(m).chunk(2, -1)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


def skv_per_head_split(m, norm, kv, n_heads):  # heads first, then k|v inside each head
    kvh = kv(norm(m)).unflatten(-1, (n_heads, -1))
    return kvh.chunk(2, -1)


def skv_feature_major_heads(m, norm, kv, n_heads):  # [B, D_h, H] then transposed
    k, v = kv(norm(m)).chunk(2, -1)
    return (k.unflatten(-1, (-1, n_heads)).transpose(1, 2),
            v.unflatten(-1, (-1, n_heads)).transpose(1, 2))


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(?i)norm")
case("skv_per_head_split", check_shared_kv, skv_per_head_split,
     r"(?i)first D|split.*(keys|values)|keys.*(first|then)")
case("skv_feature_major_heads", check_shared_kv, skv_feature_major_heads,
     r"(?i)heads?.*(split|order|contiguous|consecutive)|feature.major")


# ---- 04, Square -------------------------------------------------------------------------
class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SquareNoTwo(torch.autograd.Function):  # derivative x instead of 2x
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x


class SquareSavesOutput(torch.autograd.Function):  # saves y, uses 2y
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * 2 * y


class SquareInPlace(torch.autograd.Function):  # squares x in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


RIGHT["square"] = (check_square, SquareRight)
case("sq_no_two", check_square, SquareNoTwo, r"(?i)2 ?[·*]? ?x|factor|twice")
case("sq_saves_output", check_square, SquareSavesOutput,
     r"(?i)(saved|save).*(y|output|result)|2 ?[·*]? ?x|input")
case("sq_in_place", check_square, SquareInPlace, r"(?i)in.place|new tensor|mul_|changes? x")


# ---- 04, value_gradients ------------------------------------------------------------------
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_last_rows(read_grads):  # read t aligned to the LAST rows
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_into_input(read_grads):  # accumulates into the last read's tensor
    total = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        total[: t + 1] += g
    return total


def vg_own_read_only(read_grads):  # only the read of step j: no later reads
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_last_rows", check_value_gradients, vg_last_rows,
     r"(?i)first t ?\+ ?1|slots? 0|first rows|aligned|last rows")
case("vg_into_input", check_value_gradients, vg_into_input,
     r"(?i)read_grads|input|caller|in place|unchanged")
case("vg_own_read_only", check_value_gradients, vg_own_read_only,
     r"(?i)later|every read|all (the )?reads|t ?(>=|≥) ?j")


# ---- 04, Append ---------------------------------------------------------------------------
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


class AppendCopy(torch.autograd.Function):  # a new tensor, the buffer untouched
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendKeepDim(torch.autograd.Function):  # value's gradient [B, 1, F]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


class AppendNoData(torch.autograd.Function):  # writes through buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


RIGHT["append"] = (check_append, AppendRight)
case("ap_copy", check_append, AppendCopy, r"(?i)buffer|view|copy|no copy")
case("ap_keepdim", check_append, AppendKeepDim, r"(?i)value.*\[B, F\]|\[B, 1, F\]|shape")
case("ap_no_data", check_append, AppendNoData, r"(?i)\.data|version")


# ---- 04, weight_gradient ------------------------------------------------------------------
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mean(xs, gs):  # averaged over the T * B rows
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1))


def wg_last_step(xs, gs):  # the last step only
    return gs[-1].T @ xs[-1]


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, wg_transposed,
     r"(?i)transpos|\[D_out, D_in\]|G\^?T ?X|order")
case("wg_mean", check_weight_gradient, wg_mean, r"(?i)\bsum|mean|averag|divid")
case("wg_last_step", check_weight_gradient, wg_last_step,
     r"(?i)every step|all (the )?steps|over T|last step")


# ---- 05, reach ----------------------------------------------------------------------------
def r_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def r_window_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    return n_layers * span + 1 if memory == "window" else r_right(memory, n_layers, span,
                                                                   position)


def r_xl_position_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return r_right(memory, n_layers, span, position)


def r_feedback_bounded(memory, n_layers, span, position=0):  # feedback as a window
    return n_layers * span if memory == "feedback" else r_right(memory, n_layers, span,
                                                                  position)


RIGHT["reach"] = (check_reach, r_right)
case("r_window_plus_one", check_reach, r_window_plus_one,
     r"(?i)itself|does not count|\+ ?1")
case("r_xl_position_per_layer", check_reach, r_xl_position_per_layer,
     r"(?i)once|per layer|position")
case("r_feedback_bounded", check_reach, r_feedback_bounded, r"(?i)inf|unbounded")


# ---- 05, make_recall ----------------------------------------------------------------------
def mr_right(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.size(1), device=filler.device)
    y = torch.where(cols[None] > positions[:, None], values[:, None], IGNORE)
    return x, y


def mr_inclusive(filler, values, positions):  # labels from p on, p included
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.size(1), device=filler.device)
    y = torch.where(cols[None] >= positions[:, None], values[:, None], IGNORE)
    return x, y


def mr_writes_filler(filler, values, positions):  # no clone
    x = filler
    x[torch.arange(len(x), device=filler.device), positions] = values
    cols = torch.arange(x.size(1), device=filler.device)
    y = torch.where(cols[None] > positions[:, None], values[:, None], IGNORE)
    return x, y


def mr_every_row(filler, values, positions):  # x[:, positions]: all rows at all positions
    x = filler.clone()
    x[:, positions] = values[:, None]
    cols = torch.arange(x.size(1), device=filler.device)
    y = torch.where(cols[None] > positions[:, None], values[:, None], IGNORE)
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_inclusive", check_make_recall, mr_inclusive,
     r"(?i)strictly|after|own position|itself|\+ ?1")
case("mr_writes_filler", check_make_recall, mr_writes_filler, r"(?i)filler|clone|copy|chang")
case("mr_every_row", check_make_recall, mr_every_row,
     r"(?i)one (entry )?per row|other rows|every row|row.*position")


# ---- 05, accuracy_by_distance -----------------------------------------------------------------
def _abd(logits, y, max_distance, p_shift=1, empty=math.nan, clamp=False):
    labelled = y != IGNORE
    t = torch.arange(y.size(1), device=y.device)  # where y is (a GPU)
    first = torch.where(labelled, t, y.size(1)).min(1).values
    d = t[None] - (first[:, None] - p_shift)
    if clamp:
        d = d.clamp(max=max_distance)
    ok = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), empty, dtype=logits.dtype, device=logits.device)
    for dist in range(1, max_distance + 1):
        sel = labelled & (d == dist)
        if sel.any():
            out[dist - 1] = ok[sel].to(logits.dtype).mean()
    return out


def ad_right(logits, y, max_distance):
    return _abd(logits, y, max_distance)


def ad_p_is_first(logits, y, max_distance):  # p taken as the first labelled position
    return _abd(logits, y, max_distance, p_shift=0)


def ad_zero_when_empty(logits, y, max_distance):  # 0 where no position at that distance
    return _abd(logits, y, max_distance, empty=0.0)


def ad_far_in_last_bin(logits, y, max_distance):  # far positions clamped into the last bin
    return _abd(logits, y, max_distance, clamp=True)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_p_is_first", check_accuracy_by_distance, ad_p_is_first,
     r"(?i)p ?\+ ?1|first labelled|off by one|shift")
case("ad_zero_when_empty", check_accuracy_by_distance, ad_zero_when_empty, r"(?i)nan")
case("ad_far_in_last_bin", check_accuracy_by_distance, ad_far_in_last_bin,
     r"(?i)farther|left out|beyond|last (entry|bin)|clamp")


# ---- 05, cache_bytes ------------------------------------------------------------------------
def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return list(cache)


def cbx_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


def cbx_rel_keys(cache):  # XL's relative-position keys counted too
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(r.nbytes for r in cache.rel_keys if r is not None)
    return cbx_right(cache) + extra


def cbx_kvstate_keys_only(cache):  # KVState.kv[0] read as "the kv"
    if isinstance(cache, KVState):
        return cache.kv[0].nbytes
    return cbx_right(cache)


def cbx_numel(cache):  # numbers, not bytes
    return sum(k.numel() + v.numel() for k, v in _pairs(cache))


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, cbx_right)
case("cbx_rel_keys", check_cache_bytes_05, cbx_rel_keys,
     r"(?i)rel_keys|relative|only (the )?keys and values")
case("cbx_kvstate_keys_only", check_cache_bytes_05, cbx_kvstate_keys_only,
     r"(?i)values|both|kv\[1\]|\[2,|half")
case("cbx_numel", check_cache_bytes_05, cbx_numel, r"(?i)element_size|nbytes|bytes per|numel")


# ---- second round: subtler slips ------------------------------------------------------------
def rb_clamp_heads(table, s):  # clamped to table.size(0), the head count
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]


def fa_bias_scaled(q, k, v, bias):  # (q·k + b) / sqrt(D_h): the bias scaled too
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_empty_returns_q(q, k, v, bias):  # empty memory: the query passed through
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)


def tl_mix_reversed(model, tokens):  # layers stacked top first
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(tokens.size(1)):
        h = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            h.append(layer(h[-1], k, v))
        m = model.mix(torch.stack(h[::-1]))
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
        outs.append(h[-1])
    return model.head(torch.stack(outs, 1))


class AppendShortView(torch.autograd.Function):  # returns n slots: the new one left out
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, :n]

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.zeros_like(grad[:, 0]), None


def wg_mismatched_rows(xs, gs):  # xs flattened batch-major, gs step-major
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def r_xl_position_plus_one(memory, n_layers, span, position=0):  # counts i + 1
    if memory == "XL":
        return n_layers * span + position + 1
    return r_right(memory, n_layers, span, position)


def mr_value_after_p(filler, values, positions):  # the value written at p + 1
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), (positions + 1).clamp(max=x.size(1) - 1)] = values
    cols = torch.arange(x.size(1), device=filler.device)
    y = torch.where(cols[None] > positions[:, None], values[:, None], IGNORE)
    return x, y


def ad_d_from_start(logits, y, max_distance):  # d = t + 1: from the sequence start
    return _abd_start(logits, y, max_distance)


def _abd_start(logits, y, max_distance):
    labelled = y != IGNORE
    d = torch.arange(y.size(1))[None].expand_as(y) + 1
    ok = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for dist in range(1, max_distance + 1):
        sel = labelled & (d == dist)
        if sel.any():
            out[dist - 1] = ok[sel].to(logits.dtype).mean()
    return out


def cbx_first_layer(cache):  # the transformer's first layer only
    if isinstance(cache, (KVState, XLCache)):
        return cbx_right(cache)
    k, v = cache[0]
    return k.nbytes + v.nbytes


def skv_norm_each_half(m, norm, kv, n_heads):  # LayerNorm after the projection, per half
    k, v = kv(m).chunk(2, -1)
    k, v = norm(k), norm(v)
    return k.unflatten(-1, (n_heads, -1)), v.unflatten(-1, (n_heads, -1))


case("rb_clamp_heads", check_relative_bias, rb_clamp_heads,
     r"(?i)table.size\(1\)|max_distance|width|head")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(scaled|divid|after)|scale.*(only|before).*bias")
case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q, r"(?i)zero|empty")
case("tl_mix_reversed", check_token_loop, tl_mix_reversed,
     r"(?i)order|embedding first|reversed|top first")
case("ap_short_view", check_append, AppendShortView, r"(?i)n ?\+ ?1|new (slot|value)|slots")
case("wg_mismatched_rows", check_weight_gradient, wg_mismatched_rows,
     r"(?i)same order|rows|flatten|pair|match")
case("r_xl_position_plus_one", check_reach, r_xl_position_plus_one,
     r"(?i)off by one|position|\+ ?1")
case("mr_value_after_p", check_make_recall, mr_value_after_p,
     r"(?i)positions?\[n\]|at (its|the) position|p ?\+ ?1|shift")
case("ad_d_from_start", check_accuracy_by_distance, ad_d_from_start,
     r"(?i)value's position|from (its|the) value|t ?- ?p|start")
case("cbx_first_layer", check_cache_bytes_05, cbx_first_layer,
     r"(?i)every layer|all layers|first layer|per layer")
case("skv_norm_each_half", check_shared_kv, skv_norm_each_half,
     r"(?i)norm.*(before|first|m\b)|before.*project")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
