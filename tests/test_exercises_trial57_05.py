"""Trial 57, notebook 05 (a learner without the solutions, in a fresh kernel): the wrong answer
that passed was Exercise 3's distances counted in the logits' dtype, `labelled.to(logits.dtype)
.cumsum(1)`: in bfloat16 the count stops at 256, so every distance past it was wrong (and
left NaN where none was). Right: the same with the distances counted in integers, hits counted
as booleans and divided at the end. Unclear: Exercise 2's `torch.arange(T) > positions[:, None]`
(a CPU tensor compared with the inputs) was named "(in gt)": now the operator, `>`.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGNORE = -100


def _scores(count):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = count(labelled, logits).cumsum(1).long() * labelled
        hits = (logits.argmax(-1) == y) & labelled
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].sum() / at.sum()
        return out
    return accuracy_by_distance


case("abd_distances_in_logits_dtype", check_accuracy_by_distance,
     _scores(lambda labelled, logits: labelled.to(logits.dtype)),
     r"256.*(distance|cumsum).*integers")
RIGHT["abd_integer_distances"] = (check_accuracy_by_distance, _scores(lambda labelled, logits: labelled.long()))



def mr_cpu_arange_compared(filler, values, positions):
    rows = torch.arange(filler.size(0), device=filler.device)
    x = filler.clone()
    x[rows, positions] = values
    after = torch.arange(filler.size(1)) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


case("mr_cpu_arange_compared", check_make_recall, mr_cpu_arange_compared,
     r"made on the CPU \(in `>`, torch's gt\)")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
