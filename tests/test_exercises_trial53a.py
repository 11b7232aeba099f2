"""Trial 53a: a blind learner trial of notebook 02's exercises.

Wrong answers that passed: index arithmetic in a small integer type that wraps only at sizes
the checks never used: a query index in int8 (wraps past 127 queries; no round had more
than 5) in the shift, in a shift of the scores' own, in the distances (t <= 6 tried) and in
the memory update's index (M + T <= 12 tried); a flat index `i * S + j` in int16 (wraps
past 32767; the largest T * S tried was about 6,300) in the shift, the scores and the
distances.
"""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
INT8_ROWS = r"i=128.*queries 0 to 127.*int8.*int64"
INT16_FLAT = r"flat index.*int16.*int64"


# ---- Exercise 4: the shift ----
def rs_int8_rows(x):
    t, s = x.shape[-2:]
    i = torch.arange(t, device=x.device, dtype=torch.int8)[:, None]
    j = torch.arange(s, device=x.device)[None, :]
    col = (j + (t - 1) - i.long()).clamp(max=s - 1)
    return x.gather(-1, col.expand(x.shape))


def rs_flat_int16(x):
    *lead, t, s = x.shape
    i = torch.arange(t, device=x.device, dtype=torch.int16)[:, None]
    j = torch.arange(s, device=x.device, dtype=torch.int16)[None, :]
    col = (t - 1 - i + j).clamp(max=s - 1)
    flat = (i * s + col).long().reshape(-1)
    return x.reshape(*lead, t * s)[..., flat].reshape(*lead, t, s)


def rs_pad_flat_int16(x):  # trial 51a's variant
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 0)).flatten(-2)
    index = torch.arange(t, t * (s + 1), device=x.device, dtype=torch.int16)
    return padded.index_select(-1, index.long()).unflatten(-1, (t, s))


def rs_global_flat_int16(x):
    *lead, t, s = x.shape
    n = x[..., 0, 0].numel()
    i = torch.arange(t, device=x.device, dtype=torch.int16)[:, None]
    j = torch.arange(s, device=x.device, dtype=torch.int16)[None, :]
    within = i * s + (t - 1 - i + j).clamp(max=s - 1)
    base = torch.arange(n, device=x.device, dtype=torch.int16)[:, None, None] * (t * s)
    flat = (base + within).long().reshape(-1)
    return x.contiguous().reshape(-1)[flat].reshape(x.shape)


case("rs_int8_rows", check_relative_shift, rs_int8_rows, INT8_ROWS)
case("rs_flat_int16", check_relative_shift, rs_flat_int16, INT16_FLAT)
case("rs_pad_flat_int16", check_relative_shift, rs_pad_flat_int16, INT16_FLAT)
case("rs_global_flat_int16", check_relative_shift, rs_global_flat_int16, INT16_FLAT)


def rs_pad(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def rs_gather_int16(x):  # int16 columns hold S + T easily: right
    t, s = x.shape[-2:]
    i = torch.arange(t, device=x.device, dtype=torch.int16)[:, None]
    j = torch.arange(s, device=x.device, dtype=torch.int16)[None, :]
    return x.gather(-1, (t - 1 - i + j).clamp(max=s - 1).long().expand(x.shape))


def rs_rows_loop(x):
    t, s = x.shape[-2:]
    out = rs_pad(x).clone()
    for i in range(t):
        out[..., i, :s - (t - 1 - i)] = x[..., i, t - 1 - i:]
    return out


def rs_nan_future(x):  # NaN where no query may look: left unspecified
    t, s = x.shape[-2:]
    out = torch.full_like(x, float("nan"))
    for i in range(t):
        out[..., i, :s - t + i + 1] = x[..., i, t - 1 - i:]
    return out


def rs_entry_loop(x):  # one entry at a time: slow, the check picks smaller long rounds
    t, s = x.shape[-2:]
    flat, out = x.reshape(-1, t, s), x.new_zeros(x.shape).reshape(-1, t, s)
    for i in range(t):
        for j in range(s - t + i + 1):
            out[:, i, j] = flat[:, i, j + t - 1 - i]
    return out.reshape(x.shape)


RIGHT["rs_pad"] = (check_relative_shift, rs_pad)
RIGHT["rs_gather_int16"] = (check_relative_shift, rs_gather_int16)
RIGHT["rs_rows_loop"] = (check_relative_shift, rs_rows_loop)
RIGHT["rs_nan_future"] = (check_relative_shift, rs_nan_future)
RIGHT["rs_entry_loop"] = (check_relative_shift, rs_entry_loop)


# ---- Exercise 5: the scores, with a shift of their own ----
def _scores(shift):
    def relative_scores(q, k, r, u, v):
        content = (q + u[:, None]) @ k.mT
        position = (q + v[:, None]) @ r.permute(1, 2, 0)
        return (content + shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


case("sc_int8_rows", check_relative_scores, _scores(rs_int8_rows), INT8_ROWS)
case("sc_flat_int16", check_relative_scores, _scores(rs_flat_int16), INT16_FLAT)
RIGHT["sc_package_shift"] = (check_relative_scores, _scores(relative_shift))
RIGHT["sc_rows_loop"] = (check_relative_scores, _scores(rs_rows_loop))
RIGHT["sc_gather_int16"] = (check_relative_scores, _scores(rs_gather_int16))


# ---- Exercise 3: the distances ----
def rd_int8_rows(t, m):
    i = torch.arange(t, dtype=torch.int8)[:, None]
    return m + i.long() - torch.arange(m + t)[None]


def rd_flat_int16(t, m):
    s = m + t
    flat = torch.arange(t * s, dtype=torch.int16)
    i, j = flat // s, flat % s
    return (m + i.long() - j.long()).reshape(t, s)


def rd_entry_loop(t, m):  # one entry at a time: slow
    out = torch.empty(t, m + t, dtype=torch.long)
    for i in range(t):
        for j in range(m + t):
            out[i, j] = m + i - j
    return out


case("rd_int8_rows", check_relative_distances, rd_int8_rows, INT8_ROWS)
case("rd_flat_int16", check_relative_distances, rd_flat_int16, INT16_FLAT)
RIGHT["rd_int64"] = (check_relative_distances,
                     lambda t, m: m + torch.arange(t)[:, None] - torch.arange(m + t)[None])
RIGHT["rd_entry_loop"] = (check_relative_distances, rd_entry_loop)


# ---- Exercise 1: the memory update ----
def _um_index(dtype):
    def update_memory(mem, h, mem_len):
        full = h if mem is None else torch.cat([mem, h], 1)
        n = full.size(1)
        keep = min(n, mem_len)
        index = torch.arange(n - keep, n, dtype=dtype, device=h.device).long()
        return full.index_select(1, index).detach()
    return update_memory


case("um_int8_index", check_update_memory, _um_index(torch.int8), r"int8.*int64")
RIGHT["um_index_int64"] = (check_update_memory, _um_index(torch.int64))
RIGHT["um_index_int16"] = (check_update_memory, _um_index(torch.int16))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
