"""Notebook 03's answers that hold only at the checks' own sizes: each checker, once the
answer passes there, runs it again where every size differs (`grading.sizes`), so that
`/ 2.0` for the square root of a head width of 4, `torch.zeros(2, 3, 4)` for the empty
memory, a table width of 5 or a loop written for 2 layers fails by name; the attention
also runs with H = S (a bias transposed where it is square) and with D_h = 8, not a
square (a scale rounded by math.isqrt; then in float64, a scale computed in float32), and
the bias with H = 4, the notebook's head count (one hard-coded to 3), then with a wider
table at the check's own s (an index cached per s between calls). The attention's softmax
also meets far scores: shifted by +-200 per batch entry (`far_scores`), then heads 1000
apart and rows spanning 800 (`far_heads`), where only each row's own max keeps exp finite.

Dimension letters (the package legend): `B` batch, `H` heads, `S` memory keys, `D` model
width, `D_h` head width, `L` layers, `T` tokens.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import ExerciseFailed, close, fail
from labnn.exercises.grading.sizes import expect_same, randn, shift_rows
from labnn.exercises.feedback_transformer import dtype_rounds, scale_functions, size_one
from labnn.exercises.feedback_transformer.long_memory import jittered_model
from labnn.exercises.feedback_transformer.step_slips import layer_reads, memory_on
from labnn.feedback.layer import LayerMix, RelativeBias, feedback_attention
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer

# each differs from the checks' own (B 2, H 3, S 6, D_h 4, L 3 or 2, D 12, max_distance 5)
B, H, S, D_H, L, D, MAX_DISTANCE, T = 3, 2, 4, 9, 5, 10, 3, 6
OWN = "the check's are"


def memory_vector(fn: Callable) -> None:
    """`fn(xs, w)` with `L + 1 = 6` layers, `B = 3`, `D = 10`."""
    xs, w = randn(L + 1, B, D, seed=31), randn(L + 1, seed=32)
    mix = LayerMix(L + 1)
    with torch.no_grad():
        mix.logits.copy_(w)
        want = mix(xs)
    expect_same(f"memory_vector(xs, w) with xs [{L + 1}, {B}, {D}]",
                lambda: fn(xs.clone(), w.clone()), want,
                f"read every size from xs and w, never a number ({OWN} L + 1 = 4, B = 2, "
                "D = 12)")
    size_one.memory_vector(fn)


def relative_bias(fn: Callable) -> None:
    """`fn(table, s)` with `H = 2` heads and `max_distance = 3`, for `s` = 2 and 6, then with
    `H = 4` heads (the notebook's) and `s = 6`."""
    table = randn(H, MAX_DISTANCE, seed=33)
    rel = RelativeBias(H, MAX_DISTANCE)
    with torch.no_grad():
        rel.bias.copy_(table)
        for s in (2, 6):
            expect_same(f"relative_bias(table, {s}) with table [{H}, {MAX_DISTANCE}]",
                        lambda s=s: fn(table.clone(), s), rel(s),
                        "max_distance is table.size(1), never a number "
                        f"({OWN} H = 3, max_distance = 5)")
    table = randn(4, MAX_DISTANCE, seed=30)  # the notebook's models have 4 heads
    what = f"relative_bias(table, 6) with table [4, {MAX_DISTANCE}] (H = 4)"
    got = fn(table.clone(), 6)
    if isinstance(got, torch.Tensor) and got.dim() == 2 and got.size(0) < 4 and close(
            got, RelativeBias.lookup(table, 6)[:got.size(0)]):
        fail(f"{what} gives the first {got.size(0)} heads only, [{got.size(0)}, 6]: the "
             f"head count is hard-coded ({got.size(0)}, e.g. table[:{got.size(0)}]): "
             "keep every row of the table, table[:, d - 1], [H, S].")
    expect_same(what, lambda: fn(table.clone(), 6), RelativeBias.lookup(table, 6),
                f"read H from table.size(0), never a number ({OWN} H = 3)")
    wider(fn)
    size_one.relative_bias(fn)


def wider(fn: Callable) -> None:
    """`fn(table, 7)`, the check's own s, with a table of 9 columns: a result clamped at the
    check's max_distance 5 (a clamp written as 5 failed above, at 3) kept its index
    between calls."""
    table, s = randn(3, 9, seed=38), 7
    what = f"relative_bias(table, {s}) with table [3, 9] (max_distance = 9)"
    try:
        got = fn(table.clone(), s)
    except Exception:  # noqa: BLE001 (expect_same names it)
        got = None
    if isinstance(got, torch.Tensor) and got.shape == (3, s) and close(
            got, table[:, torch.arange(s, 0, -1).clamp(max=5) - 1]):
        fail(f"{what} gives the bias of the check's earlier table of max_distance 5, for "
             "the same s: your function keeps something between calls (an index cached "
             "per s, a global, a default argument): compute it from each call's table, "
             ".clamp(max=table.size(1)).")
    expect_same(what, lambda: fn(table.clone(), s), RelativeBias.lookup(table, s),
                "max_distance is table.size(1) of each call; nothing may be kept between "
                "calls")


def feedback_attention_(fn: Callable) -> None:
    """`fn(q, k, v, bias)` with `B = 3`, `H = 2`, `S = 4` keys of `D_h = 9` (scale 1/3),
    then `S = 0` and `S = H = 2` (a square bias) at the same sizes."""
    q = randn(B, H, D_H, seed=34)
    k, v = randn(B, H, S, D_H, seed=35), randn(B, H, S, D_H, seed=36)
    bias = randn(H, S, seed=37)
    sizes = f"no size written as a number ({OWN} B = 2, H = 3, S = 6, D_h = 4)"
    scale_functions.at_other_size(fn, q, k, v, bias, f"feedback_attention with D_h = {D_H}")
    expect_same(f"feedback_attention(q, k, v, bias) with q [{B}, {H}, {D_H}] "
                f"(sqrt(D_h) = {math.sqrt(D_H):g})",
                lambda: fn(q.clone(), k.clone(), v.clone(), bias.clone()),
                feedback_attention(q, k, v, bias),
                "scale q·k by sqrt(q.size(-1)), read every size from the inputs: " + sizes)
    empty = k[:, :, :0]
    expect_same(f"feedback_attention(q, k, v, bias) with S = 0, q [{B}, {H}, {D_H}]",
                lambda: fn(q.clone(), empty.clone(), empty.clone(), bias[:, :0].clone()),
                torch.zeros_like(q), "with no keys return torch.zeros_like(q): " + sizes)
    square(fn, q, k[:, :, :H], v[:, :, :H], bias[:, :H])
    rounded(fn)
    dtype_rounds.float32_scale(fn)  # float64 at D_h = 8: a scale computed in float32
    size_one.one_key(fn)


def square(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           bias: torch.Tensor) -> None:
    """`fn(q, k, v, bias)` with `H = S`: a bias transposed where it is square is named."""
    what = f"feedback_attention(q, k, v, bias) with H = S = {H}, bias [{H}, {H}]"
    try:
        got = fn(q.clone(), k.clone(), v.clone(), bias.clone())
    except Exception:  # noqa: BLE001 (expect_same names it)
        got = None
    if isinstance(got, torch.Tensor) and got.shape == q.shape and close(
            got, feedback_attention(q, k, v, bias.T)) and not close(
            got, feedback_attention(q, k, v, bias)):
        fail(f"{what} adds bias.T: the bias is [H, S], heads first, also where H = S; add it "
             "as it is, head h adds bias[h] (no transpose, whatever its sizes).")
    expect_same(what, lambda: fn(q.clone(), k.clone(), v.clone(), bias.clone()),
                feedback_attention(q, k, v, bias), "add the bias [H, S] as it is, whatever "
                "its sizes: head h adds bias[h]")


def rounded(fn: Callable) -> None:
    """`fn(q, k, v, bias)` with `D_h = 8`, not a square: q·k divided by a whole number near
    sqrt(8) (math.isqrt, int(d ** 0.5), round), or by sqrt(8) rounded to 1 to 3 decimals,
    is named; 4 and 9 are squares."""
    d = 8
    q, k, v = randn(B, H, d, seed=60), randn(B, H, S, d, seed=61), randn(B, H, S, d, seed=62)
    bias = randn(H, S, seed=63)
    what = f"feedback_attention(q, k, v, bias) with D_h = {d} (sqrt(D_h) = {math.sqrt(d):.3f})"
    try:
        got = fn(q.clone(), k.clone(), v.clone(), bias.clone())
    except Exception:  # noqa: BLE001 (expect_same names it)
        got = None
    for n in (math.isqrt(d), math.isqrt(d) + 1):
        if isinstance(got, torch.Tensor) and got.shape == q.shape and close(
                got, feedback_attention(q * math.sqrt(d) / n, k, v, bias)):
            fail(f"{what} divides q·k by {n}, sqrt(D_h) rounded to a whole number "
                 "(math.isqrt, int(...), round): 4 and 9 are squares, 8 is not; divide by "
                 "the exact root, math.sqrt(q.size(-1)) or q.size(-1) ** 0.5.")
    root = math.sqrt(d)
    for c in (round(root, n) for n in (1, 2, 3)):  # 2.83 for sqrt(8): a constant rounded
        if isinstance(got, torch.Tensor) and got.shape == q.shape and not close(
                got, feedback_attention(q, k, v, bias)) and close(
                got, feedback_attention(q * root / c, k, v, bias)):
            fail(f"{what}: your scale is 1/{c:g}, which differs from 1/sqrt(D_h) = "
                 f"1/{root:.6f} by {abs(1 / c - 1 / root):.1e}: a rounded constant? Divide "
                 "q·k by the exact root, math.sqrt(q.size(-1)).")
    expect_same(what, lambda: fn(q.clone(), k.clone(), v.clone(), bias.clone()),
                feedback_attention(q, k, v, bias),
                "scale q·k by sqrt(q.size(-1)), read every size from the inputs")


def memory_read(model: FeedbackTransformer) -> list[torch.Tensor]:
    """The keys and values `model`'s layers are given from now on, kept (a hook on each
    layer): `token_loop` recognises them if a later call hands them to another model."""
    read: list[torch.Tensor] = []
    for layer in model.layers:
        layer.register_forward_pre_hook(lambda _, args: read.extend(
            a for a in args[1:3] if isinstance(a, torch.Tensor)))
    return read


def token_loop(fn: Callable, earlier: list[torch.Tensor] = ()) -> None:
    """`fn(model, tokens)` with a 3-layer model of width 16, 2 heads, `B = 3`, `T = 6`;
    `earlier`: the keys and values of the check's calls (`memory_read`): handed to this
    model's layers, they were kept between calls (a global cache of the empty memory)."""
    config = FeedbackConfig(vocab_size=7, d_model=16, n_heads=2, n_layers=3, d_ff=20)
    model = jittered_model(config, seed=38, scaled=True)  # a wrong memory shows
    tokens = torch.randint(0, 7, (B, T), generator=torch.Generator().manual_seed(39))
    ids = {id(t) for t in earlier}
    storages = {t.untyped_storage().data_ptr() for t in earlier
                if t.numel() and t.device.type != "meta"}
    reused = []
    for layer in model.layers:
        layer.register_forward_pre_hook(lambda _, args: reused.extend(
            a for a in args[1:3] if isinstance(a, torch.Tensor) and (id(a) in ids or (
                a.numel() and a.device.type != "meta"
                and a.untyped_storage().data_ptr() in storages))))
    what = f"token_loop(model, tokens) with 3 layers, d_model 16, tokens [{B}, {T}]"
    with torch.no_grad():
        want = model(tokens)[0]
        try:
            expect_same(what, lambda: fn(model, tokens.clone()), want,
                        "loop over model.layers and tokens.size(1), no size written as a "
                        f"number ({OWN} 2 layers, d_model 12, B = 2, T = 7)")
        except ExerciseFailed:
            if reused:
                fail(f"{what} handed its layers keys or values made by an earlier call, kept "
                     "between calls (a global cache, a default argument): they belong to "
                     "another model and other tokens. Start every call from its own empty "
                     "memory, model.project_memory(x[:, :0]), and build it from its tokens.")
            memory_on(fn, model, tokens)  # a memory vector no mix of its step's outputs
            layer_reads(fn, model, tokens)  # keys[i % 2]: another layer's keys
            raise


def _far_run(fn: Callable, q, k, v, bias) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`fn` on copies of the far scores' inputs, in float32, and the float64 reference;
    None when it raises or gives another shape (the same code ran at the check's scores:
    its mistakes there were named)."""
    want = feedback_attention(*(t.double() for t in (q, k, v, bias))).float()
    try:
        got = fn(q.clone(), k.clone(), v.clone(), bias.clone())
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return None
    return got.detach().float(), want


def far_scores(fn: Callable) -> None:
    """`fn(q, k, v, bias)` in float32 with the scores of batch entry 0 near +200 and of
    entry 1 near -200 (a constant per row, which leaves the softmax unchanged): exp
    without each row's max overflows to inf / inf, or, with the max of the whole tensor,
    underflows to 0 / 0; either NaN is named, and so is a NaN patched (nan_to_num, an eps,
    a clamp of the sum) or a clamp of the scores, by the values they leave."""
    b, h, s, d = 2, 3, 5, 4
    q, k, v = randn(b, h, d, seed=41), randn(b, h, s, d, seed=42), randn(b, h, s, d, seed=43)
    bias = randn(h, s, seed=44)
    q, k = shift_rows(q, k, torch.tensor([200.0, -200.0])[:, None])
    what = "feedback_attention(q, k, v, bias) with scores of about +200 and -200"
    ran = _far_run(fn, q, k, v, bias)
    if ran is None:
        return
    got, want = ran
    bad = ~torch.isfinite(got)
    if bad.any():
        row = bad.flatten(1).any(1).nonzero()[0].item()
        fail(f"{what} gives NaN (batch entry {row}): exp of scores of about 200 "
             "overflows to inf, and of scores far below the tensor's max underflows to "
             "0, so their ratio is NaN. Subtract each row's own max first, "
             "s - s.amax(-1, keepdim=True), or use s.softmax(-1).")
    off = [not close(got[i], want[i], atol=1e-3, rtol=1e-3) for i in range(b)]
    if any(off):
        _patched(what, off, [close(got[i], v[i].mean(1), atol=1e-3) for i in range(b)])


def far_heads(fn: Callable) -> None:
    """`fn(q, k, v, bias)` in float32 with a bias of about +500 on head 0, -500 on head 1,
    and rows spanning 800 on heads 2 and 3 (the lowest score first on head 2, the highest
    on head 3): only each row's own max keeps exp finite. The heads that go wrong tell a
    max over several heads (1, 2, 3), the row's mean (2, 3), its first score (2 alone)."""
    b, h, s, d = 2, 4, 5, 4
    q, k, v = randn(b, h, d, seed=45), randn(b, h, s, d, seed=46), randn(b, h, s, d, seed=47)
    span = torch.tensor([0.0, -800.0, -1.0, -799.0, -2.0])
    bias = randn(h, s, seed=48) + torch.stack([torch.full_like(span, 500.0),
                                                torch.full_like(span, -500.0),
                                                span[[1, 0, 2, 3, 4]], span])
    what = "feedback_attention(q, k, v, bias) with heads 1000 apart and rows spanning 800"
    ran = _far_run(fn, q, k, v, bias)
    if ran is None:
        return
    got, want = ran
    bad = [i for i in range(h) if not close(got[:, i], want[:, i], atol=1e-3, rtol=1e-3)]
    fix = ("subtract each row's own max (amax over the keys, dim=-1, keepdim=True), or use "
           "s.softmax(-1)")
    if bad == [1, 2, 3]:
        fail(f"{what} is wrong at heads 1 to 3, far below head 0: a max taken over several "
             "heads (amax over dims (1, 2)), or head 0's, makes exp underflow to 0 there, "
             f"0 / 0: {fix}.")
    if bad == [2, 3]:
        fail(f"{what} is wrong at heads 2 and 3: a row's mean lies ~320 below its max, so "
             f"exp(s - mean) overflows to inf: {fix}.")
    if bad == [2]:
        fail(f"{what} is wrong at head 2, whose first score is ~800 below its max: "
             f"s - s[..., :1] leaves +800, and exp overflows to inf: {fix}.")
    if bad:
        fail(f"{what} is wrong at head {bad[0]}: exp of scores this far apart overflows or "
             f"underflows unless {fix}.")


def _patched(what: str, off: list[bool], uniform: list[bool]) -> None:
    """Name a softmax of far scores that gave finite but wrong weights; `off` and
    `uniform` per batch entry (+200, -200): wrong, and every key weighted the same."""
    row = off.index(True)
    fix = "subtract each row's own max, s - s.amax(-1, keepdim=True), or use s.softmax(-1)"
    if any(o and u for o, u in zip(off, uniform)):
        fail(f"{what}: every key gets the same weight (batch entry {row}): clamped scores "
             "(e.g. to [-30, 30]) all become the bound. Do not clamp: a constant per row "
             f"leaves a softmax unchanged; {fix}.")
    if not off[0]:
        fail(f"{what} is wrong at batch entry 1 (scores about -200) alone: with the max of "
             "the whole tensor, s.max() (or of a wrong axis), exp(s - max) is 0 in rows far "
             "below it, and an eps (clamp_min, nan_to_num) hides the 0 / 0: use each row's "
             "own max, s - s.amax(-1, keepdim=True), or s.softmax(-1).")
    fail(f"{what} is wrong (batch entry {row}): exp of scores of about +-200 overflows to "
         "inf (or underflows to 0), and nan_to_num (or an eps) patched the NaN of inf / inf "
         f"with wrong weights: {fix}.")
