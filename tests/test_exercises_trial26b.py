"""Learner trial 26b (issue 28): notebooks 03, 04 and 05, three new wrong answers per exercise."""
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

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)   # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ---------------------------------------------------------------- 03 memory_vector
def memory_vector(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_plain_mean(xs, w):  # forgets the learned weights: every layer counts the same
    return xs.mean(0)


def mv_layers_only(xs, w):  # reads xs as the layers only, drops the embedding xs[0]
    return (torch.softmax(w[1:], 0)[:, None, None] * xs[1:]).sum(0)


def mv_weighted_mean(xs, w):  # a weighted sum, then divided by the count of layers again
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0) / xs.size(0)


RIGHT["memory_vector"] = (check_memory_vector, memory_vector)
case("mv_plain_mean", check_memory_vector, mv_plain_mean, r"(?i)(weight|softmax\(w\)|w\b)")
case("mv_layers_only", check_memory_vector, mv_layers_only, r"(?i)(embedding|xs\[0\])")
case("mv_weighted_mean", check_memory_vector, mv_weighted_mean,
     r"(?i)(divid|L ?\+ ?1|mean|sum)")


# ---------------------------------------------------------------- 03 relative_bias
def relative_bias(table, s):
    d = s - torch.arange(s, device=table.device)
    return table[:, d.clamp(max=table.size(1)) - 1]


def rb_clamp_early(table, s):  # far keys share the second-to-last bias (clamped one short)
    d = s - torch.arange(s, device=table.device)
    return table[:, d.clamp(max=table.size(1) - 1) - 1]


def rb_no_minus_one(table, s):  # table[:, d] for distance d (forgets the - 1), clamped to fit
    d = s - torch.arange(s, device=table.device)
    return table[:, d.clamp(max=table.size(1) - 1)]


def rb_transposed(table, s):  # indexes the transposed table: [s, H]
    d = s - torch.arange(s, device=table.device)
    return table.t()[d.clamp(max=table.size(1)) - 1]


RIGHT["relative_bias"] = (check_relative_bias, relative_bias)
case("rb_clamp_early", check_relative_bias, rb_clamp_early, r"(?i)(clamp|max_distance|last bias)")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one,
     r"(?i)(d ?- ?1|off by one|one entry|distance 1)")
case("rb_transposed", check_relative_bias, rb_transposed, r"(?i)(\[H, s\]|transpos|head)")


# ---------------------------------------------------------------- 03 feedback_attention
def feedback_attention(q, k, v, bias):
    scores = (k @ q[..., None]).squeeze(-1) / math.sqrt(q.size(-1)) + bias
    return (scores.softmax(-1)[..., None] * v).sum(-2)


def fa_bias_after_softmax(q, k, v, bias):  # adds the bias to the weights, not the scores
    scores = (k @ q[..., None]).squeeze(-1) / math.sqrt(q.size(-1))
    return ((scores.softmax(-1) + bias)[..., None] * v).sum(-2)


def fa_bias_scaled(q, k, v, bias):  # divides the bias by sqrt(d_h) along with q·k
    scores = ((k @ q[..., None]).squeeze(-1) + bias) / math.sqrt(q.size(-1))
    return (scores.softmax(-1)[..., None] * v).sum(-2)


def fa_empty_returns_q(q, k, v, bias):  # an empty memory passes the query through
    if k.size(2) == 0:
        return q
    return feedback_attention(q, k, v, bias)


RIGHT["feedback_attention"] = (check_feedback_attention, feedback_attention)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|inside|score)|(after|outside).*softmax")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")
case("fa_empty_returns_q", check_feedback_attention, fa_empty_returns_q,
     r"(?i)(empty|S ?== ?0|zero)")


# ---------------------------------------------------------------- 03 token_loop
def _loop(model, tokens, memory_of="mix", logits_of="top", append=True):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    n_layers = len(model.layers)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            j = i if len(keys) == n_layers else 0
            h = layer(h, keys[j], values[j])
            xs.append(h)
        m = model.mix(torch.stack(xs))
        tops.append(h if logits_of == "top" else m)
        new_k, new_v = model.project_memory((m if memory_of == "mix" else h)[:, None])
        if append:
            keys = [torch.cat(kv, 2) for kv in zip(keys, new_k)]
            values = [torch.cat(kv, 2) for kv in zip(values, new_v)]
        else:
            keys, values = list(new_k), list(new_v)
    return model.head(torch.stack(tops, 1))


