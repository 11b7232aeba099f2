"""Learner trial 27 (b): notebooks 03, 04 and 05, three new wrong answers per exercise."""
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


# ---- 03 · memory_vector -------------------------------------------------------------
def mv_right(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax over the layers
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_no_embedding(xs, w):  # mixes the layer outputs only, xs[0] left out
    return (torch.softmax(w[1:], 0)[:, None, None] * xs[1:]).sum(0)


def mv_mean(xs, w):  # mean over the layers after weighting
    return (torch.softmax(w, 0)[:, None, None] * xs).mean(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)softmax|sum to 1|sigmoid")
case("mv_no_embedding", check_memory_vector, mv_no_embedding,
     r"(?i)embedding|xs\[0\]|every layer|all .*layers")
case("mv_mean", check_memory_vector, mv_mean, r"(?i)mean|divid|sum\b|L ?\+ ?1")


# ---- 03 · relative_bias -------------------------------------------------------------
def rb_right(table, s):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_no_clamp(table, s):  # forgets max_distance
    return table[:, torch.arange(s, 0, -1) - 1]


def rb_wrap(table, s):  # far distances wrap around instead of sharing the last bias
    return table[:, (torch.arange(s, 0, -1) - 1) % table.shape[1]]


def rb_clamp_minus_one(table, s):  # clamps the distance to max_distance - 1
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1] - 1)
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"(?i)clamp|max_distance")
case("rb_wrap", check_relative_bias, rb_wrap, r"(?i)clamp|max_distance|last bias|share")
case("rb_clamp_minus_one", check_relative_bias, rb_clamp_minus_one,
     r"(?i)max_distance|clamp|last (bias|entry|column)")


# ---- 03 · feedback_attention --------------------------------------------------------
def fa_right(q, k, v, bias):
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # adds the bias to the weights
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_bias_scaled(q, k, v, bias):  # divides the bias by sqrt(d_h) too
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_empty_float32(q, k, v, bias):  # empty memory: zeros without the dtype
    if k.shape[2] == 0:
        return torch.zeros(q.shape)
    return fa_right(q, k, v, bias)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|inside|scores)|after.*softmax")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"(?i)bias.*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")
case("fa_empty_float32", check_feedback_attention, fa_empty_float32,
     r"(?i)dtype|float64|float32")


# ---- 03 · token_loop ----------------------------------------------------------------
def _loop(model, tokens, memory_of=None, output_mix=False, prepend=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t]
        hs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            hs.append(h)
        m = model.mix(torch.stack(hs))
        outs.append(m if output_mix else h)
        nk, nv = model.project_memory((x[:, t] if memory_of == "embed" else m)[:, None])
        if prepend:
            keys = tuple(torch.cat([b, a], 2) for a, b in zip(keys, nk))
            values = tuple(torch.cat([b, a], 2) for a, b in zip(values, nv))
        else:
            keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
            values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_embed_memory(model, tokens):  # stores the token embedding as memory, not the mix
    return _loop(model, tokens, memory_of="embed")


def tl_output_mix(model, tokens):  # predicts from the memory vector, not the top layer
    return _loop(model, tokens, output_mix=True)


def tl_prepend(model, tokens):  # newest key first: breaks the oldest-first order
    return _loop(model, tokens, prepend=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_embed_memory", check_token_loop, tl_embed_memory,
     r"(?i)memory.*(mix|model\.mix)|embedding.*memory")
case("tl_output_mix", check_token_loop, tl_output_mix,
     r"(?i)top layer|last layer|head.*(top|last)|mix.*(head|logits)")
case("tl_prepend", check_token_loop, tl_prepend, r"(?i)oldest|order|append|end of|prepend")


# ---- 03 · cache_bytes ---------------------------------------------------------------
def cb_right(n_layers, d_model, n_tokens, b):
    return 2 * n_layers * d_model * n_tokens * b, 2 * d_model * n_tokens * b


def cb_three_d(n_layers, d_model, n_tokens, b):  # counts the memory vectors too (3D)
    return 2 * n_layers * d_model * n_tokens * b, 3 * d_model * n_tokens * b


def cb_keys_only(n_layers, d_model, n_tokens, b):  # a key per token, no value
    return n_layers * d_model * n_tokens * b, d_model * n_tokens * b


def cb_embedding_layer(n_layers, d_model, n_tokens, b):  # L + 1 "layers"
    return 2 * (n_layers + 1) * d_model * n_tokens * b, 2 * d_model * n_tokens * b


