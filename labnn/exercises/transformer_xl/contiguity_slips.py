"""Notebook 02's relative shift (Ex. 4) and scores (Ex. 5) on inputs laid out in memory
as a model hands them over, not as a fresh `torch.randn` is:

- x transposed, as an einsum's output often is;
- x whose heads lie before its batch in memory, as `einsum('bhtd,shd->bhts', ...)` gives;
- x a slice of a larger tensor: contiguous but at a storage offset, or with columns cut off,
  so that its rows lie further apart than S;
- for the scores, q and k with their heads moved before the tokens, as the model's
  projection gives them.

A shift that reads the storage as if x were contiguous from its start (`as_strided` with
strides of its own, an absolute offset) passes on a fresh tensor only, one with strides
built from x's refuses the transpose (a negative stride), and `.view` fails on most of
these; each is named, for `labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys,
`D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import call, expect_tensor, fail
from labnn.exercises.transformer_xl.relative_distances import B, H, S, T, _randn, _visible_close
from labnn.xl.relative_attention import relative_shift

LAYOUT = ("on a non-contiguous x (the einsum's output is one) your shift differs: "
          "as_strided / strides assume a contiguous layout: use F.pad + view (after "
          ".contiguous()) or reshape.")


def strided_shift(x: torch.Tensor) -> torch.Tensor:
    """The shift by `as_strided` with the strides of a contiguous x, whatever its layout."""
    *lead, t, s = x.shape
    strides, acc = [], t * s
    for n in reversed(lead):
        strides.insert(0, acc)
        acc *= n
    return x.as_strided(x.shape, (*strides, s - 1, 1), x.storage_offset() + t - 1)


def expect_any_layout(fn: Callable, what: str) -> None:
    """Ex. 4: the shift of a transposed (non-contiguous) x `[B, H, T, S]` must not depend
    on its layout."""
    x = _randn(B, H, S, T, seed=11).transpose(-1, -2)
    said = f"{what} with a non-contiguous x [B, H, T, S] (a transpose, as einsum gives)"
    x_in = x.transpose(-1, -2).clone().transpose(-1, -2)  # a copy, as non-contiguous
    got = expect_tensor(call(fn, said, x_in, advice="use reshape, not view, on x",
                             diagnose=negative_stride(said, x_in)), what)
    if got.shape == x.shape and not _visible_close(got, relative_shift(x)):
        fail(f"{what}: {LAYOUT}")
    x = _randn(B, H, T, S, seed=13)
    x_in = torch.cat([-x, x])[B:]  # contiguous, but not at the storage's start
    said = f"{what} with x = big[{B}:] (contiguous, x.storage_offset() = {x_in.storage_offset()})"
    got = expect_tensor(call(fn, said, x_in), what)
    if got.shape == x.shape and not _visible_close(got, relative_shift(x)):
        fail(f"{said} differs: as_strided's offset counts from the storage's start, not x's: "
             "add x.storage_offset() (or use F.pad + reshape).")
    x_in = _randn(H, B, T, S, seed=15).transpose(0, 1)  # heads before batch in memory
    said = (f"{what} with x [B, H, T, S] whose heads lie before its batch in memory (as "
            "einsum('bhtd,shd->bhts', ...) gives it)")
    got = expect_tensor(call(fn, said, x_in, diagnose=view_needs_reshape(said, "x")), what)
    if got.shape == x_in.shape and not _visible_close(got, relative_shift(x_in)):
        fail(f"{what}: {LAYOUT}")
    x_in = torch.cat([x, x[..., :3]], -1)[..., :S]  # rows S + 3 apart: a column slice
    said = f"{what} with x = wide[..., :{S}] (rows {S + 3} apart in memory: x.stride(-2))"
    got = expect_tensor(call(fn, said, x_in), what)
    if got.shape == x.shape and not _visible_close(got, relative_shift(x)):
        fail(f"{said} differs: its rows lie x.stride(-2) = {S + 3} apart, not S: as_strided "
             "must read the strides from x (or use F.pad + reshape).")


def negative_stride(said: str, x: torch.Tensor) -> Callable[[Exception], None]:
    """A `call` diagnosis: `as_strided` refused a negative stride, built from the strides
    of a non-contiguous x (`x.stride(-2) - x.stride(-1)` is negative on a transpose)."""
    def diagnose(err: Exception) -> None:
        if "as_strided" in str(err) and "egative strides" in str(err):
            fail(f"{said}: as_strided refused a negative stride: strides built from x's "
                 f"(here x.stride() = {tuple(x.stride())}), e.g. x.stride(-2) - "
                 "x.stride(-1), come out negative on a transpose. Call x = x.contiguous() "
                 "first (it copies only when it must), or use F.pad + reshape.")
    return diagnose


def view_needs_reshape(said: str, names: str) -> Callable[[Exception], None]:
    """A `call` diagnosis: `.view` refused the layout of the inputs `names`."""
    def diagnose(err: Exception) -> None:
        if "view size is not compatible" in str(err):
            fail(f"{said}: .view cannot regroup axes that are not adjacent in memory, as "
                 f"here ({names}): use .reshape (or .flatten), which copies only when it "
                 "must.")
    return diagnose


def scores_any_layout(fn: Callable, what: str, inputs: tuple, want: torch.Tensor) -> None:
    """Ex. 5: q and k as the model hands them over, `[B, T, H, D_h]` projections with the
    heads moved before the tokens (not contiguous); the values of `inputs`."""
    q, k, r, u, v = inputs
    q_in, k_in = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k))
    said = f"{what} with q and k not contiguous (heads moved, as the model's projection gives)"
    got = expect_tensor(call(fn, said, q_in, k_in, r.clone(), u.clone(), v.clone(),
                             diagnose=view_needs_reshape(said, "q, k")), what)
    if got.shape == want.shape and not _visible_close(got, want):
        fail(f"{said} differs: as_strided / strides assume a contiguous layout: use reshape, "
             "einsum or @, which follow any layout.")


def layout_slips(q, k, r, u, v) -> list[tuple[torch.Tensor, str]]:
    """Ex. 5: the scores with the content term right and the position term shifted by
    `strided_shift` on the (non-contiguous) einsum output."""
    content = (q + u[:, None]) @ k.transpose(-2, -1)
    position = torch.einsum("bhid,rhd->bhir", q + v[:, None], r)
    if position.is_contiguous():
        return []
    return [((content + strided_shift(position)) / q.size(-1) ** 0.5,
             "the content term (a)+(c) is right, the position term (b)+(d) wrong: your "
             "relative shift is wrong on a non-contiguous input (the einsum's output): "
             "fix it in Ex. 4 (see its check) or call .contiguous() before it.")]