def token_loop(model, tokens):
    return _loop(model, tokens)


def tl_memory_is_top(model, tokens):  # writes the top layer's output as the memory, not the mix
    return _loop(model, tokens, memory_of="top")


def tl_head_on_memory(model, tokens):  # the logits read the memory vector m, not the top layer
    return _loop(model, tokens, logits_of="mix")


def tl_replace_memory(model, tokens):  # keeps only the last step's keys (replaces, no cat)
    return _loop(model, tokens, append=False)


RIGHT["token_loop"] = (check_token_loop, token_loop)
case("tl_memory_is_top", check_token_loop, tl_memory_is_top, r"(?i)(mix|memory vector)")
case("tl_head_on_memory", check_token_loop, tl_head_on_memory,
     r"(?i)(head|logits).*(top|last layer)|(top|last layer).*(head|logits)")
case("tl_replace_memory", check_token_loop, tl_replace_memory,
     r"(?i)(append|torch\.cat|replac|only the last|previous steps)")


# ---------------------------------------------------------------- 03 cache_bytes
def cache_bytes(n_layers, d_model, n_tokens, bytes_per_number):
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 2 * per


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values (2)
    per = d_model * n_tokens * bytes_per_number
    return n_layers * per, 2 * per


def cb_plus_one(n_layers, d_model, n_tokens, bytes_per_number):  # counts the current token too
    per = d_model * (n_tokens + 1) * bytes_per_number
    return 2 * n_layers * per, 2 * per


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # returns (feedback, transformer)
    return tuple(reversed(cache_bytes(n_layers, d_model, n_tokens, bytes_per_number)))


RIGHT["cache_bytes_03"] = (check_cache_bytes, cache_bytes)
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)(value|2 ?L ?D|factor 2|twice|half)")
case("cb_plus_one", check_cache_bytes, cb_plus_one, r"(?i)(n_tokens ?\+ ?1|one token|extra token)")
case("cb_swapped", check_cache_bytes, cb_swapped, r"(?i)(order|swap|first|transformer_bytes)")


# ---------------------------------------------------------------- 04 shared_kv
def shared_kv(m, norm, kv, n_heads):
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, -1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def skv_no_norm(m, norm, kv, n_heads):  # skips the LayerNorm
    b, d = m.shape
    k, v = kv(m).chunk(2, -1)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def skv_interleaved(m, norm, kv, n_heads):  # even outputs as keys, odd as values
    b, d = m.shape
    y = kv(norm(m))
    k, v = y[:, ::2], y[:, 1::2]
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


def skv_v_first(m, norm, kv, n_heads):  # takes the first D outputs as the values
    k, v = shared_kv(m, norm, kv, n_heads)
    return v, k


RIGHT["shared_kv"] = (check_shared_kv, shared_kv)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(?i)(norm)")
case("skv_interleaved", check_shared_kv, skv_interleaved,
     r"(?i)(first D|last D|interleav|even|chunk|split)")
case("skv_v_first", check_shared_kv, skv_v_first, r"(?i)(swap|first D.*key|keys and values.*order)")


# ---------------------------------------------------------------- 04 Square
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


class SqNoChain(torch.autograd.Function):  # returns dy/dx, forgets to multiply by grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqSavesOutput(torch.autograd.Function):  # saves y = x² and uses it as if it were x
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y * grad_output


class SqInPlace(torch.autograd.Function):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


RIGHT["square"] = (check_square, Square)
case("sq_no_chain", check_square, SqNoChain, r"(?i)(grad_output|chain rule)")
case("sq_saves_output", check_square, SqSavesOutput,
     r"(?i)(sav.*(output|result|y\b)|(output|result).*saved|x, not)")
case("sq_in_place", check_square, SqInPlace, r"(?i)(in[- ]place|mul_|modif|chang).*(input|x)")


# ---------------------------------------------------------------- 04 value_gradients
def value_gradients(read_grads):
    out = read_grads[-1].new_zeros(read_grads[-1].shape)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_sum_each_read(read_grads):  # sums each read's slots into its own step's value
    return torch.stack([g.sum(0) for g in read_grads])


