"""The checkers of notebook 05 accept the reference and name each typical mistake."""

import sys

import pytest
import torch

from labnn.data.recall import IGNORE, accuracy_by_distance, make_recall
from labnn.exercises.grading import ExerciseFailed, ExerciseNotDone
from labnn.exercises.three_memories.recall_task import check_make_recall
from labnn.exercises.three_memories.recall_score import check_accuracy_by_distance
from labnn.exercises.three_memories.memory_limits import check_cache_bytes
from labnn.xl.model import XLCache


def run(check, fn):
    with pytest.raises(ExerciseFailed) as err:
        check(fn)
    return str(err.value)


# ---- exercise 1: the task
def good_make_recall(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(values), device=filler.device), positions] = values
    after = torch.arange(filler.size(1), device=filler.device) > positions[:, None]
    return x, torch.where(after, values[:, None], IGNORE)


def test_make_recall_accepts_a_correct_answer(capsys):
    check_make_recall(good_make_recall)
    assert "correct" in capsys.readouterr().out


def test_make_recall_refuses_the_package_s_own(capsys):
    with pytest.raises(ExerciseFailed, match="runs labnn.data.recall.make_recall"):
        check_make_recall(make_recall)


def test_make_recall_not_done():
    def stub(filler, values, positions):
        raise NotImplementedError()
    with pytest.raises(ExerciseNotDone, match="not solved yet"):
        check_make_recall(stub)


def _labels(filler, values, positions, keep, other=IGNORE):
    return torch.where(keep(torch.arange(filler.size(1), device=filler.device), positions[:, None]), values[:, None], other)


def _x(filler, values, positions):
    return good_make_recall(filler, values, positions)[0]


MAKE_RECALL_MISTAKES = [
    (lambda f, v, p: (_x(f, v, p), _labels(f, v, p, lambda t, q: t >= q)), "labels the value's own position"),
    (lambda f, v, p: (_x(f, v, p), _labels(f, v, p, lambda t, q: t > q + 1)), "starts one position late"),
    (lambda f, v, p: (_x(f, v, p), _labels(f, v, p, lambda t, q: t < q)), "BEFORE the value"),
    (lambda f, v, p: (_x(f, v, p), _labels(f, v, p, lambda t, q: t > q, 0)), "Use IGNORE (-100)"),
    (lambda f, v, p: (_x(f, v, p), _x(f, v, p)), "copy of the tokens"),
    (lambda f, v, p: (_x(f, v, p), _labels(f, v, p, lambda t, q: t > q).float()), "cross_entropy takes as torch.long"),
    (lambda f, v, p: (_x(f, v, p).float(), good_make_recall(f, v, p)[1]), "keep them integers"),
]


def _in_place(filler, values, positions):
    filler[torch.arange(len(values), device=filler.device), positions] = values
    return filler.clone(), good_make_recall(filler, values, positions)[1]


def _alias(filler, values, positions):
    x, y = good_make_recall(filler, values, positions)
    return filler.view_as(filler), y


def _late(filler, values, positions):
    x = filler.clone()
    x[torch.arange(len(values), device=filler.device), (positions + 1).clamp(max=filler.size(1) - 1)] = values
    return x, good_make_recall(filler, values, positions)[1]


@pytest.mark.parametrize("wrong, diagnosis", MAKE_RECALL_MISTAKES + [
    (_in_place, "modified its input `filler` in place"),
    (_alias, "returns a view of its input `filler`"),
    (_late, "one position too late"),
])
def test_make_recall_diagnoses(wrong, diagnosis):
    assert diagnosis in run(check_make_recall, wrong)


# ---- exercise 2: accuracy by distance
def good_accuracy(logits, y, max_distance, reduce="mean"):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hits = (logits.argmax(-1) == y).float()
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = getattr(hits[d == k], reduce)()
    return out


def test_accuracy_accepts_a_correct_answer(capsys):
    check_accuracy_by_distance(good_accuracy)
    assert "correct" in capsys.readouterr().out


def test_accuracy_in_float64_is_refused_naming_the_dtype():  # issue 29: one dtype rule
    assert ("has dtype torch.float64, expected torch.float32"
            in run(check_accuracy_by_distance, lambda l, y, m: good_accuracy(l, y, m).double()))


