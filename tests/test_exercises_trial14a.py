"""Learner trial 14a (issue 28): typical slips on notebooks 01 and 02."""

import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import (
    check_attention, check_attention_weights, check_causal_mask)
from labnn.exercises.self_attention.multi_head import check_heads, check_multi_head_attention
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores, check_relative_shift)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def kt(k):
    return k.transpose(-2, -1)


# --- 01 Ex1: attention_weights -------------------------------------------------
def w_ok(q, k):
    return (q @ kt(k) / math.sqrt(q.size(-1))).softmax(dim=-1)


RIGHT["weights"] = (check_attention_weights, w_ok)
case("w_div_d", check_attention_weights,
     lambda q, k: (q @ kt(k) / q.size(-1)).softmax(-1), r"sqrt|√|scale|\bd\b")
case("w_sqrt_keys", check_attention_weights,
     lambda q, k: (q @ kt(k) / math.sqrt(k.size(1))).softmax(-1), r"sqrt|√|scale|S|keys")
case("w_scale_after", check_attention_weights,
     lambda q, k: (q @ kt(k)).softmax(-1) / math.sqrt(q.size(-1)), r"after|before|sum|scale")
case("w_times_sqrt", check_attention_weights,
     lambda q, k: (q @ kt(k) * math.sqrt(q.size(-1))).softmax(-1), r"multipl|divid|scale")
case("w_log_softmax", check_attention_weights,
     lambda q, k: (q @ kt(k) / math.sqrt(q.size(-1))).log_softmax(-1), r"log|sum|negative")


