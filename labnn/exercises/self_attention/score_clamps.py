"""Scores clamped in notebook 01's attention exercises: `s.clamp(-50, 50)` (or
`clamp(min=-1e4)`) on the way to the softmax, written to keep exp from overflowing or
in place of a mask. The softmax is unchanged by a constant added to a row, not by a
clamp: rows of large scores, or rows far below zero (where a clamp from below makes every
key, masked or not, equal), lose their weights. A round of such scores calls
`expect_unclamped`, which names the bound. Named for `masked_attention` (Exercises 1-2)
and `mha_rounds` (Exercise 5).

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys; masks `[T, S]`, True =
may attend.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, fail

BOUNDS = (5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0, 200.0, 500.0, 1e3, 1e4,
          3e4, 65504.0, 1e5, 1e6, 1e9)


_FORMS = {"both": "clamp(-{c}, {c})", "below": "clamp(min=-{c})", "above": "clamp(max={c})"}


def _attend(scores: torch.Tensor, mask: torch.Tensor | None, lo: float | None,
            hi: float | None, fill_first: bool) -> torch.Tensor:
    """The weights of `scores` clamped to [`lo`, `hi`], masked with -inf before the clamp
    (`fill_first`) or after it, empty rows zeroed."""
    if mask is not None and fill_first:
        scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores.clamp(lo, hi) if lo is not None or hi is not None else scores
    if mask is not None and not fill_first:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def clamp_of(got: object, scores: torch.Tensor, mask: torch.Tensor | None,
             after: Callable[[torch.Tensor], torch.Tensor] | None) -> str | None:
    """How `got` is the attention of `scores` (scaled, not masked) clamped, masked with
    -inf before or after the clamp (`mask` None: no mask), empty rows zeroed, then
    `after(weights)` (None: the weights): e.g. ``"clamp(-50, 50) or clamp(max=50)"``, or
    the clamps of any bound `c` over a range when several give it; None when no clamp of
    `BOUNDS` gives it, or when `got` is right."""
    if not isinstance(got, torch.Tensor):
        return None
    got, after = got.detach(), after or (lambda w: w)
    right = after(_attend(scores, mask, None, None, True))
    if got.shape != right.shape or close(got, right):
        return None
    found = []
    for c in BOUNDS:
        for kind, lo, hi in (("both", -c, c), ("below", -c, None), ("above", None, c)):
            wrong = [after(_attend(scores, mask, lo, hi, first))
                     for first in ((False,) if mask is None else (True, False))]
            if any(close(got, w) and not close(w, right) for w in wrong):
                found.append((c, kind))
    if not found:
        return None
    bounds = sorted({c for c, _ in found})
    kinds = [k for k in _FORMS if k in {kind for _, kind in found}]
    if len(bounds) == 1:
        return " or ".join(_FORMS[k].format(c=f"{bounds[0]:g}") for k in kinds)
    forms = " or ".join(_FORMS[k].format(c="c") for k in kinds)
    return f"{forms}, any c from {bounds[0]:g} to {bounds[-1]:g} alike here"


def expect_unclamped(got: object, scores: torch.Tensor, mask: torch.Tensor | None,
                     what: str, after: Callable[[torch.Tensor], torch.Tensor] | None = None
                     ) -> None:
    """Fail when `got` is not the right attention of `scores` but that of the scores
    clamped (`clamp_of`), naming the clamp."""
    said = clamp_of(got, scores, mask, after)
    if said is not None:
        fail(f"{what} gives the softmax of clamped scores ({said}): a clamp changes the "
             "scores past it, and their weights; it neither masks nor steadies the softmax. "
             "Drop it: softmax subtracts each row's max, a mask fills with float('-inf').")
