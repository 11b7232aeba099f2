"""Trial 54c: a blind learner trial of notebook 05's exercises (about 200 answers).

Wrong answers that passed: Exercise 3's counts kept in bfloat16 or float16 whatever the
logits' dtype (only bfloat16 and float16 logits met thousands of positions, where such a
count is as rounded as the result may be; float32 logits met 6 rows only); Exercise 4's
`k.data = k.data.double()` and `state.kv.requires_grad_(True)` after counting (the kept-check's
`torch.equal` ignores the dtype; the first was then blamed on `untyped_storage()`).
Misleading: a result kept between calls, keyed on the cache's type, was told "it assumes 8
bytes per number"; a count of a float32 copy (`.float()`) "it assumes 4 bytes per number".
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import check_accuracy_by_distance, check_cache_bytes
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
C3 = check_accuracy_by_distance


def _parts(logits, y):
    labelled = y != IGNORE
    p = labelled.long().argmax(1) - 1
    d = torch.arange(y.size(1), device=y.device)[None] - p[:, None]
    return labelled, d, (logits.argmax(-1) == y) & labelled


def _per_distance(count_hits, count_all, divide=lambda h, c: h.double() / c.double()):
    """An answer that counts each distance's hits and positions with the given sums."""
    def acc(logits, y, max_distance):
        labelled, d, hit = _parts(logits, y)
        out = []
        for k in range(1, max_distance + 1):
            m = labelled & (d == k)
            c, h = count_all(m), count_hits(hit & m)
            out.append(divide(h, c) if m.any() else
                       torch.tensor(float("nan"), dtype=torch.float64, device=y.device))
        return torch.stack([o.to(y.device).double() for o in out]).to(logits.dtype)
    return acc


LOW = r"(?i)low precision.*256.*2,?048.*int64"
case("acc_counts_in_bfloat16_always", C3, _per_distance(lambda m: m.bfloat16().sum(),
                                                         lambda m: m.bfloat16().sum()), LOW)
case("acc_hits_in_float16_always", C3, _per_distance(lambda m: m.half().sum(),
                                                      lambda m: m.sum()), LOW)
case("acc_counts_in_float16_always", C3, _per_distance(lambda m: m.half().sum(),
                                                        lambda m: m.half().sum()), LOW)
RIGHT["acc_int_counts_double_division"] = (C3, _per_distance(lambda m: m.sum(),
                                                              lambda m: m.sum()))
RIGHT["acc_int_counts_division"] = (C3, _per_distance(lambda m: m.sum(), lambda m: m.sum(),
                                                      lambda h, c: h / c))


def acc_counts_cast_to_dtype(l, y, m):  # 52c's: integer counts cast before dividing
    labelled, d, hit = _parts(l, y)
    keep = labelled & (d <= m)
    z = torch.zeros(m, dtype=torch.int64, device=y.device)
    c = z.index_add(0, d[keep] - 1, torch.ones_like(d[keep]))
    h = z.index_add(0, d[keep] - 1, hit[keep].long())
    return h.to(l.dtype) / c.to(l.dtype)


def acc_cumsum_in_dtype(l, y, m):
    labelled, d, hit = _parts(l, y)
    out = l.new_full((m,), float("nan"))
    for k in range(1, m + 1):
        s = (labelled & (d == k)).flatten()
        if s.any():
            out[k - 1] = ((hit.flatten() & s).to(l.dtype).cumsum(0)[-1]
                          / s.to(l.dtype).cumsum(0)[-1])
    return out


def acc_einsum_in_dtype(l, y, m):
    labelled, d, hit = _parts(l, y)
    keep = labelled & (d >= 1) & (d <= m)
    one = torch.nn.functional.one_hot(torch.where(keep, d - 1, m), m + 1)[..., :m].to(l.dtype)
    return torch.einsum("ntd,nt->d", one, hit.to(l.dtype)) / torch.einsum("ntd->d", one)


def acc_mean_in_dtype(l, y, m):  # the notebook's solution
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hits = (l.argmax(-1) == y).to(l.dtype)
    out = l.new_full((m,), float("nan"))
    for k in range(1, m + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


def acc_bincount(l, y, m):
    labelled, d, hit = _parts(l, y)
    keep = labelled & (d >= 1) & (d <= m)
    counts = torch.bincount(d[keep] - 1, minlength=m)[:m]
    good = torch.bincount(d[keep & hit] - 1, minlength=m)[:m]
    return (good.double() / counts.double()).to(l.dtype)


def acc_scatter_add(l, y, m):
    labelled, d, hit = _parts(l, y)
    keep = (labelled & (d >= 1) & (d <= m)).flatten()
    idx = torch.where(keep, d.flatten() - 1, m)
    z = torch.zeros(m + 1, dtype=torch.long, device=y.device)
    c = z.scatter_add(0, idx, keep.long())
    h = z.scatter_add(0, idx, hit.flatten().long())
    return (h[:m] / c[:m]).to(l.dtype)


def acc_python_loops(l, y, m):
    hits, counts, pred = [0] * m, [0] * m, l.argmax(-1).tolist()
    for row, guess in zip(y.tolist(), pred):
        lab = [t for t, v in enumerate(row) if v != IGNORE]
        for t in lab:
            if t - lab[0] + 1 <= m:
                counts[t - lab[0]] += 1
                hits[t - lab[0]] += guess[t] == row[t]
    return torch.tensor([h / c if c else float("nan") for h, c in zip(hits, counts)],
                        dtype=l.dtype, device=l.device)


for fn in (acc_counts_cast_to_dtype, acc_cumsum_in_dtype, acc_einsum_in_dtype,
           acc_mean_in_dtype, acc_bincount, acc_scatter_add, acc_python_loops):
    RIGHT[fn.__name__] = (C3, fn)


def _nb(t):
    return t.numel() * t.element_size()


def _layers(cache):
    return cache.kv if isinstance(cache, XLCache) else cache


def _count(cache, nb=_nb):
    if isinstance(cache, KVState):
        return nb(cache.kv)
    return sum(nb(k) + nb(v) for k, v in _layers(cache))


def bytes_then_double(cache):
    n = _count(cache)
    if isinstance(cache, list):
        for k, _ in cache:
            k.data = k.data.double()
    return n


def bytes_then_requires_grad(cache):
    n = _count(cache)
    if isinstance(cache, KVState):
        cache.kv.requires_grad_(True)
    return n


_KEPT = {}


def bytes_kept_by_type(cache):
    key = type(cache).__name__
    if key not in _KEPT:
        _KEPT[key] = _count(cache)
    return _KEPT[key]


def bytes_of_float32_copy(cache):
    return _count(cache, lambda t: _nb(t.float()))


case("bytes_then_data_double", check_cache_bytes, bytes_then_double,
     r"(?i)dtype.*float64.*was float32.*change nothing")
case("bytes_then_requires_grad", check_cache_bytes, bytes_then_requires_grad,
     r"(?i)requires.grad.*change nothing")
case("bytes_kept_by_type", check_cache_bytes, bytes_kept_by_type,
     r"(?i)earlier call.*kept between calls")
case("bytes_of_float32_copy", check_cache_bytes, bytes_of_float32_copy,
     r"(?i)float32 copy.*\.float\(\)")
RIGHT["bytes_right"] = (check_cache_bytes, _count)


def bytes_no_op_detach_(cache):  # no-op in-place calls: the cache stays as it was
    if isinstance(cache, KVState):
        cache.kv.detach_()
    return _count(cache)


RIGHT["bytes_no_op_detach_"] = (check_cache_bytes, bytes_no_op_detach_)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
