"""Issue 28, sixth trial: the answers of the fifth learner's report that were accepted or
got a vague message are named (the cases of /tmp/learner5/nb2_repro.py,
repro_masktrans.py and repro_vague.py, copied)."""
# flake8: noqa: E501,E701,E731
import math
import re

import pytest
import torch

from labnn.data.recall import IGNORE
from checker_helpers import named_briefly
from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.self_attention.masked_attention import check_attention
from labnn.exercises.feedback_transformer.memory_vector import check_memory_vector
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.transformer_xl.relative_scores import check_relative_shift
from labnn.exercises.kv_sharing_stack.stack_append import check_append

CASES = {}


def case(tag, check, fn, pattern):
    CASES[tag] = (check, fn, pattern)


def rs_four_dims(x):  # only works for [B, H, T, S]
    B, H, T, S = x.shape
    p = torch.cat([x.new_zeros(B, H, T, 1), x], -1).view(B, H, S + 1, T)
    return p[:, :, 1:].reshape(B, H, T, S)
case("A", check_relative_shift, rs_four_dims,
     r"any leading dimensions \(here \[T, S\]|x\.shape\[:-2\]")


def att_square_transposed(q, k, v, mask=None):  # transposes a square mask
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        m = mask.transpose(-2, -1) if mask.size(-1) == mask.size(-2) else mask
        s = s.masked_fill(~m, float("-inf"))
    return s.softmax(-1).nan_to_num(0.0) @ v
case("B", check_attention, att_square_transposed, r"mask is transposed \(mask\.mT\)")


def shift_roll(x):  # per-row roll, wrong amount
    out = torch.empty_like(x)
    for i in range(x.size(-2)): out[..., i, :] = x[..., i, :].roll(i + 1, -1)
    return out
case("C", check_relative_shift, shift_roll, r"row i slides RIGHT by i \+ 1.*LEFT by T - 1 - i")


def mv_not_unsqueezed(xs, w): return (w.softmax(0) * xs).sum(0)
case("D", check_memory_vector, mv_not_unsqueezed,
     r"LAST axis of xs \[L\+1, B, D\].*w\.softmax\(0\)\[:, None, None\]")


class AppendTooFar(torch.autograd.Function):  # slot n+1, returns n+2 slots
    @staticmethod
    def forward(ctx, top, value, buffer):
        n = top.size(1); ctx.n = n; buffer.data[:, n + 1] = value; return buffer.data[:, :n + 2]

    @staticmethod
    def backward(ctx, g): n = ctx.n; return g[:, :n + 1], g[:, n + 1], None
case("E", check_append, AppendTooFar, r"one too far")


def recall_all_rows(filler, values, positions):
    N, T = filler.shape; x = filler.clone(); x[:, positions] = values.unsqueeze(1).expand(N, N)
    after = torch.arange(T)[None] > positions[:, None]
    return x, torch.where(after, values[:, None], torch.full_like(filler, IGNORE))
case("F", check_make_recall, recall_all_rows, r"writes into every row at every position")

@pytest.mark.parametrize("tag", sorted(CASES))
def test_trial_case_is_named(tag):
    check, fn, pattern = CASES[tag]
    named_briefly(check, (fn,), pattern, re.S)


def test_05_ex3_one_value_position_for_every_row_is_named():
    """Trial 6: row 0's value position used for every row is told so, not "from the start"
    (the check's row 0 has its value at 0, where the two slips agree)."""
    from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance

    def shared_p(logits, y, max_distance):
        lab = y != IGNORE
        d = torch.arange(y.size(1)) - (lab.int().argmax(1)[0] - 1)
        right = logits.argmax(-1) == y
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            sel = lab & (d == k)[None]
            if sel.any():
                out[k - 1] = right[sel].float().mean()
        return out

    def from_start(logits, y, max_distance):
        lab = y != IGNORE
        d = torch.arange(y.size(1)).expand_as(y)
        right = logits.argmax(-1) == y
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            sel = lab & (d == k)
            if sel.any():
                out[k - 1] = right[sel].float().mean()
        return out

    with pytest.raises(ExerciseFailed, match="taken from row 0 for every row"):
        check_accuracy_by_distance(shared_p)
    with pytest.raises(ExerciseFailed, match="measured from the start of the sequence"):
        check_accuracy_by_distance(from_start)


# Trial 6's vague case (02 Ex4): a gather that reads column S - 1 - (i - j), the memory offset
# forgotten, was told "differs at 180 of 180"; the column each entry reads names it.
def _gather_shift(offset, fill=None):
    def shift(x):
        *lead, t, s = x.shape
        i, j = (torch.arange(n, device=x.device) for n in (t, s))  # where x is (a GPU)
        col = j[None, :] + (t - 1 + offset) - i[:, None]
        out = x.gather(-1, col.clamp(0, s - 1).expand(*lead, t, s))
        return out if fill is None else out.masked_fill((col < 0) | (col >= s), fill)
    return shift


@pytest.mark.parametrize("fill", [None, 0.0], ids=["clamped", "masked"])
def test_a_gather_that_forgets_the_memory_is_named(fill):
    from labnn.exercises.transformer_xl.relative_distances import M
    named_briefly(check_relative_shift, [_gather_shift(M, fill)],
                  r"distance i - j: the M memory keys .* forgotten.*T - 1 - i \+ j")


@pytest.mark.parametrize("offset", [1, -2])
def test_a_gather_off_by_a_constant_is_named(offset):
    side = "right" if offset > 0 else "left"
    named_briefly(check_relative_shift, [_gather_shift(offset)],
                  rf"T - 1 - i \+ j [+-] {abs(offset)} of x, {abs(offset)} too far {side}")


def test_the_right_gather_is_accepted():
    check_relative_shift(_gather_shift(0))