def _shift(fn, k):
    def wrong(logits, y, max_distance):
        a = fn(logits, y, max_distance)
        return torch.cat([a[k:], a[-k:]]) if k > 0 else torch.cat([a[:1], a[:-1]])
    return wrong


def _counts(logits, y, max_distance):
    return good_accuracy(logits, y, max_distance, reduce="sum")


def _from_start(logits, y, max_distance):
    labelled = y != IGNORE
    t = torch.arange(y.size(1)).expand_as(y)
    hits = (logits.argmax(-1) == y).float()
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        if (labelled & (t == k)).any():
            out[k - 1] = hits[labelled & (t == k)].mean()
    return out


@pytest.mark.parametrize("wrong, diagnosis", [
    (lambda l, y, m: 1 - good_accuracy(l, y, m), "error rate"),
    (_counts, "counts of correct positions"),
    (_shift(good_accuracy, 1), "off by one"),
    (_shift(good_accuracy, 0), "off by one"),
    (_from_start, "from the start of the sequence"),
    (lambda l, y, m: good_accuracy(l, y, m).nan_to_num(0.0), "Return NaN"),
    (lambda l, y, m: torch.full((m,), ((l.argmax(-1) == y).float().sum() / (y != IGNORE).sum()).item()),
     "overall accuracy repeated"),
    (lambda l, y, m: accuracy_by_distance(l, y, m), "calls labnn's own `accuracy_by_distance`"),
])
def test_accuracy_diagnoses(wrong, diagnosis):
    assert diagnosis in run(check_accuracy_by_distance, wrong)


def test_accuracy_in_place_mutation_named():
    def wrong(logits, y, m):
        out = good_accuracy(logits, y, m)
        y[y == IGNORE] = 0
        return out
    assert "modified its input `y` in place" in run(check_accuracy_by_distance, wrong)


# ---- exercise 3: cache bytes
def good_cache_bytes(cache):
    if isinstance(cache, XLCache):
        return sum(k.nbytes + v.nbytes for k, v in (tuple(b) for b in cache.kv))
    if hasattr(cache, "kv"):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in cache)


def test_cache_bytes_accepts_a_correct_answer(capsys):
    check_cache_bytes(good_cache_bytes)
    assert "correct" in capsys.readouterr().out


def _layers(cache):
    if isinstance(cache, XLCache):
        return [tuple(b) for b in cache.kv]
    if hasattr(cache, "kv"):
        return [tuple(cache.kv)]
    return list(cache)


@pytest.mark.parametrize("wrong, diagnosis", [
    (lambda c: sum(k.numel() + v.numel() for k, v in _layers(c)), "counts numbers, not bytes"),
    (lambda c: 8 * good_cache_bytes(c), "that is bits"),
    (lambda c: sum(k.nbytes for k, _ in _layers(c)), "keys only"),
    (lambda c: sum(k.nbytes + v.nbytes for k, v in _layers(c)[:1]), "one layer's keys and values"),
    (lambda c: good_cache_bytes(c) + (sum(r.nbytes for r in c.rel_keys) if isinstance(c, XLCache) else 0),
     "relative-position keys"),
    (lambda c: sum(b.allocated_bytes for b in c.kv) if isinstance(c, XLCache)
     else good_cache_bytes(c), "room kept free"),
    (lambda c: str(good_cache_bytes(c)), "should return a number of bytes"),
])
def test_cache_bytes_diagnoses(wrong, diagnosis):
    assert diagnosis in run(check_cache_bytes, wrong)


# ---- exercise 0: the reach of each memory
from labnn.exercises.three_memories.memory_limits import check_reach  # noqa: E402


def good_reach(memory, n_layers, span, position=0):
    return {"window": n_layers * span, "XL": n_layers * span + position}.get(memory, float("inf"))


def test_reach_accepts_a_correct_answer(capsys):
    check_reach(good_reach)
    assert "correct" in capsys.readouterr().out


def _but(memory, value):
    def wrong(m, n, s, p=0):
        return value(n, s, p) if m == memory else good_reach(m, n, s, p)
    return wrong


