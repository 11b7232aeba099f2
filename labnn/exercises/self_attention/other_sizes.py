"""Answers that hold only at the check's own sizes: `check_heads` and
`check_multi_head_attention` run the learner's functions once more with another head
count (3 heads of 8), then on inputs where every size differs (`x` `[3, 7, 32]`, 4 heads
of 8), so that a head count, batch, length or width written as a number (`.view(2, 5, H,
24 // H)`, `.reshape(B, T, 24)`, `math.sqrt(6)`) fails by name, as do the layers of the
first module kept (a global) and used on the new one. Last, every exercise of
the notebook runs where an axis has size 1 (`B = 1`, a query `T = 1`, a head `H = 1`), so
that a `.squeeze()` that drops it fails by name, and attention with one key (`S = 1`) that
a query may not attend (a shortcut for one key that ignores the mask).

Dimension letters (the package legend): `B` batch, `T` tokens, `D` width, `H` heads,
`D_h` head width.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from labnn.exercises.grading import call, close, expect_like, expect_tensor, fail, first_line
from labnn.exercises.grading.sizes import expect_same, randn
from labnn.exercises.self_attention.multi_head_merge_slips import expect_merge_alone
from labnn.exercises.self_attention.multi_head_slips import heads_attention
from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention

OTHER = (3, 7, 32)  # B, T, D: each differs from the checks' 2, 5, 24
FIX = ("read every size from the inputs (x.shape, mha.n_heads or n_heads), never a "
       "number: the check's own sizes are B = 2, T = 5, D = 24")


def _other_x() -> torch.Tensor:
    return torch.randn(*OTHER, generator=torch.Generator().manual_seed(21))


def _same(what: str, run: Callable[[], torch.Tensor], want: torch.Tensor) -> None:
    """Fail unless `run()` gives `want` (`grading.sizes.expect_same`)."""
    expect_same(what, run, want, FIX)


def expect_any_size_heads(split_heads: Callable, merge_heads: Callable, h: int) -> None:
    """`split_heads` and `merge_heads` on `[3, 7, 32]` with `h` heads, then where an axis
    has size 1: `B = 1`, one head, one position; `expect_merge_alone` before those, so
    that a merge reading the shape the last split kept is named as such."""
    x = _other_x()
    b, t, d = OTHER
    heads = x.view(b, t, h, d // h).transpose(1, 2)
    _same(f"split_heads(x, {h}) with x [3, 7, 32]", lambda: split_heads(x.clone(), h), heads)
    _same(f"merge_heads(x) with x [3, {h}, 7, {d // h}]",
          lambda: merge_heads(heads.clone()), x)
    expect_split_of_a_chunk(split_heads, h)
    expect_merge_alone(split_heads, merge_heads)  # before size 1: a kept shape named first
    for b, t, h, label in ((1, 7, h, "B = 1"), (3, 7, 1, "H = 1"), (3, 1, h, "T = 1")):
        x = _other_x()[:b, :t]
        heads = x.view(b, t, h, d // h).transpose(1, 2)
        expect_same(f"merge_heads(x) with x {list(heads.shape)} ({label})",
                    lambda: merge_heads(heads.clone()), x, KEEP_ONES, dims="B T D")
        expect_same(f"split_heads(x, {h}) with x {list(x.shape)} ({label})",
                    lambda: split_heads(x.clone(), h), heads, KEEP_ONES, dims="B H T D_h")


def expect_split_of_a_chunk(split_heads: Callable, h: int) -> None:
    """`split_heads` of the middle third of a `[3, 7, 96]` tensor, as Exercise 5 splits the
    chunks of `mha.qkv(x)`: a view that is not contiguous, which an answer reading the
    memory as if it were (`as_strided`) gets wrong."""
    b, t, d = OTHER
    fused = torch.randn(b, t, 3 * d, generator=torch.Generator().manual_seed(24))
    chunk = fused.chunk(3, dim=-1)[1]
    want = chunk.reshape(b, t, h, d // h).transpose(1, 2)
    what = f"split_heads(x, {h}) with x = mha.qkv(x).chunk(3, -1)[1], [3, 7, 32]"
    got = expect_tensor(call(split_heads, what, chunk, h), what)
    expect_like(got, want, what)
    if not close(got, want):
        fail(f"{what} (not contiguous, as Exercise 5 splits it) gives other values: your "
             "split reads x's memory as if x were contiguous (as_strided?); "
             "x.view(B, T, H, D_h).transpose(1, 2) follows x's strides.")


def expect_any_size_attention(fn: Callable, h: int) -> None:
    """`fn(x, mha, mask)` on `[3, 7, 32]` with a `MultiHeadAttention(32, h)`, then with
    `B = 1`, one token (`T = 1`) and one head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(22)
        mha, one_head = MultiHeadAttention(OTHER[2], h).eval(), MultiHeadAttention(32, 1).eval()
    x, mask = _other_x(), causal_mask(OTHER[1])
    with torch.no_grad():
        want = mha(x, mask)[0]
        _same(f"multi_head_attention(x, mha, mask) with x [3, 7, 32], mha = "
              f"MultiHeadAttention(32, {h})", lambda: fn(x.clone(), mha, mask.clone()), want)
        for b, t, m, label in ((1, 7, mha, "B = 1"), (3, 1, mha, "T = 1"),
                               (3, 7, one_head, "H = 1")):
            x, mask = _other_x()[:b, :t], causal_mask(t)
            expect_same(f"multi_head_attention(x, mha, mask) with x {list(x.shape)}, mha = "
                        f"MultiHeadAttention(32, {m.n_heads}) ({label})",
                        lambda: fn(x.clone(), m, mask.clone()), m(x, mask)[0], KEEP_ONES,
                        dims="B T D")


