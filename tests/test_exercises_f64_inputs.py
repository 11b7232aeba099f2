"""The float64 rounds of notebooks 01, 04 and 05 (an audit after trials 47a and 47c): each
check runs the answer once more in float64 to catch a float32 step (`.float()`) on the way,
but where those float64 inputs were float32 numbers cast up (`torch.randn(...).double()`),
a `.float()` on an input lost nothing and passed. Passed: in notebook 01, a `.float()` on q
or k of `attention_weights`, on q, k or v of `attention`, on x in `split_heads` or
`merge_heads`, on x or on any weight or bias of `mha` in `multi_head_attention`; in notebook
04, on `kv.bias` in `shared_kv` (46b fixed `kv.weight`). Each is cast back to the input's
dtype (`.to(x.dtype)`), so the result is float64 but only float32-accurate.
Refused already, and kept here: a `.float()` on m, `norm.weight`, `norm.bias` or
`kv.weight` in `shared_kv`, on x or on the gradient in `Square`, on a read's gradient in
`value_gradients`, on the value or the gradient in `Append`, on either input of
`weight_gradient` (those inputs are drawn in float64), on the logits of
`accuracy_by_distance` (notebook 05's `rounded_argmax` round). The right answers beside
them compute in float64 throughout, in other styles (einsum, torch's fused attention,
unflatten and permute, a LayerNorm written out). Left as it is: `accuracy_by_distance`'s
float64 round compares the dtype only (`precise=False`), since a ratio of counts taken in
float32 (`hits.sum() / n` is float32 by torch's default) is a right answer there."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv, check_square,
                                              check_value_gradients, check_weight_gradient)
from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_heads, check_multi_head_attention)
from labnn.exercises.three_memories import check_accuracy_by_distance

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
F32 = r"float64 but only float32-accurate.*float32 step"


def keep(t):
    return t


def via32(t):  # a float32 step, cast back to the input's dtype
    return None if t is None else t.float().to(t.dtype)


# ---- notebook 01, Exercise 1: attention_weights ----
def _weights(cq=keep, ck=keep):
    def attention_weights(q, k):
        return (cq(q) @ ck(k).transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    return attention_weights


def aw_einsum(q, k):
    return torch.einsum("...td,...sd->...ts", q * q.size(-1) ** -0.5, k).softmax(dim=-1)


def aw_exp_written_out(q, k):
    s = torch.matmul(q, k.mT) / math.sqrt(q.shape[-1])
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


RIGHT["aw"] = (check_attention_weights, _weights())
RIGHT["aw_einsum"] = (check_attention_weights, aw_einsum)
RIGHT["aw_exp_written_out"] = (check_attention_weights, aw_exp_written_out)
case("aw_q_float", check_attention_weights, _weights(cq=via32), F32)
case("aw_k_float", check_attention_weights, _weights(ck=via32), F32)


# ---- notebook 01, Exercise 2: attention ----
def _attention(cq=keep, ck=keep, cv=keep):
    def attention(q, k, v, mask=None):
        s = cq(q) @ ck(k).transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            return s.softmax(-1) @ cv(v)
        w = s.masked_fill(~mask, float("-inf")).softmax(-1)
        return w.masked_fill(~mask.any(-1, keepdim=True), 0.0) @ cv(v)
    return attention


def att_fused(q, k, v, mask=None):
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return y if mask is None else y.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def att_einsum_nan_to_num(q, k, v, mask=None):
    s = torch.einsum("...td,...sd->...ts", q, k) / q.size(-1) ** 0.5
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -math.inf)
    return torch.einsum("...ts,...sd->...td", s.softmax(-1).nan_to_num(0.0), v)


RIGHT["att"] = (check_attention, _attention())
case("att_fused", check_attention, att_fused,
     r"torch's fused attention is refused")  # refused since trial 53f
RIGHT["att_einsum_nan_to_num"] = (check_attention, att_einsum_nan_to_num)
case("att_q_float", check_attention, _attention(cq=via32), F32)
case("att_k_float", check_attention, _attention(ck=via32), F32)
case("att_v_float", check_attention, _attention(cv=via32), F32)


# ---- notebook 01, Exercise 4: split and merge heads ----
def _split(cast=keep):
    def split_heads(x, h):
        b, t, d = x.shape
        return cast(x).view(b, t, h, d // h).transpose(1, 2)
    return split_heads


def _merge(cast=keep):
    def merge_heads(x):
        b, h, t, dh = x.shape
        return cast(x).transpose(1, 2).reshape(b, t, h * dh)
    return merge_heads


def split_unflatten(x, h):
    return x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)


def merge_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


RIGHT["heads"] = (check_heads, _split(), _merge())
RIGHT["heads_unflatten"] = (check_heads, split_unflatten, merge_flatten)
case("split_x_float", check_heads, (_split(via32), _merge()), F32)
case("merge_x_float", check_heads, (_split(), _merge(via32)), F32)


# ---- notebook 01, Exercise 5: multi-head attention ----
def _mha(x_=keep, wq=keep, bq=keep, wo=keep, bo=keep):
    """Multi-head attention through F.linear, with a cast on x or on one parameter."""
    def multi_head_attention(x, mha, mask=None):
        qkv = F.linear(x_(x), wq(mha.qkv.weight), bq(mha.qkv.bias))
        q, k, v = (_split()(z, mha.n_heads) for z in qkv.chunk(3, dim=-1))
        y = _merge()(_attention()(q, k, v, mask))
        return F.linear(y, wo(mha.out_proj.weight), bo(mha.out_proj.bias))
    return multi_head_attention


def mha_layers_fused(x, mha, mask=None):
    q, k, v = (split_unflatten(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_flatten(att_fused(q, k, v, mask)))


RIGHT["mha"] = (check_multi_head_attention, _mha())
case("mha_layers_fused", check_multi_head_attention, mha_layers_fused,
     r"torch's fused attention is refused")  # refused since trial 53f
case("mha_x_float", check_multi_head_attention, _mha(x_=via32), F32)
case("mha_qkv_weight_float", check_multi_head_attention, _mha(wq=via32), F32)
case("mha_qkv_bias_float", check_multi_head_attention, _mha(bq=via32), F32)
case("mha_out_weight_float", check_multi_head_attention, _mha(wo=via32), F32)
case("mha_out_bias_float", check_multi_head_attention, _mha(bo=via32), F32)


# ---- notebook 04, Exercise 1: shared keys and values ----
def _shared_kv(m_=keep, nw=keep, nb=keep, kw=keep, kb=keep):
    """kv(norm(m)) through the functional forms, with a cast on m or on one parameter."""
    def shared_kv(m, norm, kv, n_heads):
        x = F.layer_norm(m_(m), norm.normalized_shape, nw(norm.weight), nb(norm.bias),
                         norm.eps)
        out = F.linear(x, kw(kv.weight), kb(kv.bias)).view(m.size(0), 2, n_heads, -1)
        return out[:, 0], out[:, 1]
    return shared_kv


def skv_written_out(m, norm, kv, n_heads):
    mu, var = m.mean(-1, keepdim=True), m.var(-1, unbiased=False, keepdim=True)
    x = (m - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias
    k, v = kv(x).chunk(2, dim=-1)
    return tuple(t.unflatten(-1, (n_heads, -1)) for t in (k, v))


RIGHT["skv"] = (check_shared_kv, _shared_kv())
RIGHT["skv_written_out"] = (check_shared_kv, skv_written_out)
SKV = r"only float32-accurate.*float32 step in shared_kv"
case("skv_m_float", check_shared_kv, _shared_kv(m_=via32), SKV)
case("skv_norm_weight_float", check_shared_kv, _shared_kv(nw=via32), SKV)
case("skv_norm_bias_float", check_shared_kv, _shared_kv(nb=via32), SKV)
case("skv_kv_weight_float", check_shared_kv, _shared_kv(kw=via32), SKV)
case("skv_kv_bias_float", check_shared_kv, _shared_kv(kb=via32), SKV)


# ---- notebook 04, Exercises 2-4: Square, value_gradients, Append (float64 inputs already) ----
def _function(forward, backward):
    return type("Attempt", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def _square(cx=keep, cg=keep):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return cx(x) * cx(x)

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * cg(g)
    return _function(forward, backward)


def _value_gradients(cast=keep):
    def value_gradients(read_grads):
        out = torch.zeros_like(read_grads[-1])
        for g in read_grads:
            out[: len(g)] += cast(g)
        return out
    return value_gradients


def _append(cv=keep, cg=keep):
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n].copy_(cv(value))
        ctx.n = n
        return buffer.data[:, : n + 1]

    def backward(ctx, grad):
        return cg(grad[:, : ctx.n]), cg(grad[:, ctx.n]), None
    return _function(forward, backward)


RIGHT["square"] = (check_square, _square())
RIGHT["vg"] = (check_value_gradients, _value_gradients())
RIGHT["append"] = (check_append, _append())
case("square_x_float", check_square, _square(cx=via32), r"only float32-accurate.*in forward")
case("square_grad_float", check_square, _square(cg=via32), r"only float32-accurate.*in backward")
case("vg_read_float", check_value_gradients, _value_gradients(via32),
     r"only float32-accurate.*in value_gradients")
case("append_value_float", check_append, _append(cv=via32), r"rounded to float32.*\.float\(\)")
case("append_grad_float", check_append, _append(cg=via32),
     r"only float32-accurate.*in Append\.backward")


# ---- notebook 04, Exercise 5: the weight gradient ----
def _weight_gradient(cx=keep, cg=keep):
    def weight_gradient(xs, gs):
        return cg(gs).flatten(0, 1).t() @ cx(xs).flatten(0, 1)
    return weight_gradient


def wg_einsum(xs, gs):
    return torch.einsum("tbo,tbi->oi", gs, xs)


RIGHT["wg"] = (check_weight_gradient, _weight_gradient())
RIGHT["wg_einsum"] = (check_weight_gradient, wg_einsum)
WG = r"only float32-accurate.*float32 step in weight_gradient"
case("wg_xs_float", check_weight_gradient, _weight_gradient(cx=via32), WG)
case("wg_gs_float", check_weight_gradient, _weight_gradient(cg=via32), WG)


# ---- notebook 05, Exercise 3: accuracy by distance ----
def _accuracy(cast=keep, hits_dtype=None):
    """Accuracy by distance; `hits_dtype=torch.float32`: the hits counted in float32, the
    ratio of counts then float32's (accepted: the float64 round compares dtypes only)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = (cast(logits).argmax(-1) == y).to(hits_dtype or logits.dtype)
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            if (d == k).any():
                out[k - 1] = hits[d == k].mean()
        return out
    return accuracy_by_distance


RIGHT["acc"] = (check_accuracy_by_distance, _accuracy())
RIGHT["acc_hits_float32"] = (check_accuracy_by_distance, _accuracy(hits_dtype=torch.float32))
case("acc_logits_float", check_accuracy_by_distance, _accuracy(via32),
     r"float64 logits.*\.float\(\) \(float32\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
