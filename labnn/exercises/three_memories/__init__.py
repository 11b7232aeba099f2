"""Notebook 05 · Three memories, one budget: the checkers of its four exercises.

- Exercise 1, the reach of each memory: `check_reach`, in `memory_limits`;
- Exercise 2, building the recall task: `check_make_recall`, in `recall_task`;
- Exercise 3, accuracy by distance: `check_accuracy_by_distance`, in `recall_score`;
- Exercise 4, the bytes a cache holds: `check_cache_bytes`, in `memory_limits`.

Each checker's module has a `_slips` sibling holding the mistakes it names
(`memory_limits_slips`, `recall_task_slips`, `recall_score_slips`); `other_sizes` runs
`make_recall` again where every size differs, so that a size written as a number fails
by name, and on a filler holding the values' ids; `recall_score_rounds` scores
`accuracy_by_distance` on tied logits, at `max_distance = 1` and with the notebook's
vocabulary of 16 ids; `recall_score_inputs` scores it on one row (a `.squeeze()`), at
`max_distance = 40` (the notebook's 31 written as a number), and checks that its
accuracies are exact ratios of counts (an eps), rounded once to the logits' dtype with
thousands of positions (counts kept in bfloat16 or float16);
`narrow_ints` reruns `make_recall` on 300 tokens and names positions, distances or counts
kept in uint8, int8 or bfloat16 (they wrap around or round past 127, 255 or 256), and
by a dtype rule any kept in int16, uint16 or float16 (exact up to 32,767, 65,535, 2,048);
`cache_kept` checks that `cache_bytes` leaves the cache as it was (values, dtypes, items
and fields); `fresh_calls` calls the three again at the same sizes, on inputs refilled in
place and on a cache grown in place (state kept between calls), and names the function of
another exercise handed to a check (`other_exercise`).
"""

from labnn.exercises.three_memories.memory_limits import check_cache_bytes, check_reach
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall

__all__ = ["check_accuracy_by_distance", "check_cache_bytes", "check_make_recall",
           "check_reach"]
