"""The slips of notebook 01's causal mask (Exercise 3): the typical wrong masks (the
diagonal forbidden, inverted, transposed, ...), a mask of the wrong shape (a fixed size,
an extra axis, index pairs, one row and column too many or too few), a 1-D mask from
comparing two aranges, a flipped or mirrored triangle, positions or counts kept in a dtype too
small for them (a float one, uint8 or int8, int16); a fixed buffer kept outside the function is
`kept_buffers`' (a cached mask that every call returns again is
`grading.expect_new_each_call`'s).

`t` is the number of tokens; the mask is `[t, t]`, query `i` by key `j`, True where `j <= i`.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import torch

from labnn.exercises.grading import fail
from labnn.exercises.grading.sizes import EXACT_UP_TO, kept_in
from labnn.nn.attention import causal_mask


def _shape_for(fn: Callable, t: int) -> tuple:
    """The shape of `fn(t)`, or `()` when it fails or gives no tensor."""
    try:
        return tuple(fn(t).shape)
    except Exception:
        return ()


def expect_mask_size(got: torch.Tensor, t: int, what: str, fn: Callable) -> None:
    """`got` = `fn(t)`: fail when it is `[t + 1, t + 1]` or `[t - 1, t - 1]` for two
    sizes t (an off-by-one size, not a fixed one), 1-D `[t]` as `arange <= arange`
    gives, or anything but `[0, 0]` at t = 0 (a list comprehension's `[0]`)."""
    shape = tuple(got.shape)
    for step, sign, said in ((1, "+", "too many"), (-1, "-", "too few")):
        n = t + step
        other = t + 3
        if (n > 0 and shape == (n, n)
                and _shape_for(fn, other) == (other + step, other + step)):
            fail(f"{what} has shape [t {sign} 1, t {sign} 1] = {[n, n]} for t = {t}: one "
                 f"row and column {said}: build it as [t, t], e.g. "
                 "torch.ones(t, t, dtype=torch.bool).tril().")
    if t > 1 and got.dim() == 1 and shape == (t,):
        how = ("comparing two aranges of the same shape compares them element by element"
               if bool((got == got[0]).all()) else "a mask needs two axes, query i by key j")
        fail(f"{what} has shape [t] = [{t}], 1-D: {how}; compare a column with a row, "
             "torch.arange(t)[:, None] >= torch.arange(t)[None, :] (broadcasting makes "
             "[t, t]).")
    if t == 0 and shape != (0, 0):
        why = ("torch.tensor of an empty list has shape [0]: add .reshape(t, t), or compare "
               "torch.arange(t)[:, None] >= torch.arange(t)") if shape == (0,) else (
            "build it from t itself, e.g. torch.ones(t, t, dtype=torch.bool).tril(), with no "
            "special case for small t")
        fail(f"{what} has shape {list(shape)}: t = 0 (no tokens yet) gives an empty [0, 0] "
             f"mask, as causal_mask(0) does; {why}.")


def mirror_slips(t: int, what: str, want: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The right mask `want` flipped or mirrored, as `(mask, message)` pairs."""
    rule = "row i is query i and may attend the keys j <= i (lower triangle, tril())"
    return [
        (want.flip(0), f"{what} is the lower triangle flipped upside down (flip(0)): "
                       f"the rows are reversed; {rule}, unflipped."),
        (want.flip(1), f"{what} is the lower triangle flipped left to right (flip(1)): "
                       f"the columns are reversed; {rule}, unflipped."),
    ] if t > 1 else []


def expect_causal_shape(got: torch.Tensor, t: int, what: str, fn: Callable) -> None:
    """`got` = `fn(t)`, a causal mask of the wrong shape: fail when it is square but not
    `[t, t]` (its size fixed: the same for `t + 1`), has an extra axis of size 1, is index
    pairs (`torch.tril_indices`) or has one row or column too many."""
    n = got.size(0) if got.dim() == 2 and got.size(0) == got.size(1) != t else None
    if n is not None:
        cut = ""
        if _shape_for(fn, t + 1) == (n, n):  # the same size for t + 1: fixed
            cut = f", and the same for t = {t + 1}: a mask of a fixed size"
            if n < t and _shape_for(fn, n - 1) == (n - 1, n - 1):
                cut = (f": a mask of a fixed size, {n}, cut to t ([:t, :t]) is too small "
                       f"for t > {n}")
        fail(f"{what} has shape {list(got.shape)} for t = {t}{cut}; build it from t, e.g. "
             "torch.ones(t, t, dtype=torch.bool).tril(), not from a fixed size.")
    if got.dim() > 2 and got.numel() == t * t and got.squeeze().shape == (t, t):
        named = ", ".join("t" if size == t else str(size) for size in got.shape)
        fail(f"{what} has shape {list(got.shape)} = [{named}]: an extra axis of size 1 "
             "(from [None] or unsqueeze); a causal mask is [t, t], query i by key j: drop "
             "it (attention broadcasts a [t, t] mask over the batch).")
    for offset in (0, -1):
        pairs = torch.tril_indices(t, t, offset)
        if got.shape == pairs.shape and torch.equal(got.long(), pairs):
            fail(f"{what} has shape {list(got.shape)}: torch.tril_indices gives the index "
                 "pairs (rows, columns) of the lower triangle, not a mask; build the "
                 "[t, t] mask itself, torch.ones(t, t, dtype=torch.bool).tril().")
    for shape, axis, named in (((t, t + 1), "column", "[t, t + 1]"),
                               ((t + 1, t), "row", "[t + 1, t]")):
        if tuple(got.shape) == shape:
            fail(f"{what} has shape {list(got.shape)}, expected {[t, t]}: that is "
                 f"{named}, one {axis} too many; the mask is [t, t], query i by key j.")


def causal_slips(t: int, what: str, want: torch.Tensor,
                 fn: Callable | None = None) -> list[tuple[torch.Tensor, str]]:
    """The typical wrong causal masks of size `t` (`want` the right one), as
    `(mask, message)` pairs; `fn` given (its mask all True), one that keeps positions in an
    unsigned dtype, where `i - j >= 0` always holds, is named."""
    ones = torch.ones(t, t, dtype=torch.bool)
    unsigned = kept_in(lambda: fn(40), (torch.uint8, torch.uint16)) if fn else None
    wrap = (f"its positions are {str(unsigned)[6:]}, where i - j is never negative (0 - 1 "
            f"wraps to {EXACT_UP_TO[unsigned]}): keep torch.arange's int64, or compare, j <= "
            "i; ") if unsigned else ""
    return [
        (ones.tril(-1), f"{what} forbids the diagonal: a token may attend to "
                        "itself (j <= i, not j < i)."),
        (ones.tril(1), f"{what} lets query i see key i + 1, the next token: "
                       "it must see only j <= i."),
        (~want, f"{what} is inverted: True must mean 'may attend' (the past and "
                "itself), False the future."),
        (want.T, f"{what} is transposed (or the strict lower triangle inverted, "
                 "~...tril(-1)): row i is query i and may attend the keys j <= i, the lower "
                 "triangle, diagonal included: ones.tril(), no ~."),
        (ones, f"{what} lets every query see every key: {wrap}the future must be False."),
        (~ones, f"{what} is all False (built from torch.zeros?): no query may attend "
                "anything; start from torch.ones(t, t, dtype=torch.bool).tril()."),
        *((_small_positions(t, dtype), f"{what} is wrong past position {top}: positions "
           f"kept as {dtype} wrap around after {top}; keep torch.arange's int64")
          for dtype, top in ((torch.uint8, 255), (torch.int8, 127)) if t > top + 1),
    ] if t > 1 else []


def _small_positions(t: int, dtype: torch.dtype) -> torch.Tensor:
    """The mask `j <= i` of positions cast to a small integer `dtype`, which wraps."""
    p = torch.arange(t).to(dtype)
    return p[None, :] <= p[:, None]


# CPU seconds of this thread for t = 300 (three calls, with the check's own work, some 0.05 s
# a call on a busy 2-core VM): a loop over every entry takes 0.5 s or more there, a vectorised
# mask 0.001. Not the process's CPU time: torch's worker threads spin while they wait, and with
# 2 of them on a busy VM they made a vectorised mask look slow in 11 checks of 12 (trial 58).
FAST = 0.3
SLOW_T = 1100  # the long round of a slow answer: past GPT-2's 1024, 13 times t = 300
HALF = (torch.float16, torch.bfloat16)


def mask_sizes(fn: Callable, name: str) -> Iterator[int]:
    """The t to try, in turn: small ones, 300, 0, then 2100, past the 1024 positions of
    GPT-2 (a buffer of that size cut to t) and past 2048, where float16 stops holding every
    integer (`expect_past_4096` then calls a fast answer once more, at 4200). A slow
    answer (t = 300 took `FAST` or more: a loop over every entry) gets `SLOW_T` instead,
    when it should take under about 10 s, after a rerun at t = 40 that looks for positions
    kept in float16 (`expect_no_half_positions`); a note says so."""
    took = 0.0
    for t in (4, 7, 1, 16, 40, 300, 0):
        start = time.thread_time()  # CPU time: other jobs on the machine do not count
        yield t
        took = time.thread_time() - start if t == 300 else took
    if took < FAST:
        yield 2100
        return
    expect_no_half_positions(fn, name, took)
    tried = f"t = {SLOW_T} instead" if took * 4.5 < 10 else "no larger t"
    print(f"note: {name}(300) took {took / 3:.2f} s of CPU time (a loop over every entry?), "
          f"so the check skipped t = 2100 for time and tries {tried}.")
    if took * 4.5 < 10:  # one call at SLOW_T, 13.4 times the entries of t = 300
        yield SLOW_T


def expect_no_half_positions(fn: Callable, name: str, took: float) -> None:
    """Fail when `fn(40)` holds positions in float16 (or bfloat16), wrong past 2048 (256),
    which a slow answer's shorter round misses."""
    seen = kept_in(lambda: fn(40), HALF)
    if seen is not None:
        kind, top = str(seen)[6:], EXACT_UP_TO[seen]
        fail(f"{name}(40) keeps positions in {kind}, which holds integers exactly only up "
             f"to {top}: the mask goes wrong past t = {top} (the check skipped t = 2100 for "
             f"time: {name}(300) took {took / 3:.2f} s). Keep torch.arange's int64, or "
             "compare in bool.")


def expect_no_int16_positions(fn: Callable, name: str) -> None:
    """Fail when `fn(40)` keeps positions in int16 (`torch.arange(t, dtype=torch.int16)`,
    `.to(torch.int16)`) or uint16, right at every t tried but wrong past 32,767 or 65,535
    (int8 and uint8 show at t = 300 and are named there)."""
    seen = kept_in(lambda: fn(40), (torch.int16, torch.uint16))
    if seen is not None:
        kind, top = str(seen)[6:], f"{EXACT_UP_TO[seen]:,}"
        fail(f"{name} is right at every t tried, but keeps its positions in {kind} "
             f"(arange(t, dtype=torch.{kind}) or .to(torch.{kind})): positions in {kind} "
             f"wrap past {top}: keep torch.arange's int64.")


def expect_mask_equal(got: torch.Tensor, want: torch.Tensor, what: str,
                      fn: Callable | None = None) -> None:
    """`got` a bool `[t, t]` mask (`fn(t)`, when given): fail at its first wrong entry,
    naming a sliding window (the past beyond the last w keys forbidden), counts or
    positions kept in uint8 or int8 (`fn` keeps numbers above 1 in it and the mask goes
    wrong where they wrap, past 255 or 127), or positions kept in bfloat16 or float16
    when every entry before the first integer that dtype cannot hold (257, 2049) is right
    and every wrong one lies near the diagonal, where rounded positions meet."""
    if torch.equal(got, want):
        return
    wrong = (got != want).nonzero()
    i, j = (int(n) for n in wrong[0])
    first = int(wrong.amax(1).min())  # the mask is right over positions 0 .. first - 1
    seen = kept_in(lambda: fn(40), (torch.uint8, torch.int8)) if fn else None
    if seen is not None and first - EXACT_UP_TO[seen] in (0, 1):
        kind = str(seen)[6:]
        fail(f"{what} is right up to position {first - 1} and wrong past it (first at "
             f"[i={i}, j={j}]): it keeps counts or positions in {kind} (a cumsum or arange "
             f"with dtype=torch.{kind}, or .to(torch.{kind})), which wrap around past "
             f"{EXACT_UP_TO[seen]}: count in int64 (cumsum's and torch.arange's default), "
             "or compare in bool.")
    t, w = got.size(0), int(got[-1].sum())
    if 0 < w < t - 1 and torch.equal(got, want.triu(1 - w)):  # two rows cut, or more
        fail(f"{what} lets query i attend only the last {w} keys, j = i - {w - 1} to i (a "
             f"sliding window: first wrong at [i={i}, j={j}]): a causal mask lets every "
             "query attend all of its past, j <= i: torch.ones(t, t, dtype=torch.bool)"
             ".tril().")
    near = bool(((wrong[:, 0] - wrong[:, 1]).abs() <= t // 64).all())  # rounded positions
    for dtype, top in ((torch.float16, 2048), (torch.bfloat16, 256)):
        if near and t > top and torch.equal(got[:top, :top], want[:top, :top]):
            fail(f"{what} is right up to position {top} and wrong past it (first at "
                 f"[i={i}, j={j}]): {str(dtype)[6:]} holds integers exactly only up to "
                 f"{top} ({top + 1} rounds to {top}): positions or counts kept in "
                 f"{str(dtype)[6:]}? Keep torch.arange's int64, or compare in bool.")
    fail(f"{what} at [i={i}, j={j}] is {bool(got[i, j])}: query i={i} "
         f"{'may' if j <= i else 'must not'} attend key j={j}.")

