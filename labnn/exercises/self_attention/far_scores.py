"""Rounds of notebook 01's attention exercises where scores lie far apart: a softmax
stabilised with the max of the whole tensor (`s - s.max()`), whose rows far below that
max underflow to 0 / 0 = NaN, and a mask filled with a finite number (-30, -100, -1e4,
float16's -65504, -1e9) that allowed scores far below it defeat. Both inputs only shift
each row's scores by a constant, which leaves the right softmax unchanged: the first feature of
every key is set to one number, so that a query's first feature moves its whole row. A row
all near -1e5 shows a max clamped to a floor; a masked key 1e12 above the allowed ones, a
max taken over the masked keys too and subtracted before a finite fill. Named for
`labnn.exercises.self_attention.masked_attention`. A finite fill too large for float16 or
bfloat16 is named by `half_rounds`.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True =
may attend.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import close, expect_close, fail, first_position
from labnn.exercises.grading.sizes import shift_rows
from labnn.nn.attention import scaled_dot_product_attention
from labnn.exercises.self_attention.score_clamps import expect_unclamped

# the finite fills a learner may pick, tried in turn when the masked keys won
FILLS = (-1.0, -5.0, -10.0, -20.0, -30.0, -40.0, -50.0, -60.0, -80.0, -100.0, -200.0,
         -500.0, -1e3, -1e4, -3e4, -65504.0, -1e6, -1e9)
# where each query's allowed scores lie, in the fill round: one level per query, so that
# each fill above gives its own pattern of rows won by the masked keys
LEVELS = (-1500.0, -150.0, -70.0, -45.0, -25.0)
DEEP = (-1e5, *LEVELS[1:])  # a second round, once an empty row is zeroed: fills to -65504
# the last round, after float16's: a fill of -1e9 that float16 took as -inf (torch.where)
FAR = (-1e10, *LEVELS[1:])


def _softmax_of(scores: torch.Tensor, v: torch.Tensor | None) -> torch.Tensor:
    w = scores.softmax(-1)
    return w if v is None else w @ v


def expect_rows_apart(fn: Callable, what: str, q: torch.Tensor,
                      *rest: torch.Tensor, dims: str) -> None:
    """`expect_row_far_above`, then `expect_row_far_below`."""
    expect_row_far_above(fn, what, q, *rest, dims=dims)
    expect_row_far_below(fn, what, q, *rest, dims=dims)


def expect_row_far_above(fn: Callable, what: str, q: torch.Tensor,
                         *rest: torch.Tensor, dims: str) -> None:
    """Run `fn(q, k)` (weights) or `fn(q, k, v)` (`rest`) once more with query 0 of batch
    entry 0 scoring about 200 above every other row (float32): a softmax stabilised with
    the max of the whole tensor (or of each batch entry) underflows there to 0 / 0 = NaN,
    and is named."""
    k, v = rest[0], rest[1] if len(rest) > 1 else None
    shifts = torch.zeros(q.shape[:-1], dtype=q.dtype)
    shifts[0, 0] = 200.0
    q2, k2 = shift_rows(q.detach(), k.detach(), shifts)
    args = (q2, k2) if v is None else (q2, k2, v.detach())
    try:
        got = fn(*(a.clone() for a in args))
    except Exception:
        return  # the comparison rounds that follow report it
    scores = q2 @ k2.transpose(-2, -1) / math.sqrt(q.size(-1))
    want = _softmax_of(scores, v)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or close(got, want):
        return
    got = got.detach()
    for shared in (scores.amax(), scores.amax((-2, -1), keepdim=True)):
        e = (scores - shared).exp()
        wrong = e / e.sum(-1, keepdim=True)
        wrong = wrong if v is None else wrong @ v
        if close(got, wrong) or close(got, wrong.nan_to_num(0.0)):
            bad = ~torch.isfinite(got) | (got == 0) & (want != 0)
            at = f" (at {first_position(bad, dims)})" if bad.any() else ""
            fail(f"{what} with one row's scores about 200 above all others gives NaN or "
                 f"0{at}: your softmax subtracts the max of the "
                 "whole tensor (s.max()), so every exp of a row far below it underflows to "
                 "0, and 0 / 0 is NaN: subtract each row's max, s - s.max(-1, "
                 "keepdim=True).values (or s.amax(-1, keepdim=True)), or use s.softmax(-1).")


def expect_row_far_below(fn: Callable, what: str, q: torch.Tensor, *rest: torch.Tensor,
                         dims: str) -> None:
    """Run `fn` once more (float32) with query 0's scores all near -1e5 (a constant, which
    leaves the softmax unchanged): a softmax whose max is clamped to a finite floor (or
    replaced by a fixed number) underflows there to a row of 0 (or 0 / 0 = NaN), named;
    any other difference (float32 holds those scores to about 0.01) is left alone."""
    k, v = rest[0].detach(), rest[1].detach() if len(rest) > 1 else None
    shifts = torch.zeros(q.shape[:-1], dtype=q.dtype)
    shifts[..., 0] = -1e5
    q2, k2 = shift_rows(q.detach(), k, shifts)
    args = (q2, k2) if v is None else (q2, k2, v)
    try:
        got = fn(*(a.clone() for a in args))
    except Exception:
        return  # the comparison rounds that follow report it
    want = _softmax_of(q2 @ k2.transpose(-2, -1) / math.sqrt(q.size(-1)), v)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or close(got, want):
        return
    scores = q2 @ k2.transpose(-2, -1) / math.sqrt(q.size(-1))
    expect_unclamped(got, scores, None, f"{what} with query 0's scores all near -1e5",
                     None if v is None else lambda w: w @ v)
    lost = ((got.detach().abs() < 1e-30) | ~torch.isfinite(got.detach())).all(-1)
    if lost.any():
        fail(f"{what} with query 0's scores all near -1e5 (a constant per row, which leaves "
             f"the softmax unchanged) gives 0 or NaN (at {first_position(lost, dims[:-2])}): "
             "exp of every score there underflows: subtract the row's own max, unclamped, "
             "s - s.amax(-1, keepdim=True), or use s.softmax(-1).")


def expect_fill_below(fn: Callable, what: str, got: torch.Tensor, q: torch.Tensor,
                      k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      levels: tuple[float, ...] = LEVELS) -> None:
    """`got` = `fn(q, k, v, mask)` (float32, scores of about 1). Run `fn` once more in
    float64 with each query's allowed scores far below zero (`levels`, one per query;
    `DEEP` puts query 0's below float16's -65504, `FAR` at -1e10, below -1e9): masked
    scores filled with a finite number above them win the softmax there, as filling with
    any of `FILLS` would; the fill is named when one of them also gives exactly `got`.
    Another difference there is named if a clamp of the scores gives it; in the last round
    (`FAR`) it is refused when `got` is right (the scores of about 1 hid it)."""
    shifts = torch.tensor(levels[:q.size(1)], dtype=torch.float64)
    q2, k2 = shift_rows(q.detach().double(), k.detach().double(), shifts)
    v2 = v.detach().double()
    try:
        far = fn(q2.clone(), k2.clone(), v2.clone(), mask.clone())
    except Exception:
        return  # the comparison rounds that follow report it
    want = scaled_dot_product_attention(q2[:, None], k2[:, None], v2[:, None], mask)[0][:, 0]
    if not isinstance(far, torch.Tensor) or far.shape != want.shape or close(far, want):
        return
    far, got = far.detach(), got.detach()

    def filled(q, k, v, fill):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask, fill)
        return scores.softmax(-1) @ v

    won = [f for f in FILLS if close(far, filled(q2, k2, v2, f))]
    said = f"{what} with each query's allowed scores far below 0 (query 0's near {levels[0]:g})"
    if not won:  # the masked keys did not take the weight: another mistake, named if known
        expect_unclamped(far, q2 @ k2.transpose(-2, -1) / math.sqrt(q.size(-1)), mask, said,
                         lambda w: w @ v2)
        near = scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]
        if levels is FAR and close(got, near):  # the last round, after float16's: refused
            expect_close(far, want, f"{said}, a constant per row (float64)", dims="b i d")
        return
    fits = [f for f in won if close(got, filled(q.detach(), k.detach(), v.detach(), f))]
    said = f"your fill of {fits[0]:g}" if len(fits) == 1 else "your finite fill"
    i = int((far - want).abs().amax((0, 2)).argmax())
    fail(f"{what} with each query's allowed scores far below 0 (query i={i}'s near "
         f"{levels[i]:g}: a constant per row, which leaves the softmax unchanged) gives "
         f"the masked keys the weight: {said} lies above those scores. Fill with "
         "float('-inf') (or torch.finfo(s.dtype).min), below any score.")


def expect_masked_far_above(fn: Callable, what: str, q: torch.Tensor, k: torch.Tensor,
                            v: torch.Tensor, mask: torch.Tensor) -> None:
    """Run `fn(q, k, v, mask)` once more (float32) with the last key masked for every
    query and scoring 200 above the others: a softmax over every key, masked and
    renormalized afterwards, keeps nothing of the allowed keys there (their exp underflow
    next to the masked key's), and is named; the right answer ignores that key."""
    mask = mask.clone()
    mask[..., -1], mask[..., 0] = False, True  # every query: key 0 allowed, the last not
    q2, k2 = q.detach().clone(), k.detach().clone()
    k2[..., 0] = 0.0
    k2[:, -1, 0] = 10.0
    q2[..., 0] = 200 * math.sqrt(q.size(-1)) / 10.0  # the last key: +200 for every query
    want = scaled_dot_product_attention(q2[:, None], k2[:, None], v[:, None], mask)[0][:, 0]
    try:
        got = fn(q2.clone(), k2.clone(), v.detach().clone(), mask.clone())
    except Exception:
        return  # the comparison rounds that follow report it
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or close(got, want):
        return
    lost = (got.detach().abs().amax(-1) < 1e-6) | ~torch.isfinite(got.detach()).all(-1)
    if lost.any():
        fail(f"{what} with a masked key scoring 200 above the allowed ones gives 0 or NaN "
             f"(at {first_position(lost, 'b i')}): you took the softmax over every key (or "
             "its max) and masked afterwards, and exp of the allowed scores underflows next "
             "to the masked key's. Mask the scores before the softmax: "
             "masked_fill(~mask, float('-inf')).")


def expect_masked_far_far_above(fn: Callable, what: str, q: torch.Tensor, k: torch.Tensor,
                                v: torch.Tensor, mask: torch.Tensor) -> None:
    """The round above in float64 with the masked key 1e12 above the allowed ones: a row's
    max taken over every key (masked ones too) and subtracted before a finite fill puts
    the allowed scores far below that fill, and the masked key takes all the weight."""
    mask = mask.clone()
    mask[..., -1], mask[..., 0] = False, True  # every query: key 0 allowed, the last not
    q2, k2, v2 = q.detach().double(), k.detach().double(), v.detach().double()
    k2[..., 0] = 0.0
    k2[:, -1, 0] = 10.0
    q2[..., 0] = 1e12 * math.sqrt(q.size(-1)) / 10.0
    try:
        got = fn(q2.clone(), k2.clone(), v2.clone(), mask.clone())
    except Exception:
        return
    masked = (~mask).double()
    if isinstance(got, torch.Tensor) and close(got, masked / masked.sum(-1, keepdim=True) @ v2):
        fail(f"{what} with a masked key scoring 1e12 above the allowed ones gives the masked "
             "keys all the weight: you subtracted the row's max over every key, the masked one "
             "too, then filled with a finite number, which now lies above the allowed "
             "scores. Fill with float('-inf') (or torch.finfo(s.dtype).min), or take the "
             "max after masking.")


def expect_far_rounds(fn: Callable, what: str, got: torch.Tensor, q: torch.Tensor,
                      k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> None:
    """`expect_fill_below`, then `expect_masked_far_above` and its float64 round."""
    expect_fill_below(fn, what, got, q, k, v, mask)
    expect_masked_far_above(fn, what, q, k, v, mask)
    expect_masked_far_far_above(fn, what, q, k, v, mask)
