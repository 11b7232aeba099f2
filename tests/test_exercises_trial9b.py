"""Learner trial 9b (issue 28): notebooks 03, 04 and 05, new typical wrong answers."""
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

CASES, RIGHT, XFAIL = {}, {}, {}
IGNORE = -100


case = trial_case(CASES, XFAIL)


# ---------------------------------------------------------------- 03 · memory_vector
def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax mix
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_no_embedding(xs, w):  # mixes the layers only, drops xs[0]
    return (w.softmax(0)[1:, None, None] * xs[1:]).sum(0)


def mv_mean(xs, w):  # weighted, then mean instead of sum over layers
    return (w.softmax(0)[:, None, None] * xs).mean(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)softmax|sum to (one|1)")
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"(?i)embedding|xs\[0\]")
case("mv_mean", check_memory_vector, mv_mean, r"(?i)mean|divid|L ?\+ ?1")


# ---------------------------------------------------------------- 03 · relative_bias
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_newest_first(table, s):  # distances 1..s: the order flipped
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_clamp_heads(table, s):  # clamps with the head count (dim 0), not max_distance
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]


def rb_modulo(table, s):  # wraps far distances around instead of sharing the last bias
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first, r"(?i)order|oldest|reverse")
case("rb_clamp_heads", check_relative_bias, rb_clamp_heads,
     r"(?i)max_distance|clamp|table\.size\(1\)|width")
case("rb_modulo", check_relative_bias, rb_modulo, r"(?i)clamp|last (bias|column)|wrap|share")


# ---------------------------------------------------------------- 03 · feedback_attention
def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_scaled(q, k, v, bias):  # adds the bias before dividing by sqrt(D_h)
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_sqrt_width(q, k, v, bias):  # scales by sqrt(H * D_h), the model width
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(1) * q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_zeros_float32(q, k, v, bias):  # empty memory: zeros of the default dtype
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(after|sqrt|scal)|(sqrt|scal).*bias")
case("fa_sqrt_width", check_feedback_attention, fa_sqrt_width,
     r"(?i)sqrt\(H|width of (all|one) head")
case("fa_zeros_float32", check_feedback_attention, fa_zeros_float32,
     r"(?i)dtype|float32|float64|zeros_like|like the query")


