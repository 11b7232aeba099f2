"""Trial 65, notebook 01 (a learner's trial of the five exercises).

Misnamed (a generic "differs"): a mask with its diagonal forced on (`mask | torch.eye(T, S)`,
or its diagonal filled with True), harmless for the causal mask but not for a padding
one, in Exercises 2 and 5; in Exercise 2 `mask | torch.eye(T)` with T != S crashed with
torch's bare broadcast error. Scores divided by a number per query (`q.norm(dim=-1)`,
queries normalised, the std of each row, a layer norm of the scores) in Exercises 1, 2 and
5, and multi-head scores divided by a constant of no listed form (`sqrt(D_h) / H`,
`sqrt(D_h) * H`, `D_h / H`): the scale is now fitted from the answer (Exercise 5: from
each head's weights, recovered from the output). Exercise 5's heads split as
`.view(B, H, T, D_h)` of a chunk of `mha.qkv(x)` (no transpose) crashed under a notice
that blamed the merge (a .view on transposed heads); a head width read as 3 * D_h
(`mha.qkv.out_features // n_heads`) or D crashed under a notice about Exercises 1-2 on 4-D
heads. A query with no allowed key that attends one key alone (a key forced on, e.g.
key 0, to avoid the NaN) got only "differs" in Exercises 2 and 5; so did scores divided by
each key's length (`k.norm(dim=-1)`, keys normalised) in Exercises 1, 2 and 5.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k, scale):
    return q @ k.transpose(-2, -1) / scale(q)


def _attention(mask_of=lambda mask: mask, scale=lambda q: math.sqrt(q.size(-1)),
               zero=lambda w, m: w.masked_fill(~m.any(-1, keepdim=True), 0.0)):
    """Exercise 2's attention with the mask changed by `mask_of`, the scores divided by
    `scale(q)` and the empty rows zeroed by `zero(weights, mask)`."""
    def attention(q, k, v, mask=None):
        s = _scores(q, k, scale)
        m = None if mask is None else mask_of(mask)
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        w = s.softmax(-1)
        return (w if m is None else zero(w, m)) @ v
    return attention


def _mha(attention, split=lambda z, b, t, h: z.view(b, t, h, -1).transpose(1, 2)):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (split(z, b, t, mha.n_heads) for z in mha.qkv(x).chunk(3, -1))
        return mha.out_proj(attention(q, k, v, mask).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


def _eye(mask, square=False):
    t, s = mask.shape[-2:]
    return torch.eye(t, t if square else s, dtype=torch.bool, device=mask.device)


def _diagonal_filled(mask):
    mask = mask.clone()
    mask.diagonal(dim1=-2, dim2=-1).fill_(True)
    return mask


DIAGONAL = r"diagonal is forced on \(mask \| torch\.eye.*padding"
case("attention_mask_or_eye", check_attention, _attention(lambda m: m | _eye(m)), DIAGONAL)
case("attention_diagonal_filled", check_attention, _attention(_diagonal_filled), DIAGONAL)
case("attention_mask_or_square_eye", check_attention,
     _attention(lambda m: m | _eye(m, square=True)), DIAGONAL)
case("mha_mask_or_eye", check_multi_head_attention, _mha(_attention(lambda m: m | _eye(m))),
     DIAGONAL)

Q_NORM = r"divided by q\.norm\(dim=-1\), each query's length.*one number for every query"
case("weights_q_norm", check_attention_weights,
     lambda q, k: _scores(q, k, lambda q: q.norm(dim=-1, keepdim=True)).softmax(-1), Q_NORM)
case("attention_q_norm", check_attention,
     _attention(scale=lambda q: q.norm(dim=-1, keepdim=True)), Q_NORM)
case("mha_q_norm", check_multi_head_attention,
     _mha(_attention(scale=lambda q: q.norm(dim=-1, keepdim=True))),
     r"in each head your scores are divided by q\.norm\(dim=-1\).*sqrt\(D_h\) = sqrt\(6\)")


def _normalised_queries(x, mha, mask=None):
    b, t, d = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in mha.qkv(x).chunk(3, -1))
    y = _attention(scale=lambda q: 1.0)(F.normalize(q, dim=-1), k, v, mask)
    return mha.out_proj(y.transpose(1, 2).reshape(b, t, d))


case("mha_normalised_queries", check_multi_head_attention, _normalised_queries,
     r"in each head your scores are divided by q\.norm\(dim=-1\)")
case("weights_row_std", check_attention_weights,
     lambda q, k: (lambda s: (s / s.std(-1, keepdim=True)).softmax(-1))(q @ k.mT),
     r"divided by the spread \(std\) of each query's own scores")
case("weights_layer_norm", check_attention_weights,
     lambda q, k: F.layer_norm(q @ k.mT, (k.size(-2),)).softmax(-1),
     r"spread \(std, unbiased=False\) of each query's own scores \(a layer norm")
case("weights_q_norm_root", check_attention_weights,
     lambda q, k: _scores(q, k, lambda q: q.norm(dim=-1, keepdim=True).sqrt()).softmax(-1),
     r"q\.norm\(dim=-1\)\.sqrt\(\)")

HEAD_SCALE = r"divided by {} = {}, not by sqrt\(D_h\) = sqrt\(mha\.d_head\) = sqrt\(6\)"
case("mha_sqrt_dh_over_h", check_multi_head_attention,
     _mha(_attention(scale=lambda q: math.sqrt(q.size(-1)) / 4)),
     HEAD_SCALE.format("0.6124", r"sqrt\(D_h\) / n_heads"))
case("mha_sqrt_dh_times_h", check_multi_head_attention,
     _mha(_attention(scale=lambda q: math.sqrt(q.size(-1)) * 4)),
     HEAD_SCALE.format("9.798", r"sqrt\(D_h\) \* n_heads"))
case("mha_dh_over_h", check_multi_head_attention,
     _mha(_attention(scale=lambda q: q.size(-1) / 4)),
     HEAD_SCALE.format("1.5", r"D_h / n_heads"))


def _view_no_transpose(z, b, t, h):
    return z.view(b, h, t, -1)


case("mha_split_view_no_transpose", check_multi_head_attention,
     _mha(_attention(), split=_view_no_transpose),
     r"\.view of a \[B, T, D\] chunk of mha\.qkv\(x\) straight to \[B, H, T, D_h\].*"
     r"\.view\(B, T, H, D_h\)\.transpose\(1, 2\)")


K_NORM = r"divided by k\.norm\(dim=-1\), each key's length \(keys normalised\)"
case("weights_k_norm", check_attention_weights,
     lambda q, k: (q @ k.mT / k.norm(dim=-1)[..., None, :]).softmax(-1), K_NORM)


def _keys_normalised(q, k, v, mask=None):
    return _attention(scale=lambda q: 1.0)(q, F.normalize(k, dim=-1), v, mask)


case("attention_k_norm", check_attention, _keys_normalised, K_NORM)
case("mha_k_norm", check_multi_head_attention, _mha(_keys_normalised),
     r"in each head your scores are divided by k\.norm\(dim=-1\)")

def _first_key_forced(mask):
    return torch.cat([torch.ones_like(mask[..., :1]), mask[..., 1:]], -1)


ALONE = r"mask row is all False \(i=\d\) attends key j=0 alone: a key forced on"
case("attention_first_key_forced", check_attention, _attention(_first_key_forced), ALONE)
case("mha_first_key_forced", check_multi_head_attention, _mha(_attention(_first_key_forced)),
     ALONE)


def _head_width(width):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, mha.n_heads, width(mha, x)).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, -1))
        return mha.out_proj(_attention()(q, k, v, mask).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


case("mha_head_width_qkv_out", check_multi_head_attention,
     _head_width(lambda mha, x: mha.qkv.out_features // mha.n_heads),
     r"makes heads 18 = 3 \* D_h wide: mha\.qkv's out_features.*mha\.d_head")
case("mha_head_width_d_model", check_multi_head_attention,
     _head_width(lambda mha, x: x.size(-1)),
     r"gives each of the 4 heads all 24 features; a head is mha\.d_head")

RIGHT["attention_where_zeroed"] = (check_attention, _attention(
    zero=lambda w, m: torch.where(m.any(-1, keepdim=True), w, torch.zeros_like(w))))


def _queries_scaled_first(q, k, v, mask=None):
    return _attention(scale=lambda q: 1.0)(q / math.sqrt(q.size(-1)), k, v, mask)


RIGHT["attention_scaled_queries"] = (check_attention, _queries_scaled_first)
RIGHT["mha_scale_by_key_width"] = (check_multi_head_attention, _mha(_attention(
    scale=lambda q: q.size(-1) ** 0.5)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
