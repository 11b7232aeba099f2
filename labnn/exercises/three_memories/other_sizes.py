"""Notebook 05's answers that hold only at the checks' own inputs: `make_recall`, once it
passes there, runs again at the same sizes with other contents and large ids (a result
kept between calls, ids through int8 or float16, named), then where every size differs
(`grading.sizes`), so that a row index `torch.arange(5)` or a time axis `torch.arange(9)`
written as numbers fails by name (a row index kept in a default argument too), and on a
filler that holds the values' ids (labels found from x, not `positions`, named); and
`accuracy_by_distance` scores an untrained model's
logits (`untrained_scores`). (The reach and the cache sizes are checked at several sizes
already.)

Dimension letters (the package legend): `N` examples, `T` tokens per example, `V`
vocabulary.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.data.recall import accuracy_by_distance as _accuracy
from labnn.data.recall import make_recall as _reference
from labnn.data.recall import value_distances
from labnn.exercises.grading import (call, expect_close, expect_like, expect_tensor, fail,
                                     shares_memory)
from labnn.exercises.grading.compare import close
from labnn.exercises.grading.sizes import expect_same
from labnn.exercises.three_memories import fresh_calls, narrow_ints
from labnn.exercises.three_memories.recall_score_rounds import values_only_slips
from labnn.exercises.three_memories.recall_score_slips import DTYPE_HINT, by_distance

N, T = 3, 12  # the check's own: N = 5, T = 9


# where ids pass through a narrow dtype and back, the ids of `_same_sizes` change
NARROW = ((torch.int8, "int8 (-128..127)"), (torch.uint8, "uint8 (0..255)"),
          (torch.int16, "int16 (up to 32767)"),
          (torch.float16, "float16 (whole numbers exact up to 2048 only)"),
          (torch.bfloat16, "bfloat16 (whole numbers exact up to 256 only)"))


def _equal(got, want: torch.Tensor) -> bool:
    """Whether `got` is a tensor of `want`'s shape and values."""
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(
        got.long(), want)


def _overwritten(returned: tuple, first: tuple, out) -> None:
    """Fail when the second call changed the x or y the first call returned (`returned`,
    which held `first`): buffers kept between calls, written into and returned again."""
    for name, old, right, new in zip("xy", returned, first, out):
        if isinstance(old, torch.Tensor) and (not _equal(old, right) or (
                isinstance(new, torch.Tensor) and shares_memory(old, new))):
            fail(f"make_recall called twice with filler [5, 9]: the second call overwrote the "
                 f"{name} the first call returned (a buffer kept between calls, written into "
                 "and returned again?), so a list of batches would hold the last one N times. "
                 "Make new tensors at each call (filler.clone(), torch.full(...)).")


def _same_sizes(fn: Callable, first: tuple, returned: tuple) -> None:
    """`fn` at the check's own sizes, `[5, 9]`, with other contents and a real vocabulary's
    ids (fillers 3000..3099, values up to 40001): a result kept between calls (`first`,
    the check's own call's x and y, again), the first call's x or y (`returned`) overwritten
    and ids passed through a narrow dtype (`NARROW`)
    are named."""
    filler = torch.randint(3000, 3100, (5, 9), generator=torch.Generator().manual_seed(52))
    values, positions = torch.tensor([200, 3079, 0, 40001, 131]), torch.tensor([3, 0, 6, 1, 5])
    what = ("make_recall(filler, values, positions) called again with filler [5, 9] (other "
            "tokens, ids 3000..3099), values [200, 3079, 0, 40001, 131]")
    given = (filler.clone(), values.clone(), positions.clone())
    out = call(fn, what, *given)
    want = _reference(filler, values, positions)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(f"{what} returned {type(out).__name__}, not a pair (x, y).")
    if all(_equal(o, w) for o, w in zip(out, want)):
        _overwritten(returned, first, out)
        if (again := fresh_calls.recall_refilled(fn, given, out)) is not None:
            _differs(*again, why="right before on new tensors: compute x and y from the "
                     "values the inputs hold at each call.")
        return
    if all(_equal(o, k) for o, k in zip(out, first)):
        fail(f"{what}, returned the first call's x and y: a result kept between calls (a "
             "cache keyed by the shape?). Compute x and y from each call's own inputs.")
    _differs(what, out, want, first)


