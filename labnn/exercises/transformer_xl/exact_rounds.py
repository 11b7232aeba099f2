"""Rounds of notebook 02's shift and scores (`labnn.exercises.transformer_xl.relative_scores`,
Exercises 4-5) that the check's small float32 inputs cannot show:

- a row as long as a model's memory (`S = 2100`, in float32, then bfloat16; the scores'
  inputs small whole numbers, so that a wrong column stands out of bfloat16's rounding),
  where indices kept in a small dtype or in x's own dtype go wrong (or out of the row:
  torch's bare out-of-bounds error is named); then 300 queries
  (`many_queries`), where a query index in int8 or a flat index in int16 wraps;
- float64 inputs compared at float64's precision on the entries a query may see (a shift
  is a permutation, exact; a float32 step shows, though a scale that is one float32
  number passes: it rounds a constant, not the values);
- an input edited in place though its values came back the same;
- a scale rounded to an integer, which at the check's sizes (2 = sqrt(T), 3 = sqrt(S))
  gives the numbers of a scale by the queries or the keys, or a root taken in float16 or
  bfloat16 (off by one factor near 1, which reads as a float16 step on the values).

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `M` memory,
`S = M + T` keys, `D_h` head width.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_like, expect_tensor, fail,
                                     first_position)
from labnn.exercises.grading.devices import cpu_dtype
from labnn.exercises.grading.slips import MADE_SCALE, expect_float64_accurate, float64_round
from labnn.exercises.transformer_xl import other_sizes
from labnn.exercises.transformer_xl.many_queries import many_scores, many_shift
from labnn.exercises.transformer_xl.more_inputs import SMALL_TYPES
from labnn.exercises.transformer_xl.relative_distances import VISIBLE, _randn
from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift


def long_shift(fn: Callable, what: str) -> None:
    """`fn(x)` with x `[1, 1, 3, 2100]`, in float32 then in bfloat16: the visible entries
    must be x's own, moved (a permutation: compared exactly); then 300 queries."""
    x = _randn(1, 1, 3, 2100, seed=12)
    _long_rounds(fn, f"{what} with x [1, 1, 3, 2100]", (x,), relative_shift,
                 "moves wrong numbers to", "x", tol=0.0)
    many_shift(fn, what)


def long_scores(fn: Callable, what: str) -> None:
    """`fn(q, k, r, u, v)` with S = 2100 keys and D_h = 4, in float32 then in bfloat16, its
    inputs whole numbers in [-1, 1]: every right score is a multiple of 1/2 of at most 8,
    so a score read from a wrong column is off by 1/2 or more, and bfloat16's rounding of
    another order of the same sums (at most 1/16 here) by far less; compared to 0.2 (a
    shift of its own whose indices are made in q's dtype shows); then 300 queries."""
    g = torch.Generator().manual_seed(14)
    q, k, r, u, v = (torch.randint(-1, 2, shape, generator=g).float() for shape in
                     ((1, 1, 3, 4), (1, 1, 2100, 4), (2100, 1, 4), (1, 4), (1, 4)))

    def scores(q, k, r, u, v):
        content = (q + u[:, None]) @ k.transpose(-2, -1)
        return (content + relative_shift((q + v[:, None]) @ r.permute(1, 2, 0))) / 2

    _long_rounds(fn, f"{what} with k [1, 1, 2100, 4]", (q, k, r, u, v), scores,
                 "gives wrong scores at", "q", tol=0.2)
    many_scores(fn, what)


def _long_rounds(fn: Callable, said: str, inputs: tuple, reference: Callable,
                 wrong_at: str, own: str, tol: float) -> None:
    """`fn(*inputs)` in float32, then bfloat16, against `reference` to `tol` on the entries
    a query may see: failing names indices in a small dtype, or in the dtype of the input
    named `own`."""
    for dtype in (torch.float32, torch.bfloat16):
        called = f"{said} ({str(dtype)[6:]}, S as long as a model's)"
        args = [x.to(dtype) for x in inputs]
        want = reference(*args).float()

        def past_end(err: Exception, called: str = called) -> None:
            """An index that rounded or wrapped out of the row: torch's bare IndexError."""
            out = re.search(r"index (-?\d+) is out of bounds for dimension \d+ with size (\d+)",
                            str(err))
            if out:
                fail(f"{called}: an index reached {out[1]}, outside the {out[2]} positions: "
                     f"indices in a small dtype round or wrap, clamped or not ({SMALL_TYPES}):"
                     f" make them int64, torch.arange(S, device={own}.device).")
        got = expect_tensor(call(fn, called, *(x.clone() for x in args), diagnose=past_end),
                            called)
        cpu_dtype(fn, called, args, got, want.to(dtype))
        expect_like(got, want.to(dtype), called)
        off = (got.detach().float() - want).abs()
        wrong = ~(off <= tol) & causal_mask(*want.shape[-2:])  # NaN counts as wrong
        if not wrong.any():
            continue
        where = first_position(wrong, "b h i j")
        if dtype == torch.float32:
            fail(f"{called} {wrong_at} {where}: right for short rows only: index "
                 f"arithmetic in a small dtype? ({SMALL_TYPES}): make indices int64, "
                 f"torch.arange(S, device={own}.device).")
        fail(f"{called} {wrong_at} {where}, though right in float32: indices made in "
             f"{own}'s dtype (dtype={own}.dtype)? bfloat16 holds whole numbers up to 256 "
             f"only: make indices int64 (torch.arange(S, device={own}.device)), values in "
             f"{own}'s dtype.")


