"""Learner trial 25b: notebooks 03, 04 and 05 (issue 28)."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

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


# ---------- 03: memory_vector ----------
def mv_right(xs, w):
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # sigmoid weights instead of softmax
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_linear_norm(xs, w):  # w / w.sum() instead of softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def mv_layers_only(xs, w):  # mixes the layers only, embedding left out
    return (torch.softmax(w[1:], 0)[:, None, None] * xs[1:]).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"(?i)softmax|sigmoid|sum to 1")
case("mv_linear_norm", check_memory_vector, mv_linear_norm, r"(?i)softmax|exp")
case("mv_layers_only", check_memory_vector, mv_layers_only, r"(?i)embedding|xs\[0\]")


# ---------- 03: relative_bias ----------
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_newest_first(table, s):  # key j at distance j + 1 (newest first)
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]


def rb_wrap(table, s):  # wraps far distances around instead of clamping
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]


def rb_no_minus_one(table, s):  # table[:, d] with d clamped to the last column
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_newest_first", check_relative_bias, rb_newest_first, r"(?i)oldest|order|revers")
case("rb_wrap", check_relative_bias, rb_wrap, r"(?i)clamp|max_distance|share")
case("rb_no_minus_one", check_relative_bias, rb_no_minus_one, r"(?i)d - 1|off by one|shift")


# ---------- 03: feedback_attention ----------
def fa_right(q, k, v, bias):
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):  # bias added to the probabilities
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1) + bias, v)


def fa_sqrt_heads(q, k, v, bias):  # q.size(1) is H, not D_h
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def fa_inplace_q(q, k, v, bias):  # scales the caller's q in place
    q /= math.sqrt(q.size(-1))
    scores = torch.einsum("bhd,bhsd->bhs", q, k) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"(?i)bias.*(before|inside|scores)|after the softmax")
case("fa_sqrt_heads", check_feedback_attention, fa_sqrt_heads, r"(?i)sqrt|d_h|scale")
case("fa_inplace_q", check_feedback_attention, fa_inplace_q, r"(?i)in.place|modif|changed")


# ---------- 03: token_loop ----------
def _loop(model, tokens, *, same_keys=False, head_on_memory=False, prepend=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            j = 0 if same_keys else i
            h = layer(h, keys[j], values[j])
            xs.append(h)
        m = model.mix(torch.stack(xs))
        outs.append(m if head_on_memory else h)
        nk, nv = model.project_memory(m[:, None])
        if prepend:
            keys = [torch.cat([b, a], 2) for a, b in zip(keys, nk)]
            values = [torch.cat([b, a], 2) for a, b in zip(values, nv)]
        else:
            keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
            values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


def tl_right(model, tokens):
    return _loop(model, tokens)


def tl_layer0_keys(model, tokens):  # every layer reads layer 0's keys and values
    return _loop(model, tokens, same_keys=True)


def tl_head_on_memory(model, tokens):  # logits from the memory vector, not the top
    return _loop(model, tokens, head_on_memory=True)


def tl_prepend(model, tokens):  # new keys put in front: newest first
    return _loop(model, tokens, prepend=True)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_layer0_keys", check_token_loop, tl_layer0_keys,
     r"(?i)(own|each) layer.*(keys|projection)|keys\[i\]|layer 0")
case("tl_head_on_memory", check_token_loop, tl_head_on_memory,
     r"(?i)top layer|memory vector.*head|head.*memory")
case("tl_prepend", check_token_loop, tl_prepend, r"(?i)append|order|oldest|end of")


# ---------- 03: cache_bytes ----------
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 2 * per


def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # 3D: memory counted
    per = d_model * n_tokens * bytes_per_number
    return 2 * n_layers * per, 3 * per


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # returned in reverse order
    per = d_model * n_tokens * bytes_per_number
    return 2 * per, 2 * n_layers * per


def cb_next_token(n_layers, d_model, n_tokens, bytes_per_number):  # n_tokens + 1 cached
    per = d_model * (n_tokens + 1) * bytes_per_number
    return 2 * n_layers * per, 2 * per


RIGHT["cache_bytes_03"] = (check_cache_bytes, cb_right)
case("cb_with_memory", check_cache_bytes, cb_with_memory, r"(?i)memory vector|3 ?D|only.*key")
case("cb_swapped", check_cache_bytes, cb_swapped, r"(?i)order|swap|transformer.*first")
case("cb_next_token", check_cache_bytes, cb_next_token, r"(?i)n_tokens|one token|\+ ?1")


# ---------- 04: shared_kv ----------
def _heads(t, h):
    return t.view(t.size(0), h, t.size(-1) // h)


def skv_right(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    return _heads(k, n_heads), _heads(v, n_heads)


def skv_no_norm(m, norm, kv, n_heads):  # the LayerNorm forgotten
    k, v = kv(m).chunk(2, -1)
    return _heads(k, n_heads), _heads(v, n_heads)


def skv_interleaved(m, norm, kv, n_heads):  # even outputs keys, odd values
    out = kv(norm(m))
    return _heads(out[:, 0::2], n_heads), _heads(out[:, 1::2], n_heads)


def skv_swapped(m, norm, kv, n_heads):  # first half taken as the values
    v, k = kv(norm(m)).chunk(2, -1)
    return _heads(k, n_heads), _heads(v, n_heads)


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"(?i)norm")
case("skv_interleaved", check_shared_kv, skv_interleaved, r"(?i)first D|halves|interleav|chunk")
case("skv_swapped", check_shared_kv, skv_swapped, r"(?i)swap|first D.*keys|keys.*first")


# ---------- 04: Square ----------
class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


class SqNoChain(torch.autograd.Function):  # returns dy/dx, grad_output forgotten
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqFromY(torch.autograd.Function):  # saves y, backward 2 * sqrt(y): sign lost
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * y.sqrt() * grad_output


class SqInPlace(torch.autograd.Function):  # squares the input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.pow_(2)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


RIGHT["square"] = (check_square, SqRight)
case("sq_no_chain", check_square, SqNoChain, r"(?i)grad_output|chain rule")
case("sq_from_y", check_square, SqFromY, r"(?i)sign|negative|sqrt|save.*x")
case("sq_in_place", check_square, SqInPlace, r"(?i)in.place|modif|input")


# ---------- 04: value_gradients ----------
def vg_right(read_grads):
    out = read_grads[-1].new_zeros(read_grads[-1].shape)
    for t, g in enumerate(read_grads):
        out[: t + 1] += g
    return out


def vg_own_read(read_grads):  # only the read of the value's own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_into_last(read_grads):  # accumulates into read_grads[-1] itself
    total = read_grads[-1]
    for g in read_grads[:-1]:
        total[: g.size(0)] += g
    return total


def vg_mean(read_grads):  # averages over the reads instead of summing
    out = vg_right(read_grads)
    n = len(read_grads)
    return out / torch.arange(n, 0, -1, dtype=out.dtype)[:, None]


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read", check_value_gradients, vg_own_read, r"(?i)every (later )?read|t >= j|later")
case("vg_into_last", check_value_gradients, vg_into_last, r"(?i)read_grads.*(chang|modif)|in.place")
case("vg_mean", check_value_gradients, vg_mean, r"(?i)mean|average|sum")


# ---------- 04: Append ----------
class ApRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        data = buffer.data
        data[:, n] = value
        ctx.n = n
        return data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApSlotZero(torch.autograd.Function):  # value's gradient read from slot 0
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, 0], None


class ApCat(torch.autograd.Function):  # a copy with torch.cat, not a view
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApWholeGrad(torch.autograd.Function):  # top gets the whole gradient, not [:, :n]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad, grad[:, ctx.n], None


RIGHT["append"] = (check_append, ApRight)
case("ap_slot_zero", check_append, ApSlotZero, r"(?i)last slot|slot n|grad\[:, ?n\]")
case("ap_cat", check_append, ApCat, r"(?i)view|copy|buffer")
case("ap_whole_grad", check_append, ApWholeGrad, r"(?i)first n|\[:, ?:n\]|top.*shape|slots")


# ---------- 04: weight_gradient ----------
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_transposed(xs, gs):  # [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mean_steps(xs, gs):  # averaged over the steps
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / xs.size(0)


def wg_first_sequence(xs, gs):  # batch forgotten: sequence 0 only
    return gs[:, 0].T @ xs[:, 0]


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, wg_transposed, r"(?i)transpos|D_out, D_in")
case("wg_mean_steps", check_weight_gradient, wg_mean_steps, r"(?i)mean|average|divid|sum")
case("wg_first_sequence", check_weight_gradient, wg_first_sequence, r"(?i)batch|sequence")


# ---------- 05: reach ----------
def re_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


def re_xl_no_position(memory, n_layers, span, position=0):
    return n_layers * span if memory != "feedback" else math.inf


def re_window_plus_self(memory, n_layers, span, position=0):
    return n_layers * span + 1 if memory == "window" else re_right(memory, n_layers, span,
                                                                  position)


def re_feedback_span(memory, n_layers, span, position=0):  # one step of memory
    return span if memory == "feedback" else re_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, re_right)
case("re_xl_no_position", check_reach, re_xl_no_position, r"(?i)position")
case("re_window_plus_self", check_reach, re_window_plus_self, r"(?i)itself|self|\+ ?1|token")
case("re_feedback_span", check_reach, re_feedback_span, r"(?i)inf|unbounded")


# ---------- 05: make_recall ----------
def mr_right(filler, values, positions):
    x = filler.clone()
    x[torch.arange(x.size(0), device=filler.device), positions] = values.to(x.dtype)
    t = torch.arange(x.size(1), device=filler.device)
    after = t[None] > positions[:, None]
    y = torch.where(after, values.to(x.dtype)[:, None], torch.full_like(x, -100))
    return x, y


def mr_in_place(filler, values, positions):  # writes into filler
    x = filler
    x[torch.arange(x.size(0), device=filler.device), positions] = values.to(x.dtype)
    t = torch.arange(x.size(1), device=filler.device)
    y = torch.where(t[None] > positions[:, None], values.to(x.dtype)[:, None],
                    torch.full_like(x, -100))
    return x, y


def mr_from_p(filler, values, positions):  # labels from p on (>=), the value itself too
    x, _ = mr_right(filler, values, positions)
    t = torch.arange(x.size(1), device=filler.device)
    y = torch.where(t[None] >= positions[:, None], values.to(x.dtype)[:, None],
                    torch.full_like(x, -100))
    return x, y


def mr_column_index(filler, values, positions):  # x[:, positions]: every row's columns
    x = filler.clone()
    x[:, positions] = values.to(x.dtype)
    _, y = mr_right(filler, values, positions)
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_in_place", check_make_recall, mr_in_place, r"(?i)filler.*(chang|modif)|clone|copy")
case("mr_from_p", check_make_recall, mr_from_p, r"(?i)after|p \+ 1|value.s own|at p")
case("mr_column_index", check_make_recall, mr_column_index,
     r"(?i)each row|other rows|x\[:, ?positions\]|arange")


# ---------- 05: accuracy_by_distance ----------
def _acc(logits, y, max_distance, *, shift=1, empty=math.nan, clamp=False):
    labelled = y != -100
    first = labelled.long().argmax(1)
    p = first - shift
    t = torch.arange(y.size(1), device=y.device)  # where y is (a GPU)
    d = t[None] - p[:, None]
    if clamp:
        d = d.clamp(max=max_distance)
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), empty, dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        if sel.any():
            out[k - 1] = correct[sel].to(logits.dtype).mean()
    return out


def ad_right(logits, y, max_distance):
    return _acc(logits, y, max_distance)


def ad_first_is_p(logits, y, max_distance):  # p taken as the first labelled position
    return _acc(logits, y, max_distance, shift=0)


def ad_zero_empty(logits, y, max_distance):  # 0 instead of NaN at empty distances
    return _acc(logits, y, max_distance, empty=0.0)


def ad_clamped(logits, y, max_distance):  # far positions pooled into the last entry
    return _acc(logits, y, max_distance, clamp=True)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_first_is_p", check_accuracy_by_distance, ad_first_is_p, r"(?i)p \+ 1|first labelled|shift")
case("ad_zero_empty", check_accuracy_by_distance, ad_zero_empty, r"(?i)nan")
case("ad_clamped", check_accuracy_by_distance, ad_clamped, r"(?i)farther|left out|max_distance")


# ---------- 05: cache_bytes ----------
def _nb(t):
    return t.numel() * t.element_size()


def mc_right(cache):
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    total = 0
    for k, v in pairs:
        total += _nb(k) + _nb(v)
    return total


def mc_rel_keys(cache):  # XL's relative-key tables counted too
    total = mc_right(cache)
    if isinstance(cache, XLCache):
        total += sum(_nb(r) for r in cache.rel_keys if r is not None)
    return total


def mc_keys_only_kvstate(cache):  # KVState: kv[0], the keys only
    if isinstance(cache, KVState):
        return _nb(cache.kv[0])
    return mc_right(cache)


def mc_return_in_loop(cache):  # return inside the loop: the first layer only
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    for k, v in pairs:
        return _nb(k) + _nb(v)


RIGHT["cache_bytes_05"] = (check_cache_bytes_05, mc_right)
case("mc_rel_keys", check_cache_bytes_05, mc_rel_keys,
     r"(?i)rel_keys|relative|only.*keys and values")
case("mc_keys_only_kvstate", check_cache_bytes_05, mc_keys_only_kvstate,
     r"(?i)values|kv\[0\]|both")
case("mc_return_in_loop", check_cache_bytes_05, mc_return_in_loop, r"(?i)(every|all|each) layer")


# ---------- second and third rounds: subtler slips ----------
case("mv_bcast", check_memory_vector, lambda xs, w: (torch.softmax(w, 0)[:, None] * xs).sum(0),
     r"(?i)\[:, None, None\]|axis|broadcast")


def rb_clamp_low(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


case("rb_clamp_low", check_relative_bias, rb_clamp_low,
     r"(?i)clamp|LAST entry")


def fa_bias_h1(q, k, v, bias):
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_bias_h1", check_feedback_attention, fa_bias_h1,
     r"(?i)heads.*batch|bias \[H, S\]|as it is")


def tl_project_top(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            xs.append(h)
        outs.append(h)
        nk, nv = model.project_memory(h[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


case("tl_project_top", check_token_loop, tl_project_top,
     r"(?i)model\.mix|ALL layer")


def tl_replace(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs))
        keys, values = map(list, model.project_memory(m[:, None]))
    return model.head(torch.stack(outs, 1))


case("tl_replace", check_token_loop, tl_replace,
     r"(?i)append|replace")


def skv_headview(m, norm, kv, n_heads):
    out = kv(norm(m))
    k, v = out.view(m.size(0), n_heads, -1).chunk(2, -1)
    return k, v


case("skv_headview", check_shared_kv, skv_headview,
     r"(?i)interleav|\[B, 2, H, D_h\]")


def vg_end_aligned(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        out[-(t + 1):] += g
    return out


case("vg_end_aligned", check_value_gradients, vg_end_aligned,
     r"(?i)FIRST t\+1|aligned|slots 0")


class ApBatchN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[0]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_batch_n", check_append, ApBatchN,
     r"(?i)top\.size\(1\)|batch")


def wg_mixed_order(xs, gs):
    return gs.transpose(0, 1).reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


case("wg_mixed_order", check_weight_gradient, wg_mixed_order,
     r"(?i)paired|flatten both|same way")


def re_xl_times(memory, n_layers, span, position=0):
    if memory == "XL":  # position added once per layer
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)


case("re_xl_times", check_reach, re_xl_times,
     r"(?i)once|per layer")


def mr_short(filler, values, positions):
    x, y = mr_right(filler, values, positions)
    y = y.clone()
    y[:, -1] = -100
    return x, y


case("mr_short", check_make_recall, mr_short,
     r"(?i)last|every position after")


def ad_no_label_mask(logits, y, max_distance):
    labelled = y != -100
    p = labelled.long().argmax(1) - 1
    d = torch.arange(y.size(1))[None] - p[:, None]
    correct = logits.argmax(-1) == y
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = d == k
        if sel.any():
            out[k - 1] = correct[sel].to(logits.dtype).mean()
    return out


case("ad_no_label_mask", check_accuracy_by_distance, ad_no_label_mask,
     r"(?i)unlabelled|y != IGNORE|no labels")


def mc_storage(cache):
    if isinstance(cache, KVState):
        return cache.kv.untyped_storage().nbytes()
    pairs = cache.kv if isinstance(cache, XLCache) else cache
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in pairs)


case("mc_storage", check_cache_bytes_05, mc_storage,
     r"(?i)storage")


def cb_no_tokens(n_layers, d_model, n_tokens, b):
    return 2 * n_layers * d_model * b, 2 * d_model * b


case("cb_no_tokens", check_cache_bytes, cb_no_tokens,
     r"(?i)n_tokens|one token")
case("mv_mean", check_memory_vector, lambda xs, w: xs.mean(0),
     r"(?i)plain average|softmax\(w\)")


def rb_h_axis(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]


case("rb_h_axis", check_relative_bias, rb_h_axis,
     r"(?i)heads|size\(1\)")


def fa_empty_f32(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return fa_right(q, k, v, bias)


case("fa_empty_f32", check_feedback_attention, fa_empty_f32,
     r"(?i)dtype|float32")


def tl_emb_last(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = []
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs + [x[:, t]]))
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


case("tl_emb_last", check_token_loop, tl_emb_last,
     r"(?i)order|embedding first")


def skv_dh_major(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    f = lambda t: t.reshape(t.size(0), -1, n_heads).transpose(1, 2)
    return f(k), f(v)


case("skv_dh_major", check_shared_kv, skv_dh_major,
     r"(?i)head-major|\[H, D_h\]")


def vg_row_sums(read_grads):
    return torch.stack([g.sum(0) for g in read_grads])


case("vg_row_sums", check_value_gradients, vg_row_sums,
     r"(?i)over the reads|slot j")


class ApKeepDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n:], None


case("ap_keepdim", check_append, ApKeepDim,
     r"(?i)shape|grad\[:, ?n\]")
case("wg_sum_first", check_weight_gradient, lambda xs, gs: gs.sum(0).T @ xs.sum(0),
     r"(?i)before the product|cross terms")


def re_window_one(memory, n_layers, span, position=0):
    return span if memory == "window" else re_right(memory, n_layers, span, position)


case("re_window_one_layer", check_reach, re_window_one,
     r"(?i)one layer|L \* W")


def mr_filler_labels(filler, values, positions):
    x, y = mr_right(filler, values, positions)
    return x, torch.where(y == -100, x, y)


case("mr_filler_labels", check_make_recall, mr_filler_labels,
     r"(?i)IGNORE")


def mc_iter_xl(cache):
    if isinstance(cache, KVState):
        return cache.kv.numel() * cache.kv.element_size()
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache)


case("mc_iter_xl", check_cache_bytes_05, mc_iter_xl,
     r"(?i)cache\.kv|XLCache")


def cb_bits(n_layers, d_model, n_tokens, b):
    a, c = cb_right(n_layers, d_model, n_tokens, b)
    return a * 8, c * 8


case("cb_bits", check_cache_bytes, cb_bits,
     r"(?i)bits|factor 8")


class SqY(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2 * y * g


case("sq_2y", check_square, SqY,
     r"(?i)output|save the input")


def tl_eval(model, tokens):
    model.eval()
    return tl_right(model, tokens)


case("tl_sets_eval", check_token_loop, tl_eval,
     r"(?i)eval|mode|dropout")
case("mv_matmul", check_memory_vector, lambda xs, w: torch.softmax(w, 0) @ xs,
     r"(?i)layers|\[:, None, None\]")
case("mv_no_softmax", check_memory_vector, lambda xs, w: torch.einsum("l,lbd->bd", w, xs),
     r"(?i)raw logits|softmax")


def skv_no_bias(m, norm, kv, n_heads):
    k, v = F.linear(norm(m), kv.weight).chunk(2, -1)
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


case("skv_no_bias", check_shared_kv, skv_no_bias,
     r"(?i)bias")


def mr_float_y(filler, values, positions):
    x, y = mr_right(filler, values, positions)
    return x, y.float()


case("mr_float_y", check_make_recall, mr_float_y,
     r"(?i)dtype|int64|Long")


def re_big(memory, n_layers, span, position=0):
    return 10**9 if memory == "feedback" else re_right(memory, n_layers, span, position)


case("re_big", check_reach, re_big,
     r"(?i)math\.inf|unbounded")


def ad_f32(logits, y, max_distance):
    return ad_right(logits.float(), y, max_distance)


case("ad_f32", check_accuracy_by_distance, ad_f32,
     r"(?i)dtype")


def fa_softmax_bias_unscaled(q, k, v, bias):  # bias divided by sqrt(d_h) too
    scores = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_bias_scaled", check_feedback_attention, fa_softmax_bias_unscaled,
     r"(?i)bias.*(sqrt|scaled)")


def wg_outer_last(xs, gs):  # loops over t but assigns instead of adds
    for t in range(xs.size(0)):
        W = gs[t].T @ xs[t]
    return W


case("wg_assign", check_weight_gradient, wg_outer_last,
     r"(?i)last step|every step")


def cb_shared_per_layer(n_layers, d_model, n_tokens, b):  # feedback L-times too, keys only
    return 2 * n_layers * d_model * n_tokens * b, n_layers * d_model * n_tokens * b


case("cb_fb_L", check_cache_bytes, cb_shared_per_layer,
     r"(?i)per layer|shared|n_layers|one key and one value")


def rb_flip_clamp(table, s):  # arange(1, s+1) then flip of the gathered result?
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1].flip(0)


case("rb_flip0", check_relative_bias, rb_flip_clamp,
     r"(?i)\bheads?\b|flip")


# ---------- fourth round ----------
def mv_sum_axis1(xs, w):  # summed over the batch axis
    return (torch.softmax(w, 0)[:, None, None] * xs).sum(1)


case("mv_sum_axis1", check_memory_vector, mv_sum_axis1,
     r"(?i)over B|dim 0")


class ApNoValueGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], None, None


case("ap_no_value_grad", check_append, ApNoValueGrad,
     r"(?i)None for `value`|grad\[:, n\]")


class SqGradInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul_(2 * x)


case("sq_grad_inplace", check_square, SqGradInPlace,
     r"(?i)in place")


def vg_pop(read_grads):
    out = torch.zeros_like(read_grads[-1])
    while read_grads:
        g = read_grads.pop()
        out[: g.size(0)] += g
    return out


case("vg_pop", check_value_gradients, vg_pop,
     r"(?i)read_grads.*(list|emptied|pop|chang)|in place")


def wg_batch_mean(xs, gs):  # divided by the batch size
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / xs.size(1)


case("wg_batch_mean", check_weight_gradient, wg_batch_mean,
     r"(?i)batch size|no division")


def re_xl_plus1(memory, n_layers, span, position=0):
    if memory == "XL":  # the query itself counted
        return n_layers * span + position + 1
    return re_right(memory, n_layers, span, position)


case("re_xl_plus1", check_reach, re_xl_plus1,
     r"(?i)off by one|itself")


def mr_values_flat(filler, values, positions):
    x = filler.clone()
    x[torch.arange(x.size(0), device=filler.device), positions] = values
    t = torch.arange(x.size(1), device=filler.device)
    y = torch.where(t[None] > positions[:, None], values, torch.full_like(x, -100))
    return x, y


case("mr_values_flat", check_make_recall, mr_values_flat,
     r"(?i)values\[:, None\]|column")


def ad_truncated(logits, y, max_distance):
    return ad_right(logits, y, max_distance)[: y.size(1) - 1]


case("ad_truncated", check_accuracy_by_distance, ad_truncated,
     r"(?i)max_distance|NaN")


def mc_mem_len(cache):
    if isinstance(cache, XLCache):
        total = 0
        for buf in cache.kv:
            k, v = buf
            b, h, _, dh = k.shape
            total += 2 * b * h * cache.mem_len * dh * k.element_size()
        return total
    return mc_right(cache)


case("mc_mem_len", check_cache_bytes_05, mc_mem_len,
     r"(?i)mem_len|remembered|fewer|len\(")


# ---------- fifth round ----------
def tl_layer0_only(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        xs = [h]
        for i in range(len(model.layers)):
            h = model.layers[0](h, keys[i], values[i])
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs))
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


case("tl_layer0_only", check_token_loop, tl_layer0_only,
     r"(?i)model\.layers\[0\]|same (layer|module)|layers\[i\]")


def tl_T_from_B(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    outs = []
    for t in range(tokens.size(0)):
        h = x[:, t]
        xs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            xs.append(h)
        outs.append(h)
        m = model.mix(torch.stack(xs))
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(outs, 1))


case("tl_T_from_B", check_token_loop, tl_T_from_B,
     r"(?i)tokens\.size\(1\)|batch|time axis|steps")


def fa_sdpa(q, k, v, bias):  # a RIGHT alternative
    out = F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=bias[:, None, :])
    return out[:, :, 0]


RIGHT["feedback_attention_sdpa"] = (check_feedback_attention, fa_sdpa)


def skv_plain_ln(m, norm, kv, n_heads):
    k, v = kv(F.layer_norm(m, m.shape[-1:])).chunk(2, -1)
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


case("skv_plain_ln", check_shared_kv, skv_plain_ln,
     r"(?i)norm\(m\)|given `?norm")


class ApAtEnd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = buffer.size(1) - 1
        buffer.data[:, n] = value
        ctx.n = top.size(1)
        return buffer.data[:, : top.size(1) + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_at_end", check_append, ApAtEnd,
     r"(?i)slot n|last slot")


def mr_ignore_m1(filler, values, positions):
    x, y = mr_right(filler, values, positions)
    return x, torch.where(y == -100, -1, y)


case("mr_ignore_m1", check_make_recall, mr_ignore_m1,
     r"(?i)-100|IGNORE")


def ad_p_zero(logits, y, max_distance):
    labelled = y != -100
    d = torch.arange(y.size(1))[None].expand_as(y)
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        if sel.any():
            out[k - 1] = correct[sel].to(logits.dtype).mean()
    return out


case("ad_p_zero", check_accuracy_by_distance, ad_p_zero,
     r"(?i)t - p|value's position")


def mc_capacity(cache):
    if isinstance(cache, XLCache):
        return sum(b.allocated_bytes for b in cache.kv)
    return mc_right(cache)


case("mc_capacity", check_cache_bytes_05, mc_capacity,
     r"(?i)storage|room|capacity")


def wg_loop_outer(xs, gs):  # right until trial 49b: the exercise asks for one product
    return sum(gs[t].T @ xs[t] for t in range(xs.size(0)))


case("weight_gradient_loop", check_weight_gradient, wg_loop_outer, r"one matrix product")


# ---------- sixth round ----------
class SqF32(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * x * g).float()


case("sq_f32_grad", check_square, SqF32,
     r"(?i)float32|dtype|\.float\(\)")


class SqNoSave(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


case("sq_no_save", check_square, SqNoSave,
     r"(?i)save_for_backward")


def vg_first_shape(read_grads):
    out = torch.zeros_like(read_grads[0])
    for g in read_grads:
        out = out + g[: out.size(0)]
    return out


case("vg_first_shape", check_value_gradients, vg_first_shape,
     r"(?i)len\(read_grads\)|T = ")


class ApCloneView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_clone", check_append, ApCloneView,
     r"(?i)copy|view")


def mr_zero_labels(filler, values, positions):
    x, _ = mr_right(filler, values, positions)
    t = torch.arange(x.size(1), device=filler.device)
    return x, (t[None] > positions[:, None]) * values[:, None]


case("mr_zero_labels", check_make_recall, mr_zero_labels,
     r"(?i)IGNORE|-100")


def ad_bincount(logits, y, max_distance):
    labelled = y != -100
    p = labelled.long().argmax(1) - 1
    d = (torch.arange(y.size(1))[None] - p[:, None])[labelled]
    c = ((logits.argmax(-1) == y)[labelled]).long()
    n = torch.bincount(d)
    k = torch.bincount(d, weights=c.double())
    return (k / n)[1: max_distance + 1].to(logits.dtype)


case("ad_bincount_no_minlength", check_accuracy_by_distance, ad_bincount,
     r"(?i)max_distance|NaN")


def re_none(memory, n_layers, span, position=0):
    return None if memory == "feedback" else re_right(memory, n_layers, span, position)


case("re_none", check_reach, re_none,
     r"(?i)math\.inf|None")


def cb_kib(n_layers, d_model, n_tokens, b):
    a, c = cb_right(n_layers, d_model, n_tokens, b)
    return a // 1024, c // 1024


case("cb_kib", check_cache_bytes, cb_kib,
     r"(?i)KiB|1024|bytes, not")


def rb_table_inplace(table, s):  # clamps the caller's table in place
    table.clamp_(-1, 1)
    return rb_right(table, s)


case("rb_table_inplace", check_relative_bias, rb_table_inplace,
     r"(?i)in place|modif")


def fa_q_scaled_bias(q, k, v, bias):  # bias reversed along the keys
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias.flip(-1)
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


case("fa_bias_flipped", check_feedback_attention, fa_q_scaled_bias,
     r"(?i)revers|flip")


def skv_reshape_2h(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return out[:, :, 0], out[:, :, 1]


case("skv_h2_view", check_shared_kv, skv_reshape_2h,
     r"(?i)interleav|\[B, 2, H, D_h\]")


# ---------- seventh round ----------
def mr_positions_inplace(filler, values, positions):  # start = positions; start += 1
    x = filler.clone()
    x[torch.arange(x.size(0), device=filler.device), positions] = values
    start = positions
    start += 1
    t = torch.arange(x.size(1), device=filler.device)
    y = torch.where(t[None] >= start[:, None], values[:, None], torch.full_like(x, -100))
    return x, y


case("mr_positions_inplace", check_make_recall, mr_positions_inplace,
     r"(?i)in place|positions")


def ad_y_inplace(logits, y, max_distance):  # y[~labelled] = 0 on the caller's y
    labelled = y != -100
    y[~labelled] = 0
    p = labelled.long().argmax(1) - 1
    d = torch.arange(y.size(1))[None] - p[:, None]
    correct = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), math.nan, dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = labelled & (d == k)
        if sel.any():
            out[k - 1] = correct[sel].to(logits.dtype).mean()
    return out


case("ad_y_inplace", check_accuracy_by_distance, ad_y_inplace, r"(?i)in place")


def vg_list(read_grads):  # a list of rows, not a tensor
    return list(vg_right(read_grads))


case("vg_list", check_value_gradients, vg_list, r"(?i)torch\.Tensor|list")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
