"""Learner trial 21b (issue 28): new wrong answers for notebooks 03, 04 and 05."""

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


# ---------------------------------------------------------------- 03: memory_vector
def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


def mv_normalised_logits(xs, w):  # "positive and sum to one": divides by the sum
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def mv_mean_of_weighted(xs, w):  # mean over the layers instead of the sum
    return (w.softmax(0)[:, None, None] * xs).mean(0)


def mv_no_embedding(xs, w):  # mixes the layers' outputs only
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_normalised_logits", check_memory_vector, mv_normalised_logits, r"softmax")
case("mv_mean_of_weighted", check_memory_vector, mv_mean_of_weighted,
     r"(?i)mean|L ?\+ ?1|sum over")
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"(?i)embedding|xs\[0\]")


# ---------------------------------------------------------------- 03: relative_bias
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_modulo(table, s):  # wraps distances past max_distance around
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]


def rb_clamp_before_shift(table, s):  # clamps d at max_distance - 1, then subtracts 1
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


def rb_last_columns(table, s):  # the last s columns of the table
    return table[:, -s:]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_modulo", check_relative_bias, rb_modulo, r"(?i)clamp|share|last (column|bias)")
case("rb_clamp_before_shift", check_relative_bias, rb_clamp_before_shift,
     r"(?i)clamp|max_distance|last column")
case("rb_last_columns", check_relative_bias, rb_last_columns,
     r"(?i)distance|column d ?- ?1|arange")


# ---------------------------------------------------------------- 03: feedback_attention
def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    w = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))).softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", w, v)


def fa_bias_scaled(q, k, v, bias):  # (q k + b) / sqrt(d): the bias scaled too
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def fa_empty_returns_query(q, k, v, bias):  # no memory: passes the query through
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|inside|scores)|after the softmax")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")
case("fa_empty_returns_query", check_feedback_attention, fa_empty_returns_query,
     r"(?i)zero")


