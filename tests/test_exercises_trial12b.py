"""Learner trial 12b (issue 28): notebooks 03, 04 and 05, new slips."""

import math

import torch

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

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100

# ---------------------------------------------------------------- 03 memory_vector


def mv_right(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


RIGHT["mv"] = (check_memory_vector, mv_right)


def mv_log_softmax(xs, w):  # grabbed log_softmax from autocomplete
    return (w.log_softmax(0)[:, None, None] * xs).sum(0)


def mv_sigmoid(xs, w):  # "weights between 0 and 1": sigmoid instead of softmax
    return (w.sigmoid()[:, None, None] * xs).sum(0)


def mv_mean_after(xs, w):  # weighted, then averaged over layers instead of summed
    return (w.softmax(0)[:, None, None] * xs).mean(0)


def mv_softmax_feature(xs, w):  # softmax over the features of the weighted mix
    return (w[:, None, None] * xs).sum(0).softmax(-1)


def mv_tensordot_dims(xs, w):  # einsum with the weights on the wrong letter
    return torch.einsum("l,lbd->bd", w.softmax(0), xs.flip(0))


case("mv_log_softmax", check_memory_vector, mv_log_softmax, r"log_softmax|log")
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"sigmoid|sum to (one|1)")
case("mv_mean_after", check_memory_vector, mv_mean_after, r"mean|L ?\+ ?1|divid")
case("mv_softmax_feature", check_memory_vector, mv_softmax_feature,
     r"softmax.*(feature|D|last|dim)|(feature|D).*softmax")
case("mv_flip", check_memory_vector, mv_tensordot_dims,
     r"revers|flip|order|xs\[0\]|embedding")

# ---------------------------------------------------------------- 03 relative_bias


def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]


RIGHT["rb"] = (check_relative_bias, rb_right)


def rb_modulo(table, s):  # wraps long distances around instead of clamping
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]


def rb_clamp_index_h(table, s):  # clamps to the number of heads (size(0))
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]


def rb_clamp_before_shift(table, s):  # shifts to column first, clamps to max_distance
    d = torch.arange(s, 0, -1) - 1
    return table[:, d.clamp(max=table.size(1))]


def rb_gather_rows(table, s):  # the right lookup, flipped "to put the newest first"
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1].flip(-1)


def rb_float_range(table, s):  # linspace for the distances, then .long()
    d = torch.linspace(s, 1, s).long().clamp(max=table.size(1))
    return table[:, d - 1]


case("rb_modulo", check_relative_bias, rb_modulo, r"clamp|wrap|modulo|%|last (column|bias)")
case("rb_clamp_heads", check_relative_bias, rb_clamp_index_h,
     r"clamp.*(max_distance|size\(1\)|width|H\b|heads)")
case("rb_clamp_after_shift", check_relative_bias, rb_clamp_before_shift,
     r"clamp.*(d ?- ?1|column|max_distance ?- ?1|shift|before)")
case("rb_flipped_order", check_relative_bias, rb_gather_rows,
     r"oldest|order|revers|flip")
RIGHT["rb_linspace"] = (check_relative_bias, rb_float_range)


def mv_inplace(xs, w):  # scales the caller's layers in place, then sums
    return xs.mul_(w.softmax(0)[:, None, None]).sum(0)


def mv_normalize(xs, w):  # "weights that sum to one": divide by their sum
    return ((w / w.sum())[:, None, None] * xs).sum(0)


def mv_float64(xs, w):  # softmax in double "for stability", result stays double
    return (w.softmax(0, dtype=torch.float64)[:, None, None] * xs).sum(0)


case("mv_inplace", check_memory_vector, mv_inplace, r"in place|mul_|chang(ed|es) .*xs")
case("mv_normalize", check_memory_vector, mv_normalize,
     r"w ?/ ?w\.sum|divid.*sum|not softmax|negative|nan")
case("mv_float64", check_memory_vector, mv_float64, r"float64|double|dtype")


def rb_table_slice(table, s):  # last s entries reversed: no clamp for s > max_distance
    return table[:, :s].flip(-1)


def rb_clamp_minus_one(table, s):  # clamps at max_distance - 1, then d - 1
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d - 1]


def rb_negative_index(table, s):  # "from the end": table[:, -d]
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, -d]


def rb_batched(table, s):  # adds a batch axis for the scores [B, H, S]
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1][None]


case("rb_slice_noclamp", check_relative_bias, rb_table_slice,
     r"clamp|max_distance|beyond|s ?> ?max")
case("rb_clamp_minus_one", check_relative_bias, rb_clamp_minus_one,
     r"max_distance ?- ?1|clamp.*(max_distance|last)|off by one")
case("rb_negative_index", check_relative_bias, rb_negative_index,
     r"-d|negative|from the end|d ?- ?1|column")
case("rb_batched", check_relative_bias, rb_batched, r"batch|\[H, s\]|extra|axis|\[1,")

# ---------------------------------------------------------------- 03 feedback_attention


def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


RIGHT["fa"] = (check_feedback_attention, fa_right)


def fa_zeros_like_v(q, k, v, bias):  # empty guard shaped like v, [B, H, 0, D_h]
    if k.size(2) == 0:
        return torch.zeros_like(v)
    return fa_right(q, k, v, bias)


def fa_return_q(q, k, v, bias):  # empty memory: "pass the query through"
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)


def fa_bias_before_scale(q, k, v, bias):  # adds the bias, then divides everything
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_sdpa(q, k, v, bias):  # PyTorch's fused attention, no guard
    out = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=bias[:, None])
    return out[:, :, 0]


def fa_bias_T(q, k, v, bias):  # bias written as [S, H] in the learner's head: .T
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    s = s + bias.T.reshape(bias.shape)
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_zeros_like_v", check_feedback_attention, fa_zeros_like_v,
     r"zeros_like\(v\)|like (the )?(query|q\b)|\[B, H, D_h\]")
