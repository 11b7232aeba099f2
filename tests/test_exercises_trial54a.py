"""Trial 54a: a blind learner trial of notebook 02's exercises (226 answer runs).

Wrong answers that passed, all state kept between calls, which the checks never probed with
the same sizes and other values: scores cached by their shapes (and requires_grad); one
output buffer per shape for the shift and the scores (the second call overwrites what the
first returned); a shift cached by `x.data_ptr()` (stale once x is refilled in place); a
memory update cached by `id()` of its inputs; and a memory update that detaches h only (the
result still requires grad when mem does). Misleading messages: a shift cached by its shapes
was told it detached something, or that as_strided assumes a contiguous layout; a shift of
the scores' own calling `.view` on the einsum's output raised torch's own error.
"""
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_scores, check_relative_shift,
                                            check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STALE = r"earlier call.*kept between calls.*afresh"
OVERWRITTEN = r"overwrote what the first returned.*buffer kept between calls.*new tensor"
REFILLED = r"refilled in place.*kept between calls.*(id\(\)|data_ptr)"


def rs(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def sc(q, k, r, u, v):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + rs(bd)) / math.sqrt(q.size(-1))


def _cached(compute, key):
    kept = {}

    def answer(*args):
        k = key(*args)
        if k not in kept:
            kept[k] = compute(*args)
        return kept[k]
    return answer


def _buffered(compute):
    buffers = {}

    def answer(*args):
        result = compute(*args)
        k = (tuple(result.shape), result.dtype, result.device)
        if k not in buffers:
            buffers[k] = result.new_empty(result.shape)
        return buffers[k].copy_(result)
    return answer


def _layout(x):
    return tuple(x.shape), x.dtype, x.device


# ---- Exercise 4: the shift ----
case("F2a_shift_output_buffer", check_relative_shift, _buffered(rs), OVERWRITTEN)
case("F3_shift_cached_by_data_ptr", check_relative_shift,
     _cached(rs, lambda x: (*_layout(x), x.stride(), x.data_ptr())), REFILLED)
case("M1_shift_cached_by_shape", check_relative_shift, _cached(rs, _layout), STALE)
case("M2_shift_cached_by_shape_and_grad", check_relative_shift,
     _cached(rs, lambda x: (*_layout(x), x.requires_grad)), STALE)


def rs_alias(x):  # F6: a view of x, the copy-free shift: right by decision
    *lead, t, s = x.shape
    x = x.contiguous()
    return x.as_strided((*lead, t, s), (*x.stride()[:-2], s - 1, 1), x.storage_offset() + t - 1)


_INDEX = {}


def rs_cached_index(x):  # only the index is kept, by the sizes: right
    t, s = x.shape[-2:]
    if (t, s, x.device) not in _INDEX:
        i, j = torch.arange(t, device=x.device)[:, None], torch.arange(s, device=x.device)
        _INDEX[t, s, x.device] = (t - 1 - i + j).clamp(max=s - 1)
    return x.gather(-1, _INDEX[t, s, x.device].expand(x.shape))


def rs_loop(x):
    t, s = x.shape[-2:]
    out = torch.zeros_like(x)
    for i in range(t):
        out[..., i, :s - (t - 1 - i)] = x[..., i, t - 1 - i:]
    return out


RIGHT["rs_pad_reshape"] = (check_relative_shift, rs)
RIGHT["rs_as_strided_view"] = (check_relative_shift, rs_alias)
RIGHT["rs_cached_index"] = (check_relative_shift, rs_cached_index)
RIGHT["rs_loop"] = (check_relative_shift, rs_loop)


# ---- Exercise 5: the scores ----
def _scores_key(q, k, r, u, v):
    return (*_layout(q), tuple(k.shape), q.requires_grad)


def sc_own_shift_view(q, k, r, u, v):  # M3: .view on the einsum's output
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    *lead, t, s = bd.shape
    shifted = F.pad(bd.view(-1, t, s), (1, 0)).view(-1, s + 1, t)[:, 1:]
    return (ac + shifted.reshape(*lead, t, s)) / math.sqrt(q.size(-1))


case("F1_scores_cached_by_shape_and_grad", check_relative_scores,
     _cached(sc, _scores_key), STALE)
case("scores_cached_by_shape", check_relative_scores,
     _cached(sc, lambda q, *rest: _layout(q)), STALE)
case("F2b_scores_output_buffer", check_relative_scores, _buffered(sc), OVERWRITTEN)
case("M3_own_shift_view_on_einsum", check_relative_scores, sc_own_shift_view,
     r"\.view.*einsum.*heads before (its|the) batch.*\.reshape")


def sc_matmul(q, k, r, u, v):
    ac = (q + u.unsqueeze(1)) @ k.transpose(-1, -2)
    bd = (q + v.unsqueeze(1)) @ r.permute(1, 2, 0)
    return (ac + rs_alias(bd)) / q.shape[-1] ** 0.5


RIGHT["sc_einsum"] = (check_relative_scores, sc)
RIGHT["sc_package_shift"] = (check_relative_scores, lambda q, k, r, u, v: (
    torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    + relative_shift(torch.einsum("bhid,jhd->bhij", q + v[:, None], r))) / q.size(-1) ** 0.5)
RIGHT["sc_matmul_view_shift"] = (check_relative_scores, sc_matmul)


# ---- Exercise 1: the memory update ----
def _update(mem, h, mem_len, detach=lambda t: t.detach()):
    cat = h if mem is None else torch.cat([mem, h], 1)
    return detach(cat[:, cat.size(1) - min(cat.size(1), mem_len):])


def um_cached_by_id(mem, h, mem_len):
    # keyed on the sizes and dtype too: a tensor freed during the check may leave its id() to
    # one of another dtype (a stale float32 result then read as a dtype slip: flaky); only the
    # round that refills the same tensors in place finds the cache, as it should
    key = (id(mem), id(h), mem_len, h.shape, h.dtype)
    return _IDS.setdefault(key, _update(mem, h, mem_len))


_IDS = {}


def um_h_detached(mem, h, mem_len):
    return _update(mem, h.detach(), mem_len, detach=lambda t: t)


def um_no_grad(mem, h, mem_len):  # a copy: a slice alone would still require grad
    with torch.no_grad():
        cat = h if mem is None else torch.cat([mem, h], 1)
        return (cat[:, :0] if mem_len == 0 else cat[:, -mem_len:]).clone()


def um_both_detached(mem, h, mem_len):
    if mem is not None:
        h = torch.cat([mem.detach(), h.detach()], 1)
    return h[:, max(0, h.size(1) - mem_len):].detach().clone()


case("F4_memory_cached_by_id", check_update_memory, um_cached_by_id,
     r"kept between calls.*id\(\)")
case("F5_memory_h_detached_only", check_update_memory, um_h_detached,
     r"mem.*requires grad.*detached whole.*after the cat")
RIGHT["um_slice_detach"] = (check_update_memory, _update)
RIGHT["um_no_grad"] = (check_update_memory, um_no_grad)
RIGHT["um_both_detached"] = (check_update_memory, um_both_detached)
RIGHT["um_narrow"] = (check_update_memory, lambda mem, h, mem_len: _update(
    mem, h, mem_len, detach=lambda t: t.detach().narrow(1, 0, t.size(1))))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
