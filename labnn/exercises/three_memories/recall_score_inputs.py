"""Rounds of notebook 05's Exercise 3 (accuracy by distance) on other inputs, run once an
answer passes the check's own (`fresh_calls` calls it again at the same shapes): one row (a
`.squeeze()` drops the batch axis), more distances than the notebook's 31 (`T = 32` or 31
written as a number); and the exactness of the accuracies, ratios of
counts (`right / (count + eps)` is named), rounded once to the logits' dtype where
thousands of positions lie at a distance (counts kept in bfloat16 or float16 are named);
distances past 256 with bfloat16 logits, past 2,048 with float16 ones (distances counted
in either are named).

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.data.recall import accuracy_by_distance as _accuracy
from labnn.data.recall import make_recall
from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     fail, first_line, guarded)
from labnn.exercises.grading.relations import distinct_digits
from labnn.exercises.three_memories import narrow_ints
from labnn.exercises.three_memories.recall_score_slips import (DTYPE_HINT, expect_length,
                                                               expect_nan_where_empty)

F32 = 2.4e-7  # two float32 roundings of a value, relative


def expect_labels_kept(before: dict, what: str, y: torch.Tensor) -> None:
    """Fail when `fn` wrote into the caller's int labels `y`: values changed, or only its
    version counter moved (`y[y == IGNORE] = IGNORE` writes the same values). `before` is
    the `snapshot` taken before the call."""
    kept = getattr(before, "versions", {}).get("y")
    if not torch.equal(before["y"], y):
        fail(f"{what} modified its input `y` in place: an index assignment y[...] = ... or a "
             "method ending in _ (.masked_fill_) writes into the caller's labels, which must "
             "come back as given. Make new labels instead: torch.where(y == IGNORE, ..., y), "
             "or edit y.clone().")
    if kept and kept[0] == id(y) and kept[1] != y._version:
        fail(f"{what} wrote into its input `y` in place, with the same values (an index "
             "assignment y[...] = ..., or a method ending in _): the caller's labels must "
             "come back untouched. Make new labels instead: torch.where(y == IGNORE, ..., "
             "y), or edit y.clone().")


def expect_exact(got: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, max_d: int,
                 what: str, named_only: bool = False) -> None:
    """Fail unless `got` (in the logits' dtype, float32 or float64) is each distance's
    hits / count, rounded once (a float32 division, cast up, is accepted in float64):
    an eps added to the count is named with its size; another difference only where
    not `named_only`."""
    if logits.dtype not in (torch.float32, torch.float64):
        return
    labelled = y != -100
    d = labelled.long().cumsum(1) * labelled
    hits = (logits.argmax(-1) == y) & labelled
    keep = labelled & (d <= max_d)
    count = torch.zeros(max_d, dtype=torch.double).index_add_(0, d[keep] - 1,
                                                               keep[keep].double())
    right = torch.zeros(max_d, dtype=torch.double).index_add_(0, d[keep] - 1,
                                                               hits[keep].double())
    g, fin = got.detach().double().cpu(), count > 0
    if g.shape != count.shape:
        return
    off = (g - right / count).abs()
    in_f32 = off <= F32 * right / count
    if logits.dtype == torch.float64:  # a float32 division cast up: float32's numbers
        in_f32 &= g == g.float().double()
    ok = in_f32 | (off <= 4e-16 * right / count) | ~fin
    if bool(ok.all()):
        return
    k = int((~ok).nonzero()[0])
    yours, exact = distinct_digits(g[k].item(), (right[k] / count[k]).item())
    said = (f"{what} gives {yours} at d={k + 1}, where {int(right[k])} of {int(count[k])} "
            f"positions are right: {exact}")
    some = fin & (right > 0) & (g > 0)
    den = right[some] / g[some]
    if bool(some.any()) and bool((den > 1.5 * count[some]).all()) and bool(
            (den - den.median()).abs().max() <= 1e-3 * den.median()):
        n_t = labelled.numel()
        used = (f"N * T = {n_t}, every position of the [N, T] grid, labelled or not (at.numel()"
                "?)" if round(den.median().item()) == n_t else
                f"{den.median().item():.0f} at every distance")
        fail(f"{said}. Your denominator is {used}: divide the hits at distance d by the "
             "number of positions at d, at.sum().")
    eps = den - count[some]
    if bool(some.any()) and bool((eps > 0).all()) and bool(
            eps.max() - eps.min() <= 0.2 * eps.median()):
        if abs(eps.median().item() - (n_u := int((~labelled).sum()))) < 0.5:
            fail(f"{said}. Your denominator adds the {n_u} unlabelled positions (y == IGNORE, "
                 "before each value) to the count at every distance: an average over them "
                 "counts padding. Divide by the positions at distance d only, at.sum().")
        fail(f"{said}. Your denominator adds a small number to the count (eps ~ "
             f"{eps.median().item():.0e}): an accuracy is a ratio of counts, and a count "
             "is 0 only where no position lies (NaN there, 0 / 0). Divide by the count "
             "itself.")
    if named_only or logits.dtype == torch.float32 and bool(
            (off[fin] <= 1e-5 * right[fin] / count[fin]).all()):
        return  # too small to tell in float32: the float64 round names it
    fail(f"{said}, off by {off[k].item():.1e}: an accuracy is a ratio of counts, exact to "
         f"{str(logits.dtype)[6:]}'s rounding; divide the hits by the count, nothing added, "
         "in float32 or float64.")


LOW = ("counts kept in a low precision (bfloat16 holds whole numbers exactly only up to 256, "
       "float16 up to 2,048): count in int64 (.sum() of a bool), divide, then cast to the "
       "logits' dtype.")
_COUNTS = ((2501, 5003), (333, 1001), (299, 300))  # (hits, positions) at d = 1, 2, 3


def _count_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits `[5003, 4, 4]` in `dtype` and labels whose distances 1, 2, 3 have the
    positions and hits of `_COUNTS` (rows in a seeded order): past 256 and 2,048, where a
    count held in bfloat16 or float16 is rounded."""
    n, t = _COUNTS[0][1], len(_COUNTS) + 1
    row = torch.arange(n)
    p = len(_COUNTS) - 1 - sum((row < c).long() for _, c in _COUNTS[1:])  # p = 0, 1 or 2
    d = torch.arange(t)[None] - p[:, None]
    hit = torch.zeros(n, t, dtype=torch.bool)
    for k, (h, _) in enumerate(_COUNTS, 1):
        hit |= (d == k) & (row < h)[:, None]
    y = torch.where(d >= 1, (row % 3)[:, None].expand(n, t), -100)
    pred = torch.where(hit, y, (y.clamp(min=0) + 1) % 4)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(71))
    return torch.nn.functional.one_hot(pred, 4)[order].to(dtype), y[order]


