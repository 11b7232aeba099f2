"""Results clipped: an answer that ends in `.clamp(-c, c)` (a gradient "clipped" against
exploding values, a score bounded) is right wherever the check's values stay within
[-c, c], and wrong only where they do not: at other sizes, at other values, at a long T.
Where a result differs from the reference, a check calls `expect_unclipped` before its
own diagnosis, so that such a result is named as clipped, not as a size written as a
number, a state kept between calls or an error at some entries.
"""

from __future__ import annotations

import torch

from labnn.exercises.grading.compare import close
from labnn.exercises.grading.outcomes import fail


def clip_bounds(got: object, want: torch.Tensor) -> str | None:
    """How `got` is `want` clipped (``"to [-10, 10]"``, ``"at 0 from below"``), or None
    when it is not: `got` equals `want.clamp(got.min(), got.max())`, some entry of `want`
    lies beyond a bound, and some entry of `got` between the two, or the two are -c and c
    (not a constant, nor an indicator such as `(want > 0).float()`)."""
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
            and got.shape == want.shape and got.device == want.device
            and got.is_floating_point() and want.is_floating_point() and got.numel() > 1):
        return None
    mine = got.detach().to(want.dtype)
    if not bool(torch.isfinite(mine).all()):
        return None
    lo, hi = mine.min(), mine.max()
    # every entry at a bound: clipped only if the bounds are -c and c (else an indicator)
    inside = bool(((mine > lo) & (mine < hi)).any()) or bool(lo == -hi)
    if not bool(lo < hi) or not inside:
        return None
    if not close(mine, want.clamp(lo, hi)):
        return None
    below, above = not close(want.clamp(min=lo), want), not close(want.clamp(max=hi), want)
    if below and above:
        return f"to [{lo.item():.4g}, {hi.item():.4g}]"
    if below:
        return f"at {lo.item():.4g} from below"
    if above:
        return f"at {hi.item():.4g} from above"
    return None


def expect_unclipped(got: object, want: torch.Tensor, what: str) -> None:
    """Fail when `got`, which differs from `want`, is `want` clipped (`clip_bounds`): a
    `.clamp()` or `.clip()` on the way, right only where the values stay within it."""
    bounds = clip_bounds(got, want)
    if bounds is not None:
        fail(f"{what} gives the reference's values clipped {bounds}: a .clamp() or .clip() "
             "on the way? Nothing bounds this result (a gradient too is exact; clipping, "
             "if wanted, is the optimizer step's, clip_grad_norm_): drop it.")
