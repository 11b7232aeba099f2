"""Trial 64, notebook 02 (a learner's trial). Accepted before: Exercise 2's mask returned as a
slice of one kept triangle when the memory reaches the text's start (mem_len >= n) or the text
fits in one segment, and Exercise 3's distances kept for m = 0: sizes at which the check never
asked for a second, separate result.

Named only as "differs" or by shape before: Exercise 5's position bias v in the content term
(with no bias, or both, in the position term), both biases in the content term, u or v shared
by every head (averaged or summed over the heads) or added as one number, r added to the keys,
(q + u) (k + r)^T, and r's rows read by a wrong table of distances (i - j, the sign flipped);
Exercise 1's memory sliced from x.size(-1) - mem_len (D), along the features, or one state too
many.

Crashed with torch's error only (or a notice that blamed something else): a relative shift
padded on both sides, F.pad(x, (1, 1)), in Exercise 4 or inline in Exercise 5; Exercise 4's T
and S read from x.size(1), x.size(2), and its gather with a [T, S] index (blamed on torch.cat)
or an index past column S - 1 (in Exercise 5 too); Exercise 1's memory concatenated along the
features, or torch.cat(mem, h, dim=1) without a list; Exercise 5's biases given as u[:, None,
None] or u[None, None] (told they had "no batch or query axis"); Exercise 5's q cloned, then
edited in place after the content product saved it (told that the output of `as_strided`
changed, and to write `e = e / e.sum(...)`); term (d), v r^T [1, H, 1, S], shifted by itself (a
one-row shift moves nothing), told only that it was "added unshifted".
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


def _scores(content_bias, position_bias, shift=relative_shift):
    """Scores whose content and position terms add `content_bias(u, v)` and
    `position_bias(u, v)` (`[H, D_h]`, given a query axis; `[D_h]`, added as it is; or 0)
    to the queries."""
    def query_axis(bias):
        return bias[:, None] if isinstance(bias, torch.Tensor) and bias.dim() == 2 else bias

    def relative_scores(q, k, r, u, v):
        c_bias, p_bias = query_axis(content_bias(u, v)), query_axis(position_bias(u, v))
        content = (q + c_bias) @ k.mT
        position = (q + p_bias) @ r.permute(1, 2, 0)
        return (content + shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


U, V, NONE = (lambda u, v: u), (lambda u, v: v), (lambda u, v: 0)
CONTENT_V = r"content term adds v \(the position bias\) to the queries where u belongs"
case("scores_v_in_content_no_position_bias", check_relative_scores, _scores(V, NONE),
     CONTENT_V + r"; the position term has no bias v.*\(q \+ u\[:, None\]\) k\^T")
case("scores_v_in_content_both_in_position", check_relative_scores,
     _scores(V, lambda u, v: u + v),
     CONTENT_V + r"; the position term adds both u and v")
case("scores_both_biases_in_content", check_relative_scores, _scores(lambda u, v: u + v, V),
     r"content term adds both u and v to the queries: .*one row per head")
case("scores_u_averaged_over_heads", check_relative_scores,
     _scores(lambda u, v: u.mean(0), V), r"content term shares one bias among the heads, "
     r"u\.mean\(0\).*one row per head")
case("scores_u_averaged_keepdim", check_relative_scores,
     _scores(lambda u, v: u.mean(0, keepdim=True).expand_as(u), V),
     r"content term shares one bias among the heads, u\.mean\(0\)")
case("scores_v_summed_over_heads", check_relative_scores,
     _scores(U, lambda u, v: v.sum(0)), r"position term shares one bias among the heads, "
     r"v\.sum\(0\)")
case("scores_biases_as_one_number", check_relative_scores,
     _scores(lambda u, v: u.mean(), lambda u, v: v.mean()),
     r"content term adds one number, u\.mean\(\), to every feature; the position term "
     r"adds one number, v\.mean\(\)")


def _scores_d_shifted_alone(q, k, r, u, v):
    """Term (d) computed as v r^T, [1, H, 1, S], and shifted by itself."""
    rt = r.permute(1, 2, 0)
    content = (q + u[:, None]) @ k.mT
    d = (v[:, None] @ rt)[None]
    return (content + relative_shift(q @ rt) + relative_shift(d)) / math.sqrt(q.size(-1))


case("scores_d_shifted_alone", check_relative_scores, _scores_d_shifted_alone,
     r"term \(d\) v r\^T is added unshifted \(shifted alone, its one row, \[1, H, 1, S\], "
     r"stays in place\)")
case("scores_r_added_to_keys", check_relative_scores,
     lambda q, k, r, u, v: (q + u[:, None]) @ (k + r.transpose(0, 1)).mT / math.sqrt(q.size(-1)),
     r"you added r to the keys, k \+ r, as absolute positions are added")
RIGHT["scores_right"] = (check_relative_scores, _scores(U, V))


def _pad_both(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 1)).view(*lead, s + 1, t)[..., 1:, :].view(*lead, t, s)


def _pad_both_reshaped(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 1)).reshape(*lead, -1, t)[..., 1:, :].reshape(*lead, t, s)


def _pad_two_left(x):
    *lead, t, s = x.shape
    return F.pad(x, (2, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


BOTH = r"F\.pad\(x, \(1, 1\)\) pads a zero column on BOTH sides.*F\.pad\(x, \(1, 0\)\)"
case("shift_padded_both_sides", check_relative_shift, _pad_both, BOTH)
case("shift_padded_both_sides_reshape", check_relative_shift, _pad_both_reshaped, BOTH)
case("shift_padded_two_left", check_relative_shift, _pad_two_left,
     r"F\.pad\(x, \(2, 0\)\) pads 2 zero columns.*F\.pad\(x, \(1, 0\)\)")
case("scores_shift_padded_both_sides", check_relative_scores, _scores(U, V, _pad_both), BOTH)


def _pad_both_cropped(x):
    """Both sides padded, the right column cropped again: the left pad of the trick."""
    *lead, t, s = x.shape
    padded = F.pad(x, (1, 1))[..., :-1]
    return padded.reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


RIGHT["shift_padded_both_sides_then_cropped"] = (check_relative_shift, _pad_both_cropped)



def _scores_edited_after_product(q, k, r, u, v):
    """The caller's q left alone (a clone), but the clone edited after the content product
    saved it."""
    q = q.clone()
    q += u[:, None]
    content = q @ k.mT
    q += v[:, None] - u[:, None]
    return (content + relative_shift(q @ r.permute(1, 2, 0))) / math.sqrt(q.size(-1))


case("scores_clone_edited_after_product", check_relative_scores,
     _scores_edited_after_product,
     r"^(?!.*as_strided)(?!.*e\.sum).*backward pass .*raised: a tensor autograd saved \(seen "
     r"through a \[6, 4, 8\] view.*changed in place.*q = q \+ v, not q \+= v")



def _shift_sizes_from_axes_1_2(x):
    """T and S read from axes 1 and 2, right for a 3-D x only."""
    *lead, _, _ = x.shape
    t, s = x.size(1), x.size(2)
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


case("shift_sizes_from_axes_1_2", check_relative_shift, _shift_sizes_from_axes_1_2,
     r"works on a 3-D x \[H, T, S\] but not on \[B, H, T, S\].*LAST two axes")



_TRIANGLE = torch.ones(64, 64, dtype=torch.bool).tril()


def _mask_kept_when_memory_covers(n, seg_len, mem_len):
    """A slice of one kept triangle when the memory reaches the start of the text."""
    if mem_len >= n:
        return _TRIANGLE[:n, :n]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def _mask_kept_within_one_segment(n, seg_len, mem_len):
    """A slice of one kept triangle when the text fits in one segment."""
    if n <= seg_len:
        return _TRIANGLE[:n, :n]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


KEPT = r"segment_mask\(\d+, 4, \d+\) returns the same tensor on every call.*afresh"
case("mask_kept_when_memory_covers", check_segment_mask, _mask_kept_when_memory_covers, KEPT)
case("mask_kept_within_one_segment", check_segment_mask, _mask_kept_within_one_segment, KEPT)



_BY_DISTANCE = torch.arange(64)[:, None] - torch.arange(64)[None, :]


def _distances_kept_without_memory(t, m):
    """A slice of one kept table when there is no memory (m = 0)."""
    if m == 0:
        return _BY_DISTANCE[:t, :t]
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


case("distances_kept_without_memory", check_relative_distances,
     _distances_kept_without_memory,
     r"relative_distances\(4, 0\) returns the same tensor on every call.*afresh")



def _scores_bias_axes(axes):
    """The biases given the axes `axes` picks (u[:, None, None]: the heads on the batch)."""
    def relative_scores(q, k, r, u, v):
        content = (q + axes(u)) @ k.mT
        position = (q + axes(v)) @ r.permute(1, 2, 0)
        return (content + relative_shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


HEADS = (r"^(?!.*no batch or query axis).*must meet q \[B, H, T, D_h\] on its heads: "
         r"u\[:, None\].*u\[:, None, None\], meets other axes")
case("scores_bias_heads_on_batch", check_relative_scores,
     _scores_bias_axes(lambda b: b[:, None, None]), HEADS)
case("scores_bias_heads_on_queries", check_relative_scores,
     _scores_bias_axes(lambda b: b[None, None]), HEADS)



def _scores_r_by_distance(distance):
    """The position term read from r's rows by a table of distances (clamped into range)."""
    def relative_scores(q, k, r, u, v):
        t, s = q.size(2), k.size(2)
        i, j = torch.arange(t)[:, None], torch.arange(s)[None, :]
        rows = r[s - 1 - distance(i, j, s - t).clamp(0, s - 1)]  # [T, S, H, D_h]
        position = torch.einsum("bhid,ijhd->bhij", q + v[:, None], rows)
        return ((q + u[:, None]) @ k.mT + position) / math.sqrt(q.size(-1))
    return relative_scores