@pytest.mark.parametrize("wrong, diagnosis", [
    (_but("window", lambda n, s, p: s), "the reach of one layer"),
    (_but("window", lambda n, s, p: n * (s + 1)), "off by L = 2 (one per layer)"),
    (_but("XL", lambda n, s, p: n * s), "left out the query's position"),
    (_but("XL", lambda n, s, p: s + p), "the reach of one layer"),
    (_but("XL", lambda n, s, p: n * (s + p)), "adds once"),
    # passes where L = 2; at L = 3 gives 16 = (L + 1) * M by chance: the position's count
    # is the mistake (learner trial of stop 40), not an extra M
    (_but("XL", lambda n, s, p: n * s + p * (n - 1)), "adds once (the query's own segment), "
                                                       "not 2 times"),
    (_but("XL", lambda n, s, p: (n + 1) * s), "(L + 1) * M"),
    (_but("feedback", lambda n, s, p: n * s), "unbounded"),
    (_but("feedback", lambda n, s, p: None), "should return a number"),
])
def test_reach_diagnoses(wrong, diagnosis):
    assert diagnosis in run(check_reach, wrong)


# ---- learner-trial findings: each wrong answer gets a diagnosis that names it
def _copy_in_place(filler, values, positions):
    x = filler  # no copy: writing into x writes into the caller's filler
    x[torch.arange(len(values), device=filler.device), positions] = values
    return x, good_make_recall(filler, values, positions)[1]


def test_make_recall_in_place_suggests_clone():
    message = run(check_make_recall, _copy_in_place)
    assert "filler.clone()" in message and "filler / " not in message


def _labels_one_early(filler, values, positions):
    t = filler.size(1)
    keep = (torch.arange(t, device=filler.device) >= positions[:, None]) & (torch.arange(t, device=filler.device) < t - 1)
    return _x(filler, values, positions), torch.where(keep, values[:, None], IGNORE)


def test_make_recall_wrong_labels_named_by_position():
    message = run(check_make_recall, _labels_one_early)
    assert "largest difference" not in message
    assert "labelled" in message and "[n=" in message and "t=" in message


def test_make_recall_swapped_outputs():
    def swapped(filler, values, positions):
        x, y = good_make_recall(filler, values, positions)
        return y, x
    assert "swapped" in run(check_make_recall, swapped)


def _bincount(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1)
    hit = ((logits.argmax(-1) == y) & labelled).float()
    hits = torch.bincount(d[labelled] - 1, weights=hit[labelled], minlength=max_distance)
    count = torch.bincount(d[labelled] - 1, minlength=max_distance).float()
    return hits / count


def test_accuracy_bincount_minlength_caught_when_distances_exceed_max():
    assert "minlength" in run(check_accuracy_by_distance, _bincount)


def _storage_bytes(cache):
    pairs = _layers(cache)
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in pairs)


def test_cache_bytes_storage_named():
    assert "storage" in run(check_cache_bytes, _storage_bytes)


def test_cache_bytes_kvstate_twice_named():
    def twice(cache):
        if hasattr(cache, "kv") and not isinstance(cache, XLCache):
            return 2 * cache.kv.nbytes
        return good_cache_bytes(cache)
    assert "already holds the keys AND the values" in run(check_cache_bytes, twice)


def test_cache_bytes_xlcache_unpacked_as_pairs_explained():
    def pairs(cache):
        if hasattr(cache, "kv") and not isinstance(cache, XLCache):
            return cache.kv.nbytes
        return sum(k.nbytes + v.nbytes for k, v in cache)
    message = run(check_cache_bytes, pairs)
    assert "XLCache" in message and "cache.kv" in message


def _unlabelled_counted(logits, y, max_distance):
    # the value's position from the first label; every position after it counted,
    # labelled or not: a row with no labels adds positions (never hits) everywhere
    labelled = y != IGNORE
    p = labelled.long().argmax(1) - 1
    d = torch.arange(y.size(1)) - p[:, None]
    hits = (logits.argmax(-1) == y).float()
    out = torch.full((max_distance,), float("nan"))
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


def test_accuracy_denominator_counting_unlabelled_positions_named():  # issue 28
    message = run(check_accuracy_by_distance, _unlabelled_counted)
    assert "row with no labels" in message and "y != IGNORE" in message


def test_cache_bytes_four_bytes_per_number_named():  # issue 28
    def four(cache):
        return 4 * sum(k.numel() + v.numel() for k, v in _layers(cache))
    message = run(check_cache_bytes, four)
    assert "assumes 4 bytes per number" in message and "element_size()" in message