# ---------------------------------------------------------------- 03 · token_loop
def _loop(model, tokens, mem=lambda outs, model: model.mix(torch.stack(outs)),
          append=True, head_on_memory=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = mem(outs, model)
        tops.append(m if head_on_memory else outs[-1])
        nk, nv = model.project_memory(m[:, None])
        if append:
            keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
            values = [torch.cat(kv, 2) for kv in zip(values, nv)]
        else:
            keys, values = list(nk), list(nv)
    return model.head(torch.stack(tops, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_top_only(model, tokens):  # memory = the top layer alone (no layer mix)
    return _loop(model, tokens, mem=lambda outs, model: outs[-1])


def tl_replace(model, tokens):  # keeps only the newest step's keys: replaces, no append
    return _loop(model, tokens, append=False)


def tl_head_on_memory(model, tokens):  # predicts from the memory vector, not the top
    return _loop(model, tokens, head_on_memory=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_top_only", check_token_loop, tl_top_only, r"(?i)mix|every layer|all (the )?outputs")
case("tl_replace", check_token_loop, tl_replace, r"(?i)append|cat|grow|earlier steps|only the last")
case("tl_head_on_memory", check_token_loop, tl_head_on_memory,
     r"(?i)top|head.*memory|memory.*head")


# ---------------------------------------------------------------- 03 · cache_bytes
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 2 * d_model * per


def cb_memory_too(n_layers, d_model, n_tokens, bytes_per_number):  # the 3D of the prose
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 3 * d_model * per


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values
    per = n_tokens * bytes_per_number
    return n_layers * d_model * per, d_model * per


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    per = n_tokens * bytes_per_number
    return 2 * d_model * per, 2 * n_layers * d_model * per


RIGHT["cache_bytes03"] = (check_cache_bytes, cb_right)
case("cb_memory_too", check_cache_bytes, cb_memory_too, r"(?i)memory vector|3 ?D|only.*key")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)value")
case("cb_swapped", check_cache_bytes, cb_swapped, r"(?i)order|swap|transformer.*first")


# ---------------------------------------------------------------- 04 · shared_kv
def skv_right(m, norm, kv, n_heads):
    y = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_no_norm(m, norm, kv, n_heads):  # forgets the LayerNorm
    y = kv(m).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


def skv_heads_first(m, norm, kv, n_heads):  # cuts heads before keys/values
    y = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return y[:, :, 0], y[:, :, 1]


def skv_no_bias(m, norm, kv, n_heads):  # uses the weight only, drops the bias
    y = F.linear(norm(m), kv.weight).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(?i)norm")
case("skv_heads_first", check_shared_kv, skv_heads_first,
     r"(?i)\[B, ?2, ?H|head.*(order|first)|keys/values first|interleav")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"(?i)bias")


# ---------------------------------------------------------------- 04 · Square
class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x


class SqNoTwo(torch.autograd.Function):  # forgets the factor 2 of the derivative
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x


class SqInPlace(torch.autograd.Function):  # squares x in place in forward
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x


class SqSavesOutput(torch.autograd.Function):  # saves y, then uses it as if it were x
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * 2 * y


RIGHT["square"] = (check_square, SqRight)
case("sq_no_two", check_square, SqNoTwo, r"(?i)2 ?\*? ?x|factor|half")
case("sq_in_place", check_square, SqInPlace, r"(?i)in place|in-place|changed.*(x|input)|mul_")
case("sq_saves_output", check_square, SqSavesOutput, r"(?i)saved (output|y)|OUTPUT y")


# ---------------------------------------------------------------- 04 · value_gradients
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_right_aligned(read_grads):  # adds each read into the LAST t+1 rows
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_mean(read_grads):  # averages over the reads instead of summing
    total = vg_right(read_grads)
    n = torch.arange(total.size(0), 0, -1, dtype=total.dtype)
    return total / n[:, None]


def vg_own_read(read_grads):  # takes only the read of the value's own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_right_aligned", check_value_gradients, vg_right_aligned,
     r"(?i)first t ?\+ ?1|slot j|slots 0|align")
case("vg_mean", check_value_gradients, vg_mean, r"(?i)mean|average|divid")
case("vg_own_read", check_value_gradients, vg_own_read,
     r"(?i)later (read|step)|every read|t ?(>=|≥) ?j|own (step|read)")


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
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApCopy(torch.autograd.Function):  # right numbers, but a torch.cat copy
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApSplitFlipped(torch.autograd.Function):  # backward: slot 0 to value, rest to top
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApBatchAxis(torch.autograd.Function):  # n from the batch axis of top
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


RIGHT["append"] = (check_append, ApRight)
case("ap_copy", check_append, ApCopy, r"(?i)cop(y|ies)|view|cat")
case("ap_split_flipped", check_append, ApSplitFlipped,
     r"(?i)first n|slot n|last slot|top.*value|split")
case("ap_batch_axis", check_append, ApBatchAxis, r"(?i)dim(ension)? ?1|time axis|size\(1\)|batch")


# ---------------------------------------------------------------- 04 · weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_rows_mismatched(xs, gs):  # flattens xs batch-major, gs step-major
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_sum_first(xs, gs):  # sums over the batch before the product
    return gs.sum(1).T @ xs.sum(1)


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_rows_mismatched", check_weight_gradient, wg_rows_mismatched,
     r"(?i)same way|same \(t, ?b\)|row order|flatten.*(both|same)")
case("wg_transposed", check_weight_gradient, wg_transposed,
     r"(?i)transpos|\[D_out, D_in\]|G\^?T ?X|gs.*first")
case("wg_sum_first", check_weight_gradient, wg_sum_first,
     r"(?i)(sum|add).*(before|outer)|cross|per (row|sequence|example)")


# ---------------------------------------------------------------- 05 · reach
def reach_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def reach_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    if memory == "feedback":
        return math.inf
    return reach_right(memory, n_layers, span, position) + 1


def reach_xl_per_layer(memory, n_layers, span, position=0):  # segment once per layer
    if memory == "XL":
        return n_layers * (span + position)
    return reach_right(memory, n_layers, span, position)


