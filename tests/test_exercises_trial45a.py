"""Trial 45a: a blind learner trial of notebook 02's five exercises (307 answers).

Wrong answers that passed: a segment mask or relative distances built from int8 (or
bfloat16, float16) positions, which wrap or round once a text or a memory is longer than the
check's (it tried n <= 10, m + t <= 11); a segment mask that `.squeeze()`s (never n = 1), or
that drops the causal cut when the text fits in one segment (never n < seg_len); a shift or
scores right with a memory but not without one (never S = T); answers that make their zeros,
indices or scale on the CPU (`torch.zeros(...)`, `torch.arange(...)` with no device=), or go
through numpy, and so fail or come back on the CPU when the inputs are on a GPU (a gather by
a CPU index stays accepted: earlier trials list it as right; xfail).
Crashes of the check itself (a bare IndexError): a segment mask that is a sliding window of
seg_len + mem_len + 1 keys; a shift or scores with -inf (or inf) where a query may attend (a
causal mask without the memory's offset).
Messages that blamed the wrong thing: a segment mask written with the notebook's global
SEG = 64, or with fixed sizes, was told it is the plain causal mask because of j's segment
start or i % seg_len."""
import math

from checker_helpers import trial_case, trial_tests

import numpy as np
import torch
import torch.nn.functional as F

from labnn.exercises.transformer_xl import (
    check_relative_distances,
    check_relative_scores,
    check_relative_shift,
    check_segment_mask,
    check_update_memory,
)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
SEG = 64  # the notebook's global, defined in section 1
DEVICE = r"(?i)device|on the CPU|cpu"


# ---- Exercise 1: the memory update

def _um(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], 1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def _um_cpu_empty_memory(mem, h, mem_len):
    """The first segment's memory made with torch.zeros: on the CPU whatever h's device."""
    if mem is None:
        mem = torch.zeros(h.size(0), 0, h.size(2), dtype=h.dtype)
    return _um(mem, h, mem_len)


def _um_numpy(mem, h, mem_len):
    """A numpy round trip: .numpy() fails for a tensor on a GPU."""
    x = h if mem is None else torch.cat([mem, h], 1)
    return torch.from_numpy(x.detach().numpy()[:, x.size(1) - min(mem_len, x.size(1)):])


def _um_cpu_empty_result(mem, h, mem_len):
    """mem_len = 0 answered with torch.zeros(B, 0, D, dtype=h.dtype): a CPU tensor."""
    if mem_len == 0:
        return torch.zeros(h.size(0), 0, h.size(2), dtype=h.dtype)
    return _um(mem, h, mem_len)


case("um_cpu_empty_memory", check_update_memory, _um_cpu_empty_memory, DEVICE)
case("um_cpu_empty_result", check_update_memory, _um_cpu_empty_result, DEVICE)
case("um_numpy_round_trip", check_update_memory, _um_numpy, r"(?i)numpy")
RIGHT["um_right"] = (check_update_memory, _um)


def _um_new_zeros(mem, h, mem_len):
    if mem is None:
        mem = h.new_zeros(h.size(0), 0, h.size(2))
    return _um(mem, h, mem_len)


RIGHT["um_right_new_zeros"] = (check_update_memory, _um_new_zeros)


# ---- Exercise 2: the segment mask

def _mask(n, seg_len, mem_len, dtype=torch.int64):
    i = torch.arange(n, dtype=dtype)[:, None]
    j = torch.arange(n, dtype=dtype)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def _sm_int8(n, seg_len, mem_len):
    """Positions as int8: they wrap past 127."""
    return _mask(n, seg_len, mem_len, torch.int8)


def _sm_squeeze(n, seg_len, mem_len):
    return _mask(n, seg_len, mem_len).squeeze()


def _sm_one_segment_no_cut(n, seg_len, mem_len):
    """A text within one segment: 'everything is visible', forgetting causality."""
    if n <= seg_len:
        return torch.ones(n, n, dtype=torch.bool)
    return _mask(n, seg_len, mem_len)


