"""Trial 64 (left): three messages that blamed the wrong mistake or showed torch's raw error.
Notebook 04's `Square.backward` written `g @ torch.diag(2 * x)` (right for one 1-D x only) was
told "(no .sum())"; notebook 03's token loop with a hand-written layer mix that mixed the batch
rows (`einsum('l,lbd->d', ...)` expanded over the batch) was told only that it never calls
model.mix; notebook 02's Exercise 5 with an inline shift reading T and S from x.size(1),
x.size(2) crashed with torch's reshape error.
"""
import math

import torch
import torch.nn.functional as F

from checker_helpers import feedback_token_loop, square_with, trial_case, trial_tests

from labnn.exercises.feedback_transformer import check_token_loop
from labnn.exercises.kv_sharing_stack import check_square
from labnn.exercises.transformer_xl import check_relative_scores

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# Notebook 04, Exercise 2: a matrix product with a diagonal matrix
_square = square_with


class _DiagSquare(torch.autograd.Function):
    """Square with backward written as a product with a diagonal matrix."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g @ torch.diag(2 * x)


_DiagSquare.__name__ = "Square"
case("square_backward_diag_matmul", check_square, _DiagSquare,
     r"torch\.diag.*1-D x.*elementwise.*grad_output \* 2 \* x")
case("square_backward_shape_not_summed", check_square,
     _square(lambda x, g: (g * 2 * x)[0]), r"gradient of shape \[3\](?!.*sum)")


# Notebook 03, Exercise 4: a hand-written layer mix
def _loop(mix):  # mix(logits, layers): a hand-written layer mix
    return feedback_token_loop(lambda model, outs: mix(model.mix.logits, torch.stack(outs)))


case("token_loop_own_mix_over_batch", check_token_loop, _loop(
    lambda w, xs: torch.einsum("l,lbd->d", w.softmax(0), xs).expand_as(xs[0])),
     r"mix.*batch rows")
RIGHT["token_loop_own_mix_weighted_sum"] = (check_token_loop, _loop(
    lambda w, xs: (w.softmax(0)[:, None, None] * xs).sum(0)))


# Notebook 02, Exercise 5: an inline shift reading T and S from axes 1 and 2
def _scores_sizes_from_axes_1_2(q, k, r, u, v):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    x = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    *lead, _, _ = x.shape
    t, s = x.size(1), x.size(2)
    x = F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)
    return (content + x) / math.sqrt(q.size(-1))


case("scores_shift_sizes_from_axes_1_2", check_relative_scores, _scores_sizes_from_axes_1_2,
     r"x\.size\(1\), x\.size\(2\).*LAST two axes")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
