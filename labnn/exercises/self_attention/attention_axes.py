"""Checks of notebook 01's attention exercises that need no reference mistake list: the
scale the learner divided the scores by, fitted from the answer itself, and a round on
4-D input `[B, H, T, D]` (notebook 01's Ex. 5 reuses both functions on heads).
Named for `labnn.exercises.self_attention.masked_attention`.

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys, `D` width.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.grading.python_slips import name_python_slip
from labnn.exercises.grading.reference_calls import closure_values, globals_read
from labnn.exercises.grading import slips
from labnn.exercises.grading.slips import MADE_SCALE, float64_round
from labnn.exercises.self_attention.fitted_scales import expect_row_scale
from labnn.nn.attention import scaled_dot_product_attention

F32 = torch.float32
AXES_4D = ("on 4-D input [B, H, T, D] (notebook 01's Ex. 5 reuses this function on heads) "
           "your function {did}: count axes from the end (k.transpose(-2, -1), "
           "softmax(dim=-1), q.size(-1)) so it works for any leading axes.")
SWAP_12 = ("on 4-D input [B, H, T, D] (notebook 01's Ex. 5 reuses this function on heads) "
           "k.transpose(1, 2) swaps the wrong axes (H and S, not S and D): use "
           "k.transpose(-2, -1) (counted from the end) so it works for any leading axes.")

PERMUTE = ("on 4-D input [B, H, T, D] (notebook 01's Ex. 5 reuses this function on heads) "
           "a permute of 3 axes (k.permute(0, 2, 1)?) fails: the heads have 4; swap the "
           "last two with k.transpose(-2, -1) (or k.mT), which works for any leading axes.")
EINSUM = ("on 4-D input [B, H, T, D] (notebook 01's Ex. 5 reuses this function on heads) "
          "your einsum equation names exactly 3 axes: name the leading ones with an "
          "ellipsis, einsum('...td,...sd->...ts', q, k).")


def beyond_float32(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`grading.slips.beyond_float32` times 5/3, not 1/3: scores a little larger than the
    inputs', so that the error a `.float()` leaves in the softmax's weights exceeds 1e-8 of
    them (less reads as an eps added, not a float32 step)."""
    return slips.beyond_float32(*tensors, factor=5 / 3)


def expect_scale(weights: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    """Fail, naming the constant, when `weights` are exactly softmax(q kᵀ / c) over the
    keys for a constant c other than sqrt(d) (d = q.size(-1)): c is fitted by least
    squares from the log-weights, which are the scores / c up to a constant per row; a c
    just off sqrt(d) (an eps added) is named too when the weights differ."""
    w = weights.detach().double()
    if not (torch.isfinite(w).all() and (w > 0).all() and close(w.sum(-1), w.new_ones(())
                                                                .expand(w.shape[:-1]))):
        return
    s = (q @ k.transpose(-2, -1)).double()
    x, y = s - s.mean(-1, keepdim=True), w.log() - w.log().mean(-1, keepdim=True)
    a = float((x * y).sum() / (x * x).sum())
    if a <= 0 or float((y - a * x).abs().max()) > 1e-4 * float(y.abs().max()):
        expect_row_scale(w, q, k)  # a divisor per query, q.norm(dim=-1): named
        return
    c, d = 1 / a, q.size(-1)
    if abs(c - math.sqrt(d)) < 1e-3 * math.sqrt(d):
        if close(w, (s / math.sqrt(d)).softmax(-1)):
            return
        fail(f"your scores are divided by {c:.6g}, not by sqrt(d) = sqrt(q.size(-1)) = "
             f"sqrt({d}) = {math.sqrt(d):.6g}: a little off (an eps added to the scale?), "
             "which changes every weight; divide by math.sqrt(q.size(-1)) exactly.")
    for rounded in (int, round):
        if abs(c - rounded(math.sqrt(d))) < 1e-3 * c:  # or sqrt(c²), a width written out
            fail(f"your scores are divided by {c:.4g} = sqrt({round(c * c)}), a width written "
                 f"as a number, or {rounded.__name__}(sqrt({d})), the scale rounded: divide "
                 f"by math.sqrt(q.size(-1)) (≈ {math.sqrt(d):.4g}), the width of q itself.")
    if abs(c - d) < 1e-3 * d:
        fail(f"your scores are divided by d = q.size(-1) = {d}, not by sqrt(d): the scale "
             "applied twice (q and k each divided by sqrt(d)) or the square root left out; "
             "divide the scores once, by math.sqrt(q.size(-1)).")
    n = round(c * c)
    root = f" = sqrt({n})" if n > 0 and abs(math.sqrt(n) - c) < 1e-3 * c else ""
    fail(f"your scores are divided by c ≈ {c:.4g}{root}, not by sqrt(d) = "
         f"sqrt(q.size(-1)) = sqrt({d}): a global d (or another constant) from another "
         "cell? Use math.sqrt(q.size(-1)).")


def expect_output_scale(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor) -> None:
    """`expect_scale` for an output `w @ v` (v `[B, S, D]` with S <= D: w is recovered
    exactly with v's pseudo-inverse)."""
    if v.size(-2) <= v.size(-1) and got.shape == q.shape[:-1] + v.shape[-1:]:
        w = got.detach().double() @ torch.linalg.pinv(v.double())
        expect_scale(w, q, k)


def expect_4d(fn: Callable, shapes: tuple[int, int, int, int, int], output: bool,
              mask: torch.Tensor | None = None, width: int | None = None) -> None:
    """Run `fn` on 4-D q, k (and v, `output`) `[B, H, T|S, D]` (`shapes` = B, H, T, S, D)
    and fail unless it matches the reference; a k.transpose(1, 2) is named when a cube
    (H = S = D, where it runs) shows it, and a scale by sqrt(`width`), the width of the
    3-D rounds (another D), as that width written as a number."""
    b, h, t, s, d = shapes
    gen = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(b, h, n, d, generator=gen, dtype=F32) for n in (t, s, s))
    args = (q, k, v) if output else (q, k)
    ref = scaled_dot_product_attention(q, k, v, mask)[0 if output else 1]
    try:
        got = fn(*(a.clone() for a in args), *(() if mask is None else (mask,)))
    except Exception as err:
        if "einsum" in str(err) and "number of subscripts" in str(err):
            fail(EINSUM)
        name_python_slip(err)  # e.g. torch.bmm on 4-D heads
        _name_swap(fn, output)
        said = str(err).strip().splitlines()[0].split(" i.e. ")[0][:120]
        if "permute" in str(err) and "len(dims) = 3" in str(err):
            fail(PERMUTE)
        fail(AXES_4D.format(did=f"raised {type(err).__name__} ({said})"))
    if not (isinstance(got, torch.Tensor) and got.shape == ref.shape and close(got, ref)):
        _name_swap(fn, output)
        _name_front_axis(got, q, k, v if output else None, mask, width, fn)
        fail(AXES_4D.format(did="gives another result than on each [B, T, D] slice"))
    if output:  # the one dtype rule, float64 in and out (Ex. 1's own last call asks it)
        q, k, v = beyond_float32(q, k, v)
        float64_round(lambda *a: fn(*a, *(() if mask is None else (mask,))),
                      "your function on 4-D heads", (q, k, v),
                      scaled_dot_product_attention(q, k, v, mask)[0], made=MADE_SCALE)


