"""Learner trial 31 (a): notebooks 01 and 02. A `.float()` in split/merge heads and a float32
empty memory (only float64 inputs show them); the backward NaN of an additive -inf or of a
hand-written softmax over a row with no allowed key; a large negative fill that does not
empty such a row; q transposed instead of k; a scale rounded to an int; a half-precision
round trip; a layer made inside multi-head attention; mha.qkv never applied; a fixed
memory length; M where T belongs in the shift's gather; and the right answers these checks
must accept."""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl import (check_relative_scores, check_relative_shift,
                                            check_segment_mask, check_update_memory)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


# ---- notebook 01, Exercise 1: attention_weights ----
def aw_q_transposed(q, k):
    return (q.transpose(-2, -1) @ k / math.sqrt(q.size(-1))).softmax(-1)


def aw_half(q, k):
    return (q.half() @ k.half().transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1).to(q.dtype)


def aw_int_sqrt(q, k):
    return (q @ k.transpose(-2, -1) / int(math.sqrt(q.size(-1)))).softmax(-1)


def aw_permute(q, k):
    return (q @ k.permute(0, 2, 1) / math.sqrt(q.size(-1))).softmax(-1)


def aw_24(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(24)).softmax(-1)


def aw_right_mT(q, k):
    return F.softmax(q @ k.mT / (q.shape[-1] ** 0.5), dim=-1)


RIGHT["aw_mT"] = (check_attention_weights, aw_right_mT)
case("aw_q_transposed", check_attention_weights, aw_q_transposed,
     r"transpose k, not q.*q @ k\.transpose\(-2, -1\)")
case("aw_half", check_attention_weights, aw_half, r"^(?!.*must sum to 1).*half-precision")
case("aw_int_sqrt", check_attention_weights, aw_int_sqrt,
     r"4 = sqrt\(16\).*int\(sqrt\(24\)\), the scale rounded")
case("aw_permute", check_attention_weights, aw_permute,
     r"^(?!.*sparse_coo).*k\.permute\(0, 2, 1\).*k\.transpose\(-2, -1\)")
case("aw_24", check_attention_weights, aw_24,
     r"^(?!.*rounds).*sqrt\(24\), the width of the check's first inputs.*q\.size\(-1\)")


# ---- notebook 01, Exercise 2: attention ----
def _masked(scores, fill=float("-inf"), zero_rows=True):
    """Attention whose scores go through `scores(s, mask)`, the masked ones filled with
    `fill`; `zero_rows`: an empty row's weights zeroed after the softmax."""
    def attention(q, k, v, mask=None):
        s = _scores(q, k)
        if mask is None:
            return s.softmax(-1) @ v
        w = scores(s, mask, fill).softmax(-1)
        return (w.masked_fill(~mask.any(-1, keepdim=True), 0.0) if zero_rows else w) @ v
    return attention


def _hand_softmax(divisor):
    """Attention with a softmax written out, exp(s - max) masked and divided by
    `divisor(z)`, z its sum over the keys."""
    def attention(q, k, v, mask=None):
        s = _scores(q, k)
        e = (s - s.amax(-1, keepdim=True)).exp()
        e = e if mask is None else e * mask
        return (e / divisor(e.sum(-1, keepdim=True))) @ v
    return attention


_attention = _masked(lambda s, mask, fill: s.masked_fill(~mask, fill))
att_log_mask_zeroed = _masked(lambda s, mask, fill: s + torch.log(mask.to(s.dtype)))
att_clamped_sum = _hand_softmax(lambda z: z.clamp_min(torch.finfo(z.dtype).tiny))
att_minus_1e4 = _masked(lambda s, mask, fill: s - (~mask).to(s.dtype) * 1e4, zero_rows=False)
att_row_unmasked = _masked(lambda s, mask, fill: s.masked_fill(
    ~(mask | ~mask.any(-1, keepdim=True)), fill), zero_rows=False)
