"""Trial 63, notebook 02 (a learner's trial, all findings messages): Exercise 5's scores with a
shift of one's own, written inline, that moves the position term to the wrong keys (padded on
the right, the last row dropped, rows slid by i, a flip, a roll the wrong way) got only "differs
at 180 of 180 entries"; Exercise 2's memory rounded up to whole segments was called off by one,
which it is only at the check's sizes; a segment mask sliced from one kept triangle and edited
in place by every call was told only where it differs; Exercise 3's distances made in uint8 (-1
wraps to 255) got only "differs"; Exercise 1's memory taken as the last piece of
x.split(mem_len, dim=1), the states left over, got only its shape; Exercise 4's gather from
column M - i + j was told "2 too far right", true only where M - T + 1 = 2.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_segment_mask,
                                            check_update_memory)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores_with(shift):
    def relative_scores(q, k, r, u, v):
        content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
        position = torch.einsum("bhid,rhd->bhir", q + v[:, None], r)
        return (content + shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


def _rows(amount):
    """A loop that rolls row i of x left by amount(i, T)."""
    def shift(x):
        t = x.size(-2)
        return torch.stack([x[..., i, :].roll(-amount(i, t), -1) for i in range(t)], -2)
    return shift


def _pad_right(x):
    *lead, t, s = x.shape
    return F.pad(x, (0, 1)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def _last_row_dropped(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., :-1, :].reshape(*lead, t, s)


def _gather(x):
    *lead, t, s = x.shape
    i = torch.arange(t, device=x.device)[:, None]
    j = torch.arange(s, device=x.device)[None, :]
    return x.gather(-1, (t - 1 - i + j).clamp(max=s - 1).expand(*lead, t, s))


SLID = r"position term .*wrong keys.*content terms are right.*slides rows i = 0\.\.3 left by "
case("scores_inline_shift_padded_right", check_relative_scores, _scores_with(_pad_right),
     SLID + r"4, 3, 2, 1 .*not by T - 1 - i = 3, 2, 1, 0")
case("scores_inline_shift_last_row_dropped", check_relative_scores,
     _scores_with(_last_row_dropped), SLID + r"-1, -2, -3, -4 \(negative: right\)")
case("scores_inline_shift_by_i", check_relative_scores,
     _scores_with(_rows(lambda i, t: i)), SLID + r"0, 1, 2, 3 ")
case("scores_inline_roll_right", check_relative_scores,
     _scores_with(_rows(lambda i, t: -(t - 1 - i))), SLID + r"-3, -2, -1, 0 ")
case("scores_inline_flip", check_relative_scores, _scores_with(lambda x: x.flip(-1)),
     r"position term reads.*distance j, the key's own index \(the columns flipped, "
     r"x\.flip\(-1\)")
RIGHT["scores_inline_gather"] = (check_relative_scores, _scores_with(_gather))
RIGHT["scores_inline_roll"] = (check_relative_scores,
                               _scores_with(_rows(lambda i, t: t - 1 - i)))


def _segments_rounded_up(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (i // seg_len - j // seg_len <= -(-mem_len // seg_len))


def _off_by_one(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len - 1)


case("mask_memory_in_whole_segments", check_segment_mask, _segments_rounded_up,
     r"^(?!.*off by one).*whole segment.*j >= start\(i\) - mem_len")
case("mask_still_off_by_one", check_segment_mask, _off_by_one,
     r"off by one at the far end.*mem_len \+ 1")


_KEPT = {}


def _kept_tril_edited(n, seg_len, mem_len):
    """A lower triangle made once, sliced, and its memory cut in place: every call edits it."""
    if "tril" not in _KEPT:
        _KEPT["tril"] = torch.ones(3000, 3000, dtype=torch.bool).tril()
    mask = _KEPT["tril"][:n, :n]
    for i in range(n):
        mask[i, :max(0, (i // seg_len) * seg_len - mem_len)] = False
    return mask


def _kept_tril_combined(n, seg_len, mem_len):
    """The same kept triangle, read only: & makes a new mask."""
    if "read" not in _KEPT:
        _KEPT["read"] = torch.ones(3000, 3000, dtype=torch.bool).tril()
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return _KEPT["read"][:n, :n] & (j >= (i // seg_len) * seg_len - mem_len)


case("mask_kept_tensor_edited_in_place", check_segment_mask, _kept_tril_edited,
     r"views of one kept tensor.*edited in place.*afresh")
RIGHT["mask_kept_tensor_read_only"] = (check_segment_mask, _kept_tril_combined)


def _distances_uint8(t, m):
    i = torch.arange(t, dtype=torch.uint8)[:, None]
    j = torch.arange(m + t, dtype=torch.uint8)[None, :]
    return (m + i - j).long()


case("distances_uint8", check_relative_distances, _distances_uint8,
     r"256 - d.*uint8.*no negatives.*int64")


def _memory_by_split(mem, h, mem_len):
    states = h if mem is None else torch.cat([mem, h], 1)
    if mem_len == 0:
        return states[:, :0].detach()
    return states.split(mem_len, 1)[-1].detach()


case("memory_last_piece_of_split", check_update_memory, _memory_by_split,
     r"kept 3 = 9 % 6 states.*split.*left over.*max\(0, x.size\(1\) - mem_len\)")


def _gather_by(column):
    """A shift by gather: entry (i, j) reads column(i, j, T, S) of row i, clamped into x."""
    def shift(x):
        *lead, t, s = x.shape
        i = torch.arange(t, device=x.device)[:, None]
        j = torch.arange(s, device=x.device)[None, :]
        return x.gather(-1, column(i, j, t, s).clamp(0, s - 1).expand(*lead, t, s))
    return shift


case("shift_gather_m_minus_i_plus_j", check_relative_shift,
     _gather_by(lambda i, j, t, s: s - t - i + j),
     r"^(?!.*too far).*column M - i \+ j of x: M where T - 1 belongs")
case("shift_gather_off_by_two", check_relative_shift,
     _gather_by(lambda i, j, t, s: t + 1 - i + j), r"T - 1 - i \+ j \+ 2 of x, 2 too far right")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