def _differs(what: str, out, want: tuple, earlier: tuple,
             why: str = "right with the check's small ids, not with these.") -> None:
    """Name how `out`, a pair, differs from `want`: an earlier call's x or y (`earlier`)
    kept in part, ids through a narrow dtype, else the entry that differs (`why`)."""
    fresh_calls.stale_part(what, out, want, earlier)
    for name, got, right in zip("xy", out, want):
        if _equal(got, right) or not isinstance(got, torch.Tensor) or got.shape != right.shape:
            continue
        n, t = (got.long() != right).nonzero()[0].tolist()
        said = (f"{what}: {name} holds {got[n, t].item()} at [n={n}, t={t}], expected "
                f"{right[n, t].item()}")
        for dtype, kind in NARROW:
            if _equal(got, right.to(dtype).long()):
                fail(f"{said}: the ids went through {kind} on the way. Keep them torch.long "
                     "(a real vocabulary has tens of thousands of ids).")
        fail(f"{said}: {why}")
    for i, name in enumerate(("x", "y")):  # not tensors, or another shape
        expect_same(what, lambda i=i: out[i], want[i], "compute x and y from each call's "
                    "own inputs", dims="N T")


def make_recall(fn: Callable, first: tuple, returned: tuple = ()) -> None:
    """`fn(filler, values, positions)` at the check's own sizes with other contents
    (`_same_sizes`: `first` is the check's call's x and y, `returned` what it returned),
    then with filler `[3, 12]`,
    `[2, 40]` (longer than the notebook's T = 32), and `[1, 7]` (one row: a `.squeeze()`
    drops its axis): x, then y; then on a filler holding the values' ids."""
    _same_sizes(fn, first, returned)
    g = torch.Generator().manual_seed(51)
    kept = fresh_calls.kept_default(fn)  # filled at the check's first call, N = 5
    fix = (f"{kept} is kept between calls, made at an earlier call's sizes: make it afresh "
           "at every call, from filler.shape" if kept else "read N and T from filler.shape, "
           "never a number (the check's are N = 5, T = 9; the notebook's T = 32)")
    for (n, t), values, positions in (((N, T), [2, 0, 3], [10, 0, 6]),
                                      ((2, 40), [1, 2], [35, 3]), ((1, 7), [2], [3])):
        filler = torch.randint(4, 8, (n, t), generator=g)
        values, positions = torch.tensor(values), torch.tensor(positions)
        want = _reference(filler, values, positions)
        for i, name in enumerate(("x", "y")):
            expect_same(f"{name} of make_recall(filler, values, positions) with filler [{n}, {t}]",
                        lambda i=i: fn(filler.clone(), values.clone(), positions.clone())[i],
                        want[i], fix, dims="N T")
    _value_ids_in_filler(fn)
    narrow_ints.long_recall(fn)  # T = 300: a time axis in uint8, int8 or bfloat16


def _value_ids_in_filler(fn: Callable) -> None:
    """`fn` on a filler that holds each row's value id too, before and after its position
    (ids are the caller's: the notebook's task keeps them apart, `make_recall` does not
    rely on it): labels found from where the id appears in x, not `positions`, are named."""
    filler = torch.tensor([[4, 1, 5, 6, 7, 4, 5, 1, 6, 7], [3, 6, 4, 5, 3, 7, 4, 6, 5, 4],
                           [5, 7, 0, 6, 4, 5, 7, 4, 0, 6]])
    values, positions = torch.tensor([1, 3, 0]), torch.tensor([4, 2, 6])
    what = "make_recall(filler, values, positions) with filler [3, 10] holding value ids too"
    out = call(fn, what, filler.clone(), values.clone(), positions.clone())
    want = _reference(filler, values, positions)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(f"{what} returned {type(out).__name__}, not a pair (x, y).")
    if all(_equal(o, w) for o, w in zip(out, want)):
        return
    if not _equal(out[0], want[0]) or not isinstance(out[1], torch.Tensor) or (
            out[1].shape != want[1].shape):
        _differs(what, out, want, want, why="a filler may hold a value's id too: write "
                 "values[n] at positions[n], whatever the tokens.")
    n, t = (out[1].long() != want[1]).nonzero()[0].tolist()
    fail(f"{what}: y is wrong at [n={n}, t={t}]: your labels follow where the value's id "
         "appears in x, not positions (a filler may hold that id too). Label every t > "
         "positions[n]: torch.where(torch.arange(T) > positions[:, None], values[:, None], "
         "IGNORE).")


