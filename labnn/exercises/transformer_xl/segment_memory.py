"""Checkers for notebook 02's Exercises 1-2, on the memory of Transformer-XL: the memory
update and the mask under which one pass equals reading segment by segment
(`labnn.xl.memory`).

Dimension letters (the package legend): `B` batch, `T` tokens of the segment, `M`
memory, `D` width; `n` a text's length in `segment_mask`. Masks are boolean, True = may
attend.

Each checker works as those of `relative_scores`: fixed random inputs, the package's
version as reference, and the typical mistakes recomputed to say which one was made.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.xl.memory import segment_mask, update_memory
from labnn.exercises.grading import (call, close, describe_shape, exercise, expect_close,
                                     expect_dtype, expect_like, expect_new_each_call,
                                     expect_own_code, expect_shape, expect_tensor,
                                     expect_unchanged, explain, fail,
                                     first_position, snapshot)
from labnn.exercises.grading.module_state import expect_parameter_order
from labnn.exercises.grading.slips import asks_truth, beyond_float32, expect_float64_accurate
from labnn.exercises.self_attention.softmax_mask_slips import expect_bool_causal
from labnn.exercises.transformer_xl import other_sizes
from labnn.exercises.grading.devices import expect_any_device
from labnn.exercises.transformer_xl.mask_slips import (
    BY_MEM_LEN, by_mem_len, cut_by_mem_len, kept_mask, negative_slices, same_axis,
    unsigned_positions, whole_segments)
from labnn.exercises.transformer_xl.fresh_values import expect_fresh
from labnn.exercises.transformer_xl.many_queries import long_memory
from labnn.exercises.transformer_xl.more_inputs import fixed_arguments, more_masks
from labnn.exercises.transformer_xl.relative_distances import B, D_H, M, T, _randn
from labnn.exercises.transformer_xl.segment_memory_slips import (
    DETACH_VIEW, EMPTY_DTYPE, cat_arguments, consistent, first_segment, fixed_length, grad_memory,
    kept_result, kept_too_many, segment_slips, steady_state, steady_stream)


@exercise("memory update", refuse={update_memory: "labnn.xl.memory.update_memory"})
def check_update_memory(fn: Callable) -> None:
    """`fn(mem, h, mem_len)`: mem `[B, M, D]` or None, h `[B, T, D]` -> the last
    `mem_len` states, detached."""
    expect_own_code(fn, "update_memory(mem, h, mem_len)", update_memory=update_memory)
    expect_parameter_order(fn, "update_memory(mem, h, mem_len)")
    mem32, h32 = _randn(B, M, D_H, seed=7), _randn(B, T, D_H, seed=8)
    # the last three cases are a float64 model's: its memory keeps float64, empty or not,
    # with or without an earlier one
    cases = [(True, 6), (False, 6), (True, 2), (False, 2), (True, M + T + 3), (True, T + 1),
             (True, 0), (False, 0), (True, 6), (False, 0), (False, 6)]
    returned = []  # every result, kept alive: its memory is not reused by a later one
    for k, (use_mem, mem_len) in enumerate(cases):
        dtype = torch.float64 if k >= len(cases) - 3 else torch.float32
        # float64 values float32 cannot hold, so that a float32 step shows
        mem, h = (mem32, h32) if dtype == torch.float32 else beyond_float32(mem32, h32)
        mem_in = mem.clone() if use_mem else None
        h_in = h.clone().requires_grad_()  # h comes out of the current segment's graph
        what = f"update_memory({'mem' if use_mem else 'None'}, h, {mem_len})"
        if dtype != torch.float32:
            what += f" on {str(dtype)[6:]} mem and h"
        before = snapshot(mem=mem_in, h=h_in)
        shapes = f"h {describe_shape(h.shape)}"
        if use_mem:
            shapes = f"mem {describe_shape(mem.shape)}, {shapes}"
        advice = "" if use_mem else ("your function must handle mem=None (the first "
                                     "segment has no memory yet: the states are then h "
                                     "alone)")
        called = f"{what} with {shapes}"

        def batch_axis(err: Exception, mem_len=mem_len, use_mem=use_mem) -> None:
            """`torch.cat` on dim 0 fails only because M != T: retried with M = T."""
            if not use_mem:
                return
            try:
                out = fn(mem[:, :T].clone(), h.clone(), mem_len)
            except Exception:
                return
            if not isinstance(out, torch.Tensor) or out.dim() != 3:
                return
            shapes = (f"with mem {describe_shape(mem.shape)} = [B, M, D] and h "
                      f"{describe_shape(h.shape)} = [B, T, D]")
            if out.size(0) == 2 * B:
                fail(f"{what} concatenates mem and h along the batch axis: {shapes}, "
                     "torch.cat([mem, h]) (dim=0 by default) stacks the examples, and "
                     "fails here because M != T. The memory grows along time: "
                     "torch.cat([mem, h], dim=1).")
            if out.size(-1) == 2 * D_H or "except in dimension 2" in str(err):
                fail(f"{what} concatenates mem and h along the features (the last "
                     f"axis): {shapes}, that joins each state of mem to one of h, and "
                     "fails here because M != T. The memory grows along time: "
                     "torch.cat([mem, h], dim=1).")

        def diagnose(err: Exception, mem_len=mem_len, use_mem=use_mem) -> None:
            if use_mem and "Boolean value of Tensor" in str(err) and asks_truth(
                    lambda probe: fn(probe, h.clone(), mem_len), mem):
                fail(f"{what}: `if mem:` (or `not mem`) asks the truth of a tensor of "
                     f"{mem.numel()} values, which is ambiguous: test `mem is None` (the "
                     "first call has no memory), not the truth of a tensor.")
            if use_mem and "stack expects each tensor to be equal size" in str(err):
                fail(f"{what}: torch.stack adds a new axis (and needs equal shapes, here M = "
                     f"{M} != T = {T}): concatenate along time, torch.cat([mem, h], dim=1).")
            n = (M if use_mem else 0) + T
            if f"length ({mem_len}) exceeds dimension size ({n})" in str(err):
                fail(f"{what}: narrow's length is mem_len = {mem_len}, but there are only {n} "
                     "states: take min(mem_len, size) of them, x.narrow(1, size - n, n).")
            cat_arguments(err, what)
            if "Can't detach views in-place" in str(err):
                explain(what, err, DETACH_VIEW)
                raise err
            batch_axis(err)

        got = call(fn, called, mem_in, h_in, mem_len, advice=advice, diagnose=diagnose)
        if got is None and mem_len == 0:  # every earlier call returned a tensor
            fail(f"{what} should return a torch.Tensor, but returned NoneType: with "
                 "mem_len = 0 the memory keeps nothing but is still a tensor: return an "
                 "empty [B, 0, D] (e.g. x[:, x.size(1):], or x[:, :0]), which the next "
                 "segment concatenates as usual.")
        got = expect_tensor(got, what)
        expect_unchanged(before, what, mem=mem_in, h=h_in)
        states = torch.cat([mem, h], 1) if use_mem else h
        want = update_memory(mem if use_mem else None, h, mem_len)
        n = states.size(1)
        if (not use_mem and mem_len > n and tuple(got.shape) == (B, mem_len, D_H)
                and not got[:, :mem_len - n].any()):
            fail(f"{what} has shape {describe_shape(got.shape)} = [B, mem_len, D], "
                 f"expected [B, {n}, D]: the first segment has no memory: mem=None means "
                 "no old states, not mem_len zeros; keep the last mem_len states of h "
                 "alone (all of h when mem_len > T).")
        if use_mem and got.shape == mem.shape and close(got, mem) and not close(got, want):
            fail(f"{what} returned the old memory unchanged: the new states enter even "
                 "when it is full; keep the last mem_len states of [mem, h].")
        kept = want.size(1)
        if (use_mem and 0 < kept <= mem.size(1) and tuple(got.shape) == tuple(want.shape)
                and close(got, mem[:, mem.size(1) - kept:]) and not close(got, want)):
            fail(f"{what} returned the last {kept} states of the old memory, none of h: the "
                 "new states enter even when it is full (the oldest leave), and come last: "
                 "keep the last mem_len of torch.cat([mem, h], dim=1) (not [h, mem]).")
        if 0 < n < mem_len and close(got, states[:, n - mem_len:]):
            fail(f"{what}: with mem_len = {mem_len} > {n} states, x[:, x.size(1) - mem_len:] "
                 "starts at a negative index, which counts from the end: slice from "
                 "max(0, x.size(1) - mem_len).")
        if want.size(1) > 1 and close(got, want.flip(1)):
            fail(f"{what} puts the newest state first (.flip): keep the states in time "
                 "order, oldest first, as in [mem, h].")
        if mem_len == 0 and tuple(got.shape) == (B, n, D_H):
            fail("with mem_len = 0 you kept everything: x[:, -0:] is x[:, 0:]. Slice "
                 "from size - min(mem_len, size) instead.")
        if use_mem and mem_len > T and tuple(got.shape) == tuple(h.shape):
            by_len = f", nor by len(x), the batch size B = {B}" if B - mem_len == -T else ""
            said = "(h's) and dropped the old memory" if close(got, h) else "(h.size(1))"
            fail(f"{what} kept at most T = {T} states {said}: "
                 f"keep the last mem_len = {mem_len} of the concatenation "
                 "torch.cat([mem, h], dim=1) (slice by its size, x.size(1), not by "
                 f"T{by_len}).")
        if mem_len < n and tuple(got.shape) == (B, n, D_H):
            kept_too_many(fn, mem if use_mem else None, h, mem_len, what)
            if not use_mem:
                first_segment(what, mem_len, n)
            fail(f"{what} kept all {n} states: keep only the last mem_len = {mem_len}.")
        if 0 < want.size(1) < n and tuple(got.shape) == tuple(want.shape) and close(
                got, states[:, : want.size(1)]):
            fail(f"{what} kept the oldest states; keep the most recent ones (the end "
                 "of [mem, h]).")
        if mem_len == 0 and got.numel() == 0 and got.dim() != 3:
            fail(f"{what} has shape {describe_shape(got.shape)}, expected [B, 0, D] = "
                 f"{describe_shape(want.shape)}: an empty memory keeps B and D (the next "
                 "segment concatenates it with h along time): h[:, :0], not torch.empty(0).")
        if use_mem:
            steady_state(fn, what, got, mem, h, want)
        fixed_length(fn, mem if use_mem else None, h, got, states, mem_len, what)
        kept_result(what, got, want, returned)
        kept = "mem_len" if want.size(1) == mem_len else ("M+T" if use_mem else "T")
        expect_like(got, want, what, sizes={"B": B, kept: want.size(1), "D": D_H},
                    hint=EMPTY_DTYPE if mem_len == 0 else f"{str(dtype)[6:]} in, "
                    f"{str(dtype)[6:]} out: don't convert the dtype (no .float() or "
                    ".to(...)); slicing, torch.cat and .detach() keep it.")
        swapped = torch.cat([h, mem], 1)[:, n - want.size(1):]  # [h, mem]: wrong order
        if use_mem and want.size(1) > 0 and close(got, swapped):
            fail(f"{what} concatenates the states in the wrong order: [h, mem] puts "
                 "the new states before the older memory; time runs left to right, so "
                 "torch.cat([mem, h], dim=1).")
        expect_close(got, want, what, dims="b m d")
        if dtype == torch.float64:  # a copy: exact, a float32 step shows
            expect_float64_accurate(got, want, what)
        if got.requires_grad and got.grad_fn is None and got._base is not None:
            fail(f"{what} still requires grad though it has no grad_fn: under "
                 "torch.no_grad() a slice is still a view of h and keeps requires_grad; "
                 "call .detach() on it instead.")
        if got.requires_grad and got.grad_fn is None:
            fail(f"{what} requires grad with no grad_fn: detached, then made a leaf again "
                 "(.requires_grad_()); the memory is a constant to the next segment: "
                 "return the detached tensor as it is.")
        if got.requires_grad:
            fail(f"{what} is still attached to the graph: call .detach() so no "
                 "gradient reaches earlier segments.")
    grad_memory(fn, expect_fresh(fn, "update_memory(mem, h, 2)", tuple(
        t.clone().requires_grad_() for t in (mem32, h32)) + (2,), update_memory, close, "b m d"))
    steady_stream(fn)
    other_sizes.memory_size_one(fn)
    long_memory(fn)  # M + T = 300: an index in int8 wraps
    for mem, keep in ((mem32, 6), (None, 6), (mem32, 0)):  # the model's inputs: on a GPU
        said = "mem" if mem is not None else "None"
        expect_any_device(fn, f"update_memory({said}, h, {keep})", mem, h32, keep)


@exercise("segment mask", refuse={segment_mask: "labnn.xl.memory.segment_mask"})
def check_segment_mask(fn: Callable) -> None:
    """`fn(n, seg_len, mem_len)` -> bool `[N, N]`: query i sees j iff start(i) - mem_len
    <= j <= i."""
    expect_own_code(fn, "segment_mask(n, seg_len, mem_len)", segment_mask=segment_mask)
    expect_parameter_order(fn, "segment_mask(n, seg_len, mem_len)")
    cases = []
    for n, seg_len, mem_len in [(10, 4, 3), (9, 3, 5), (6, 2, 0)]:
        what = f"segment_mask({n}, {seg_len}, {mem_len})"
        got = expect_tensor(call(fn, what, n, seg_len, mem_len,
                                 diagnose=cut_by_mem_len(cases, mem_len)), what)
        if mem_len and tuple(got.shape) == (n, n + mem_len):
            fail(f"{what} has shape [N, N + mem_len] = {describe_shape(got.shape)}, expected "
                 f"[N, N] = [{n}, {n}]: the mask is over the N positions of the sequence as "
                 "queries and keys (the memory is part of those positions): no extra "
                 "memory columns.")
        same_axis(got, n, what)
        expect_shape(got, (n, n), what, sizes={"N": n})
        expect_bool_causal(got, segment_mask(n, seg_len, mem_len), what,
                           "combine comparisons: (j <= i) & (j >= start(i) - mem_len)")
        expect_dtype(got, torch.bool, what, "Masks are bool (True = may attend): "
                                            "combine comparisons with &.")
        expect_like(got, segment_mask(n, seg_len, mem_len), what)
        cases.append((what, got, n, seg_len, mem_len))
    wrong = [(what, got, _segment_mistakes(n, seg_len, mem_len))
             for what, got, n, seg_len, mem_len in cases]
    if all(torch.equal(got, segment_mask(*sizes)) for _, got, *sizes in cases):
        more_masks(fn)  # n = 1, a text within one segment, n past int8's 127
        for sizes in ((10, 4, 3), (6, 4, 8), (3, 4, 1)):  # and a memory or segment past n
            expect_new_each_call(fn, f"segment_mask{sizes}", *sizes,
                                 fix="Compute it afresh at every call, whatever the sizes.")
        return
    fixed_arguments(fn)  # a global (the notebook's SEG = 64) or a number for an argument
    unsigned_positions(fn, cases)  # at these sizes the masks of a slice from s - mem_len
    whole_segments(fn, cases)  # at these sizes the masks of an off-by-one
    # first a mistake that explains every case (two may coincide on one case, not on all)
    for k, (_, message) in enumerate(wrong[0][2]):
        if all(k < len(m) and torch.equal(got, m[k][0]) for _, got, m in wrong):
            fail(f"{wrong[0][0]} {message}")
    for (what, got, n, seg_len, mem_len), (_, _, mistakes) in zip(cases, wrong):
        want = segment_mask(n, seg_len, mem_len)
        if torch.equal(got, want):
            continue
        for mask, message in mistakes:
            if torch.equal(got, mask) and consistent(message, cases, wrong):
                fail(f"{what} {message}")
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        if (got & (j > i)).any():
            fail(f"{what} lets a query see a future key, at "
                 f"{first_position(got & (j > i), 'i j')}: require j <= i.")
        kept_mask(cases)  # a slice of one mask, edited by every call
        a, b = (int(x) for x in (got != want).nonzero()[0])
        first = (a // seg_len) * seg_len
        fail(f"{what} differs at [i={a}, j={b}] (yours {bool(got[a, b])}, expected "
             f"{bool(want[a, b])}): query i={a} is in the segment starting at {first}, "
             f"so it sees keys {max(first - mem_len, 0)} to {a}.")


def _segment_mistakes(
    n: int, seg_len: int, mem_len: int
) -> list[tuple[torch.Tensor, str]]:
    """The typical wrong segment masks for these sizes, each with its diagnosis."""
    want = segment_mask(n, seg_len, mem_len)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return [
        (j <= i, "is the plain causal mask: nothing cuts the keys before start(i) - "
                 "mem_len, with start(i) = (i // seg_len) * seg_len taken from the "
                 "query's index i (j's segment start"
                 + (", or i % seg_len, the offset," if mem_len >= seg_len - 1 else "")
                 + " cuts nothing here)."),
        ((j <= i) & (j >= start - mem_len * seg_len),
         "counts mem_len in segments (start - mem_len * seg_len): mem_len is a number "
         "of positions, so the memory reaches back to start(i) - mem_len."),
        ((j <= i) & (j >= i - mem_len),
         "is a sliding window: query i sees back to i - mem_len, as if its segment "
         "started at i itself. Every query of a segment sees back to the same "
         "start(i) - mem_len, with start(i) = (i // seg_len) * seg_len (`/` is float "
         "division: i / seg_len * seg_len is i again)."),
        ((j <= i) & (j >= i // seg_len - mem_len), "takes i // seg_len, the segment's "
                                                   "number, as its start: the first "
                                                   "position of the segment is "
                                                   "start(i) = (i // seg_len) * "
                                                   "seg_len."),
        (by_mem_len(n, seg_len, mem_len), BY_MEM_LEN),
        ((j <= i) | (j >= start - mem_len),
         "joins its two conditions with | (or): a key must meet both, j <= i and j >= "
         "start(i) - mem_len, so combine them with & (and, not or)."),
        (want.T, "is transposed: row i is the query and column j the key (i as a "
                 "column, j as a row)."),
        (~want, "is inverted: True must mean 'may attend'."),
        ((j <= i) & (j >= start), "ignores the memory: each query sees only its own "
                                  "segment, but it may also see the mem_len positions "
                                  "before the segment start."),
        ((j <= i) & (j > start - mem_len), "is off by one at the far end: the memory "
                                           "holds mem_len positions, start(i) - "
                                           "mem_len included (j >= start - mem_len)."),
        ((j <= i) & (j >= start - mem_len - 1), "is off by one at the far end: it "
                                                "reaches mem_len + 1 positions before "
                                                "the segment start."),
        ((j <= i) & (j >= start - seg_len), "uses seg_len where mem_len belongs: the "
                                            "memory reaches mem_len positions before "
                                            "the segment start (j >= start - mem_len)."),
        ((j < i) & (j >= start - mem_len), "forbids the diagonal: a query may attend "
                                           "to itself (j <= i)."),
    ] + negative_slices(n, seg_len, mem_len) + segment_slips(n, seg_len, mem_len) + [
        # last: on one case they may match another
        ((j <= i) & (i - j < w),
         f"is a sliding window of {w} keys (i - j < {w}): a fixed window, not segments. "
         "Every query of the segment starting at start(i) = (i // seg_len) * seg_len "
         "sees back to the same start(i) - mem_len.") for w in range(1, n - 1)]
