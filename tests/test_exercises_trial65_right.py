"""Trial 65, right answers: formulations other than the solutions', which the checks of
notebooks 01 to 05 must accept, now that new diagnoses infer what an answer did from its
numbers (01's fitted softmax scales and heads' weights recovered from the output, 03's
layer-mix weights solved by least squares, 05's narrow integer rounds, 02 and 04's new
diagnoses). None was refused when the trial ran them: they stay here so that a diagnosis
that starts refusing a right answer shows. The ways written: einsum, baddbmm, loops over
heads, rows or steps, logsumexp or a max subtracted by hand, float64 or float32 inside
(promoted, never narrowed), where / masked_fill / finfo.min, zeros set after the softmax,
scales on q or k, int32 indices, F.layer_norm or a hand-written one, torch.gather.

One near miss, wrong: 01 Ex5's mask added to the scores as the input of `torch.baddbmm`
(-inf where masked). Its forward is right, but for a query with no allowed key the NaN of
its softmax flows back through the sum into q, k and x, zeroed rows or not; it was told to
zero such rows after the softmax, which it did. Now named as an additive -inf, like `+`.
"""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from checker_helpers import named_briefly, passes

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)
from labnn.exercises.kv_sharing_stack import check_shared_kv, check_value_gradients
from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)
from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall
from labnn.exercises.transformer_xl import check_relative_scores, check_relative_shift
from labnn.xl import relative_shift

IGNORE = -100
RIGHT = {}


