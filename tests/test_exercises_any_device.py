"""Every notebook's tensor exercises: an answer right on the CPU that makes a tensor there
(a causal mask `torch.ones(t, t, dtype=torch.bool).tril()`, a `torch.zeros(...)`
accumulator, a `torch.arange(...)` index for gather, a one-element `torch.tensor([...])`
scale, with no `device=`) fails, or returns a CPU tensor, once its inputs are on a GPU, as
in the notebooks' models. Notebook 02's checks named these first (trial 45a); the others'
accepted them. Each such answer is named; the same answer made where the inputs are
(`device=x.device`, `x.new_zeros`, `torch.zeros_like`) passes.

Not here: exercises whose function takes no tensor (01's causal_mask(t), 05's my_reach) or
counts bytes (03's and 05's cache_bytes). 05's make_recall is here: its reference
(`labnn.data.recall.make_recall`) and the notebook's solution indexed with a CPU
`torch.arange` too, and now make it where the inputs are."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.data.recall import IGNORE
from labnn.exercises.feedback_transformer import (
    check_feedback_attention, check_memory_vector, check_relative_bias, check_token_loop)
from labnn.exercises.kv_sharing_stack import (
    check_append, check_shared_kv, check_square, check_value_gradients, check_weight_gradient)
from labnn.exercises.self_attention import (
    check_attention, check_attention_weights, check_heads, check_multi_head_attention)
from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
DEVICE = r"(?i)device|on the CPU|cpu"


# ---- 01, Exercise 1: attention weights

def _aw(scale):
    def attention_weights(q, k):
        return (q @ k.transpose(-2, -1) / scale(q)).softmax(dim=-1)
    return attention_weights


case("aw_cpu_scale", check_attention_weights,
     _aw(lambda q: torch.tensor([q.size(-1)], dtype=q.dtype).sqrt()), DEVICE)
RIGHT["aw_right"] = (check_attention_weights, _aw(lambda q: math.sqrt(q.size(-1))))
RIGHT["aw_right_scale_where_q_is"] = (check_attention_weights, _aw(
    lambda q: torch.tensor([q.size(-1)], dtype=q.dtype, device=q.device).sqrt()))


# ---- 01, Exercise 2: attention with a mask

def _attention(ones, zeros):
    def attention(q, k, v, mask=None):
        if mask is None:  # no mask: every key may be attended
            mask = ones(q, k)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        empty = ~mask.any(dim=-1, keepdim=True)  # a row with no key: zeros, not NaN
        return torch.where(empty, zeros(weights), weights) @ v
    return attention


def _ones(q, k, **device):
    return torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, **device)


def _zeros(w, **device):
    return torch.zeros(w.shape, dtype=w.dtype, **device)


case("at_cpu_default_mask", check_attention, _attention(_ones, torch.zeros_like), DEVICE)
case("at_cpu_zero_rows", check_attention,
     _attention(lambda q, k: _ones(q, k, device=q.device), _zeros), DEVICE)
RIGHT["at_right"] = (check_attention, _attention(
    lambda q, k: _ones(q, k, device=q.device), lambda w: _zeros(w, device=w.device)))


# ---- 01, Exercise 4: split and merge heads

def _split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge(x):
    b, h, t, d_head = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d_head)


def _split_into(zeros):
    def split_heads(x, n_heads):  # head by head, into a new tensor
        b, t, d = x.shape
        d_h = d // n_heads
        out = zeros(x, (b, n_heads, t, d_h))
        for h in range(n_heads):
            out[:, h] = x[:, :, h * d_h:(h + 1) * d_h]
        return out
    return split_heads


def _merge_into(zeros):
    def merge_heads(x):
        b, h, t, d_h = x.shape
        out = zeros(x, (b, t, h * d_h))
        for i in range(h):
            out[:, :, i * d_h:(i + 1) * d_h] = x[:, i]
        return out
    return merge_heads


def _cpu_zeros(x, shape):
    return torch.zeros(shape, dtype=x.dtype)


def _new_zeros(x, shape):
    return x.new_zeros(shape)


case("heads_cpu_split", check_heads, (_split_into(_cpu_zeros), _merge), DEVICE)
case("heads_cpu_merge", check_heads, (_split, _merge_into(_cpu_zeros)), DEVICE)
RIGHT["heads_right"] = (check_heads, _split, _merge)
RIGHT["heads_right_new_zeros"] = (check_heads, _split_into(_new_zeros),
                                  _merge_into(_new_zeros))


# ---- 01, Exercise 5: multi-head attention

def _mha(ones):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        h = mha.n_heads
        if mask is None:  # no mask: every query attends every key
            mask = ones(x, t)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d // h)).masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return mha.out_proj((weights @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


case("mha_cpu_default_mask", check_multi_head_attention,
     _mha(lambda x, t: torch.ones(t, t, dtype=torch.bool)), DEVICE)
RIGHT["mha_right"] = (check_multi_head_attention,
                      _mha(lambda x, t: torch.ones(t, t, dtype=torch.bool, device=x.device)))


# ---- 03, Exercise 1: the memory vector

def _mv(zeros):
    def memory_vector(xs, w):
        a = w.softmax(dim=0)
        out = zeros(xs, tuple(xs.shape[1:]))
        for layer in range(xs.size(0)):
            out += a[layer] * xs[layer]
        return out
    return memory_vector


case("mv_cpu_accumulator", check_memory_vector, _mv(_cpu_zeros), DEVICE)
RIGHT["mv_right"] = (check_memory_vector,
                     lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(dim=0), xs))
RIGHT["mv_right_new_zeros"] = (check_memory_vector, _mv(_new_zeros))


# ---- 03, Exercise 2: the relative position bias

def _rb(device_of):
    def relative_bias(table, s):
        distance = torch.arange(s, 0, -1, device=device_of(table)).clamp(max=table.size(1))
        return table.gather(1, (distance - 1).expand(table.size(0), s))
    return relative_bias


def _rb_empty(zeros):
    def relative_bias(table, s):
        if s == 0:  # the first step: no key
            return zeros(table, (table.size(0), 0))
        return table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1]
    return relative_bias


case("rb_cpu_gather_index", check_relative_bias, _rb(lambda t: None), DEVICE)
case("rb_cpu_empty", check_relative_bias, _rb_empty(_cpu_zeros), DEVICE)
RIGHT["rb_right_gather"] = (check_relative_bias, _rb(lambda t: t.device))
# indexing with a CPU index is fine on a GPU too (the notebook's solution does)
RIGHT["rb_right_cpu_index"] = (check_relative_bias, _rb_empty(_new_zeros))


# ---- 03, Exercise 3: attention over the memory

def _fa(zeros):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:  # an empty memory
            return zeros(q, tuple(q.shape))
        scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
        return torch.einsum("bhs,bhsd->bhd", scores.softmax(dim=-1), v)
    return feedback_attention


case("fa_cpu_empty_memory", check_feedback_attention, _fa(_cpu_zeros), DEVICE)
RIGHT["fa_right"] = (check_feedback_attention, _fa(_new_zeros))


# ---- 03, Exercise 4: the token loop

def _tl(zeros):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :0])
        tops = zeros(x, tuple(x.shape))  # the last layer's output, step by step
        for t in range(tokens.size(1)):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], keys[i], values[i]))
            tops[:, t] = outs[-1]
            new_keys, new_values = model.project_memory(model.mix(torch.stack(outs))[:, None])
            keys = [torch.cat(pair, dim=2) for pair in zip(keys, new_keys)]
            values = [torch.cat(pair, dim=2) for pair in zip(values, new_values)]
        return model.head(tops)
    return token_loop


case("tl_cpu_outputs", check_token_loop, _tl(_cpu_zeros), DEVICE)
RIGHT["tl_right"] = (check_token_loop, _tl(_new_zeros))


# ---- 04, Exercise 1: shared keys and values

def _skv(device_of):
    def shared_kv(m, norm, kv, n_heads):
        out = kv(norm(m))
        d = m.size(-1)
        first = torch.arange(d, device=device_of(m))  # the keys: the first D outputs
        k, v = out.index_select(-1, first), out.index_select(-1, first + d)
        return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)
    return shared_kv


case("skv_cpu_index_select", check_shared_kv, _skv(lambda m: None), DEVICE)
RIGHT["skv_right"] = (check_shared_kv, _skv(lambda m: m.device))


# ---- 04, Exercise 2: Square

def _square(two):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return grad_output * two(x) * x
    return Square


case("sq_cpu_two", check_square, _square(lambda x: torch.tensor([2.0], dtype=x.dtype)), DEVICE)
RIGHT["sq_right"] = (check_square, _square(lambda x: 2))
RIGHT["sq_right_0dim_two"] = (check_square, _square(lambda x: torch.tensor(2.0, dtype=x.dtype)))


# ---- 04, Exercise 3: the values' gradients

def _vg(zeros):
    def value_gradients(read_grads):
        total = zeros(read_grads[-1], tuple(read_grads[-1].shape))
        for g in read_grads:
            total[: g.size(0)] += g
        return total
    return value_gradients


case("vg_cpu_accumulator", check_value_gradients, _vg(_cpu_zeros), DEVICE)
RIGHT["vg_right"] = (check_value_gradients, _vg(_new_zeros))


# ---- 04, Exercise 4: Append

def _append(zeros):
    class Append(torch.autograd.Function):
        @staticmethod
        def forward(ctx, top, value, buffer):
            n = top.size(1)
            buffer[:, n].copy_(value)
            ctx.n = n
            return buffer.data[:, : n + 1]

        @staticmethod
        def backward(ctx, grad):
            grad_value = zeros(grad, (grad.size(0), grad.size(2)))
            grad_value += grad[:, ctx.n]
            return grad[:, : ctx.n], grad_value, None
    return Append


case("ap_cpu_value_gradient", check_append, _append(_cpu_zeros), DEVICE)
RIGHT["ap_right"] = (check_append, _append(_new_zeros))


# ---- 04, Exercise 5: the weight gradient

def _wg(zeros):
    def weight_gradient(xs, gs):
        total = zeros(xs, (gs.size(-1), xs.size(-1)))
        total += gs.flatten(0, 1).t() @ xs.flatten(0, 1)
        return total
    return weight_gradient


case("wg_cpu_accumulator", check_weight_gradient, _wg(_cpu_zeros), DEVICE)
RIGHT["wg_right"] = (check_weight_gradient, _wg(_new_zeros))
RIGHT["wg_right_one_product"] = (check_weight_gradient,
                                 lambda xs, gs: gs.flatten(0, 1).t() @ xs.flatten(0, 1))


# ---- 05, Exercise 3: accuracy by distance

def _abd(zeros):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled  # 0 where unlabelled
        d = torch.where(d <= max_distance, d, 0).flatten()  # 0: not counted
        hits = ((logits.argmax(-1) == y) & labelled).flatten()
        total = zeros(logits, (max_distance + 1,)).scatter_add_(0, d, labelled.flatten().float())
        right = zeros(logits, (max_distance + 1,)).scatter_add_(0, d, hits.float())
        return (right / total)[1:].to(logits.dtype)  # 0 / 0 = NaN: never tested
    return accuracy_by_distance


case("abd_cpu_counts", check_accuracy_by_distance,
     _abd(lambda x, shape: torch.zeros(shape)), DEVICE)
RIGHT["abd_right"] = (check_accuracy_by_distance,
                      _abd(lambda x, shape: torch.zeros(shape, device=x.device)))


def _abd_counted(zero):
    """Per distance, the labelled tokens and the right ones counted into 0-dim tensors."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = (logits.argmax(-1) == y) & labelled
        out = []
        for k in range(1, max_distance + 1):
            n, right = zero(logits), zero(logits)
            n += (d == k).sum()  # into a CPU number: a GPU refuses the write
            right += (hits & (d == k)).sum()
            out.append(right / n)
        return torch.stack(out).to(logits.device, logits.dtype)
    return accuracy_by_distance


