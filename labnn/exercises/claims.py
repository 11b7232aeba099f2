"""Claims a notebook's prose makes about its own runs, computed and checked where they
are made.

A notebook that says "XL beats the transformer" must print the two numbers it means and
a verdict, and must not pass when the numbers say otherwise. `check_claim` is that
verdict:

* the claim holds: one line, ✅, with the evidence;
* it does not hold in a full-size run: `ClaimFailed`, which fails the notebook (nbval,
  the site build);
* it does not hold in fast mode (`LABNN_FAST=1`, a run too short to show it): allowed
  only when the notebook says so in advance through `fast_caveat`, which names what the
  short run shows and the full-size figures; the line printed then says plainly that the
  claim is *not* shown by this run.

A claim without a caveat must hold in both modes.
"""

from __future__ import annotations

import labnn

from labnn.exercises.grading.outcomes import ExerciseError


class ClaimFailed(ExerciseError):
    """A claim of the notebook's prose that its own run contradicts."""

    symbol = "❌"


def check_claim(
    claim: str, holds: bool, evidence: str, *, fast_caveat: str | None = None
) -> None:
    """Print the verdict on one claim of the prose; fail when a run that should show it
    does not.

    Args:
        claim: the sentence as the prose states it, e.g. ``"XL with memory beats the
            transformer"``.
        holds: whether the numbers computed in the cell support it.
        evidence: the numbers, e.g. ``"val loss 1.62 vs 1.71"``; printed in every case.
        fast_caveat: what the notebook says about a fast-mode run that is too short to
            show the claim (the full-size figures and the hardware they came from).
            Without it the claim must hold in fast mode too.

    Raises:
        ClaimFailed: the claim does not hold, at full size, or in fast mode without a
            `fast_caveat`.
        TypeError: `holds` is not a bool (e.g. a tensor, which would hide a shape
            mistake).
    """
    if not isinstance(holds, bool):
        raise TypeError(f"holds must be a bool, got {type(holds).__name__}: {holds!r}")
    # one line of prose: runs of spaces would make it a row of columns on the site
    claim, evidence = " ".join(claim.split()), " ".join(evidence.split())
    fast_caveat = fast_caveat and " ".join(fast_caveat.split())
    if holds:
        print(f"✅ claim holds: {claim} ({evidence})")
    elif labnn.fast_mode() and fast_caveat is not None:
        print(
            f"⚠️ fast mode: this short run does NOT show that {claim} ({evidence}). "
            f"{fast_caveat}"
        )
    else:
        mode = "fast mode (no caveat given)" if labnn.fast_mode() else "full size"
        raise ClaimFailed(f"claim does not hold ({mode}): {claim} ({evidence})")
