"""Notebook 02's inputs beyond the checks' own: where an answer right at their small sizes
still goes wrong.

- The segment mask for one position (`n = 1`, where a `.squeeze()` drops both axes), for a
  text shorter than one segment (all of it the first segment), for segments of one
  position, for an `n` seen before with other sizes, one or two of them as before (a mask
  kept between calls, keyed by some of the arguments), for
  `n = 130`, past what int8 positions hold, and for `n = 2050` with a memory of 2000 (many
  segments back; past bfloat16's 256 and float16's 2048; a window capped anywhere below)
  (`more_masks`); a mask whose segments or memory do not follow
  the arguments, a number or a global such as the notebook's `SEG = 64` in their place
  (`fixed_arguments`).
- The relative distances with more queries than memory and with none (`other_distances`),
  and for a long memory, `m = 2100`, past what int8, uint8, bfloat16 and float16 hold
  exactly (`far_distances`).
- Scores or a shift with `inf` or `-inf` where a query may attend (`finite_where_seen`),
  e.g. a causal mask without the memory's offset.

Dimension letters: `n` a text's length, `T` queries, `M` memory, `S = M + T` keys.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import (call, describe_shape, expect_like, expect_tensor, fail,
                                     first_position)
from labnn.exercises.grading.sizes import expect_kept_ones
from labnn.xl.memory import segment_mask

# (n, seg_len, mem_len, why): the masks `more_masks` asks for
EDGES = ((1, 4, 2, "n = 1"), (5, 8, 3, "a text shorter than one segment"),
         (4, 1, 3, "seg_len = 1"), (10, 3, 1, "n = 10 again, other sizes"),
         (10, 4, 0, "n and seg_len as in the first call"),
         (10, 2, 3, "n and mem_len as in the first call"),
         (130, 10, 2, "n = 130, past int8's 127"),
         (2050, 5, 2000, "a memory of many segments, n past float16's 2048"))
SMALL_TYPES = ("int8 holds -128..127, uint8 0..255, bfloat16 whole numbers up to 256, float16 "
               "up to 2048, int16 up to 32767")


def _grid(n: int, s: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(n)[:, None], torch.arange(n if s is None else s)[None, :]


def more_masks(fn: Callable) -> None:
    """`fn(n, seg_len, mem_len)` at the `EDGES`, once it passed at the check's sizes."""
    for n, seg_len, mem_len, why in EDGES:
        what = f"segment_mask({n}, {seg_len}, {mem_len}) ({why})"
        got = expect_tensor(call(fn, what, n, seg_len, mem_len), what)
        want = segment_mask(n, seg_len, mem_len)
        if got.shape != want.shape:
            expect_kept_ones(what, got, want, "i j")
        expect_like(got, want, what)
        if torch.equal(got, want):
            continue
        i, j = _grid(n)
        where = first_position(got != want, "i j")
        if n == 10 and torch.equal(got, segment_mask(10, 4, 3)):
            fail(f"{what} returned the mask of segment_mask(10, 4, 3), the check's first call: "
                 "a mask kept between calls (a cache keyed by some of the arguments?); it "
                 "depends on all three: compute it afresh at every call.")
        if seg_len > 1:  # with segments of 1 a window of w keys is a memory of w - 1
            window(what, got, want, i - j)
        first = int(torch.maximum(i, j).expand(n, n)[got != want].min())
        if first >= 128:
            fail(f"{what} is right up to position {first - 1} and wrong after it, first at "
                 f"{where}: positions kept in a small dtype wrap or round ({SMALL_TYPES}): "
                 "use torch.arange(n), int64.")
        if (got & (j > i)).any():
            one = ", also when the whole text is one segment" if n <= seg_len else ""
            fail(f"{what} lets a query see a future key, at "
                 f"{first_position(got & (j > i), 'i j')}: require j <= i{one}.")
        fail(f"{what} differs at {where}: query i sees keys start(i) - mem_len to i, "
             "start(i) = (i // seg_len) * seg_len.")


