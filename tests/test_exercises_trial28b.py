# flake8: noqa: E501
import torch
from checker_helpers import trial_case, trial_tests
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import (
    check_cache_bytes as check_cache_bytes03, check_token_loop)
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.data.recall import IGNORE
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.xl.cache import XLCache
from labnn.feedback.kv import KVState
import math

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# --- 03 memory_vector
def mv_right(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


def mv_sigmoid(xs, w):  # sigmoid gates instead of softmax
    return (w.sigmoid()[:, None, None] * xs).sum(0)


def mv_last_only(xs, w):  # skips the embedding xs[0]
    return (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0)


def mv_log_softmax(xs, w):  # log_softmax for softmax
    return (w.log_softmax(0)[:, None, None] * xs).sum(0)


RIGHT["mv"] = (check_memory_vector, mv_right)
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"softmax|sum to 1|sigmoid")
case("mv_skip_emb", check_memory_vector, mv_last_only, r"embedding|xs\[0\]|layer 0")
case("mv_logsoftmax", check_memory_vector, mv_log_softmax, r"log|softmax|sum to 1")


# --- 03 relative_bias
def rb_right(table, s):
    d = torch.arange(s, 0, -1, device=table.device).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_no_clamp_wrap(table, s):  # negative index wraps instead of clamping
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.shape[1]]


def rb_newest_first(table, s):  # distances 1..s, newest first
    d = torch.arange(1, s + 1).clamp(max=table.shape[1])
    return table[:, d - 1]


def rb_distance_from_zero(table, s):  # reads distance as s - 1 - j
    d = torch.arange(s - 1, -1, -1).clamp(max=table.shape[1])
    return table[:, d - 1]


RIGHT["rb"] = (check_relative_bias, rb_right)
case("rb_wrap", check_relative_bias, rb_no_clamp_wrap, r"clamp|max_distance|far")
case("rb_newest_first", check_relative_bias, rb_newest_first, r"oldest|order|revers|flip")
case("rb_off_by_one", check_relative_bias, rb_distance_from_zero,
     r"d - 1|off by one|distance 1|shift")


# --- 03 feedback_attention
def fa_right(q, k, v, bias):
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.shape[-1] ** 0.5 + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_after_scale_both(q, k, v, bias):  # bias divided by sqrt(d) too
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / q.shape[-1] ** 0.5
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_bias_transposed(q, k, v, bias):  # bias added to the values' weights post-softmax
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.shape[-1] ** 0.5
    w = s.softmax(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", w, v)


def fa_keys_as_values(q, k, v, bias):  # typo: weights the keys, not the values
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.shape[-1] ** 0.5 + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), k)


RIGHT["fa"] = (check_feedback_attention, fa_right)
case("fa_bias_scaled", check_feedback_attention, fa_bias_after_scale_both,
     r"bias.*(scal|sqrt)|(scal|sqrt).*bias")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_transposed,
     r"bias.*(before|softmax|score)")
case("fa_keys_as_values", check_feedback_attention, fa_keys_as_values, r"\bv\b|values|keys")


# --- 03 cache_bytes
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)


def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # counts the memory: 3D
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            3 * d_model * n_tokens * bytes_per_number)


def cb_one_kv_per_layer(n_layers, d_model, n_tokens, bytes_per_number):  # forgets the 2
    return (n_layers * d_model * n_tokens * bytes_per_number,
            d_model * n_tokens * bytes_per_number)


def cb_float(n_layers, d_model, n_tokens, bytes_per_number):  # float division by L
    t = 2 * n_layers * d_model * n_tokens * bytes_per_number
    return t, t / n_layers


RIGHT["cb"] = (check_cache_bytes03, cb_right)
case("cb_memory", check_cache_bytes03, cb_with_memory, r"memory|3|only.*key|key.*value")
case("cb_no_two", check_cache_bytes03, cb_one_kv_per_layer, r"key and (a )?value|2|both")
case("cb_float", check_cache_bytes03, cb_float, r"int")


