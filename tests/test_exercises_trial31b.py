"""Learner trial of stop 41, notebook 05: the package's own make_recall,
accuracy_by_distance or cache_bytes reached through a module (or handed in) passed,
where only the bare imported name was refused; the 03 token loop's routes are in
test_exercises_trial30b."""
import labnn.data.recall as recall
from checker_helpers import trial_case, trial_tests

from labnn.exercises.three_memories import memory_limits
from labnn.exercises.three_memories.memory_limits import check_cache_bytes
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.recall_task import check_make_recall

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
REFERENCE = r"runs {}, the reference it is checked against"

case("make_recall_module", check_make_recall, lambda f, v, p: recall.make_recall(f, v, p),
     REFERENCE.format(r"labnn\.data\.recall\.make_recall"))
case("make_recall_handed_in", check_make_recall, recall.make_recall,
     REFERENCE.format(r"labnn\.data\.recall\.make_recall"))
case("accuracy_module", check_accuracy_by_distance,
     lambda logits, y, m: recall.accuracy_by_distance(logits, y, m),
     REFERENCE.format(r"labnn\.data\.recall\.accuracy_by_distance"))
case("cache_bytes_module", check_cache_bytes, lambda cache: memory_limits.cache_bytes(cache),
     REFERENCE.format(r"labnn\.exercises\.three_memories\.memory_limits\.cache_bytes"))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
