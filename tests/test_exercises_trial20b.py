"""Learner trial 20 (b): notebooks 03, 04 and 05, three new wrong answers per exercise."""
import math

import torch
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
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")
IGNORE = -100

# ---------------------------------------------------------------- 03.1 memory_vector


def mv_right(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


def mv_sigmoid(xs, w):  # sigmoid gates instead of a softmax mix
    return (torch.sigmoid(w)[:, None, None] * xs).sum(0)


def mv_broadcast(xs, w):  # weights [L+1, 1] broadcast against [B, D]: along the batch
    return (w.softmax(0)[:, None] * xs).sum(0)


def mv_mean(xs, w):  # ignores the learned logits: a plain mean of the layers
    return xs.mean(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"softmax|sum to one|normali[sz]")
case("mv_broadcast", check_memory_vector, mv_broadcast, r"broadcast|batch|\[L\+1, 1, 1\]|axis")
case("mv_mean", check_memory_vector, mv_mean, r"\bw\b|logits|weights|mean")

# ---------------------------------------------------------------- 03.2 relative_bias


def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_no_clamp(table, s):  # forgets that far distances share the last column
    return table[:, torch.arange(s, 0, -1) - 1]


def rb_newest_first(table, s):  # distances 1..s: newest key first
    return table[:, torch.arange(1, s + 1).clamp(max=table.shape[1]) - 1]


def rb_column_d(table, s):  # column d for distance d (no - 1), clamped to stay inside
    return table[:, torch.arange(s, 0, -1).clamp(max=table.shape[1] - 1)]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_no_clamp", check_relative_bias, rb_no_clamp, r"clamp|max_distance|last column")
case("rb_newest_first", check_relative_bias, rb_newest_first,
     r"oldest|order|reversed|newest")
case("rb_column_d", check_relative_bias, rb_column_d, r"d - 1|column|off by one|shift")

# ---------------------------------------------------------------- 03.3 feedback_attention


def fa_right(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_softmax(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)


def fa_bias_scaled(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_times_sqrt(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) * math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"bias.*(before|inside|scores)|(before|inside).*softmax")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled,
     r"bias.*(scal|sqrt|divid)|(scal|sqrt|divid).*bias")
case("fa_times_sqrt", check_feedback_attention, fa_times_sqrt,
     r"divid|multipl|sqrt|scal")

# ---------------------------------------------------------------- 03.4 token_loop


def _loop(model, tokens, memory_of, layer_input, kv_index):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.shape[1]):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            j = kv_index(i)
            outs.append(layer(layer_input(outs), keys[j], values[j]))
        tops.append(outs[-1])
        m = memory_of(model, outs)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], dim=2) for a, b in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def _mix(model, outs):
    return model.mix(torch.stack(outs))


def tl_right(model, tokens):
    return _loop(model, tokens, _mix, lambda o: o[-1], lambda i: i)


def tl_top_memory(model, tokens):  # the memory is the top layer only (no mix)
    return _loop(model, tokens, lambda mdl, o: o[-1], lambda o: o[-1], lambda i: i)


def tl_embed_input(model, tokens):  # every layer reads the embedding, not the layer below
    return _loop(model, tokens, _mix, lambda o: o[0], lambda i: i)


def tl_first_kv(model, tokens):  # every layer reads the first layer's keys and values
    return _loop(model, tokens, _mix, lambda o: o[-1], lambda i: 0)


RIGHT["token_loop"] = (check_token_loop, tl_right)
case("tl_top_memory", check_token_loop, tl_top_memory, r"mix|all (the )?layers|embedding")
case("tl_embed_input", check_token_loop, tl_embed_input,
     r"layer below|previous layer|output of|embedding")
case("tl_first_kv", check_token_loop, tl_first_kv,
     r"own (keys|projection)|each layer's|per layer|layer 0|first layer")

# ---------------------------------------------------------------- 03.5 cache_bytes


def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)


def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # counts 3D: memory too
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            3 * d_model * n_tokens * bytes_per_number)


def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the values
    return (n_layers * d_model * n_tokens * bytes_per_number,
            d_model * n_tokens * bytes_per_number)


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # feedback first
    return cb_right(n_layers, d_model, n_tokens, bytes_per_number)[::-1]


RIGHT["cache_bytes3"] = (check_cache_bytes, cb_right)
case("cb_with_memory", check_cache_bytes, cb_with_memory, r"memory vector|3 ?D|not the memory")
case("cb_keys_only", check_cache_bytes, cb_keys_only, r"value|2 ?L ?D|factor (of )?2|twice")
case("cb_swapped", check_cache_bytes, cb_swapped, r"order|swap|transformer.*first")

