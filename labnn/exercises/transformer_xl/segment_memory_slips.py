"""Slips in notebook 02's memory exercises (`labnn.exercises.transformer_xl.segment_memory`): reruns
that tell apart the ways an `update_memory` keeps too many states, and wrong segment
masks beyond the common ones.

Dimension letters: `B` batch, `T` tokens of the segment, `M` memory, `D` width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_close, expect_tensor,
                                     expect_unchanged, fail, snapshot)
from labnn.exercises.grading.slips import gives
from labnn.xl.memory import segment_mask, update_memory

CUT = "x = torch.cat([mem, h], dim=1); x[:, max(0, x.size(1) - mem_len):]"


def kept_too_many(fn: Callable, mem: torch.Tensor | None, h: torch.Tensor, mem_len: int,
                  what: str) -> None:
    """`fn(mem, h, mem_len)` kept all the states where only the last `mem_len` belong:
    rerun it on inputs that tell the usual causes apart, and name the one that fits."""
    mem = mem if mem is not None else h[:, :1].clone()  # reruns need an old memory
    b, n = mem.size(0), mem.size(1) + h.size(1)
    k = max(1, min(mem_len, n - 2))  # keeps some but not all states

    def wide(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.repeat(-(-batch // b), 1, 1)[:batch] for t in (mem, h))

    wm, wh = wide(k + 2)  # a batch k + 2 > k: batch and time axes differ
    if gives(fn, wm, wh, k, torch.cat([wm, wh], 1)[-k:]):
        fail(f"{what}: the slice ran over dim 0, the batch; cut along time (dim 1), not "
             f"the batch: {CUT}.")
    if gives(fn, wm, wh, k, torch.cat([wm, wh], 1)[:, 2:]):
        fail(f"{what}: x.size(0) is the batch, not the number of states; cut along time "
             f"(dim 1), not the batch: {CUT}.")
    long_h = torch.cat([h] * (k + 2), 1)  # h longer than mem_len
    if gives(fn, mem, long_h, k, torch.cat([mem, long_h], 1)[:, long_h.size(1) - k:]):
        fail(f"{what}: h.size(1) counts h's states only; slice by the length of [mem, h], "
             f"x.size(1): {CUT}.")
    if mem.size(1) > 1 and gives(fn, mem, h, 1, torch.cat([mem[:, -1:], h], 1)):
        fail(f"{what} cut the old memory before the concatenation, and kept all of h: "
             f"concatenate first, then keep the last mem_len of [mem, h]: {CUT}.")


EMPTY_DTYPE = ("With mem_len = 0 the empty memory keeps h's dtype too: torch.zeros(...) is "
               "float32 by default; make it from h, h.new_zeros(B, 0, D) or h[:, :0], which "
               "keep h's dtype and device.")


def fixed_length(fn: Callable, mem: torch.Tensor | None, h: torch.Tensor, got: torch.Tensor,
                 states: torch.Tensor, mem_len: int, what: str) -> None:
    """`got` = `fn(mem, h, mem_len)`: fail when it is the last `n` of `states` (`[mem, h]`)
    for another `n` than the memory's, and `n` is what splitting `states` in pieces of
    mem_len leaves over, or a rerun with another mem_len keeps `n` again (a fixed number
    where mem_len belongs)."""
    n, total, d = (got.size(1) if got.dim() == 3 else 0), states.size(1), states.size(-1)
    if n == total and 0 < got.size(-1) < d and close(got, states[..., d - got.size(-1):]):
        fail(f"{what} cut the last axis, the features D (x[..., start:]): the states run "
             f"along dim 1, time: {CUT}.")
    if 0 < n < total and n == total - max(0, d - mem_len) and close(
            got, states[:, total - n:]) and _kept_by_width(fn, mem, h, mem_len, total, d + 2):
        fail(f"{what} kept {n} states, not mem_len = {mem_len}: its slice starts at "
             f"x.size(-1) - mem_len, but x.size(-1) is D = {d}, the width of a state; the "
             f"states are counted by x.size(1): {CUT}.")
    if 0 < n < total and n == mem_len + 1 and close(got, states[:, total - n:]):
        fail(f"{what} kept {n} = mem_len + 1 states, one too many: the slice x[:, x.size(1) - "
             "mem_len - 1:] (or one more than mem_len somewhere) starts a state early; keep "
             f"the last mem_len: {CUT}.")
    if mem is not None and mem_len < n == h.size(1) and close(got, h):
        fail(f"{what} kept all T = {n} states of h, though mem_len = {mem_len} < T (only the "
             "old memory was cut): the memory holds at most mem_len states, h's last ones "
             f"here: {CUT}.")
    if not 0 < n <= total or n in (min(mem_len, total), h.size(1)) or not close(
            got, states[:, total - n:]):
        return
    if mem_len and n == total % mem_len:  # the remainder: split's (or chunk's) last piece
        fail(f"{what} kept {n} = {total} % {mem_len} states: x.split(mem_len, dim=1) cuts "
             "pieces from the front, so its last piece holds only what is left over; keep "
             "the last mem_len instead: x[:, max(0, x.size(1) - mem_len):].")
    other = 2 if mem_len != 2 else 3
    try:
        again = fn(None if mem is None else mem.clone(), h.detach().clone(), other)
    except Exception:
        return
    if isinstance(again, torch.Tensor) and again.dim() == 3 and again.size(1) == n:
        fail(f"{what} kept {n} states, mem_len = {mem_len} (and {n} again for mem_len = "
             f"{other}): a fixed number; read mem_len from the argument: "
             "x[:, max(0, x.size(1) - mem_len):].")


def _kept_by_width(fn: Callable, mem: torch.Tensor | None, h: torch.Tensor, mem_len: int,
                   total: int, d: int) -> bool:
    """Whether `fn` keeps `total - (d - mem_len)` states when rerun on states of width `d`
    (zeros padded on the features): its slice starts at the width, not the length."""
    wider = [None if x is None else torch.nn.functional.pad(x.detach(), (0, d - x.size(-1)))
             for x in (mem, h)]
    try:
        again = fn(*wider, mem_len)
    except Exception:
        return False
    return (isinstance(again, torch.Tensor) and again.dim() == 3
            and again.size(1) == total - max(0, d - mem_len))


def cat_arguments(err: Exception, what: str) -> None:
    """Name torch.cat given its tensors as separate arguments, torch.cat(mem, h, dim=1)."""
    if isinstance(err, TypeError) and "must be tuple of Tensors, not Tensor" in str(err):
        fail(f"{what}: torch.cat takes one list (or tuple) of tensors, torch.cat([mem, h], "
             "dim=1), not torch.cat(mem, h, ...), which reads h as the dim.")


def first_segment(what: str, mem_len: int, n: int) -> None:
    """`fn(None, h, mem_len)` returned all `n` states of h, `mem_len < n`."""
    fail(f"{what} kept all {n} states of h: the first segment (mem=None) must be cut to "
         f"the last mem_len = {mem_len} states too: x = h, then "
         "x[:, max(0, x.size(1) - mem_len):].detach().")


def segment_slips(n: int, seg_len: int, mem_len: int) -> list[tuple[torch.Tensor, str]]:
    """Wrong segment masks that `_segment_mistakes` lacks, each with its diagnosis."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    causal = j <= i
    rounded = (i / seg_len).round().long() * seg_len
    one_based = (j <= i) & (j + 1 >= ((i + 1) // seg_len) * seg_len - mem_len)
    same = causal & (j // seg_len == i // seg_len)
    previous = causal & (j // seg_len == i // seg_len - 1)
    whole = ("takes the whole previous segment instead of mem_len positions: the memory "
             "reaches mem_len positions before the segment start, j >= start(i) - mem_len, "
             "whatever seg_len is.")
    full = n - n % seg_len  # the last, shorter segment's rows left empty (the mask
    # itself, never matched, when n is a multiple: every case keeps the same list)
    partial = [(
        segment_mask(n, seg_len, mem_len) & (i < full),
        f"leaves the rows of the last segment (queries {full} to {n - 1}) empty: n = {n} is "
        f"not a multiple of seg_len = {seg_len}, so the last segment is shorter and must be "
        "masked too (e.g. loop over range(0, n, seg_len), not n // seg_len segments).")]
    block = torch.zeros(n, n, dtype=torch.bool)  # per-segment blocks, tril() with no offset
    for s in range(0, n, seg_len):
        e, a = min(s + seg_len, n), max(0, s - mem_len)
        block[s:e, a:e] = torch.ones(e - s, e - a, dtype=torch.bool).tril()
    return [
        (causal & (j >= start + mem_len),
         "adds mem_len to the segment start (start(i) + mem_len): the memory lies before "
         "the segment, so the sign is minus: j >= start(i) - mem_len."),
        (block, "cuts memory keys: your per-segment block is tril() of [seg_len, mem_len + "
                "seg_len] without an offset: a query at row r must see all the block's memory "
                "keys and keys up to itself: tril(diagonal=number of memory keys), i.e. "
                "tril(diagonal=mem_len) (fewer in a segment starting before mem_len)."),
        (causal & ((j // seg_len) * seg_len >= start - mem_len),
         "rounds the memory down to whole segments, (mem_len // seg_len) * seg_len "
         "positions (the same mask as a bound on the key's segment start, (j // seg_len) "
         "* seg_len): the memory holds mem_len positions; bound the key itself, j >= "
         "start(i) - mem_len, with start(i) = (i // seg_len) * seg_len from the query."),
        (causal & (j >= rounded - mem_len),
         "rounds i / seg_len to the nearest integer: the segment start floors it, "
         "start(i) = (i // seg_len) * seg_len (// rounds down)."),
        (causal & (j >= -(-i // seg_len) * seg_len - mem_len),
         "rounds i / seg_len UP (math.ceil, or -(-i // seg_len)): every query but a "
         "segment's first gets the NEXT segment's start; the start floors it, start(i) = "
         "(i // seg_len) * seg_len (// rounds down)."),
        (causal & (j >= i % seg_len - mem_len),
         "takes i % seg_len, the query's offset within its segment, as the start: the "
         "segment starts at start(i) = (i // seg_len) * seg_len = i - i % seg_len."),
        (causal & (i < (j // seg_len) * seg_len + seg_len + mem_len),
         "bounds the window by the KEY's segment (i < end(j) + mem_len): the window is set "
         "by the QUERY: j >= start(i) - mem_len, start(i) = (i // seg_len) * seg_len."),
        (one_based, ONE_BASED),
        (causal & (j >= ((i + 1) // seg_len) * seg_len - mem_len),
         "takes the start of i + 1 ((i + 1) // seg_len * seg_len): a segment's last query "
         "gets the NEXT segment's start; start(i) = (i // seg_len) * seg_len."),
        (causal & (j >= start - seg_len - mem_len),
         "reaches a whole segment further back (start(i) - seg_len - mem_len): the memory "
         "holds mem_len positions just before the segment: j >= start(i) - mem_len."),
        (causal & (j >= start + seg_len - mem_len),
         "starts the memory window mem_len before the segment's END (end(i) = start(i) + "
         "seg_len): count back from the segment's START, j >= start(i) - mem_len, "
         "start(i) = (i // seg_len) * seg_len."),
        (causal & (j >= (i // seg_len) * mem_len - mem_len),
         "multiplies by the wrong constant: your segment start is (i // seg_len) * "
         "mem_len; a segment starts at a multiple of seg_len, start(i) = (i // seg_len) "
         "* seg_len, and mem_len only says how far the memory reaches back before it."),
        (same | previous if mem_len else same, whole),
        (same | previous, whole),
    ] + partial + ([(segment_mask(n, mem_len, seg_len), SWAPPED)] if mem_len else [])


ONE_BASED = ("counts positions from 1 (arange(1, n + 1)); they start at 0: i, j = "
             "torch.arange(n), so the first segment is 0 .. seg_len - 1.")
SWAPPED = ("swaps the roles of seg_len and mem_len: segments are seg_len long "
           "(start(i) = (i // seg_len) * seg_len); mem_len is how far back the memory reaches "
           "before start(i) (j >= start(i) - mem_len), and may be 0.")


DETACH_VIEW = ("x[...].detach_() cannot detach a view in place: use .detach() (it returns a "
               "new tensor), e.g. torch.cat([mem, h], 1)[:, -mem_len:].detach()")


def steady_state(fn: Callable, what: str, got: torch.Tensor, mem: torch.Tensor,
                 h: torch.Tensor, want: torch.Tensor) -> None:
    """Name `torch.cat([mem[:, T:], h], 1)`: T old states dropped, h appended, which keeps
    the memory's size M, right only once it holds mem_len states; where that is also the
    last mem_len - 1 states, a rerun with mem_len + 1 tells a slice one place late; and
    `torch.cat([mem[:, :k], h], 1)`: the old memory's oldest states kept, its newest lost;
    and states of [mem, h] in a row that end before the newest (`x[:, start:-1]` too), or
    wrap round to its oldest (a roll)."""
    t, states, kept = h.size(1), torch.cat([mem, h], 1), want.size(1)
    n = states.size(1)
    if 1 < kept < n and got.shape == states[:, 1 - kept:].shape and close(
            got, states[:, n - kept:-1]):
        fail(f"{what} dropped the newest state: the slice end -1 stops one state short; a "
             f"slice with no end runs to the end: {CUT}.")
    wraps = [a for a in range(1, kept) if got.shape == want.shape and a != mem.size(1)
             and close(got, states.roll(-a, 1)[:, n - kept:])]  # M: [h, mem], named later
    if wraps:
        fail(f"{what} ends with the {wraps[0]} oldest state(s) of [mem, h], wrapped round: .roll"
             f"(-{wraps[0]}, 1) moves them to the end, not out; slice the last mem_len: {CUT}.")
    early = [a for a in range(1, n - kept) if kept
             and got.shape == want.shape and close(got, states[:, a:a + kept])]
    if early:
        gap = n - kept - early[0]
        fail(f"{what} kept states {early[0]}..{early[0] + kept - 1} of the {n} in "
             f"[mem, h]: the window ends {gap} state{'s' * (gap > 1)} before the newest "
             f"(dropped); keep the last mem_len, up to the end: {CUT}.")
    k = want.size(1) - t  # how many old states the memory keeps
    if 0 < k < mem.size(1) and close(got, torch.cat([mem[:, :k], h], 1)):
        fail(f"{what} kept the OLDEST states of the old memory, mem[:, :k] (its front), "
             "and dropped its newest: the memory is a queue, the oldest leave first; "
             f"keep the last mem_len of torch.cat([mem, h], dim=1): {CUT}.")
    slip = torch.cat([mem[:, t:], h], 1)
    if got.shape == slip.shape and got.shape != want.shape and torch.allclose(got, slip):
        b, m, d = want.shape
        one_short(fn, what, got, mem, h, m)
        fail(f"{what} has shape {list(got.shape)} = [B, M', D], expected [B={b}, "
             f"mem_len={m}, D={d}]: you drop T = {t} old states and append h, which keeps "
             "the size only once the memory is full; concatenate first, then keep the "
             "last mem_len: torch.cat([mem, h], 1)[:, -mem_len:]")


def one_short(fn: Callable, what: str, got: torch.Tensor, mem: torch.Tensor,
              h: torch.Tensor, mem_len: int) -> None:
    """Fail when `got` holds the last mem_len - 1 states of [mem, h], and `fn` keeps one
    state too few for mem_len + 1 as well."""
    states = torch.cat([mem, h], 1)
    n, k = states.size(1), mem_len - 1
    if not 0 < k < n or got.shape != states[:, n - k:].shape:
        return
    if not torch.allclose(got, states[:, n - k:]) or not gives(
            fn, mem.clone(), h.clone(), mem_len + 1, states[:, n - mem_len:]):
        return
    fail(f"{what} kept {k} states, and {mem_len} for mem_len = {mem_len + 1}: one too few, "
         "the slice starts one place late: x[:, max(0, x.size(1) - mem_len):], with "
         "x = torch.cat([mem, h], 1).")


def consistent(message: str, cases: list, wrong: list) -> bool:
    """Whether the segment-mask slip with `message` gives the learner's mask in every case
    the learner got wrong (`cases`: (what, got, *sizes); `wrong`: (what, got, slips)); a
    message some case lacks (it names sizes) is not tested; counting from 1 is claimed
    only where it matches every case (the first loop's test)."""
    if not all(message in [said for _, said in slips] for *_, slips in wrong):
        return True
    return message != ONE_BASED and all(
        torch.equal(got, mask) for (_, got, *sizes), (*_, slips) in zip(cases, wrong)
        if not torch.equal(got, segment_mask(*sizes))
        for mask, said in slips if said == message)


def steady_stream(fn: Callable) -> None:
    """The streaming case the other inputs lack: a full memory (M = mem_len = 6) and a
    shorter segment (T = 2), where a ring-buffer update may write into the caller's mem;
    then the next layer's, of the same shapes and other values, after which the first
    layer's memory must still hold its states (not one buffer shared by every call, nor
    a result kept by the shapes)."""
    what = "update_memory(mem, h, 6) with a full mem [B=2, M=6, D=4] and h [B=2, T=2, D=4]"
    kept = []
    for layer, seed in ((0, 9), (1, 19)):
        mem = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(seed))
        h = torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(seed + 1))
        # a mem still in a graph too (what a caller's `mem.detach_()` would cut from it)
        mem_in, h_in = mem.clone().requires_grad_() * 1, h.clone().requires_grad_()
        before = snapshot(mem=mem_in, h=h_in)
        said = f"{what}, layer {layer}'s" + " (after layer 0's)" * layer
        got = expect_tensor(call(fn, said, mem_in, h_in, 6), said)
        expect_unchanged(before, said, mem=mem_in, h=h_in)
        want = update_memory(mem, h, 6)
        if layer and close(got, kept[0][1]):
            fail(f"{said} returned layer 0's memory again: a result kept between calls "
                 "(a cache by the shapes?); every call computes its own.")
        expect_close(got, want, said, dims="b m d")
        kept.append((got, want))
    if not close(kept[0][0], kept[0][1]):
        fail(f"{what}: layer 0's memory changed when layer 1's was made: both are one "
             "buffer kept between calls, overwritten by each; return a new tensor each "
             "call (a slice of torch.cat([mem, h], dim=1), detached).")


def grad_memory(fn: Callable, results: list[torch.Tensor]) -> None:
    """`results`: `fn(mem, h, 2)` with a mem that requires grad (h did in every earlier
    round, and came out detached): fail when one still requires grad."""
    if any(r.requires_grad for r in results):
        fail("update_memory(mem, h, 2) with a mem that requires grad returns a result that "
             "still requires grad: only h is detached; the memory must be detached whole: "
             "detach after the cat, torch.cat([mem, h], 1)[...].detach() (or both parts).")


def kept_result(what: str, got: torch.Tensor, want: torch.Tensor, returned: list) -> None:
    """Fail when `got`, of another dtype than `want`, is the very tensor an earlier call
    returned (`returned`, every earlier result, kept alive so that no memory is reused): a
    buffer kept between calls by its shape, not a conversion. Then add `got` to them."""
    if got.dtype != want.dtype and got.numel() and any(  # empty ones share address 0
            got.data_ptr() == r.data_ptr() for r in returned):
        fail(f"{what} returns the tensor an earlier call of the same shape returned (still "
             f"{str(got.dtype)[6:]}): a buffer kept between calls; make a new one at each "
             "call (slicing torch.cat([mem, h], 1), then .detach(), does).")
    returned.append(got)
