"""Trial 61, notebook 05 (a learner's trial, 181 answers): Exercise 3's accuracy that made
IGNORE a label (`torch.where(y != IGNORE, y, 0)`, or `y.clamp(min=0)`) and masked the count
but not the hits passed: in a row with no label, every prediction of id 0 counted as a hit,
and the check's label-less row was never predicted 0. Its model now predicts 0 there, and
the message tells hits from the denominator. Exercise 1's reach kept by the memory's name
was told only of numbers hard-coded.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import check_accuracy_by_distance, check_reach

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _accuracy(relabel):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        safe_y = relabel(y, labelled)
        p = labelled.int().argmax(dim=1) - 1  # each row's value position
        d = torch.arange(y.size(1), device=y.device)[None, :] - p[:, None]
        correct = logits.argmax(dim=-1) == safe_y
        out = [(correct & (d == k)).sum() / ((d == k) & labelled).sum()
               for k in range(1, max_distance + 1)]
        return torch.stack(out).to(logits.dtype)
    return accuracy_by_distance


HITS = r"hits count positions with no label"
case("accuracy_ignore_as_0_where", check_accuracy_by_distance,
     _accuracy(lambda y, labelled: torch.where(labelled, y, 0)), HITS)
case("accuracy_ignore_as_0_clamp", check_accuracy_by_distance,
     _accuracy(lambda y, labelled: y.clamp(min=0)), HITS)


def _kept_reach():
    seen = {}

    def reach(memory, n_layers, span, position=0):
        if memory not in seen:
            seen[memory] = {"window": n_layers * span, "XL": n_layers * span + position,
                            "feedback": math.inf}[memory]
        return seen[memory]
    return reach


case("reach_kept_by_memory", check_reach, _kept_reach(), r"kept from an earlier call")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
