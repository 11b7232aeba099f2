"""Trial 70, notebook 05 (a learner's trial of its four exercises).

Told only the two numbers before: Exercise 3's prediction taken as the class with the lowest
logit (`argmin`, `(-logits).argmax`, `sort(-1).indices[..., 0]`); Exercise 1's XL reach with
the position subtracted (`L * M - i`), multiplied (`L * M * i`) or a negative reach
(`i - L * M`); Exercise 4's bytes multiplied by the number of layers (`t.nbytes * 6` at the
check's L = 6; a `KVState`'s kv, shared by the layers, too) or counted twice (`* 2`);
Exercise 3's hits counted at every distance (`hits.sum() / at.sum()`) or the ratio upside
down (`at.sum() / hits[at].sum()`). Only torch's error before: an argmax over the batch
(`logits.argmax(0) == y`), Exercise 2's labels sliced at `positions + 1`, a tensor, and
Exercise 3's distances one-hot encoded with the far ones kept (`F.one_hot(d, max_d + 1)`:
"Class values must be smaller than num_classes"); "x differs" only: every row's value
written at row 0's position (`x[rows, positions[0]] = values`).
Accepted before: a cache's bytes counted through numpy (`t.detach().numpy().nbytes`), which
fails on a GPU's cache; it is named by the device rerun now (`.cpu()` first still passes).
"""
import torch
from checker_helpers import (accuracy_by_distance_with, cache_bytes_with, reach_with,
                             trial_case, trial_tests)

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _loop(predict):
    """The notebook's loop with the prediction `predict(logits)` ([N, T])."""
    return accuracy_by_distance_with(lambda logits, y: predict(logits) == y)


LOWEST = r"LOWEST logit.*logits\.argmax\(-1\)"
for tag, predict in (("argmin", lambda lg: lg.argmin(-1)),
                     ("argmax_of_minus", lambda lg: (-lg).argmax(-1)),
                     ("sorted_first", lambda lg: lg.sort(-1).indices[..., 0]),
                     ("min_indices", lambda lg: lg.min(-1).indices)):
    case(f"accuracy_{tag}", check_accuracy_by_distance, _loop(predict), LOWEST)
case("accuracy_argmax_over_the_batch", check_accuracy_by_distance,
     _loop(lambda lg: lg.argmax(0)), r"over the batch \(dim 0.*logits\.argmax\(-1\)")


case("accuracy_every_hit_over_the_count", check_accuracy_by_distance,
     accuracy_by_distance_with(at_distance=lambda hits, at: hits.sum() / at.sum()),
     r"hits\.sum\(\).*hits\[at\]\.sum\(\)")
case("accuracy_upside_down", check_accuracy_by_distance,
     accuracy_by_distance_with(at_distance=lambda hits, at: at.sum() / hits[at].sum()),
     r"upside down")


def _one_hot_distances(keep_near):
    """Exercise 3 with the distances one-hot encoded (`F.one_hot(d, max_distance + 1)`), the
    far ones left out first or not (`keep_near`)."""
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        d = torch.where(d > max_distance, 0, d) if keep_near else d
        at = torch.nn.functional.one_hot(d, max_distance + 1)[..., 1:]  # [N, T, max_d]
        hits = (logits.argmax(-1) == y)[..., None]
        return ((at * hits).sum((0, 1)) / at.sum((0, 1))).to(logits.dtype)
    return accuracy_by_distance


case("accuracy_one_hot_of_far_distances", check_accuracy_by_distance,
     _one_hot_distances(False), r"farther than max_distance.*one_hot")
RIGHT["accuracy_one_hot_of_near_distances"] = (check_accuracy_by_distance,
                                               _one_hot_distances(True))
RIGHT["accuracy_argmin_of_the_loss"] = (  # the lowest -log p is the highest logit
    check_accuracy_by_distance, _loop(lambda lg: (-lg.log_softmax(-1)).argmin(-1)))


def _recall_sliced(filler, values, positions):
    """Exercise 2 with the labels sliced from `positions + 1`, a tensor of N bounds."""
    x = filler.clone()
    x[torch.arange(filler.size(0), device=filler.device), positions] = values
    y = torch.full_like(filler, IGNORE)
    y[:, positions + 1:] = values[:, None]
    return x, y


def _recall_at_first_position(filler, values, positions):
    """Exercise 2 with every row's value written at row 0's position."""
    x = filler.clone()
    x[torch.arange(filler.size(0), device=filler.device), positions[0]] = values
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


case("recall_value_at_row_0s_position", check_make_recall, _recall_at_first_position,
     r"row 0's position, positions\[0\].*x\[torch\.arange\(N\), positions\]")
case("recall_sliced_at_the_positions", check_make_recall, _recall_sliced,
     r"slice's bound is one number.*positions\[:, None\]")


case("reach_xl_position_subtracted", check_reach, reach_with(lambda n, m, i: n * m - i),
     r"= L \* M - position.*add.*L \* M \+ i")
case("reach_xl_negative", check_reach, reach_with(lambda n, m, i: i - n * m),
     r"negative.*L \* M \+ position")
case("reach_xl_position_multiplies", check_reach, reach_with(lambda n, m, i: n * m * max(i, 1)),
     r"= L \* M \* position.*adds once")


def _bytes(per=lambda t: t.nbytes, state=lambda kv: kv.nbytes):
    """Exercise 4 with each tensor's bytes `per(t)` and a KVState's `state(kv)`."""
    return cache_bytes_with(per, state)


case("bytes_times_layers", check_cache_bytes, _bytes(lambda t: t.nbytes * 6),
     r"L = 6 times.*each layer once")
case("bytes_times_len_of_the_cache", check_cache_bytes,  # L from the cache, L times each
     lambda c: len(c) * _bytes()(c) if isinstance(c, list) else _bytes()(c),
     r"L = 6 times.*each layer once")
case("bytes_state_times_layers", check_cache_bytes, _bytes(state=lambda kv: kv.nbytes * 6),
     r"6 times kv's bytes.*shared by all layers.*kv\.nbytes once")
case("bytes_counted_twice", check_cache_bytes, _bytes(lambda t: t.nbytes * 2),
     r"twice.*k\.nbytes \+ v\.nbytes")


def _through_numpy(t):
    """A tensor's bytes read from numpy (which has no bfloat16)."""
    return t.nbytes if t.dtype == torch.bfloat16 else int(t.detach().numpy().nbytes)


case("bytes_through_numpy", check_cache_bytes, _bytes(_through_numpy, _through_numpy),
     r"goes through numpy")
RIGHT["bytes_through_numpy_from_the_cpu"] = (check_cache_bytes, _bytes(
    lambda t: t.nbytes if t.dtype == torch.bfloat16 else int(t.cpu().numpy().nbytes),
    lambda kv: kv.cpu().nbytes))


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
