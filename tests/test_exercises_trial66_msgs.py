"""Trial 66, wrong answers left with a generic message (a learner's trial of notebooks 01-05).

Notebook 01: Exercise 1's weights normalised with a ReLU for the exp (`scores.relu() /
scores.relu().sum(-1, keepdim=True)`) and Exercise 5's softmax over the heads with its NaN put to
0 (`.softmax(1).nan_to_num(0)`) were told only that the result differs.

Notebook 02: Exercise 2's mask reaching a whole segment further back (`(j <= i) & (j >=
(i // s) * s - s - m)`) or its start taken from i + 1 (`((i + 1) // s) * s`) were told only
where the mask differs; Exercise 5's content or position bias reversed over its heads
(`u.flip(0)`, `v.flip(0)`), only that the scores differ.

Notebook 05: Exercise 2's values cast before they were written (`x[rows, positions] =
values.float()`) raised torch's "Index put requires the source and destination dtypes match"
under the check's generic notice; labels that hold the token before each position after the
value (`torch.where(after, torch.cat([x[:, :1], x[:, :-1]], 1), IGNORE)`) were told only
that one entry holds a wrong id; Exercise 3's next position's prediction with the last position
scored by its own (`torch.cat([logits[:, 1:], logits[:, -1:]], 1).argmax(-1) == y`) was told
that 3 of 7 entries differ. Each is named now.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests
from test_exercises_trial65_nb05 import _accuracy_of
from test_exercises_trial66_nb01 import _merge, _split

from labnn.data.recall import IGNORE
from labnn.exercises.self_attention import check_attention_weights, check_multi_head_attention
from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall
from labnn.exercises.transformer_xl import check_relative_scores, check_segment_mask
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)



def _relu_weights(q, k):
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).relu()
    return s / s.sum(-1, keepdim=True)


case("weights_relu_normalised", check_attention_weights, _relu_weights,
     r"scores' ReLU over its row's sum.*softmax\(dim=-1\)")


def _mha_softmax_over(dim):
    """Notebook 01's multi-head attention, the softmax over `dim`, NaN put to 0."""
    def multi_head_attention(x, mha, mask=None):
        q, k, v = (_split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return mha.out_proj(_merge(s.softmax(dim).nan_to_num(0) @ v))
    return multi_head_attention


case("mha_softmax_over_heads_nan_to_num", check_multi_head_attention, _mha_softmax_over(1),
     r"softmax runs over the heads \(dim=1.*softmax\(dim=-1\)")
RIGHT["mha_softmax_over_keys_nan_to_num"] = (check_multi_head_attention, _mha_softmax_over(-1))


def _segment_mask(start):
    """Notebook 02's segment mask, each query's segment start `start(i, seg_len, mem_len)`."""
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return (j <= i) & (j >= start(i, seg_len, mem_len) - mem_len)
    return segment_mask


case("segment_mask_extra_segment", check_segment_mask,
     _segment_mask(lambda i, s, m: (i // s) * s - s), r"whole segment further back")
case("segment_mask_start_of_next", check_segment_mask,
     _segment_mask(lambda i, s, m: ((i + 1) // s) * s), r"start of i \+ 1.*NEXT segment")


def _recall(write=lambda values: values, label=lambda x, values: values[:, None]):
    """The notebook's make_recall, the values written as `write(values)` and the labels after
    the value taken from `label(x, values)`."""
    def make_recall(filler, values, positions):
        x = filler.clone()
        x[torch.arange(filler.size(0), device=filler.device), positions] = write(values)
        after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
        return x, torch.where(after, label(x, values), IGNORE)
    return make_recall


case("recall_values_written_as_float", check_make_recall, _recall(write=lambda v: v.float()),
     r"positions\] = \.\.\.` writes Float values into a Long tensor.*does not convert.*"
     r"\.to\(x\.dtype\)")
RIGHT["recall_values_written_as_long"] = (check_make_recall, _recall(write=lambda v: v.long()))
case("recall_labels_token_before", check_make_recall,
     _recall(label=lambda x, v: torch.cat([x[:, :1], x[:, :-1]], 1)),
     r"token before each position, x\[:, t - 1\].*values\[n\], at every t > positions\[n\]")
case("accuracy_next_prediction_last_kept", check_accuracy_by_distance,
     _accuracy_of(lambda logits: torch.cat([logits[:, 1:], logits[:, -1:]], 1).argmax(-1)),
     r"next position's prediction \(logits\[:, t \+ 1\], the last position scored by its "
     r"own.*without a shift")


def _scores(flip=""):
    """Notebook 02's relative scores, the bias named by `flip` reversed over its heads."""
    def relative_scores(q, k, r, u, v):
        u, v = (b.flip(0) if n == flip else b for n, b in (("u", u), ("v", v)))
        content = (q + u[:, None]) @ k.transpose(-2, -1)
        position = torch.einsum("bhid,rhd->bhir", q + v[:, None], r)
        return (content + relative_shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


for bias in "uv":
    case(f"scores_{bias}_heads_flipped", check_relative_scores, _scores(bias),
         rf"{bias}'s heads are reversed \({bias}\.flip\(0\)\?\).*{bias}\[:, None\]")
RIGHT["scores_biases_as_given"] = (check_relative_scores, _scores())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
