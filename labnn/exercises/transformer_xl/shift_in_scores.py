"""A slip of notebook 02's relative scores (Exercise 5) that the scores' own mistakes do
not name: a shift of the learner's own, written inline, that moves the position term's
numbers to the wrong keys. The content terms are right and every entry a query may see
holds the content score plus some number of `(q + v) r^T` (or a padding zero), only not
the one of its distance; the check says how far each row slid, or that the memory keys
got none (0 there: the position term of the segment's keys only). Scores right at the
segment's keys only are named too (`_memory_keys`: a term left out, or left unshifted, at
the memory's). Named for `labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `M` memory,
`S = M + T` keys, `D_h` head width. Column `c` of `(q + v) r^T` holds distance `S - 1 - c`.
"""

from __future__ import annotations

import itertools

import torch

from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift
from labnn.exercises.grading import fail


def _slide(position: torch.Tensor, by_distance: torch.Tensor, i: int) -> int | None:
    """How far row `i` of `by_distance [B, H, T, S]` slid left to give the visible entries
    of row `i` of `position` (negative: right), or None when no one slide explains them.
    A slide must match every visible entry whose column exists, two of them at least; of
    two that match as many, the shorter (a roll matches both ways)."""
    t, s = by_distance.shape[-2:]
    seen = s - t + i + 1  # keys j = 0 .. M + i
    found = []
    for c in range(-(s - 1), s):
        js = [j for j in range(seen) if 0 <= j + c < s]
        if len(js) >= 2 and torch.allclose(position[..., i, js], by_distance[..., i,
                                           [j + c for j in js]], rtol=1e-4, atol=1e-4):
            found.append((len(js), -abs(c), c))
    return max(found)[2] if found else None


def misplaced_position(got: torch.Tensor, want: torch.Tensor, q: torch.Tensor,
                       k: torch.Tensor, r: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                       what: str) -> None:
    """Fail when `got` (scores `[B, H, T, S]`, not `want`) is the right content score plus
    the position term's own numbers at the wrong keys, as a wrong shift puts them.

    Args:
        got: the learner's scores; want: the reference scores.
        q, k, r, u, v: the check's inputs, `[B, H, T, D_h]`, `[B, H, S, D_h]`,
            `[S, H, D_h]`, `[H, D_h]`, `[H, D_h]`.
        what: the call, as the messages name it.
    """
    t, s = got.shape[-2:]
    visible = causal_mask(t, s)
    if torch.allclose(got[..., visible], want[..., visible], rtol=1e-4, atol=1e-5):
        return
    _memory_keys(got.detach().to(q.dtype), want, q, k, r, u, v, what)
    scale = q.size(-1) ** 0.5
    by_distance = (q + v[:, None]) @ r.permute(1, 2, 0)  # [B, H, T, S], by distance
    position = got.detach().to(q.dtype) * scale - (q + u[:, None]) @ k.mT
    pool = torch.cat([by_distance.flatten(), by_distance.new_zeros(1)])
    seen = position[..., visible]
    if not torch.isclose(seen[..., None], pool, rtol=1e-4, atol=1e-4).any(-1).all():
        return
    slides = [_slide(position, by_distance, i) for i in range(t)]
    if slides == [t - 1 - i for i in range(t)]:  # every row in place: not a shift's slip
        return
    head = (f"{what}: the position term holds the numbers of (q + v) r^T at the wrong keys "
            "(the content terms are right): your shift (or index into r)")
    tail = (", so that key j reads distance M + i - j. Use relative_shift, or a shift that "
            "passes check_relative_shift.")
    if None in slides:
        _memory_left_out(position, by_distance, visible, what)
        _distance_formula(position, by_distance, visible, what)
        fail(f"{head} moves them by no one slide per row (a flip, a transpose?); row i must "
             f"slide left by T - 1 - i{tail}")
    said = ", ".join(str(c) for c in slides)
    fail(f"{head} slides rows i = 0..{t - 1} left by {said} (negative: right), not by "
         f"T - 1 - i = {', '.join(str(t - 1 - i) for i in range(t))}{tail}")


