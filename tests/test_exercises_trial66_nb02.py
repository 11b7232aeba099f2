"""Trial 66, notebook 02 (a learner's trial of the five exercises).

Named only as "differs" (or a bare shape, torch's own error, another mistake's name) before:
Exercise 1's old memory cut to mem_len - T and h kept whole when T > mem_len; Exercise 2's
segment start rounded up (math.ceil, -(-i // seg_len)); Exercise 3's distances of the key
alone (j), the memory's distances counted from its newest end, or from the segment's start
(m - j); Exercise 4's shift zeroed by .tril() with no offset, and a gather index made in
float16 that rounds past the 2100-column row; Exercise 5's bias reduced to one number per
head by any reduction but mean and sum (amax, a norm, logsumexp, ...), the memory keys left
out of the position term (zero there: told "a flip"), the scores multiplied by sqrt(d_head),
r flipped and read unshifted (key j given distance j), .tril() and the float16 index.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_segment_mask,
                                            check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mask(start_of):
    """A segment mask whose segment start is `start_of(i, seg_len)`."""
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return (j <= i) & (j >= start_of(i, seg_len) - mem_len)
    return segment_mask


CEIL = r"rounds i / seg_len UP.*\(i // seg_len\) \* seg_len"
case("mask_start_ceil_floor_division", check_segment_mask,
     _mask(lambda i, s: -(-i // s) * s), CEIL)
case("mask_start_torch_ceil", check_segment_mask,
     _mask(lambda i, s: torch.ceil(i / s).long() * s), CEIL)
RIGHT["mask_start_minus_offset"] = (check_segment_mask, _mask(lambda i, s: i - i % s))


def _ceil_loop(n, seg_len, mem_len):
    """The same rounding up, row by row with math.ceil."""
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        start = math.ceil(i / seg_len) * seg_len
        mask[i, max(0, start - mem_len):i + 1] = True
    return mask


case("mask_start_ceil_loop", check_segment_mask, _ceil_loop, CEIL)


def _scores(content_bias, position_bias, r_of=lambda r, m: r,
            position_of=lambda x, m: relative_shift(x), scale=lambda d: d ** -0.5):
    """Scores whose queries get `content_bias(u)` and `position_bias(v)`, whose position
    term meets `r_of(r, M)` and is put by key with `position_of(scores, M)`."""
    def relative_scores(q, k, r, u, v):
        m = k.size(2) - q.size(2)
        content = (q + content_bias(u)) @ k.mT
        by_distance = (q + position_bias(v)) @ r_of(r, m).permute(1, 2, 0)
        return (content + position_of(by_distance, m)) * scale(q.size(-1))
    return relative_scores


ROW = lambda b: b[:, None]  # noqa: E731 (the right bias: one row per head)
PER_HEAD = r"{} term adds one number per head, {}, to every feature.*one row per head"
case("scores_u_amax_over_features", check_relative_scores,
     _scores(lambda u: u.amax(-1)[:, None, None], ROW),
     PER_HEAD.format("content", r"u\.amax\(-1\)"))
case("scores_u_max_values_keepdim", check_relative_scores,
     _scores(lambda u: u.max(-1, keepdim=True).values[:, None], ROW),
     PER_HEAD.format("content", r"u\.amax\(-1\)"))
case("scores_u_norm_over_features", check_relative_scores,
     _scores(lambda u: u.norm(dim=-1)[:, None, None], ROW),
     PER_HEAD.format("content", r"u\.norm\(dim=-1\)"))
case("scores_v_amin_over_features", check_relative_scores,
     _scores(ROW, lambda v: v.amin(-1, keepdim=True)[:, None]),
     PER_HEAD.format("position", r"v\.amin\(-1\)"))
case("scores_both_amax_over_features", check_relative_scores,
     _scores(lambda u: u.amax(-1)[:, None, None], lambda v: v.amax(-1)[:, None, None]),
     r"content term adds one number per head, u\.amax\(-1\).*position term adds one number "
     r"per head, v\.amax\(-1\)")
case("scores_u_logsumexp_over_features", check_relative_scores,
     _scores(lambda u: u.logsumexp(-1)[:, None, None], ROW),
     PER_HEAD.format("content", r"a reduction of u's row over its features"))


def _memory_left_out(by_distance, m):
    """The position term of the segment's keys only (r[M:], distances T - 1 .. 0),
    shifted, with zeros in front for the memory keys."""
    return F.pad(relative_shift(by_distance), (m, 0))


def _memory_zeroed(by_distance, m):
    """The position term, shifted, then zeroed at the memory keys."""
    position = relative_shift(by_distance).clone()
    position[..., :m] = 0
    return position


MEMORY_OUT = r"position term is 0 at the M = 5 memory keys.*all S = M \+ T rows of r"
case("scores_memory_out_of_position_term", check_relative_scores,
     _scores(ROW, ROW, r_of=lambda r, m: r[m:], position_of=_memory_left_out), MEMORY_OUT)
case("scores_memory_position_zeroed", check_relative_scores,
     _scores(ROW, ROW, position_of=_memory_zeroed), MEMORY_OUT)
case("scores_multiplied_by_root", check_relative_scores,
     _scores(ROW, ROW, scale=lambda d: d ** 0.5),
     r"multiplied the scores by sqrt\(d_head\).*divide")
case("scores_r_flipped_unshifted", check_relative_scores,
     _scores(ROW, ROW, r_of=lambda r, m: r.flip(0), position_of=lambda x, m: x),
     r"encoding of distance j, the key's own index \(.*r\.flip\(0\)")


def _nan_at_first_key(by_distance, m):
    """The right position term with a NaN at query 0's first key (the fit of one number
    per head must leave it to the NaN check, not crash in least squares)."""
    position = relative_shift(by_distance).clone()
    position[..., 0, 0] = float("nan")
    return position


case("scores_nan_at_one_key", check_relative_scores,
     _scores(ROW, ROW, position_of=_nan_at_first_key), r"contains NaN.*\[b=0, h=0, i=0, j=0\]")
RIGHT["scores_tensor_root"] = (check_relative_scores, _scores(
    ROW, ROW, scale=lambda d: 1 / torch.tensor(d).sqrt()))


def _distances(formula):
    """Relative distances `formula(i, j, m)` over i = arange(t) (a column) and
    j = arange(m + t) (a row)."""
    def relative_distances(t, m):
        return formula(torch.arange(t)[:, None], torch.arange(m + t)[None, :], m)
    return relative_distances


case("distances_key_index", check_relative_distances,
     _distances(lambda i, j, m: (j + 0 * i)),
     r"depends on the key only \(j, the key's index\).*m \+ i - j")
WRONG_END = r"memory keys' distances run the wrong way.*oldest.*m \+ i - j"
case("distances_memory_from_newest", check_relative_distances,
     _distances(lambda i, j, m: torch.where(j < m, i + j + 1, m + i - j)), WRONG_END)
case("distances_memory_reversed", check_relative_distances,
     _distances(lambda i, j, m: m + i - torch.where(j < m, m - 1 - j, j)), WRONG_END)
case("distances_memory_from_segment_start", check_relative_distances,
     _distances(lambda i, j, m: torch.where(j < m, m - j, m + i - j)),
     r"memory key j the distance m - j, from the segment's start.*m \+ i - j")
RIGHT["distances_split_at_memory"] = (check_relative_distances, _distances(
    lambda i, j, m: torch.where(j < m, m - j + i, i - (j - m))))


def _shift_by_strides(x):
    """The shift as one strided view of x made contiguous: row i starts T - 1 - i columns
    in, rows S - 1 apart."""
    *lead, t, s = x.shape
    x = x.contiguous()
    return x.as_strided((*lead, t, s), (*x.stride()[:-2], s - 1, 1), x.storage_offset() + t - 1)


def _shift_rows_uninitialised(x):
    """The shift row by row into new_empty: the future keys keep whatever was there."""
    *lead, t, s = x.shape
    out = x.new_empty(*lead, t, s)
    for i in range(t):
        out[..., i, :i + 1 + s - t] = x[..., i, t - 1 - i:]
    return out


RIGHT["shift_as_strided"] = (check_relative_shift, _shift_by_strides)
RIGHT["shift_rows_into_new_empty"] = (check_relative_shift, _shift_rows_uninitialised)


def _gather_index_in(dtype):
    """The shift by gather, its column T - 1 - i + j made and clamped in `dtype`, then
    .long(): float16 rounds 2099 to 2100 (whole numbers only up to 2048), past the row."""
    def relative_shift(x):
        *lead, t, s = x.shape
        i = torch.arange(t, dtype=dtype, device=x.device)[:, None]
        j = torch.arange(s, dtype=dtype, device=x.device)[None, :]
        return x.gather(-1, (t - 1 - i + j).clamp(max=s - 1).long().expand(*lead, t, s))
    return relative_shift


PAST_END = (r"2100.*S as long as a model's\): an index reached 2100, outside the 2100 "
            r"positions.*int64")
case("shift_index_in_float16", check_relative_shift, _gather_index_in(torch.float16), PAST_END)
case("scores_shift_index_in_float16", check_relative_scores, _scores(
    ROW, ROW, position_of=lambda x, m: _gather_index_in(torch.float16)(x)), PAST_END)


def _memory_minus_or_all(mem, h, mem_len):
    """-mem_len or the whole length: for mem_len = 0 the slice starts past the end."""
    states = h if mem is None else torch.cat([mem, h], 1)
    return states[:, -mem_len or states.size(1):].detach()


RIGHT["memory_minus_or_all"] = (check_update_memory, _memory_minus_or_all)


def _memory_h_uncut(mem, h, mem_len):
    """The old memory cut to the room h leaves, mem_len - T (none when T > mem_len), and h
    kept whole."""
    if mem is None:
        return h[:, max(0, h.size(1) - mem_len):].detach()
    keep = min(max(0, mem_len - h.size(1)), mem.size(1))
    return torch.cat([mem[:, mem.size(1) - keep:], h], 1).detach()


case("memory_h_uncut_past_mem_len", check_update_memory, _memory_h_uncut,
     r"update_memory\(mem, h, 2\) kept all T = 4 states of h, though mem_len = 2 < T")


def _shift_then_tril(x):
    """The right shift, then the entries right of the main diagonal zeroed, .tril()."""
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s).tril()


TRIL = r"is 0 at every key j with i < j <= M \+ i.*\.tril\(\) with no offset"
case("shift_then_tril", check_relative_shift, _shift_then_tril, TRIL)
case("scores_tril", check_relative_scores,
     lambda q, k, r, u, v: _scores(ROW, ROW)(q, k, r, u, v).tril(), TRIL)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
