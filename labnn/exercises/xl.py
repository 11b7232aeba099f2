"""Checkers for notebook 02 (Transformer-XL).

Dimension letters: `B` batch, `H` heads, `T` queries (segment), `M` memory, `S = M + T` keys, `D` width,
`D_h` head width. Masks are boolean, True = may attend.

Each checker runs the learner's function on fixed random inputs (`T != M` so that offsets show), compares it
with `labnn.xl` and, when it differs, recomputes the typical mistakes (memory offset forgotten, shift the
wrong way, a bias term missing, the two biases swapped, `[-0:]` keeping everything, memory not detached, ...)
to say which one was made. It rejects a function that edits its inputs in place or calls the package's own
version of what it should compute. Only entries a query may see (`j <= M + i`) are compared where the
reference leaves the rest unspecified; positions are reported in the tensor's own dimensions (`b` batch,
`h` head, `i` query, `j` key, `m` memory slot, `d` feature).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..attention import causal_mask
from ..relative_attention import RelativeMultiHeadAttention, relative_shift
from ..xl import segment_mask, update_memory
from .checking import (
    call,
    close,
    describe_shape,
    exercise,
    expect_close,
    expect_dtype,
    expect_own_code,
    expect_shape,
    expect_tensor,
    expect_unchanged,
    fail,
    first_position,
    snapshot,
)

B, H, T, M, D_H = 2, 3, 4, 5, 8
S = M + T
SIZES = {"B": B, "H": H, "T": T, "S": S, "S + 1": S + 1, "D_h": D_H}  # all differ: axes show in shapes
VISIBLE = causal_mask(T, S)  # [T, S]: the (query, key) entries the reference defines, j <= M + i


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _visible_close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """`close` on the entries a query may see (`j <= M + i`) only."""
    return close(got[..., VISIBLE], want[..., VISIBLE])


@exercise("relative distances")
def check_relative_distances(fn: Callable) -> None:
    """`fn(t, m)` -> LongTensor `[T, M + T]` with entry `(i, j)` = `m + i - j` (query `i` is at position `m + i`)."""
    what = f"relative_distances({T}, {M})"
    got = expect_tensor(call(fn, what, T, M), what)
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    want = M + i - j
    if tuple(got.shape) == (S, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [S, T]: rows are the T queries and columns the "
             "S = m + t keys; make i a column (arange(t)[:, None]) and j a row (arange(m + t)[None, :]).")
    if tuple(got.shape) == (T, M):
        fail(f"{what} has shape {describe_shape(got.shape)} = [T, M]: the keys are the memory AND the "
             "segment, S = m + t of them (j in arange(m + t)).")
    if tuple(got.shape) == (T, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [T, T]: the keys include the m memory "
             "positions in front of the segment, S = m + t of them.")
    expect_shape(got, want.shape, what)
    if got.is_floating_point() or got.dtype == torch.bool:
        fail(f"{what} has dtype {got.dtype}: distances index a table of encodings, so they must be a "
             "LongTensor (torch.int64). torch.arange of ints gives one; drop the float conversion "
             "(or call .long()).")
    values = got.long()
    if torch.equal(values, i - j):
        fail("you computed i - j: query i sits after the memory, at key position m + i, so use m + i - j.")
    if torch.equal(values, -want):
        fail("the sign is flipped: the distance to a key in the past must be positive (m + i - j).")
    if torch.equal(values, want.clamp(min=0)):
        fail("the keys after the query (j > m + i) get 0: keep their negative distances (m + i - j), so that "
             "they can be told apart from the query's own key.")
    if torch.equal(values, want.abs()):
        fail("you took the absolute value: a key after the query (j > m + i) must get a negative distance, "
             "so that it can be told apart from the key as far in the past.")
    if torch.equal(values, M - 1 + i - j) or torch.equal(values, M + 1 + i - j):
        fail(f"{what} is off by one: query i sits at key position m + i exactly (query 0 right after the m "
             "memory keys, at distance 0 from itself).")
    expect_dtype(got, torch.int64, what, "Use torch.arange (integers) and no float conversion.")
    expect_close(got, want, what, dims="i j")


def _shift_rows(x: torch.Tensor, amount: Callable[[int], int]) -> torch.Tensor:
    """Row `i` of `[..., T, S]` rolled left by `amount(i)`: the loop a learner might write."""
    return torch.stack([x[..., i, :].roll(-amount(i), dims=-1) for i in range(x.size(-2))], dim=-2)


@exercise("relative shift")
def check_relative_shift(fn: Callable) -> None:
    """`fn(x)`: x `[B, H, T, S]` whose column `r` holds distance `S - 1 - r` -> `[B, H, T, S]` by (query, key)."""
    what = "relative_shift(x)"
    expect_own_code(fn, what, relative_shift=relative_shift)
    x = _randn(B, H, T, S, seed=1)
    x_in = x.clone()

    def one_matrix_only() -> None:  # the learner's shift raised on [B, H, T, S]: does it work on [T, S]?
        try:
            works = _visible_close(fn(x[0, 0].clone()), want[0, 0])
        except Exception:
            return
        if works:
            fail(f"{what} works on one [T, S] matrix but not on [B, H, T, S] = {describe_shape(x.shape)}: keep "
                 "the leading dimensions, *lead, t, s = x.shape, and reshape(*lead, s + 1, t) (not "
                 "reshape(s + 1, t), which mixes the rows of different batch entries and heads).")

    want = relative_shift(x)
    got = expect_tensor(call(fn, f"{what} with x {describe_shape(x.shape)} = [B, H, T, S]", x_in,
                             diagnose=one_matrix_only), what)
    expect_unchanged(snapshot(x=x), what, x=x_in)
    if tuple(got.shape) == (B, H, S, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [B, H, S, T]: the last step reads the numbers "
             "back as [..., T, S] (reshape(*lead, t, s)), not as the [S, T] of a transpose.")
    if tuple(got.shape) == (B, H, T, S + 1):
        fail(f"{what} has shape {describe_shape(got.shape)} = [B, H, T, S + 1]: the padded tensor still has "
             "its zero column; read it as [..., S + 1, T], drop the first row, read back as [..., T, S].")
    expect_shape(got, x.shape, what, SIZES)
    pad = torch.nn.functional.pad
    right_pad = pad(x, (0, 1)).reshape(B, H, S + 1, T)[..., :-1, :].reshape(B, H, T, S)
    right_pad_first_row = pad(x, (0, 1)).reshape(B, H, S + 1, T)[..., 1:, :].reshape(B, H, T, S)
    to_the_left = ("pad on the left: F.pad(x, (1, 0)), then read as [..., S + 1, T], drop the FIRST row and "
                   "read back as [..., T, S].")
    left_pad_last_row = torch.nn.functional.pad(x, (1, 0)).reshape(B, H, S + 1, T)[..., :-1, :].reshape(
        B, H, T, S)
    mistakes = [
        (x, "the scores come back unshifted: row i must slide left by T - 1 - i so that column j holds "
            "distance M + i - j."),
        (relative_shift(x.flip(-1)), "your shift reads the distances in ascending order; column r of x holds "
                                     "distance S - 1 - r (largest first), as relative_keys produces them."),
        (right_pad, "the zero column is padded on the right (F.pad(x, (0, 1))): " + to_the_left),
        (right_pad_first_row, "the zero column is padded on the right (F.pad(x, (0, 1))), so each row slides "
                              "the wrong way: " + to_the_left),
        (pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(x.shape),
         "you transposed the padded [..., T, S + 1] tensor to get [..., S + 1, T]: a transpose moves whole "
         "rows to columns, but the trick reads the same numbers, in memory order, in rows of T: use "
         "reshape(*lead, s + 1, t), not transpose."),
        (pad(x, (0, 0, 1, 0)).reshape(B, H, S, T + 1)[..., 1:].reshape(x.shape),
         "you padded along T, the queries (F.pad(x, (0, 0, 1, 0)) adds a row): the zero goes in a new first "
         "COLUMN, along S, the last axis: F.pad(x, (1, 0))."),
        (x.flip(-1), "you flipped the columns (x.flip(-1)): that reverses every row the same way, but row i "
                     "must slide left by its own amount, T - 1 - i: pad a zero column on the left, read as "
                     "[..., S + 1, T], drop the first row, read back as [..., T, S]."),
        (left_pad_last_row, "you dropped the last row of the [..., S + 1, T] view: drop the first one "
                            "(padded[..., 1:, :]); it holds the padding zero and the start of row 0."),
        (torch.nn.functional.pad(x, (1, 0)).reshape(S + 1, -1)[1:].reshape(x.shape),
         "the reshape to [S + 1, T] drops the leading dimensions, which mixes the rows of different batch "
         "entries and heads: keep them, reshape(*lead, S + 1, T), with *lead, t, s = x.shape."),
        (_shift_rows(x, lambda i: i), "row i slides left by i: it must slide by T - 1 - i (the last query, "
                                      "i = T - 1, stays in place, the first slides furthest)."),
        (_shift_rows(x, lambda i: -(T - 1 - i)), "the rows slide right: row i must slide LEFT by T - 1 - i, "
                                                 "so that column j holds distance M + i - j."),
    ]
    for wrong, message in mistakes:
        if _visible_close(got, wrong):
            fail(message)
    expect_close(got, want, f"{what} on the entries a query may see (j <= M + i)", dims="b h i j",
                 where=VISIBLE)


def _reference_scores(q, k, r, u, v, *, use_u=True, use_v=True, position=True, shift=True, scale=1.0,
                      content=True, scale_content_only=False, shift_sum=False):
    """The four terms with one mistake switched on; `scale` is the power of d_head divided by (0.5 right)."""
    by_key = torch.einsum("bhid,bhjd->bhij", q + (u[:, None] if use_u else 0), k)
    by_distance = torch.einsum("bhid,rhd->bhir", q + (v[:, None] if use_v else 0), r)
    if scale_content_only:
        return by_key / q.size(-1) ** 0.5 + relative_shift(by_distance)
    if shift_sum:
        return relative_shift(by_key + by_distance) / q.size(-1) ** 0.5
    scores = (by_key if content else 0) + ((relative_shift(by_distance) if shift else by_distance)
                                           if position else 0)
    return scores / q.size(-1) ** (0.5 * scale)


@exercise("relative attention scores")
def check_relative_scores(fn: Callable) -> None:
    """`fn(q, k, r, u, v)` -> scores `[B, H, T, S]`: terms (a)-(d), shifted, divided by sqrt(D_h).

    q `[B, H, T, D_h]`, k `[B, H, S, D_h]`, r `[S, H, D_h]` (distances `S - 1 .. 0`), u, v `[H, D_h]`.
    """
    what = "relative_scores(q, k, r, u, v)"
    q, k, r = _randn(B, H, T, D_H, seed=2), _randn(B, H, S, D_H, seed=3), _randn(S, H, D_H, seed=4)
    u, v = _randn(H, D_H, seed=5), _randn(H, D_H, seed=6)
    inputs = dict(q=q.clone(), k=k.clone(), r=r.clone(), u=u.clone(), v=v.clone())
    shapes = (f"q {describe_shape(q.shape)} = [B, H, T, D_h], k {describe_shape(k.shape)}, "
              f"r {describe_shape(r.shape)}, u and v {describe_shape(u.shape)} = [H, D_h]")
    got = expect_tensor(call(fn, f"{what} with {shapes}", *inputs.values(),
                             advice="u and v have no batch or query axis: add them to q as u[:, None] "
                                    "([H, 1, D_h]), which broadcasts over the batch and the queries"), what)
    expect_unchanged(snapshot(q=q, k=k, r=r, u=u, v=v), what, **inputs)
    expect_shape(got, (B, H, T, S), what, SIZES)
    attn = RelativeMultiHeadAttention(H * D_H, H)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
    want = attn.scores(q, k, r)
    mistakes = [
        (dict(scale=0), "the scores are not scaled: divide the sum of the four terms by sqrt(d_head)."),
        (dict(scale=2), "you divided by d_head: divide by sqrt(d_head) (math.sqrt(q.size(-1)))."),
        (dict(scale=math.log(H * D_H) / math.log(D_H)), "you divided by sqrt(n_heads * d_head) = sqrt(d_model); "
                                                        "each head divides by sqrt(d_head) = sqrt(q.size(-1))."),
        (dict(use_u=False), "term (c) is missing: add the content bias u to the queries before the product "
                            "with k."),
        (dict(use_v=False), "term (d) is missing: add the position bias v to the queries before the product "
                            "with r."),
        (dict(use_u=False, use_v=False), "terms (c) and (d) are missing: use q + u against k and q + v "
                                         "against r."),
        (dict(position=False), "only the content terms are there: add (q + v) r^T, shifted, for (b) + (d)."),
        (dict(content=False), "only the position terms are there: add (q + u) k^T for (a) + (c)."),
        (dict(shift=False), "the position scores are indexed by distance, not by key: apply relative_shift."),
        (dict(scale_content_only=True), "only the content term is divided by sqrt(d_head): divide the sum of "
                                        "both, content + shifted position, by sqrt(d_head)."),
        (dict(shift_sum=True), "you shifted the sum of the two products: the content scores (q + u) k^T are "
                               "already indexed by key; shift only the position term (q + v) r^T, which is "
                               "indexed by distance, then add."),
        (dict(r=r.flip(0)), "r is reversed (r.flip(0)?): row r of r is the encoding of distance S - 1 - r, "
                            "largest first, as relative_keys gives it and as relative_shift expects; use r as "
                            "it comes."),
    ]
    for options, message in mistakes:
        options = {"r": r, **options}
        if _visible_close(got, _reference_scores(q, k, u=u, v=v, **options)):
            fail(message)
    if _visible_close(got, _reference_scores(q, k, r, v, u)):
        fail("the biases are swapped: u (the content bias) goes with the content keys k, v (the position bias) "
             "with the position keys r: (q + u) k^T + shift((q + v) r^T).")
    expect_close(got, want, f"{what} on the entries a query may see (j <= M + i)", dims="b h i j",
                 where=VISIBLE)


@exercise("memory update")
def check_update_memory(fn: Callable) -> None:
    """`fn(mem, h, mem_len)`: mem `[B, M, D]` or None, h `[B, T, D]` -> the last `mem_len` states, detached."""
    expect_own_code(fn, "update_memory(mem, h, mem_len)", update_memory=update_memory)
    mem, h = _randn(B, M, D_H, seed=7), _randn(B, T, D_H, seed=8)
    for use_mem, mem_len in [(True, 6), (False, 6), (True, 2), (True, M + T + 3), (True, 0)]:
        mem_in = mem.clone() if use_mem else None
        h_in = h.clone().requires_grad_()  # h comes out of the current segment's graph
        what = f"update_memory({'mem' if use_mem else 'None'}, h, {mem_len})"
        before = snapshot(mem=mem_in, h=h_in)
        shapes = (f"mem {describe_shape(mem.shape)}, " if use_mem else "") + f"h {describe_shape(h.shape)}"
        got = expect_tensor(call(fn, f"{what} with {shapes}", mem_in, h_in, mem_len, advice=(
            "" if use_mem else "your function must handle mem=None (the first segment has no memory yet: "
                               "the states are then h alone)")), what)
        expect_unchanged(before, what, mem=mem_in, h=h_in)
        states = torch.cat([mem, h], 1) if use_mem else h
        want = update_memory(mem if use_mem else None, h, mem_len)
        n = states.size(1)
        if mem_len == 0 and tuple(got.shape) == (B, n, D_H):
            fail("with mem_len = 0 you kept everything: x[:, -0:] is x[:, 0:]. Slice from "
                 "size - min(mem_len, size) instead.")
        if use_mem and mem_len > T and tuple(got.shape) == tuple(h.shape):
            fail(f"{what} dropped the old memory: concatenate [mem, h] along the time axis first.")
        if use_mem and mem_len < n and tuple(got.shape) == (B, n, D_H):
            fail(f"{what} kept all {n} states: keep only the last mem_len = {mem_len}.")
        if 0 < want.size(1) < n and tuple(got.shape) == tuple(want.shape) and close(
                got, states[:, : want.size(1)]):
            fail(f"{what} kept the oldest states; keep the most recent ones (the end of [mem, h]).")
        expect_shape(got, want.shape, what)
        if use_mem and want.size(1) > 0 and close(got, torch.cat([h, mem], 1)[:, n - want.size(1):]):
            fail(f"{what} concatenates the states in the wrong order: [h, mem] puts the new states before "
                 "the older memory; time runs left to right, so torch.cat([mem, h], dim=1).")
        expect_close(got, want, what, dims="b m d")
        if got.requires_grad:
            fail(f"{what} is still attached to the graph: call .detach() so no gradient reaches earlier "
                 "segments.")


@exercise("segment mask")
def check_segment_mask(fn: Callable) -> None:
    """`fn(n, seg_len, mem_len)` -> bool `[N, N]`: query i sees j iff start(i) - mem_len <= j <= i."""
    expect_own_code(fn, "segment_mask(n, seg_len, mem_len)", segment_mask=segment_mask)
    cases = []
    for n, seg_len, mem_len in [(10, 4, 3), (9, 3, 5), (6, 2, 0)]:
        what = f"segment_mask({n}, {seg_len}, {mem_len})"
        got = expect_tensor(call(fn, what, n, seg_len, mem_len), what)
        expect_shape(got, (n, n), what)
        expect_dtype(got, torch.bool, what, "Masks are bool (True = may attend): combine comparisons with &.")
        cases.append((what, got, n, seg_len, mem_len))
    wrong = [(what, got, _segment_mistakes(n, seg_len, mem_len)) for what, got, n, seg_len, mem_len in cases]
    if all(torch.equal(got, segment_mask(*sizes)) for _, got, *sizes in cases):
        return
    # a mistake that explains every case first: two mistakes may coincide on one case but not on all
    for k, (_, message) in enumerate(wrong[0][2]):
        if all(torch.equal(got, mistakes[k][0]) for _, got, mistakes in wrong):
            fail(f"{wrong[0][0]} {message}")
    for (what, got, n, seg_len, mem_len), (_, _, mistakes) in zip(cases, wrong):
        want = segment_mask(n, seg_len, mem_len)
        if torch.equal(got, want):
            continue
        for mask, message in mistakes:
            if torch.equal(got, mask):
                fail(f"{what} {message}")
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        if (got & (j > i)).any():
            fail(f"{what} lets a query see a future key, at {first_position(got & (j > i), 'i j')}: "
                 "require j <= i.")
        a, b = (int(x) for x in (got != want).nonzero()[0])
        first = (a // seg_len) * seg_len
        fail(f"{what} differs at [i={a}, j={b}] (yours {bool(got[a, b])}, expected {bool(want[a, b])}): query "
             f"i={a} is in the segment starting at {first}, so it sees keys {max(first - mem_len, 0)} to {a}.")


def _segment_mistakes(n: int, seg_len: int, mem_len: int) -> list[tuple[torch.Tensor, str]]:
    """The typical wrong segment masks for these sizes, each with its diagnosis."""
    want = segment_mask(n, seg_len, mem_len)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // seg_len) * seg_len
    return [
        (j <= i, "is the plain causal mask: a query cannot see further back than its segment's memory. (If "
                 "you computed the segment start, take it from the query's index i: start(i) = "
                 "(i // seg_len) * seg_len; computed from j, j >= start - mem_len always holds.)"),
        ((j <= i) & (j >= i - mem_len), "is a sliding window of mem_len keys per query; the memory is fixed "
                                        "per segment: every query of a segment sees back to (segment "
                                        "start) - mem_len."),
        ((j <= i) & (j >= i // seg_len - mem_len), "takes i // seg_len, the segment's number, as its start: "
                                                   "the first position of the segment is start(i) = "
                                                   "(i // seg_len) * seg_len."),
        (want.T, "is transposed: row i is the query and column j the key (i as a column, j as a row)."),
        (~want, "is inverted: True must mean 'may attend'."),
        ((j <= i) & (j >= start), "ignores the memory: each query sees only its own segment, but it may "
                                  "also see the mem_len positions before the segment start."),
        ((j <= i) & (j > start - mem_len), "is off by one at the far end: the memory holds mem_len "
                                           "positions, start(i) - mem_len included (j >= start - mem_len)."),
        ((j <= i) & (j >= start - mem_len - 1), "is off by one at the far end: it reaches mem_len + 1 "
                                                "positions before the segment start."),
        ((j < i) & (j >= start - mem_len), "forbids the diagonal: a query may attend to itself (j <= i)."),
    ]
