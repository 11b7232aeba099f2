"""Checkers for notebook 02 (Transformer-XL).

Dimension letters: `B` batch, `H` heads, `T` queries (segment), `M` memory, `S = M + T` keys, `D` width,
`D_h` head width. Masks are boolean, True = may attend.

Each checker runs the learner's function on fixed random inputs (`T != M` so that offsets show), compares it
with `labnn.xl` and, when it differs, recomputes the typical mistakes (memory offset forgotten, shift the
wrong way, a bias term missing, `[-0:]` keeping everything, memory not detached, ...) to say which one was made.
Only entries a query may see (`j <= M + i`) are compared where the reference leaves the rest unspecified.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..attention import causal_mask
from ..relative_attention import RelativeMultiHeadAttention, relative_shift
from ..xl import segment_mask, update_memory
from .checking import close, describe_shape, exercise, expect_close, expect_shape, expect_tensor, fail

B, H, T, M, D_H = 2, 3, 4, 5, 8
S = M + T


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _visible(x: torch.Tensor) -> torch.Tensor:
    """The entries of `[..., T, S]` a query may attend (`j <= M + i`), flattened."""
    return x[..., causal_mask(T, S)]


@exercise("relative distances")
def check_relative_distances(fn: Callable) -> None:
    """`fn(t, m)` -> LongTensor `[T, M + T]` with entry `(i, j)` = `m + i - j` (query `i` is at position `m + i`)."""
    got = expect_tensor(fn(T, M), f"relative_distances({T}, {M})")
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    want = M + i - j
    expect_shape(got, want.shape, f"relative_distances({T}, {M})")
    if torch.equal(got.long(), i - j):
        fail("you computed i - j: query i sits after the memory, at key position m + i, so use m + i - j.")
    if torch.equal(got.long(), -want):
        fail("the sign is flipped: the distance to a key in the past must be positive (m + i - j).")
    expect_close(got.double(), want.double(), f"relative_distances({T}, {M})")


@exercise("relative shift")
def check_relative_shift(fn: Callable) -> None:
    """`fn(x)`: x `[B, H, T, S]` whose column `r` holds distance `S - 1 - r` -> `[B, H, T, S]` by (query, key)."""
    x = _randn(B, H, T, S, seed=1)
    got = expect_tensor(fn(x.clone()), "relative_shift(x)")
    expect_shape(got, x.shape, "relative_shift(x)")
    want = relative_shift(x)
    if close(_visible(got), _visible(x)):
        fail("the scores come back unshifted: row i must slide left by T - 1 - i so that column j holds "
             "distance M + i - j.")
    flipped = relative_shift(x.flip(-1))
    if close(_visible(got), _visible(flipped)):
        fail("your shift reads the distances in ascending order; column r of x holds distance S - 1 - r "
             "(largest first), as relative_keys produces them.")
    right_pad = torch.nn.functional.pad(x, (0, 1)).reshape(B, H, S + 1, T)[..., :-1, :].reshape(B, H, T, S)
    if close(_visible(got), _visible(right_pad)):
        fail("pad the zero column on the left (F.pad(x, (1, 0))) and drop the FIRST row of the [S + 1, T] view.")
    expect_close(_visible(got), _visible(want), "relative_shift(x) on the entries a query may see (j <= M + i)")


def _reference_scores(q, k, r, u, v, *, use_u=True, use_v=True, position=True, shift=True, scale=True):
    content = torch.einsum("bhid,bhjd->bhij", q + (u[:, None] if use_u else 0), k)
    by_distance = torch.einsum("bhid,rhd->bhir", q + (v[:, None] if use_v else 0), r)
    scores = content + ((relative_shift(by_distance) if shift else by_distance) if position else 0)
    return scores / math.sqrt(q.size(-1)) if scale else scores


@exercise("relative attention scores")
def check_relative_scores(fn: Callable) -> None:
    """`fn(q, k, r, u, v)` -> scores `[B, H, T, S]`: terms (a)-(d), shifted, divided by sqrt(D_h).

    q `[B, H, T, D_h]`, k `[B, H, S, D_h]`, r `[S, H, D_h]` (distances `S - 1 .. 0`), u, v `[H, D_h]`.
    """
    q, k, r = _randn(B, H, T, D_H, seed=2), _randn(B, H, S, D_H, seed=3), _randn(S, H, D_H, seed=4)
    u, v = _randn(H, D_H, seed=5), _randn(H, D_H, seed=6)
    got = expect_tensor(fn(q, k, r, u, v), "relative_scores(q, k, r, u, v)")
    expect_shape(got, (B, H, T, S), "relative_scores(q, k, r, u, v)")
    attn = RelativeMultiHeadAttention(H * D_H, H)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
    want = attn.scores(q, k, r)
    mistakes = [
        (dict(scale=False), "divide the sum of the four terms by sqrt(d_head)."),
        (dict(use_u=False), "term (c) is missing: add the content bias u to the queries before the product with k."),
        (dict(use_v=False), "term (d) is missing: add the position bias v to the queries before the product with r."),
        (dict(use_u=False, use_v=False), "terms (c) and (d) are missing: use q + u against k and q + v against r."),
        (dict(position=False), "only the content terms are there: add (q + v) r^T, shifted, for (b) + (d)."),
        (dict(shift=False), "the position scores are indexed by distance, not by key: apply relative_shift."),
    ]
    for options, message in mistakes:
        if close(_visible(got), _visible(_reference_scores(q, k, r, u, v, **options))):
            fail(message)
    expect_close(_visible(got), _visible(want), "relative_scores on the entries a query may see (j <= M + i)")


@exercise("memory update")
def check_update_memory(fn: Callable) -> None:
    """`fn(mem, h, mem_len)`: mem `[B, M, D]` or None, h `[B, T, D]` -> the last `mem_len` states, detached."""
    mem, h = _randn(B, M, D_H, seed=7), _randn(B, T, D_H, seed=8).requires_grad_()
    for args, what in [((mem, h, 6), "update_memory(mem, h, 6)"), ((None, h, 6), "update_memory(None, h, 6)"),
                       ((mem, h, 2), "update_memory(mem, h, 2)"), ((mem, h, 0), "update_memory(mem, h, 0)")]:
        got = expect_tensor(fn(*args), what)
        want = update_memory(*args)
        if args[2] == 0 and got.shape[1] == M + T:
            fail("with mem_len = 0 you kept everything: x[:, -0:] is x[:, 0:]. Slice from "
                 "size - min(mem_len, size) instead.")
        if args[0] is not None and want.size(1) and got.shape == want.shape and close(got, torch.cat([mem, h], 1)[:, : want.size(1)]):
            fail(f"{what} kept the oldest states; keep the most recent ones (the end of [mem, h]).")
        if args[0] is not None and args[2] > T and tuple(got.shape) == tuple(h.shape):
            fail(f"{what} dropped the old memory: concatenate [mem, h] along the time axis first.")
        expect_shape(got, want.shape, what)
        expect_close(got, want, what)
        if got.requires_grad:
            fail(f"{what} is still attached to the graph: call .detach() so no gradient reaches earlier segments.")


@exercise("segment mask")
def check_segment_mask(fn: Callable) -> None:
    """`fn(n, seg_len, mem_len)` -> bool `[N, N]`: query i sees j iff start(i) - mem_len <= j <= i."""
    for n, seg_len, mem_len in [(10, 4, 3), (9, 3, 5), (6, 2, 0)]:
        what = f"segment_mask({n}, {seg_len}, {mem_len})"
        got = expect_tensor(fn(n, seg_len, mem_len), what)
        expect_shape(got, (n, n), what)
        if got.dtype != torch.bool:
            fail(f"{what} has dtype {got.dtype}; masks are bool (True = may attend).")
        want = segment_mask(n, seg_len, mem_len)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        if torch.equal(got, j <= i):
            fail(f"{what} is the plain causal mask: a query cannot see further back than its segment's memory.")
        if torch.equal(got, (j <= i) & (j >= i - mem_len)):
            fail(f"{what} is a sliding window of mem_len keys per query; the memory is fixed per segment: "
                 "every query of a segment sees back to (segment start) - mem_len.")
        if (got & (j > i)).any():
            fail(f"{what} lets queries see future keys: require j <= i.")
        if not torch.equal(got, want):
            diff = (got != want).nonzero()[0].tolist()
            fail(f"{what} differs at query {diff[0]}, key {diff[1]} (yours {got[diff[0], diff[1]].item()}, "
                 f"expected {want[diff[0], diff[1]].item()}); shapes {describe_shape(got.shape)}.")
