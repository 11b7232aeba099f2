"""Issue 28's one dtype rule, for every checker whose answer is a floating tensor: a right
answer with `.float()` on its result is refused by name (float64 in, float64 out).

The right answers are trial 28's (a learner's own, one per exercise); before this test,
01 Ex2, 01 Ex5, 02 Ex4 and 02 Ex5 accepted them with `.float()` (their inputs were
float32 only)."""

import pytest
import torch

from checker_helpers import fails_with
from test_exercises_trial28a import RIGHT as RIGHT_A
from test_exercises_trial28b import RIGHT as RIGHT_B

FLOAT_RESULTS = {  # exercise tag in trial 28 -> what its answer returns
    "aw": "01 Ex1 weights", "att": "01 Ex2 attention", "mha": "01 Ex5 multi-head",
    "um": "02 Ex1 memory", "rs": "02 Ex4 shift", "rsc": "02 Ex5 scores",
    "mv": "03 layer mix", "rb": "03 bias", "fa": "03 attention", "tl": "03 logits",
    "vg": "04 value gradients", "wg": "04 weight gradient", "abd": "05 accuracies",
}


def _as_float32(fn):
    def answer(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out.float() if torch.is_tensor(out) and out.is_floating_point() else out
    return answer


@pytest.mark.parametrize("tag", sorted(FLOAT_RESULTS))
def test_a_float32_cast_of_a_right_answer_is_refused(tag):
    check, fn = {**RIGHT_A, **RIGHT_B}[tag]
    fails_with(check, _as_float32(fn), match=r"dtype torch\.float32|returns torch\.float32")