case("fa_return_q", check_feedback_attention, fa_return_q, r"zero|return(ed)? (the )?q")
case("fa_bias_before_scale", check_feedback_attention, fa_bias_before_scale,
     r"bias.*(after|scal|divid|sqrt)|(scal|divid|sqrt).*bias")
RIGHT["fa_sdpa"] = (check_feedback_attention, fa_sdpa)  # torch's SDPA: zeros at S = 0
case("fa_bias_T", check_feedback_attention, fa_bias_T,
     r"bias.*(transpos|\[H, S\]|head|order|\.T)|(transpos|\.T).*bias")


def fa_bias_query_axis(q, k, v, bias):  # "a query axis" for the bias: [H, 1, S]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


case("fa_bias_query_axis", check_feedback_attention, fa_bias_query_axis,
     r"bias.*(\[H, 1, S\]|bias\[:, None\]|batch|B axis|broadcast)")

# ---------------------------------------------------------------- 03 token_loop


def tl_right(model, tokens):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            outs.append(h)
        tops.append(h)
        m = model.mix(torch.stack(outs))
        k_new, v_new = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
        values = [torch.cat([a, b], dim=2) for a, b in zip(values, v_new)]
    return model.head(torch.stack(tops, 1))


RIGHT["tl"] = (check_token_loop, tl_right)


def tl_generic(model, tokens, *, head_of=None, layer_in=None, keep=None, which=None):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            src = x[:, t] if layer_in == "embedding" else h
            j = which(i, len(model.layers)) if which else i
            h = layer(src, keys[j], values[j])
            outs.append(h)
        m = model.mix(torch.stack(outs))
        tops.append(m if head_of == "memory" else h)
        k_new, v_new = model.project_memory(m[:, None])
        if keep == "last":
            keys, values = list(k_new), list(v_new)
        else:
            keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
            values = [torch.cat([a, b], dim=2) for a, b in zip(values, v_new)]
    return model.head(torch.stack(tops, 1))


def tl_head_of_memory(model, tokens):  # predicts from the memory vector m_t
    return tl_generic(model, tokens, head_of="memory")


def tl_all_read_embedding(model, tokens):  # every layer fed x[:, t], not the one below
    return tl_generic(model, tokens, layer_in="embedding")


def tl_only_last(model, tokens):  # replaces the cache with the newest step's K/V
    return tl_generic(model, tokens, keep="last")


def tl_reversed_layers(model, tokens):  # layer i reads the keys of layer L-1-i
    return tl_generic(model, tokens, which=lambda i, n: n - 1 - i)


def tl_mix_tops_only(model, tokens):  # mixes the layers' outputs, embedding left out
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = []
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            outs.append(h)
        tops.append(h)
        m = model.mix(torch.stack([outs[0]] + outs))  # pads to L+1 with layer 1
        k_new, v_new = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
        values = [torch.cat([a, b], dim=2) for a, b in zip(values, v_new)]
    return model.head(torch.stack(tops, 1))


case("tl_head_of_memory", check_token_loop, tl_head_of_memory,
     r"memory vector.*head|head.*(memory|m_t|top)|top layer")
case("tl_all_read_embedding", check_token_loop, tl_all_read_embedding,
     r"not chained|fed the embedding|output of layer l ?- ?1")
case("tl_only_last", check_token_loop, tl_only_last,
     r"append|torch\.cat|only the (last|newest)|replac")
case("tl_reversed_layers", check_token_loop, tl_reversed_layers,
     r"(own|its|that) layer'?s? (keys|projection)|keys\[l\]|layer .*keys")
case("tl_mix_no_embedding", check_token_loop, tl_mix_tops_only,
     r"embedding.*mix|mix.*embedding|xs\[0\]|L ?\+ ?1")

# ---------------------------------------------------------------- 03 cache_bytes


def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)


RIGHT["cb"] = (check_cache_bytes, cb_right)


def cb_swapped(n_layers, d_model, n_tokens, bytes_per_number):  # (feedback, transformer)
    a, b = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return b, a


def cb_layers_plus_embedding(n_layers, d_model, n_tokens, bytes_per_number):  # L+1 layers
    return cb_right(n_layers + 1, d_model, n_tokens, bytes_per_number)


def cb_feedback_per_layer_memory(n_layers, d_model, n_tokens, bytes_per_number):
    # feedback: one key and one value, but "per layer" read as L memories of D
    t, _ = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return t, (2 + n_layers) * d_model * n_tokens * bytes_per_number


def cb_bits(n_layers, d_model, n_tokens, bytes_per_number):  # bits / 8 "to get bytes"
    t, f = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return t // 8, f // 8


def cb_ratio_float(n_layers, d_model, n_tokens, bytes_per_number):  # feedback as t / L
    t, _ = cb_right(n_layers, d_model, n_tokens, bytes_per_number)
    return t, t / n_layers


case("cb_swapped", check_cache_bytes, cb_swapped, r"swap|order|(transformer|feedback).* first")
case("cb_layers_plus_one", check_cache_bytes, cb_layers_plus_embedding,
     r"L ?\+ ?1|n_layers ?\+ ?1|embedding")
case("cb_memory_per_layer", check_cache_bytes, cb_feedback_per_layer_memory,
     r"memory|2 ?\+ ?L|\(L ?\+ ?2\)|only (the )?key")
case("cb_bits", check_cache_bytes, cb_bits, r"/ ?8|bits|already (in )?bytes|divid")
case("cb_float", check_cache_bytes, cb_ratio_float, r"float|int|/ ?n_layers|//")

# ---------------------------------------------------------------- 04 shared_kv


