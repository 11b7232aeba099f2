"""Trial 65, notebook 02 (a learner's trial of the five exercises).

Named only as "differs" before (or by another mistake): Exercise 5's content bias u (or the
position bias v, or both) reduced over the features, one number per head added to every
feature (u.mean(-1)[:, None, None], u.sum(-1)), or with no axis, q + u.mean(-1), which
crashed with torch's broadcast error only; k^T made with k.reshape(B, H, D_h, S);
Exercise 1's old memory cut from its front (its oldest states kept) before the concatenation;
Exercise 2's memory rounded down to whole segments, told it bounded the key's segment start
(the same mask, one of its two spellings); Exercise 3's table of r's columns, S - 1 - (m + i
- j), for the distances.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_segment_mask, check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(content_bias, position_bias, keys=lambda k: k.mT):
    """Scores whose queries get `content_bias(u)` and `position_bias(v)` (broadcast as
    given) and whose content product meets `keys(k)`."""
    def relative_scores(q, k, r, u, v):
        content = (q + content_bias(u)) @ keys(k)
        position = (q + position_bias(v)) @ r.permute(1, 2, 0)
        return (content + relative_shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


ROW = lambda b: b[:, None]  # noqa: E731 (the right bias: one row per head)
FEATURES = r"one number per head, {}\.{}\(-1\), to every feature.*one row per head"
case("scores_u_mean_over_features", check_relative_scores,
     _scores(lambda u: u.mean(-1)[:, None, None], ROW),
     r"content term adds " + FEATURES.format("u", "mean"))
case("scores_u_mean_over_features_keepdim", check_relative_scores,
     _scores(lambda u: u.mean(-1, keepdim=True)[:, None], ROW),
     r"content term adds " + FEATURES.format("u", "mean"))
case("scores_v_mean_over_features", check_relative_scores,
     _scores(ROW, lambda v: v.mean(-1)[:, None, None]),
     r"position term adds " + FEATURES.format("v", "mean"))
case("scores_both_mean_over_features", check_relative_scores,
     _scores(lambda u: u.mean(-1)[:, None, None], lambda v: v.mean(-1)[:, None, None]),
     r"content term adds one number per head, u\.mean\(-1\).*position term adds one "
     r"number per head, v\.mean\(-1\)")
case("scores_u_summed_over_features", check_relative_scores,
     _scores(lambda u: u.sum(-1)[:, None, None], ROW),
     r"content term adds " + FEATURES.format("u", "sum"))
case("scores_u_mean_over_features_no_axis", check_relative_scores,
     _scores(lambda u: u.mean(-1), ROW),
     r"a tensor of H = 3 numbers met q's D_h = 8 features.*u\.mean\(-1\).*q \+ u\[:, None\]")
case("scores_k_transposed_by_reshape", check_relative_scores,
     _scores(ROW, ROW, keys=lambda k: k.reshape(*k.shape[:2], k.size(3), k.size(2))),
     r"k\^T is made with reshape: k\.reshape\(B, H, D_h, S\).*k\.transpose\(-2, -1\)")
RIGHT["scores_right"] = (check_relative_scores, _scores(ROW, ROW))


def _memory_old_front_kept(mem, h, mem_len):
    """The old memory cut from its front (its oldest states) before the concatenation."""
    if mem is not None:
        mem = mem[:, :max(0, mem_len - h.size(1))]
        h = torch.cat([mem, h], 1)
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


def _memory_old_back_kept(mem, h, mem_len):
    """The old memory cut from its back (its newest states) before the concatenation:
    right."""
    if mem is not None:
        keep = max(0, min(mem_len - h.size(1), mem.size(1)))
        h = torch.cat([mem[:, mem.size(1) - keep:], h], 1)
    return h[:, h.size(1) - min(mem_len, h.size(1)):].detach()


case("memory_old_front_kept", check_update_memory, _memory_old_front_kept,
     r"kept the OLDEST states of the old memory.*mem\[:, :k\].*last mem_len of "
     r"torch\.cat\(\[mem, h\], dim=1\)")
RIGHT["memory_old_back_kept"] = (check_update_memory, _memory_old_back_kept)


def _mask_whole_segments_down(n, seg_len, mem_len):
    """The memory rounded down to whole segments, mem_len // seg_len of them."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return (j <= i) & (j >= start - (mem_len // seg_len) * seg_len)


case("mask_memory_whole_segments_down", check_segment_mask, _mask_whole_segments_down,
     r"rounds the memory down to whole segments, \(mem_len // seg_len\) \* seg_len.*"
     r"key's segment start")


def _distances_as_columns(t, m):
    """The column of r that holds each distance, S - 1 - (m + i - j)."""
    i, j = torch.arange(t)[:, None], torch.arange(m + t)[None, :]
    return m + t - 1 - (m + i - j)


case("distances_as_columns_of_r", check_relative_distances, _distances_as_columns,
     r"column of r.*S - 1 - \(m \+ i - j\).*return m \+ i - j")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
