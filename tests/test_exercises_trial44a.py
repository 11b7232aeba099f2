"""Trial 44a: a blind learner trial of notebook 01's Exercises 1, 3, 4 and 5 (316 answers).

Wrong answers that passed: Exercise 5 with the empty rows zeroed after `@ v` (NaN gradients;
its only gradient round had no empty row); Exercise 1 through a float32 step cast back, or
with a small constant added (its float64 round checked the dtype only); Exercise 3 cut from
a fixed 64 x 64 mask, or from positions in uint8 (the largest t tried was 40). And messages
that blamed a mistake not made, or showed torch's error alone."""
import math

from checker_helpers import trial_case, trial_tests

import torch
import torch.nn.functional as F

from labnn.exercises.self_attention import (check_attention_weights, check_causal_mask,
                                            check_heads, check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _split(z, h):
    b, t, d = z.shape
    return z.view(b, t, h, d // h).transpose(1, 2)


def _merge(z):
    b, h, t, dh = z.shape
    return z.transpose(1, 2).reshape(b, t, h * dh)


def _mha_zeroed(zero):
    """Exercise 5 with -inf fills, the empty rows zeroed by `zero(y, empty)` after `@ v`."""
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        y = s.softmax(-1) @ v
        if mask is not None:
            y = zero(y, ~mask.any(-1, keepdim=True))
        return mha.out_proj(_merge(y))
    return multi_head_attention


AFTER_V = r"(?s)NaN.*gradient|gradient.*NaN"
case("mha_zero_after_v", check_multi_head_attention,
     _mha_zeroed(lambda y, empty: y.masked_fill(empty, 0.0)), AFTER_V)
case("mha_where_after_v", check_multi_head_attention,
     _mha_zeroed(lambda y, empty: torch.where(empty, 0.0, y)), AFTER_V)


def _mha_nan_to_num(x, mha, mask=None):
    q, k, v = (_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj(_merge(s.softmax(-1) @ v).nan_to_num(0.0))


case("mha_nan_to_num_merged", check_multi_head_attention, _mha_nan_to_num, AFTER_V)


def _mha_right(x, mha, mask=None):
    q, k, v = (_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj(_merge(w @ v))


RIGHT["mha_zero_after_softmax"] = (check_multi_head_attention, _mha_right)


def _mha_chunk_dim1(x, mha, mask=None):
    """The fused weight cut along its input axis: [3D, D].chunk(3, dim=1) is three [3D, D/3]."""
    wq, wk, wv = mha.qkv.weight.chunk(3, dim=1)
    bq, bk, bv = mha.qkv.bias.chunk(3)
    q, k, v = (_split(x @ w + b, mha.n_heads) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    return mha.out_proj(_merge(F.scaled_dot_product_attention(q, k, v)))


case("mha_weight_chunk_dim1", check_multi_head_attention, _mha_chunk_dim1,
     r"(?s)^(?!.*count their axes from the end).*(chunk\(3, dim=0\)|rows of the weight|"
     r"\[3D, D\])")


# ---- Exercise 1 ----
def _w_float32(q, k):
    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.size(-1))
    return s.softmax(dim=-1).to(q.dtype)


case("w_float32_step", check_attention_weights, _w_float32, r"only float32-accurate")
case("w_plus_1e-5", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) + 1e-5,
     r"(?i)constant|eps")


def _w_eps(eps):
    def attention_weights(q, k):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        e = (s - s.amax(-1, keepdim=True)).exp()
        return e / (e.sum(-1, keepdim=True) + eps)
    return attention_weights


case("w_eps_1e-5", check_attention_weights, _w_eps(1e-5), r"(?i)constant|eps")
case("w_eps_1e-4", check_attention_weights, _w_eps(1e-4),
     r"(?s)^(?!.*detached).*(constant|eps)")
case("w_sqrt_16", check_attention_weights,
     lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(16)).softmax(-1),
     r"(?s)sqrt\(16\).*q\.size\(-1\)")
case("w_no_transpose", check_attention_weights,
     lambda q, k: (q @ k / math.sqrt(q.size(-1))).softmax(-1),
     r"(?i)transpose")
RIGHT["w_log_softmax_exp"] = (check_attention_weights, lambda q, k: (
    q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).log_softmax(-1).exp())


# ---- Exercise 3 ----
BIG = torch.ones(64, 64, dtype=torch.bool).tril()  # the notebook's context length
case("cm_fixed_64", check_causal_mask, lambda t: BIG[:t, :t], r"(?i)fixed size")


def _cm_uint8(t):
    a = torch.arange(t).to(torch.uint8)
    return a[None, :] <= a[:, None]


case("cm_uint8_positions", check_causal_mask, _cm_uint8, r"(?i)uint8|255|256|wrap")
case("cm_t0_one", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).tril() if t > 1
     else torch.ones(1, 1, dtype=torch.bool),
     r"(?s)^(?!.*empty list).*\[0, 0\]")
RIGHT["cm_tril"] = (check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril())


# ---- Exercise 4 ----
def _merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


case("heads_fixed_width", check_heads,
     (lambda x, n_heads: x.view(x.size(0), x.size(1), n_heads, 32).transpose(1, 2),
      _merge_heads),
     r"(?s)32.*(d_head|x\.size\(-1\) // n_heads|head width)")
case("heads_torch_split", check_heads,
     (lambda x, n_heads: torch.stack(torch.split(x, n_heads, dim=-1), dim=1), _merge_heads),
     r"(?s)torch\.split.*(size|chunk)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