def window(what: str, got: torch.Tensor, want: torch.Tensor, back: torch.Tensor) -> None:
    """Fail when `got` is the mask `want` cut to a window of w keys (`back` = i - j < w)."""
    missing = want & ~got
    if not missing.any() or (got & ~want).any():
        return
    w = int(back[missing].min())
    if torch.equal(got, want & (back < w)):
        fail(f"{what} is capped to a sliding window of {w} keys (i - j < {w}): the memory "
             "has no such limit: query i sees every key from start(i) - mem_len to i, "
             "however far back that is.")


def quiet(fn: Callable, *args) -> torch.Tensor | None:
    """`fn(*args)` when it returns a boolean tensor, else None (raised or not a mask)."""
    try:
        got = fn(*args)
    except Exception:
        return None
    ok = isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.dim() == 2
    return got if ok else None


def _as_segments(got: torch.Tensor | None) -> tuple[int, int] | None:
    """`(s, m)` when `got` `[n, n]` is `segment_mask(n, s, m)` for some `1 < s < n`, a
    mask that cuts something (not the plain causal one, nor a sliding window, `s = 1`:
    named elsewhere), else None."""
    if got is None or got.size(0) != got.size(1):
        return None
    n = got.size(0)
    i, j = _grid(n)
    if torch.equal(got, j <= i):
        return None
    for s in range(2, n):
        last = ((n - 1) // s) * s  # the last segment's first query
        row = got[last].nonzero()
        if len(row) and torch.equal(got, segment_mask(n, s, last - int(row[0]))):
            return s, last - int(row[0])
    return None


def fixed_arguments(fn: Callable) -> None:
    """Fail when `fn`'s masks keep their segments or their memory whatever the arguments
    say: `(150, 5, 3)`, `(150, 7, 3)` and `(150, 5, 1)` compared."""
    n = 150
    first, other_seg, other_mem = (_as_segments(quiet(fn, n, *sizes))
                                   for sizes in ((5, 3), (7, 3), (5, 1)))
    if first is None or other_seg is None or other_mem is None:
        return
    (s, m), said = first, f"segment_mask({n}, 5, 3) is segment_mask({n}, {first[0]}, {first[1]})"
    seg = s not in (5, 7) and other_seg[0] == other_mem[0] == s
    mem = m not in (0, 3, 1) and other_seg[1] == other_mem[1] == m
    elsewhere = "a number, or a global such as the notebook's SEG = 64?"
    if seg and mem:
        fail(f"{said}, and stays so for seg_len = 7 or mem_len = 1: your function reads "
             f"neither argument ({elsewhere}): use seg_len and mem_len.")
    if seg:
        fail(f"{said}: segments of {s}, for seg_len = 7 too: seg_len comes from elsewhere "
             f"({elsewhere}), not the argument: start(i) = (i // seg_len) * seg_len.")
    if mem:
        fail(f"{said}: a memory of {m}, for mem_len = 1 too: mem_len comes from elsewhere "
             "(a number, or a global?), not the argument: j >= start(i) - mem_len.")


def other_distances(fn: Callable) -> None:
    """`fn(t, m)` with more queries than memory (t > m), and with no memory (m = 0)."""
    for t, m, why in ((6, 2, "more queries than memory, t > m"), (3, 0, "no memory, m = 0")):
        what = f"relative_distances({t}, {m}) ({why})"
        got = expect_tensor(call(fn, what, t, m), what)
        i, j = _grid(t, m + t)
        want = m + i - j
        if got.shape != want.shape:
            fail(f"{what} has shape {describe_shape(got.shape)}, expected [T, M + T] = "
                 f"{describe_shape(want.shape)}: t rows and m + t columns, whatever t and m.")
        expect_like(got, want, what)
        if not torch.equal(got, want):
            a, b = (int(x) for x in (got != want).nonzero()[0])
            fail(f"{what} differs at [i={a}, j={b}] (yours {int(got[a, b])}, expected "
                 f"{int(want[a, b])}): entry (i, j) is m + i - j for any t and m.")


def linear_distances(values: torch.Tensor, what: str) -> None:
    """Fail when the distances `values [T, M + T]` are `c + a i + b j` everywhere with the
    sign of i or of j wrong (`a = -1`, `b = +1`: `m - i - j`, rows or columns reversed), or
    right up to the query only (a sentinel, `-1`, or what a shift leaves, after it)."""
    (t, s), v = values.shape, values.long()
    i, j = _grid(t, s)
    want, past = s - t + i - j, j <= s - t + i
    if not torch.equal(v, want) and torch.equal(v[past], want[past]):
        a, b = (int(x) for x in (v != want).nonzero()[0])
        fail(f"{what} is right at every key up to the query (j <= m + i), not at the keys "
             f"after it (j > m + i), as at [i={a}, j={b}] (yours {int(v[a, b])}, expected "
             f"{int(want[a, b])}): give them their negative distances too, m + i - j at "
             "every key.")
    if t < 2 or s < 2:
        return
    c, a, b = int(v[0, 0]), int(v[1, 0] - v[0, 0]), int(v[0, 1] - v[0, 0])
    if (a, b) == (1, -1) or abs(a) != 1 or abs(b) != 1 or not torch.equal(v, c + a * i + b * j):
        return
    wrong = " and ".join(f"the sign of {x} is flipped (the {axis} reversed?)" for x, axis, bad
                         in (("i", "rows", a < 0), ("j", "columns", b > 0)) if bad)
    fail(f"{what} is {c} {'+-'[a < 0]} i {'+-'[b < 0]} j everywhere: {wrong}. A later query "
         "(i + 1) is one further from every key, a later key (j + 1) one nearer: the distance "
         f"is m + i - j, here {s - t} + i - j.")


def far_distances(fn: Callable) -> None:
    """`fn(3, 2100)`: distances up to 2102, once it passed at the check's sizes (int16
    positions pass: trial 45a lists them as right)."""
    t, m = 3, 2100
    what = f"relative_distances({t}, {m}) (a long memory)"
    got = expect_tensor(call(fn, what, t, m), what)
    i, j = _grid(t, m + t)
    want = m + i - j
    expect_like(got, want, what)
    if not torch.equal(got, want):
        a, b = (int(x) for x in (got != want).nonzero()[0])
        fail(f"{what} differs at [i={a}, j={b}] (yours {int(got[a, b])}, expected "
             f"{int(want[a, b])}): right for a short memory, wrong for a long one: a small "
             f"dtype on the way? {SMALL_TYPES}; keep torch.arange's int64.")


def finite_where_seen(got: torch.Tensor, what: str, visible: torch.Tensor) -> torch.Tensor:
    """Fail when `got` `[..., T, S]` has inf or -inf where a query may attend (`visible`,
    `[T, S]`; NaN is named by `expect_close`), or 0 at every such key right of a diagonal
    below the M-th (`.tril()` with no offset, or too small a one); else `got`, detached,
    with 0 elsewhere (where anything may stand), to compare."""
    got = got.detach()
    if got.shape[-2:] != visible.shape or not got.is_floating_point():
        return got
    bad = torch.isinf(got) & visible
    if bad.any():
        index = tuple(int(x) for x in bad.nonzero()[0])
        t, s = visible.shape
        where = first_position(bad, " ".join("bhij"[-got.dim():]) if got.dim() <= 4 else None)
        fail(f"{what} has {got[index].item()} at {where}, where query i may attend (j <= M + "
             f"i, M = {s - t} memory keys): a causal mask without the memory's offset? Return "
             "the scores unmasked (the mask comes later: causal_mask(T, S), i.e. "
             "tril(diagonal=M)).")
    t, s = visible.shape
    for c in range(s - t):  # zeroed right of diagonal c < M: i + c < j <= M + i
        ahead = visible & (torch.arange(s)[None, :] > torch.arange(t)[:, None] + c)
        if bool((got[..., ahead] == 0).all()):
            fail(f"{what} is 0 at every key j with i{f' + {c}' * bool(c)} < j <= M + i, which "
                 f"query i may attend (M = {s - t} memory keys): zeroed right of diagonal {c} "
                 f"({f'.tril({c})' if c else '.tril() with no offset'}?). Return the scores "
                 "unmasked (the mask comes later: causal_mask(T, S), i.e. tril(diagonal=M)).")
    return got.masked_fill(~visible & ~torch.isnan(got), 0.0)