def vg_aligned_end(read_grads):  # adds each read to the LAST t+1 slots
    out = read_grads[-1].new_zeros(read_grads[-1].shape)
    for t, g in enumerate(read_grads):
        out[out.size(0) - t - 1:] += g
    return out


def vg_last_read(read_grads):  # the last read covers every slot: takes it alone
    return read_grads[-1].clone()


RIGHT["value_gradients"] = (check_value_gradients, value_gradients)
case("vg_sum_each_read", check_value_gradients, vg_sum_each_read,
     r"(?i)(slot j|value j|own step|each read.*slot|S_t\[j\])")
case("vg_aligned_end", check_value_gradients, vg_aligned_end,
     r"(?i)(slots 0|first t ?\+ ?1|start|align|end)")
case("vg_last_read", check_value_gradients, vg_last_read,
     r"(?i)(only the last|every read|all reads|earlier reads|sum)")


# ---------------------------------------------------------------- 04 Append
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


class ApValueKeepsAxis(Append):  # value's gradient keeps the step axis: [B, 1, F]
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


class ApCat(Append):  # returns a copy made by torch.cat, not a view of the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)


class ApBatchAxis(Append):  # n from the batch axis: top.size(0)
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApTwoGrads(Append):  # backward returns no gradient for buffer
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n]


RIGHT["append"] = (check_append, Append)
case("ap_value_keeps_axis", check_append, ApValueKeepsAxis,
     r"(?i)(grad\[:, n\]|\[B, F\]|step axis|value.*shape|shape.*value)")
case("ap_cat", check_append, ApCat, r"(?i)(view|copy|torch\.cat|buffer)")
case("ap_batch_axis", check_append, ApBatchAxis, r"(?i)(top\.size\(1\)|size\(0\)|batch|n\b.*slot)")
case("ap_two_grads", check_append, ApTwoGrads, r"(?i)(three|3|None.*buffer|buffer.*None)")


# ---------------------------------------------------------------- 04 weight_gradient
def weight_gradient(xs, gs):
    return gs.reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


def wg_mean_over_steps(xs, gs):  # averages over the steps instead of summing
    return weight_gradient(xs, gs) / xs.size(0)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.reshape(-1, xs.size(-1)).T @ gs.reshape(-1, gs.size(-1))


def wg_first_sequence(xs, gs):  # sums the steps of batch entry 0 only
    return gs[:, 0].T @ xs[:, 0]


RIGHT["weight_gradient"] = (check_weight_gradient, weight_gradient)
case("wg_mean_over_steps", check_weight_gradient, wg_mean_over_steps,
     r"(?i)(mean|averag|divi|/ ?T|sum)")
case("wg_transposed", check_weight_gradient, wg_transposed,
     r"(?i)(G\^?T ?X|transpos|\[D_out, D_in\])")
case("wg_first_sequence", check_weight_gradient, wg_first_sequence, r"(?i)(batch|B\b|sequence)")


# ---------------------------------------------------------------- 05 reach
def reach(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def re_window_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    return reach(memory, n_layers, span, position) + (memory == "window")


def re_xl_no_position(memory, n_layers, span, position=0):  # XL ignores the query's position
    return reach(memory, n_layers, span, 0)


def re_xl_position_per_layer(memory, n_layers, span, position=0):  # L (M + i): i once per layer
    if memory == "XL":
        return n_layers * (span + position)
    return reach(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach)
case("re_window_plus_one", check_reach, re_window_plus_one,
     r"(?i)(itself|the token|\+ ?1|L ?W\b|L·W)")
case("re_xl_no_position", check_reach, re_xl_no_position, r"(?i)(position|\bi\b)")
case("re_xl_position_per_layer", check_reach, re_xl_position_per_layer,
     r"(?i)(position.*once|once|L ?\* ?i|per layer|L ?M ?\+ ?i)")


# ---------------------------------------------------------------- 05 make_recall
def make_recall(filler, values, positions):
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y


def mr_labels_from_p(filler, values, positions):  # labels the value's own position too (>=)
    x, _ = make_recall(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None] >= positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


def mr_in_place(filler, values, positions):  # writes into filler itself (no copy)
    x = filler
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


def mr_column_index(filler, values, positions):  # x[:, positions]: every row gets every column
    x = filler.clone()
    x[:, positions] = values
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))


