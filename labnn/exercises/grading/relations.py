"""Simple relations between a wrong answer and the reference, for the generic messages of
`compare`: when no typical mistake of an exercise matches, saying that the result is the
reference times a constant, or with two axes swapped, or has an extra axis of size 1,
still names the mistake.

Each test is exact (within the comparison's tolerance) and holds only when the relation
tells the answer apart from the reference, so that a sentence is added only when it is
true; otherwise nothing is added.
"""

from __future__ import annotations

from math import prod
from typing import Callable, Sequence

import torch

LIMIT = 400
"""Messages stay under this many characters: a sentence that would pass it is dropped."""

MAX_NUMEL = 1_000_000
"""Larger tensors are not searched for relations (each test copies the tensor)."""


def append(message: str, sentence: str, limit: int = LIMIT) -> str:
    """`message` followed by `sentence`, unless the sentence is empty or the result would
    not stay under `limit` characters."""
    joined = f"{message} {sentence}" if sentence else message
    return joined if len(joined) < limit else message


def _axis(i: int, dims: str | Sequence[str] | None) -> str:
    """Axis `i` by its name in `dims` (``"b h i j"``), else by its number."""
    names = dims.split() if isinstance(dims, str) else list(dims or ())
    return names[i] if i < len(names) else str(i)


def value_relation(got: torch.Tensor, want: torch.Tensor, keep: torch.Tensor,
                   atol: float = 1e-5, rtol: float = 1e-4,
                   dims: str | Sequence[str] | None = None) -> str:
    """One sentence naming a simple relation between `got` and `want`, or ``""``.

    Tried in order, over the compared entries only: $g = -w$; $g = c\\,w$; $g = w + c$;
    $g = |w|$; two axes of equal size swapped; reversed along an axis; averaged (or summed)
    over an axis; $w$ plus a term the same all along an axis; rolled by one along an axis;
    the same values in other places. A relation counts when `got` matches the transformed
    reference within `torch.allclose`'s tolerance while the reference itself does not.

    Args:
        got: the learner's result, of `want`'s shape.
        want: the reference.
        keep: boolean of `want`'s shape: the entries compared.
        atol, rtol: tolerances of `torch.allclose`.
        dims: the names of the dimensions, to name an axis.

    Returns:
        The sentence, or ``""`` when no relation holds.
    """
    if got.shape != want.shape or want.numel() > MAX_NUMEL or not keep.any():
        return ""
    g, w = got.detach().double(), want.detach().double()

    def holds(transform: Callable[[torch.Tensor], torch.Tensor]) -> bool:
        moved = transform(w)
        return (torch.allclose(g[keep], moved[keep], atol=atol, rtol=rtol, equal_nan=True)
                and not torch.allclose(w[keep], moved[keep], atol=atol, rtol=rtol,
                                       equal_nan=True))

    for test in (_constant, _swapped_axes, _along_axis, _shifted, _permuted):
        sentence = test(g, w, keep, holds, dims, (atol, rtol))
        if sentence:
            return sentence
    return ""


def _constant(g, w, keep, holds, dims, tol) -> str:
    """Minus, a constant factor or a constant offset."""
    finite = keep & g.isfinite() & w.isfinite()
    if not finite.any():
        return ""
    if holds(lambda x: -x):
        return "Yours is minus the reference: a sign flipped?"
    gf, wf = g[finite], w[finite]
    norm = (wf * wf).sum()
    if norm > 0:
        c = float((gf * wf).sum() / norm)
        if c != 0 and holds(lambda x: c * x):
            return (f"Yours is the reference times c = {c:.4g}: a constant factor "
                    "(a scale or a count?).")
    c = float((gf - wf).mean())
    if c != 0 and holds(lambda x: x + c):
        return f"Yours is the reference plus c = {c:.4g}: a constant offset."
    if holds(torch.abs):
        return ("Yours is the reference's absolute value, its minus signs lost: an .abs()? "
                "Keep the signs.")
    return ""


