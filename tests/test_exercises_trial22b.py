"""Learner trial 22, worktree b: notebooks 03, 04 and 05 (issue 28)."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from labnn.exercises.feedback_transformer.token_loop import (
    check_cache_bytes as check_cache_bytes_03)
from labnn.exercises.feedback_transformer.token_loop import check_token_loop

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)  # case(tag, check, fns, pattern, xfail="<class>: <one line>")


# ======== notebook 03
# ---- memory_vector
def mv_right(xs, w):
    return (w.softmax(dim=0)[:, None, None] * xs).sum(0)

def mv_no_embedding(xs, w):  # mixes layers 1..L only
    return (w[1:].softmax(dim=0)[:, None, None] * xs[1:]).sum(0)

def mv_sigmoid(xs, w):  # sigmoid gates instead of softmax
    return (w.sigmoid()[:, None, None] * xs).sum(0)

def mv_mean(xs, w):  # mean over the layers instead of the weighted sum
    return (w.softmax(dim=0)[:, None, None] * xs).mean(0)

def mv_inplace(xs, w):  # scales the caller's xs in place
    xs *= w.softmax(dim=0)[:, None, None]
    return xs.sum(0)

# ---- relative_bias
def rb_right(table, s):
    d = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, d - 1]

def rb_newest_first(table, s):  # distances 1..s: newest key first
    d = torch.arange(1, s + 1).clamp(max=table.size(1))
    return table[:, d - 1]

def rb_column_d(table, s):  # column d instead of d - 1 (clamped to stay in range)
    d = torch.arange(s, 0, -1).clamp(max=table.size(1) - 1)
    return table[:, d]

def rb_wrap(table, s):  # far distances wrap around the table instead of sharing the last
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1) % table.size(1)]

# ---- feedback_attention
def fa_right(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)

def fa_bias_after_softmax(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1) + bias, v)

def fa_div_dh(q, k, v, bias):  # divides by D_h, not its square root
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)

def fa_empty_float32(q, k, v, bias):  # zeros without the query's dtype
    if k.size(2) == 0:
        return torch.zeros(q.shape)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)

# ---- token_loop
def _loop(model, tokens, memory_of=None, prepend=False, head_on_memory=False):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    keys, values = list(keys), list(values)
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs)) if memory_of is None else memory_of(outs)
        tops.append(m if head_on_memory else outs[-1])
        nk, nv = model.project_memory(m[:, None])
        if prepend:
            keys = [torch.cat([n, o], 2) for o, n in zip(keys, nk)]
            values = [torch.cat([n, o], 2) for o, n in zip(values, nv)]
        else:
            keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
            values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))

def tl_right(model, tokens):
    return _loop(model, tokens)

def tl_top_as_memory(model, tokens):  # memory = top layer only, no mix
    return _loop(model, tokens, memory_of=lambda outs: outs[-1])

def tl_newest_first(model, tokens):  # new keys/values prepended: newest first
    return _loop(model, tokens, prepend=True)

def tl_head_on_memory(model, tokens):  # predicts from the memory vector, not the top
    return _loop(model, tokens, head_on_memory=True)

# ---- cache_bytes
def cb_right(n_layers, d_model, n_tokens, bytes_per_number):
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)

def cb_keys_only(n_layers, d_model, n_tokens, bytes_per_number):  # no values
    return (n_layers * d_model * n_tokens * bytes_per_number,
            d_model * n_tokens * bytes_per_number)

def cb_with_memory(n_layers, d_model, n_tokens, bytes_per_number):  # 3D: memory counted
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            3 * d_model * n_tokens * bytes_per_number)

def cb_per_token(n_layers, d_model, n_tokens, bytes_per_number):  # feedback: per token
    return (2 * n_layers * d_model * n_tokens * bytes_per_number,
            2 * d_model * bytes_per_number)

# ======== notebook 04
# ---- shared_kv
def sk_right(m, norm, kv, n_heads):
    y = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]

def sk_heads_first(m, norm, kv, n_heads):  # [B, H, 2, D_h]: k/v interleaved per head
    y = kv(norm(m)).view(m.size(0), n_heads, 2, -1)
    return y[:, :, 0], y[:, :, 1]

def sk_no_norm(m, norm, kv, n_heads):  # projects m without the LayerNorm
    y = kv(m).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]

def sk_no_bias(m, norm, kv, n_heads):  # the weight alone, bias dropped
    y = F.linear(norm(m), kv.weight).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]

def sk_dh_major(m, norm, kv, n_heads):  # each half viewed [D_h, H] then transposed
    y = kv(norm(m))
    k, v = y.chunk(2, dim=-1)
    b = m.size(0)
    return (k.view(b, -1, n_heads).transpose(1, 2), v.view(b, -1, n_heads).transpose(1, 2))

# ---- Square
class SqRight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x

class SqNoChain(torch.autograd.Function):  # forgets grad_output: returns dy/dx only
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x

class SqFromOutput(torch.autograd.Function):  # saves y and recovers x = sqrt(y): sign lost
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * 2 * y.sqrt()

class SqNoTwo(torch.autograd.Function):  # derivative x instead of 2x
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x

# ---- value_gradients
def vg_right(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    return total

def vg_into_input(read_grads):  # accumulates into the last read's tensor
    total = read_grads[-1]
    for t, g in enumerate(read_grads[:-1]):
        total[: t + 1] += g
    return total

def vg_right_aligned(read_grads):  # adds each read into the LAST t+1 rows
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[total.size(0) - t - 1:] += g
    return total

def vg_mean(read_grads):  # averages over the reads of each value
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[: t + 1] += g
    n = len(read_grads)
    counts = torch.arange(n, 0, -1, dtype=total.dtype)[:, None]
    return total / counts

# ---- Append
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

class ApNoData(torch.autograd.Function):  # view of buffer itself, not buffer.data
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n] = value
        ctx.n = n
        return buffer[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], None

class ApFirstSlot(torch.autograd.Function):  # value's gradient from slot 0, top from 1..n
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None

class ApBatchAxis(torch.autograd.Function):  # n read from the batch axis of top
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(0)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]

    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n], None

# ---- weight_gradient
def wg_right(xs, gs):
    return gs.flatten(0, 1).T @ xs.flatten(0, 1)

def wg_mean(xs, gs):  # averages the outer products instead of summing
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1))

def wg_misaligned(xs, gs):  # rows of G in (b, t) order, rows of X in (t, b)
    return gs.transpose(0, 1).flatten(0, 1).T @ xs.flatten(0, 1)

def wg_sum_first(xs, gs):  # sums over the batch before the product
    return gs.sum(1).T @ xs.sum(1)

# ======== notebook 05
# ---- reach
def re_right(memory, n_layers, span, position=0):
    if memory == "feedback":
        return math.inf
    if memory == "XL":
        return n_layers * span + position
    return n_layers * span

def re_counts_self(memory, n_layers, span, position=0):  # window: L*W + 1
    if memory == "window":
        return n_layers * span + 1
    return re_right(memory, n_layers, span, position)

def re_position_per_layer(memory, n_layers, span, position=0):  # XL: L*(M + i)
    if memory == "XL":
        return n_layers * (span + position)
    return re_right(memory, n_layers, span, position)

def re_feedback_span(memory, n_layers, span, position=0):  # feedback: only its W vectors
    if memory == "feedback":
        return span
    return re_right(memory, n_layers, span, position)

def re_xl_segment(memory, n_layers, span, position=0):  # XL: L*M + T_s - 1 for every i
    if memory == "XL":
        return n_layers * span + span - 1
    return re_right(memory, n_layers, span, position)

# ---- make_recall
def mr_right(filler, values, positions):
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y

def mr_label_at_p(filler, values, positions):  # labels from p itself, not p + 1
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] >= positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y

def mr_column_index(filler, values, positions):  # x[:, positions] = values
    n, t = filler.shape
    x = filler.clone()
    x[:, positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y

def mr_float_labels(filler, values, positions):  # labels built as a float tensor
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    y = torch.full((n, t), float(IGNORE))
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y[after] = values[:, None].expand(n, t)[after].float()
    return x, y

def mr_row_broadcast(filler, values, positions):  # values as a row, values[None]
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[None, :], torch.full_like(filler, IGNORE))
    return x, y

# ---- accuracy_by_distance
def ad_right(logits, y, max_distance):
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out

def ad_column_as_distance(logits, y, max_distance):  # d = t: right only when p = 0 ... d=t
    lab = y != IGNORE
    d = torch.arange(y.size(1))[None, :].expand_as(y)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out

def ad_float32(logits, y, max_distance):  # float32 result whatever the logits' dtype
    return ad_right(logits.float(), y, max_distance)

def ad_zero_not_nan(logits, y, max_distance):  # 0 where nothing is at a distance
    return torch.nan_to_num(ad_right(logits, y, max_distance), nan=0.0)

def ad_clamped_far(logits, y, max_distance):  # far positions counted at max_distance
    lab = y != IGNORE
    d = lab.long().cumsum(1).clamp(max=max_distance)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out

# ---- cache_bytes
def _pairs(cache):
    if hasattr(cache, "rel_keys"):
        return [tuple(b) for b in cache.kv]
    if hasattr(cache, "kv"):
        return [(cache.kv,)]
    return list(cache)

def cc_right(cache):
    return sum(t.nbytes for pair in _pairs(cache) for t in pair)

def cc_last_layer(cache):  # = instead of +=: only the last pair counted
    total = 0
    for pair in _pairs(cache):
        total = sum(t.nbytes for t in pair)
    return total

def cc_kvstate_doubled(cache):  # KVState.kv taken as keys only, doubled
    if hasattr(cache, "kv") and not hasattr(cache, "rel_keys"):
        return 2 * cache.kv.nbytes
    return cc_right(cache)

def cc_keys_only(cache):  # counts k of each pair, forgets v
    return sum(pair[0].nbytes for pair in _pairs(cache))

def cc_first_batch(cache):  # counts one sequence of the batch (k[0])
    return sum(t[0].nbytes for pair in _pairs(cache) for t in pair)

# ======== more slips
def mv_last_axis(xs, w):  # weights broadcast along D
    return (xs * w.softmax(0)).sum(0)
def mv_linear_norm(xs, w):  # w / w.sum() instead of softmax
    return ((w / w.sum())[:, None, None] * xs).sum(0)
def rb_flip_slice(table, s):  # first s columns reversed: no sharing past max_distance
    return table[:, :s].flip(1)
def fa_matmul(q, k, v, bias):  # 3-D q @ k^T: broadcasting makes [B, H, H, S]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1)) + bias
    return (s.softmax(-1) @ v).sum(2)
def tl_embed_memory(model, tokens):  # the memory is the embedding alone
    return _loop(model, tokens, memory_of=lambda outs: outs[0])
def tl_layers_on_embedding(model, tokens):  # every layer reads the embedding
    x = model.embed(tokens)
    keys, values = (list(a) for a in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(x[:, t], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
        values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))
def cb_embedding_layer(n_layers, d_model, n_tokens, bytes_per_number):  # L + 1 layers
    return (2 * (n_layers + 1) * d_model * n_tokens * bytes_per_number,
            2 * d_model * n_tokens * bytes_per_number)
def sk_kv_batch_view(m, norm, kv, n_heads):  # view(2, B, H, D_h): batch and k/v mixed
    y = kv(norm(m)).view(2, m.size(0), n_heads, -1)
    return y[0], y[1]
class ApKeptSlot(torch.autograd.Function):  # value gradient keeps its slot axis [B, 1, F]
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]
    @staticmethod
    def backward(ctx, grad):
        n = ctx.n
        return grad[:, :n], grad[:, n:], None
def wg_reshape_dout(xs, gs):  # X reshaped with D_out columns
    return gs.reshape(-1, gs.size(-1)).T @ xs.reshape(-1, gs.size(-1))
def mr_scatter_inplace(filler, values, positions):  # scatter_ into the caller's filler
    n, t = filler.shape
    x = filler.scatter_(1, positions[:, None], values[:, None])
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    y = torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
    return x, y
def ad_cumsum_rows(logits, y, max_distance):  # cumsum over the batch axis
    lab = y != IGNORE
    d = lab.long().cumsum(0)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out
def cc_iter_xl(cache):  # XLCache iterated like the transformer's list
    if hasattr(cache, "kv") and not hasattr(cache, "rel_keys"):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


# ======== more slips, second round
def rb_clamp_heads(table, s):  # clamps to the number of heads, table.size(0)
    d = torch.arange(s, 0, -1).clamp(max=table.size(0))
    return table[:, d - 1]
def fa_bias_scaled(q, k, v, bias):  # (qk + bias) / sqrt(d): the bias scaled too
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias) / math.sqrt(q.size(-1))
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)
def fa_empty_q(q, k, v, bias):  # empty memory returns the query itself
    if k.size(2) == 0:
        return q
    return fa_right(q, k, v, bias)
def mv_softmax_after(xs, w):  # mixes with raw w, softmax over features after
    return torch.einsum("l,lbd->bd", w, xs).softmax(-1)
def tl_no_head(model, tokens):  # returns the top outputs, no model.head
    x = model.embed(tokens)
    keys, values = (list(a) for a in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
        values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return torch.stack(tops, 1)
def cb_numbers(n_layers, d_model, n_tokens, bytes_per_number):  # counts numbers, not bytes
    return (2 * n_layers * d_model * n_tokens, 2 * d_model * n_tokens)
def sk_swapped_halves(m, norm, kv, n_heads):  # values taken from the first half
    y = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return y[:, 1], y[:, 0]
class SqXX(torch.autograd.Function):  # backward multiplies by x*x, the function itself
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x * x
def vg_slot_sum(read_grads):  # sums each read over its slots
    return torch.stack([g.sum(0) for g in read_grads])
def vg_diagonal(read_grads):  # only the read of the value's own step
    return torch.stack([g[t] for t, g in enumerate(read_grads)])
class ApTopNone(torch.autograd.Function):  # no gradient for top
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer.data[:, n] = value
        ctx.n = n
        return buffer.data[:, : n + 1]
    @staticmethod
    def backward(ctx, grad):
        return None, grad[:, ctx.n], None
def wg_first_sequence(xs, gs):  # batch forgotten: sequence 0 only
    return gs[:, 0].T @ xs[:, 0]
def re_xl_no_position(memory, n_layers, span, position=0):  # XL: L*M, position ignored
    if memory == "XL":
        return n_layers * span
    return re_right(memory, n_layers, span, position)
def mr_next_only(filler, values, positions):  # labels only at p + 1
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    at = torch.arange(t, device=filler.device)[None, :] == positions[:, None] + 1
    y = torch.where(at, values[:, None], torch.full_like(filler, IGNORE))
    return x, y
def ad_over_rows(logits, y, max_distance):  # hits / N rows, not / positions at d
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / y.size(0)
    return out
def ad_argmax_time(logits, y, max_distance):  # argmax over time, dim 1
    lab = y != IGNORE
    d = lab.long().cumsum(1)
    pred = logits.argmax(1)[:, None, :].expand(-1, y.size(1), -1)[..., 0]
    hit = (pred == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out
def cc_xl_rel_keys(cache):  # the XL relative-key tables counted too
    n = cc_right(cache)
    if hasattr(cache, "rel_keys"):
        n += sum(r.nbytes for r in cache.rel_keys if r is not None)
    return n


# ======== more slips, third round
def mv_naive_softmax(xs, w):  # exp(w) / sum exp(w): overflows for large logits
    e = w.exp()
    return ((e / e.sum())[:, None, None] * xs).sum(0)
def rb_clamp_after_shift(table, s):  # (d - 1).clamp(max=max_distance): one past the end
    d = torch.arange(s, 0, -1)
    return table[:, (d - 1).clamp(max=table.size(1))]
def fa_bias_wrong_unsqueeze(q, k, v, bias):  # bias[:, None]: [H, 1, S]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias[:, None]
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)
def tl_layer0_keys(model, tokens):  # every layer reads layer 0's keys and values
    x = model.embed(tokens)
    keys, values = (list(a) for a in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for layer in model.layers:
            outs.append(layer(outs[-1], keys[0], values[0]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m[:, None])
        keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
        values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))
def cb_tensors(n_layers, d_model, n_tokens, bytes_per_number):  # 0-d tensors, not ints
    per = torch.tensor(2 * d_model * n_tokens * bytes_per_number)
    return per * n_layers, per
def sk_fresh_norm(m, norm, kv, n_heads):  # F.layer_norm without norm's weight and bias
    y = kv(F.layer_norm(m, m.shape[-1:])).view(m.size(0), 2, n_heads, -1)
    return y[:, 0], y[:, 1]
class SqGradInplace(torch.autograd.Function):  # multiplies grad_output in place
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output.mul_(2 * x)
class ApCat(torch.autograd.Function):  # torch.cat: a copy, the buffer unused
    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        return torch.cat([top, value[:, None]], 1)
    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n], None
def re_w_plus_one(memory, n_layers, span, position=0):  # each layer spans W + 1 back
    if memory == "window":
        return n_layers * (span + 1)
    return re_right(memory, n_layers, span, position)
def mr_minus_one(filler, values, positions):  # -1 as the ignored label
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, -1))
def ad_first_label_as_p(logits, y, max_distance):  # p taken as the first labelled index
    lab = y != IGNORE
    p = lab.int().argmax(1)
    d = torch.arange(y.size(1))[None, :] - p[:, None]
    hit = (logits.argmax(-1) == y) & lab
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype)
    for k in range(1, max_distance + 1):
        at = lab & (d == k)
        if at.any():
            out[k - 1] = (hit & at).sum().to(logits.dtype) / at.sum()
    return out


# ======== more slips, fourth round
def rb_empty_float32(table, s):  # the empty case built without the table's dtype
    if s == 0:
        return torch.zeros(table.size(0), 0)
    return rb_right(table, s)
def tl_unsqueeze0(model, tokens):  # m.unsqueeze(0): the batch becomes the memory axis
    x = model.embed(tokens)
    keys, values = (list(a) for a in model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        m = model.mix(torch.stack(outs))
        tops.append(outs[-1])
        nk, nv = model.project_memory(m.unsqueeze(0))
        keys = [torch.cat([o, n], 2) for o, n in zip(keys, nk)]
        values = [torch.cat([o, n], 2) for o, n in zip(values, nv)]
    return model.head(torch.stack(tops, 1))
def mr_label_current(filler, values, positions):  # labels: the token at t, not the value
    n, t = filler.shape
    x = filler.clone()
    x[torch.arange(n, device=filler.device), positions] = values
    after = torch.arange(t, device=filler.device)[None, :] > positions[:, None]
    return x, torch.where(after, x, torch.full_like(filler, IGNORE))
def ad_bincount(logits, y, max_distance):  # bincount without dropping far distances
    lab = y != IGNORE
    d = lab.long().cumsum(1)[lab]
    hit = ((logits.argmax(-1) == y) & lab)[lab].to(logits.dtype)
    hits = torch.bincount(d, weights=hit)[1:]
    count = torch.bincount(d)[1:]
    return hits / count


# ======== right answers
RIGHT["memory_vector"] = (check_memory_vector, mv_right)
RIGHT["relative_bias"] = (check_relative_bias, rb_right)
RIGHT["feedback_attention"] = (check_feedback_attention, fa_right)
RIGHT["token_loop"] = (check_token_loop, tl_right)
RIGHT["cache_bytes_03"] = (check_cache_bytes_03, cb_right)
RIGHT["shared_kv"] = (check_shared_kv, sk_right)
RIGHT["square"] = (check_square, SqRight)
RIGHT["value_gradients"] = (check_value_gradients, vg_right)
RIGHT["append"] = (check_append, ApRight)
RIGHT["weight_gradient"] = (check_weight_gradient, wg_right)
RIGHT["reach"] = (check_reach, re_right)
RIGHT["make_recall"] = (check_make_recall, mr_right)
RIGHT["accuracy_by_distance"] = (check_accuracy_by_distance, ad_right)
RIGHT["cache_bytes_05"] = (check_cache_bytes, cc_right)

# ======== wrong answers: notebook 03
case("mv_no_embedding", check_memory_vector, mv_no_embedding, r"embedding|xs\[0\]")
case("mv_sigmoid", check_memory_vector, mv_sigmoid, r"sigmoid")
case("mv_mean", check_memory_vector, mv_mean, r"mean|SUM")
case("mv_inplace", check_memory_vector, mv_inplace, r"in place")
case("mv_last_axis", check_memory_vector, mv_last_axis, r"\[:, None, None\]|LAST axis")
case("mv_linear_norm", check_memory_vector, mv_linear_norm, r"softmax|exp")
case("rb_newest_first", check_relative_bias, rb_newest_first, r"wrong way|oldest first")
case("rb_column_d", check_relative_bias, rb_column_d, r"off by one|d - 1")
case("rb_wrap", check_relative_bias, rb_wrap, r"clamp|wrap")
case("rb_flip_slice", check_relative_bias, rb_flip_slice, r"clamp|per key")
case("fa_bias_after_softmax", check_feedback_attention, fa_bias_after_softmax,
     r"after the softmax|before the softmax")
case("fa_div_dh", check_feedback_attention, fa_div_dh, r"sqrt")
case("fa_empty_float32", check_feedback_attention, fa_empty_float32,
     r"dtype|zeros_like")
case("fa_matmul", check_feedback_attention, fa_matmul,
     r"q @ k|matmul|unsqueeze|q\[:, :, None\]|\[B, H, 1, D_h\]")
case("tl_top_as_memory", check_token_loop, tl_top_as_memory, r"model\.mix")
case("tl_newest_first", check_token_loop, tl_newest_first, r"in front|oldest first")
case("tl_head_on_memory", check_token_loop, tl_head_on_memory, r"memory vector|TOP")
case("tl_embed_memory", check_token_loop, tl_embed_memory, r"embedding.*mix")
case("tl_layers_on_embedding", check_token_loop, tl_layers_on_embedding,
     r"not chained|outs\[-1\]")
case("cb_keys_only", check_cache_bytes_03, cb_keys_only, r"AND values|values")
case("cb_with_memory", check_cache_bytes_03, cb_with_memory, r"memory vectors")
case("cb_per_token", check_cache_bytes_03, cb_per_token, r"n_tokens|ONE token")
case("cb_embedding_layer", check_cache_bytes_03, cb_embedding_layer, r"L \+ 1|embedding")

# ======== wrong answers: notebook 04
case("sk_heads_first", check_shared_kv, sk_heads_first, r"\[B, 2, H, D_h\]|interleaved")
case("sk_no_norm", check_shared_kv, sk_no_norm, r"norm")
case("sk_no_bias", check_shared_kv, sk_no_bias, r"bias")
case("sk_dh_major", check_shared_kv, sk_dh_major, r"head-major|\[H, D_h\]")
case("sk_kv_batch_view", check_shared_kv, sk_kv_batch_view, r"view\(2, B|\[B, 2, H, D_h\]")
case("sq_no_chain", check_square, SqNoChain, r"grad_output|chain rule")
case("sq_from_output", check_square, SqFromOutput, r"sign")
case("sq_no_two", check_square, SqNoTwo, r"factor 2")
case("vg_into_input", check_value_gradients, vg_into_input, r"in place")
case("vg_right_aligned", check_value_gradients, vg_right_aligned, r"FIRST|aligned")
case("vg_mean", check_value_gradients, vg_mean, r"sum, not mean|averaged")
case("ap_no_data", check_append, ApNoData, r"buffer\.data")
case("ap_first_slot", check_append, ApFirstSlot, r"grad\[:, n\]|newest first")
case("ap_batch_axis", check_append, ApBatchAxis, r"size\(1\)|batch")
case("ap_kept_slot", check_append, ApKeptSlot, r"grad\[:, n\]")
case("wg_mean", check_weight_gradient, wg_mean, r"averaged|no division")
case("wg_misaligned", check_weight_gradient, wg_misaligned, r"paired|same way")
case("wg_sum_first", check_weight_gradient, wg_sum_first, r"before the product|cross terms")
case("wg_reshape_dout", check_weight_gradient, wg_reshape_dout,
     r"D_in|flatten\(0, 1\)|xs.*columns")

# ======== wrong answers: notebook 05
case("re_counts_self", check_reach, re_counts_self, r"off by one|itself")
case("re_position_per_layer", check_reach, re_position_per_layer, r"once")
case("re_feedback_span", check_reach, re_feedback_span, r"unbounded|math\.inf")
case("re_xl_segment", check_reach, re_xl_segment, r"LAST position|L \* M \+ position")
case("mr_label_at_p", check_make_recall, mr_label_at_p, r"positions\[n\] \+ 1|own position")
case("mr_column_index", check_make_recall, mr_column_index, r"every row|arange\(N\)")
case("mr_float_labels", check_make_recall, mr_float_labels, r"int64|LongTensor")
case("mr_row_broadcast", check_make_recall, mr_row_broadcast, r"values\[:, None\]|column")
case("mr_scatter_inplace", check_make_recall, mr_scatter_inplace, r"in place|clone")
case("ad_column_as_distance", check_accuracy_by_distance, ad_column_as_distance,
     r"t - p|start of the sequence")
case("ad_float32", check_accuracy_by_distance, ad_float32, r"dtype")
case("ad_zero_not_nan", check_accuracy_by_distance, ad_zero_not_nan, r"NaN")
case("ad_clamped_far", check_accuracy_by_distance, ad_clamped_far,
     r"beyond max_distance|leave them out")
case("ad_cumsum_rows", check_accuracy_by_distance, ad_cumsum_rows, r"cumsum\(1\)|along time")
case("cc_last_layer", check_cache_bytes, cc_last_layer, r"one layer|single layer|last layer")
case("cc_kvstate_doubled", check_cache_bytes, cc_kvstate_doubled, r"twice|once")
case("cc_keys_only", check_cache_bytes, cc_keys_only, r"keys only")
case("cc_first_batch", check_cache_bytes, cc_first_batch, r"\[B\]|every element")
case("cc_iter_xl", check_cache_bytes, cc_iter_xl, r"cache\.kv|KVBuffer")

# ======== wrong answers: a second round
case("rb_clamp_heads", check_relative_bias, rb_clamp_heads, r"heads|table\.size\(1\)")
case("fa_bias_scaled", check_feedback_attention, fa_bias_scaled, r"bias .*sqrt|only q")
case("fa_empty_q", check_feedback_attention, fa_empty_q, r"zeros, not q")
case("mv_softmax_after", check_memory_vector, mv_softmax_after, r"over D|layer weights")
case("tl_no_head", check_token_loop, tl_no_head, r"model\.head")
case("cb_numbers", check_cache_bytes_03, cb_numbers, r"bytes_per_number")
case("sk_swapped_halves", check_shared_kv, sk_swapped_halves, r"swapped|first D")
case("sq_x_squared", check_square, SqXX, r"OUTPUT|2x")
case("vg_slot_sum", check_value_gradients, vg_slot_sum, r"over its slots|not the slots")
case("vg_diagonal", check_value_gradients, vg_diagonal, r"later reads|only the read")
case("ap_top_none", check_append, ApTopNone, r"`top`|grad\[:, :n\]")
case("wg_first_sequence", check_weight_gradient, wg_first_sequence, r"batch")
case("re_xl_no_position", check_reach, re_xl_no_position, r"position")
case("mr_next_only", check_make_recall, mr_next_only, r"every position after")
case("ad_over_rows", check_accuracy_by_distance, ad_over_rows, r"number of (rows|positions)")
case("ad_argmax_time", check_accuracy_by_distance, ad_argmax_time, r"argmax\(-1\)|last axis")
case("cc_xl_rel_keys", check_cache_bytes, cc_xl_rel_keys, r"relative")

# ======== wrong answers: a third round
case("mv_naive_softmax", check_memory_vector, mv_naive_softmax, r"overflow|stable|inf")
case("rb_clamp_after_shift", check_relative_bias, rb_clamp_after_shift, r"one past|first")
case("fa_bias_wrong_unsqueeze", check_feedback_attention, fa_bias_wrong_unsqueeze,
     r"bias\[:, None")
case("tl_layer0_keys", check_token_loop, tl_layer0_keys, r"keys\[i\]|own projection")
case("cb_tensors", check_cache_bytes_03, cb_tensors, r"int")
case("sk_fresh_norm", check_shared_kv, sk_fresh_norm, r"`norm`|fresh")
case("sq_grad_inplace", check_square, SqGradInplace, r"in place")
case("ap_cat", check_append, ApCat, r"copy|view")
case("re_w_plus_one", check_reach, re_w_plus_one, r"exactly W|W \+ 1|itself")
case("mr_minus_one", check_make_recall, mr_minus_one, r"-100|not -1")
case("ad_first_label_as_p", check_accuracy_by_distance, ad_first_label_as_p,
     r"one short|p \+ 1")

# ======== wrong answers: a fourth round
case("rb_empty_float32", check_relative_bias, rb_empty_float32, r"dtype|float32")
case("tl_unsqueeze0", check_token_loop, tl_unsqueeze0, r"unsqueeze|m\[:, None\]|\[B, 1, D\]")
case("mr_label_current", check_make_recall, mr_label_current, r"input tokens|values\[n\]")
case("ad_bincount", check_accuracy_by_distance, ad_bincount, r"max_distance|NaN")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
