"""Right answers to every notebook's tensor exercises, in many styles, run through the device
check (`expect_any_device`, which reruns an answer with its inputs on the meta device).

A GPU copies back to the CPU: `.tolist()`, `.cpu()` (then `.to(x.device)`, or a numpy round
trip back with `torch.from_numpy(...).to(x.device)`), `cpu_out.copy_(x)` then `.to(x.device)`.
Such an answer is right on a GPU, slow as it is; the check refused every one ("writes into a
tensor made on the CPU (or calls .cpu())"), the meta device having no values to copy. Now the
copy gets zeros for values and only its later use is judged: mixed with the inputs, or
returned, it is named as before (the cases below).

The other right answers (einsum, loops over heads, tokens and steps, Python-scalar and 0-dim
fills, `x.new_*`, `*_like`, `device=x.device`, CPU indices of `x[...]`, F.pad, cat and stack
of slices, index_put_ with accumulate, scatter_add_ into `x.new_zeros`) were accepted before;
they pin that behaviour."""
import math

import numpy as np
from checker_helpers import trial_case, trial_tests

import torch
import torch.nn.functional as F

from labnn.data.recall import IGNORE
from labnn.exercises.feedback_transformer import (
    check_feedback_attention, check_memory_vector, check_relative_bias, check_token_loop)
from labnn.exercises.kv_sharing_stack import (
    check_append, check_shared_kv, check_square, check_value_gradients, check_weight_gradient)
from labnn.exercises.self_attention import (
    check_attention, check_attention_weights, check_heads, check_multi_head_attention)
from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall
from labnn.exercises.transformer_xl import (
    check_relative_scores, check_relative_shift, check_update_memory)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
DEVICE = r"(?i)device|on the CPU|cpu"


# ---- copies back to the CPU: refused before, right on a GPU

def _distances(table, s):
    return torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1))


def rb_tolist(table, s):  # Python ints from the distances
    if s == 0:
        return table[:, :0]
    return torch.stack([table[:, i - 1] for i in _distances(table, s).tolist()], dim=1)


def rb_cpu_index(table, s):  # a CPU index of table[...]: a GPU takes it
    return table[:, _distances(table, s).cpu() - 1]


def rb_cpu_gather(table, s):  # gather with a CPU index: a GPU refuses it
    d = _distances(table, s).cpu() - 1
    return table.gather(1, d.expand(table.size(0), -1))


RIGHT["rb_tolist"] = (check_relative_bias, rb_tolist)
RIGHT["rb_cpu_index"] = (check_relative_bias, rb_cpu_index)
case("rb_cpu_gather", check_relative_bias, rb_cpu_gather, DEVICE)


def mr_tolist_loop(filler, values, positions):
    x = filler.clone()
    y = torch.full_like(filler, IGNORE)
    for n, p in enumerate(positions.tolist()):
        x[n, p] = values[n]
        y[n, p + 1:] = values[n]
    return x, y


def mr_cpu_loop(filler, values, positions):
    x = filler.clone()
    y = torch.full_like(filler, IGNORE)
    for n, p in enumerate(positions.cpu()):
        x[n, int(p)] = values[n]
        y[n, int(p) + 1:] = values[n]
    return x, y


def _mr_numpy(back):
    def make_recall(filler, values, positions):
        p = positions.cpu().numpy()
        after = back(torch.from_numpy(np.arange(filler.size(1))[None] > p[:, None]), filler)
        x = filler.clone()
        x[torch.arange(len(p)), positions] = values
        return x, torch.where(after, values[:, None], IGNORE)
    return make_recall


def mr_cpu_returned(filler, values, positions):  # the result copied to the CPU
    x, y = mr_tolist_loop(filler, values, positions)
    return x.cpu(), y.cpu()


RIGHT["mr_tolist_loop"] = (check_make_recall, mr_tolist_loop)
RIGHT["mr_cpu_loop"] = (check_make_recall, mr_cpu_loop)
RIGHT["mr_numpy_round_trip"] = (check_make_recall, _mr_numpy(lambda t, x: t.to(x.device)))
case("mr_numpy_mask_left_on_cpu", check_make_recall, _mr_numpy(lambda t, x: t), DEVICE)
case("mr_cpu_returned", check_make_recall, mr_cpu_returned, DEVICE)


def _abd_counts(back):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = (logits.argmax(-1) == y).to(logits.dtype)
        sel = d[..., None] == torch.arange(1, max_distance + 1, device=y.device)
        right = (sel * hits[..., None]).sum((0, 1))
        return (right / back(sel.sum((0, 1)).cpu(), logits)).to(logits.dtype)
    return accuracy_by_distance