def reach_feedback_window(memory, n_layers, span, position=0):  # thinks W bounds it too
    if memory == "feedback":
        return n_layers * span
    return reach_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach_right)
case("reach_plus_one", check_reach, reach_plus_one, r"(?i)itself|off by one")
case("reach_xl_per_layer", check_reach, reach_xl_per_layer,
     r"(?i)once|per layer|own segment")
case("reach_feedback_window", check_reach, reach_feedback_window,
     r"(?i)inf|unbounded|feedback")


# ---------------------------------------------------------------- 05 · make_recall
def mr_right(filler, values, positions):
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


def mr_column_index(filler, values, positions):  # x[:, positions] = values
    x, y = mr_right(filler, values, positions)
    x = filler.clone()
    x[:, positions] = values
    return x, y


def mr_zero_label(filler, values, positions):  # 0 where unlabelled, not IGNORE
    x, y = mr_right(filler, values, positions)
    return x, torch.where(y == IGNORE, torch.zeros_like(y), y)


def mr_float_labels(filler, values, positions):  # y as floats
    x, y = mr_right(filler, values, positions)
    return x, y.float()


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_column_index", check_make_recall, mr_column_index,
     r"(?i)one (entry|value) per row|every row|rows and positions together|x\[:, ")
case("mr_zero_label", check_make_recall, mr_zero_label, r"(?i)IGNORE|-100")
case("mr_float_labels", check_make_recall, mr_float_labels, r"(?i)dtype|LongTensor|int64")


# ---------------------------------------------------------------- 05 · accuracy_by_distance
def _acc(logits, y, max_distance, d_fn, empty=float("nan")):
    lab = y != IGNORE
    d = d_fn(lab)
    hit = (logits.argmax(-1) == y) & lab
    out = []
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        n = int(at.sum())
        out.append(hit[at].float().sum().item() / n if n else empty)
    return torch.tensor(out, dtype=logits.dtype, device=logits.device)


def ad_right(logits, y, max_distance):
    return _acc(logits, y, max_distance, lambda lab: lab.long().cumsum(1))


def ad_position(logits, y, max_distance):  # d = the position t itself
    return _acc(logits, y, max_distance,
                lambda lab: torch.arange(lab.size(1)).expand_as(lab))


def ad_zero_empty(logits, y, max_distance):  # 0 where no position, not NaN
    return _acc(logits, y, max_distance, lambda lab: lab.long().cumsum(1), empty=0.0)


def ad_cumsum_rows(logits, y, max_distance):  # cumsum along the batch axis
    return _acc(logits, y, max_distance, lambda lab: lab.long().cumsum(0))


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_position", check_accuracy_by_distance, ad_position,
     r"(?i)start of the sequence|t ?- ?p|from the value")
case("ad_zero_empty", check_accuracy_by_distance, ad_zero_empty, r"(?i)nan")
case("ad_cumsum_rows", check_accuracy_by_distance, ad_cumsum_rows,
     r"(?i)cumsum.*(dim ?=? ?1|time|rows|batch)|wrong axis|dim 0")


# ---------------------------------------------------------------- 05 · cache_bytes
def _pairs(cache):
    if hasattr(cache, "kv") and isinstance(cache.kv, torch.Tensor):  # KVState
        return [(cache.kv, None)]
    if hasattr(cache, "kv"):  # XLCache
        return [tuple(b) for b in cache.kv]
    return list(cache)


def cb5_right(cache):
    return sum(t.nbytes for p in _pairs(cache) for t in p if t is not None)


def cb5_storage(cache):  # counts the whole storage behind each view
    return sum(t.untyped_storage().nbytes() for p in _pairs(cache) for t in p
               if t is not None)


def cb5_keys_only(cache):  # counts the keys, forgets the values
    if hasattr(cache, "kv") and isinstance(cache.kv, torch.Tensor):
        return cache.kv[0].nbytes
    return sum(k.nbytes for k, _ in _pairs(cache))


def cb5_numel(cache):  # counts numbers, not bytes
    return sum(t.numel() for p in _pairs(cache) for t in p if t is not None)