att_right_where_den = _hand_softmax(lambda z: torch.where(z == 0, torch.ones_like(z), z))
att_right_finfo_min = _masked(lambda s, mask, fill: s.masked_fill(~mask, fill),
                              fill=torch.finfo(torch.float32).min)


def att_right_nan_to_num(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v


# exp(s - max over every key), masked afterwards: right until a masked key scores far above
# the allowed ones, whose exp then underflow to 0 (re-trial 43)
case("att_where_den", check_attention, att_right_where_den, r"masked key scoring 200 above")
RIGHT["att_nan_to_num"] = (check_attention, att_right_nan_to_num)
# the float32 minimum: right in float32, but it overflows bfloat16 and float16, which
# torch.autocast gives the scores (trial 46a; torch.finfo(s.dtype).min fits every dtype)
case("att_finfo_min", check_attention, att_right_finfo_min, r"(?i)float16|bfloat16|half")
case("att_log_mask_zeroed", check_attention, att_log_mask_zeroed,
     r"adding log\(mask\) \(or -inf\).*NaN.*masked_fill\(~mask, float\('-inf'\)\)")
case("att_clamped_sum", check_attention, att_clamped_sum,  # both mistakes are there
     r"^(?!.*softmax of only -inf).*(no allowed key.*0/0.*division|masked key scoring 200)")
case("att_minus_1e4", check_attention, att_minus_1e4,
     r"large negative.*does not empty.*-inf.*zero")
case("att_row_unmasked", check_attention, att_row_unmasked,
     r"no allowed key.*-inf.*zero")


# ---- notebook 01, Exercise 3: causal_mask ----
def causal_fixed_5(t):
    return torch.ones(5, 5, dtype=torch.bool).tril()


case("causal_fixed_5", check_causal_mask, causal_fixed_5,
     r"^(?!.*and so has).*shape \[5, 5\] for t = 4.*t = 5.*fixed size")


# ---- notebook 01, Exercise 4: split and merge heads ----
def _split(cast=lambda x: x):
    def split_heads(x, h):
        b, t, d = x.shape
        return cast(x).view(b, t, h, d // h).transpose(1, 2)
    return split_heads


def _merge(cast=lambda x: x):
    def merge_heads(x):
        b, h, t, dh = x.shape
        return cast(x).transpose(1, 2).reshape(b, t, h * dh)
    return merge_heads


split_heads, merge_heads = _split(), _merge()
split_float, merge_float = _split(torch.Tensor.float), _merge(torch.Tensor.float)


def split_chunk(x, h):
    return torch.stack(x.chunk(h, dim=-1), dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


RIGHT["heads"] = (check_heads, split_heads, merge_heads)
RIGHT["heads_chunk"] = (check_heads, split_chunk, merge_cat)
case("split_float", check_heads, (split_float, merge_heads), r"float64.*Keep the inputs' dtype")
case("merge_float", check_heads, (split_heads, merge_float), r"float64.*Keep the inputs' dtype")


# ---- notebook 01, Exercise 5: multi-head attention ----
def mha_right(x, mha, mask=None):
    q, k, v = (split_heads(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return mha.out_proj(merge_heads(_attention(q, k, v, mask)))


def mha_new_linear(x, mha, mask=None):
    proj = torch.nn.Linear(x.size(-1), x.size(-1))
    q, k, v = (split_heads(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
    return proj(merge_heads(_attention(q, k, v, mask)))


def mha_no_qkv(x, mha, mask=None):
    h = split_heads(x, mha.n_heads)
    return mha.out_proj(merge_heads(_attention(h, h, h, mask)))


RIGHT["mha"] = (check_multi_head_attention, mha_right)
case("mha_new_linear", check_multi_head_attention, mha_new_linear,
     r"^(?!.*dropout).*created inside.*fresh random weights.*mha\.out_proj.*mha\.qkv")
case("mha_no_qkv", check_multi_head_attention, mha_no_qkv, r"mha\.qkv is never applied")


# ---- notebook 02, Exercise 1: update_memory ----
def _memory(empty=lambda h: h[:, :0].detach(), keep=lambda mem_len: mem_len):
    """update_memory with `empty(h)` for mem_len = 0 and the last `keep(mem_len)` states."""
    def update_memory(mem, h, mem_len):
        if keep(mem_len) == 0:
            return empty(h)
        cat = h if mem is None else torch.cat([mem, h], 1)
        return cat[:, -keep(mem_len):].detach()
    return update_memory


mem_right, mem_right_new_zeros = _memory(), _memory(lambda h: h.new_zeros(h.size(0), 0, h.size(2)))
mem_zeros_for_0 = _memory(lambda h: torch.zeros(h.size(0), 0, h.size(2)))
mem_fixed_8 = _memory(keep=lambda mem_len: 8)


RIGHT["mem"] = (check_update_memory, mem_right)
RIGHT["mem_new_zeros"] = (check_update_memory, mem_right_new_zeros)
case("mem_zeros_for_0", check_update_memory, mem_zeros_for_0,
     r"float64.*float32.*mem_len = 0.*h\.new_zeros.*h\[:, :0\]")
case("mem_fixed_8", check_update_memory, mem_fixed_8,
     r"^(?!.*\[B, D, D\]).*kept 8 states.*mem_len = 6.*argument")


# ---- notebook 02, Exercise 2: segment_mask ----
def _segment(n, seg_len, mem_len, sign=-1):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j >= (i // seg_len) * seg_len + sign * mem_len) & (j <= i)


def seg_plus_mem(n, seg_len, mem_len):
    return _segment(n, seg_len, mem_len, sign=1)


def seg_additive(n, seg_len, mem_len):
    return torch.zeros(n, n).masked_fill(~_segment(n, seg_len, mem_len), float("-inf"))


RIGHT["seg"] = (check_segment_mask, _segment)
case("seg_plus_mem", check_segment_mask, seg_plus_mem, r"\+ mem_len.*sign.*start\(i\) - mem_len")
case("seg_additive", check_segment_mask, seg_additive,
     r"additive float mask.*True = may attend.*\.bool\(\) would invert")


# ---- notebook 02, Exercise 4: relative_shift ----
def _gather(x, offset):
    t, s = x.shape[-2:]
    i, j = (torch.arange(n, device=x.device) for n in (t, s))  # where x is (a GPU)
    col = (offset(t, s - t) - i[:, None] + j[None, :]).clamp(0, s - 1)
    return torch.gather(x, -1, col.expand(*x.shape[:-2], t, s))


def shift_right(x):
    return _gather(x, lambda t, m: t - 1)


def shift_gather_m(x):
    return _gather(x, lambda t, m: m - 1)


def shift_gather_plus_1(x):
    return _gather(x, lambda t, m: t)


RIGHT["shift_gather"] = (check_relative_shift, shift_right)
case("shift_gather_m", check_relative_shift, shift_gather_m,
     r"^(?!.*1 too far).*M - 1 - i \+ j.*M where T belongs")
case("shift_gather_plus_1", check_relative_shift, shift_gather_plus_1, r"1 too far right")


def scores_from_the_module(q, k, r, u, v):  # labnn's own layer computes the four terms
    from labnn.xl.relative_attention import RelativeMultiHeadAttention

    attn = RelativeMultiHeadAttention(u.numel(), u.size(0))
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
    return attn.scores(q, k, r)


case("scores_from_the_module", check_relative_scores, scores_from_the_module,
     r"runs RelativeMultiHeadAttention\.scores \(labnn\.xl\), the reference")

def fused(q, k, v, mask=None, zero=False):  # torch's fused attention, empty rows as it leaves them
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return y.masked_fill(~mask.any(-1, keepdim=True), 0.0) if zero and mask is not None else y


case("fused_zeroed", check_attention, lambda *a, **kw: fused(*a, **kw, zero=True),
     r"torch's fused attention is refused")  # refused since trial 53f
case("fused_unzeroed", check_attention, fused, r"torch's fused attention is refused")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
