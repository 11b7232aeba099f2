"""Answers that hold only at the check's own sizes: `check_heads` and
`check_multi_head_attention` run the learner's functions once more on inputs where every
size differs (`x` `[3, 7, 32]`, 4 heads of 8), so that a batch, length or width written
as a number (`.view(2, 5, H, 24 // H)`, `.reshape(B, T, 24)`) fails by name.

Dimension letters (the package legend): `B` batch, `T` tokens, `D` width, `H` heads,
`D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.nn.attention import MultiHeadAttention, causal_mask

OTHER = (3, 7, 32)  # B, T, D: each differs from the checks' 2, 5, 24
FIX = ("read every size from the inputs (x.shape, mha.n_heads or n_heads), never a "
       "number: the check's own sizes are B = 2, T = 5, D = 24")


def _other_x() -> torch.Tensor:
    return torch.randn(*OTHER, generator=torch.Generator().manual_seed(21))


def _same(what: str, run: Callable[[], torch.Tensor], want: torch.Tensor) -> None:
    """Fail unless `run()` gives `want` (a crash fails with its first line)."""
    try:
        got = run()
    except Exception as err:
        line = (str(err).strip().splitlines() or [""])[0][:150]
        fail(f"{what} raised {type(err).__name__} ({line}): it runs at the check's sizes "
             f"but not at these: {FIX}.")
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape
            and close(got.detach(), want)):
        shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        fail(f"{what} gives {shape}, expected {list(want.shape)} equal to the reference: "
             f"right at the check's sizes, wrong at these: {FIX}.")


def expect_any_size_heads(split_heads: Callable, merge_heads: Callable, h: int) -> None:
    """`split_heads` and `merge_heads` on `[3, 7, 32]` with `h` heads."""
    x = _other_x()
    b, t, d = OTHER
    heads = x.view(b, t, h, d // h).transpose(1, 2)
    _same(f"split_heads(x, {h}) with x [3, 7, 32]", lambda: split_heads(x.clone(), h), heads)
    _same(f"merge_heads(x) with x [3, {h}, 7, {d // h}]",
          lambda: merge_heads(heads.clone()), x)


def expect_any_size_attention(fn: Callable, h: int) -> None:
    """`fn(x, mha, mask)` on `[3, 7, 32]` with a `MultiHeadAttention(32, h)`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(22)
        mha = MultiHeadAttention(OTHER[2], h).eval()
    x, mask = _other_x(), causal_mask(OTHER[1])
    with torch.no_grad():
        want = mha(x, mask)[0]
        _same(f"multi_head_attention(x, mha, mask) with x [3, 7, 32], mha = "
              f"MultiHeadAttention(32, {h})", lambda: fn(x.clone(), mha, mask.clone()), want)
