"""Trial 69, notebook 02 (a learner's trial of the five exercises).

Told a dtype step (".float() on the way") where the scale, or the shift's zero column, was a
float32 tensor with a dimension made on the CPU (`torch.tensor([d]).sqrt()`, `torch.ones(1)`,
`torch.zeros(*lead, t, 1)`), which sets the result's dtype and fails on a GPU. Told only by
torch's own error, in Exercise 5: k used untransposed (`(q + u) @ k`), r's heads put first
without the transpose (`r.transpose(0, 1)`), u and v given two leading axes (`u[None, None]`,
in an einsum: with @ it was named) or a trailing one (`u.unsqueeze(-1)`), a term made
[B, H, S, T] (an einsum to 'bhji').
Told only "differs": Exercise 3's future keys given a sentinel (-1), and Exercise 2's mask
cut from a tril with a slice end start - mem_len that is negative for the first segments.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_segment_mask)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(content=lambda q, k, u: (q + u[:, None]) @ k.mT,
            position=lambda q, r, v: relative_shift((q + v[:, None]) @ r.permute(1, 2, 0)),
            scale=lambda q: math.sqrt(q.size(-1))):
    """The scores from `content(q, k, u)` and `position(q, r, v)`, divided by `scale(q)`."""
    def relative_scores(q, k, r, u, v):
        return (content(q, k, u) + position(q, r, v)) / scale(q)
    return relative_scores


CPU_SCALE = r"made on the CPU.*sets the result's dtype.*on a GPU"
case("scores_root_1d_cpu_float32", check_relative_scores,
     _scores(scale=lambda q: torch.tensor([q.size(-1)]).sqrt()),
     r"float32 tensor \[1\] " + CPU_SCALE)
case("scores_root_1d_cpu_float64", check_relative_scores,
     _scores(scale=lambda q: torch.tensor([q.size(-1)], dtype=torch.float64).sqrt()),
     r"float64 tensor \[1\] " + CPU_SCALE)
case("scores_ones_1d_cpu", check_relative_scores,
     _scores(scale=lambda q: torch.ones(1) * math.sqrt(q.size(-1))),
     r"float32 tensor \[1\] " + CPU_SCALE)


def _shift_cpu_zeros(x):
    """The trick with the zero column made as torch.zeros(*lead, t, 1): no dtype, no device."""
    *lead, t, s = x.shape
    padded = torch.cat([torch.zeros(*lead, t, 1), x], -1).reshape(*lead, s + 1, t)
    return padded[..., 1:, :].reshape(*lead, t, s)


case("shift_cat_cpu_zeros", check_relative_shift, _shift_cpu_zeros,
     r"float32 tensor \[1, 1, 3, 1\] " + CPU_SCALE)
RIGHT["scores_root_0d_cpu"] = (check_relative_scores,
                               _scores(scale=lambda q: torch.tensor(q.size(-1)).sqrt()))
RIGHT["scores_root_1d_like_q"] = (check_relative_scores,
                                  _scores(scale=lambda q: q.new_tensor([q.size(-1)]).sqrt()))

case("scores_k_untransposed", check_relative_scores,
     _scores(content=lambda q, k, u: (q + u[:, None]) @ k),
     r"k is used as it comes.*k\.mT")
case("scores_r_heads_first_untransposed", check_relative_scores,
     _scores(position=lambda q, r, v: relative_shift((q + v[:, None]) @ r.transpose(0, 1))),
     r"r \[S, H, D_h\] is used in the wrong layout.*r\.permute\(1, 2, 0\)")
case("scores_u_v_two_leading_axes_einsum", check_relative_scores,
     _scores(content=lambda q, k, u: torch.einsum("bhid,bhjd->bhij", q + u[None, None], k),
             position=lambda q, r, v: relative_shift(
                 torch.einsum("bhid,rhd->bhir", q + v[None, None], r))),
     r"query axis T = 4.*u\[None, None\].*u\[:, None\]")
case("scores_u_trailing_axis", check_relative_scores,
     _scores(content=lambda q, k, u: (q + u.unsqueeze(-1)) @ k.mT),
     r"query axis T = 4.*unsqueeze\(-1\).*u\[:, None\]")
case("scores_content_keys_first", check_relative_scores,
     _scores(content=lambda q, k, u: torch.einsum("bhid,bhjd->bhji", q + u[:, None], k)),
     r"\[B, H, S, T\].*'bhid,bhjd->bhij'")
case("scores_position_unshifted_keys_first", check_relative_scores,
     _scores(position=lambda q, r, v: torch.einsum("bhid,rhd->bhri", q + v[:, None], r)),
     r"\[B, H, S, T\].*'bhid,bhjd->bhij'")


def _distances(formula):
    """Relative distances `formula(i, j, m)` over i = arange(t) (a column) and j =
    arange(m + t) (a row)."""
    def relative_distances(t, m):
        return formula(torch.arange(t)[:, None], torch.arange(m + t)[None, :], m)
    return relative_distances


case("distances_future_minus_one", check_relative_distances,
     _distances(lambda i, j, m: (m + i - j).masked_fill(j > m + i, -1)),
     r"right at every key up to the query.*keys after it \(j > m \+ i\).*m \+ i - j")
case("distances_future_shift_junk", check_relative_distances,
     lambda t, m: relative_shift((m + t - 1 - torch.arange(m + t)).expand(t, -1)),
     r"right at every key up to the query.*keys after it \(j > m \+ i\)")


def _mask_tril_cut(n, seg_len, mem_len):
    """A tril with each later segment's rows cut before start - mem_len: a slice end that
    is negative where the segment starts within mem_len of 0."""
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for start in range(seg_len, n, seg_len):
        mask[start:start + seg_len, :start - mem_len] = False
    return mask


case("mask_tril_cut_negative_end", check_segment_mask, _mask_tril_cut,
     r"negative.*counts from the end of the row.*max\(0, s - mem_len\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
