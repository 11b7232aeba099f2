"""Rounds of notebook 02 with many queries, where an index kept in a small integer type
wraps though it held at every other round's sizes (at most 5 queries, `T * S` at most
about 6,300, `M + T` at most 9): a query index in int8 (past 127) or uint8 (past 255), a
flat index `i * S + j` in int16 (past 32767), a memory index past 127.

- the shift and the scores with `T = 300` queries and `S = 320` keys (`T * S = 96,000`),
  in float32 (`many_shift`, `many_scores`; their rows as long as a model's are
  `exact_rounds`' long rounds);
- the distances `relative_distances(300, 20)` (`many_distances`);
- the memory update with `M + T = 300` states, keeping 24 (`long_memory`), where an index
  in bfloat16 rounds 299 to 300, out of bounds; then with bfloat16 states (shape, device
  and dtype judged), where a float32 tensor joined with them makes the memory float32.

One round each, without a larger one: an answer that loops over every entry (about 50,000
here) still takes well under a second or two.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `M` memory,
`S = M + T` keys, `D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import (call, close, describe_shape, expect_like, expect_tensor,
                                     fail, first_position)
from labnn.exercises.grading.outcomes import first_line
from labnn.nn.attention import causal_mask
from labnn.xl.memory import update_memory
from labnn.xl.relative_attention import relative_shift

T, M = 300, 20  # T > 255 queries, T * S > 32767
S = M + T
INT64 = "build indices with torch.arange(..., device={}.device), int64, the default."


def _wrapped(wrong: torch.Tensor, s: int) -> str:
    """What wraps, from the entries `[..., T, S]` that are wrong (`wrong`, boolean): a
    query index when every query before 128 (256) is right, a flat index `i * S + j` when
    every entry before about 32768 is."""
    wrong = wrong.reshape(-1, *wrong.shape[-2:]).any(0)
    i, j = (int(x) for x in wrong.nonzero()[0])  # the first wrong entry, row by row
    for top, kind in ((128, "int8"), (256, "uint8")):
        if i == top:
            return (f"right for queries 0 to {top - 1}: a query index in {kind} (holds up "
                    f"to {top - 1}) wraps?")
    t = wrong.size(0)
    if i * s + j >= 2 ** 15 - 2 * t:  # a padded row or an offset moves it by at most 2T
        return (f"right before it, at i * S + j = {i * s + j} (int16 holds up to 32767): a "
                "flat index i * S + j in int16 wraps?")
    return ("right with few queries: index arithmetic in a small dtype (int8 holds up to "
            "127, uint8 255, int16 32767)?")


def _many(fn: Callable, what: str, make: Callable, tol: float, own: str) -> None:
    """`fn(*inputs)` against `want` `[..., T, S]` (`make(T, M)` gives both) to `tol` on
    the entries a query may see; failing names what wraps (`_wrapped`). When it raises,
    a rerun with 160 queries and no memory (`T * S = 25,600`: no int16 flat index wraps)
    tells an int16 flat index from the rest."""
    inputs, want = make(T, M)
    said = f"{what} with {_shapes(inputs)} ({T} queries)"

    def diagnose(err: Exception) -> None:
        smaller, reference = make(160, 0)
        try:
            again = fn(*(x.clone() for x in smaller))
        except Exception:  # raised at fewer entries too: the learner's own error
            return
        if isinstance(again, torch.Tensor) and again.shape == reference.shape:
            _compare(again, reference, f"{what} with {_shapes(smaller)} (160 queries)",
                     160, tol, own)
            fail(f"{said} raised {type(err).__name__} ({first_line(err, 40)}), though "
                 "right with 160 queries and T * S = 25,600 entries: a flat index (i * S + "
                 "j) in int16 (holds up to 32767) wraps to negative numbers? Make it int64: "
                 f"{INT64.format(own)}")

    got = expect_tensor(call(fn, said, *(x.clone() for x in inputs), diagnose=diagnose), said)
    expect_like(got, want, said)
    _compare(got, want, said, T, tol, own)


def _shapes(inputs: tuple) -> str:
    """`x [..]` for the shift's input, `q [..], k [..]` for the scores'."""
    if len(inputs) == 1:
        return f"x {describe_shape(inputs[0].shape)}"
    return f"q {describe_shape(inputs[0].shape)}, k {describe_shape(inputs[1].shape)}"


def _compare(got: torch.Tensor, want: torch.Tensor, said: str, t: int, tol: float,
             own: str) -> None:
    """Fail when `got` is off `want` `[..., t, S]` by more than `tol` (or NaN) where a
    query may see, naming what wraps (`_wrapped`)."""
    s = want.size(-1)
    off = (got.detach().float() - want.float()).abs()
    wrong = ~(off <= tol) & causal_mask(t, s)  # NaN counts as wrong
    if wrong.any():
        fail(f"{said} is first wrong at {first_position(wrong, 'b h i j')}, "
             f"{_wrapped(wrong, s)} Make it int64: {INT64.format(own)}")


def _shift_inputs(t: int, m: int) -> tuple[tuple, torch.Tensor]:
    x = torch.randn(1, 1, t, m + t, generator=torch.Generator().manual_seed(51))
    return (x,), relative_shift(x)


def _score_inputs(t: int, m: int) -> tuple[tuple, torch.Tensor]:
    g = torch.Generator().manual_seed(52)
    s = m + t
    q, k, r, u, v = (torch.randint(-1, 2, shape, generator=g).float() for shape in
                     ((1, 1, t, 4), (1, 1, s, 4), (s, 1, 4), (1, 4), (1, 4)))
    content = (q + u[:, None]) @ k.transpose(-2, -1)
    return (q, k, r, u, v), (content + relative_shift((q + v[:, None]) @ r.permute(1, 2, 0))) / 2


def many_shift(fn: Callable, what: str) -> None:
    """`fn(x)` with x `[1, 1, 300, 320]` (float32): a permutation, compared exactly."""
    _many(fn, what, _shift_inputs, 0.0, "x")


def many_scores(fn: Callable, what: str) -> None:
    """`fn(q, k, r, u, v)` with q `[1, 1, 300, 4]`, k `[1, 1, 320, 4]` (float32), whole
    numbers in [-1, 1], so that a score read from a wrong column is off by 1/2 or more."""
    _many(fn, what, _score_inputs, 0.2, "q")


def many_distances(fn: Callable) -> None:
    """`fn(300, 20)`: 300 queries, `T * S = 96,000` entries."""
    what = f"relative_distances({T}, {M}) ({T} queries)"
    got = expect_tensor(call(fn, what, T, M), what)
    want = M + torch.arange(T)[:, None] - torch.arange(S)[None, :]
    expect_like(got, want, what)
    if not torch.equal(got, want):
        wrong = got != want
        a, b = (int(x) for x in wrong.nonzero()[0])
        fail(f"{what} is first wrong at [i={a}, j={b}] (yours {int(got[a, b])}, expected "
             f"{int(want[a, b])}), {_wrapped(wrong, S)} Keep every index in int64, "
             "torch.arange's default.")


def long_memory(fn: Callable) -> None:
    """`fn(mem, h, 24)` with mem `[2, 280, 6]`, h `[2, 20, 6]`: the last 24 of 300 states,
    whose positions (276 to 299) an int8 or uint8 index wraps to 20 to 43. Then in
    bfloat16, with and without mem: a float32 tensor joined with the states (an empty
    memory made without dtype=) makes the memory float32, which float64 states hide."""
    g = torch.Generator().manual_seed(53)
    mem, h = torch.randn(2, 280, 6, generator=g), torch.randn(2, 20, 6, generator=g)
    what = (f"update_memory(mem, h, 24) with mem {describe_shape(mem.shape)}, h "
            f"{describe_shape(h.shape)} (M + T = 300 states)")
    got = expect_tensor(call(fn, what, mem.clone(), h.clone(), 24,
                             diagnose=_rounded_index(fn, what)), what)
    want = update_memory(mem, h, 24)
    expect_like(got, want, what)
    if close(got.detach(), want):
        return _half_memory(fn, mem.bfloat16(), h.bfloat16())
    states = torch.cat([mem, h], 1)
    if close(got.detach(), states[:, 20:44]):
        fail(f"{what} returned states 20 to 43, not 276 to 299 (right at the check's "
             "smaller sizes): an index in int8 or uint8 wraps past 127 (255)? Slice, "
             f"x[:, n - keep:], or {INT64.format('h')}")
    fail(f"{what} differs from the reference, though right at the check's smaller sizes: "
         "does your code depend on a size limit, or keep an index in a small dtype (int8 "
         "wraps past 127, bfloat16 rounds past 256)? Slice, x[:, n - keep:], or "
         f"{INT64.format('h')}")


def _half_memory(fn: Callable, mem: torch.Tensor, h: torch.Tensor) -> None:
    """`long_memory`'s update on bfloat16 states, with and without mem: judged where it runs
    (an error of bfloat16 alone, numpy's, is named by the device round)."""
    for old in (None, mem):
        what = f"update_memory({'None' if old is None else 'mem'}, h, 24) on bfloat16 h"
        try:
            got = fn(None if old is None else old.clone(), h.clone(), 24)
        except Exception:  # noqa: BLE001
            return
        expect_like(got, update_memory(old, h, 24), what, HALF)


HALF = ("torch.cat promotes float32 and bfloat16 to float32 (float64 hid it): a float32 "
        "tensor joined with h? (torch.zeros(B, 0, D, device=h.device), no dtype=): start "
        "from h alone, or h.new_zeros(B, 0, D).")


def _rounded_index(fn: Callable, what: str) -> Callable[[Exception], None]:
    """A `diagnose` for `long_memory`: index 300 of 300 states out of bounds, though right
    with 256 states: an index in bfloat16 (whole numbers exact up to 256, then steps of 2),
    where 299 rounds to 300."""
    def diagnose(err: Exception) -> None:
        text = str(err)
        if "300" not in text or not ("bounds" in text or "out of range" in text):
            return
        g = torch.Generator().manual_seed(54)
        mem, h = torch.randn(2, 236, 6, generator=g), torch.randn(2, 20, 6, generator=g)
        try:
            again = fn(mem.clone(), h.clone(), 24)
        except Exception:  # raised with 256 states too: the learner's own error
            return
        if isinstance(again, torch.Tensor) and close(again.detach(), update_memory(mem, h, 24)):
            fail(f"{what} asked for state 300 of 0 to 299, though right with 256 states: "
                 "an index in bfloat16 (whole numbers exact only up to 256, then in steps "
                 f"of 2: 299 rounds to 300)? Slice, x[:, n - keep:], or {INT64.format('h')}")
    return diagnose
