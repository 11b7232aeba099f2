"""Trial 51a: a blind learner trial of notebook 02's exercises (215 answers).

Wrong answers that passed: a shift that views the leading axes as one (`x.view(-1, T, S)`),
which fails on the layout einsum really gives (heads before batch in memory; only the last
two axes were ever transposed); scores that `.view` q and k, which the model hands over
non-contiguous (every q and k tried was contiguous); a mask or distances cached with
`functools.lru_cache`, every caller sharing one tensor (the notebook asks for a mask made
afresh at every call; the checker's message even suggested a cache). A right answer that
was refused (queries and keys each scaled by the fourth root) is in
`test_exercise_messages_trial49.py`.
"""
import functools
import math

import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_segment_mask)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def rs_view_lead(x):
    *lead, t, s = x.shape
    flat = x.view(-1, t, s)
    y = F.pad(flat, (1, 0)).view(-1, s + 1, t)[:, 1:].reshape(-1, t, s)
    return y.view(*lead, t, s)


def sc_view_q_k(q, k, r, u, v):
    b, h, t, d = q.shape
    s = k.size(2)
    content = torch.bmm((q + u[:, None]).reshape(b * h, t, d),
                        k.view(b * h, s, d).transpose(1, 2)).view(b, h, t, s)
    position = (q.view(b, h, t, d) + v[:, None]) @ r.permute(1, 2, 0)
    return (content + relative_shift(position)) / math.sqrt(d)


@functools.lru_cache(maxsize=None)
def mask_cached(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


@functools.lru_cache(maxsize=None)
def distances_cached(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


case("rs_view_lead", check_relative_shift, rs_view_lead, r"(?s)view.*reshape")
case("sc_view_q_k", check_relative_scores, sc_view_q_k, r"(?s)view.*reshape")
case("mask_lru_cache", check_segment_mask, mask_cached, r"(?s)same tensor.*afresh")
case("distances_lru_cache", check_relative_distances, distances_cached,
     r"(?s)same tensor.*afresh")

RIGHT["rs_reshape_lead"] = (check_relative_shift, lambda x: F.pad(x, (1, 0)).reshape(
    *x.shape[:-2], x.size(-1) + 1, x.size(-2))[..., 1:, :].reshape(x.shape))
RIGHT["mask_fresh"] = (check_segment_mask, mask_cached.__wrapped__)
RIGHT["distances_fresh"] = (check_relative_distances, distances_cached.__wrapped__)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