RIGHT["make_recall"] = (check_make_recall, make_recall)
case("mr_labels_from_p", check_make_recall, mr_labels_from_p,
     r"(?i)(after|p ?\+ ?1|own position|at p|> ?p|position itself)")
case("mr_in_place", check_make_recall, mr_in_place,
     r"(?i)(filler.*(chang|modif)|in place|clone|copy)")
case("mr_column_index", check_make_recall, mr_column_index,
     r"(?i)(row|arange|each row|every row|x\[:, positions\])")


# ---------------------------------------------------------------- 05 accuracy_by_distance
def accuracy_by_distance(logits, y, max_distance, shift=0, nan=True, pred=None):
    labelled = y != IGNORE
    t = torch.arange(y.size(1), device=y.device)  # where y is (a GPU)
    p = labelled.int().argmax(1) - 1 + shift
    d = t[None] - p[:, None]
    pred = logits.argmax(-1) if pred is None else pred
    right = (pred == y).to(logits.dtype)
    out = []
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        if sel.any():
            out.append(right[sel].mean())
        else:
            out.append(logits.new_tensor(math.nan if nan else 0.0))
    return torch.stack(out)


def ad_p_is_first_label(logits, y, max_distance):  # p = the first labelled position (no - 1)
    return accuracy_by_distance(logits, y, max_distance, shift=1)


def ad_zero_for_empty(logits, y, max_distance):  # 0 instead of NaN where no position lies
    return accuracy_by_distance(logits, y, max_distance, nan=False)


def ad_next_token_shift(logits, y, max_distance):  # compares logits[:, t] with y[:, t + 1]
    logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
    return accuracy_by_distance(logits, y, max_distance)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, accuracy_by_distance)
case("ad_p_is_first_label", check_accuracy_by_distance, ad_p_is_first_label,
     r"(?i)(p ?\+ ?1|first labelled|- ?1|off by one|shift)")
case("ad_zero_for_empty", check_accuracy_by_distance, ad_zero_for_empty, r"(?i)(nan)")
case("ad_next_token_shift", check_accuracy_by_distance, ad_next_token_shift,
     r"(?i)(shift|same position|next token|logits\[:, t\]|aligned)")


# ---------------------------------------------------------------- 05 cache_bytes
def _nb(t):
    return t.numel() * t.element_size()


def cache_bytes_05(cache, rel=False, keys_only=False, no_batch=False):
    if hasattr(cache, "offset"):  # KVState
        return _nb(cache.kv)
    if hasattr(cache, "rel_keys"):  # XLCache
        pairs = [tuple(buf) for buf in cache.kv]
        extra = sum(_nb(r) for r in cache.rel_keys if r is not None) if rel else 0
    else:
        pairs, extra = [tuple(kv) for kv in cache], 0
    size = (lambda t: _nb(t) // t.size(0)) if no_batch else _nb
    return extra + sum(size(k) + (0 if keys_only else size(v)) for k, v in pairs)


def cb5_rel_keys(cache):  # XL: also counts the relative-position tables
    return cache_bytes_05(cache, rel=True)


def cb5_keys_only(cache):  # counts the keys, forgets the values (TransformerLM and XL)
    return cache_bytes_05(cache, keys_only=True)


def cb5_no_batch(cache):  # bytes of one sequence: the batch dimension left out
    return cache_bytes_05(cache, no_batch=True)


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, cache_bytes_05)
case("cb5_rel_keys", check_cache_bytes_05, cb5_rel_keys, r"(?i)(rel_keys|relative|table)")
case("cb5_keys_only", check_cache_bytes_05, cb5_keys_only, r"(?i)(value)")
case("cb5_no_batch", check_cache_bytes_05, cb5_no_batch, r"(?i)(batch|\bB\b|sequences)")


# ---------------------------------------------------------------- extra, subtler cases
def rb_flip_prefix(table, s):  # the first s entries, newest key last: right only for s <= max
    return table[:, :s].flip(-1)