RIGHT["cache_bytes_03"] = (check_cache_bytes, cb_right)
case("cb_three_d", check_cache_bytes, cb_three_d, r"(?i)memory vector|3 ?D|only.*key.*value")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"(?i)value|factor 2|twice|2 ?L ?D")
case("cb_embedding_layer", check_cache_bytes, cb_embedding_layer,
     r"(?i)L ?\+ ?1|n_layers|per layer|embedding")


# ---- 04 · shared_kv -----------------------------------------------------------------
def _heads(t, n_heads):
    return t.view(t.shape[0], n_heads, t.shape[1] // n_heads)


def skv_right(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    return _heads(k, n_heads), _heads(v, n_heads)


def skv_no_norm(m, norm, kv, n_heads):  # projects m without the LayerNorm
    k, v = kv(m).chunk(2, -1)
    return _heads(k, n_heads), _heads(v, n_heads)


def skv_interleaved(m, norm, kv, n_heads):  # even outputs keys, odd outputs values
    out = kv(norm(m))
    return _heads(out[:, 0::2], n_heads), _heads(out[:, 1::2], n_heads)


def skv_norm_after(m, norm, kv, n_heads):  # normalizes the keys and values instead
    k, v = kv(m).chunk(2, -1)
    return _heads(norm(k), n_heads), _heads(norm(v), n_heads)


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(?i)norm")
case("skv_interleaved", check_shared_kv, skv_interleaved,
     r"(?i)first D|last D|interleav|split|chunk|halves")
case("skv_norm_after", check_shared_kv, skv_norm_after,
     r"(?i)norm.*(before|first|m\b)|before.*projection|after.*projection")


# ---- 04 · Square --------------------------------------------------------------------
class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


class SquareNoChain(torch.autograd.Function):  # forgets grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SquareFromOutput(torch.autograd.Function):  # 2 sqrt(y): loses the sign of x
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y.sqrt() * grad_output


class SquareInPlace(torch.autograd.Function):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


RIGHT["square"] = (check_square, SquareRight)
case("sq_no_chain", check_square, SquareNoChain, r"(?i)grad_output|chain rule")
case("sq_from_output", check_square, SquareFromOutput,
     r"(?i)sign|negative|sqrt|save.*x\b|the input")
case("sq_in_place", check_square, SquareInPlace, r"(?i)in.place|modif|changed.*input")


# ---- 04 · value_gradients -----------------------------------------------------------
def vg_right(read_grads):
    g0 = read_grads[-1]
    out = torch.zeros(len(read_grads), g0.shape[1], dtype=g0.dtype, device=g0.device)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_sum_slots(read_grads):  # adds each read's slots together into its own step
    return torch.stack([g.sum(0) for g in read_grads])


def vg_last_read(read_grads):  # only the last read covers every value
    return read_grads[-1].clone()


def vg_accumulate_in_last(read_grads):  # sums into the caller's last tensor
    total = read_grads[-1]
    for g in read_grads[:-1]:
        total[: g.shape[0]] += g
    return total


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_sum_slots", check_value_gradients, vg_sum_slots,
     r"(?i)slot|every (later )?read|t ?>= ?j|per value")
case("vg_last_read", check_value_gradients, vg_last_read,
     r"(?i)every read|all (the )?reads|only the last|earlier reads")
case("vg_accumulate_in_last", check_value_gradients, vg_accumulate_in_last,
     r"(?i)read_grads.*(chang|modif)|in.place|new tensor")


# ---- 04 · Append --------------------------------------------------------------------
class AppendRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendCat(torch.autograd.Function):  # copies with cat instead of writing the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.shape[1]
        return torch.cat([top, value[:, None]], 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class AppendNewestFirst(torch.autograd.Function):  # value's gradient taken from slot 0
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class AppendTwoGrads(torch.autograd.Function):  # no None for the buffer
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n]


RIGHT["append"] = (check_append, AppendRight)
case("ap_cat", check_append, AppendCat, r"(?i)buffer|view|cop(y|ies)|no copy")
case("ap_newest_first", check_append, AppendNewestFirst,
     r"(?i)last slot|slot n|first n|grad\[:, *n\]")
case("ap_two_grads", check_append, AppendTwoGrads,
     r"(?i)None.*buffer|three gradients|one (gradient )?per input|3 gradients")


# ---- 04 · weight_gradient -----------------------------------------------------------
def wg_right(xs, gs):
    return gs.reshape(-1, gs.shape[-1]).T @ xs.reshape(-1, xs.shape[-1])


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.reshape(-1, xs.shape[-1]).T @ gs.reshape(-1, gs.shape[-1])


def wg_batch_mean(xs, gs):  # divides by the batch size
    return wg_right(xs, gs) / xs.shape[1]


def wg_mismatched_rows(xs, gs):  # gs flattened batch-major, xs step-major
    g = gs.transpose(0, 1).reshape(-1, gs.shape[-1])
    return g.T @ xs.reshape(-1, xs.shape[-1])


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, wg_transposed,
     r"(?i)transpos|D_out, D_in|G\^?T ?X|\[D_in, D_out\]")