def sk_right(m, norm, kv, n_heads):
    b, d = m.shape
    out = kv(norm(m)).view(b, 2, n_heads, d // n_heads)
    return out[:, 0], out[:, 1]


RIGHT["sk"] = (check_shared_kv, sk_right)


def sk_norm_after(m, norm, kv, n_heads):  # projects, then normalizes each half
    b, d = m.shape
    k, v = kv(m).chunk(2, -1)
    return norm(k).view(b, n_heads, -1), norm(v).view(b, n_heads, -1)


def sk_interleaved(m, norm, kv, n_heads):  # heads first, then k|v inside each head
    b, d = m.shape
    return kv(norm(m)).view(b, n_heads, 2 * d // n_heads).chunk(2, -1)


def sk_head_minor(m, norm, kv, n_heads):  # [B, D_h, H] then transpose
    b, d = m.shape
    k, v = kv(norm(m)).chunk(2, -1)
    return (k.view(b, d // n_heads, n_heads).transpose(1, 2),
            v.view(b, d // n_heads, n_heads).transpose(1, 2))


def sk_swapped(m, norm, kv, n_heads):  # the first half taken as the values
    k, v = sk_right(m, norm, kv, n_heads)
    return v, k


def sk_no_bias(m, norm, kv, n_heads):  # only the weight matrix, as in the formula W^K LN(m)
    b, d = m.shape
    out = (norm(m) @ kv.weight.T).view(b, 2, n_heads, d // n_heads)
    return out[:, 0], out[:, 1]


case("sk_norm_after", check_shared_kv, sk_norm_after,
     r"(norm|LayerNorm).*(before|first)|(after|before) the projection|order")
case("sk_interleaved", check_shared_kv, sk_interleaved,
     r"interleav|\[B, 2, H, D_h\]|heads first|per head|k(eys)?/v(alues)? first")
case("sk_head_minor", check_shared_kv, sk_head_minor,
     r"head-major|contiguous|\[B, D_h, H\]|transpos|head.*(order|major)")
case("sk_swapped", check_shared_kv, sk_swapped, r"swap|first D.*key|keys first|revers")
case("sk_no_bias", check_shared_kv, sk_no_bias, r"bias")

# ---------------------------------------------------------------- 04 Square


class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 2 * x


RIGHT["sq"] = (check_square, SqRight)


class SqTupleNotUnpacked(SqRight):  # x = ctx.saved_tensors (no comma): x is a tuple
    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors
        return grad_output * 2 * x[0] if isinstance(x, list) else grad_output * 2 * x


class SqSaveOutput(torch.autograd.Function):  # saves y, then uses 2 * y as dy/dx
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return grad_output * 2 * y


class SqGradInplace(SqRight):  # multiplies the incoming gradient in place
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output.mul_(2 * x)


class SqMatmul(SqRight):  # the chain rule's "·" read as a matrix product
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output @ (2 * x)


class SqTwoGrads(SqRight):  # returns a gradient and a None "for ctx"
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 2 * x, None


case("sq_tuple", check_square, SqTupleNotUnpacked,
     r"saved_tensors.*tuple|tuple.*saved_tensors|x, = |unpack")
case("sq_save_output", check_square, SqSaveOutput, r"2 ?\* ?y|2 ?y|output|saved y|x, not y")
case("sq_grad_inplace", check_square, SqGradInplace, r"in place|grad_output|mul_")
case("sq_matmul", check_square, SqMatmul, r"@|matmul|matrix product|element")
RIGHT["sq_extra_none"] = (check_square, SqTwoGrads)  # autograd allows a trailing None


class SqXGrad(SqRight):  # reads x.grad as "the gradient coming in"
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return x.grad * 2 * x


class SqNoTwo(SqRight):  # d(x^2)/dx written as x
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * x


case("sq_x_grad", check_square, SqXGrad, r"x\.grad")
case("sq_no_two", check_square, SqNoTwo, r"2 ?\* ?x|factor (of )?2|twice|half")

# ---------------------------------------------------------------- 04 value_gradients


def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


RIGHT["vg"] = (check_value_gradients, vg_right)


def vg_own_read_only(read_grads):  # each value's gradient from its own step's read
    return torch.stack([g[-1] for g in read_grads])


def vg_last_rows(read_grads):  # adds read t into the LAST t+1 rows
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total


def vg_default_dtype(read_grads):  # torch.zeros(T, F): float32 whatever the input
    total = torch.zeros(len(read_grads), read_grads[-1].size(1))
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total


def vg_mean_reads(read_grads):  # averages over the reads that saw v_j
    total = vg_right(read_grads)
    T = len(read_grads)
    return total / torch.arange(T, 0, -1, dtype=total.dtype)[:, None]


def vg_last_read(read_grads):  # "the last read has all T slots": returns it alone
    return read_grads[-1].clone()


case("vg_own_read_only", check_value_gradients, vg_own_read_only,
     r"own (step|read)|every (later )?read|later reads|t ?>= ?j|only (the )?(last|own)")
case("vg_last_rows", check_value_gradients, vg_last_rows,
     r"FIRST|first t ?\+ ?1|slots? 0|last t ?\+ ?1|end")
case("vg_default_dtype", check_value_gradients, vg_default_dtype, r"dtype|float64|float32")
case("vg_mean", check_value_gradients, vg_mean_reads, r"mean|averag|sum")
case("vg_last_read", check_value_gradients, vg_last_read,
     r"last read|only read T|every read|read_grads\[-1\]")

# ---------------------------------------------------------------- 04 Append


class ApRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], None


RIGHT["ap"] = (check_append, ApRight)


class ApBatchAxis(ApRight):  # n = len(top): the batch axis, not time
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = len(top)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApValueKeepsAxis(ApRight):  # slices slot n as n:, value's gradient [B, 1, F]
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n:], None


class ApForgetsNone(ApRight):  # two gradients: "buffer is not a real input"
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n]


class ApLastSlotOfBuffer(ApRight):  # writes into the buffer's last slot, returns its tail
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, -1] = value
        ctx.n = n
        return buffer.data[:, -(n + 1):]


class ApGradNotSplit(ApRight):  # top gets the whole incoming gradient
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n] + 0 * grad[:, :n], grad[:, -1] + grad[:, :n].sum(1), None


case("ap_batch_axis", check_append, ApBatchAxis, r"len\(top\)|dim 1|batch|top\.size\(1\)")
case("ap_value_axis", check_append, ApValueKeepsAxis,
     r"\[B, 1, F\]|grad\[:, n\]|n:|value'?s? gradient.*shape|\[B, F\]")
case("ap_two_grads", check_append, ApForgetsNone, r"three|None.*buffer|buffer.*None|one per")
case("ap_last_slot", check_append, ApLastSlotOfBuffer,
     r"slot n|last slot|first n ?\+ ?1|buffer\[:, n\]|starting at slot")
case("ap_value_sums_reads", check_append, ApGradNotSplit,
     r"slot n|only|split|sum|value'?s? gradient")

# ---------------------------------------------------------------- 04 weight_gradient


def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)


