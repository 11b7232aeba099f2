"""Trial 53e: a blind learner trial of notebook 05's exercises (200 answers).

Wrong answers that passed: Exercise 3's argmax over the first 16 classes only
(`logits[..., :16]`: the check's vocabularies had 5, 6 or 16 ids) and counts kept in float16
(exact only up to 2,048: no distance had that many positions); Exercise 4's table of bytes
per number that knows float32, float64 and bfloat16 only (no float16 cache was tried), and
in-place writes that leave the cache's values as they were (`k.mul_(1)` on a transformer
cache, `state.kv.mul_(1)`, `state.kv.squeeze_()` with B = 7 everywhere). Misleading: a
no-op index write into the int64 labels (`y[y == IGNORE] = -100`) was refused with
autograd's version counter and examples (`.clamp_`, `*= 1`) that fit neither.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.data.recall import IGNORE
from labnn.exercises.three_memories import check_accuracy_by_distance, check_cache_bytes
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _accuracy(logits, y, max_distance, pred=lambda z: z.argmax(-1), count=torch.long):
    """The trial's answer: counts by `index_add_` in `count`'s dtype."""
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    keep = (d >= 1) & (d <= max_distance)
    hit = (pred(logits) == y) & keep
    idx = torch.where(keep, d, 0).flatten()
    hits = torch.zeros(max_distance + 1, dtype=count, device=y.device).index_add_(
        0, idx, hit.flatten().to(count))
    total = torch.zeros(max_distance + 1, dtype=count, device=y.device).index_add_(
        0, idx, keep.flatten().to(count))
    return (hits[1:].double() / total[1:].double()).to(logits.dtype)


def acc_index_write_into_y(logits, y, max_distance):
    y[y == IGNORE] = IGNORE  # the same values: only the version counter moves
    return _accuracy(logits, y, max_distance)


def acc_masked_fill_y(logits, y, max_distance):
    out = _accuracy(logits, y, max_distance)
    y.masked_fill_(y == IGNORE, 0)
    return out


def acc_where_labels(logits, y, max_distance):
    y = torch.where(y == IGNORE, IGNORE, y)  # a new tensor: the caller's y is untouched
    return _accuracy(logits, y, max_distance)


def acc_clone_then_write(logits, y, max_distance):
    y = y.clone()
    y[y == IGNORE] = IGNORE
    return _accuracy(logits, y, max_distance)


def acc_loop_mean(logits, y, max_distance):
    labelled = y != IGNORE
    d = labelled.long().cumsum(1) * labelled
    hit = logits.argmax(-1) == y
    out = torch.full((max_distance,), float("nan"), dtype=logits.dtype, device=logits.device)
    for k in range(1, max_distance + 1):
        if (d == k).any():
            out[k - 1] = hit[d == k].float().mean()
    return out


WIDE = r"(?i)vocabulary size written as a number.*whole last axis"
INTEGERS = r"float16.*2,?048.*[Cc]ount in integers"
LABELS = r"^(?!.*autograd)(?!.*clamp_).*y\[\.\.\.\] = .*torch\.where"
case("acc_argmax_first_16", check_accuracy_by_distance,
     lambda l, y, m: _accuracy(l, y, m, pred=lambda z: z[..., :16].argmax(-1)), WIDE)
case("acc_argmax_first_32", check_accuracy_by_distance,
     lambda l, y, m: _accuracy(l, y, m, pred=lambda z: z[..., :32].argmax(-1)), WIDE)
case("acc_counts_float16", check_accuracy_by_distance,
     lambda l, y, m: _accuracy(l, y, m, count=torch.float16), INTEGERS)
case("acc_counts_in_logits_dtype", check_accuracy_by_distance,
     lambda l, y, m: _accuracy(l, y, m, count=l.dtype), r"float16|bfloat16")
case("acc_index_write_into_y", check_accuracy_by_distance, acc_index_write_into_y, LABELS)
case("acc_masked_fill_y", check_accuracy_by_distance, acc_masked_fill_y,
     r"^(?!.*`y / \.\.\.`).*labels.*torch\.where")
RIGHT["acc_long_counts"] = (check_accuracy_by_distance, _accuracy)
RIGHT["acc_float32_counts"] = (check_accuracy_by_distance,
                               lambda l, y, m: _accuracy(l, y, m, count=torch.float32))
RIGHT["acc_topk_1"] = (check_accuracy_by_distance,
                       lambda l, y, m: _accuracy(l, y, m, pred=lambda z: z.topk(1).indices[
                           ..., 0]))
RIGHT["acc_where_labels"] = (check_accuracy_by_distance, acc_where_labels)
RIGHT["acc_clone_then_write"] = (check_accuracy_by_distance, acc_clone_then_write)
RIGHT["acc_loop_mean"] = (check_accuracy_by_distance, acc_loop_mean)


def _tensors(cache):
    """The trial's walk over a cache: `(k, v)` pairs, or a KVState's one kv."""
    if isinstance(cache, KVState):
        return [cache.kv]
    return [t for pair in (cache.kv if isinstance(cache, XLCache) else cache) for t in pair]


def _bytes(cache, size=lambda t: t.element_size()):
    return sum(t.numel() * size(t) for t in _tensors(cache))


def cb_dtype_table(cache):
    return _bytes(cache, lambda t: 8 if t.dtype == torch.float64 else
                  2 if t.dtype == torch.bfloat16 else 4)


def _writes(where, op):
    """An answer right in its count that writes into the cache's tensors (`op`) first, on
    caches of the kind `where` accepts."""
    def cache_bytes(cache):
        if where(cache):
            for t in _tensors(cache):
                op(t)
        return _bytes(cache)
    return cache_bytes


def _assign(t):
    t[0, 0] = t[0, 0]


TRANSFORMER, FEEDBACK = (lambda c: isinstance(c, list)), (lambda c: isinstance(c, KVState))
READ_ONLY = r"cache_bytes must only read the cache: .*{}.* wrote into it"
case("cb_dtype_table_without_float16", check_cache_bytes, cb_dtype_table,
     r"float16.*element_size\(\) or nbytes, not a table of dtypes")
case("cb_transformer_keys_mul_1", check_cache_bytes,
     _writes(TRANSFORMER, lambda t: t.mul_(1)), READ_ONLY.format(r"\.mul_"))
case("cb_transformer_keys_assigned", check_cache_bytes, _writes(TRANSFORMER, _assign),
     READ_ONLY.format(r"\[\.\.\.\] = "))
case("cb_feedback_kv_mul_1", check_cache_bytes, _writes(FEEDBACK, lambda t: t.mul_(1)),
     READ_ONLY.format(r"\.mul_"))
case("cb_feedback_kv_squeeze_", check_cache_bytes, _writes(FEEDBACK, lambda t: t.squeeze_()),
     READ_ONLY.format(r"\.squeeze_"))
case("cb_xl_values_mul_1", check_cache_bytes,
     _writes(lambda c: isinstance(c, XLCache), lambda t: t.mul_(1)), READ_ONLY.format(r"\.mul_"))
RIGHT["cb_element_size"] = (check_cache_bytes, _bytes)
RIGHT["cb_nbytes"] = (check_cache_bytes, lambda c: sum(t.nbytes for t in _tensors(c)))
RIGHT["cb_finfo_bits"] = (check_cache_bytes,
                          lambda c: _bytes(c, lambda t: torch.finfo(t.dtype).bits // 8))
RIGHT["cb_itemsize"] = (check_cache_bytes, lambda c: _bytes(c, lambda t: t.dtype.itemsize))
RIGHT["cb_squeezed_copy"] = (check_cache_bytes,
                             lambda c: sum(t.squeeze().nbytes for t in _tensors(c)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