def _sm_window(n, seg_len, mem_len):
    """A sliding window of seg_len + mem_len + 1 keys."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (i - j <= seg_len + mem_len)


def _sm_global_seg(n, seg_len, mem_len):
    """The notebook's global SEG = 64 in place of the argument seg_len."""
    return _mask(n, SEG, mem_len)


def _sm_fixed(n, seg_len, mem_len):
    """The figure's segment_mask(24, 8, 8) sizes, written as numbers."""
    return _mask(n, 8, 8)


case("sm_int8_positions", check_segment_mask, _sm_int8, r"int8|overflow|wrap|127")
case("sm_squeeze", check_segment_mask, _sm_squeeze, r"squeeze")
case("sm_one_segment_all_true", check_segment_mask, _sm_one_segment_no_cut,
     r"future key|j <= i")
case("sm_window_seg_plus_mem", check_segment_mask, _sm_window, r"sliding window")
NOT_ITS_ARGUMENT = r"(?s)^(?!.*i % seg_len).*(global|fixed|written as a number|argument)"
case("sm_global_SEG", check_segment_mask, _sm_global_seg, NOT_ITS_ARGUMENT)
case("sm_fixed_sizes", check_segment_mask, _sm_fixed, NOT_ITS_ARGUMENT)
RIGHT["sm_right"] = (check_segment_mask, _mask)
RIGHT["sm_right_int16"] = (check_segment_mask, lambda n, s, m: _mask(n, s, m, torch.int16))