def _ulp(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of `dtype` at each value of `q` (float64)."""
    scale = torch.exp2(torch.floor(torch.log2(q.abs().clamp(min=torch.finfo(dtype).tiny))))
    return torch.finfo(dtype).eps * scale


def _held_low(g: float, h: int, c: int, dtype: torch.dtype) -> bool:
    """Whether `g` is `h / c` with the hits or the count rounded to bfloat16 or float16
    (rounded once, or a running sum stuck at 256 or 2,048), then to `dtype`."""
    ways = (lambda x: x, lambda x: float(torch.tensor(float(x)).bfloat16()),
            lambda x: float(torch.tensor(float(x)).half()), lambda x: min(x, 256),
            lambda x: min(x, 2048))
    low = torch.tensor([a(h) / b(c) for i, a in enumerate(ways) for j, b in enumerate(ways)
                        if i or j], dtype=torch.float64).to(dtype).double()
    return bool(((low - g).abs() <= _ulp(low, dtype)).any())


def exact_counts(fn: Callable) -> None:
    """`fn(logits, y, 3)` on `_count_inputs`, in float32, bfloat16 and float16: each
    accuracy must be hits / count rounded once to the logits' dtype, give or take one unit
    in its last place (counts cast to bfloat16 with bfloat16 logits stay within it);
    counts kept in bfloat16 or float16 (whatever the logits' dtype) are named."""
    want = torch.tensor([h / c for h, c in _COUNTS], dtype=torch.float64)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        logits, y = _count_inputs(dtype)
        name = str(dtype)[6:]
        what = (f"accuracy_by_distance(logits, y, 3), {name} logits [5003, 4, 4] with "
                "thousands of positions")
        got = expect_like(expect_tensor(call(fn, what, logits, y, 3), what),
                          _accuracy(logits, y, 3), what, DTYPE_HINT).detach().double().cpu()
        q = want.to(dtype).double()
        off = ~((got - q).abs() <= _ulp(q, dtype))
        if not bool(off.any()):
            continue
        k = int(off.nonzero()[0])
        (h, c), (yours, exact) = _COUNTS[k], distinct_digits(got[k].item(), want[k].item())
        said = f"{what} gives {yours} at d={k + 1}, where {h:,} of {c:,} are right ({exact})"
        if _held_low(got[k].item(), h, c, dtype):
            fail(f"{said}: {LOW}")
        fail(f"{said}: an accuracy is hits / count rounded once to {name} (give or take one "
             "unit in its last place): count in int64, divide, then cast to logits.dtype.")
    logits, y = _count_inputs(torch.float32)  # right so far: counts in int16 or float16?
    narrow_ints.kept_exact(lambda: fn(logits, y, 3), "accuracy_by_distance(logits, y, 3)",
                           "Count in int64: labelled.long().cumsum(1), a bool's .sum().")


class _Squeezes(TorchFunctionMode):
    """Records whether a `.squeeze()` dropped a leading axis of size 1 (the batch axis)."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "__name__", "") in ("squeeze", "squeeze_") and args and isinstance(
                args[0], torch.Tensor) and isinstance(out, torch.Tensor):
            t = args[0]
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            if t.dim() >= 1 and t.size(0) == 1 and out.dim() < t.dim() and any(
                    a is None or a % t.dim() == 0 for a in dims):
                self.dropped = True
        return out


def _one_row_inputs() -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(65)
    _, y = make_recall(torch.randint(3, 6, (1, 9), generator=g), torch.tensor([2]),
                       torch.tensor([2]))
    logits = torch.randn(1, 9, 6, generator=g)
    return logits.scatter(-1, y.clamp(min=0)[..., None], torch.rand(1, 9, 1, generator=g)
                          * 4), y, 5


def one_row(fn: Callable) -> None:
    """`fn` on one row, logits `[1, 9, 6]`: a `.squeeze()` that drops the batch axis (an
    error, or other accuracies) is named, found by a rerun that records it."""
    logits, y, max_d = _one_row_inputs()
    what = "accuracy_by_distance(logits, y, 5) with one row, logits [1, 9, 6] and y [1, 9]"
    mode = _Squeezes()

    def squeezed(err: Exception | None = None) -> None:
        try:
            with guarded(what), mode:
                fn(logits.clone(), y.clone(), max_d)
        except Exception:
            pass
        if mode.dropped:
            how = f"raised {type(err).__name__}" if err is not None else "differs"
            fail(f"{what} {how}: a .squeeze() dropped the batch axis N = 1 (it drops every "
                 "axis of size 1). Squeeze only the axis you mean (.squeeze(-1)), or keep "
                 "[N, T] throughout: one row is a batch too.")

    got = expect_tensor(call(fn, what, logits, y, max_d, diagnose=squeezed), what)
    want = _accuracy(logits, y, max_d)
    expect_length(got, max_d, y.size(1), what)
    expect_like(got, want, what, DTYPE_HINT)
    if not close(got.double(), want.double(), atol=1e-6):
        squeezed()
    expect_nan_where_empty(got, want, y, what)
    expect_close(got.double(), want.double(), what, atol=1e-6)


def _first_wrong_distance(got: torch.Tensor, want: torch.Tensor) -> int | None:
    """The first distance d (1-based) where `got` differs from `want` (NaN equal to NaN),
    None where they agree or their shapes differ."""
    if got.shape != want.shape:
        return None
    wrong = ~torch.isclose(got.double(), want.double(), atol=1e-6, equal_nan=True)
    return int(wrong.nonzero()[0]) + 1 if bool(wrong.any()) else None


def many_distances(fn: Callable) -> None:
    """`fn(logits, y, 40)` with T = 45, beyond the notebook's T = 32: 31 distances or the
    first 32 positions written as numbers are named."""
    g = torch.Generator().manual_seed(67)
    n, t, v, max_d = 3, 45, 6, 40
    _, y = make_recall(torch.randint(3, v, (n, t), generator=g), torch.tensor([0, 2, 1]),
                       torch.tensor([0, 1, 2]))
    right = torch.rand(n, t, generator=g) < 0.6
    target = torch.where(right, y.clamp(min=0), (y.clamp(min=0) + 1) % 3)
    logits = torch.randn(n, t, v, generator=g).scatter(-1, target[..., None], 10.0)
    what = f"accuracy_by_distance(logits, y, {max_d}) with T = {t} (logits [{n}, {t}, {v}])"
    fix = ("a number of the notebook's (T = 32, 31 distances) written in your function: "
           "read T from y.shape and the number of distances from max_distance.")

    def written(err: Exception) -> None:  # a [.., 32] tensor met one of T = 45
        said = first_line(err, 100)
        if isinstance(err, (RuntimeError, IndexError)) and ("(32)" in said or "(31)" in said
                                                            or "size 32" in said):
            fail(f"{what} raised {type(err).__name__} ({said}): {fix}")
    got = expect_tensor(call(fn, what, logits, y, max_d, diagnose=written), what)
    want = _accuracy(logits, y, max_d).double()
    if got.dim() == 1 and got.numel() in (31, 32):
        fail(f"{what} has {got.numel()} entries, not max_distance = {max_d}: {fix}")
    expect_length(got, max_d, t, what)
    got = got.double()
    k = _first_wrong_distance(got, want)
    if k in (30, 31, 32):  # wrong from d ~ 31
        fail(f"{what} is right up to d={k - 1}, wrong from d={k} (yours {got[k - 1].item():.4g}"
             f", expected {want[k - 1].item():.4g}): {fix}")
    expect_close(got, want, what, atol=1e-6)


def far_distances(fn: Callable) -> None:
    """`fn(logits, y, T - 1)` with bfloat16 logits and T = 300, then float16 ones and
    T = 2,100: distances counted in a half-precision dtype (bfloat16's whole numbers stop
    being exact past 256, float16's past 2,048) are named."""
    g = torch.Generator().manual_seed(69)
    for dtype, t, exact in ((torch.bfloat16, 300, 256), (torch.float16, 2100, 2048)):
        n, v, max_d = 2, 6, t - 1
        _, y = make_recall(torch.randint(3, v, (n, t), generator=g), torch.tensor([0, 1]),
                           torch.tensor([0, 0]))
        # distinct whole numbers: no tie in either dtype, so any argmax (topk too) agrees
        logits = torch.rand(n, t, v, generator=g).argsort(-1).to(dtype)
        name = str(dtype)[6:]
        what = f"accuracy_by_distance(logits, y, {max_d}) with {name} logits [{n}, {t}, {v}]"
        got = expect_tensor(call(fn, what, logits, y, max_d), what)
        expect_length(got, max_d, t, what)
        want = _accuracy(logits, y, max_d).double()
        k = _first_wrong_distance(got, want)
        if k is not None and k >= exact:  # d = exact holds (some of) the later ones
            fail(f"{what} is right up to d={k - 1}, wrong from d={k}: the distances were "
                 f"counted in {name} (its whole numbers are exact only up to {exact:,}, so "
                 "a cumsum stops there): count them in integers, e.g. "
                 "labelled.long().cumsum(1).")
        narrow_ints.wrapped_distances(got, logits, y, max_d, what)  # in uint8 or int8
        expect_close(got.double(), want, what, atol=1e-6)