def float64_seen(fn: Callable, what: str, args: tuple, want: torch.Tensor,
                 scale_ok: bool = False) -> None:
    """`float64_round` (the dtype), then `fn(*args)` once more compared with `want` at
    float64's precision on the entries a query may see (`VISIBLE`); `scale_ok`: a result
    off by one factor within float32's rounding passes (a scale that is a 0-dim float32
    tensor, torch.tensor(d).sqrt(): one number, not a float32 step on the values)."""
    float64_round(fn, what, args, want, precise=False)
    got = fn(*(a.clone() for a in args)).detach()[..., VISIBLE]
    want = want[..., VISIBLE]
    factor = float((got * want).sum() / (want * want).sum())
    if scale_ok and abs(factor - 1) < 2e-7 and close(got, want * factor, 1e-12, 1e-10):
        return
    expect_float64_accurate(got, want, f"{what} with float64 inputs", MADE_SCALE)


def edited_in_place(what: str, inputs: dict[str, torch.Tensor]) -> None:
    """Fail when the learner's call bumped the version of one of `inputs` (fresh copies):
    an in-place edit, though the values came back the same (e.g. `q += u * 0`)."""
    for name, tensor in inputs.items():
        if tensor._version:
            fail(f"{what} edits its input `{name}` in place (e.g. {name} += ...), though the "
                 "values came back the same here: that changes the caller's tensor, and "
                 f"autograd refuses it when `{name}` requires grad: compute a new tensor "
                 f"({name} + ...).")


def _rounded(got: torch.Tensor, want: torch.Tensor, d_h: int) -> dict[str, float]:
    """The roots `got` may have been divided by where `want` was divided by sqrt(d_h) (on
    the entries a query may see), by how they were rounded: "int" (down or up to a whole
    number), "float16", "bfloat16" (the root, or 1 / the root by rsqrt, taken in that
    dtype); empty if none."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return {}
    seen, exact = causal_mask(*want.shape[-2:]), math.sqrt(d_h)
    roots = [("int", n) for n in (math.isqrt(d_h), math.isqrt(d_h) + 1)] + [
        (str(t).split(".")[1], root) for t in (torch.float16, torch.bfloat16) for root in (
            float(torch.tensor(float(d_h), dtype=t).sqrt()),
            1 / float(torch.tensor(float(d_h), dtype=t).rsqrt()))]
    return {how: n for how, n in roots if n != exact and close(
        got.detach()[..., seen], (want * exact / n)[..., seen], 2e-6, 1e-5)}


def rounded_scale(fn: Callable, got: torch.Tensor, want: torch.Tensor, d_h: int) -> None:
    """Fail when `got` is `want` scaled by sqrt(d_h) rounded to a whole number (down or
    up: 2 or 3 for 8, where 3 is also sqrt(S)) or taken in float16 or bfloat16 (one number
    for 8 in both), and so is `fn`'s result at `other_sizes`' inputs (D_h = 6, T = 5,
    where neither whole number is sqrt(T) nor sqrt(S), and the two dtypes differ)."""
    first = _rounded(got, want, d_h)
    if not first:
        return
    inputs, reference = other_sizes.score_inputs()
    try:
        again = fn(*(x.clone() for x in inputs))
    except Exception:  # named later, by other_sizes
        return
    second = _rounded(again, reference, other_sizes.D_H)
    if "int" in first and "int" in second:
        fail(f"you rounded the scale to an integer: {first['int']:g} for d_head = {d_h}, "
             f"{second['int']:g} for {other_sizes.D_H} (round, math.ceil, int or math.isqrt "
             "of the root): divide by the exact root, math.sqrt(q.size(-1)) (or "
             "q.size(-1) ** 0.5).")
    hows = [how for how in ("float16", "bfloat16") if how in first and how in second]
    if hows:  # both where they round alike at both sizes (an rsqrt): said in a fixed order
        fail(f"the root itself is rounded to {' or '.join(hows)}: {first[hows[0]]:g} for "
             f"sqrt({d_h}) = {math.sqrt(d_h):.6g} (e.g. torch.tensor(d, dtype=torch.{hows[0]})"
             ".sqrt()), so every score is off by that factor: take the root in Python, "
             "math.sqrt(q.size(-1)), or in the inputs' dtype.")