RIGHT["wg"] = (check_weight_gradient, wg_right)


def wg_mismatched_rows(xs, gs):  # flattens gs batch-major, xs step-major
    return gs.transpose(0, 1).reshape(-1, gs.size(-1)).T @ xs.reshape(-1, xs.size(-1))


def wg_last_step(xs, gs):  # only the last step's outer product
    return gs[-1].T @ xs[-1]


def wg_mean_steps(xs, gs):  # mean over the steps of the per-step products
    return (gs.transpose(1, 2) @ xs).mean(0)


def wg_einsum_diag(xs, gs):  # einsum with one letter for steps and batch
    return torch.einsum("tti,tto->oi", xs, gs) if xs.size(0) == xs.size(1) else \
        torch.einsum("tbi,tbo->oi", xs[:, :1], gs[:, :1])


case("wg_mismatched_rows", check_weight_gradient, wg_mismatched_rows,
     r"same way|rows?.*(t, b)|pair|transpos|order")
case("wg_last_step", check_weight_gradient, wg_last_step, r"last step|every step|sum over")
case("wg_mean_steps", check_weight_gradient, wg_mean_steps, r"mean|T times|averag|sum")
case("wg_first_seq", check_weight_gradient, wg_einsum_diag,
     r"batch|first sequence|every sequence|B times|b ?= ?0")

# ---------------------------------------------------------------- 05 reach


def re_right(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return math.inf


RIGHT["re"] = (check_reach, re_right)


def re_lowercase_xl(memory, n_layers, span, position=0):  # compares with "xl"
    if memory == "window":
        return n_layers * span
    if memory == "xl":
        return n_layers * span + position
    return math.inf


def re_xl_position_per_layer(memory, n_layers, span, position=0):  # L * (M + i)
    if memory == "XL":
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)


def re_xl_last_position(memory, n_layers, span, position=0):  # always the segment's end
    if memory == "XL":
        return n_layers * span + span - 1
    return re_right(memory, n_layers, span, position)


def re_feedback_like_window(memory, n_layers, span, position=0):  # L·W for feedback too
    if memory in ("window", "feedback"):
        return n_layers * span
    return re_right(memory, n_layers, span, position)


def re_window_one_layer_itself(memory, n_layers, span, position=0):  # (L - 1)·W + W + 1?
    if memory == "window":
        return n_layers * span + n_layers  # "itself" counted once per layer
    return re_right(memory, n_layers, span, position)


case("re_lowercase_xl", check_reach, re_lowercase_xl, r"\"XL\"|'XL'|spell|case|lower")
case("re_xl_position_per_layer", check_reach, re_xl_position_per_layer,
     r"once|per layer|L ?\* ?\(M ?\+|position.*(layer|once)")
case("re_xl_last_position", check_reach, re_xl_last_position,
     r"position|T_s ?- ?1|segment'?s? (end|last)|ignor")
case("re_feedback_window", check_reach, re_feedback_like_window,
     r"inf|unbounded|feedback")
case("re_window_itself", check_reach, re_window_one_layer_itself,
     r"itself|\+ ?L|L ?\* ?\(W ?\+ ?1\)|W ?\+ ?1|does not count")

# ---------------------------------------------------------------- 05 make_recall


def mr_right(filler, values, positions):
    x = filler.clone()
    rows = torch.arange(len(x), device=filler.device)
    x[rows, positions] = values
    after = torch.arange(x.size(1), device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(x, IGNORE))
    return x, y


RIGHT["mr"] = (check_make_recall, mr_right)


def mr_column_index(filler, values, positions):  # x[:, positions] = values
    x = filler.clone()
    x[:, positions] = values
    _, y = mr_right(filler, values, positions)
    return x, y


def mr_zero_means_ignore(filler, values, positions):  # mask * value, then 0 -> IGNORE
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(x.size(1), device=filler.device)[None, :] > positions[:, None]
    y = after.long() * values[:, None]
    y[y == 0] = IGNORE
    return x, y


def mr_labels_from_x(filler, values, positions):  # labels copy x's token at each step
    x, y = mr_right(filler, values, positions)
    return x, torch.where(y != IGNORE, x, y)


def mr_no_column_axis(filler, values, positions):  # positions without [:, None]
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(x.size(1), device=filler.device) > positions
    return x, torch.where(after, values, IGNORE)


def mr_next_token(filler, values, positions):  # label = the next token (LM habit)
    x, _ = mr_right(filler, values, positions)
    y = torch.full_like(x, IGNORE)
    y[:, :-1] = x[:, 1:]
    return x, y


case("mr_column_index", check_make_recall, mr_column_index,
     r"x\[:, positions\]|every row|column|one entry per row|arange")
case("mr_zero_means_ignore", check_make_recall, mr_zero_means_ignore,
     r"value 0|values\[\d\] = 0|== ?0|zero")