def test_make_recall_by_scatter_along_time_is_accepted(capsys):  # issue 28, trial 7
    def scattered(filler, values, positions):
        x = filler.clone().scatter_(1, positions[:, None], values[:, None])
        return x, good_make_recall(filler, values, positions)[1]
    check_make_recall(scattered)
    assert "✅" in capsys.readouterr().out


def test_make_recall_one_value_id_where_nothing_is_predicted_named():  # issue 28, trial 7
    def sevens(filler, values, positions):
        x, y = good_make_recall(filler, values, positions)
        return x, y.masked_fill(y == IGNORE, 7)
    message = run(check_make_recall, sevens)
    assert "y holds 7 where there is nothing to predict" in message and "-100" in message


def _x_written_with(write):
    """A make_recall whose x is written by `write(x, rows, values, positions)`."""
    def make(filler, values, positions):
        x = filler.clone()
        write(x, torch.arange(len(values), device=filler.device), values, positions)
        return x, good_make_recall(filler, values, positions)[1]
    return make


@pytest.mark.parametrize("write, diagnosis", [
    (lambda x, r, v, p: None, "x is the filler unchanged"),
    (lambda x, r, v, p: x.__setitem__((r, v), p), "swaps the index and the value"),
])
def test_make_recall_names_values_left_unwritten(write, diagnosis):
    """Learner trial of stop 40: both were told 'differs at 5 of 45 entries' or 'row 0 is
    right but row 1 is not: only row 0 is computed'."""
    assert diagnosis in run(check_make_recall, _x_written_with(write))


def test_only_row_0_is_said_only_of_rows_never_computed():
    """`x[rows, positions] = values[0]` writes every row, with the wrong value: row 0 is
    right by chance (values[0] is its value); 'only row 0 is computed' would send the
    learner looking for a loop that is not there."""
    message = run(check_make_recall, _x_written_with(
        lambda x, r, v, p: x.__setitem__((r, p), v[0])))
    assert "only row 0 is computed" not in message and "differs" in message


def test_int32_labels_are_not_called_floats():
    def int32_labels(filler, values, positions):
        x, y = good_make_recall(filler, values, positions)
        return x, y.int()
    message = run(check_make_recall, int32_labels)
    assert "torch.long" in message and "not floats" not in message


def _through_the_module(filler, values, positions):
    import labnn.data.recall
    return labnn.data.recall.make_recall(filler, values, positions)


def _marker():
    return 1


# Python 3.12.0-3.12.4 report the return of a C method called through its bound method
# but not its call (CPython gh-122029, fixed in 3.12.5), and the pure-Python profiler then
# fails its own "Bad return" assertion inside any C `__enter__`, torch.inference_mode's
# too: seen on the H200's Python 3.12.3 (make test-gpu, 2026-11-27).
_PROFILE_LOSES_C_CALLS = (3, 12) <= sys.version_info[:3] < (3, 12, 5)


@pytest.mark.parametrize("profiler", [
    "cProfile",
    pytest.param("profile", marks=pytest.mark.skipif(
        _PROFILE_LOSES_C_CALLS, reason="this Python's profile module loses C calls "
        "(CPython gh-122029, fixed in 3.12.5)"))])
def test_a_profiled_check_refuses_the_reference_and_keeps_the_profiler(profiler):
    # stop 41's noticed item: the watch replaced the learner's profiler (%prun): under
    # cProfile the check crashed ("'Profile' object is not callable") and the profile
    # lost every call after it.
    import cProfile
    import profile
    import pstats
    pr = (cProfile if profiler == "cProfile" else profile).Profile()
    pr.enable() if profiler == "cProfile" else sys.setprofile(pr.dispatcher)
    try:
        with pytest.raises(ExerciseFailed, match="runs labnn.data.recall.make_recall"):
            check_make_recall(_through_the_module)
        _marker()
    finally:
        pr.disable() if profiler == "cProfile" else sys.setprofile(None)
    calls = {f[2]: n for f, (_, n, *_) in pstats.Stats(pr).stats.items()}
    assert calls.get("_marker") == 1
    assert sys.getprofile() is None and sys.gettrace() is None