def _up(t):
    """`t` in float32 or wider: float64 stays float64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


# Notebook 01, Exercises 1, 2 and 5
def _weights_baddbmm_free(q, k):
    s = q @ k.mT * torch.tensor(q.size(-1), dtype=q.dtype, device=q.device).rsqrt()
    return torch.exp(s - torch.logsumexp(s, -1, keepdim=True))


def _weights_promoted(q, k):
    s = _up(q) @ _up(k).mT / math.sqrt(q.size(-1))
    return s.softmax(-1).to(q.dtype)


def _weights_roots_split(q, k):
    root = q.size(-1) ** 0.25
    return ((q / root) @ (k / root).transpose(-1, -2)).log_softmax(-1).exp()


RIGHT["01_weights_rsqrt_logsumexp"] = (check_attention_weights, _weights_baddbmm_free)
RIGHT["01_weights_promoted"] = (check_attention_weights, _weights_promoted)
RIGHT["01_weights_root_on_q_and_k"] = (check_attention_weights, _weights_roots_split)


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def _zeroed_after(q, k, v, mask=None):  # masked weights set to 0 after the softmax
    s = _scores(q, k)
    if mask is None:
        return s.softmax(-1) @ v
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.where(mask, w, 0.0) @ v


def _finfo_min(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is None:
        return s.softmax(-1) @ v
    s = torch.where(mask, s, torch.finfo(s.dtype).min)
    return (s.softmax(-1) * mask) @ v


def _max_by_hand(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    top = s.amax(-1, keepdim=True)
    e = (s - torch.where(torch.isfinite(top), top, torch.zeros_like(top))).exp()
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny) @ v


def _rows_looped(q, k, v, mask=None):  # a softmax over each row's allowed keys alone
    s = _scores(q, k)
    if mask is None:
        return s.softmax(-1) @ v
    allowed, rows = mask.expand(s.shape), []
    for idx in itertools.product(*map(range, s.shape[:-1])):
        keep = allowed[idx]
        rows.append(s[idx][keep].softmax(-1) @ v[idx[:-1]][keep] if keep.any()
                    else v.new_zeros(v.size(-1)))
    return torch.stack(rows).view(*s.shape[:-1], v.size(-1))


def _promoted(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = F.softmax(s, -1, dtype=torch.promote_types(s.dtype, torch.float32))
    return w.nan_to_num(0.0).to(v.dtype) @ v


def _einsum_ellipsis(q, k, v, mask=None):
    s = torch.einsum("...td,...sd->...ts", q, k * q.size(-1) ** -0.5)
    if mask is not None:
        s = s.masked_fill(~mask, -torch.inf)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return torch.einsum("...ts,...sd->...td", w, v)


ATTENTIONS = [_zeroed_after, _finfo_min, _max_by_hand, _rows_looped, _promoted,
              _einsum_ellipsis]
for _fn in ATTENTIONS:
    RIGHT[f"01_attention{_fn.__name__}"] = (check_attention, _fn)


def _split(x, n):
    b, t, d = x.shape
    return x.view(b, t, n, d // n).transpose(1, 2)


def _merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def _mha(attention):
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (_split(t, mha.n_heads) for t in mha.qkv(x).chunk(3, -1))
        return mha.out_proj(_merge(attention(q, k, v, mask)))
    return multi_head_attention


for _fn in ATTENTIONS:
    RIGHT[f"01_mha{_fn.__name__}"] = (check_multi_head_attention, _mha(_fn))


def _mha_out_proj_per_head(x, mha, mask=None):  # W^O applied head by head, then summed
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = (_split(z, h) for z in mha.qkv(x).chunk(3, -1))
    w = mha.out_proj.weight.view(d, h, d // h)
    out = torch.einsum("bhtd,ehd->bte", _zeroed_after(q, k, v, mask), w)
    return out if mha.out_proj.bias is None else out + mha.out_proj.bias


def _mha_sequence_first(x, mha, mask=None):  # [T, B·H, D_h] inside, as torch's own
    xt = x.transpose(0, 1)
    t, b, d = xt.shape
    q, k, v = (z.reshape(t, b * mha.n_heads, -1).transpose(0, 1)
               for z in mha.qkv(xt).chunk(3, -1))
    o = _zeroed_after(q, k, v, mask).transpose(0, 1).reshape(t, b, d)
    return mha.out_proj(o.transpose(0, 1))


def _mha_baddbmm(x, mha, mask=None):  # wrong: the -inf in baddbmm's input makes x's grad NaN
    b, t, d = x.shape
    h = mha.n_heads
    q, k, v = (_split(z, h).reshape(b * h, t, d // h) for z in mha.qkv(x).chunk(3, -1))
    bias = torch.zeros(b * h, t, t, dtype=x.dtype, device=x.device)
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    s = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=(d // h) ** -0.5)
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(_merge(torch.bmm(w, v).view(b, h, t, d // h)))


RIGHT["01_mha_out_proj_per_head"] = (check_multi_head_attention, _mha_out_proj_per_head)
RIGHT["01_mha_sequence_first"] = (check_multi_head_attention, _mha_sequence_first)


# Notebook 03
RIGHT["03_mix_matmul"] = (check_memory_vector, lambda xs, w: xs.permute(1, 2, 0) @ w.softmax(0))
RIGHT["03_mix_promoted"] = (check_memory_vector, lambda xs, w: torch.einsum(
    "l,lbd->bd", _up(w).softmax(0), _up(xs)).to(xs.dtype))
RIGHT["03_mix_logsumexp_loop"] = (check_memory_vector, lambda xs, w: sum(
    a * x for a, x in zip(torch.exp(w - torch.logsumexp(w, 0)), xs)))
RIGHT["03_bias_take_along_dim"] = (check_relative_bias, lambda table, s: torch.take_along_dim(
    table, ((s - torch.arange(s, device=table.device)).clamp(max=table.size(1)) - 1)
    [None].expand(table.size(0), s), dim=1))
RIGHT["03_bias_int32_embedding"] = (check_relative_bias, lambda table, s: F.embedding(
    (torch.arange(s, 0, -1, dtype=torch.int32, device=table.device)
     .clamp(max=table.size(1)) - 1).long(), table.T).T)


def _one_query_bias_scaled(q, k, v, bias):
    d = math.sqrt(q.size(-1))
    s = (torch.einsum("bhd,bhsd->bhs", q, k) + bias * d) / d
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)


def _one_query_baddbmm(q, k, v, bias):
    b, h, s, dh = k.shape
    scores = torch.baddbmm(bias.expand(b, h, s).reshape(b * h, 1, s), q.reshape(b * h, 1, dh),
                           k.reshape(b * h, s, dh).transpose(1, 2), alpha=dh ** -0.5)
    return torch.bmm(scores.softmax(-1), v.reshape(b * h, s, dh)).view(b, h, dh)


RIGHT["03_one_query_bias_scaled"] = (check_feedback_attention, _one_query_bias_scaled)
RIGHT["03_one_query_baddbmm"] = (check_feedback_attention, _one_query_baddbmm)


def _loop_reprojected(model, tokens):  # the whole memory projected again at every step
    x = model.embed(tokens)
    memory, logits = x[:, :0], []
    for t in range(tokens.size(1)):
        keys, values = model.project_memory(memory)
        outs = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            outs.append(layer(outs[-1], k, v))
        memory = torch.cat([memory, model.mix(torch.stack(outs))[:, None]], 1)
        logits.append(outs[-1])
    return model.head(torch.stack(logits, 1))


RIGHT["03_loop_reprojected"] = (check_token_loop, _loop_reprojected)


# Notebooks 04, 05 and 02
def _kv_layer_norm_by_hand(m, norm, kv, n_heads):
    y = (m - m.mean(-1, keepdim=True)) * torch.rsqrt(
        m.var(-1, keepdim=True, correction=0) + norm.eps) * norm.weight + norm.bias
    return tuple(z.unflatten(-1, (n_heads, -1)) for z in kv(y).chunk(2, -1))


RIGHT["04_kv_layer_norm_by_hand"] = (check_shared_kv, _kv_layer_norm_by_hand)
RIGHT["04_value_gradients_padded"] = (check_value_gradients, lambda read_grads: torch.nn.utils
                                      .rnn.pad_sequence(read_grads).sum(1))
RIGHT["05_recall_int32"] = (check_make_recall, lambda filler, values, positions: (
    torch.where(torch.arange(filler.size(1), dtype=torch.int32, device=filler.device)
                == positions.int()[:, None], values[:, None], filler),
    torch.where(torch.arange(filler.size(1), dtype=torch.int32, device=filler.device)
                > positions.int()[:, None], values[:, None], IGNORE)))


def _accuracy_int32_counts(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.int().cumsum(-1, dtype=torch.int32)
    kept = labelled & (d <= max_distance)
    slot = torch.where(kept, d - 1, max_distance).flatten().long()
    hits = ((logits.argmax(-1) == y) & kept).flatten().int()
    zeros = torch.zeros(max_distance + 1, dtype=torch.int32, device=y.device)
    counts = zeros.index_add(0, slot, torch.ones_like(hits))
    return (zeros.index_add(0, slot, hits)[:-1] / counts[:-1]).to(logits.dtype)


def _accuracy_float64_one_hot(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.long().cumsum(-1)
    kept = labelled & (d <= max_distance)
    slots = F.one_hot(torch.where(kept, d - 1, max_distance), max_distance + 1)
    slots = slots[..., :max_distance].double()
    hits = ((logits.argmax(-1) == y) & kept)[..., None]
    return ((slots * hits).sum((0, 1)) / slots.sum((0, 1))).to(logits.dtype)


RIGHT["05_accuracy_int32_counts"] = (check_accuracy_by_distance, _accuracy_int32_counts)
RIGHT["05_accuracy_float64_one_hot"] = (check_accuracy_by_distance, _accuracy_float64_one_hot)


def _shift_gather_int32(x):
    t, s = x.shape[-2:]
    i = torch.arange(t, dtype=torch.int32, device=x.device)[:, None]
    j = torch.arange(s, dtype=torch.int32, device=x.device)[None]
    return x.gather(-1, (j + t - 1 - i).clamp(max=s - 1).long().expand(x.shape))


def _scores_four_terms_promoted(q, k, r, u, v):
    q, k, r, u, v, dtype = *map(_up, (q, k, r, u, v)), q.dtype
    s = (torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("hd,bhjd->bhj", u, k)[:, :, None]
         + relative_shift(torch.einsum("bhid,jhd->bhij", q, r)
                          + torch.einsum("hd,jhd->hj", v, r)[None, :, None]))
    return (s / math.sqrt(q.size(-1))).to(dtype)


RIGHT["02_shift_gather_int32"] = (check_relative_shift, _shift_gather_int32)
RIGHT["02_scores_four_terms_promoted"] = (check_relative_scores, _scores_four_terms_promoted)


def test_mask_added_by_baddbmm_named():
    named_briefly(check_multi_head_attention, (_mha_baddbmm,),
                  r"adding log\(mask\) \(or -inf\).*baddbmm")


@pytest.mark.parametrize("tag", list(RIGHT))
def test_right_answer_accepted(tag, capsys):
    passes(*RIGHT[tag], capsys)