case("mr_labels_from_x", check_make_recall, mr_labels_from_x,
     r"filler|x\b.*label|label.*(value|x\b)")
case("mr_no_column_axis", check_make_recall, mr_no_column_axis,
     r"\[:, None\]|column of positions|positions\[:, None\]")
case("mr_next_token", check_make_recall, mr_next_token,
     r"next token|shift|x\[:, 1:\]|language model")

# ---------------------------------------------------------------- 05 accuracy_by_distance


def ad_right(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


RIGHT["ad"] = (check_accuracy_by_distance, ad_right)


def ad_with_d(d_of):
    def fn(logits, y, max_distance):
        labelled = y != IGNORE
        d = d_of(y, labelled)
        hit = (logits.argmax(-1) == y) & labelled
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = labelled & (d == k)
            if at.any():
                out[k - 1] = hit[at].float().mean()
        return out
    return fn


T_IDX = lambda y: torch.arange(y.size(1))[None, :]  # noqa: E731
# p taken as the first labelled position (it is p + 1): every distance one short
ad_first_is_p = ad_with_d(lambda y, lab: T_IDX(y) - lab.long().argmax(1, keepdim=True))
# p taken as the number of IGNORE entries in the row (that is p + 1)
ad_count_ignore = ad_with_d(lambda y, lab: T_IDX(y) - (~lab).sum(1, keepdim=True))
# labelled found as y > 0: value 0 rows drop out
ad_positive = ad_with_d(lambda y, lab: (y > 0).long().cumsum(1))


def ad_hits_all_positions(logits, y, max_distance):  # counts every position at d, labelled or not
    labelled = y != IGNORE
    d = labelled.long().cumsum(1)
    hit = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = d == k
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_argmax_probs_dim1(logits, y, max_distance):  # softmax then argmax(1): over time
    return ad_right(logits.softmax(1), y, max_distance)


case("ad_first_is_p", check_accuracy_by_distance, ad_first_is_p,
     r"p ?\+ ?1|one (short|off)|off by one|first labelled")
case("ad_count_ignore", check_accuracy_by_distance, ad_count_ignore,
     r"p ?\+ ?1|one (short|off)|off by one|IGNORE entries|count")
case("ad_positive", check_accuracy_by_distance, ad_positive,
     r"y ?> ?0|value 0|!= ?IGNORE|zero")
RIGHT["ad_all_positions"] = (check_accuracy_by_distance, ad_hits_all_positions)  # d = 0 there


def ad_by_position(logits, y, max_distance):  # accuracy per column t, read as d = t
    labelled = y != IGNORE
    hit = ((logits.argmax(-1) == y) & labelled).sum(0).float()
    count = labelled.sum(0).float()
    acc = hit / count  # NaN where no row is labelled
    out = torch.full((max_distance,), float("nan"))
    n = min(max_distance, acc.numel() - 1)
    out[:n] = acc[1:n + 1]
    return out


case("ad_by_position", check_accuracy_by_distance, ad_by_position,
     r"position t|column|p ?= ?0|absolute|t ?- ?p|not the distance")
RIGHT["ad_softmax"] = (check_accuracy_by_distance,
                       lambda lg, y, m: ad_right(lg.softmax(-1), y, m))

# ---------------------------------------------------------------- 05 cache_bytes


def cz_right(cache):
    if isinstance(cache, list):
        return sum(k.nbytes + v.nbytes for k, v in cache)
    if hasattr(cache, "mem_len"):
        return sum(k.nbytes + v.nbytes for k, v in (tuple(b) for b in cache.kv))
    return cache.kv.nbytes


RIGHT["cz"] = (check_cache_bytes_05, cz_right)


def cz_with_rel_keys(cache):  # "everything the XL cache holds": relative keys too
    total = cz_right(cache)
    if hasattr(cache, "rel_keys") and cache.rel_keys is not None:
        total += sum(t.nbytes for t in cache.rel_keys if t is not None)
    return total


def cz_first_layer(cache):  # "one in all": only cache[0] of the transformer
    if isinstance(cache, list):
        k, v = cache[0]
        return k.nbytes + v.nbytes
    return cz_right(cache)


def cz_first_sequence(cache):  # per sequence: batch element 0
    if isinstance(cache, list):
        return sum(k[0].nbytes + v[0].nbytes for k, v in cache)
    if hasattr(cache, "mem_len"):
        return sum(k[0].nbytes + v[0].nbytes for k, v in (tuple(b) for b in cache.kv))
    return cache.kv[:, 0].nbytes


def cz_kvstate_half(cache):  # KVState.kv read as the keys only: doubled
    if not isinstance(cache, list) and not hasattr(cache, "mem_len"):
        return 2 * cache.kv.nbytes
    return cz_right(cache)


def cz_nbytes_element(cache):  # element_size() alone, per tensor, not times numel
    if isinstance(cache, list):
        return sum(k.element_size() + v.element_size() for k, v in cache)
    return cz_right(cache)


case("cz_rel_keys", check_cache_bytes_05, cz_with_rel_keys,
     r"rel_keys|relative")
case("cz_first_layer", check_cache_bytes_05, cz_first_layer,
     r"first layer|every layer|cache\[0\]|one layer|all layers")
case("cz_first_sequence", check_cache_bytes_05, cz_first_sequence,
     r"batch|sequence|B\b|\[0\]")
case("cz_kvstate_double", check_cache_bytes_05, cz_kvstate_half,
     r"kv.*(both|keys (and|then) values|already)|twice|doubl|\[2,")
case("cz_element_size", check_cache_bytes_05, cz_nbytes_element,
     r"element_size|numel|nbytes")


# ---------------------------------------------------------------- second round, all exercises


def mv_softmax_of_product(xs, w):  # softmax of the weighted layers, over the layers
    return (w[:, None, None] * xs).softmax(0).sum(0)


case("mv_softmax_of_product", check_memory_vector, mv_softmax_of_product,
     r"softmax of w ?\* ?xs|softmax turns w alone")


def rb_distance_from_zero(table, s):  # distances s-1 .. 0, then column d - 1
    d = torch.arange(s - 1, -1, -1).clamp(max=table.size(1))
    return table[:, d - 1]


case("rb_distance_from_zero", check_relative_bias, rb_distance_from_zero,
     r"s, s ?- ?1|from s down to 1|one (short|off)|off by one|distance 0|wrap")


def fa_no_squeeze(q, k, v, bias):  # matmul with a query axis, never squeezed
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = q[:, :, None] @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + bias[:, None]
    return s.softmax(-1) @ v


def fa_guard_float32(q, k, v, bias):  # empty guard with torch.zeros(q.shape)
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    return fa_right(q, k, v, bias)


def fa_scale_by_keys(q, k, v, bias):  # sqrt of S, the number of keys
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(k.size(2)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_scores_with_v(q, k, v, bias):  # typo: scores against v
    return fa_right(q, v, v, bias)


case("fa_no_squeeze", check_feedback_attention, fa_no_squeeze,
     r"squeeze|query axis|\[B, H, 1, D_h\]|extra axis")
case("fa_guard_float32", check_feedback_attention, fa_guard_float32,
     r"dtype|float32|zeros_like")
case("fa_scale_by_keys", check_feedback_attention, fa_scale_by_keys,
     r"sqrt\(S\)|number of keys|S\b.*d_h|D_h|head width")
case("fa_scores_with_v", check_feedback_attention, fa_scores_with_v,
     r"\bv\b.*(score|key)|(score|key).*\bv\b|q ?· ?v|values as keys")


def tl_variant(stack_dim=1, cat_dim=2, start=0, mix_dim=0):
    def fn(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :start])
        keys, values = list(keys), list(values)
        tops = []
        for t in range(tokens.size(1)):
            h = x[:, t]
            outs = [h]
            for i, layer in enumerate(model.layers):
                h = layer(h, keys[i], values[i])
                outs.append(h)
            tops.append(h)
            m = model.mix(torch.stack(outs, mix_dim))
            k_new, v_new = model.project_memory(m[:, None])
            keys = [torch.cat([a, b], dim=cat_dim) for a, b in zip(keys, k_new)]
            values = [torch.cat([a, b], dim=cat_dim) for a, b in zip(values, v_new)]
        return model.head(torch.stack(tops, stack_dim))
    return fn


case("tl_stack_dim0", check_token_loop, tl_variant(stack_dim=0),
     r"dim ?=? ?1|\[T, B|time (axis|first)|stack.*(dim|axis)")
case("tl_cat_dim1", check_token_loop, tl_variant(cat_dim=1),
     r"dim ?=? ?2|key axis|head")
case("tl_start_first_token", check_token_loop, tl_variant(start=1),
     r"x\[:, :0\]|start(s)? from an? empty|non-empty|not empty|initial memory")
case("tl_mix_batch_first", check_token_loop, tl_variant(mix_dim=1),
     r"\[L ?\+ ?1, B, D\]|dim ?=? ?0|layer axis|stack.*(dim|axis)")


def cb_no_value(n_layers, d_model, n_tokens, bytes_per_number):  # keys only per layer
    return (n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)


def cb_numpy(n_layers, d_model, n_tokens, bytes_per_number):  # np.prod gives np.int64
    import numpy as np
    return (np.prod([2, n_layers, d_model, n_tokens, bytes_per_number]),
            np.prod([2, d_model, n_tokens, bytes_per_number]))


def cb_feedback_no_bytes(n_layers, d_model, n_tokens, bytes_per_number):  # forgot * bytes
    return (2 * n_layers * d_model * n_tokens * bytes_per_number, 2 * d_model * n_tokens)


RIGHT["cb_numpy"] = (check_cache_bytes, cb_numpy)  # stop 41: whole numbers of bytes too
case("cb_no_value", check_cache_bytes, cb_no_value, r"value|2 ?L ?D|half|key and a value")
case("cb_feedback_no_bytes", check_cache_bytes, cb_feedback_no_bytes,
     r"bytes_per_number|bytes per number|numbers?, not bytes|times \d")


def sk_batch_first_view(m, norm, kv, n_heads):  # view(2, B, H, D_h) then unpack
    b, d = m.shape
    k, v = kv(norm(m)).view(2, b, n_heads, d // n_heads)
    return k, v


def sk_weight_no_T(m, norm, kv, n_heads):  # by hand: x @ W[:D] + b[:D], no transpose
    b, d = m.shape
    x = norm(m)
    k = x @ kv.weight[:d] + kv.bias[:d]
    v = x @ kv.weight[d:] + kv.bias[d:]
    return k.view(b, n_heads, -1), v.view(b, n_heads, -1)


case("sk_batch_first_view", check_shared_kv, sk_batch_first_view,
     r"\[2, B|batch|\[B, 2, H, D_h\]")
case("sk_weight_no_T", check_shared_kv, sk_weight_no_T,
     r"\.T|transpos|weight\.T|F\.linear|kv\(")


class SqTupleOut(SqRight):  # forward returns a one-element tuple
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x,)


class SqSaveDerivative(SqRight):  # saves dy/dx = 2x in forward
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(2 * x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        dydx, = ctx.saved_tensors
        return grad_output * dydx


case("sq_tuple_out", check_square, SqTupleOut, r"tuple|return (a |the )?tensor")
case("sq_save_derivative", check_square, SqSaveDerivative,  # trial 48b: a scaled copy
     r"copy of x \(ctx\.save_for_backward\(2 \* x\)\)")


def vg_pad_wrong_axis(read_grads):  # F.pad's last pair pads the LAST axis (F)
    T = len(read_grads)
    return torch.stack([torch.nn.functional.pad(g, (0, T - 1 - t))
                        for t, g in enumerate(read_grads)]).sum(0)


def vg_plain_sum(read_grads):  # sum() of the reads: shapes differ
    return sum(read_grads)


def vg_assign(read_grads):  # = instead of +=
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] = g
    return total


case("vg_pad_wrong_axis", check_value_gradients, vg_pad_wrong_axis,
     r"pad.*(last|F|axis|\(0, 0,)|rows|time")
case("vg_plain_sum", check_value_gradients, vg_plain_sum,
     r"sum\(read_grads\)|shapes? differ|\[t ?\+ ?1, F\]|first t ?\+ ?1 rows|pad")
case("vg_assign", check_value_gradients, vg_assign, r"\+=|overwr|add|last read")


class ApWriteBatchAxis(ApRight):  # buffer.data[n] = value: the batch axis
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]


