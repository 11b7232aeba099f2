"""Learner trial 14b: notebooks 03, 04 and 05 (issue 28)."""
import math

import torch

from checker_helpers import trial_case, trial_tests
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.feedback_transformer.token_loop import check_cache_bytes as check_count_bytes
from labnn.exercises.feedback_transformer.token_loop import check_token_loop
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

# ---- 03 Ex: memory_vector


def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


RIGHT["memory_vector"] = (check_memory_vector, mv_right)
case("mv_no_softmax", check_memory_vector,
     lambda xs, w: (w[:, None, None] * xs).sum(0), r"softmax")
case("mv_sum_normalised", check_memory_vector,
     lambda xs, w: ((w / w.sum())[:, None, None] * xs).sum(0), r"softmax")
case("mv_no_embedding", check_memory_vector,
     lambda xs, w: (w[1:].softmax(0)[:, None, None] * xs[1:]).sum(0), r"embedding|xs\[0\]")
case("mv_log_softmax", check_memory_vector,
     lambda xs, w: (w.log_softmax(0)[:, None, None] * xs).sum(0), r"log_softmax|log")

# ---- 03 Ex: relative_bias


def rb_right(table, s):
    d = (s - torch.arange(s)).clamp(max=table.size(1))
    return table[:, d - 1]


RIGHT["relative_bias"] = (check_relative_bias, rb_right)
case("rb_no_clamp", check_relative_bias,
     lambda table, s: table[:, s - torch.arange(s) - 1], r"clamp|max_distance")
case("rb_newest_first", check_relative_bias,
     lambda table, s: table[:, (torch.arange(s) + 1).clamp(max=table.size(1)) - 1],
     r"oldest|order|revers|flip")
case("rb_index_d_not_d_minus_1", check_relative_bias,
     lambda table, s: table[:, (s - torch.arange(s)).clamp(max=table.size(1) - 1)],
     r"d - 1|off by one|distance d")
case("rb_clamp_one_short", check_relative_bias,
     lambda table, s: table[:, (s - torch.arange(s)).clamp(1, table.size(1) - 1) - 1],
     r"clamp|max_distance")

# ---- 03 Ex: feedback_attention


def fa(q, k, v, bias, scale=True, after=False, bias_scaled=False, flip=False):
    s = torch.einsum("bhd,bhsd->bhs", q, k)
    b = bias.flip(-1) if flip else bias
    if bias_scaled:
        s = (s + b) / math.sqrt(q.size(-1))
    else:
        s = s / math.sqrt(q.size(-1)) if scale else s
        s = s if after else s + b
    p = s.softmax(-1)
    if after:
        p = p + b
    return torch.einsum("bhs,bhsd->bhd", p, v)


RIGHT["feedback_attention"] = (check_feedback_attention, fa)
case("fa_no_scale", check_feedback_attention,
     lambda q, k, v, b: fa(q, k, v, b, scale=False), r"sqrt|scal")
case("fa_bias_after_softmax", check_feedback_attention,
     lambda q, k, v, b: fa(q, k, v, b, after=True), r"bias.*(before|after).*softmax|softmax.*bias")
case("fa_bias_scaled_too", check_feedback_attention,
     lambda q, k, v, b: fa(q, k, v, b, bias_scaled=True), r"bias.*(sqrt|scal)|(sqrt|scal).*bias")
case("fa_bias_flipped", check_feedback_attention,
     lambda q, k, v, b: fa(q, k, v, b, flip=True), r"bias.*(order|revers|flip|oldest)")

# ---- 03 Ex: token_loop