case("wg_batch_mean", check_weight_gradient, wg_batch_mean,
     r"(?i)mean|divid|sum.*(batch|steps)|batch size")
case("wg_mismatched_rows", check_weight_gradient, wg_mismatched_rows,
     r"(?i)pair|same (step|order)|rows|match|transpose|flatten")


# ---- 05 · reach ---------------------------------------------------------------------
def reach_right(memory, n_layers, span, position=0):
    if memory == "feedback":
        return math.inf
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span


def reach_counts_self(memory, n_layers, span, position=0):  # window counts the token itself
    r = reach_right(memory, n_layers, span, position)
    return r + 1 if memory == "window" else r


def reach_xl_times_layers(memory, n_layers, span, position=0):  # L (M + i)
    if memory == "XL":
        return n_layers * (span + position)
    return reach_right(memory, n_layers, span, position)


def reach_feedback_window(memory, n_layers, span, position=0):  # feedback like a window
    if memory == "feedback":
        return n_layers * span
    return reach_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, reach_right)
case("reach_counts_self", check_reach, reach_counts_self,
     r"(?i)itself|not count|off by one|L ?[·*x] ?W\b")
case("reach_xl_times_layers", check_reach, reach_xl_times_layers,
     r"(?i)position.*(once|not.*layer|added)|L ?[·*] ?M ?\+ ?i|\+ position")
case("reach_feedback_window", check_reach, reach_feedback_window,
     r"(?i)unbounded|inf|feedback")


# ---- 05 · make_recall ---------------------------------------------------------------
def mr_right(filler, values, positions):
    n = torch.arange(filler.shape[0], device=filler.device)
    x = filler.clone()
    x[n, positions] = values
    t = torch.arange(filler.shape[1], device=filler.device)
    y = torch.where(t[None] > positions[:, None], values[:, None],
                    torch.full_like(filler, IGNORE))
    return x, y


def mr_label_at_p(filler, values, positions):  # labels from p, not p + 1
    x, _ = mr_right(filler, values, positions)
    t = torch.arange(filler.shape[1], device=filler.device)
    y = torch.where(t[None] >= positions[:, None], values[:, None],
                    torch.full_like(filler, IGNORE))
    return x, y


def mr_in_place(filler, values, positions):  # writes into the caller's filler
    x = filler
    x[torch.arange(filler.shape[0], device=filler.device), positions] = values
    _, y = mr_right(filler, values, positions)
    return x, y


def mr_column_index(filler, values, positions):  # x[:, positions]: every row, every p
    x = filler.clone()
    x[:, positions] = values
    _, y = mr_right(filler, values, positions)
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_label_at_p", check_make_recall, mr_label_at_p,
     r"(?i)after|p ?\+ ?1|the value's own position|at p\b")
case("mr_in_place", check_make_recall, mr_in_place, r"(?i)filler.*(chang|modif)|copy|clone")
case("mr_column_index", check_make_recall, mr_column_index,
     r"(?i)row|each row|x\[:, ?positions\]|other rows|arange")


# ---- 05 · accuracy_by_distance ------------------------------------------------------
def _acc(logits, y, max_distance, shift=1, empty=math.nan, clamp=False):
    lab = y != IGNORE
    p = lab.int().argmax(1) - shift
    d = torch.arange(y.shape[1], device=y.device)[None] - p[:, None]  # where y is (a GPU)
    if clamp:
        d = d.clamp(max=max_distance)
    right = logits.argmax(-1) == y
    out = torch.full((max_distance,), empty, dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            out[k - 1] = right[sel].to(logits.dtype).mean()
    return out


def acc_right(logits, y, max_distance):
    return _acc(logits, y, max_distance)


def acc_p_is_first(logits, y, max_distance):  # takes the first label's position as p
    return _acc(logits, y, max_distance, shift=0)


def acc_zero_empty(logits, y, max_distance):  # 0 where no position lies at d
    return _acc(logits, y, max_distance, empty=0.0)


def acc_clamped(logits, y, max_distance):  # far positions counted in the last entry
    return _acc(logits, y, max_distance, clamp=True)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, acc_right)