def _name_swap(fn: Callable, output: bool) -> None:
    """Fail with SWAP_12 when `fn` equals the k.transpose(1, 2) slip on a cube."""
    n = 3
    gen = torch.Generator().manual_seed(32)
    q = torch.randn(2, n, 2, n, generator=gen, dtype=F32)
    k, v = torch.randn(2, 2, n, n, n, generator=gen, dtype=F32)
    w = (q @ k.transpose(1, 2) / math.sqrt(n)).softmax(-1)
    try:
        got = fn(q.clone(), k.clone(), v.clone()) if output else fn(q.clone(), k.clone())
    except Exception:
        return
    if isinstance(got, torch.Tensor) and close(got, w @ v if output else w):
        fail(SWAP_12)


def _name_front_axis(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor | None, mask: torch.Tensor | None,
                     width: int | None = None, fn: Callable | None = None) -> None:
    """Fail naming the axis counted from the front when `got` (on 4-D heads) equals the
    reference recomputed with q.shape[2] (= T) as the width or softmax(dim=2); or naming
    a number when it is scaled by sqrt(`width`), the width of the 3-D rounds (a scale kept
    between calls when `fn`'s code, globals and closure hold no such number)."""
    t, d = q.size(2), q.size(-1)
    head = "on 4-D heads [B, H, T, D] (notebook 01's Ex. 5 reuses this function) "
    slips = [(math.sqrt(t), -1, f"q.shape[2] is T (= {t}), not the width: scale by "
                                "sqrt(q.size(-1))."),
             (math.sqrt(d), 2, "dim=2 is the query axis: softmax over the keys, dim=-1.")]
    model_width = q.size(1) * d
    if width != model_width and model_width not in (t, d):
        slips.append((math.sqrt(model_width), -1, f"your scores are divided by sqrt(H * D_h) = "
                      f"sqrt({model_width}), the model's width: on heads, scale by a head's "
                      "width, sqrt(q.size(-1))."))
    if width not in (None, t, d):
        kept = fn is not None and hasattr(fn, "__code__") and not _holds_width(fn, width)
        said = ("of an earlier call's inputs, kept between calls (a cache or a global set "
                "on the first call?)" if kept else
                "of the check's first inputs written as a number")
        if width == q.size(1) * d:  # the same number as the model's width on these heads
            said += " or H * D_h, the model's width"
        slips.append((math.sqrt(width), -1, f"your scores are divided by sqrt({width}), the "
                      f"width {said}, but here q.size(-1) = {d}: read it from the input on "
                      "every call, math.sqrt(q.size(-1))."))
    for c, dim, said in slips:
        s = q @ k.transpose(-2, -1) / c
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(dim)
        want = w if v is None else w.nan_to_num(0.0) @ v
        if isinstance(got, torch.Tensor) and got.shape == want.shape and close(
                got.nan_to_num(0.0), want.nan_to_num(0.0)):
            fail(head + said)


def _holds_width(fn: Callable, width: int) -> bool:
    """Whether `fn`'s code (nested functions included), the globals it reads or its
    closure hold `width`, its square root or their inverses as a number."""
    values = [*closure_values(fn), *globals_read(fn).values()]
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        values += code.co_consts
        codes += [c for c in code.co_consts if hasattr(c, "co_consts")]
    targets = (width, math.sqrt(width), 1 / width, width ** -0.5)
    return any(isinstance(n, (int, float)) and not isinstance(n, bool)
               and any(abs(n - x) < 1e-6 * x for x in targets) for n in values)