def _flat_logits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """An untrained model's logits `[30, 10, 6]`: nearly flat, so the argmax is right
    about one time in six with a probability far below 0.5; none right at distance 2,
    all right at distance 6, one past `max_distance = 5`."""
    g = torch.Generator().manual_seed(53)
    n, t, v = 30, 10, 6
    positions = torch.randint(0, t - 1, (n,), generator=g)
    _, y = _reference(torch.randint(3, v, (n, t), generator=g),
                      torch.randint(0, 3, (n,), generator=g), positions)
    logits = 0.2 * torch.randn(n, t, v, generator=g)
    d, label = value_distances(y), y.clamp(min=0)
    wrong = torch.nn.functional.one_hot((label + 1) % v, v).float()
    logits += 0.8 * (d == 2)[..., None] * wrong  # a wrong class wins at d = 2
    logits += 0.8 * (d == 6)[..., None] * torch.nn.functional.one_hot(label, v).float()
    return logits, y, 5


def untrained_scores(fn: Callable) -> None:
    """`fn(logits, y, 5)` on an untrained model's logits (`_flat_logits`), in float32,
    then in bfloat16: a probability threshold for the argmax, NaN for a distance
    without a hit, distance 6 counted in the last entry and an answer that leaves
    bfloat16 fail by name."""
    logits, y, max_d = _flat_logits()
    what = "accuracy_by_distance(logits, y, 5) on an untrained model's (nearly flat) logits"
    want, d = _accuracy(logits, y, max_d), value_distances(y)
    got = expect_like(expect_tensor(call(fn, what, logits, y, max_d), what), want, what,
                      DTYPE_HINT)
    if not close(got, want):
        probable = logits.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0] > 0.5
        past = torch.where(d == max_d + 1, max_d, d)
        hits = (logits.argmax(-1) == y).double()
        missed = (want == 0) & torch.isnan(got)
        for wrong, message in (
                (by_distance(probable.double(), d >= 1, d, max_d), "a position is right when "
                 "its label is the argmax, however small its probability (no class of "
                 "these flat logits reaches 0.5): logits.argmax(-1) == y, no threshold."),
                (by_distance(hits, past >= 1, past, max_d), "the positions at "
                 f"distance max_distance + 1 = {max_d + 1} were counted in the last entry: "
                 "leave out every position farther than max_distance."),
                *values_only_slips(logits, y, max_d)):
            if close(got, wrong):
                fail(f"{what}: {message}")
        if missed.any():
            k = int(missed.nonzero()[0]) + 1
            fail(f"{what} is NaN at d={k}, where {int((d == k).sum())} labelled positions "
                 "lie and none is right: that is an accuracy of 0. NaN belongs only where "
                 "no position lies at a distance (0 / 0).")
    expect_close(got, want, what, atol=1e-6)
    what += ", in bfloat16"
    # the same ranking in steps of 1/8, exact in bfloat16: no tie for argmax and topk to
    # break differently (flat bfloat16 logits tie often)
    half = (logits.argsort(-1).argsort(-1) / 8).bfloat16()
    want = _accuracy(half, y, max_d)
    got = expect_like(expect_tensor(call(fn, what, half, y, max_d), what), want, what,
                      DTYPE_HINT)
    expect_close(got.float(), want.float(), what, atol=1e-2)


NEAR = ("accuracy_by_distance(logits, y, 5) on float64 logits whose two best classes "
        "differ by 4e-3, 1e-5 or 1e-9")


def _near_tie_logits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """Float64 logits `[30, 10, 6]` whose best two classes differ by 4e-3, 1e-5 or 1e-9 at
    every labelled position, the lower-indexed one winning half the time: rounded to
    bfloat16 all three gaps tie (argmax takes the lower index), to float16 the last two,
    to float32 the last."""
    _, y, max_d = _flat_logits()
    label = y.clamp(min=0)
    decoy = torch.where(label > 0, 0, 1)  # a tie goes to the lower index: the decoy
    k = torch.arange(y.size(1)) + y.size(1) * torch.arange(y.size(0))[:, None]
    right = k % 2 == 0
    # near 3, bfloat16 steps by 2e-2, float16 by 2e-3, float32 by 2e-7
    gap = torch.tensor([4e-3, 1e-5, 1e-9], dtype=torch.float64)[k % 3][..., None]
    near = torch.full((*y.shape, 6), 2.5, dtype=torch.float64)
    near.scatter_(-1, decoy[..., None], 3.0 + gap * (~right)[..., None])
    near.scatter_(-1, label[..., None], 3.0 + gap * right[..., None])
    return near, y, max_d


