"""Trial 71, notebook 05 (a learner's trial of its four exercises).

Told only "gives 72, expected 23" before: Exercise 1's XL reach with the position counted in
segments of M (`M * (L + i)`, `L * M + M * i`) or as one token for any position past the
first (`L * M + (i > 0)`). Blamed on the wrong mistake before: a reach that doubles per layer
(`M * 2 ** (L - 1) + i`, which equals `L * M + L * i` at one of the check's sizes) was told
that the position adds once per layer; Exercise 4's bytes multiplied by 3 (`t.nbytes * 3`, the
q, k and v of the fused projection) or by 1.5 were told that the whole storage behind the
tensors was counted, though the count is the same on a copy whose k and v own their storages.
Only the learner's own error, or another exercise's mistake, before: a function of another
exercise handed to a check (`check_accuracy_by_distance(my_make_recall)`: "too many values to
unpack"; `check_cachecache_bytes_with(my_reach)`: "a number of layers written as a number").
"""
import math

from checker_helpers import (accuracy_by_distance_with, cache_bytes_with, reach_with, trial_case,
                             trial_tests)

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

case("reach_xl_m_times_l_plus_i", check_reach, reach_with(lambda n, m, i: m * (n + i)),
     r"= L \* M \+ M \* position.*segments.*L \* M \+ i = 23")
case("reach_xl_one_for_any_position", check_reach, reach_with(lambda n, m, i: n * m + (i > 0)),
     r"= L \* M \+ \(position > 0\).*L \* M \+ i = 23")
case("reach_xl_doubled_per_layer", check_reach,
     reach_with(lambda n, m, i: m * 2 ** (n - 1) + i), r"^(?!.*once per layer).*gives 18")
RIGHT["reach_xl_position_wrapped"] = (  # positions lie in 0 .. T_s - 1 = M - 1: no change
    check_reach, reach_with(lambda n, m, i: n * m + i % m))


case("bytes_times_three", check_cache_bytes, cache_bytes_with(lambda t: t.nbytes * 3),
     r"^(?!.*storage behind).*3 times.*no factor")
case("bytes_times_one_and_a_half", check_cache_bytes,
     cache_bytes_with(lambda t: int(t.nbytes * 1.5)),
     r"^(?!.*storage behind).*1\.5 times.*no factor")
RIGHT["bytes_numel_times_itemsize"] = (check_cache_bytes,
                                       cache_bytes_with(lambda t: t.numel() * t.dtype.itemsize))


def my_make_recall(filler, values, positions):
    """Exercise 2, right."""
    x = filler.clone()
    x[range(len(values)), positions] = values
    after = positions.new_tensor(range(filler.size(1))) > positions[:, None]
    return x, after * values[:, None] + ~after * IGNORE


def my_reach(memory, n_layers, span, position=0):
    """Exercise 1, right."""
    return math.inf if memory == "feedback" else n_layers * span + position * (memory == "XL")


case("wrong_exercise_make_recall_scored", check_accuracy_by_distance, my_make_recall,
     r"takes \(filler, values, positions\), the arguments of make_recall.*my_accuracy_by_d")
case("wrong_exercise_reach_for_bytes", check_cache_bytes, my_reach,
     r"arguments of reach.*cache_bytes\(cache\).*my_cache_bytes")
case("wrong_exercise_accuracy_for_recall", check_make_recall, accuracy_by_distance_with(),
     r"arguments of accuracy_by_distance.*my_make_recall")
case("wrong_exercise_bytes_for_reach", check_reach, cache_bytes_with(lambda t: t.nbytes),
     r"arguments of cache_bytes.*my_reach")
RIGHT["make_recall_own"] = (check_make_recall, my_make_recall)
RIGHT["reach_own"] = (check_reach, my_reach)


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
