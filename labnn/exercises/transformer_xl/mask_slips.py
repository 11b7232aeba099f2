"""Slips in notebook 02's segment mask (`labnn.exercises.transformer_xl.segment_memory`,
Exercise 2) that need more than one mask to name: segments cut every mem_len positions
(told apart from a crash at mem_len = 0), positions in uint8, which wrap below 0 and
give, at the check's sizes, the same masks as a slice that starts at a negative index, and
a memory rounded up to whole segments, which at the check's sizes reaches one position too
far, as an off-by-one does, and masks that are views of one kept tensor edited in place;
and a loop's column slice at s - mem_len, a start or an end, negative (so counted from the
row's end) for a segment starting before mem_len (`negative_slices`).

Masks are boolean, True = may attend; `n` a text's length.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import fail, shares_memory
from labnn.exercises.transformer_xl.more_inputs import quiet
from labnn.exercises.transformer_xl.segment_memory_slips import SWAPPED
from labnn.xl.memory import segment_mask

BY_MEM_LEN = ("cuts the segments every mem_len positions (i // mem_len): use segments of "
              "seg_len, start(i) = (i // seg_len) * seg_len; mem_len only says how far the "
              "memory reaches back before start(i), and may be 0 (no memory).")


def same_axis(got: torch.Tensor, n: int, what: str) -> None:
    """Fail when the mask `got` has one entry per position, `[n, 1]`, `[1, n]` or `[n]`:
    i and j built along the same axis, compared without broadcasting to `[N, N]`."""
    both = {(n, 1): "[N, 1]", (1, n): "[1, N]", (n,): "1-D"}.get(tuple(got.shape))
    if both and n > 1:
        fail(f"{what} has shape {list(got.shape)}: one entry per position, not per (query, "
             f"key) pair: i and j lie along the same axis (both {both}?): make i a column, "
             "torch.arange(n)[:, None], and j a row, torch.arange(n)[None, :]; compared, "
             "they broadcast to [N, N].")


def by_mem_len(n: int, seg_len: int, mem_len: int) -> torch.Tensor:
    """The segment mask with segments of `mem_len` (or `seg_len` when `mem_len` is 0)."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    block = mem_len or seg_len
    return (j <= i) & (j >= (i // block) * block - mem_len)


def cut_by_mem_len(cases: list, mem_len: int) -> Callable[[Exception], None]:
    """A `diagnose` for the call with `mem_len` = 0: the learner's function raised, and
    its masks so far (`cases`) were those of segments of mem_len: it divides by mem_len."""
    def diagnose(err: Exception) -> None:
        swapped = lambda n, s, m: segment_mask(n, m, s)  # noqa: E731
        for wrong, message in ((by_mem_len, BY_MEM_LEN), (swapped, SWAPPED)):
            if mem_len == 0 and cases and all(
                    torch.equal(got, wrong(*sizes)) for _, got, *sizes in cases):
                fail(f"{cases[0][0]} {message}")
    return diagnose


def wrapped(n: int, seg_len: int, mem_len: int) -> torch.Tensor:
    """The segment mask of uint8 positions (`n` < 256): start(i) - mem_len wraps to 256 +
    start(i) - mem_len when negative."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= ((i // seg_len) * seg_len - mem_len) % 256)


def sliced(n: int, seg_len: int, mem_len: int, cut_from: int | None = None) -> torch.Tensor:
    """The mask a loop over segments gives when its column slice starts at s - mem_len,
    negative (so counted from the end) for a segment starting at s < mem_len; or
    (`cut_from`, the first segment it cuts) a tril whose segments' rows are cut before s -
    mem_len, a slice end as negative there."""
    mask = torch.ones(n, n, dtype=torch.bool) if cut_from is not None else torch.zeros(
        n, n, dtype=torch.bool)
    for s in range(cut_from or 0, n, seg_len):
        if cut_from is None:
            mask[s:s + seg_len, s - mem_len:s + seg_len] = True
        else:
            mask[s:s + seg_len, :s - mem_len] = False
    return mask.tril()


def negative_slices(n: int, seg_len: int, mem_len: int) -> list[tuple[torch.Tensor, str]]:
    """`sliced`'s masks (a negative slice start, or end), each with its diagnosis."""
    return [(sliced(n, seg_len, mem_len),
             "leaves out the keys of a segment starting at s < mem_len (the first): s - "
             "mem_len is negative, and a negative slice start counts from the end of the "
             "row, so m[..., s - mem_len:s + seg_len] wraps around; start the slice at "
             "max(0, s - mem_len).")] + [
        (sliced(n, seg_len, mem_len, cut_from),
         "cuts keys it must keep in a segment starting at s < mem_len: s - mem_len is "
         "negative there, and a negative slice end counts from the end of the row too, so "
         "m[s:s + seg_len, :s - mem_len] = False cuts the row's first keys; end the slice "
         "at max(0, s - mem_len).") for cut_from in (0, seg_len)]


def unsigned_positions(fn: Callable, cases: list) -> None:
    """Fail naming uint8 positions when every wrong mask of `cases` ((what, got, n,
    seg_len, mem_len)) is `wrapped`'s and a rerun, `fn(5, 8, 3)`, is too, where a slice
    from s - mem_len (`sliced`, the same masks at the check's sizes) keeps keys."""
    wrong = [(what, got, sizes) for what, got, *sizes in cases
             if not torch.equal(got, segment_mask(*sizes))]
    if not wrong or not all(torch.equal(got, wrapped(*sizes)) for _, got, sizes in wrong):
        return
    again = quiet(fn, 5, 8, 3)
    if again is None or not torch.equal(again, wrapped(5, 8, 3)) or torch.equal(
            again, sliced(5, 8, 3)):
        return
    fail(f"{wrong[0][0]}: positions in uint8? It holds 0..255, so start(i) - mem_len below 0 "
         "wraps around to 256 + start(i) - mem_len, and the queries of a segment starting "
         "before mem_len see no key at all: use torch.arange(n) (int64).")


WHOLE_SEGMENTS = ("keeps the whole segment of every key the memory reaches into (the memory "
                  "rounded up to whole segments, i // seg_len - j // seg_len <= ceil(mem_len / "
                  "seg_len)): the memory holds exactly mem_len positions, so bound the key "
                  "itself: j >= start(i) - mem_len, start(i) = (i // seg_len) * seg_len.")


def touched_segments(n: int, seg_len: int, mem_len: int) -> torch.Tensor:
    """The segment mask of a memory rounded up to whole segments: key j is kept when its
    segment ends after start(i) - mem_len."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & ((j // seg_len + 1) * seg_len > (i // seg_len) * seg_len - mem_len)


def whole_segments(fn: Callable, cases: list) -> None:
    """Fail naming a memory rounded up to whole segments when every wrong mask of `cases`
    ((what, got, n, seg_len, mem_len)) is `touched_segments`' and so is a rerun, `fn(12, 4,
    2)`, where it reaches mem_len + 2 back: at the check's sizes it reaches mem_len + 1
    back, as an off-by-one slice does."""
    wrong = [(what, got, sizes) for what, got, *sizes in cases
             if not torch.equal(got, segment_mask(*sizes))]
    if not wrong or not all(torch.equal(got, touched_segments(*sizes))
                            for _, got, sizes in wrong):
        return
    again = quiet(fn, 12, 4, 2)
    if again is not None and torch.equal(again, touched_segments(12, 4, 2)):
        fail(f"{wrong[0][0]} {WHOLE_SEGMENTS}")


def kept_mask(cases: list) -> None:
    """Fail when two of the masks of `cases` ((what, got, n, seg_len, mem_len)) share
    memory: views of one kept tensor (a mask made once and sliced), whose in-place edits
    by one call show in the masks of the others."""
    for k, (what, got, *_) in enumerate(cases):
        for later, other, *_ in cases[k + 1:]:
            if shares_memory(got, other):
                fail(f"{what} and {later} return views of one kept tensor (a mask made once "
                     "and sliced, then edited in place?): one call's edits show in the "
                     "others' masks. Build each mask afresh: (j <= i) & (j >= start(i) - "
                     "mem_len), from torch.arange(n).")