def _sm_numpy(n, seg_len, mem_len):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return torch.from_numpy((j <= i) & (j >= (i // seg_len) * seg_len - mem_len))


RIGHT["sm_right_numpy"] = (check_segment_mask, _sm_numpy)


# ---- Exercise 3: relative distances

def _rd(t, m, dtype=torch.int64):
    d = m + torch.arange(t, dtype=dtype)[:, None] - torch.arange(m + t, dtype=dtype)[None, :]
    return d.long()


SMALL = r"(?i)int8|overflow|wrap|float16|half|bfloat16|round|exact"
case("rd_int8", check_relative_distances, lambda t, m: _rd(t, m, torch.int8), SMALL)
case("rd_float16", check_relative_distances, lambda t, m: _rd(t, m, torch.float16), SMALL)
case("rd_bfloat16", check_relative_distances, lambda t, m: _rd(t, m, torch.bfloat16), SMALL)
RIGHT["rd_right"] = (check_relative_distances, _rd)
RIGHT["rd_right_int16"] = (check_relative_distances, lambda t, m: _rd(t, m, torch.int16))


# ---- Exercise 4: the relative shift

def _shift(x):
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)
    return padded[..., 1:, :].reshape(*lead, t, s)


def _rs_cpu_zeros(x):
    """The zero column made with torch.zeros, on the CPU (float32: torch.cat promotes)."""
    *lead, t, s = x.shape
    padded = torch.cat([torch.zeros(*lead, t, 1), x], -1).reshape(*lead, s + 1, t)
    return padded[..., 1:, :].reshape(*lead, t, s)


def _rs_cpu_index(x):
    """torch.gather with an index made on the CPU."""
    t, s = x.shape[-2:]
    i, j = torch.arange(t)[:, None], torch.arange(s)[None, :]
    return x.gather(-1, ((j + t - 1 - i) % s).expand(*x.shape))


def _rs_identity_without_memory(x):
    """'No memory, nothing to shift': the identity when S = T."""
    return x if x.size(-1) == x.size(-2) else _shift(x)


def _rs_masked_without_offset(x):
    """-inf above the plain diagonal: the causal mask of a segment without memory."""
    t, s = x.shape[-2:]
    keep = torch.ones(t, s, dtype=torch.bool).tril()
    return _shift(x).masked_fill(~keep, float("-inf"))


case("rs_cpu_zeros", check_relative_shift, _rs_cpu_zeros, DEVICE)
case("rs_cpu_index", check_relative_shift, _rs_cpu_index, DEVICE)
case("rs_identity_without_memory", check_relative_shift, _rs_identity_without_memory,
     r"S = T|T = S|no memory|M = 0")
case("rs_masked_without_offset", check_relative_shift, _rs_masked_without_offset,
     r"(?i)inf")
RIGHT["rs_right"] = (check_relative_shift, _shift)


def _rs_gather_on_device(x):
    t, s = x.shape[-2:]
    i = torch.arange(t, device=x.device)[:, None]
    j = torch.arange(s, device=x.device)[None, :]
    return x.gather(-1, ((j + t - 1 - i) % s).expand(*x.shape))


def _rs_as_strided(x):
    *lead, t, s = x.shape
    flat = x.contiguous().reshape(-1, t, s)
    out = flat.as_strided((flat.size(0), t, s), (t * s, s - 1, 1),
                          flat.storage_offset() + t - 1)
    return out.reshape(*lead, t, s)


RIGHT["rs_right_gather_on_device"] = (check_relative_shift, _rs_gather_on_device)
RIGHT["rs_right_as_strided"] = (check_relative_shift, _rs_as_strided)


# ---- Exercise 5: the relative scores

def _terms(q, k, r, u, v):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    position = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return content, position


def _sc(q, k, r, u, v):
    content, position = _terms(q, k, r, u, v)
    return (content + relative_shift(position)) / math.sqrt(q.size(-1))


def _sc_cpu_zeros(q, k, r, u, v):
    content, position = _terms(q, k, r, u, v)
    return (content + _rs_cpu_zeros(position)) / math.sqrt(q.size(-1))


def _sc_cpu_scale(q, k, r, u, v):
    """The scale as a one-element float32 tensor, on the CPU."""
    content, position = _terms(q, k, r, u, v)
    return (content + relative_shift(position)) * torch.full((1,), q.size(-1) ** -0.5)


def _sc_loops(zeros):
    def relative_scores(q, k, r, u, v):
        b, h, t, d = q.shape
        s = k.size(2)
        out = zeros(q, (b, h, t, s))
        for i in range(t):
            for j in range(s - t + i + 1):
                rel = r[j + t - 1 - i]  # distance s - t + i - j, row s - 1 - distance
                out[:, :, i, j] = ((q[:, :, i] + u) * k[:, :, j]).sum(-1) + (
                    (q[:, :, i] + v) * rel).sum(-1)
        return out / math.sqrt(d)
    return relative_scores


def _sc_no_shift_without_memory(q, k, r, u, v):
    content, position = _terms(q, k, r, u, v)
    if k.size(2) == q.size(2):
        return (content + position) / math.sqrt(q.size(-1))
    return (content + relative_shift(position)) / math.sqrt(q.size(-1))


def _sc_masked_without_offset(q, k, r, u, v):
    scores = _sc(q, k, r, u, v)
    t, s = scores.shape[-2:]
    return scores.masked_fill(~torch.ones(t, s, dtype=torch.bool).tril(), float("-inf"))


case("sc_cpu_zeros_in_shift", check_relative_scores, _sc_cpu_zeros, DEVICE)
case("sc_cpu_scale", check_relative_scores, _sc_cpu_scale, DEVICE)
case("sc_loops_cpu_zeros", check_relative_scores,
     _sc_loops(lambda q, shape: torch.zeros(shape, dtype=q.dtype)), DEVICE)
case("sc_no_shift_without_memory", check_relative_scores, _sc_no_shift_without_memory,
     r"S = T|T = S|no memory|M = 0|relative_shift")
case("sc_masked_without_offset", check_relative_scores, _sc_masked_without_offset,
     r"(?i)inf")
RIGHT["sc_right"] = (check_relative_scores, _sc)
RIGHT["sc_right_loops"] = (check_relative_scores, _sc_loops(lambda q, shape: q.new_zeros(shape)))


def _sc_tensor_scale(q, k, r, u, v):
    """A 0-dim CPU scale: fine on a GPU too (a 0-dim tensor acts as a number)."""
    content, position = _terms(q, k, r, u, v)
    return (content + relative_shift(position)) / torch.tensor(q.size(-1)).sqrt()


RIGHT["sc_right_0dim_scale"] = (check_relative_scores, _sc_tensor_scale)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