RIGHT["cache_bytes05"] = (check_cache_bytes05, cb5_right)
case("cb5_storage", check_cache_bytes05, cb5_storage, r"(?i)storage|spare|remembered|view")
case("cb5_keys_only", check_cache_bytes05, cb5_keys_only, r"(?i)value")
case("cb5_numel", check_cache_bytes05, cb5_numel, r"(?i)numel|element_size|bytes per|nbytes")


# ================================================================ more slips, same exercises
# 03 · memory_vector
def mv_log_softmax(xs, w):  # log_softmax: negative "weights"
    return (w.log_softmax(0)[:, None, None] * xs).sum(0)


def mv_sum_batch(xs, w):  # sums over the batch axis (dim 1): [L+1, D]
    return (w.softmax(0)[:, None, None] * xs).sum(1)


def mv_in_place(xs, w):  # weights the caller's xs in place
    return xs.mul_(w.softmax(0)[:, None, None]).sum(0)


case("mv_log_softmax", check_memory_vector, mv_log_softmax, r"(?i)log_softmax|log")
case("mv_sum_batch", check_memory_vector, mv_sum_batch,
     r"(?i)layer axis|dim ?=? ?0|batch axis|dim 1")
case("mv_in_place", check_memory_vector, mv_in_place, r"(?i)in place|in-place|changed|mul_")


# 03 · relative_bias
def rb_clamp_minus_one(table, s):  # clamps at max_distance - 1 before the -1
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


def rb_float_arange(table, s):  # float distances: not an index
    d = torch.arange(float(s), 0.0, -1.0).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_rows(table, s):  # indexes the rows (heads) of the table, not its columns
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[d - 1]


case("rb_clamp_minus_one", check_relative_bias, rb_clamp_minus_one,
     r"(?i)clamp.*(max_distance|size\(1\))[^-]|last (entry|column)|off by one|one short")
case("rb_float_arange", check_relative_bias, rb_float_arange,
     r"(?i)long|integer|float.*(index|distances)")
case("rb_rows", check_relative_bias, rb_rows, r"(?i)column|table\[:, |rows|heads")


# 03 · feedback_attention
def fa_keys_as_values(q, k, v, bias):  # typo: weights applied to k, not v
    return fa_right(q, k, k, bias)


def fa_bias_transposed(q, k, v, bias):  # bias.T: [S, H]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias.T
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # adds the bias to the weights
    if k.size(2) == 0:
        return torch.zeros_like(q)
    p = (torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))).softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", p, v)


case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values,
     r"(?i)\bv\b.*(instead|not).*\bk\b|values|k where v")
case("fa_bias_transposed", check_feedback_attention, fa_bias_transposed,
     r"(?i)bias.*(transpos|\[H, ?S\]|\.T)")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|after|inside).*softmax|softmax.*bias")