# the device check's gap named in stop 45: a CPU 0-dim tensor took the sum in place
case("abd_cpu_number_accumulates", check_accuracy_by_distance,
     _abd_counted(lambda x: torch.tensor(0.0)), DEVICE)
RIGHT["abd_number_where_the_inputs_are"] = (check_accuracy_by_distance,
                                            _abd_counted(lambda x: x.new_zeros(())))


# ---- 05, Exercise 1: make_recall

def _recall(device_of):
    def make_recall(filler, values, positions):
        rows = torch.arange(filler.size(0), device=device_of(filler))
        x = filler.clone()
        x[rows, positions] = values
        after = torch.arange(filler.size(1), device=device_of(filler)) > positions[:, None]
        return x, torch.where(after, values[:, None], IGNORE)
    return make_recall


case("mr_cpu_range", check_make_recall, _recall(lambda x: None), DEVICE)


def mr_values_through_a_list(filler, values, positions):
    rows = torch.arange(filler.size(0), device=filler.device)
    x = filler.clone()
    x[rows, positions] = torch.tensor(values.tolist())  # the values written from the CPU
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


# the gap named in stop 45: index_put_ takes CPU indices on a GPU, but not CPU values
case("mr_cpu_values_put", check_make_recall, mr_values_through_a_list, DEVICE)
RIGHT["mr_right"] = (check_make_recall, _recall(lambda x: x.device))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