class ApNoData(ApRight):  # writes and returns through buffer, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]


case("ap_write_batch_axis", check_append, ApWriteBatchAxis,
     r"buffer(\.data)?\[:, n\]|batch|dim 1|slot n")
case("ap_no_data", check_append, ApNoData, r"\.data|version|view")


def wg_sum_first(xs, gs):  # sums over steps first, then one product
    return gs.sum(0).T @ xs.sum(0)


def wg_no_sum_steps(xs, gs):  # per-step products, never summed
    return gs.mT @ xs


def wg_view(xs, gs):  # view instead of flatten/reshape
    return gs.view(-1, gs.size(-1)).T @ xs.view(-1, xs.size(-1))


case("wg_sum_first", check_weight_gradient, wg_sum_first,
     r"sum(med)? (over the steps )?(first|before)|before the product|cross|order")
case("wg_no_sum_steps", check_weight_gradient, wg_no_sum_steps,
     r"\[T, D_out, D_in\]|sum over|per step|steps? (axis|not summed)")
RIGHT["wg_view"] = (check_weight_gradient, wg_view)  # right while xs, gs are contiguous


def re_window_plus_one(memory, n_layers, span, position=0):  # notebook 03's L·W + 1
    if memory == "window":
        return n_layers * span + 1
    return re_right(memory, n_layers, span, position)


