"""Trial 70, notebook 02 (a learner's trial of the five exercises).

Told only that the memory "differs": a rolled [mem, h] sliced to its last mem_len
(`states.roll(-1, 1)[:, -mem_len:]`, the oldest states wrapped to the end). Told it kept h
alone and dropped the old memory: a slice T long from the right start
(`x[:, start:start + T]`). Told only a shape: the memory slice ended before the newest
state (`x[:, start:-1]`), and Exercise 2's mask built from i and j both along one axis
(`[n, 1]`, `[1, n]` or 1-D: one entry per position, no broadcast to `[N, N]`). Told only
"differs": Exercise 4's shift that slides every row by row 0's amount, T - 1, with the
columns past the end clamped or masked. Told it was detached, not that numpy (which a GPU
tensor refuses) did it: the shift in numpy after the `.detach()` numpy asks for.
"""
import numpy as np
import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_shift, check_segment_mask,
                                            check_update_memory)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _memory(cut):
    """The memory update `cut(states, mem_len)` over states = [mem, h] (h alone at first)."""
    def update_memory(mem, h, mem_len):
        return cut(h if mem is None else torch.cat([mem, h], 1), mem_len).detach()
    return update_memory


def _last(states, mem_len):
    """The last mem_len states, by a slice that runs to the end: the right cut."""
    return states[:, states.size(1) - min(mem_len, states.size(1)):]


ROLLED = r"oldest.*wrapped.*roll\(-{}, 1\).*slice"
case("memory_roll_minus_one", check_update_memory,
     _memory(lambda s, n: _last(s.roll(-1, 1), n)), ROLLED.format(1))
case("memory_roll_minus_two", check_update_memory,
     _memory(lambda s, n: _last(s.roll(-2, 1), n)), ROLLED.format(2))
case("memory_slice_end_minus_one", check_update_memory,
     _memory(lambda s, n: s[:, s.size(1) - min(n, s.size(1)):-1]),
     r"dropped the newest state.*slice end -1.*runs to the end")
case("memory_slice_length_t", check_update_memory,  # not h: it holds 2 old states
     _memory(lambda s, n: s[:, s.size(1) - min(n, s.size(1)):][:, :4]),
     r"kept at most T = 4 states \(h\.size\(1\)\): keep the last mem_len")
RIGHT["memory_roll_then_first"] = (check_update_memory, _memory(
    lambda s, n: s.roll(-(s.size(1) - min(n, s.size(1))), 1)[:, :min(n, s.size(1))]))


def _mask(i_axis, j_axis):
    """Exercise 2's solution with i = arange(n) indexed by `i_axis`, j by `j_axis`."""
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[i_axis], torch.arange(n)[j_axis]
        return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)
    return segment_mask


SAME_AXIS = r"one entry per position.*i and j.*same axis.*both {}.*\[:, None\].*\[None, :\]"
case("mask_i_j_both_columns", check_segment_mask, _mask((slice(None), None),
                                                        (slice(None), None)),
     SAME_AXIS.format(r"\[N, 1\]"))
case("mask_i_j_both_rows", check_segment_mask, _mask((None, slice(None)),
                                                     (None, slice(None))),
     SAME_AXIS.format(r"\[1, N\]"))
case("mask_i_j_both_1d", check_segment_mask, _mask(slice(None), slice(None)),
     SAME_AXIS.format("1-D"))


def _shift_same_slide(x):
    """Every row slid left by T - 1, row 0's amount (x[..., i, j + T - 1]), the columns
    past the end clamped to the last."""
    t, s = x.shape[-2:]
    return x[..., (torch.arange(s, device=x.device) + t - 1).clamp(max=s - 1)]


def _shift_same_slide_masked(x):
    """The same slide, the columns past the end set to 0."""
    t, s = x.shape[-2:]
    cols = torch.arange(s, device=x.device) + t - 1
    return x[..., cols.clamp(max=s - 1)].masked_fill(cols >= s, 0)


SAME_SLIDE = r"every row slides left by the same {} places.*row 0's.*T - 1 - i"
case("shift_row0_amount_clamped", check_relative_shift, _shift_same_slide,
     SAME_SLIDE.format(3))
case("shift_row0_amount_masked", check_relative_shift, _shift_same_slide_masked,
     SAME_SLIDE.format(3))


def _shift_numpy(x):
    """The trick in numpy, after the .detach() numpy asks for: no gradient, CPU only."""
    *lead, t, s = x.shape
    padded = np.pad(x.detach().numpy(), [(0, 0)] * len(lead) + [(0, 0), (1, 0)])
    return torch.from_numpy(padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s))


case("shift_through_numpy", check_relative_shift, _shift_numpy,
     r"detached from its inputs.*`\.detach\(\)\.numpy\(\)`, which a GPU tensor refuses")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
