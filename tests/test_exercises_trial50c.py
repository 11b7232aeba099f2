"""Trial 50c: a blind learner trial of notebook 05's four exercises (201 answers).

Wrong answers that passed: a `make_recall` keeping its result between calls (a dict keyed by
the filler's shape: the check never called it twice at one shape), and one passing its ids
through int8 or float16 (every id tried was below 8); an `accuracy_by_distance` with a
`.squeeze()` that drops the batch axis (N = 1 never tried), with the notebook's 31 distances
or T = 32 written as numbers (max_distance never above 10), or dividing by `count + eps`
(compared at atol 1e-6); a `cache_bytes` assigning the cache's items or fields anew
(`state.kv = state.kv.cpu()`, `cache[i] = (k.clone(), v.clone())`: only the values were
compared) or returning a 0-d tensor. Messages: a memo of `accuracy_by_distance` keyed by the
shapes was told "a tie counted as a hit"; a stateful `make_recall` was told "read N and T from
filler.shape"; `count + 1e-4` was told "your denominator counts unlabelled positions ... 0.500
instead of 0.500"; an in-place write into an XL cache met torch's bare "Inplace update to
inference tensor" error.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall)
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGN = -100
STATE = r"(?i)between calls|kept"


def _make(f, v, p):
    n, t = f.shape
    x = f.clone()
    x[torch.arange(n, device=f.device), p] = v
    after = torch.arange(t, device=f.device)[None] > p[:, None]
    return x, torch.where(after, v[:, None], torch.full_like(f, IGN))


def _make_memo():
    memo = {}

    def make(f, v, p):
        key = (tuple(f.shape), f.device.type)
        if key not in memo:
            memo[key] = _make(f, v, p)
        x, y = memo[key]
        return x.clone(), y.clone()
    return make


def _make_first_result():
    kept = {}

    def make(f, v, p):
        if "r" not in kept:
            kept["r"] = _make(f, v, p)
        return kept["r"]
    return make


def _make_through(dtype):
    def make(f, v, p):
        x, y = _make(f.to(dtype), v.to(dtype), p)
        return x.long(), y.long()
    return make


case("make_memo_by_shape", check_make_recall, _make_memo(), STATE)
case("make_first_result_kept", check_make_recall, _make_first_result(), STATE)
case("make_ids_through_float16", check_make_recall, _make_through(torch.float16), r"float16")
case("make_ids_through_int8", check_make_recall, _make_through(torch.int8), r"int8")
RIGHT["make_right"] = (check_make_recall, _make)
RIGHT["make_through_float32"] = (check_make_recall, _make_through(torch.float32))


def _counts(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = l.argmax(-1) == y
    keep = lab & (d <= m)
    tot = torch.zeros(m, dtype=torch.float64, device=y.device).index_add_(
        0, d[keep] - 1, torch.ones(int(keep.sum()), dtype=torch.float64, device=y.device))
    right = torch.zeros(m, dtype=torch.float64, device=y.device).index_add_(
        0, d[keep] - 1, hit[keep].double())
    return right, tot


def _acc(l, y, m):
    right, tot = _counts(l, y, m)
    return (right / tot).to(l.dtype)


def _acc_memo():
    memo = {}

    def acc(l, y, m):
        key = (tuple(l.shape), m, l.dtype)
        if key not in memo:
            memo[key] = _acc(l, y, m)
        return memo[key]
    return acc


def _acc_by_loop(l, y, m, p):
    d = torch.arange(y.size(1), device=y.device) - p[:, None]
    hit = l.argmax(-1) == y
    out = torch.full((m,), float("nan"), dtype=torch.float64, device=l.device)
    for k in range(1, m + 1):
        s = (d == k) & (y != IGN)
        if s.any():
            out[k - 1] = hit[s].double().mean()
    return out.to(l.dtype)


def acc_squeeze_p(l, y, m):
    return _acc_by_loop(l, y, m, ((y != IGN).int().argmax(dim=1) - 1).squeeze())


def acc_squeeze_logits(l, y, m):
    pred = l.squeeze().argmax(2)  # N = 1: [T, V] has no dim 2
    return _acc(l, y, m) if pred.shape == y.shape else None


def acc_keepdim_squeeze(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = (l.argmax(-1, keepdim=True) == y[..., None]).squeeze()
    keep = lab & (d <= m) & (d >= 1)
    tot = y.new_zeros(m, dtype=torch.float64).index_add_(0, d[keep] - 1, keep[keep].double())
    right = y.new_zeros(m, dtype=torch.float64).index_add_(0, d[keep] - 1, hit[keep].double())
    return (right / tot).to(l.dtype)


def acc_31_distances(l, y, m):
    full = _acc_by_loop(l, y, 31, (y != IGN).int().argmax(dim=1) - 1)
    return full[:m]


def acc_first_32(l, y, m):
    return _acc(l[:, :32], y[:, :32], m)


def _acc_eps(eps):
    def acc(l, y, m):
        right, tot = _counts(l, y, m)
        out = right / (tot + eps)
        return torch.where(tot == 0, torch.full_like(out, float("nan")), out).to(l.dtype)
    return acc


case("acc_memo_by_shape", check_accuracy_by_distance, _acc_memo(), STATE)
case("acc_squeeze_p", check_accuracy_by_distance, acc_squeeze_p, r"squeeze")
case("acc_squeeze_logits", check_accuracy_by_distance, acc_squeeze_logits, r"squeeze")
case("acc_keepdim_squeeze", check_accuracy_by_distance, acc_keepdim_squeeze, r"squeeze")
case("acc_31_distances", check_accuracy_by_distance, acc_31_distances, r"31")
case("acc_first_32_positions", check_accuracy_by_distance, acc_first_32, r"32")
for _eps in (1e-4, 1e-5, 1e-6, 1e-8):
    case(f"acc_eps_{_eps:g}", check_accuracy_by_distance, _acc_eps(_eps),
         rf"(?i)eps.*{_eps:.0e}|{_eps:.0e}.*eps")


def acc_notebook(l, y, m):
    labelled = y != IGN
    d = labelled.long().cumsum(1) * labelled
    hits = (l.argmax(-1) == y).to(l.dtype)
    out = l.new_full((m,), float("nan"))
    for k in range(1, m + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


def acc_long_division(l, y, m):
    labelled = y != IGN
    d = labelled.long().cumsum(1) * labelled
    hits = (l.argmax(-1) == y) & labelled
    return torch.stack([hits[d == k].sum() / (d == k).sum() for k in range(1, m + 1)]
                       ).to(l.dtype)  # long / long: float32, then the logits' dtype


def acc_squeeze_then_fix(l, y, m):
    big, labels = l.squeeze(), y.squeeze()
    if labels.dim() == 1:
        big, labels = big[None], labels[None]
    return _acc(big, labels, m)


RIGHT["acc_right"] = (check_accuracy_by_distance, _acc)
RIGHT["acc_notebook"] = (check_accuracy_by_distance, acc_notebook)
RIGHT["acc_long_division"] = (check_accuracy_by_distance, acc_long_division)
RIGHT["acc_squeeze_then_fix"] = (check_accuracy_by_distance, acc_squeeze_then_fix)


def _bytes(c):
    if isinstance(c, KVState):
        return c.kv.nbytes
    pairs = [tuple(b) for b in c.kv] if isinstance(c, XLCache) else c
    return sum(k.nbytes + v.nbytes for k, v in pairs)


def cache_kv_to_cpu(c):
    if isinstance(c, KVState):
        c.kv = c.kv.detach().cpu()
    return _bytes(c)


def cache_kv_clone(c):
    if isinstance(c, KVState):
        c.kv = c.kv.contiguous().clone()
    return _bytes(c)


def cache_items_cloned(c):
    if isinstance(c, list):
        for i, (k, v) in enumerate(c):
            c[i] = (k.clone(), v.clone())
    return _bytes(c)


def cache_tensor(c):
    return torch.tensor(_bytes(c))


def _xl_inplace(write):
    def fn(c):
        if isinstance(c, XLCache):
            write(c)
        return _bytes(c)
    return fn


ASSIGNED = r"(?i)assign"
case("cache_kv_to_cpu", check_cache_bytes, cache_kv_to_cpu, ASSIGNED)
case("cache_kv_clone", check_cache_bytes, cache_kv_clone, ASSIGNED)
case("cache_items_cloned", check_cache_bytes, cache_items_cloned, ASSIGNED)
case("cache_returns_tensor", check_cache_bytes, cache_tensor, r"\.item\(\)")
KEPT = r"changed the cache it measures.*in place"
case("cache_xl_values_halved", check_cache_bytes,
     _xl_inplace(lambda c: [b.values.mul_(0.5) for b in c.kv]), KEPT)
case("cache_xl_storage_zeroed", check_cache_bytes,
     _xl_inplace(lambda c: [b.storage_values.zero_() for b in c.kv]), KEPT)
case("cache_xl_rel_keys_zeroed", check_cache_bytes,
     _xl_inplace(lambda c: [t.zero_() for t in c.rel_keys if t is not None]), KEPT)
RIGHT["cache_right"] = (check_cache_bytes, _bytes)
RIGHT["cache_numel"] = (check_cache_bytes, lambda c: c.kv.numel() * c.kv.element_size()
                        if isinstance(c, KVState) else _bytes(c))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