# ---------------------------------------------------------------- 03: token_loop
def _loop(model, tokens, memory_of=None, append=True, same_kv=False):
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = 0 if same_kv else i
            outs.append(layer(outs[-1], keys[j], values[j]))
        tops.append(outs[-1])
        m = memory_of(outs) if memory_of else model.mix(torch.stack(outs))
        nk, nv = model.project_memory(m[:, None])
        if append:
            keys = [torch.cat(p, 2) for p in zip(keys, nk)]
            values = [torch.cat(p, 2) for p in zip(values, nv)]
        else:
            keys, values = list(nk), list(nv)
    return model.head(torch.stack(tops, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_top_as_memory(model, tokens):  # the top layer is the memory: no layer mix
    return _loop(model, tokens, memory_of=lambda outs: outs[-1])


def tl_replace_memory(model, tokens):  # keeps only the newest step's keys and values
    return _loop(model, tokens, append=False)


def tl_first_layer_kv(model, tokens):  # every layer reads layer 0's projection
    return _loop(model, tokens, same_kv=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_top_as_memory", check_token_loop, tl_top_as_memory, r"(?i)mix|memory vector")
case("tl_replace_memory", check_token_loop, tl_replace_memory,
     r"(?i)append|cat|grow|only the (last|newest)|replac")
case("tl_first_layer_kv", check_token_loop, tl_first_layer_kv,
     r"(?i)(own|each|its) (layer'?s? )?(keys|projection)|keys\[0\]|layer 0")


# ---------------------------------------------------------------- 03: cache_bytes
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 2 * d_model * per


def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # 3D per token
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 3 * d_model * per


def cb_layers_plus_one(n_layers, d_model, n_tokens, bytes_per_number):  # L + 1 caches
    per = n_tokens * bytes_per_number
    return 2 * (n_layers + 1) * d_model * per, 2 * d_model * per


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values
    per = n_tokens * bytes_per_number
    return n_layers * d_model * per, d_model * per


RIGHT["cache_bytes"] = (check_cache_bytes, cb_right)
case("cb_with_memory", check_cache_bytes, cb_with_memory, r"(?i)memory vector|only.*keys")
case("cb_layers_plus_one", check_cache_bytes, cb_layers_plus_one,
     r"(?i)L ?\+ ?1|n_layers \+ 1|embedding|per layer")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)value")


# ---------------------------------------------------------------- 04: shared_kv
def sk_right(m, norm, kv, n_heads):
    b, d = m.shape
    both = kv(norm(m)).view(b, 2, n_heads, d // n_heads)
    return both[:, 0], both[:, 1]


def sk_no_norm(m, norm, kv, n_heads):
    b, d = m.shape
    both = kv(m).view(b, 2, n_heads, d // n_heads)
    return both[:, 0], both[:, 1]


def sk_heads_before_halves(m, norm, kv, n_heads):  # [B, H, 2, D_h]
    b, d = m.shape
    both = kv(norm(m)).view(b, n_heads, 2, d // n_heads)
    return both[:, :, 0], both[:, :, 1]


def sk_no_bias(m, norm, kv, n_heads):  # the weight only
    b, d = m.shape
    both = (norm(m) @ kv.weight.T).view(b, 2, n_heads, d // n_heads)
    return both[:, 0], both[:, 1]


RIGHT["shared_kv"] = (check_shared_kv, sk_right)
case("sk_no_norm", check_shared_kv, sk_no_norm, r"(?i)norm")
case("sk_heads_before_halves", check_shared_kv, sk_heads_before_halves,
     r"(?i)\[B, ?2, ?H, ?D_h\]|halves|keys first|interleav")
case("sk_no_bias", check_shared_kv, sk_no_bias, r"(?i)bias")


# ---------------------------------------------------------------- 04: Square
class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SquareNoTwo(torch.autograd.Function):  # the constant 2 forgotten
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x


class SquareSavesOutput(torch.autograd.Function):  # saves y and uses 2 y
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * 2 * y


class SquareInPlaceGrad(torch.autograd.Function):  # scales grad_output in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output.mul_(2 * x)


RIGHT["square"] = (check_square, SquareRight)
case("sq_no_two", check_square, SquareNoTwo, r"2 ?\*? ?x|factor (of )?2|twice")
case("sq_saves_output", check_square, SquareSavesOutput,
     r"(?i)(save|saved).*(x|input)|output|y instead")
case("sq_in_place_grad", check_square, SquareInPlaceGrad,
     r"(?i)in place|grad_output\.mul_|new tensor")


# ---------------------------------------------------------------- 04: value_gradients
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_last_rows(read_grads):  # aligns each read with the END of the total
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_own_step_only(read_grads):  # each value gets only its own step's read
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_mean_of_reads(read_grads):  # averages over the reads that saw each value
    total, count = torch.zeros_like(read_grads[-1]), torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
        count[: t + 1] += 1
    return total / count


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_last_rows", check_value_gradients, vg_last_rows,
     r"(?i)first t ?\+ ?1|slots? 0|rows? 0")
case("vg_own_step_only", check_value_gradients, vg_own_step_only,
     r"(?i)every (later )?read|t ?(>=|≥) ?j|all (the )?reads|later")
case("vg_mean_of_reads", check_value_gradients, vg_mean_of_reads, r"(?i)sum|mean|averag")


# ---------------------------------------------------------------- 04: Append
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


class AppendBatchAxis(torch.autograd.Function):  # n read off the batch axis
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendCopies(torch.autograd.Function):  # returns a copy of the prefix
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendNewestFirst(torch.autograd.Function):  # backward reads slot 0 as the newest
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


RIGHT["append"] = (check_append, AppendRight)
case("ap_batch_axis", check_append, AppendBatchAxis,
     r"(?i)dim(ension)? 1|size\(1\)|time axis|axis 1")
case("ap_copies", check_append, AppendCopies, r"(?i)cop(y|ies)|view")
case("ap_newest_first", check_append, AppendNewestFirst,
     r"(?i)slot n|last slot|first n slots|newest")


# ---------------------------------------------------------------- 04: weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_rows_mismatched(xs, gs):  # xs flattened batch-major, gs step-major
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def wg_last_step(xs, gs):  # only the last step's outer products
    return gs[-1].T @ xs[-1]


def wg_mean(xs, gs):  # a mean over the T·B rows
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1))


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_rows_mismatched", check_weight_gradient, wg_rows_mismatched,
     r"(?i)same (way|order)|row r|flatten.*(same|both)|transpose")
case("wg_last_step", check_weight_gradient, wg_last_step, r"(?i)every step|all steps|sum over")
case("wg_mean", check_weight_gradient, wg_mean, r"(?i)mean|sum, no|divid|T·B|T\*B")


# ---------------------------------------------------------------- 05: reach
def re_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def re_window_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    if memory == "window":
        return n_layers * span + 1
    return re_right(memory, n_layers, span, position)


def re_xl_position_per_layer(memory, n_layers, span, position=0):
    if memory == "XL":
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)


def re_xl_last_position(memory, n_layers, span, position=0):  # the table's maximum
    if memory == "XL":
        return n_layers * span + span - 1
    return re_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, re_right)
