"""Trial 68, notebook 05 (a learner's trial of Exercise 3, accuracy by distance).

Told only that some entries differ before: a hit that counts y among the top 2 logits
(`(logits.topk(2, -1).indices == y[..., None]).any(-1)`), accuracies of whole columns
(`((logits.argmax(-1) == y) & (y != IGNORE)).float().mean(0)`, read at the columns where a
distance lies) and a mean of the accuracies of chunks of 4 rows (`nanmean` over the chunks:
a mean of means). Each is named now, with the like mistakes around them (the top 3; columns
averaged over their labelled rows only; chunks of 2, 3 or 5 rows, by mean or nanmean).
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import check_accuracy_by_distance

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _distances(y):
    """Each labelled position's distance from its value, 0 elsewhere."""
    labelled = y != IGNORE
    return labelled.long().cumsum(1) * labelled


def _pooled(hits_of):
    """The accuracies of the hits `hits_of(logits, y)` over the labelled positions at each
    distance."""
    def accuracy_by_distance(logits, y, max_distance):
        d, hits = _distances(y), hits_of(logits, y)
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = hits[at].float().sum() / at.sum()
        return out
    return accuracy_by_distance


def _top(k):
    """A hit when y is among the k largest logits."""
    return lambda logits, y: (logits.topk(k, -1).indices == y[..., None]).any(-1)


for k in (2, 3):
    case(f"accuracy_top_{k}_hit", check_accuracy_by_distance, _pooled(_top(k)),
         rf"among the {k} largest logits.*logits\.argmax\(-1\) == y")
RIGHT["accuracy_top_1_hit"] = (check_accuracy_by_distance, _pooled(_top(1)))


def _by_columns(labelled_only):
    """Each column's accuracy over the rows (over all N, or over its labelled rows), then the
    mean of the columns where distance k lies."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled, d = y != IGNORE, _distances(y)
        hits = ((logits.argmax(-1) == y) & labelled).float()
        column = (hits.sum(0) / labelled.sum(0) if labelled_only else hits.mean(0))
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = (d == k).any(0)
            if at.any():
                out[k - 1] = column[at].mean()
        return out
    return accuracy_by_distance


for labelled_only in (False, True):
    case(f"accuracy_by_columns{'_labelled' * labelled_only}", check_accuracy_by_distance,
         _by_columns(labelled_only), r"accuracies of whole columns.*\.mean\(0\).*d == k")


def _chunks(size, mean):
    """The right accuracies of each chunk of `size` rows, then their `mean` over the chunks."""
    def accuracy_by_distance(logits, y, max_distance):
        parts = [_pooled(lambda lg, yy: lg.argmax(-1) == yy)(lg, yy, max_distance)
                 for lg, yy in zip(logits.split(size), y.split(size))]
        return mean(torch.stack(parts), 0)
    return accuracy_by_distance


for size in (2, 3, 4, 5):
    case(f"accuracy_chunks_of_{size}_nanmean", check_accuracy_by_distance,
         _chunks(size, torch.nanmean), rf"mean of the accuracies of chunks of {size} rows")
case("accuracy_chunks_of_4_mean", check_accuracy_by_distance, _chunks(4, torch.mean),
     r"mean of the accuracies of chunks of 4 rows")
RIGHT["accuracy_chunks_of_1_nanmean"] = (check_accuracy_by_distance,
                                         _chunks(1, torch.nanmean))


def _chunks_pooled(logits, y, max_distance):
    """The hits and the positions at each distance summed over chunks of 4 rows, then divided."""
    hits, count = torch.zeros(2, max_distance, dtype=torch.long, device=logits.device)
    for lg, yy in zip(logits.split(4), y.split(4)):
        d, hit = _distances(yy), lg.argmax(-1) == yy
        for k in range(1, max_distance + 1):
            hits[k - 1] += hit[d == k].sum()
            count[k - 1] += (d == k).sum()
    return (hits / count).to(logits.dtype)


RIGHT["accuracy_chunks_pooled"] = (check_accuracy_by_distance, _chunks_pooled)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