# --- 01 Ex2: attention ------------------------------------------------------------
def att(q, k, v, mask=None, fill=float("-inf"), scale=None, zero_rows=True):
    s = q @ kt(k) / math.sqrt(scale or q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    a = s.softmax(-1)
    if zero_rows:
        a = a.nan_to_num(0.0)
    return a @ v


RIGHT["attention"] = (check_attention, att)
case("a_fill_zero", check_attention,
     lambda q, k, v, mask=None: att(q, k, v, mask, fill=0.0), r"-inf|0|fill|masked")
case("a_no_nan_guard", check_attention,
     lambda q, k, v, mask=None: att(q, k, v, mask, zero_rows=False), r"NaN|nan|all.False|row")


def a_mask_after(q, k, v, mask=None):
    a = (q @ kt(k) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        a = a * mask
    return a @ v


case("a_mask_after_softmax", check_attention, a_mask_after, r"before|after|renormal|sum")
case("a_fill_big_neg", check_attention,
     lambda q, k, v, mask=None: att(q, k, v, mask, fill=-1e9), r"all.False|zero|row|uniform")
case("a_scale_v", check_attention,
     lambda q, k, v, mask=None: att(q, k, v, mask, scale=v.size(-1)), r"sqrt|scale|value|D_v")


# --- 01 Ex3: causal mask -------------------------------------------------------------
RIGHT["causal"] = (check_causal_mask,
                   lambda t: torch.ones(t, t, dtype=torch.bool).tril())
case("c_strict", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1), r"diagonal|itself|self")
case("c_float", check_causal_mask,
     lambda t: torch.ones(t, t).tril(), r"bool|dtype")
case("c_arange_swap", check_causal_mask,
     lambda t: torch.arange(t)[None, :] >= torch.arange(t)[:, None],
     r"future|upper|j ?<= ?i|transpos|invert")
case("c_long", check_causal_mask,
     lambda t: torch.ones(t, t, dtype=torch.long).tril(), r"bool|dtype")


# --- 01 Ex4: heads ---------------------------------------------------------------------
def split_ok(x, h):
    b, t, d = x.shape
    return x.view(b, t, h, d // h).transpose(1, 2)


def merge_ok(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


RIGHT["heads"] = (check_heads, split_ok, merge_ok)


def split_strided(x, h):
    b, t, d = x.shape
    return x.view(b, t, d // h, h).permute(0, 3, 1, 2)


def merge_no_transpose(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def merge_view(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def merge_head_minor(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def split_view_direct(x, h):
    b, t, d = x.shape
    return x.view(b, h, t, d // h)


case("h_split_strided", check_heads, (split_strided, merge_ok),
     r"head h|contiguous|slice|strided|features")
case("h_merge_no_transpose", check_heads, (split_ok, merge_no_transpose),
     r"merge.*(transpose|token|order)")
case("h_merge_view", check_heads, (split_ok, merge_view), r"view|contiguous|reshape")
case("h_merge_head_minor", check_heads, (split_ok, merge_head_minor),
     r"merge.*(head|order|interleav)")
case("h_split_view_direct", check_heads, (split_view_direct, merge_ok),
     r"split.*(token|mix|transpose|reshape)")


# --- 01 Ex5: multi-head attention ------------------------------------------------------------
def mha_core(x, mha, mask=None, out=True, scale=None, causal=False, layout="ok"):
    b, t, d = x.shape
    h = mha.n_heads
    if layout == "ok":
        q, k, v = (split_ok(z, h) for z in mha.qkv(x).chunk(3, dim=-1))
    else:
        q, k, v = mha.qkv(x).view(b, t, h, 3 * d // h).transpose(1, 2).chunk(3, dim=-1)
    if causal and mask is None:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
    s = q @ kt(k) / math.sqrt(scale or q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    y = merge_ok(s.softmax(-1).nan_to_num(0.0) @ v)
    return mha.out_proj(y) if out else y


RIGHT["mha"] = (check_multi_head_attention, mha_core)
case("m_no_out_proj", check_multi_head_attention,
     lambda x, mha, mask=None: mha_core(x, mha, mask, out=False),
     r"out_proj|W\^?O|output projection")
case("m_scale_D", check_multi_head_attention,
     lambda x, mha, mask=None: mha_core(x, mha, mask, scale=x.size(-1)),
     r"D_h|sqrt|scale|head width")
case("m_qkv_per_head_layout", check_multi_head_attention,
     lambda x, mha, mask=None: mha_core(x, mha, mask, layout="bad"),
     r"chunk|split.*before|Q, K, V|qkv")
case("m_causal_default", check_multi_head_attention,
     lambda x, mha, mask=None: mha_core(x, mha, mask, causal=True), r"None|causal|no mask")


# --- 02 Ex1: update memory ------------------------------------------------------------------------
def um_ok(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach()


RIGHT["update_memory"] = (check_update_memory, um_ok)


def um_neg_slice(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, -mem_len:].detach()


def um_no_detach(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):]


def um_first(mem, h, mem_len):
    c = h if mem is None else torch.cat([mem, h], dim=1)
    return c[:, :mem_len].detach()


def um_order(mem, h, mem_len):
    c = h if mem is None else torch.cat([h, mem], dim=1)
    return c[:, c.size(1) - min(mem_len, c.size(1)):].detach()


def um_h_only(mem, h, mem_len):
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


case("u_neg_slice", check_update_memory, um_neg_slice, r"mem_len ?= ?0|-0|empty")
case("u_no_detach", check_update_memory, um_no_detach, r"detach|gradient|SG")
case("u_first", check_update_memory, um_first, r"last|first|oldest")
case("u_cat_order", check_update_memory, um_order, r"order|\[mem, h\]|before|concaten")
case("u_h_only", check_update_memory, um_h_only, r"mem\b|memory.*(ignor|drop|lost|older)|older")


# --- 02 Ex2: segment mask -------------------------------------------------------------------------
def sm(n, seg_len, mem_len, kind="ok"):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    if kind == "strict":
        return (start - mem_len < j) & (j <= i)
    if kind == "no_causal":
        return (start - mem_len <= j) & (j < start + seg_len)
    if kind == "window":
        return (i - mem_len <= j) & (j <= i)
    if kind == "no_times":
        return (i // seg_len - mem_len <= j) & (j <= i)
    return (start - mem_len <= j) & (j <= i)


RIGHT["segment_mask"] = (check_segment_mask, sm)
case("s_strict", check_segment_mask, lambda n, s, m: sm(n, s, m, "strict"),
     r"<=|strict|oldest|start.*mem_len")
case("s_no_causal", check_segment_mask, lambda n, s, m: sm(n, s, m, "no_causal"),
     r"future|causal|j ?<= ?i")
case("s_window", check_segment_mask, lambda n, s, m: sm(n, s, m, "window"),
     r"start|segment|sliding|window")
case("s_no_times", check_segment_mask, lambda n, s, m: sm(n, s, m, "no_times"),
     r"seg_len|start|\* ?seg_len")


# --- 02 Ex3: relative distances -------------------------------------------------------------
def rd(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


RIGHT["distances"] = (check_relative_distances, rd)
case("d_sign", check_relative_distances, lambda t, m: -rd(t, m), r"sign|j ?- ?i|negat")
case("d_no_m", check_relative_distances,
     lambda t, m: torch.arange(t)[:, None] - torch.arange(m + t)[None, :],
     r"\bm\b|memory|M \+ i|offset")
case("d_float", check_relative_distances, lambda t, m: rd(t, m).float(), r"Long|int|dtype")
case("d_clamp", check_relative_distances, lambda t, m: rd(t, m).clamp(min=0),
     r"negative|future|clamp")


# --- 02 Ex4: relative shift ------------------------------------------------------------------
def shift_ok(x):
    *lead, t, s = x.shape
    xp = F.pad(x, (1, 0))
    return xp.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_pad_right(x):
    *lead, t, s = x.shape
    xp = F.pad(x, (0, 1))
    return xp.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_2d(x):
    t, s = x.shape[-2:]
    xp = F.pad(x, (1, 0))
    return xp.view(s + 1, t)[1:].view(t, s)


def shift_drop_last(x):
    *lead, t, s = x.shape
    xp = F.pad(x, (1, 0))
    return xp.reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def shift_by_i(x):
    t, s = x.shape[-2:]
    i = torch.arange(t)[:, None]
    j = torch.arange(s)[None, :]
    idx = (j + i).clamp(max=s - 1).expand(*x.shape)
    return x.gather(-1, idx)


RIGHT["shift"] = (check_relative_shift, shift_ok)
case("r_pad_right", check_relative_shift, shift_pad_right, r"pad.*(front|left|first)|front|left")
case("r_2d_only", check_relative_shift, shift_2d, r"leading|batch|\.\.\.|any")
case("r_flip", check_relative_shift, lambda x: x.flip(-1), r"shift|slide|row|T - 1 - i|flip")
case("r_drop_last", check_relative_shift, shift_drop_last, r"first row|drop")
case("r_shift_by_i", check_relative_shift, shift_by_i, r"slides left by i.*T - 1 - i")


# --- 02 Ex5: relative scores ---------------------------------------------------------------------
def rs(q, k, r, u, v, swap=False, shift=True, scale_all=True, bcast=True, r_view=False,
       no_d=False):
    if swap:
        u, v = v, u
    d = q.size(-1)
    uu, vv = (u[:, None], v[:, None]) if bcast else (u, v)
    rr = r.reshape(r.size(1), r.size(0), -1) if r_view else r.permute(1, 0, 2)
    ac = (q + uu) @ kt(k)
    bd = (q if no_d else q + vv) @ kt(rr)
    if shift:
        bd = relative_shift(bd)
    return (ac + bd) / math.sqrt(d) if scale_all else ac / math.sqrt(d) + bd


RIGHT["scores"] = (check_relative_scores, rs)
case("z_swap_uv", check_relative_scores, lambda *a: rs(*a, swap=True),
     r"\bu\b.*\bv\b|swap|content|position")
case("z_no_shift", check_relative_scores, lambda *a: rs(*a, shift=False), r"relative_shift|shift")
case("z_scale_content", check_relative_scores, lambda *a: rs(*a, scale_all=False),
     r"sqrt|scale|divid")
case("z_no_head_bcast", check_relative_scores, lambda *a: rs(*a, bcast=False),
     r"head|broadcast|\[H, 1")
case("z_r_reshape", check_relative_scores, lambda *a: rs(*a, r_view=True),
     r"permute|transpose|reshape|heads")
case("z_no_term_d", check_relative_scores, lambda *a: rs(*a, no_d=True),
     r"\bv\b|position bias|term|\(d\)")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