def abd_tolist_present(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hits = (logits.argmax(-1) == y).to(logits.dtype)
    sel = d[..., None] == torch.arange(1, max_distance + 1, device=y.device)
    out = logits.new_full((max_distance,), float("nan"))
    for k, present in enumerate(sel.any(0).any(0).tolist()):
        if present:
            out[k] = hits[sel[..., k]].mean()
    return out


RIGHT["abd_counts_cpu_and_back"] = (check_accuracy_by_distance,
                                    _abd_counts(lambda c, x: c.to(x.device)))
RIGHT["abd_tolist_present"] = (check_accuracy_by_distance, abd_tolist_present)
case("abd_counts_left_on_cpu", check_accuracy_by_distance, _abd_counts(lambda c, x: c), DEVICE)


def _mv_weights(back):
    def memory_vector(xs, w):
        return torch.einsum("l,lbd->bd", back(w.softmax(0).cpu(), xs), xs)
    return memory_vector


RIGHT["mv_cpu_and_back"] = (check_memory_vector, _mv_weights(lambda p, x: p.to(x.device)))
case("mv_weights_left_on_cpu", check_memory_vector, _mv_weights(lambda p, x: p), DEVICE)


def at_cpu_rows_and_back(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return scores.softmax(-1) @ v
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    empty = (~mask.any(-1, keepdim=True)).cpu().to(weights.device)
    return weights.masked_fill(empty, 0.0) @ v


RIGHT["at_cpu_rows_and_back"] = (check_attention, at_cpu_rows_and_back)


def _um_written(back):
    def update_memory(mem, h, mem_len):
        states = h if mem is None else torch.cat([mem, h], 1)
        keep = min(mem_len, states.size(1))
        out = torch.empty(states.size(0), keep, states.size(2), dtype=states.dtype)  # CPU
        out.copy_(states[:, states.size(1) - keep:].detach())
        return back(out, h)
    return update_memory


RIGHT["um_cpu_copy_and_back"] = (check_update_memory, _um_written(lambda o, h: o.to(h.device)))
case("um_cpu_copy_returned", check_update_memory, _um_written(lambda o, h: o), DEVICE)


def _vg_written(back):
    def value_gradients(read_grads):
        total = torch.zeros(read_grads[-1].shape, dtype=read_grads[-1].dtype)  # CPU
        total.copy_(sum(F.pad(g, (0, 0, 0, len(read_grads) - len(g))) for g in read_grads))
        return back(total, read_grads[-1])
    return value_gradients


def vg_cpu_accumulated(read_grads):  # adds the inputs into a CPU tensor: a GPU refuses it
    total = torch.zeros(read_grads[-1].shape, dtype=read_grads[-1].dtype)
    for g in read_grads:
        total[: len(g)] += g
    return total.to(read_grads[-1].device)


RIGHT["vg_cpu_copy_and_back"] = (check_value_gradients,
                                 _vg_written(lambda t, g: t.to(g.device)))
case("vg_cpu_copy_returned", check_value_gradients, _vg_written(lambda t, g: t), DEVICE)
case("vg_cpu_accumulated", check_value_gradients, vg_cpu_accumulated, DEVICE)


def vg_index_add_cpu(read_grads):  # index_add_ with a CPU index: a GPU refuses it
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total.index_add_(0, torch.arange(len(g)), g)
    return total


case("vg_index_add_cpu_index", check_value_gradients, vg_index_add_cpu, DEVICE)


# ---- accepted before, in varied styles (they pin the behaviour)

def aw_new_tensor(q, k):
    return (q @ k.transpose(-2, -1) / q.new_tensor(q.size(-1)).sqrt()).softmax(-1)


def aw_0dim_scale(q, k):
    return (q @ k.mT / torch.tensor(q.shape[-1], dtype=q.dtype).sqrt()).softmax(-1)


RIGHT["aw_new_tensor"] = (check_attention_weights, aw_new_tensor)
RIGHT["aw_0dim_scale"] = (check_attention_weights, aw_0dim_scale)


def _attention(fill, zero):
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        if mask is None:
            return scores.softmax(-1) @ v
        weights = fill(scores, mask).softmax(-1)
        return zero(weights, mask.any(-1, keepdim=True)) @ v
    return attention


RIGHT["at_where_python_scalars"] = (check_attention, _attention(
    lambda s, m: torch.where(m, s, float("-inf")), lambda w, m: torch.where(m, w, 0.0)))
RIGHT["at_masked_fill_0dim"] = (check_attention, _attention(
    lambda s, m: s.masked_fill(~m, torch.tensor(float("-inf"))),
    lambda w, m: w.masked_fill(~m, torch.tensor(0.0))))


def heads_split_cpu_index(x, n_heads):  # x[..., idx] with a CPU idx: a GPU takes it
    b, t, d = x.shape
    return x[:, :, torch.arange(d).view(n_heads, d // n_heads)].permute(0, 2, 1, 3)


def heads_merge_unbind(x):
    return torch.cat(x.unbind(1), dim=-1)


RIGHT["heads_cpu_index_unbind"] = (check_heads, heads_split_cpu_index, heads_merge_unbind)


def mha_head_loop(x, mha, mask=None):
    b, t, d = x.shape
    d_h = d // mha.n_heads
    q, k, v = mha.qkv(x).split(d, dim=-1)
    outs = []
    for i in range(mha.n_heads):
        part = slice(i * d_h, (i + 1) * d_h)
        scores = q[..., part] @ k[..., part].transpose(-2, -1) / math.sqrt(d_h)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1)
        if mask is not None:
            weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        outs.append(weights @ v[..., part])
    return mha.out_proj(torch.cat(outs, dim=-1))


RIGHT["mha_head_loop"] = (check_multi_head_attention, mha_head_loop)


def rs_cpu_index(x):
    t, s = x.shape[-2:]
    i = torch.arange(t)[:, None]
    return x[..., i, (torch.arange(s)[None] + t - 1 - i).clamp(max=s - 1)]


def rs_new_zeros_rows(x):
    t, s = x.shape[-2:]
    out = x.new_zeros(x.shape)
    for i in range(t):
        out[..., i, : s - (t - 1 - i)] = x[..., i, t - 1 - i:]
    return out


RIGHT["rs_cpu_index"] = (check_relative_shift, rs_cpu_index)
RIGHT["rs_new_zeros_rows"] = (check_relative_shift, rs_new_zeros_rows)


def sc_head_loop(q, k, r, u, v):
    outs = []
    for h in range(q.size(1)):
        content = (q[:, h] + u[h]) @ k[:, h].transpose(-2, -1)
        outs.append(content + rs_cpu_index((q[:, h] + v[h]) @ r[:, h].T))
    return torch.stack(outs, 1) / math.sqrt(q.size(-1))


RIGHT["sc_head_loop_cpu_index"] = (check_relative_scores, sc_head_loop)


def mv_python_sum(xs, w):
    return sum(a * x for a, x in zip(w.softmax(0), xs))


def mv_0dim_start(xs, w):
    out = torch.tensor(0.0, dtype=xs.dtype)  # a CPU number: a GPU takes it
    for a, x in zip(w.softmax(0), xs):
        out = out + a * x
    return out


RIGHT["mv_python_sum"] = (check_memory_vector, mv_python_sum)
RIGHT["mv_0dim_start"] = (check_memory_vector, mv_0dim_start)
RIGHT["rb_python_list_index"] = (check_relative_bias, lambda table, s: table[
    :, [min(s - j, table.size(1)) - 1 for j in range(s)]])


def fa_no_branch(q, k, v, bias):  # S = 0: an empty sum, zeros
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


RIGHT["fa_no_branch"] = (check_feedback_attention, fa_no_branch)


def tl_memory_cat(model, tokens):
    x = model.embed(tokens)
    memory = x.new_empty(x.size(0), 0, x.size(2))
    tops = []
    for t in range(tokens.size(1)):
        keys, values = model.project_memory(memory)
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        memory = torch.cat([memory, model.mix(torch.stack(outs))[:, None]], dim=1)
    return model.head(torch.stack(tops, dim=1))


RIGHT["tl_memory_cat"] = (check_token_loop, tl_memory_cat)


def skv_cpu_index(m, norm, kv, n_heads):
    out, d = kv(norm(m)), m.size(-1)
    first = torch.arange(d)
    return (out[:, first].view(-1, n_heads, d // n_heads),
            out[:, first + d].view(-1, n_heads, d // n_heads))


RIGHT["skv_cpu_index"] = (check_shared_kv, skv_cpu_index)


def _square(backward):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.pow(2)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return backward(x, grad_output)
    return Square


RIGHT["sq_new_tensor"] = (check_square, _square(lambda x, g: g * x.new_tensor(2.0) * x))
RIGHT["sq_full_like"] = (check_square, _square(lambda x, g: torch.full_like(x, 2) * x * g))


def vg_index_put_cpu(read_grads):  # index_put_ accumulates at CPU indices on a GPU too
    total = read_grads[-1].new_zeros(read_grads[-1].shape)
    for g in read_grads:
        total.index_put_((torch.arange(len(g)),), g, accumulate=True)
    return total


RIGHT["vg_index_put_cpu"] = (check_value_gradients, vg_index_put_cpu)


def _append(backward):
    class Append(torch.autograd.Function):
        @staticmethod
        def forward(ctx, top, value, buffer):
            n = top.size(1)
            buffer.data[:, n] = value
            ctx.n = n
            return buffer.data[:, : n + 1]

        @staticmethod
        def backward(ctx, grad):
            return backward(grad, ctx.n)
    return Append


RIGHT["ap_cpu_index_backward"] = (check_append, _append(
    lambda g, n: (g[:, torch.arange(n)], g[:, torch.tensor(n)], None)))
RIGHT["wg_sum_of_products"] = (check_weight_gradient,  # Python's sum, from the number 0
                               lambda xs, gs: sum([gs.flatten(0, 1).T @ xs.flatten(0, 1)]))


def mr_cpu_rows(filler, values, positions):  # CPU rows beside positions: a GPU moves them
    x = filler.clone()
    x[torch.arange(filler.size(0)), positions] = values
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


RIGHT["mr_cpu_rows"] = (check_make_recall, mr_cpu_rows)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
