"""Trial 71, notebook 01 (a learner's trial of the five exercises).

Misnamed, each told only "differs": scores that are not dot products, minus the distance
between query and key or its square (`-torch.cdist(q, k) ** 2`, scaled or not), in
Exercises 1, 2 and 5 (cosine similarity was named in Exercise 1 only); a fully masked row
whose NaN log-weights were set to 0 before the exp (`log_softmax(...).nan_to_num().exp()`:
every weight 1, the sum of the values; a row filled with 1 gives it too) in Exercises 2 and
5; and, with a `[B, T, S]` mask, the all-False-row fix reduced over the batch with `all`
(`mask.any(-1, keepdim=True).all(0)`: a row empty in one batch entry zeroed in every entry)
in Exercise 2. Each is now named. A mask viewed as `[1, T, S]` (or `[T, S]`), which a
`[B, T, S]` mask cannot be, got its raw traceback in Exercise 2; it is now named.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(q, k):
    return q @ k.mT / math.sqrt(q.size(-1))


def _masked(s, mask):
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def _softmax(s, mask=None, empty=lambda w, mask: w.masked_fill(~mask.any(-1, keepdim=True), 0)):
    w = _masked(s, mask).softmax(-1)
    return w if mask is None else empty(w, mask)


def _mha(weigh):  # Exercise 5 with the heads' weights `weigh(q, k, mask)`
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        return mha.out_proj((weigh(q, k, mask) @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


DISTANCE = r"minus the distances between query and key \(torch\.cdist"
for tag, far in (("cdist_squared_scaled", lambda q, k: -torch.cdist(q, k) ** 2 / q.size(-1) ** .5),
                 ("cdist_squared", lambda q, k: -torch.cdist(q, k) ** 2),
                 ("cdist", lambda q, k: -torch.cdist(q, k))):
    case(f"weights_{tag}", check_attention_weights, lambda q, k, far=far: far(q, k).softmax(-1),
         DISTANCE)
    case(f"attention_{tag}", check_attention, lambda q, k, v, mask=None, far=far:
         _softmax(far(q, k), mask) @ v, DISTANCE)
    case(f"mha_{tag}", check_multi_head_attention,
         _mha(lambda q, k, mask, far=far: _softmax(far(q, k), mask)), DISTANCE)
case("attention_cosine", check_attention, lambda q, k, v, mask=None: _softmax(
    torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(k, dim=-1).mT,
    mask) @ v, r"normalized q and k \(cosine similarity\)")

SUMMED = r"all False gets the sum of the values \(every weight 1: .*nan_to_num\(\)\.exp\(\)"


def _log_weights(s, mask=None):  # log_softmax's NaN (an all -inf row) set to 0, then exp
    return _masked(s, mask).log_softmax(-1).nan_to_num().exp()


case("attention_log_softmax_nan_to_num_exp", check_attention,
     lambda q, k, v, mask=None: _log_weights(_scores(q, k), mask) @ v, SUMMED)
case("mha_log_softmax_nan_to_num_exp", check_multi_head_attention,
     _mha(lambda q, k, mask: _log_weights(_scores(q, k), mask)), SUMMED)
case("attention_empty_rows_filled_with_1", check_attention, lambda q, k, v, mask=None: _softmax(
    _scores(q, k), mask, lambda w, mask: w.masked_fill(~mask.any(-1, keepdim=True), 1.0)) @ v,
     r"sum of the values \(every weight 1: its weights filled with 1")
RIGHT["attention_log_softmax_exp_nan_to_num"] = (check_attention, lambda q, k, v, mask=None:
                                                 _log_weights(_scores(q, k)) @ v if mask is None
                                                 else _masked(_scores(q, k), mask).log_softmax(
                                                     -1).exp().nan_to_num() @ v)


def _empty_rows_all_batch(w, mask):  # a row empty in any batch entry is zeroed in all
    keep = mask.any(-1, keepdim=True)
    return w.masked_fill(~(keep.all(0) if keep.dim() == 3 else keep), 0.0)


case("attention_empty_rows_all_over_batch", check_attention, lambda q, k, v, mask=None:
     _softmax(_scores(q, k), mask, _empty_rows_all_batch) @ v,
     r"batch 0's row 2, which may attend keys, gives zeros: .*reduces over the batch too "
     r"\(dim 0: the row counts as empty when batch 1's row 2 is\)")


def _viewed(shape):  # the mask viewed as `shape(q, k)` before it is used
    return lambda q, k, v, mask=None: _softmax(_scores(q, k), None if mask is None else
                                               mask.view(shape(q, k))) @ v


for tag, shape in (("1ts", lambda q, k: (1, q.size(-2), k.size(-2))),
                   ("ts", lambda q, k: (q.size(-2), k.size(-2)))):
    case(f"attention_mask_view_{tag}", check_attention, _viewed(shape),
         r"fails for the \[B, T, S\] one .*a view or reshape of the mask .*cannot hold")
RIGHT["attention_softmax"] = (check_attention, lambda q, k, v, mask=None:
                              _softmax(_scores(q, k), mask) @ v)
RIGHT["mha_softmax"] = (check_multi_head_attention,
                        _mha(lambda q, k, mask: _softmax(_scores(q, k), mask)))
RIGHT["weights_shifted_norms"] = (check_attention_weights, lambda q, k: (  # q.k from distances
    (k * k).sum(-1)[..., None, :] / 2 - torch.cdist(q, k) ** 2 / 2).div(q.size(-1) ** .5)
    .softmax(-1))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