RIGHT["scores_r_by_distance"] = (check_relative_scores,
                                 _scores_r_by_distance(lambda i, j, m: m + i - j))
case("scores_r_by_distance_memory_left_out", check_relative_scores,
     _scores_r_by_distance(lambda i, j, m: i - j),
     r"reads, at query i and key j, the encoding of distance i - j \(the memory left out\)")
case("scores_r_by_distance_sign_flipped", check_relative_scores,
     _scores_r_by_distance(lambda i, j, m: m + j - i),
     r"encoding of distance M \+ j - i \(the sign flipped\)")



def _shift_by_gather(index):
    """The shift as x.gather(-1, index(t, s, lead)) from column T - 1 - i + j."""
    def shift(x):
        *lead, t, s = x.shape
        i = torch.arange(t, device=x.device)[:, None]
        j = torch.arange(s, device=x.device)[None, :]
        return x.gather(-1, index(t - 1 - i + j, s, lead))
    return shift


RIGHT["shift_gather_wrapped"] = (
    check_relative_shift, _shift_by_gather(lambda c, s, lead: (c % s).expand(*lead, -1, -1)))
case("shift_gather_index_not_expanded", check_relative_shift,
     _shift_by_gather(lambda c, s, lead: c % s),
     r"^(?!.*torch\.cat).*gather's index must have x's dimensions.*expand_as\(x\)")
