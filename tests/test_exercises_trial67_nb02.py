"""Trial 67, notebook 02 (a learner's trial of the five exercises).

Named only as "differs" (or as another mistake) before: Exercise 1's window of mem_len states
that ends before the newest; Exercise 3's distances with the sign of i or of j flipped (m - i -
j, the rows or the columns reversed); Exercise 4's shift of the segment's columns only (the
memory's left as they were) and a .tril(M - 1) that zeroes the diagonal too; Exercise 5's
position term shifted at the segment's keys only (told "a flip, a transpose?"), the content
term, or u alone, left out at the memory keys, and k reversed along the keys (k.flip(-2));
Exercise 4's rows rebuilt with the zeros in front. Told only by torch's own error: Exercise 5's
k^T taken on other axes (k.transpose(1, 2), k.T, which reverses all four) or an einsum's
subscripts for k in another order.
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


def _shift(x):
    """The trick: pad, read as [..., S + 1, T], drop the first row, read back."""
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def _segment_part_shifted(x):
    """The shift of the segment's T columns only; the M memory columns kept as they are."""
    m = x.size(-1) - x.size(-2)
    return torch.cat([x[..., :m], _shift(x[..., m:])], -1)


MEMORY_COLUMNS = r"right at the segment's T keys.*memory (columns|keys).*(as they were|unshifted)"
case("shift_memory_columns_unshifted", check_relative_shift, _segment_part_shifted,
     MEMORY_COLUMNS)


def _rows_zeros_first(x):
    """Row i rebuilt as torch.cat([zeros, x[..., i, T - 1 - i:]]): the zeros in front."""
    *lead, t, s = x.shape
    return torch.stack([torch.cat([x.new_zeros(*lead, t - 1 - i), x[..., i, t - 1 - i:]], -1)
                        for i in range(t)], -2)


case("shift_rows_zeros_in_front", check_relative_shift, _rows_zeros_first,
     r"keep x's numbers in their own columns, with zeros in front")


def _shift_tril(offset):
    """The right shift, then `.tril(M + offset)`: offset -1 zeroes the diagonal too."""
    def relative_shift_(x):
        return _shift(x).tril(x.size(-1) - x.size(-2) + offset)
    return relative_shift_


DIAGONAL = r"is 0 at every key j with i \+ 4 < j <= M \+ i.*\.tril\(4\)"
case("shift_tril_m_minus_one", check_relative_shift, _shift_tril(-1), DIAGONAL)
RIGHT["shift_tril_m"] = (check_relative_shift, _shift_tril(0))


def _scores(content=lambda q, k, u: (q + u[:, None]) @ k.mT, position=relative_shift):
    """Scores whose content term is `content(q, k, u)` and whose position term is
    `position((q + v) r^T)`."""
    def relative_scores(q, k, r, u, v):
        by_distance = (q + v[:, None]) @ r.permute(1, 2, 0)
        return (content(q, k, u) + position(by_distance)) / math.sqrt(q.size(-1))
    return relative_scores


def _memory(term):
    """A content term `term(q, k, u)` over the segment's keys only, 0 at the memory's."""
    def content(q, k, u):
        m = k.size(2) - q.size(2)
        return F.pad(term(q, k[:, :, m:], u), (m, 0))
    return content


def _u_on_segment_only(q, k, u):
    """(a) at every key, (c) at the segment's keys only."""
    m = k.size(2) - q.size(2)
    return q @ k.mT + F.pad(u[:, None] @ k[:, :, m:].mT, (m, 0))


case("scores_position_memory_unshifted", check_relative_scores,
     _scores(position=_segment_part_shifted),
     r"right at the segment's T keys.*position term unshifted at the M = 5 memory keys")
case("scores_content_segment_only", check_relative_scores,
     _scores(content=_memory(lambda q, k, u: (q + u[:, None]) @ k.mT)),
     r"right at the segment's T keys.*leaves \(a\) and \(c\) out at the M = 5 memory keys")