def re_xl_no_position(memory, n_layers, span, position=0):  # position left out
    if memory == "XL":
        return n_layers * span
    return re_right(memory, n_layers, span, position)


def re_window_plus_position(memory, n_layers, span, position=0):  # copy-pasted XL line
    if memory == "window":
        return n_layers * span + position
    return re_right(memory, n_layers, span, position)


case("re_window_plus_one", check_reach, re_window_plus_one,
     r"\+ ?1|itself|tokens back|L ?· ?W")
case("re_xl_no_position", check_reach, re_xl_no_position, r"position")
case("re_window_plus_position", check_reach, re_window_plus_position,
     r"position.*(window|no segment)|window.*position")


def mr_float_labels(filler, values, positions):  # torch.full(..., -100.): float labels
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(x.size(1), device=filler.device)[None, :] > positions[:, None]
    y = torch.full(x.shape, -100.)
    y[after] = values[:, None].expand_as(y)[after].float()
    return x, y


case("mr_float_labels", check_make_recall, mr_float_labels, r"dtype|float|long|int64")


def ad_ignore_minus_one(logits, y, max_distance):  # IGNORE taken as -1
    labelled = y != -1
    d = labelled.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().mean()
    return out


def ad_float64(logits, y, max_distance):
    return ad_right(logits, y, max_distance).double()


case("ad_ignore_minus_one", check_accuracy_by_distance, ad_ignore_minus_one,
     r"-100|IGNORE|unlabelled|-1\b")
case("ad_float64", check_accuracy_by_distance, ad_float64, r"dtype|float64|float32")


def cz_iter_tuples(cache):  # t.nbytes for every entry: the entries are (k, v) tuples
    if isinstance(cache, list):
        return sum(t.nbytes for t in cache)
    return cz_right(cache)


def cz_method_not_called(cache):  # KVState.nbytes is a method: not called
    if not isinstance(cache, list) and not hasattr(cache, "mem_len"):
        return cache.nbytes
    return cz_right(cache)


case("cz_iter_tuples", check_cache_bytes_05, cz_iter_tuples,
     r"tuple|\(k, v\)|k, v|pair")
case("cz_method_not_called", check_cache_bytes_05, cz_method_not_called,
     r"nbytes\(\)|method|call")


# ---------------------------------------------------------------- third round


def mv_matmul_permuted(xs, w):  # xs.permute(2, 1, 0) @ weights: [D, B]
    return xs.permute(2, 1, 0) @ w.softmax(0)


case("mv_matmul_permuted", check_memory_vector, mv_matmul_permuted,
     r"\[D, B\]|transpos|permute|\[B, D\]")


def rb_no_minus_one(table, s):  # clamps at max_distance - 1, indexes with d
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]


case("rb_no_minus_one", check_relative_bias, rb_no_minus_one,
     r"d ?- ?1|entry 0|column d ?- ?1|one (slot|entry|column) (off|late)|off by one")


def fa_causal_habit(q, k, v, bias):  # a causal mask from notebook 02, [1, S] tril
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    mask = torch.ones(1, k.size(2)).tril() == 0
    s = s.masked_fill(mask, float("-inf"))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def fa_matmul_no_unsqueeze(q, k, v, bias):  # q @ k^T without a query axis
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1)) + bias
    return (s.softmax(-1) @ v).squeeze(2)


case("fa_causal_habit", check_feedback_attention, fa_causal_habit,
     r"mask|only (the )?(first|oldest) key|every (memory )?key")
case("fa_matmul_no_unsqueeze", check_feedback_attention, fa_matmul_no_unsqueeze,
     r"q\[:, :, None\]|unsqueeze|query axis|einsum|one query")