def rounded_argmax(fn: Callable) -> None:
    """`fn` on `_near_tie_logits`: an argmax taken after rounding the logits to float32,
    float16 or bfloat16 ties their best two classes, and is named (any other difference is left to
    the rounds after it, which name their own slips, and to `near_ties`)."""
    near, y, max_d = _near_tie_logits()
    want = _accuracy(near, y, max_d)
    got = expect_like(expect_tensor(call(fn, NEAR, near, y, max_d), NEAR), want, NEAR,
                      DTYPE_HINT)
    for rounded, name in ((torch.float32, ".float() (float32)"),
                          (torch.float16, ".half() (float16)"), (torch.bfloat16, ".bfloat16()")):
        tied = by_distance((near.to(rounded).argmax(-1) == y).double(), y >= 0,
                           value_distances(y), max_d)
        if not close(got, want) and close(got, tied):
            fail(f"{NEAR}: your argmax ties them, as rounding the logits to {name} first "
                 "does (3.0 and 3.000000001 are one number there): take logits.argmax(-1) "
                 "of the logits as given.")


def near_ties(fn: Callable) -> None:
    """`fn` on `_near_tie_logits` equals the reference."""
    near, y, max_d = _near_tie_logits()
    got = expect_tensor(call(fn, NEAR, near, y, max_d), NEAR)
    expect_close(got, _accuracy(near, y, max_d), NEAR, atol=1e-9)


def many_positions(fn: Callable, dtype: torch.dtype = torch.bfloat16) -> None:
    """`fn(logits, y, 3)` on bfloat16 logits with 600 labelled positions at each distance,
    or (`dtype=torch.float16`, the last round: float16 logits meet a -1e9 mask only here)
    `fn(logits, y, 2)` with 3,000: counts kept in bfloat16 (whole numbers exact only up
    to 256) or float16 (up to 2,048) stop growing there; named (the rounds before, with
    few positions, passed)."""
    g = torch.Generator().manual_seed(57 if dtype == torch.bfloat16 else 58)
    n, t, exact = (600, 4, "256") if dtype == torch.bfloat16 else (3000, 3, "2,048")
    y = torch.randint(0, 6, (n, t), generator=g)
    y[:, 0] = -100  # the value's own position: not scored
    ranks = torch.rand(n, t, 6, generator=g).argsort(-1).argsort(-1)  # no ties
    logits, name = (ranks / 8).to(dtype), str(dtype)[6:]
    what = (f"accuracy_by_distance(logits, y, {t - 1}) on {name} logits with {n:,} labelled "
            "positions at each distance")
    want = _accuracy(logits, y, t - 1)
    got = expect_like(expect_tensor(call(fn, what, logits, y, t - 1), what), want, what,
                      DTYPE_HINT)
    if not close(got.float(), want.float(), atol=1e-2):
        said = (f"{what} gives {[round(x, 3) for x in got.float().tolist()]}, not "
                f"{[round(x, 3) for x in want.float().tolist()]}")
        same = torch.cat([y[:, :1], y[:, 1:2].expand(-1, t - 1)], 1)  # one label per row
        if _right(fn, logits, same):
            fail(f"{said}, though right where each row's labels are equal: p from their "
                 "values (p from y.argmax?) or one label per row (y[:, -1:]?). p + 1 is where "
                 "y != IGNORE first holds; score each t against y[:, t].")
        narrow_ints.wrapped_counts(got, logits, y, t - 1, what)  # in uint8 or int8
        fail(f"{said}: {name} holds whole numbers exactly only up to {exact}, so a count "
             "kept in it stops growing there. Count in integers (a bool or long tensor's "
             ".sum()) and divide at the end.")


def _right(fn: Callable, logits: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether `fn(logits, y, T - 1)` runs and gives the reference's accuracy."""
    try:
        got = fn(logits.clone(), y.clone(), y.size(1) - 1)
        want = _accuracy(logits, y, y.size(1) - 1)
        return isinstance(got, torch.Tensor) and close(got.float(), want.float(), atol=1e-2)
    except Exception:  # noqa: BLE001 (a rerun only names)
        return False