# 03 · token_loop
def tl_first_projection(model, tokens):  # every layer reads layer 0's keys and values
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for layer in model.layers:
            outs.append(layer(outs[-1], keys[0], values[0]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_embedding_input(model, tokens):  # every layer takes the embedding as input
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(x[:, t], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_prepend(model, tokens):  # new keys put in FRONT: newest first
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat((n, o), 2) for o, n in zip(keys, nk)]
        values = [torch.cat((n, o), 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_first_projection", check_token_loop, tl_first_projection,
     r"(?i)own (projection|keys)|keys\[i\]|layer's|every layer.*(same|first)")
case("tl_embedding_input", check_token_loop, tl_embedding_input,
     r"(?i)output below|previous layer|outs\[-1\]|embedding.*every layer")
case("tl_prepend", check_token_loop, tl_prepend, r"(?i)oldest first|prepend|in front")


# 03 · cache_bytes
def cb_feedback_per_layer(n_layers, d_model, n_tokens, bytes_per_number):  # both per layer
    per = n_tokens * bytes_per_number
    return 2 * n_layers * d_model * per, 2 * n_layers * d_model * per


def cb_bits(n_layers, d_model, n_tokens, bytes_per_number):  # counts bits (x 8)
    per = n_tokens * bytes_per_number * 8
    return 2 * n_layers * d_model * per, 2 * d_model * per


case("cb_feedback_per_layer", check_cache_bytes, cb_feedback_per_layer,
     r"(?i)shared|one key and one value|all (its )?layers|1/L")
case("cb_bits", check_cache_bytes, cb_bits, r"(?i)bits|factor (of )?8")


# 04 · shared_kv
def skv_head_minor(m, norm, kv, n_heads):  # [D] -> [D_h, H] then transpose
    k, v = kv(norm(m)).chunk(2, -1)
    b = m.size(0)
    return (k.view(b, -1, n_heads).transpose(1, 2), v.view(b, -1, n_heads).transpose(1, 2))


def skv_swapped(m, norm, kv, n_heads):  # keys and values swapped
    k, v = skv_right(m, norm, kv, n_heads)
    return v, k


case("skv_head_minor", check_shared_kv, skv_head_minor,
     r"(?i)contiguous|head-major|\[B, ?H, ?D_h\]|view.*H, ?D_h|transpos")
case("skv_swapped", check_shared_kv, skv_swapped, r"(?i)swap|first D.*key|keys first")


# 04 · Square
class SqNoGradOutput(torch.autograd.Function):  # returns dy/dx, forgets grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqSumGrad(torch.autograd.Function):  # reduces the gradient to a scalar, like the loss
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g * 2 * x).sum()


case("sq_no_grad_output", check_square, SqNoGradOutput, r"(?i)grad_output|chain rule")
case("sq_sum_grad", check_square, SqSumGrad,
     r"(?i)shape of x|same shape|sum|scalar")


# 04 · value_gradients
def vg_last_twice(read_grads):  # starts from the last read, then adds every read
    total = read_grads[-1].clone()
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_slots_summed(read_grads):  # sums each read over its slots, into row t
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[t] += g.sum(0)
    return total


case("vg_last_twice", check_value_gradients, vg_last_twice,
     r"(?i)twice|zeros|double|last read")
case("vg_slots_summed", check_value_gradients, vg_slots_summed,
     r"(?i)over its slots|row j must|slot j of every")


# 04 · Append
class ApNoData(torch.autograd.Function):  # writes and views `buffer`, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApKeepdim(torch.autograd.Function):  # value's gradient keeps the slot axis
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


case("ap_no_data", check_append, ApNoData, r"(?i)\.data|version")
case("ap_keepdim", check_append, ApKeepdim,
     r"(?i)grad\[:, ?n\]|\[B, ?F\]|slot axis|value's shape|shape of value")


# 04 · weight_gradient
def wg_last_step(xs, gs):  # only the last step's outer products
    return gs[-1].T @ xs[-1]


def wg_row_product(xs, gs):  # G X^T: [T·B, T·B]
    return gs.flatten(0, 1) @ xs.flatten(0, 1).T


def wg_mean_steps(xs, gs):  # averages over the steps
    return wg_right(xs, gs) / xs.size(0)


case("wg_last_step", check_weight_gradient, wg_last_step,
     r"(?i)every step|all steps|last step|only one step")
case("wg_row_product", check_weight_gradient, wg_row_product,
     r"(?i)G\^?T ?X|transpose G|\[T·?B, ?T·?B\]|gs.*\.T")
case("wg_mean_steps", check_weight_gradient, wg_mean_steps, r"(?i)mean|average|divid")


# 05 · reach
def reach_xl_no_position(memory, n_layers, span, position=0):  # forgets the segment
    if memory == "XL":
        return n_layers * span
    return reach_right(memory, n_layers, span, position)


def reach_one_layer(memory, n_layers, span, position=0):  # the span alone
    if memory == "window":
        return span
    return reach_right(memory, n_layers, span, position)


case("reach_xl_no_position", check_reach, reach_xl_no_position,
     r"(?i)position|own segment|\+ ?i")
case("reach_one_layer", check_reach, reach_one_layer, r"(?i)each layer|per layer|n_layers|L ?[·*]")


# 05 · make_recall
def mr_labels_from_p(filler, values, positions):  # labels from p on (>=), not after
    x, _ = mr_right(filler, values, positions)
    at = torch.arange(filler.size(1), device=filler.device)[None, :] >= positions[:, None]
    return x, torch.where(at, values[:, None], torch.full_like(filler, IGNORE))


def mr_labels_before(filler, values, positions):  # mask flipped: before p
    x, _ = mr_right(filler, values, positions)
    at = torch.arange(filler.size(1), device=filler.device)[None, :] < positions[:, None]
    return x, torch.where(at, values[:, None], torch.full_like(filler, IGNORE))


def mr_positions_as_labels(filler, values, positions):  # typo: positions, not values
    x, _ = mr_right(filler, values, positions)
    at = torch.arange(filler.size(1), device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(at, positions[:, None], torch.full_like(filler, IGNORE))


case("mr_labels_from_p", check_make_recall, mr_labels_from_p,
     r"(?i)strictly|after|the value's own position|at p")
case("mr_labels_before", check_make_recall, mr_labels_before, r"(?i)before|after|flip")
case("mr_positions_as_labels", check_make_recall, mr_positions_as_labels,
     r"(?i)positions? (instead|where)|labels.*values|the value")


# 05 · accuracy_by_distance
def ad_over_rows(logits, y, max_distance):  # divides the hits by N, every row
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = []
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        out.append(hit[at].float().sum().item() / y.size(0) if at.any() else float("nan"))
    return torch.tensor(out)


def ad_argmax_time(logits, y, max_distance):  # argmax over dim 1 (time)
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    pred = logits.argmax(1).gather(1, torch.zeros_like(y))
    hit = (pred == y) & lab
    out = []
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        n = int(at.sum())
        out.append(hit[at].float().sum().item() / n if n else float("nan"))
    return torch.tensor(out)


case("ad_over_rows", check_accuracy_by_distance, ad_over_rows,
     r"(?i)positions at (that|each) distance|denominator|divid|rows")
case("ad_argmax_time", check_accuracy_by_distance, ad_argmax_time,
     r"(?i)argmax.*(vocab|last axis|dim ?=? ?-1)")


# 05 · cache_bytes
def cb5_first_layer(cache):  # counts one layer only
    pairs = _pairs(cache)
    return sum(t.nbytes for t in pairs[0] if t is not None)


def cb5_rel_keys(cache):  # XL: counts the relative keys too
    extra = 0
    if hasattr(cache, "rel_keys"):
        extra = sum(r.nbytes for r in cache.rel_keys if r is not None)
    return cb5_right(cache) + extra


case("cb5_first_layer", check_cache_bytes05, cb5_first_layer,
     r"(?i)every layer|all layers|one layer|first layer")
case("cb5_rel_keys", check_cache_bytes05, cb5_rel_keys,
     r"(?i)rel(ative)?_?keys|relative")


# ================================================================ a third round
def mv_broadcast(xs, w):  # weights as [L+1, 1]: broadcasts against [B, D]
    return (w.softmax(0)[:, None] * xs).sum(0)


def rb_last_columns(table, s):  # the last s columns, flipped: right only for s <= width
    return table[:, :s].flip(1)


def tl_cat_heads(model, tokens):  # appends along dim 1 (heads), not dim 2 (keys)
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 1) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 1) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def vg_default_dtype(read_grads):  # torch.zeros(T, F): float32 whatever the reads
    total = torch.zeros(len(read_grads), read_grads[-1].size(1))
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


class ApLastSlot(torch.autograd.Function):  # writes the value into the buffer's LAST slot
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, -1] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


