"""Trial 71, notebook 02 (a learner's trial of the five exercises).

Accepted: a memory update whose missing memory is `torch.zeros(B, 0, D, device=h.device)`
(no dtype=): float64 states passed, since torch.cat promotes float32 to float64, but a
bfloat16 model's memory came back float32. Told only torch's error: a shift that reshapes
with a size written as a number (`reshape(*lead, t, 8)`, `reshape(*lead, 10, 3)`, the
demonstration's `6`), in Exercise 4 and inline in Exercise 5; a shift read back as
`[..., T, S - 1]`. Told "no zero column" though the learner padded one: a reshape to
`(*lead, -1, 8)`. Told "torch.cat got a zero column of another rank": a shift by
`torch.take_along_dim` with a `[T, S]` index. Told only "differs": Exercise 5 with k and r
swapped (the content term against r, the shifted position term against k). Told to "drop the
float conversion (or call .long())": Exercise 3 answered with a mask's comparison (bools).
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


def _memory_from_zeros(mem, h, mem_len):
    """The missing memory made on h's device, without dtype=: float32."""
    if mem is None:
        mem = torch.zeros(h.size(0), 0, h.size(2), device=h.device)
    states = torch.cat([mem, h], 1)
    return states[:, states.size(1) - min(mem_len, states.size(1)):].detach()


case("memory_none_zeros_no_dtype", check_update_memory, _memory_from_zeros,
     r"on bfloat16 h has dtype torch\.float32.*promotes.*float64 hid.*h\.new_zeros")
RIGHT["memory_none_new_zeros"] = (check_update_memory, lambda mem, h, n: _memory_from_zeros(
    h.new_zeros(h.size(0), 0, h.size(2)) if mem is None else mem, h, n))


def _shift(first, back):
    """The trick with the reshapes `first(lead, t, s)` and `back(lead, t, s)`."""
    def relative_shift(x):
        *lead, t, s = x.shape
        padded = F.pad(x, (1, 0)).reshape(*first(lead, t, s))
        return padded[..., 1:, :].reshape(*back(lead, t, s))
    return relative_shift


WRITTEN = r"reshape asks for \[{}\].*every size.*{} the same.*written as a number"
case("shift_back_hard_coded_8", check_relative_shift,
     _shift(lambda lead, t, s: (*lead, s + 1, t), lambda lead, t, s: (*lead, t, 8)),
     WRITTEN.format("2, 3, 4, 8", "8 stays"))
case("shift_demo_sizes_10_3", check_relative_shift,
     _shift(lambda lead, t, s: (*lead, 10, 3), lambda lead, t, s: (*lead, t, s)),
     WRITTEN.format("2, 3, 10, 3", "10, 3 stay"))
case("shift_demo_s_plus_1_is_6", check_relative_shift,
     _shift(lambda lead, t, s: (*lead, 6, t), lambda lead, t, s: (*lead, t, s)),
     WRITTEN.format("2, 3, 6, 4", "6 stays"))
case("shift_rows_of_8_inferred", check_relative_shift,
     _shift(lambda lead, t, s: (*lead, -1, 8), lambda lead, t, s: (*lead, t, s)),
     WRITTEN.format("2, 3, -1, 8", "8 stays"))
case("shift_back_s_minus_1", check_relative_shift,
     _shift(lambda lead, t, s: (*lead, s + 1, t), lambda lead, t, s: (*lead, t, s - 1)),
     r"\[2, 3, 4, 8\].*\[\*lead, S \+ 1, T\] = \[2, 3, 10, 4\].*\[\*lead, T, S\] = \[2, 3, 4, 9\]")


def _scores_with(shift):
    """Exercise 5's solution with the shift `shift`."""
    def relative_scores(q, k, r, u, v):
        content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
        position = shift(torch.einsum("bhid,rhd->bhir", q + v[:, None], r))
        return (content + position) / math.sqrt(q.size(-1))
    return relative_scores


case("scores_inline_shift_hard_coded_8", check_relative_scores,
     _scores_with(_shift(lambda lead, t, s: (*lead, s + 1, t), lambda lead, t, s: (*lead, t, 8))),
     WRITTEN.format("2, 3, 4, 8", "8 stays"))


def _shift_take_along(x):
    """The shift by take_along_dim, its [T, S] index not expanded over x's leading axes."""
    t, s = x.shape[-2:]
    i = torch.arange(t, device=x.device)[:, None]
    j = torch.arange(s, device=x.device)[None, :]
    return torch.take_along_dim(x, (j + t - 1 - i).clamp(max=s - 1), -1)


case("shift_take_along_dim_2d_index", check_relative_shift, _shift_take_along,
     r"^(?!.*torch\.cat).*index must have x's dimensions.*take_along_dim.*expand_as\(x\)")
RIGHT["shift_take_along_dim_expanded"] = (check_relative_shift, lambda x: torch.take_along_dim(
    x, (torch.arange(x.size(-1), device=x.device) + x.size(-2) - 1
        - torch.arange(x.size(-2), device=x.device)[:, None]).clamp(max=x.size(-1) - 1)
    .expand(x.shape), -1))


def _scores_k_r_swapped(q, k, r, u, v):
    """The content term against r, the position term (shifted) against k."""
    content = torch.einsum("bhid,rhd->bhir", q + u[:, None], r)
    position = relative_shift(torch.einsum("bhid,bhjd->bhij", q + v[:, None], k))
    return (content + position) / math.sqrt(q.size(-1))


case("scores_k_r_swapped", check_relative_scores, _scores_k_r_swapped,
     r"k and r are swapped.*\(q \+ u\) k\^T.*shift\(\(q \+ v\) r\^T\)")

case("distances_mask_copied", check_relative_distances,  # Exercise 2's comparison
     lambda t, m: torch.arange(m + t)[None, :] <= m + torch.arange(t)[:, None],
     r"dtype torch\.bool.*comparison gives bools.*m \+ i - j itself")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