case("acc_p_is_first", check_accuracy_by_distance, acc_p_is_first,
     r"(?i)p ?\+ ?1|first label|off by one|shift")
case("acc_zero_empty", check_accuracy_by_distance, acc_zero_empty, r"(?i)nan")
case("acc_clamped", check_accuracy_by_distance, acc_clamped,
     r"(?i)farther|beyond|left out|max_distance|clamp")


# ---- 05 · cache_bytes ---------------------------------------------------------------
def _nb(t):
    return t.numel() * t.element_size()


def cb5_right(cache):
    kv = getattr(cache, "kv", cache)
    if isinstance(kv, torch.Tensor):
        return _nb(kv)
    return sum(_nb(k) + _nb(v) for k, v in kv)


def cb5_rel_keys(cache):  # counts XL's relative-key tables too
    total = cb5_right(cache)
    for table in getattr(cache, "rel_keys", None) or []:
        if table is not None:
            total += _nb(table)
    return total


def cb5_numel(cache):  # numbers, not bytes
    kv = getattr(cache, "kv", cache)
    if isinstance(kv, torch.Tensor):
        return kv.numel()
    return sum(k.numel() + v.numel() for k, v in kv)


def cb5_first_layer(cache):  # return inside the loop: the first layer only
    kv = getattr(cache, "kv", cache)
    if isinstance(kv, torch.Tensor):
        return _nb(kv)
    total = 0
    for k, v in kv:
        total += _nb(k) + _nb(v)
        return total
    return total


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, cb5_right)
case("cb5_rel_keys", check_cache_bytes_05, cb5_rel_keys, r"(?i)rel_keys|relative")
case("cb5_numel", check_cache_bytes_05, cb5_numel, r"(?i)element_size|bytes per|numel")
case("cb5_first_layer", check_cache_bytes_05, cb5_first_layer,
     r"(?i)every layer|all layers|first layer|one layer|per layer")


# ---- extra cases (a fourth wrong answer where time allowed) -------------------------
def mv_weights_2d(xs, w):  # weights [L+1, 1]: broadcast against [B, D], not the layers
    return (torch.softmax(w, 0)[:, None] * xs).sum(0)


def rb_no_minus_one(table, s):  # indexes table[:, d], forgetting table[:, d - 1]
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1] - 1)
    return table[:, d]


def tl_unchained(model, tokens):  # every layer reads the embedding, not the layer below
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    outs = []
    for t in range(x.shape[1]):
        hs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            hs.append(layer(x[:, t], keys[i], values[i]))
        m = model.mix(torch.stack(hs))
        outs.append(hs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = tuple(torch.cat([a, b], 2) for a, b in zip(keys, nk))
        values = tuple(torch.cat([a, b], 2) for a, b in zip(values, nv))
    return model.head(torch.stack(outs, 1))


def vg_own_read(read_grads):  # each value only gets the gradient of its own step's read
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


class AppendNoData(torch.autograd.Function):  # writes buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


def wg_sum_first(xs, gs):  # sums over the batch before the product
    return gs.sum(1).T @ xs.sum(1)


def cb5_keys_only(cache):  # KVState: counts kv[0], the keys, only
    kv = getattr(cache, "kv", cache)
    if isinstance(kv, torch.Tensor):
        return _nb(kv[0])
    return sum(_nb(k) + _nb(v) for k, v in kv)


case("mv_weights_2d", check_memory_vector, mv_weights_2d,
     r"(?i)\[:, None, None\]|layer axis|broadcast")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one,
     r"(?i)distance 1|d - 1|off by one|table\[:, 0\]|entry 0")
case("tl_unchained", check_token_loop, tl_unchained,
     r"(?i)layer below|previous layer|chain|each layer.*(output|input)")
case("vg_own_read", check_value_gradients, vg_own_read,
     r"(?i)every read|later reads|t ?>= ?j|own (step|read)")
case("ap_no_data", check_append, AppendNoData, r"(?i)\.data|version")
case("wg_sum_first", check_weight_gradient, wg_sum_first,
     r"(?i)sum.*(before|first)|per (step|example)|pair|outer product|order")
case("cb5_keys_only", check_cache_bytes_05, cb5_keys_only,
     r"(?i)values|keys and values|kv\[0\]|both")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