def mr_scatter_rows(filler, values, positions):  # scatter along dim 0, not dim 1
    _, y = mr_right(filler, values, positions)
    x = filler.clone().scatter_(0, positions[:, None], values[:, None])
    return x, y


def cb5_kib(cache):  # reports KiB, as the notebook's plots do
    return cb5_right(cache) / 1024


def reach_xl_position_plus_one(memory, n_layers, span, position=0):  # counts from 1
    if memory == "XL":
        return n_layers * span + position + 1
    return reach_right(memory, n_layers, span, position)


case("mv_broadcast", check_memory_vector, mv_broadcast,
     r"(?i)\[:, None, None\]|broadcast|one weight per layer|\[L ?\+ ?1, 1, 1\]")
case("rb_last_columns", check_relative_bias, rb_last_columns,
     r"(?i)max_distance|clamp|share|beyond")
case("tl_cat_heads", check_token_loop, tl_cat_heads, r"(?i)dim(=| )?2|key axis|heads")
case("vg_default_dtype", check_value_gradients, vg_default_dtype,
     r"(?i)dtype|float32|float64|zeros_like")
case("ap_last_slot", check_append, ApLastSlot, r"(?i)last slot|\[:, ?-1\]|end of the buffer")
case("mr_scatter_rows", check_make_recall, mr_scatter_rows,
     r"(?i)dim(=| )?1|rows|columns|one entry per row|wrong (axis|dim)")