def tl(model, tokens, head_on_m=False, top_only=False, last_only=False, layer0=False):
    B, T = tokens.shape
    memory = model.embed.weight.new_zeros(B, 0, model.config.d_model)
    keys, values = model.project_memory(memory)
    tops = []
    for t in range(T):
        xs = [model.embed(tokens[:, t])]
        for l, layer in enumerate(model.layers):
            i = 0 if layer0 else l
            xs.append(layer(xs[-1], keys[i], values[i]))
        m = xs[-1] if top_only else model.mix(torch.stack(xs))
        tops.append(m if head_on_m else xs[-1])
        nk, nv = model.project_memory(m[:, None])
        if last_only:
            keys, values = nk, nv
        else:
            keys = [torch.cat(kv, 2) for kv in zip(keys, nk)]
            values = [torch.cat(kv, 2) for kv in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


RIGHT["token_loop"] = (check_token_loop, tl)
case("tl_head_on_memory_vector", check_token_loop,
     lambda m, t: tl(m, t, head_on_m=True), r"head.*(top|last layer)|memory vector.*head")
case("tl_memory_is_top_layer", check_token_loop,
     lambda m, t: tl(m, t, top_only=True), r"mix|softmax|all layers|embedding")
case("tl_only_previous_step", check_token_loop,
     lambda m, t: tl(m, t, last_only=True),
     r"previous step|every earlier|accumulat|all earlier|cat")
case("tl_first_layer_keys", check_token_loop,
     lambda m, t: tl(m, t, layer0=True), r"own (key|projection)|per layer|keys\[l\]|layer l")


# ---- 03 Ex: cache_bytes (counts)


def cb_right(L, D, n, b):
    return 2 * L * D * n * b, 2 * D * n * b


RIGHT["count_bytes"] = (check_count_bytes, cb_right)
case("cb_keys_only", check_count_bytes,
     lambda L, D, n, b: (L * D * n * b, D * n * b), r"value|key and a value|2")
case("cb_with_memory_vectors", check_count_bytes,
     lambda L, D, n, b: (2 * L * D * n * b, 3 * D * n * b), r"memory vector")
case("cb_floats", check_count_bytes,
     lambda L, D, n, b: (2 * L * D * n * b / 1, 2 * D * n * b / 1), r"int")
case("cb_swapped", check_count_bytes,
     lambda L, D, n, b: (2 * D * n * b, 2 * L * D * n * b), r"order|swap|transformer.*first")

# ---- 04 Ex1: shared_kv


def skv(m, norm, kv, h, use_norm=True, interleave=False, heads_last=False, swap=False,
        head_major=False):
    x = kv(norm(m) if use_norm else m)
    B, D = m.shape
    if interleave:
        k, v = x[:, ::2], x[:, 1::2]
    elif head_major:
        k, v = x.view(B, h, 2 * D // h).chunk(2, -1)
        return (v, k) if swap else (k, v)
    else:
        k, v = x.chunk(2, -1)
    if heads_last:
        k, v = (t.view(B, D // h, h).transpose(1, 2) for t in (k, v))
    else:
        k, v = (t.view(B, h, D // h) for t in (k, v))
    return (v, k) if swap else (k, v)


RIGHT["shared_kv"] = (check_shared_kv, skv)
case("skv_no_norm", check_shared_kv,
     lambda m, n, kv, h: skv(m, n, kv, h, use_norm=False), r"norm")
case("skv_interleaved", check_shared_kv,
     lambda m, n, kv, h: skv(m, n, kv, h, interleave=True), r"first D|halves|interleav|chunk")
case("skv_heads_last", check_shared_kv,
     lambda m, n, kv, h: skv(m, n, kv, h, heads_last=True), r"head")
case("skv_swapped", check_shared_kv,
     lambda m, n, kv, h: skv(m, n, kv, h, swap=True), r"swap|first D.*keys|keys.*values")
case("skv_head_major_split", check_shared_kv,
     lambda m, n, kv, h: skv(m, n, kv, h, head_major=True), r"first D|halves|head")

# ---- 04 Ex2: Square


class SquareRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


class SquareNoGrad(SquareRight):
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x


class SquareNoTwo(SquareRight):
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return x * g


class SquareFromOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return 2 * y.sqrt() * g


class SquareInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul_(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


RIGHT["square"] = (check_square, SquareRight)
case("sq_ignores_grad_output", check_square, SquareNoGrad, r"grad_output")
case("sq_missing_2", check_square, SquareNoTwo, r"\b2\b|factor|2 ?\*? ?x|2x")
case("sq_sqrt_of_output", check_square, SquareFromOutput, r"negative|sqrt|sign|input")
case("sq_in_place", check_square, SquareInPlace, r"in.place|mul_|modif|input")

# ---- 04 Ex3: value_gradients


def vg_right(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[:g.size(0)] += g
    return out


def vg_in_place(read_grads):
    acc = read_grads[-1]
    for g in read_grads[:-1]:
        acc[:g.size(0)] += g
    return acc


def vg_exclusive(read_grads):
    out = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        out[:g.size(0) - 1] += g[:-1]
    return out


RIGHT["value_gradients"] = (check_value_gradients, vg_right)
case("vg_own_read_only", check_value_gradients,
     lambda rg: torch.stack([g[-1] for g in rg]), r"later|every read|sum|t ?>=? ?j|all")
case("vg_last_read_only", check_value_gradients,
     lambda rg: rg[-1].clone(), r"every read|sum|all|earlier|only the last")
case("vg_in_place", check_value_gradients, vg_in_place, r"unchanged|in.place|modif|new tensor")
case("vg_skip_own_read", check_value_gradients, vg_exclusive, r"own|t ?>=? ?j|its own step")

# ---- 04 Ex4: Append


class AppendRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, :n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n], None


class AppendNoData(AppendRight):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, :n + 1]


class AppendFirstSlot(AppendRight):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, 0], None


class AppendCat(AppendRight):
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)


class AppendTwoGrads(AppendRight):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n]


RIGHT["append"] = (check_append, AppendRight)
case("ap_buffer_not_data", check_append, AppendNoData, r"\.data|version")
case("ap_value_grad_first_slot", check_append, AppendFirstSlot, r"last slot|value")
case("ap_cat_copy", check_append, AppendCat, r"view|copy|buffer")
case("ap_two_grads", check_append, AppendTwoGrads, r"three|None.*buffer|buffer.*None")

# ---- 04 Ex5: weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
case("wg_transposed", check_weight_gradient,
     lambda xs, gs: xs.flatten(0, 1).T @ gs.flatten(0, 1), r"transpos|G\^?T|D_out, D_in")
case("wg_mean", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1)),
     r"sum|mean|averag|divid")
case("wg_last_step_only", check_weight_gradient,
     lambda xs, gs: gs[-1].T @ xs[-1], r"every step|all steps|sum over t|steps")
case("wg_mismatched_rows", check_weight_gradient,
     lambda xs, gs: gs.reshape(-1, gs.size(-1)).T @ xs.transpose(0, 1).reshape(-1, xs.size(-1)),
     r"order|pair|same (order|step)|transpose")

# ---- 05 Ex1: reach


def reach_right(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position,
            "feedback": math.inf}[memory]


def reach_with(**over):
    def reach(memory, n_layers, span, position=0):
        r = reach_right(memory, n_layers, span, position)
        f = over.get(memory)
        return f(n_layers, span, position) if f else r
    return reach


RIGHT["reach"] = (check_reach, reach_right)
case("re_window_plus_itself", check_reach,
     reach_with(window=lambda L, s, p: L * s + 1), r"itself|does not count|L ?[·*×] ?W")
case("re_xl_ignores_position", check_reach,
     reach_with(XL=lambda L, s, p: L * s), r"position")
case("re_xl_last_position_always", check_reach,
     reach_with(XL=lambda L, s, p: L * s + s - 1), r"position")
case("re_feedback_one_window", check_reach,
     reach_with(feedback=lambda L, s, p: s), r"inf|unbounded")

# ---- 05 Ex2: make_recall


def mr(filler, values, positions, clone=True, inclusive=False, ignore=-100, bad_index=False):
    x = filler.clone() if clone else filler
    rows = torch.arange(filler.size(0), device=filler.device)
    if bad_index:
        x[:, positions] = values
    else:
        x[rows, positions] = values
    t = torch.arange(filler.size(1), device=filler.device)[None]
    after = t >= positions[:, None] if inclusive else t > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, ignore))
    return x, y