case("re_window_plus_one", check_reach, re_window_plus_one,
     r"(?i)itself|\+ ?1|not count")
case("re_xl_position_per_layer", check_reach, re_xl_position_per_layer,
     r"(?i)once|per layer")
case("re_xl_last_position", check_reach, re_xl_last_position, r"(?i)position")


# ---------------------------------------------------------------- 05: make_recall
def mr_right(filler, values, positions):
    x = filler.clone()
    n, t = x.shape
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(x, IGNORE))
    return x, y


def mr_in_place(filler, values, positions):  # writes into the caller's filler
    x = filler
    n, t = x.shape
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(x, IGNORE))


def mr_column_slice(filler, values, positions):  # x[:, positions]: every row, every p
    x = filler.clone()
    t = x.size(1)
    x[:, positions] = values[:, None]
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(x, IGNORE))


def mr_float_labels(filler, values, positions):  # labels made with a float fill
    x, _ = mr_right(filler, values, positions)
    y = torch.full(x.shape, float(IGNORE))
    after = torch.arange(x.size(1), device=filler.device)[None, :] > positions[:, None]
    y[after] = values[:, None].expand_as(x)[after].float()
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_in_place", check_make_recall, mr_in_place, r"(?i)clone|in place|chang|filler")
case("mr_column_slice", check_make_recall, mr_column_slice,
     r"(?i)one entry per row|each row|rows and positions|arange")
case("mr_float_labels", check_make_recall, mr_float_labels, r"(?i)dtype|long|int|float")


# ---------------------------------------------------------------- 05: accuracy_by_distance
def _acc(logits, y, max_distance, d=None, empty=math.nan, drop_far=True):
    labelled = y != IGNORE
    if d is None:
        d = labelled.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & labelled
    keep = labelled & (d <= max_distance) if drop_far else labelled
    idx = d[keep] - 1
    # counted in integers: in bfloat16 a count stops growing at 256 (re-trial 43)
    hits = torch.zeros(max_distance, dtype=torch.long, device=y.device).index_add_(0, idx, hit[keep].long())
    count = torch.zeros(max_distance, dtype=torch.long, device=y.device).index_add_(0, idx, torch.ones_like(idx))
    out = (hits / count).to(logits.dtype)
    return torch.where(count > 0, out, torch.full_like(out, empty))


def ad_right(logits, y, max_distance):
    return _acc(logits, y, max_distance)


def ad_zero_when_empty(logits, y, max_distance):
    return _acc(logits, y, max_distance, empty=0.0)


def ad_value_at_zero(logits, y, max_distance):  # assumes p = 0: d = t for every row
    t = torch.arange(y.size(1)).expand_as(y)
    return _acc(logits, y, max_distance, d=t)


def ad_far_not_dropped(logits, y, max_distance):  # distances past max_distance kept
    return _acc(logits, y, max_distance, drop_far=False)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_zero_when_empty", check_accuracy_by_distance, ad_zero_when_empty, r"NaN|nan")
case("ad_value_at_zero", check_accuracy_by_distance, ad_value_at_zero,
     r"(?i)position 0|p ?= ?0|from y|first labelled|row's p")
case("ad_far_not_dropped", check_accuracy_by_distance, ad_far_not_dropped,
     r"(?i)(beyond|past|greater than|over|farther than) max_distance|drop|le(ave|ft) out")


# ---------------------------------------------------------------- 05: cache_bytes
def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return list(cache)


def cm_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


def cm_storage(cache):  # the storages behind the views
    seen = {}
    for k, v in _pairs(cache):
        for t in (k, v):
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def cm_numel(cache):  # counts numbers, not bytes
    return sum(k.numel() + v.numel() for k, v in _pairs(cache))


def cm_rel_keys(cache):  # XL: the relative keys counted too
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(r.nbytes for r in cache.rel_keys if r is not None)
    return cm_right(cache) + extra


RIGHT["cache_bytes05"] = (check_cache_bytes05, cm_right)
case("cm_storage", check_cache_bytes05, cm_storage, r"(?i)storage|view")
case("cm_numel", check_cache_bytes05, cm_numel, r"(?i)element_size|numel|bytes per")
case("cm_rel_keys", check_cache_bytes05, cm_rel_keys, r"(?i)rel(ative)?_?keys?|relative")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
