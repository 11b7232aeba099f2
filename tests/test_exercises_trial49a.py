"""Trial 49a: a blind learner trial of notebook 02's exercises (301 answers).

Wrong answers that passed: an `update_memory` returning one buffer shared by every call
(layer 0's memory overwritten by layer 1's), or its result cached by the shapes (the repeated
case had the same values); a shortcut off by one at `mem_len = T + 1` with a memory (never
tried); a float32 step in the `mem=None` branch only (float64 was tried with a memory, or
with `mem_len = 0`); a `segment_mask` cached by `(n, seg_len)` or `(n, mem_len)` (only a
cache by n alone was caught); `relative_distances` wrong for t > m and m = 0 (never tried).
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_segment_mask,
                                            check_update_memory)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
STATE = r"(?i)between calls|kept|cache|overwr"


def _right(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], 1)
    return x[:, x.size(1) - min(x.size(1), mem_len):].detach()


_BUFFERS = {}


def um_shared_buffer(mem, h, mem_len):
    keep = _right(mem, h, mem_len)
    key = (tuple(keep.shape), keep.dtype, keep.device)
    if key not in _BUFFERS:
        _BUFFERS[key] = keep.new_empty(keep.shape)
    return _BUFFERS[key].copy_(keep)


_RESULTS = {}


def um_cached_by_shapes(mem, h, mem_len):
    key = (None if mem is None else tuple(mem.shape), tuple(h.shape), mem_len, h.dtype,
           h.device)
    if key not in _RESULTS:
        _RESULTS[key] = _right(mem, h, mem_len)
    return _RESULTS[key]


def um_off_by_one(mem, h, mem_len):
    x = h if (mem is None or h.size(1) >= mem_len - 1) else torch.cat([mem, h], 1)
    return x[:, max(0, x.size(1) - mem_len):].detach()


def um_float32_without_memory(mem, h, mem_len):
    if mem is None and mem_len > 0:
        return _right(mem, h, mem_len).float()
    return _right(mem, h, mem_len)


case("um_shared_buffer", check_update_memory, um_shared_buffer, STATE)
case("um_cached_by_shapes", check_update_memory, um_cached_by_shapes, STATE)
case("um_off_by_one_at_T_plus_1", check_update_memory, um_off_by_one, r"mem_len = 5|T = 4")
case("um_float32_without_memory", check_update_memory, um_float32_without_memory,
     r"float32|float64")
RIGHT["um_right"] = (check_update_memory, _right)


def _own_mask(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def _cached_mask(*which):
    cache = {}

    def mask(n, seg_len, mem_len):
        key = tuple((n, seg_len, mem_len)[k] for k in which)
        if key not in cache:
            cache[key] = _own_mask(n, seg_len, mem_len)
        return cache[key]
    return mask


case("mask_cached_by_n_and_seg_len", check_segment_mask, _cached_mask(0, 1), STATE)
case("mask_cached_by_n_and_mem_len", check_segment_mask, _cached_mask(0, 2), STATE)
RIGHT["mask_right"] = (check_segment_mask, _own_mask)


def rd_rows_capped_by_m(t, m):
    i = torch.arange(max(m, 1))[:t] if m else torch.arange(t)
    return m + i[:, None] - torch.arange(m + t)[None, :]


def rd_no_memory_wrong(t, m):
    mm = m if m else 1  # "a memory of at least one"
    return mm + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


case("rd_t_greater_than_m", check_relative_distances, rd_rows_capped_by_m, r"\(6, 2\).*t > m")
case("rd_no_memory", check_relative_distances, rd_no_memory_wrong, r"\(3, 0\).*m = 0")
RIGHT["rd_right"] = (check_relative_distances,
                     lambda t, m: m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :])

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