case("cb5_kib", check_cache_bytes05, cb5_kib, r"(?i)KiB|1,?024")
case("reach_xl_position_plus_one", check_reach, reach_xl_position_plus_one,
     r"(?i)off by one|position i|\+ ?1|i tokens")


# ================================================================ a fourth round
def cb_hard_l4(n_layers, d_model, n_tokens, bytes_per_number):  # "1/4", the prose's L = 4
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, t // 4


def reach_hardcoded(memory, n_layers, span, position=0):  # the notebook's L = 2, W = 4
    return {"window": 2 * 4, "XL": 2 * 8 + position, "feedback": math.inf}[memory]


def skv_chunk_batch(m, norm, kv, n_heads):  # chunk(2) splits dim 0, the batch
    k, v = kv(norm(m)).chunk(2)
    d_h = m.size(1) // n_heads
    return k.reshape(-1, n_heads, d_h), v.reshape(-1, n_heads, d_h)


class SqBackwardInPlace(torch.autograd.Function):  # doubles the saved x in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x *= 2
        return g * x


def cb5_iter_namedtuple(cache):  # iterates an XLCache like the transformer's list
    if hasattr(cache, "kv") and isinstance(cache.kv, torch.Tensor):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


def ad_list(logits, y, max_distance):  # a Python list, not a tensor
    return ad_right(logits, y, max_distance).tolist()


def tl_no_unsqueeze(model, tokens):  # projects m [B, D], not m[:, None] [B, 1, D]
    return _loop_m(model, tokens)


def _loop_m(model, tokens):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m)
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("cb_hard_l4", check_cache_bytes, cb_hard_l4, r"(?i)hard-?coded|1/L|divide by (L|n_layers)")
case("reach_hardcoded", check_reach, reach_hardcoded,
     r"(?i)hard-?coded|constant|ignor\w* (n_layers|span)|the arguments")
case("skv_chunk_batch", check_shared_kv, skv_chunk_batch,
     r"(?i)chunk.*(dim|batch|axis)|dim ?=? ?-1|batch")
case("sq_backward_in_place", check_square, SqBackwardInPlace,
     r"(?i)in place|in-place|saved|changed")
case("cb5_iter_namedtuple", check_cache_bytes05, cb5_iter_namedtuple,
     r"(?i)XLCache|\.kv|KVBuffer|NamedTuple")
case("ad_list", check_accuracy_by_distance, ad_list, r"(?i)tensor|list")
case("tl_no_unsqueeze", check_token_loop, tl_no_unsqueeze,
     r"(?i)m\[:, None\]|\[B, 1, D\]|\[B, M, D\]|unsqueeze")


# ================================================================ in place, on other inputs
def fa_q_in_place(q, k, v, bias):  # q /= sqrt(D_h): scales the caller's query
    if k.size(2) == 0:
        return torch.zeros_like(q)
    q /= math.sqrt(q.size(-1))
    s = torch.einsum("bhd,bhsd->bhs", q, k) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def ad_y_in_place(logits, y, max_distance):  # sets the caller's IGNORE labels to 0
    lab = y != IGNORE
    y[~lab] = 0
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = []
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        n = int(at.sum())
        out.append(hit[at].float().sum().item() / n if n else float("nan"))
    return torch.tensor(out)


def mr_values_in_place(filler, values, positions):  # values.unsqueeze_(1)
    x, y = mr_right(filler, values, positions)
    values.unsqueeze_(1)
    return x, y


case("fa_q_in_place", check_feedback_attention, fa_q_in_place, r"(?i)in place|in-place|`q`")
case("ad_y_in_place", check_accuracy_by_distance, ad_y_in_place,
     r"(?i)in place|in-place|`y`")
case("mr_values_in_place", check_make_recall, mr_values_in_place,
     r"(?i)in place|in-place|`values`")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