def _swapped_axes(g, w, keep, holds, dims, tol) -> str:
    """The reference with two axes of equal size swapped."""
    for i in range(w.dim()):
        for j in range(i + 1, w.dim()):
            if w.shape[i] == w.shape[j] > 1 and holds(lambda x: x.transpose(i, j)):
                return (f"Yours is the reference with axes {_axis(i, dims)} and "
                        f"{_axis(j, dims)} swapped: a transpose?")
    return ""


def _along_axis(g, w, keep, holds, dims, tol) -> str:
    """The reference reversed along an axis, averaged or summed over it (broadcast back),
    or plus a term the same all along it."""
    if w.dim() > 1 and holds(lambda x: x.flip(tuple(range(w.dim())))):
        return "Yours is the reference reversed along every axis: a .flip() too many?"
    for d in (d for d in range(w.dim()) if w.shape[d] > 1):
        name = _axis(d, dims)
        if holds(lambda x: x.flip(d)):
            return (f"Yours is the reference reversed along axis {name}"
                    f"{'' if name == str(d) else f' (dim {d})'}: a .flip({d}), a [::-1] or a "
                    "loop running backwards?")
        for how in ("mean", "sum"):
            if holds(lambda x: getattr(x, how)(d, keepdim=True).expand_as(x)):
                return (f"Yours is the reference's {how} over axis {name}, the same at every "
                        f"{name}: each entry along {name} keeps its own value, no {how}.")
        diff = g - w
        if keep.all() and holds(lambda x: x + diff.narrow(d, 0, 1)):
            return (f"Yours is the reference plus a term the same all along axis {name}: "
                    "something of size 1 on that axis added by broadcasting?")
    return ""


def _shifted(g, w, keep, holds, dims, tol) -> str:
    """The reference rolled by one along an axis."""
    for d in range(w.dim()):
        if w.shape[d] < 3:
            continue
        for step in (1, -1):
            if holds(lambda x: x.roll(step, d)):
                sign = "-" if step == 1 else "+"
                return (f"Yours is the reference shifted by one along axis "
                        f"{_axis(d, dims)} (yours at k holds the expected at k {sign} 1, "
                        "wrapping around): an off-by-one index?")
    return ""


def _permuted(g, w, keep, holds, dims, tol) -> str:
    """The same multiset of values in other places."""
    gk, wk = g[keep], w[keep]
    if gk.numel() < 2 or not (gk.isfinite().all() and wk.isfinite().all()):
        return ""
    mine, ref = gk.sort().values, wk.sort().values
    if torch.allclose(mine, ref, atol=tol[0], rtol=tol[1]):
        return ("Yours holds the right values in the wrong places: an index, order or "
                "axis mixed up?")
    return ""


def shape_relation(got: Sequence[int], want: Sequence[int]) -> str:
    """One sentence naming how shape `got` relates to the expected `want`, or ``""``.

    Tried in order: the same sizes in another order; only axes of size 1 differ; adjacent
    axes merged (or split), the number of entries being the same.

    Args:
        got: the learner's shape.
        want: the expected shape.

    Returns:
        The sentence, or ``""`` when the shapes are equal or no relation holds.
    """
    got, want = [int(n) for n in got], [int(n) for n in want]
    if got == want:
        return ""
    if sorted(got) == sorted(want):
        wrong = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        which = f" (axes {wrong[0]} and {wrong[1]} swapped)" if len(wrong) == 2 else ""
        return f"The same axes in another order{which}: a transpose/permute?"
    if [n for n in got if n != 1] == [n for n in want if n != 1]:
        for k in range(len(got)):
            if got[:k] + got[k + 1:] == want:
                return (f"An extra axis of size 1 (axis {k}): find what added it (an "
                        "unsqueeze or [None], or an input with an axis too many that "
                        "broadcast) rather than squeezing the result.")
        for k in range(len(want)):
            if want[:k] + want[k + 1:] == got:
                return f"A missing axis of size 1 (axis {k}): unsqueeze?"
        return "Only axes of size 1 differ: squeeze/unsqueeze?"
    if prod(got) != prod(want) or 0 in got or 0 in want:
        return ""
    if len(got) < len(want) and _merged(got, want):
        return (f"Yours is the expected shape with axes {_merged(got, want)} merged: "
                "reshape back?")
    if len(got) > len(want) and _merged(want, got):
        return (f"Yours has axes {_merged(want, got)} where the expected shape has one "
                "axis of their product: flatten/reshape them into one?")
    return ""