def tl_detach_memory(model, tokens):  # detaches each memory vector ("block_len")
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            outs.append(h)
        tops.append(h)
        m = model.mix(torch.stack(outs)).detach()
        k_new, v_new = model.project_memory(m[:, None])
        keys = [torch.cat([a, b], dim=2) for a, b in zip(keys, k_new)]
        values = [torch.cat([a, b], dim=2) for a, b in zip(values, v_new)]
    return model.head(torch.stack(tops, 1))


case("tl_detach_memory", check_token_loop, tl_detach_memory,
     r"detach|gradient")


def sk_chunk_no_dim(m, norm, kv, n_heads):  # torch.chunk(..., 2): dim 0 by default
    b, d = m.shape
    k, v = torch.chunk(kv(norm(m)), 2)
    return k.reshape(-1, n_heads, d // n_heads), v.reshape(-1, n_heads, d // n_heads)


case("sk_chunk_no_dim", check_shared_kv, sk_chunk_no_dim, r"dim|batch|chunk")


def vg_sum_slots(read_grads):  # sums each read over its slots: one row per step
    return torch.stack([g.sum(0) for g in read_grads])


def vg_strictly_later(read_grads):  # reads t > j only, own read left out
    T = len(read_grads)
    rows = []
    for j in range(T):
        acc = torch.zeros_like(read_grads[-1][0])
        for t in range(j + 1, T):
            acc = acc + read_grads[t][j]
        rows.append(acc)
    return torch.stack(rows)


case("vg_sum_slots", check_value_gradients, vg_sum_slots,
     r"slots?|row j|over the (slots|rows)|per step|step'?s? read")
case("vg_strictly_later", check_value_gradients, vg_strictly_later,
     r"own (step|read)|t ?>= ?j|t ?= ?j|its own")


class ApCat(ApRight):  # torch.cat, the buffer never written
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)


class ApClone(ApRight):  # a copy of the prefix
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1].clone()


case("ap_cat", check_append, ApCat, r"buffer|cat|copy|view")
case("ap_clone", check_append, ApClone, r"clone|copy|view")


def wg_outer_rows(xs, gs):  # G X^T: [T·B, T·B]
    return gs.flatten(0, 1) @ xs.flatten(0, 1).T


case("wg_rows_product", check_weight_gradient, wg_outer_rows,
     r"\[T·B, T·B\]|G\^T X|transpos|\.T")


def re_feedback_maxsize(memory, n_layers, span, position=0):  # "unbounded" as a big int
    import sys
    if memory == "feedback":
        return sys.maxsize
    return re_right(memory, n_layers, span, position)


case("re_feedback_maxsize", check_reach, re_feedback_maxsize, r"math\.inf|inf")


def mr_zero_default(filler, values, positions):  # labels start as zeros, not IGNORE
    x, _ = mr_right(filler, values, positions)
    after = torch.arange(x.size(1), device=filler.device)[None, :] > positions[:, None]
    y = torch.zeros_like(x)
    y[after] = values[:, None].expand_as(y)[after]
    return x, y


def mr_scatter_1d(filler, values, positions):  # scatter with 1-D indices
    x = filler.clone().scatter(1, positions, values)
    _, y = mr_right(filler, values, positions)
    return x, y


case("mr_zero_default", check_make_recall, mr_zero_default, r"IGNORE|-100|0\b.*elsewhere")
case("mr_scatter_1d", check_make_recall, mr_scatter_1d,
     r"\[:, None\]|2-D index|\[N, 1\]")


def ad_divide_by_rows(logits, y, max_distance):  # hits at d / N, not / positions at d
    labelled = y != IGNORE
    d = labelled.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & labelled
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        at = labelled & (d == k)
        if at.any():
            out[k - 1] = hit[at].float().sum() / y.size(0)
    return out


case("ad_divide_by_rows", check_accuracy_by_distance, ad_divide_by_rows,
     r"N\b|rows|positions at d|number of (labelled )?positions|divid")


def cz_generic_unpack(cache):  # one loop for all: for k, v in getattr(cache, "kv", cache)
    return sum(k.nbytes + v.nbytes for k, v in getattr(cache, "kv", cache))


case("cz_generic_unpack", check_cache_bytes_05, cz_generic_unpack,
     r"KVState|kv\[0\]|\[2, B|kv holds")


# ---------------------------------------------------------------- fourth round


def tl_loop(model, tokens, order="append", recompute=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops, ms = [], []
    for t in range(tokens.size(1)):
        h = x[:, t]
        outs = [h]
        for i, layer in enumerate(model.layers):
            h = layer(h, keys[i], values[i])
            outs.append(h)
        tops.append(h)
        m = model.mix(torch.stack(outs))
        ms.append(m)
        if recompute:  # project the whole memory again at every step
            keys, values = map(list, model.project_memory(torch.stack(ms, 1)))
            continue
        k_new, v_new = model.project_memory(m[:, None])
        pair = (lambda a, b: (b, a)) if order == "prepend" else (lambda a, b: (a, b))
        keys = [torch.cat(pair(a, b), dim=2) for a, b in zip(keys, k_new)]
        values = [torch.cat(pair(a, b), dim=2) for a, b in zip(values, v_new)]
    return model.head(torch.stack(tops, 1))


RIGHT["tl_recompute"] = (check_token_loop, lambda mo, tk: tl_loop(mo, tk, recompute=True))
case("tl_prepend", check_token_loop, lambda mo, tk: tl_loop(mo, tk, order="prepend"),
     r"oldest first|newest (first|last)|\[old, new\]|prepend|order")


class ApNFromGrad(ApRight):  # backward re-derives n from grad: n + 1
    @staticmethod
    def backward(ctx, grad):
        n = grad.size(1)
        return grad[:, :n], grad[:, n - 1], None


case("ap_n_from_grad", check_append, ApNFromGrad,
     r"grad\.size\(1\)|n ?\+ ?1|grad\[:, :n\]|first n slots|top'?s? gradient")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