KEEP_ONES = "keep every axis, even one of size 1 (no .squeeze() without a dim)"


def weights_size_one(fn: Callable) -> None:
    """`attention_weights(q, k)` with `B = 1`, one query (`T = 1`), one head (`H = 1`)."""
    for lead, t, label in (((1,), 5, "B = 1"), ((2,), 1, "T = 1"), ((2, 1), 5, "H = 1")):
        q, k = (randn(*lead, n, 24 // len(lead), seed=23 + n) for n in (t, 7))
        dims = "B T S" if len(lead) == 1 else "B H T S"
        _half_scale(fn, q, k, label)
        expect_same(f"attention_weights(q, k) with q {list(q.shape)}, k {list(k.shape)} "
                    f"({label})", lambda: fn(q.clone(), k.clone()),
                    (q @ k.mT / q.size(-1) ** 0.5).softmax(-1), KEEP_ONES, dims=dims)


def _half_scale(fn: Callable, q: torch.Tensor, k: torch.Tensor, label: str) -> None:
    """Fail when `fn(q, k)` gives the weights scaled by sqrt(d) rounded to float16 or
    bfloat16 (d = 12 here: 3.4648 in float16 for 3.4641; at the check's d = 24 the
    rounding hides within the tolerance)."""
    d = q.size(-1)
    for dtype in (torch.float16, torch.bfloat16):
        for root in (torch.tensor(d, dtype=dtype).sqrt(), torch.tensor(d ** 0.5, dtype=dtype)):
            wrong = (q @ k.mT / root.float()).softmax(-1)
            if close(wrong, (q @ k.mT / d ** 0.5).softmax(-1)):
                continue
            try:
                got = fn(q.clone(), k.clone())
            except Exception:
                return
            if close(got, wrong):
                fail(f"attention_weights(q, k) with q {list(q.shape)} ({label}, d = {d}) "
                     f"scales by sqrt(d) rounded to {str(dtype)[6:]}, {float(root):.5g} for "
                     f"{d ** 0.5:.5g} (a tensor made with dtype={str(dtype)[6:]}?): compute "
                     "the scale in Python, math.sqrt(q.size(-1)).")


def attention_size_one(fn: Callable) -> None:
    """`attention(q, k, v, mask)` with `B = 1`, one query (`T = 1`), one head (`H = 1`)."""
    for lead, t, label in (((1,), 5, "B = 1"), ((2,), 1, "T = 1"), ((2, 1), 5, "H = 1")):
        q, k, v = (randn(*lead, n, 24 // len(lead), seed=s) for n, s in ((t, 26), (7, 27),
                                                                         (7, 28)))
        mask = torch.rand(t, 7, generator=torch.Generator().manual_seed(29)) < 0.5
        mask[:, 0] = True
        four = (lambda x: x) if len(lead) == 2 else (lambda x: x[:, None])
        want = scaled_dot_product_attention(four(q), four(k), four(v), mask)[0]
        expect_same(f"attention(q, k, v, mask) with q {list(q.shape)}, k and v "
                    f"{list(k.shape)}, mask {list(mask.shape)} ({label})",
                    lambda: fn(q.clone(), k.clone(), v.clone(), mask.clone()),
                    want.reshape(q.shape[:-1] + v.shape[-1:]), KEEP_ONES,
                    dims="B T D" if len(lead) == 1 else "B H T D")
    _one_key(fn)


def _one_key(fn: Callable) -> None:
    """`attention(q, k, v, mask)` with one key (`S = 1`) that query 1 may not attend: its
    row must be zeros there too (a shortcut for one key, `v.expand(...)`, is named)."""
    q, k, v = randn(2, 5, 24, seed=30), randn(2, 1, 24, seed=31), randn(2, 1, 24, seed=32)
    mask = torch.ones(5, 1, dtype=torch.bool)
    mask[1] = False
    want = scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]
    what = "attention(q, k, v, mask) with q [2, 5, 24], k and v [2, 1, 24], mask [5, 1]"

    def run():
        return fn(q.clone(), k.clone(), v.clone(), mask.clone())

    try:
        got = run()
    except Exception:
        got = None  # expect_same names it
    rest = torch.arange(5) != 1
    if (isinstance(got, torch.Tensor) and got.shape == want.shape
            and close(got[:, rest], want[:, rest]) and not close(got[:, 1], want[:, 1])):
        fail(f"{what} (one key, S = 1; query i=1 may attend nothing) gives other values for "
             "query i=1: with one key too, a query whose mask is False gets zeros: mask as "
             "for any S (no shortcut for one key, no v.expand).")
    expect_same(f"{what} (S = 1)", run, want, KEEP_ONES, dims="B T D")


OTHER_H = 3  # a head count other than the notebook's 4: a fixed count shows


def expect_other_heads(split_heads: Callable, merge_heads: Callable, x: torch.Tensor,
                       h: int) -> None:
    """Split and merge x `[B, T, D]` into `OTHER_H` heads: fail by name when the answer
    ignores n_heads and splits into the `h` heads of the first call."""
    b, t, d = x.shape
    want = x.view(b, t, OTHER_H, d // OTHER_H).transpose(1, 2)
    what = f"split_heads(x, {OTHER_H})"
    got = _run(what, split_heads, x.clone(), OTHER_H)
    fixed = x.view(b, t, h, d // h).transpose(1, 2)
    if isinstance(got, torch.Tensor) and close(got, fixed):
        fail(f"{what} split x into {h} heads: n_heads is ignored (a fixed {h}?); "
             "view as [B, T, n_heads, D // n_heads] with the n_heads argument.")
    if not (isinstance(got, torch.Tensor) and close(got, want)):
        fail(f"{what} differs from x.view(B, T, {OTHER_H}, D // {OTHER_H}).transpose(1, "
             "2): use the n_heads argument, not a fixed head count or width.")
    got = _run(f"merge_heads(x) with x [B, {OTHER_H}, T, D_h]", merge_heads, want.clone())
    if not (isinstance(got, torch.Tensor) and close(got, x)):
        fail(f"merge_heads(x) of x [B, {OTHER_H}, T, D_h] is not x.transpose(1, 2)"
             ".reshape(B, T, D): read H and D_h from x.shape, not a fixed head count.")


def expect_other_head_count(fn: Callable, x: torch.Tensor, mask: torch.Tensor,
                            h: int, first: MultiHeadAttention) -> None:
    """Run `fn` with a `MultiHeadAttention(D, OTHER_H)`: fail by name when the answer uses
    a fixed `h` heads instead of `mha.n_heads`, or the weights of `first`, the module of
    its first call, kept (both layers, or one)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        mha = MultiHeadAttention(x.size(-1), OTHER_H).eval()
    what = f"multi_head_attention(x, mha, mask) with mha.n_heads = {OTHER_H}"
    with torch.no_grad():
        want = mha(x, mask)[0]
        got = _run(what, fn, x.clone(), mha, mask.clone())
        for layers in (("qkv",), ("out_proj",), ("qkv", "out_proj", "n_heads")):
            old = copy.deepcopy(mha)  # with the layers (all: the module) of the first call
            for layer in layers:
                setattr(old, layer, getattr(first, layer))
            old.d_head = x.size(-1) // old.n_heads
            if isinstance(got, torch.Tensor) and close(got, old(x, mask)[0]):
                kept = " and ".join(f"mha.{n}" for n in layers[:2])
                fail(f"{what}, a new module, gives the result of the first module's {kept}: "
                     "your function keeps them between calls (in a global, a cache); read "
                     "mha.qkv, mha.out_proj and mha.n_heads on every call.")
        mha.n_heads, mha.d_head = h, x.size(-1) // h
        fixed = mha(x, mask)[0]
    if isinstance(got, torch.Tensor) and close(got, fixed):
        fail(f"{what} computes {h} heads: mha.n_heads is ignored (a fixed {h}?); split "
             "into mha.n_heads heads of mha.d_head features.")
    d_head = x.size(-1) // h  # the head width of the first round, written as a number?
    with torch.no_grad():
        scaled = heads_attention(x, mha, mask, OTHER_H, d_head)
    if isinstance(got, torch.Tensor) and close(got, scaled):
        fail(f"{what} (D_h = {x.size(-1) // OTHER_H}): your scores are divided by "
             f"sqrt({d_head}), the head width of the first round written as a number: read "
             "it from the input, math.sqrt(q.size(-1)) on the heads (or mha.d_head).")
    if not (isinstance(got, torch.Tensor) and close(got, want)):
        fail(f"{what} differs from mha(x, mask)[0]: read the head count from "
             "mha.n_heads and the head width from mha.d_head (or D // n_heads), not a fixed "
             "number.")


def _run(what: str, fn: Callable, *args):
    """`fn(*args)`; a crash fails with its first line and a hint at a fixed head count or
    head width."""
    try:
        return fn(*args)
    except Exception as err:
        line = first_line(err, 150)
        fail(f"{what} raised {type(err).__name__} ({line}): with {OTHER_H} heads, read "
             "every size from the inputs, never a fixed number: the head count from n_heads "
             "(or x.shape), the head width as D // n_heads (or -1 in view).")