# ---------------------------------------------------------------- 04.1 shared_kv


def skv_right(m, norm, kv, n_heads):
    b, d = m.shape
    y = kv(norm(m)).view(b, 2, n_heads, d // n_heads)
    return y[:, 0], y[:, 1]


def skv_no_norm(m, norm, kv, n_heads):
    b, d = m.shape
    y = kv(m).view(b, 2, n_heads, d // n_heads)
    return y[:, 0], y[:, 1]


def skv_heads_outer(m, norm, kv, n_heads):  # [B, H, 2, D_h]: heads cut before k/v
    b, d = m.shape
    y = kv(norm(m)).view(b, n_heads, 2, d // n_heads)
    return y[:, :, 0], y[:, :, 1]


def skv_no_bias(m, norm, kv, n_heads):  # the weight alone, no bias
    b, d = m.shape
    y = (norm(m) @ kv.weight.T).view(b, 2, n_heads, d // n_heads)
    return y[:, 0], y[:, 1]


RIGHT["shared_kv"] = (check_shared_kv, skv_right)
case("skv_no_norm", check_shared_kv, skv_no_norm, r"norm")
case("skv_heads_outer", check_shared_kv, skv_heads_outer,
     r"first D|keys.*(first|then)|\[B, 2, H|order")
case("skv_no_bias", check_shared_kv, skv_no_bias, r"bias")

# ---------------------------------------------------------------- 04.2 Square


class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SqNoChain(SqRight):  # forgets grad_output: returns dy/dx
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


class SqInplace(torch.autograd.Function):  # squares its input in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SqNoTwo(SqRight):  # drops the factor 2
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x


RIGHT["square"] = (check_square, SqRight)
case("sq_no_chain", check_square, SqNoChain, r"grad_output|chain rule")
case("sq_inplace", check_square, SqInplace, r"in place|in-place|changed.*input|new tensor")
case("sq_no_two", check_square, SqNoTwo, r"2 ?\*? ?x|factor|2x|half")

# ---------------------------------------------------------------- 04.3 value_gradients


def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_into_input(read_grads):  # accumulates into the caller's last tensor
    total = read_grads[-1]
    for g in read_grads[:-1]:
        total[: g.shape[0]] += g
    return total


def vg_own_read(read_grads):  # only the read of v_j's own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])


def vg_align_end(read_grads):  # adds read t into the LAST t + 1 rows
    total = torch.zeros_like(read_grads[-1])
    n = total.shape[0]
    for t, g in enumerate(read_grads):
        total[n - t - 1:] += g
    return total


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_into_input", check_value_gradients, vg_into_input,
     r"in place|unchanged|modif|changed.*read_grads|new tensor")
case("vg_own_read", check_value_gradients, vg_own_read, r"later|every read|t ?>= ?j|sum")
case("vg_align_end", check_value_gradients, vg_align_end,
     r"first .*rows|slot j|slots 0|aligned|last rows")

# ---------------------------------------------------------------- 04.4 Append


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


class ApCopy(ApRight):  # returns a copy of the prefix, not a view
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()


class ApFirstSlot(ApRight):  # value's gradient taken from slot 0
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, 0], None


class ApTwoGrads(ApRight):  # forgets the None for buffer
    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n]


RIGHT["append"] = (check_append, ApRight)
case("ap_copy", check_append, ApCopy, r"view|cop(y|ied)|storage")
case("ap_first_slot", check_append, ApFirstSlot, r"slot n|last slot|value.*slot")
case("ap_two_grads", check_append, ApTwoGrads, r"three|None.*buffer|buffer.*None|3 grad")

# ---------------------------------------------------------------- 04.5 weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_mean(xs, gs):  # averages over steps and batch
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.shape[0] * xs.shape[1])


def wg_mismatched_rows(xs, gs):  # X flattened batch-major, G step-major
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def wg_last_step(xs, gs):  # only the last step
    return gs[-1].T @ xs[-1]


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_mean", check_weight_gradient, wg_mean, r"mean|sum|divid|average")
case("wg_mismatched_rows", check_weight_gradient, wg_mismatched_rows,
     r"same (way|order)|row|flatten|\(t, b\)")
case("wg_last_step", check_weight_gradient, wg_last_step, r"every step|all steps|last step")

# ---------------------------------------------------------------- 05.1 reach


