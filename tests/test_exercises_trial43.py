"""Trial 43: finite fills that no list of typical values holds (-3, -7, -12, -250,
-1234): the far round of notebook 01's Exercise 2 saw the masked keys win, but named the
fill only when it was one of `far_scores.FILLS`; otherwise it said nothing, and -7 was
then blamed on half precision."""
import math

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention.masked_attention import check_attention

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
RIGHT["at_fill_1e5"] = (check_attention, _fill(-1e5))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
