"""Trial 43: finite fills that no list of typical values holds (-3, -7, -12, -250,
-1234): the far round of notebook 01's Exercise 2 saw the masked keys win, but named the
fill only when it was one of `far_scores.FILLS`; otherwise it said nothing, and -7 was
then blamed on half precision. Notebook 05: an argmax taken after rounding the logits to
half precision, which ties logits that differ in float64."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.exercises.feedback_transformer import check_feedback_attention
from labnn.exercises.self_attention.masked_attention import check_attention
from labnn.exercises.three_memories import check_accuracy_by_distance
from labnn.exercises.transformer_xl import check_relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _fill(value):
    """Attention whose masked scores get the finite `value`; empty rows zeroed."""
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            return s.softmax(-1) @ v
        w = s.masked_fill(~mask, value).softmax(-1) * mask.any(-1, keepdim=True)
        return w @ v
    return attention


for fill in (-3.0, -7.0, -12.0, -250.0, -1234.0):
    case(f"at_fill_{-fill:.0f}", check_attention, _fill(fill),
         r"^(?!.*half-precision).*finite fill.*float\('-inf'\)")
# -1e5 overflows float16 (largest 65504), which torch.autocast gives the scores (trial 46a)
case("at_fill_1e5", check_attention, _fill(-1e5), r"(?i)float16|bfloat16|half")



# ---- notebook 05: accuracy_by_distance through half precision ----
def _acc(cast):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != -100
        pred = cast(logits).argmax(-1)
        hits = (pred == y) & labelled
        d = labelled.long().cumsum(1) * labelled
        out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].to(logits.dtype).mean()
        return out
    return accuracy_by_distance


case("acc_half_argmax", check_accuracy_by_distance, _acc(lambda z: z.half()),
     r"(?s)half.*float16|float16.*half")
case("acc_bfloat16_argmax", check_accuracy_by_distance, _acc(lambda z: z.bfloat16()),
     r"(?s)bfloat16")
RIGHT["acc_same_dtype_argmax"] = (check_accuracy_by_distance, _acc(lambda z: z))
RIGHT["acc_float64_argmax"] = (check_accuracy_by_distance, _acc(lambda z: z.double()))


# ---- re-trial 43: an eps taken for a float32 step ----
def _eps_attention(eps):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        e = (s - s.amax(-1, keepdim=True)).exp().nan_to_num(0.0)
        return e / (e.sum(-1, keepdim=True) + eps) @ v
    return attention


case("at_eps_1e-6", check_attention, _eps_attention(1e-6), r"small constant \(an eps\)")
case("at_eps_1e-9", check_attention, _eps_attention(1e-9),
     r"(?s)^(?!.*only float32-accurate).*small constant \(an eps\)")


def _acc_counts_in_dtype(logits, y, max_distance):
    """Counts kept in the logits' dtype: bfloat16 holds integers exactly only up to 256."""
    labelled = y != -100
    hits = (logits.argmax(-1) == y) & labelled
    d = labelled.long().cumsum(1) * labelled
    right = torch.zeros(max_distance, dtype=logits.dtype)
    seen = torch.zeros(max_distance, dtype=logits.dtype)
    for (i, j), k in zip(d.nonzero().tolist(), d[d > 0].tolist()):
        if k <= max_distance:  # one position at a time, as a learner's loop does
            right[k - 1] += hits[i, j]
            seen[k - 1] += 1
    return right / seen


case("acc_counts_in_bfloat16", check_accuracy_by_distance, _acc_counts_in_dtype,
     r"(?s)bfloat16.*256")
case("acc_float32_argmax", check_accuracy_by_distance, _acc(lambda z: z.float()),
     r"(?s)\.float\(\).*float32")


def _softmax_then_mask(q, k, v, mask=None):
    """The softmax over every key, the masked weights zeroed, the rest renormalized."""
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return w @ v


case("at_softmax_then_mask", check_attention, _softmax_then_mask,
     r"(?s)masked key scor.*softmax over every key.*masked_fill")


# ---- re-trial 43b: notebook 03's feedback_attention with an unstable softmax ----
def _fa(softmax):
    def feedback_attention(q, k, v, bias):
        s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
        if s.size(-1) == 0:
            return torch.zeros_like(q)
        return torch.einsum("bhs,bhsd->bhd", softmax(s), v)
    return feedback_attention


def _no_max(s):
    e = s.exp()
    return e / e.sum(-1, keepdim=True)


def _global_max(s):
    e = (s - s.max()).exp()
    return e / e.sum(-1, keepdim=True)


def _row_max(s):
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


case("fa_no_max", check_feedback_attention, _fa(_no_max),
     r"(?s)NaN.*scores of about.*s\.amax\(-1, keepdim=True\)")
case("fa_global_max", check_feedback_attention, _fa(_global_max),
     r"(?s)NaN.*scores of about.*s\.amax\(-1, keepdim=True\)")
RIGHT["fa_row_max"] = (check_feedback_attention, _fa(_row_max))
RIGHT["fa_softmax"] = (check_feedback_attention, _fa(lambda s: s.softmax(-1)))


def _shift_with_s(x):
    """Row i rolled left by S - 1 - i: the M memory keys forgotten (T where S belongs)."""
    s = x.size(-1)
    return torch.stack([x[..., i, :].roll(-(s - 1 - i), dims=-1)
                        for i in range(x.size(-2))], dim=-2)


case("shift_roll_s", check_relative_shift, _shift_with_s,
     r"(?s)roll\(-\(S - 1 - i\)\).*forgets the M memory keys")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