def tl_layers_read_embedding(model, tokens):  # every layer reads the embedding, not the one below
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        xs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if len(keys) > 1 else 0
            xs.append(layer(x[:, t], keys[j], values[j]))
        m = model.mix(torch.stack(xs))
        tops.append(xs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def cb_bits(n_layers, d_model, n_tokens, bytes_per_number):  # counts bits, not bytes
    return cache_bytes(n_layers, d_model, n_tokens, 8 * bytes_per_number)


def skv_norm_after(m, norm, kv, n_heads):  # projects m, then normalizes the keys and values
    b, d = m.shape
    k, v = kv(m).chunk(2, -1)
    k, v = norm(k), norm(v)
    return k.reshape(b, n_heads, d // n_heads), v.reshape(b, n_heads, d // n_heads)


class SqNoTwo(Square):  # d(x²)/dx written as x: forgets the factor 2
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x * grad_output


def vg_accumulate_in_last(read_grads):  # accumulates into the caller's last read tensor
    out = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        out[: t + 1] += g
    return out


class ApNoData(Append):  # writes through buffer itself, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]


def wg_misaligned_flatten(xs, gs):  # flattens gs batch-major and xs step-major: pairs mismatch
    g = gs.transpose(0, 1).reshape(-1, gs.size(-1))
    return g.T @ xs.reshape(-1, xs.size(-1))


def re_feedback_like_window(memory, n_layers, span, position=0):  # feedback bounded like window
    return n_layers * span if memory == "feedback" else reach(memory, n_layers, span, position)


def mr_value_shifted(filler, values, positions):  # writes the value one step late
    x, y = make_recall(filler, values, positions)
    x = filler.clone()
    x[torch.arange(filler.size(0), device=filler.device), (positions + 1).clamp(max=filler.size(1) - 1)] = values
    return x, y


def ad_max_value(logits, y, max_distance):  # .max(-1).values (the top logit), not .indices
    return accuracy_by_distance(logits, y, max_distance, pred=logits.max(-1).values)


def cb5_first_layer(cache):  # counts layer 0 only
    if hasattr(cache, "offset"):
        return _nb(cache.kv)
    k, v = tuple(cache.kv[0]) if hasattr(cache, "rel_keys") else tuple(cache[0])
    return _nb(k) + _nb(v)


case("rb_flip_prefix", check_relative_bias, rb_flip_prefix,
     r"(?i)(clamp|max_distance|last (bias|entry))")
case("tl_layers_read_embedding", check_token_loop, tl_layers_read_embedding,
     r"(?i)(layer below|previous layer|output of the layer|embedding|chain)")
case("cb_bits", check_cache_bytes, cb_bits, r"(?i)(bits|8|bytes_per_number)")
case("skv_norm_after", check_shared_kv, skv_norm_after, r"(?i)norm.*(before|m\b|first)")
case("sq_no_two", check_square, SqNoTwo, r"(?i)(2 ?\*? ?x|2x|factor (of )?2|twice|half)")
case("vg_accumulate_in_last", check_value_gradients, vg_accumulate_in_last,
     r"(?i)(in place|read_grads.*(chang|modif)|new tensor|clone)")
case("ap_no_data", check_append, ApNoData, r"(?i)(\.data|version)")
case("wg_misaligned_flatten", check_weight_gradient, wg_misaligned_flatten,
     r"(?i)(order|same (way|order)|pair|align|transpose)")
case("re_feedback_like_window", check_reach, re_feedback_like_window,
     r"(?i)(inf|unbounded|feedback)")
case("mr_value_shifted", check_make_recall, mr_value_shifted,
     r"(?i)(positions\[n\]|one late|\+ ?1|position)")
case("ad_max_value", check_accuracy_by_distance, ad_max_value,
     r"(?i)(argmax|index|max logit|values)")
case("cb5_first_layer", check_cache_bytes_05, cb5_first_layer,
     r"(?i)(every layer|all layers|layer)")


# ---------------------------------------------------------------- a third round
def mv_weights_reversed(xs, w):  # reads the weights top layer first: softmax(w).flip(0)
    return (torch.softmax(w, 0).flip(0)[:, None, None] * xs).sum(0)


def rb_clamp_to_heads(table, s):  # clamps to table.size(0) (H) instead of max_distance
    d = s - torch.arange(s, device=table.device)
    return table[:, d.clamp(max=table.size(0)) - 1]


def tl_mix_layers_only(model, tokens):  # mixes the layer outputs without the embedding
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        h, outs = x[:, t], []
        for i, layer in enumerate(model.layers):
            j = i if len(keys) > 1 else 0
            h = layer(h, keys[j], values[j])
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def skv_heads_batch_mixed(m, norm, kv, n_heads):  # .view(H, B, D_h).transpose(0, 1)
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, -1)
    return (k.reshape(n_heads, b, d // n_heads).transpose(0, 1),
            v.reshape(n_heads, b, d // n_heads).transpose(0, 1))


class ApTopGradTooLong(Append):  # top's gradient keeps the new slot too: grad[:, :n + 1]
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n + 1], grad[:, ctx.n], None


def wg_sum_first(xs, gs):  # sums gs and xs over steps and batch first, then one outer product
    return torch.outer(gs.sum((0, 1)), xs.sum((0, 1)))


def re_window_with_position(memory, n_layers, span, position=0):  # adds i to the window too
    r = reach(memory, n_layers, span, position)
    return r + position if memory == "window" else r


def mr_float_labels(filler, values, positions):  # y as float (torch.full with -100.)
    x, y = make_recall(filler, values, positions)
    return x, y.float()


def ad_no_label_mask(logits, y, max_distance):  # selects by distance only, not by label
    t = torch.arange(y.size(1))
    p = (y != IGNORE).int().argmax(1) - 1
    d = t[None] - p[:, None]
    right = (logits.argmax(-1) == y).to(logits.dtype)
    out = [right[d == k].mean() if (d == k).any() else logits.new_tensor(math.nan)
           for k in range(1, max_distance + 1)]
    return torch.stack(out)


def cb5_storage(cache):  # the bytes of each tensor's storage
    def nb(t):
        return t.untyped_storage().nbytes()
    if hasattr(cache, "offset"):
        return nb(cache.kv)
    pairs = [tuple(b) for b in cache.kv] if hasattr(cache, "rel_keys") else list(cache)
    return sum(nb(k) + nb(v) for k, v in pairs)


case("mv_weights_reversed", check_memory_vector, mv_weights_reversed,
     r"(?i)(revers|flip|order|embedding first|xs\[0\])")
case("rb_clamp_to_heads", check_relative_bias, rb_clamp_to_heads,
     r"(?i)(size\(0\)|H\b|heads|max_distance)")
case("tl_mix_layers_only", check_token_loop, tl_mix_layers_only,
     r"(?i)(embedding|L ?\+ ?1|all layer)")
case("skv_heads_batch_mixed", check_shared_kv, skv_heads_batch_mixed,
     r"(?i)(view\(B, H|reshape\(B, H|(view|reshape).*(order|batch)|batch.*(view|reshape))")
case("ap_top_grad_too_long", check_append, ApTopGradTooLong, r"(?i)(grad\[:, :n\]|shape)")
case("wg_sum_first", check_weight_gradient, wg_sum_first,
     r"(?i)(sum.*(before|first)|outer|per step|each step|g_t)")
case("re_window_with_position", check_reach, re_window_with_position,
     r"(?i)(window.*position|position.*window|does not depend)")
case("mr_float_labels", check_make_recall, mr_float_labels, r"(?i)(dtype|long|int|float)")
case("ad_no_label_mask", check_accuracy_by_distance, ad_no_label_mask,
     r"(?i)(labelled|IGNORE|unlabel|no value)")
case("cb5_storage", check_cache_bytes_05, cb5_storage,
     r"(?i)(storage|capacity|spare|room|numel)")


# ---------------------------------------------------------------- a fourth round
def rb_float_arange(table, s):  # follows "dtype=x.dtype" for the distances: float indices
    d = s - torch.arange(s, dtype=table.dtype, device=table.device)
    return table[:, d.clamp(max=table.size(1)) - 1]


def fa_reshape_not_permute(q, k, v, bias):  # scores as [H, B, S], then .reshape(B, H, S)
    b, h, s, dh = k.shape
    scores = torch.einsum("bhd,bhsd->hbs", q, k).reshape(b, h, s) / math.sqrt(dh) + bias
    return (scores.softmax(-1)[..., None] * v).sum(-2)


def tl_cat_last_axis(model, tokens):  # appends along the last axis (D_h), not the key axis
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        h, xs = x[:, t], [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if len(keys) > 1 else 0
            h = layer(h, keys[j], values[j])
            xs.append(h)
        m = model.mix(torch.stack(xs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, -1) for kv in zip(keys, nk)]
        values = [torch.cat(kv, -1) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def cb_embedding_layer(n_layers, d_model, n_tokens, bytes_per_number):  # counts L + 1 layers
    return cache_bytes(n_layers + 1, d_model, n_tokens, bytes_per_number)


def vg_like_first_read(read_grads):  # the result shaped like read_grads[0] ([1, F])
    out = torch.zeros_like(read_grads[0])
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def re_none_unbounded(memory, n_layers, span, position=0):  # None for "no bound"
    r = reach(memory, n_layers, span, position)
    return None if r == math.inf else r


def cb5_numel(cache):  # counts numbers, forgets element_size
    if hasattr(cache, "offset"):
        return cache.kv.numel()
    pairs = [tuple(b) for b in cache.kv] if hasattr(cache, "rel_keys") else list(cache)
    return sum(k.numel() + v.numel() for k, v in pairs)


case("rb_float_arange", check_relative_bias, rb_float_arange,
     r"(?i)(long|integer|int64|index.*dtype|dtype.*index)")
case("fa_reshape_not_permute", check_feedback_attention, fa_reshape_not_permute,
     r"(?i)(reshape|permute|transpose|order of (the )?axes|\[B, H, S\])")
case("tl_cat_last_axis", check_token_loop, tl_cat_last_axis, r"(?i)(dim ?= ?2|key axis|axis 2)")
case("cb_embedding_layer", check_cache_bytes, cb_embedding_layer,
     r"(?i)(L ?\+ ?1|embedding|one layer too many|n_layers layers)")
case("vg_like_first_read", check_value_gradients, vg_like_first_read,
     r"(?i)(\[T, F\]|T rows|read_grads\[0\]|first read|zeros_like)")
case("re_none_unbounded", check_reach, re_none_unbounded, r"(?i)(math\.inf|inf)")
case("cb5_numel", check_cache_bytes_05, cb5_numel, r"(?i)(element_size|bytes per|numbers)")


# ---------------------------------------------------------------- a fifth round
def _loop2(model, tokens, start=0, stack_dim=0):
    x = model.embed(tokens)
    keys, values = (list(t) for t in model.project_memory(x[:, :start]))
    tops = []
    for t in range(tokens.size(1)):
        h, xs = x[:, t], [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = i if len(keys) > 1 else 0
            h = layer(h, keys[j], values[j])
            xs.append(h)
        m = model.mix(torch.stack(xs, stack_dim))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
        values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_first_token_memory(model, tokens):  # starts from project_memory(x[:, :1]), not x[:, :0]
    return _loop2(model, tokens, start=1)


def tl_stack_batch_first(model, tokens):  # torch.stack(outs, 1): [B, L+1, D] to model.mix
    return _loop2(model, tokens, stack_dim=1)


def skv_per_head_pairs(m, norm, kv, n_heads):  # .view(B, H, 2, D_h): a key and value per head
    b, d = m.shape
    k, v = kv(norm(m)).view(b, n_heads, 2, d // n_heads).unbind(2)
    return k, v


def mr_values_unbroadcast(filler, values, positions):  # torch.where(after, values, ...) [N]
    x, _ = make_recall(filler, values, positions)
    after = torch.arange(filler.size(1), device=filler.device)[None] > positions[:, None]
    return x, torch.where(after, values, torch.full_like(filler, IGNORE))


case("tl_first_token_memory", check_token_loop, tl_first_token_memory,
     r"(?i)(empty memory|x\[:, :0\]|first step)")
case("tl_stack_batch_first", check_token_loop, tl_stack_batch_first,
     r"(?i)(dim ?= ?1|along dim 1|batch (axis|first)|\[B, L ?\+ ?1, D\])")
case("skv_per_head_pairs", check_shared_kv, skv_per_head_pairs,
     r"(?i)(first D|side by side|chunk|interleav|\[B, 2, H)")
case("mr_values_unbroadcast", check_make_recall, mr_values_unbroadcast,
     r"(?i)(values\[:, None\]|broadcast|each row|row n)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
