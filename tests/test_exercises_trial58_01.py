"""Trial 58, notebook 01 (a learner without the solutions, in a fresh kernel): the wrong answer
that passed was Exercise 5's `F.dropout(weights, mha.dropout)`, whose `training` defaults to
True: it drops weights at evaluation too, and passed because the check's module had no dropout
(now a module of dropout 0.5 in eval mode is tried). Right: the same with
`training=mha.training`, and no dropout at all (the module is in eval mode).
"""
import math

import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_multi_head_attention

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mha(dropout):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = dropout(s.softmax(-1), mha)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


case("mha_dropout_always_on", check_multi_head_attention,
     _mha(lambda w, mha: F.dropout(w, mha.dropout)),
     r"dropout.*eval.*training=")
RIGHT["mha_dropout_in_training"] = (check_multi_head_attention,
                                    _mha(lambda w, mha: F.dropout(w, mha.dropout, mha.training)))
RIGHT["mha_no_dropout"] = (check_multi_head_attention, _mha(lambda w, mha: w))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