def merged_out_of_order(got: torch.Tensor, want: torch.Tensor) -> str:
    """A sentence when `got` is `want` with two adjacent axes merged outer-axis-last (the
    rows of a `torch.cat(pieces, 0)` of a list over the second axis: `[T * B, V]` for an
    expected `[B, T, V]`), which no reshape puts back; else ``""``."""
    g, w = list(got.shape), list(want.shape)
    if len(g) != len(w) - 1 or got.numel() != want.numel() or 0 in w:
        return ""
    for a in range(len(g)):
        if w[:a] + [w[a] * w[a + 1]] + w[a + 2:] != g:
            continue
        swapped, g64 = w[:a] + [w[a + 1], w[a]] + w[a + 2:], got.detach().to(want.dtype)
        if 1 in w[a:a + 2] or torch.allclose(g64.reshape(w), want, atol=1e-5, rtol=1e-4):
            return ""  # a reshape does put it back (or no order to tell)
        if torch.allclose(g64.reshape(swapped).transpose(a, a + 1), want, atol=1e-5,
                          rtol=1e-4):
            return (f"Yours holds axes {a}-{a + 1} merged with axis {a + 1} outermost (as a "
                    f"torch.cat along dim {a} of pieces taken along axis {a + 1} gives), "
                    f"which no reshape undoes: stack the pieces along dim {a + 1} instead, "
                    f"torch.stack(pieces, dim={a + 1}).")
    return ""


def _merged(short: list[int], long: list[int]) -> str:
    """The runs of adjacent axes of `long` whose sizes multiply into the axes of `short`,
    e.g. ``"0-1"`` for [6, 4, 9] from [2, 3, 4, 9]; ``""`` when there are none."""
    groups, j = [], 0
    for size in short:
        start, total = j, 1
        while j < len(long) and total * long[j] <= size and (total < size or long[j] == 1):
            total *= long[j]
            j += 1
        if total != size or j == start:
            return ""
        groups.append((start, j - 1))
    if j != len(long):
        return ""
    return ", ".join(f"{a}-{b}" for a, b in groups if b > a)


def distinct_digits(a: float, b: float) -> tuple[str, str]:
    """`a` and `b` with 4 significant digits, more when they would print equal."""
    for p in range(4, 10):
        if f"{a:.{p}g}" != f"{b:.{p}g}":
            break
    return f"{a:.{p}g}", f"{b:.{p}g}"


def half_precision(got: torch.Tensor, want: torch.Tensor, keep: torch.Tensor) -> str:
    """A sentence when `got` (float32 or float64) is as far from `want` as a float16 or
    bfloat16 rounding makes it (within 2^-7 of the largest value), else ``""``."""
    keep = keep & want.isfinite() & got.isfinite()
    if want.dtype not in (torch.float32, torch.float64) or not keep.any():
        return ""
    diff, scale = (got - want)[keep].abs().max().item(), want[keep].abs().max().item()
    if not 2 ** -14 * scale < diff <= 2 ** -7 * max(1.0, scale):
        return ""
    held = got[keep]
    if any(torch.equal(held.to(half).to(held.dtype), held)
           for half in (torch.float16, torch.bfloat16)):  # every value a half's: rounded
        return (f"Your result is only half-precision accurate (off by up to {diff:.1g}): a "
                "float16/bfloat16 step (e.g. .half()) on the way? Keep the inputs' dtype.")
    return (f"Off by up to {diff:.1g}, as a float16/bfloat16 step (.half()) or a small "
            "constant (an eps) would make it: keep the inputs' dtype, add nothing.")
