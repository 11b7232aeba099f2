"""Notebook 03's `feedback_attention` with q·k divided by a function of the head width
other than its square root: `log(d)`, `log2(d)`, `d ** 1/2` (which Python reads as
`(d ** 1) / 2`), `2 * sqrt(d)`, `sqrt(d - 1)`. Each is named only where the rerun at another
head width (`D_h = 9`, every other size changed too) divides by the same function of it;
`log2(d)` and `d / 2` equal `sqrt(d)` at the check's `D_h = 4`, so they show only there.
Also an einsum that gives a batch axis a letter of its own, and so sums over it
(`'bhd,chsd->bhs'`). Used by `feedback_attention_slips.written_scale` and `other_sizes`.

Dimension letters: `B` batch, `H` heads, `S` memory keys, `D_h` head width.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.grading.sizes import randn
from labnn.exercises.grading.slips import gives
from labnn.feedback.layer import feedback_attention

FIX = "divide by sqrt(d_head), math.sqrt(q.size(-1)) or q.size(-1) ** 0.5."
SCALES: tuple[tuple[Callable[[int], float], str], ...] = (
    (math.log, "log(d_head), the natural log, where the scale is sqrt(d_head)"),
    (math.log2, "log2(d_head), which equals sqrt(d_head) only at d_head = 4 and 16"),
    (math.log10, "log10(d_head), where the scale is sqrt(d_head)"),
    (lambda d: d / 2, "d_head / 2 (d ** 1/2 is (d ** 1) / 2 in Python, equal to sqrt(d) "
                      "only at d = 4: write d ** 0.5)"),
    (lambda d: 2 * math.sqrt(d), "2·sqrt(d_head), twice the scale"),
    (lambda d: math.sqrt(d - 1), "sqrt(d_head - 1)"),
    (lambda d: math.sqrt(d + 1), "sqrt(d_head + 1)"),
    (lambda d: d ** 0.25, "d_head ** 0.25 (a square root taken twice?)"),
    (lambda d: math.sqrt(2 * d), "sqrt(2·d_head)"),
)
ELSEWHERE = (3, 2, 4, 9)  # B, H, S, D_h of the rerun: each differs from the check's own


def _scaled(q, k, v, bias, c: float) -> torch.Tensor:
    """The attention with q·k divided by `c`."""
    return feedback_attention(q * math.sqrt(q.size(-1)) / c, k, v, bias)


def _elsewhere() -> tuple[torch.Tensor, ...]:
    b, h, s, d = ELSEWHERE
    return tuple(randn(*shape, seed=90 + i) for i, shape in enumerate(
        ((b, h, d), (b, h, s, d), (b, h, s, d), (h, s))))


def named_function(fn: Callable, got: torch.Tensor, q, k, v, bias, what: str) -> None:
    """Fail when `got = fn(q, k, v, bias)` divides q·k by one of `SCALES` of `D_h`, here
    and, rerun, at `D_h = 9` too."""
    d, got = q.size(-1), got.detach()
    q9, k9, v9, bias9 = _elsewhere()
    for f, said in SCALES:
        if math.isclose(f(d), math.sqrt(d)) or not close(got, _scaled(q, k, v, bias, f(d))):
            continue
        if gives(fn, q9, k9, v9, bias9, _scaled(q9, k9, v9, bias9, f(9))):
            fail(f"{what}: you divided q·k by {said}: {f(d):.4g} at d_head = {d}, "
                 f"{f(9):.4g} at d_head = 9; {FIX}")


def at_other_size(fn: Callable, q, k, v, bias, what: str) -> None:
    """At the rerun's own sizes (`q`... at another `D_h`), name a function of `SCALES` that
    equals sqrt at the check's `D_h = 4` (log2, d / 2) and fails here."""
    d = q.size(-1)
    try:
        got = fn(q.clone(), k.clone(), v.clone(), bias.clone())
    except Exception:  # noqa: BLE001 (the caller names it)
        return
    if not isinstance(got, torch.Tensor) or got.shape != q.shape:
        return
    for f, said in SCALES:
        if math.isclose(f(4), 2.0) and not math.isclose(f(d), math.sqrt(d)) and close(
                got.detach(), _scaled(q, k, v, bias, f(d))):
            fail(f"{what}: you divided q·k by {said}: right at the check's d_head = 4, "
                 f"{f(d):.4g} here, where sqrt(d_head) = {math.sqrt(d):.4g}; {FIX}")


def batch_letters(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`(result, message)` pairs: an einsum whose batch letter differs between q and k, or
    between the weights and v, so that it sums over that batch axis."""
    scale = math.sqrt(q.size(-1))
    weights = (torch.einsum("bhd,bhsd->bhs", q, k) / scale + bias).softmax(-1)

    def said(name: str, wrong: str, right: str) -> str:
        return (f"your result sums {name} over the batch axis, mixing the batch entries (an "
                f"einsum with a letter of its own for that batch axis, {wrong!r}?): use one "
                f"letter for the batch in every operand, {right!r}.")
    return [
        (feedback_attention(q, k.sum(0, keepdim=True).expand_as(k), v, bias),
         said("the keys k", "bhd,chsd->bhs", "bhd,bhsd->bhs")),
        (feedback_attention(q.sum(0, keepdim=True).expand_as(q), k, v, bias),
         said("the query q", "chd,bhsd->bhs", "bhd,bhsd->bhs")),
        (torch.einsum("bhs,hsd->bhd", weights, v.sum(0)), said("the values v", "bhs,chsd->bhd",
                                                               "bhs,bhsd->bhd")),
    ]


def swapped_letters(err: Exception, fn: Callable, q, k, v, bias, what: str) -> None:
    """A `diagnose` for an einsum that reads k or v as `[H, B, S, D_h]` (`'bhd,hbsd->bhs'`):
    it raises where B != H; rerun with B = H, where it runs, and compare."""
    if not isinstance(err, RuntimeError) or "einsum" not in str(err):
        return
    h = q.size(1)
    q3, k3, v3 = (t.detach().repeat(h, *[1] * (t.dim() - 1))[:h] for t in (q, k, v))
    k3, v3 = k3 + 0.1 * randn(*k3.shape, seed=97), v3 + 0.1 * randn(*v3.shape, seed=98)
    bias = bias.detach()
    for swap_k, swap_v, said in ((1, 0, "k"), (0, 1, "v"), (1, 1, "k and v")):
        ks, vs = (t.transpose(0, 1) if s else t for t, s in ((k3, swap_k), (v3, swap_v)))
        if gives(fn, q3, k3, v3, bias, feedback_attention(q3, ks, vs, bias)):
            fail(f"{what} raised RuntimeError where B = {q.size(0)}, H = {h}, and with B = H "
                 f"it runs but reads {said} as [H, B, S, D_h]: your einsum swaps the batch "
                 "and head letters ('hbsd'); keep their order, 'bhd,bhsd->bhs' and "
                 f"'bhs,bhsd->bhd'. (torch said: {str(err).splitlines()[0][:120]})")