# --- 04 shared_kv
def skv_right(m, norm, kv, n_heads):
    B, D = m.shape
    k, v = kv(norm(m)).split(D, dim=-1)
    return k.view(B, n_heads, D // n_heads), v.view(B, n_heads, D // n_heads)


def skv_norm_after(m, norm, kv, n_heads):  # LayerNorm of the output instead of the input
    B, D = m.shape
    k, v = kv(m).split(D, dim=-1)
    return norm(k).view(B, n_heads, -1), norm(v).view(B, n_heads, -1)


def skv_chunk_heads(m, norm, kv, n_heads):  # splits k|v per head: [B, H, 2*D_h] then chunk
    B, D = m.shape
    k, v = kv(norm(m)).view(B, n_heads, 2 * D // n_heads).chunk(2, dim=-1)
    return k, v


def skv_swapped(m, norm, kv, n_heads):  # values first
    B, D = m.shape
    v, k = kv(norm(m)).split(D, dim=-1)
    return k.view(B, n_heads, -1), v.view(B, n_heads, -1)


RIGHT["skv"] = (check_shared_kv, skv_right)
case("skv_norm_after", check_shared_kv, skv_norm_after,
     r"norm.*(before|input|m\b)|(before|first).*norm")
case("skv_chunk_heads", check_shared_kv, skv_chunk_heads, r"first D|split.*before|per head|heads")
case("skv_swapped", check_shared_kv, skv_swapped, r"first D.*key|swap|values first|key.*value")


# --- 04 Square
class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output


class SqSaveOutput(torch.autograd.Function):  # saves y, computes 2*y*g
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return 2 * y * grad_output


class SqInplace(torch.autograd.Function):  # squares x in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output


class SqNoChain(torch.autograd.Function):  # returns dy/dx, forgets grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x


RIGHT["sq"] = (check_square, SqRight)
case("sq_save_y", check_square, SqSaveOutput, r"2x|2 \* x|y = x|output")
case("sq_inplace", check_square, SqInplace, r"in.place|mul_|modif")
case("sq_no_chain", check_square, SqNoChain, r"grad_output|chain rule")


# --- 04 value_gradients
def vg_right(read_grads):
    T = len(read_grads)
    out = read_grads[-1].new_zeros(T, read_grads[-1].shape[-1])
    for g in read_grads:
        out[: g.shape[0]] += g
    return out


def vg_only_own(read_grads):  # only the read of its own step
    return torch.stack([g[-1] for g in read_grads])


def vg_prefix_sum(read_grads):  # sums reads t <= j (the earlier ones)
    T = len(read_grads)
    out = read_grads[-1].new_zeros(T, read_grads[-1].shape[-1])
    for t, g in enumerate(read_grads):
        out[t] = sum(read_grads[s][min(s, t)] for s in range(t + 1))
    return out


def vg_last_read(read_grads):  # only the last read (it holds every slot)
    return read_grads[-1].clone()


RIGHT["vg"] = (check_value_gradients, vg_right)
case("vg_own_only", check_value_gradients, vg_only_own, r"later|every read|t >= j|t ≥ j|sum")
case("vg_earlier", check_value_gradients, vg_prefix_sum, r"later|t >= j|t ≥ j|earlier")
case("vg_last_read", check_value_gradients, vg_last_read,
     r"every read|only the last|sum|t >= j|t ≥ j")


# --- 04 weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


def wg_transposed(xs, gs):  # X^T G: [D_in, D_out]
    return xs.flatten(0, 1).T @ gs.flatten(0, 1)


def wg_mean(xs, gs):  # averaged over the steps
    return (gs.flatten(0, 1).T @ xs.flatten(0, 1)) / xs.shape[0]


def wg_last_batch(xs, gs):  # einsum keeps only the diagonal over T and B mixed
    return torch.einsum("tbo,sbi->oi", gs, xs)


RIGHT["wg"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient, wg_transposed, r"transpos|D_out, D_in|G\^?T ?X|order")
case("wg_mean", check_weight_gradient, wg_mean, r"mean|average|divid|sum")
case("wg_cross_steps", check_weight_gradient, wg_last_batch, r"step|same t|pair|cross")


# --- 05 reach
def reach_right(memory, n_layers, span, position=0):
    if memory == "feedback":
        return math.inf
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span


def reach_window_plus_one(memory, n_layers, span, position=0):  # counts the token itself
    if memory == "feedback":
        return math.inf
    extra = position if memory == "XL" else 0
    return n_layers * (span + 1) + extra


def reach_xl_no_position(memory, n_layers, span, position=0):  # ignores the segment part
    return math.inf if memory == "feedback" else n_layers * span


def reach_feedback_window(memory, n_layers, span, position=0):  # feedback bounded by W * L
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span


RIGHT["reach"] = (check_reach, reach_right)
case("reach_plus_one", check_reach, reach_window_plus_one, r"itself|W \+ 1|span \+ 1")
case("reach_xl_no_pos", check_reach, reach_xl_no_position, r"position|segment|\+ i")
case("reach_fb_bounded", check_reach, reach_feedback_window, r"inf|unbounded|feedback")


# --- 05 make_recall
def mr_right(filler, values, positions):
    N, T = filler.shape
    x = filler.clone()
    x[torch.arange(N), positions] = values.to(x.dtype)
    t = torch.arange(T, device=filler.device)
    after = t[None, :] > positions[:, None]
    y = torch.where(after, values[:, None].to(x.dtype), torch.full_like(x, IGNORE))
    return x, y


def mr_inclusive(filler, values, positions):  # labels from positions[n] itself
    x, y = mr_right(filler, values, positions)
    y[torch.arange(len(values)), positions] = values.to(y.dtype)
    return x, y


def mr_in_place(filler, values, positions):  # writes into the caller's filler
    x = filler
    x[torch.arange(len(values)), positions] = values.to(x.dtype)
    _, y = mr_right(filler, values, positions)
    return x, y


def mr_broadcast_pos(filler, values, positions):  # x[:, positions] writes every row's p
    x = filler.clone()
    x[:, positions] = values[:, None].to(x.dtype)
    _, y = mr_right(filler, values, positions)
    return x, y


def mr_zero_unlabelled(filler, values, positions):  # 0 instead of IGNORE
    x, y = mr_right(filler, values, positions)
    return x, y.masked_fill(y == IGNORE, 0)


RIGHT["mr"] = (check_make_recall, mr_right)
case("mr_inclusive", check_make_recall, mr_inclusive, r"after|positions\[n\] itself|\+ 1|strict")
case("mr_in_place", check_make_recall, mr_in_place, r"in.place|filler|clone|copy")
case("mr_broadcast", check_make_recall, mr_broadcast_pos,
     r"each row|its own|every row|row n|arange")
case("mr_zero", check_make_recall, mr_zero_unlabelled, r"IGNORE|-100")


# --- 05 accuracy_by_distance
def abd_right(logits, y, max_distance):
    lab = y != IGNORE
    p = lab.int().argmax(1) - 1
    t = torch.arange(y.shape[1], device=y.device)  # where y is (a GPU)
    d = t[None, :] - p[:, None]
    ok = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            out[k - 1] = ok[sel].to(logits.dtype).mean()
    return out


def abd_distance_from_first_label(logits, y, max_distance):  # d = t - first labelled
    lab = y != IGNORE
    first = lab.int().argmax(1)
    d = torch.arange(y.shape[1])[None, :] - first[:, None]
    ok = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            out[k - 1] = ok[sel].to(logits.dtype).mean()
    return out


def abd_zero_not_nan(logits, y, max_distance):  # 0 where no position lies at d
    return torch.nan_to_num(abd_right(logits, y, max_distance), nan=0.0)


def abd_argmax_first_ignore(logits, y, max_distance):  # argmax over T, not over V
    lab = y != IGNORE
    p = lab.int().argmax(1) - 1
    d = torch.arange(y.shape[1])[None, :] - p[:, None]
    ok = (logits.argmax(1)[:, None, :].expand(-1, y.shape[1], -1)[..., 0] == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            out[k - 1] = ok[sel].to(logits.dtype).mean()
    return out


RIGHT["abd"] = (check_accuracy_by_distance, abd_right)
case("abd_from_first_label", check_accuracy_by_distance, abd_distance_from_first_label,
     r"p \+ 1|first labelled|off by one|d = t - p")
case("abd_zero", check_accuracy_by_distance, abd_zero_not_nan, r"NaN|nan")
case("abd_argmax_T", check_accuracy_by_distance, abd_argmax_first_ignore,
     r"argmax.*(axis|dim|vocab|-1|last)|(axis|dim).*argmax")


# --- 05 cache_bytes
def _nb(t):
    return t.numel() * t.element_size()


def cb5_right(cache):
    if isinstance(cache, KVState):
        return _nb(cache.kv)
    if isinstance(cache, XLCache):
        return sum(_nb(k) + _nb(v) for k, v in cache.kv)
    return sum(_nb(k) + _nb(v) for k, v in cache)


def cb5_xl_all(cache):  # XL: every tensor of the namedtuple, rel_keys included
    if isinstance(cache, XLCache):
        total = sum(_nb(k) + _nb(v) for k, v in cache.kv)
        for field in cache[1:]:
            for t in (field if isinstance(field, (list, tuple)) else [field]):
                total += _nb(t) if torch.is_tensor(t) else 0
        return total
    return cb5_right(cache)


def cb5_keys_only_kvstate(cache):  # KVState: kv[0], the keys
    if isinstance(cache, KVState):
        return _nb(cache.kv[0])
    return cb5_right(cache)


def cb5_storage(cache):  # XL: the buffer's whole storage, room to spare included
    if isinstance(cache, XLCache):
        return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in cache.kv)
    return cb5_right(cache)


RIGHT["cb5"] = (check_cache_bytes, cb5_right)
case("cb5_rel_keys", check_cache_bytes, cb5_xl_all, r"rel_keys|relative|only.*keys and values")
case("cb5_keys_only", check_cache_bytes, cb5_keys_only_kvstate, r"values|kv\[0\]|both")
case("cb5_storage", check_cache_bytes, cb5_storage, r"storage|spare|room|positions it remembers")


# --- 03 token_loop
def tl_right(model, tokens):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.shape[1]):
        h, outs = x[:, t], [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_head_on_memory(model, tokens):  # predicts from the memory vector m, not the top layer
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    ms = []
    for t in range(tokens.shape[1]):
        h, outs = x[:, t], [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            outs.append(h)
        m = model.mix(torch.stack(outs))
        ms.append(m)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(ms, 1))


def tl_first_layer_keys(model, tokens):  # every layer reads layer 0's projection
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        h, outs = x[:, t], [x[:, t]]
        for layer in model.layers:
            h = layer(h, keys[0], values[0])
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def tl_mix_without_embedding(model, tokens):  # stacks the layers' outputs only: pads w/ zeros
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        h, outs = x[:, t], [torch.zeros_like(x[:, t])]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


RIGHT["tl"] = (check_token_loop, tl_right)
case("tl_head_on_m", check_token_loop, tl_head_on_memory, r"memory vector|top layer|head")
case("tl_layer0_kv", check_token_loop, tl_first_layer_keys,
     r"own projection|each layer|keys\[0\]|layer 0|its own")
case("tl_no_embedding", check_token_loop, tl_mix_without_embedding, r"embedding|x\^?0|xs\[0\]")


# --- 04 Append
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


class ApFirstSlot(torch.autograd.Function):  # value's grad from slot 0, top's from the rest
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class ApCopy(torch.autograd.Function):  # returns torch.cat: a copy, not a view
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n] = value
        ctx.n = n
        return torch.cat([top, value[:, None]], 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


class ApWriteEnd(torch.autograd.Function):  # writes the value at slot n + 1 (top's length + 1)
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer.data[:, n + 1] = value
        ctx.n = n
        return buffer.data[:, : n + 2]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n + 1], grad[:, ctx.n + 1], None


RIGHT["ap"] = (check_append, ApRight)
case("ap_first_slot", check_append, ApFirstSlot, r"last slot|newest|slot n|first n")
case("ap_copy", check_append, ApCopy, r"view|cop(y|ies)|torch.cat|address")
case("ap_write_n_plus_1", check_append, ApWriteEnd, r"slot n\b|off by one|n \+ 1|one slot too far")


# --- extra probes
def mv_2d_weights(xs, w):  # weights [L+1, 1]: broadcast against [B, D], not the layer axis
    return (w.softmax(0)[:, None] * xs).sum(0)


case("mv_broadcast", check_memory_vector, mv_2d_weights, r"broadcast|\[:, None, None\]|layer axis")


def vg_in_place(read_grads):  # accumulates into the caller's last tensor
    out = read_grads[-1]
    for g in read_grads[:-1]:
        out[: g.shape[0]] += g
    return out


case("vg_in_place", check_value_gradients, vg_in_place, r"in.place|unchanged|read_grads|clone")


def reach_xl_segment_end(memory, n_layers, span, position=0):  # XL: always the segment's last
    if memory == "feedback":
        return math.inf
    return n_layers * span + (span - 1 if memory == "XL" else 0)


case("reach_xl_seg_end", check_reach, reach_xl_segment_end, r"position|last position|segment")


def abd_clamp_far(logits, y, max_distance):  # far positions pooled into the last bin
    lab = y != IGNORE
    p = lab.int().argmax(1) - 1
    d = (torch.arange(y.shape[1])[None, :] - p[:, None]).clamp(max=max_distance)
    ok = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        sel = lab & (d == k)
        if sel.any():
            out[k - 1] = ok[sel].to(logits.dtype).mean()
    return out


case("abd_clamp_far", check_accuracy_by_distance, abd_clamp_far, r"farther|left out|clamp|beyond")


def tl_m_2d(model, tokens):  # project_memory(m): [B, D] where [B, 1, D] is expected
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.shape[1]):
        h, outs = x[:, t], [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            h = layer(h, k, v)
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(h)
        nk, nv = model.project_memory(m)
        keys = [torch.cat([a, b], 2) for a, b in zip(keys, nk)]
        values = [torch.cat([a, b], 2) for a, b in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("tl_m_2d", check_token_loop, tl_m_2d, r"m\[:, None\]|\[B, 1, D\]|one step|key axis")


class ApNoData(torch.autograd.Function):  # writes and slices buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None


case("ap_no_data", check_append, ApNoData, r"\.data|version|alias")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