case("scores_u_segment_only", check_relative_scores, _scores(content=_u_on_segment_only),
     r"right at the segment's T keys.*leaves \(c\), u's term, out at the M = 5 memory keys")
case("scores_k_flipped", check_relative_scores,
     _scores(content=lambda q, k, u: (q + u[:, None]) @ k.flip(-2).mT),
     r"k reversed along the keys \(k\.flip\(-2\)\)")
case("scores_tril_m_minus_one", check_relative_scores,
     lambda q, k, r, u, v: _scores()(q, k, r, u, v).tril(k.size(2) - q.size(2) - 1), DIAGONAL)


K_AXES = r"k \[B, H, S, D_h\] is transposed on other axes than its last two.*k\.mT"
case("scores_k_transpose_1_2", check_relative_scores,
     _scores(content=lambda q, k, u: (q + u[:, None]) @ k.transpose(1, 2)), K_AXES)
case("scores_k_dot_T", check_relative_scores,
     _scores(content=lambda q, k, u: (q + u[:, None]) @ k.permute(3, 2, 1, 0)), K_AXES)  # k.T


def _einsum_k(q, k, r, u, v):
    """The einsum of the content term reads k as [B, S, H, D_h] ('bjhd')."""
    content = torch.einsum("bhid,bjhd->bhij", q + u[:, None], k)
    by_distance = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    return (content + relative_shift(by_distance)) / math.sqrt(q.size(-1))


case("scores_einsum_k_axes", check_relative_scores, _einsum_k,
     r"your einsum reads its axes in another order.*'bhid,bhjd->bhij'")


def _distances(formula):
    """Relative distances `formula(i, j, m, s)` over i = arange(t) (a column) and
    j = arange(m + t) (a row)."""
    def relative_distances(t, m):
        return formula(torch.arange(t)[:, None], torch.arange(m + t)[None, :], m, m + t)
    return relative_distances


case("distances_i_subtracted", check_relative_distances,
     _distances(lambda i, j, m, s: m - i - j), r"is 5 - i - j.*sign of i")
case("distances_rows_flipped", check_relative_distances,
     _distances(lambda i, j, m, s: (m + i - j).flip(0)), r"is 8 - i - j.*sign of i")
case("distances_columns_flipped", check_relative_distances,
     _distances(lambda i, j, m, s: (m + i - j).flip(1)), r"is -3 \+ i \+ j.*sign of j")


def _memory_window_early(mem, h, mem_len):
    """min(mem_len, M + T) states of [mem, h] that end one state before the newest (where
    there is room: the first ones)."""
    states = h if mem is None else torch.cat([mem, h], 1)
    kept = min(mem_len, states.size(1))
    start = max(0, states.size(1) - kept - 1)
    return states[:, start:start + kept].detach()


case("memory_window_one_early", check_update_memory, _memory_window_early,
     r"ends 1 state before the newest")


def _mask_minus_remainder(n, seg_len, mem_len):
    """start(i) as i - i % seg_len."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= i - i % seg_len - mem_len)


def _memory_detached_parts(mem, h, mem_len):
    """Both parts detached before the concatenation (the hint's "or both parts")."""
    states = h.detach() if mem is None else torch.cat([mem.detach(), h.detach()], 1)
    return states[:, states.size(1) - min(mem_len, states.size(1)):]


def _shift_gather_modulo(x):
    """A gather whose column T - 1 - i + j wraps modulo S past the row (future keys)."""
    *lead, t, s = x.shape
    i = torch.arange(t, device=x.device)[:, None]
    j = torch.arange(s, device=x.device)[None, :]
    return x.gather(-1, ((t - 1 - i + j) % s).expand(*lead, t, s))


RIGHT["mask_minus_remainder"] = (check_segment_mask, _mask_minus_remainder)
RIGHT["memory_detached_parts"] = (check_update_memory, _memory_detached_parts)
RIGHT["shift_gather_modulo"] = (check_relative_shift, _shift_gather_modulo)
RIGHT["scores_content_by_parts"] = (check_relative_scores, _scores(
    content=lambda q, k, u: q @ k.mT + u[:, None] @ k.mT))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
