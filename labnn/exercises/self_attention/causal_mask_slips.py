"""More slips of notebook 01's causal mask (Exercise 3), kept apart from
`attention_slips` for its length: a mask one row and column too big or
too small, a 1-D mask from comparing two aranges, and a flipped or mirrored triangle.

`t` is the number of tokens; the mask is `[t, t]`, query `i` by key `j`, True where `j <= i`.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import fail


def _shape_for(fn: Callable, t: int) -> tuple:
    """The shape of `fn(t)`, or `()` when it fails or gives no tensor."""
    try:
        return tuple(fn(t).shape)
    except Exception:
        return ()


def expect_mask_size(got: torch.Tensor, t: int, what: str, fn: Callable) -> None:
    """`got` = `fn(t)`: fail when it is `[t + 1, t + 1]` or `[t - 1, t - 1]` for two
    sizes t (an off-by-one size, not a fixed one), or 1-D `[t]` as `arange <= arange`
    gives."""
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


def mirror_slips(t: int, what: str, want: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The right mask `want` flipped or mirrored, as `(mask, message)` pairs."""
    rule = "row i is query i and may attend the keys j <= i (lower triangle, tril())"
    return [
        (want.flip(0), f"{what} is the lower triangle flipped upside down (flip(0)): "
                       f"the rows are reversed; {rule}, unflipped."),
        (want.flip(1), f"{what} is the lower triangle flipped left to right (flip(1)): "
                       f"the columns are reversed; {rule}, unflipped."),
    ] if t > 1 else []