def re_right(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position,
            "feedback": math.inf}[memory]


def re_window_self(memory, n_layers, span, position=0):  # counts the token itself
    return n_layers * span + 1 if memory == "window" else re_right(memory, n_layers, span, position)


def re_xl_per_layer(memory, n_layers, span, position=0):  # position added per layer
    if memory == "XL":
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)


def re_feedback_window(memory, n_layers, span, position=0):  # feedback like a window
    if memory == "feedback":
        return n_layers * span
    return re_right(memory, n_layers, span, position)


RIGHT["reach"] = (check_reach, re_right)
case("re_window_self", check_reach, re_window_self, r"itself|not count|\+ ?1")
case("re_xl_per_layer", check_reach, re_xl_per_layer, r"once|per layer|position")
case("re_feedback_window", check_reach, re_feedback_window, r"inf|unbounded|feedback")

# ---------------------------------------------------------------- 05.2 make_recall


def mr_right(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(x), device=filler.device), positions] = values
    after = torch.arange(x.shape[1], device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(x, IGNORE))
    return x, y


def mr_inclusive(filler, values, positions):  # labels from the value's own position
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(x.shape[1], device=filler.device)[None, :] >= positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(x, IGNORE))


def mr_inplace(filler, values, positions):  # writes into the caller's filler
    _, y = mr_right(filler, values, positions)
    filler[torch.arange(len(filler), device=filler.device), positions] = values
    return filler, y


def mr_slice_index(filler, values, positions):  # x[:, positions]: every row, all columns
    x = filler.clone()
    x[:, positions] = values[:, None]
    _, y = mr_right(filler, values, positions)
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr_right)
case("mr_inclusive", check_make_recall, mr_inclusive, r"after|strictly|value's (own )?position")
case("mr_inplace", check_make_recall, mr_inplace, r"filler|clone|in place|unchanged")
case("mr_slice_index", check_make_recall, mr_slice_index,
     r"one entry per row|together|every row|other rows")

# ---------------------------------------------------------------- 05.3 accuracy_by_distance


def _abd(logits, y, max_distance, d_of, offset=1, empty=math.nan):
    lab = y != IGNORE
    d = d_of(lab)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), empty, dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            i = k - offset
            if 0 <= i < max_distance:
                out[i] = hit[sel].to(logits.dtype).mean()
    return out


def ad_right(logits, y, max_distance):
    return _abd(logits, y, max_distance, lambda lab: lab.cumsum(1))


def ad_zero_missing(logits, y, max_distance):  # 0 where no position lies at d
    return _abd(logits, y, max_distance, lambda lab: lab.cumsum(1), empty=0.0)


def ad_entry_d(logits, y, max_distance):  # entry d for distance d
    return _abd(logits, y, max_distance, lambda lab: lab.cumsum(1), offset=0)


def ad_column(logits, y, max_distance):  # d = column index: right only for p = 0
    return _abd(logits, y, max_distance,
                lambda lab: torch.arange(lab.shape[1]).expand_as(lab))


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
case("ad_zero_missing", check_accuracy_by_distance, ad_zero_missing, r"NaN|nan")
case("ad_entry_d", check_accuracy_by_distance, ad_entry_d, r"d - 1|entry|off by one|shift")
case("ad_column", check_accuracy_by_distance, ad_column,
     r"position|\bp\b|column index|first labelled")

# ---------------------------------------------------------------- 05.4 cache_bytes


def _pairs(cache):
    if isinstance(cache, KVState):
        return [(cache.kv[0], cache.kv[1])]
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    return [tuple(p) for p in cache]


def c5_right(cache):
    return sum(k.nbytes + v.nbytes for k, v in _pairs(cache))


def c5_storage(cache):  # the storage behind each view
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes()
               for k, v in _pairs(cache))


def c5_rel_keys(cache):  # XL: adds the table of relative keys
    extra = 0
    if isinstance(cache, XLCache):
        extra = sum(t.nbytes for t in cache.rel_keys if t is not None)
    return c5_right(cache) + extra


def c5_keys_only(cache):  # forgets the values
    return sum(k.nbytes for k, v in _pairs(cache))


RIGHT["cache_bytes5"] = (check_cache_bytes5, c5_right)
case("c5_storage", check_cache_bytes5, c5_storage, r"storage|view")
case("c5_rel_keys", check_cache_bytes5, c5_rel_keys, r"rel(ative)?[_ ]keys|relative")
case("c5_keys_only", check_cache_bytes5, c5_keys_only, r"value")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