RIGHT["make_recall"] = (check_make_recall, mr)
case("mr_no_clone", check_make_recall,
     lambda f, v, p: mr(f, v, p, clone=False), r"filler|copy|clone|in.place")
case("mr_label_at_p", check_make_recall,
     lambda f, v, p: mr(f, v, p, inclusive=True),
     r"own position|\] ?\+ ?1|p ?\+ ?1|position itself")
case("mr_ignore_minus_one", check_make_recall,
     lambda f, v, p: mr(f, v, p, ignore=-1), r"-100|IGNORE")
case("mr_column_indexing", check_make_recall,
     lambda f, v, p: mr(f, v, p, bad_index=True), r"row|x\[:, ?positions\]|each row|one value")

# ---- 05 Ex3: accuracy_by_distance


def ad(logits, y, max_distance, shift=1, empty=math.nan, index_shift=0, count=False):
    labelled = y != -100
    p = labelled.float().argmax(1) - shift
    d = torch.arange(y.size(1), device=y.device)[None] - p[:, None]  # where y is (a GPU)
    correct = (logits.argmax(-1) == y) & labelled
    out = []
    for dd in range(1 + index_shift, max_distance + 1 + index_shift):
        mask = labelled & (d == dd)
        if not mask.any():
            out.append(empty)
        else:
            c = correct[mask].float()
            out.append(c.sum().item() if count else c.mean().item())
    return torch.tensor(out, dtype=logits.dtype, device=logits.device)


RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad)
case("ad_p_is_first_label", check_accuracy_by_distance,
     lambda lo, y, m: ad(lo, y, m, shift=0), r"p ?\+ ?1|first labelled|off by one|shift")
case("ad_zero_not_nan", check_accuracy_by_distance,
     lambda lo, y, m: ad(lo, y, m, empty=0.0), r"NaN|nan")
case("ad_entry_d_not_d_minus_1", check_accuracy_by_distance,
     lambda lo, y, m: ad(lo, y, m, index_shift=1), r"d ?- ?1|entry|off by one|shift")
case("ad_counts_not_fraction", check_accuracy_by_distance,
     lambda lo, y, m: ad(lo, y, m, count=True), r"fraction|mean|count|divid|accuracy")

# ---- 05 Ex4: cache_bytes


def nb(t):
    return t.numel() * t.element_size()


def mcb(cache, rel=False, storage=False, first=False, elements=False):
    size = (lambda t: t.untyped_storage().nbytes()) if storage else (
        (lambda t: t.numel()) if elements else nb)
    if isinstance(cache, KVState):
        return size(cache.kv)
    if isinstance(cache, XLCache):
        total = sum(size(k) + size(v) for k, v in cache.kv)
        if rel:
            total += sum(size(r) for r in cache.rel_keys if r is not None)
        return total
    pairs = cache[:1] if first else cache
    return sum(size(k) + size(v) for k, v in pairs)


RIGHT["cache_bytes"] = (check_cache_bytes, mcb)
case("mcb_xl_rel_keys", check_cache_bytes,
     lambda c: mcb(c, rel=True), r"rel_keys|relative")
case("mcb_storage_nbytes", check_cache_bytes,
     lambda c: mcb(c, storage=True), r"storage|capacity|remember|slots")
case("mcb_first_layer_only", check_cache_bytes,
     lambda c: mcb(c, first=True), r"layer")
case("mcb_elements_not_bytes", check_cache_bytes,
     lambda c: mcb(c, elements=True), r"element_size|bytes per|numel")



# ---- second round: a few more slips


def fa_empty_float32(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return fa(q, k, v, bias)


case("fa_empty_default_dtype", check_feedback_attention, fa_empty_float32, r"dtype|float")
case("fa_bias_subtracted", check_feedback_attention,
     lambda q, k, v, b: fa(q, k, v, -b), r"subtract|sign|minus|add (it|the bias)")
case("mv_mean_not_sum", check_memory_vector,
     lambda xs, w: (w.softmax(0)[:, None, None] * xs).mean(0), r"mean|sum")
case("vg_mean_of_reads", check_value_gradients,
     lambda rg: vg_right(rg) / torch.arange(len(rg), 0, -1)[:, None], r"mean|averag|sum|add")


class AppendTopTooLong(AppendRight):
    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.n + 1], grad[:, ctx.n], None


case("ap_top_grad_n_plus_1", check_append, AppendTopTooLong, r"first n|:n\]|top")
case("wg_sum_before_product", check_weight_gradient,
     lambda xs, gs: gs.sum(0).T @ xs.sum(0), r"sum.*(before|first)|each step|pair|per step")
case("re_xl_extra_layer", check_reach,
     reach_with(XL=lambda L, s, p: (L + 1) * s + p), r"L ?\* ?M|n_layers|layer")
case("mr_y_float", check_make_recall,
     lambda f, v, p: (mr(f, v, p)[0], mr(f, v, p)[1].float()), r"dtype|long|int")
case("mcb_kvstate_keys_only", check_cache_bytes,
     lambda c: mcb(c) // 2 if isinstance(c, KVState) else mcb(c), r"value|kv\[0\]|keys")
case("ad_distance_inclusive", check_accuracy_by_distance,  # d = t - p + 1
     lambda lo, y, m: ad(lo, y, m, shift=2),
     r"d is one too high.*t - p \+ 1.*stored at entry d")
case("cb_fb_keys_only", check_count_bytes,
     lambda L, D, n, b: (2 * L * D * n * b, D * n * b), r"AND a value|key and (a|one) value|2 \* D")
case("sq_save_output_grad_2y", check_square, type("SqY", (SquareFromOutput,), {
    "backward": staticmethod(lambda ctx, g: 2 * ctx.saved_tensors[0] * g)}),
     r"save.*input|OUTPUT|save_for_backward\(x\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