case("shift_gather_index_past_s", check_relative_shift,
     _shift_by_gather(lambda c, s, lead: c.expand(*lead, -1, -1)),
     r"an index into the S = 9 columns of x reaches 9.*clamp.*% s")

case("scores_gather_index_not_expanded", check_relative_scores,
     _scores(U, V, _shift_by_gather(lambda c, s, lead: c % s)),
     r"gather's index must have x's dimensions.*expand_as\(x\)")
case("scores_gather_index_past_s", check_relative_scores,
     _scores(U, V, _shift_by_gather(lambda c, s, lead: c.expand(*lead, -1, -1))),
     r"an index into the S = 9 columns of x reaches 9.*clamp.*% s")


def _memory_features(mem, h, mem_len):
    states = h if mem is None else torch.cat([mem, h], -1)
    return states[..., max(0, states.size(-1) - mem_len):].detach()


case("memory_cat_and_slice_features", check_update_memory, _memory_features,
     r"concatenates mem and h along the features \(the last axis\).*dim=1")


def _memory(cut):
    """The memory update with `cut(states, mem_len)` in place of the slice."""
    def update_memory(mem, h, mem_len):
        states = h if mem is None else torch.cat([mem, h], 1)
        return cut(states, mem_len).detach()
    return update_memory


case("memory_sliced_by_width", check_update_memory,
     _memory(lambda x, n: x[:, max(0, x.size(-1) - n):]),
     r"kept 7 states, not mem_len = 6: .*x\.size\(-1\) is D = 8, the width of a state")
case("memory_cut_features", check_update_memory,
     _memory(lambda x, n: x[..., max(0, x.size(1) - n):]),
     r"cut the last axis, the features D \(x\[\.\.\., start:\]\).*dim 1, time")
case("memory_kept_one_more", check_update_memory,
     _memory(lambda x, n: x[:, max(0, x.size(1) - n - 1):]),
     r"^(?!.*width of a state).*kept 7 = mem_len \+ 1 states, one too many")


def _memory_cat_arguments(mem, h, mem_len):
    states = h if mem is None else torch.cat(mem, h, dim=1)
    return states[:, max(0, states.size(1) - mem_len):].detach()


case("memory_cat_without_list", check_update_memory, _memory_cat_arguments,
     r"torch\.cat takes one list \(or tuple\) of tensors, torch\.cat\(\[mem, h\], dim=1\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