def _distance_formula(position: torch.Tensor, by_distance: torch.Tensor, visible: torch.Tensor,
                      what: str) -> None:
    """Fail when `position` (`[B, H, T, S]`, the learner's position term) reads, at query i
    and key j, the column of `by_distance` of a wrong distance formula (the memory left out,
    the sign flipped), clamped into `0 .. S - 1` as an index into r would be."""
    t, s = by_distance.shape[-2:]
    m = s - t
    i, j = torch.arange(t)[:, None], torch.arange(s)[None, :]
    formulas = {"i - j (the memory left out)": i - j, "|i - j|": (i - j).abs(),
                "j - i": j - i, "M + j - i (the sign flipped)": m + j - i,
                "j, the key's own index (the columns flipped, x.flip(-1), or r.flip(0) read "
                "unshifted?)": j}
    for name, distance in formulas.items():
        column = (s - 1 - distance.clamp(0, s - 1)).expand(*by_distance.shape)
        read = by_distance.gather(-1, column.to(by_distance.device))
        if torch.allclose(position[..., visible], read[..., visible], rtol=1e-4, atol=1e-4):
            fail(f"{what}: the position term reads, at query i and key j, the encoding of "
                 f"distance {name}, clamped into 0..S - 1, not M + i - j: query i sits at key "
                 "position M + i, after the M memory keys. Use relative_shift, or read r's "
                 "row S - 1 - (M + i - j).")


def _memory_left_out(position: torch.Tensor, by_distance: torch.Tensor, visible: torch.Tensor,
                     what: str) -> None:
    """Fail when `position` (`[B, H, T, S]`, the learner's position term) is 0 at every memory
    key (`j < M`): the position term of the segment's keys only (r's last T rows), padded."""
    t, s = by_distance.shape[-2:]
    m = s - t
    if not m or not torch.allclose(position[..., :m], position.new_zeros(()), atol=1e-4):
        return
    seen = visible[:, m:]
    rest = torch.allclose(position[..., m:][..., seen],
                          relative_shift(by_distance)[..., m:][..., seen], rtol=1e-4, atol=1e-4)
    fail(f"{what}: the position term is 0 at the M = {m} memory keys (j < M)"
         f"{', right at the segment keys' if rest else ''}: it covers the segment's T keys only "
         "(T of r's rows, padded?); each memory key needs the encoding of its distance, up to "
         "M + T - 1: use all S = M + T rows of r, relative_shift((q + v[:, None]) r^T).")


def _memory_keys(got: torch.Tensor, want: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                 r: torch.Tensor, u: torch.Tensor, v: torch.Tensor, what: str) -> None:
    """Fail when `got` is right at the segment's keys (`j >= M`) only, with the content term
    (or u's part of it) left out at the memory keys, or the position term left unshifted or
    out there; a position term 0 there alone is left to `_memory_left_out`, NaN or inf to
    the comparison."""
    t, s = got.shape[-2:]
    m = s - t
    seen = causal_mask(t, s)[:, m:]
    close = lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-4)  # noqa: E731
    if not m or not close(got[..., m:][..., seen], want[..., m:][..., seen]) or not bool(
            got[..., :m].isfinite().all()):
        return  # a NaN or inf is named by the comparison
    by_distance = (q + v[:, None]) @ r.permute(1, 2, 0)
    contents = {"": (q + u[:, None]) @ k.mT, "(c), u's term,": q @ k.mT, "(a) and (c)": 0}
    positions = {"": relative_shift(by_distance), "unshifted": by_distance, "out": 0}
    mine = got[..., :m] * q.size(-1) ** 0.5
    slips = [(c, p) for (c, a), (p, b) in itertools.product(contents.items(), positions.items())
             if close(mine, ((a + b) * torch.ones_like(want))[..., :m])]
    if slips in ([], [("", "out")]):
        return  # nothing named here (the comparison says where), or _memory_left_out does
    c, p = slips[0]
    said = " and ".join([f"leaves {c} out"] * bool(c) + [f"leaves the position term {p}"] * bool(p))
    fail(f"{what} is right at the segment's T keys (j >= M) but {said} at the M = "
         f"{m} memory keys: every term covers all S = M + T keys: (q + u[:, None]) @ k.mT over "
         "the whole k, and the position term shifted across all S columns (relative_shift).")
