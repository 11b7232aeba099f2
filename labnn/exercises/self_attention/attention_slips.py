"""The slips of notebook 01's attention exercises that need the learner's function run again
(a mask turned into a causal one, a crash with mask=None that a mask causes or not, a broadcast
error of a transposed mask, a mask given an axis or a missing `keepdim`, a softmax that
overflows for large scores, a scale by the values' width), for `masked_attention`.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True = may attend.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.nn.attention import causal_mask, scaled_dot_product_attention
from labnn.exercises.grading import (call, close, expect_any_device, expect_close, expect_like,
                                     expect_tensor, explain, fail, first_position)
from labnn.exercises.grading.python_slips import name_python_slip
from labnn.exercises.grading.slips import (MADE_SCALE, MASK_IGNORED, MASK_NONE_CAUSAL,
                                          expect_float64_accurate)
from labnn.exercises.self_attention.attention_axes import beyond_float32
from labnn.exercises.self_attention.far_scores import expect_rows_apart
from labnn.exercises.self_attention.global_reads import crash_advice
from labnn.exercises.self_attention.half_rounds import expect_half_rounds
from labnn.exercises.self_attention.padding_rounds import expect_none_unmasked
from labnn.exercises.self_attention.scale_slips import name_int_root
from labnn.exercises.self_attention.score_clamps import expect_unclamped
from labnn.exercises.self_attention.softmax_mask_slips import (
    DIAGONAL, expect_no_extra_mask_axis, front_axis_crash, with_diagonal)


def _attend(q, k, v, mask=None) -> torch.Tensor:
    """The reference attention on `[B, T, D]` inputs."""
    return scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]


def expect_no_default_mask(fn: Callable, got: torch.Tensor, q, k, v,
                           mask: torch.Tensor) -> None:
    """`got` = `fn(q, k, v)` with mask=None: fail when it is a causal attention (mask=None
    turned into a causal mask, or the mask argument always ignored for a causal one)."""
    t, s = q.size(1), k.size(1)  # the causal mask aligned at the end, or at the start:
    for causal in (_attend(q, k, v, m) for m in (causal_mask(t, s), causal_mask(s)[:t])):
        if close(got, causal) and not close(causal, _attend(q, k, v)):
            break
    else:
        return expect_none_unmasked(got, lambda m: _attend(q, k, v, m), t, s)  # zeros
    try:
        ignored = close(fn(q.clone(), k.clone(), v.clone(), mask.clone()), causal)
    except Exception:
        ignored = False
    fail(MASK_IGNORED if ignored else MASK_NONE_CAUSAL)


NONE_ADVICE = ("your function must handle mask=None (no mask: every query may attend "
               "every key)")
NOT_NONE = "it raises the same error with a mask, so mask=None is not the cause"


def mask_none_crash(fn: Callable, what: str, mask: torch.Tensor,
                    *args: torch.Tensor) -> Callable[[Exception], None]:
    """A `diagnose` for `fn(*args)`, mask=None, that raised: `torch.sqrt` of an int is named;
    else `fn` reruns with `mask`, and the notice before the learner's own error says mask=None
    must be handled only when that run does not raise the same error (a typo does); an
    undefined name or a global tensor read is said instead (`global_reads.crash_advice`)."""
    def diagnose(err: Exception) -> None:
        name_int_root(err)
        try:
            fn(*(a.clone() for a in args), mask.clone())
            advice = (f"{NONE_ADVICE}: it runs with a mask, so apply the mask only under "
                      "`if mask is not None:`")
        except Exception as again:
            same = type(again) is type(err) and str(again) == str(err)
            advice = NOT_NONE if same else NONE_ADVICE
        extra = crash_advice(fn, err)  # an undefined name, a global tensor
        if extra:
            advice = f"{NOT_NONE}; {extra}" if advice == NOT_NONE else extra
        name_python_slip(err)
        explain(what, err, advice)
        raise err  # the learner's own error, its traceback kept

    return diagnose


ZERO_ROWS = "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)"


def expect_empty_row_zeroed(got: torch.Tensor, i: int, uniform: torch.Tensor,
                            unmasked: torch.Tensor | None = None,
                            alone: torch.Tensor | None = None,
                            summed: torch.Tensor | None = None) -> None:
    """`got` `[B, T, D]` from a mask whose row `i` is all False: a NaN there (not zeroed), the
    result of weights 1/S (`uniform` `[B, D]`: a large negative fill), of weights 1 (`summed`:
    a NaN log-weight set to 0), of no mask on the row (`unmasked` `[B, D]`) or of one key alone
    (`alone` `[B, S, D]`, key j's result: a key forced on) is named, for 01 Ex2 and Ex5."""
    if torch.isnan(got[:, i]).any():  # not zeroed, zeroed by a product, or over the queries
        fail(f"a query whose mask row is all False (query i={i}, at "
             f"{first_position(torch.isnan(got), 'b i d')}) gives NaN (softmax of all -inf): "
             f"zero such rows after the softmax, {ZERO_ROWS}: with masked_fill or "
             "torch.where, not a product (NaN * 0 = NaN), and any over the keys, dim=-1 "
             "(mask.any(dim=-2) asks it of each key).")
    for equal, said in ((uniform, "the mean of the values (uniform weights): its scores were "
                         "all equal before the softmax (set to 0, or a large negative fill "
                         "instead of -inf) or its NaN weights were replaced by 1/S"),
                        (summed, "the sum of the values (every weight 1: its weights filled "
                         "with 1, or log_softmax(...).nan_to_num().exp(), whose exp(0) is 1)")):
        if equal is not None and close(got[:, i], equal):  # say both slips, blame neither
            fail(f"a query whose mask row is all False gets {said}; an empty row must give "
                 f"zeros: zero its weights after the softmax ({ZERO_ROWS}).")
    if unmasked is not None and close(got[:, i], unmasked, atol=1e-3, rtol=1e-3):
        fail("a query with no allowed key attends every key, as with no mask: a large "
             "negative fill (or subtracting a large number, or mask | ~mask.any(...)) does "
             "not empty a row that has no allowed key; fill with float('-inf') and zero "
             f"those rows after the softmax ({ZERO_ROWS}).")
    for j in range(0 if alone is None else alone.size(1)):
        if close(got[:, i], alone[:, j]):
            fail(f"a query whose mask row is all False (i={i}) attends key j={j} alone: a key "
                 "forced on to avoid the NaN (mask | torch.eye(...), mask[..., 0] = True)? "
                 f"Use the mask as given and zero such rows after the softmax ({ZERO_ROWS}).")


def mask_broadcast(fn: Callable, q, k, v, mask: torch.Tensor) -> Callable:
    """A `diagnose` for the call with a mask: a broadcast error between `T` and `S` is
    named when the function runs on square inputs (`S = T`) and gives the result of a
    transposed mask, or of `~mask.any(-1)` without `keepdim` (it lines up with keys)."""
    t = q.size(1)
    square = mask[:, :t].clone()
    square[1] = False  # a query that may attend nothing: zeroing it needs keepdim
    ks, vs = k[:, :t], v[:, :t]
    scores = (q @ ks.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~square, -torch.inf)
    no_keepdim = scores.softmax(-1).masked_fill(~square.any(-1), 0.0) @ vs
    one = [t.clone() for t in (q[:1], k[:1], v[:1], mask)]  # B = 1: a [T, 1, S] mask runs
    axis = (f"mask [T, S] = [{t}, {k.size(1)}] lines up with the scores [B, T, S] as it is "
            "(or mask[None]); mask.unsqueeze(1) (mask[:, None]) is [T, 1, S], whose T "
            "lines up with the batch: use mask itself")
    slips = [
        (_attend(q, ks, vs, square.T),
         f"the mask is transposed: mask [T, S] = [{t}, {k.size(1)}] lines up with the "
         "scores [B, T, S] as it is (query, key); use mask, not mask.mT."),
        (no_keepdim,
         "~mask.any(dim=-1) without keepdim=True has shape [T] and lines up with the "
         "keys, the last axis: use mask.any(dim=-1, keepdim=True), [T, 1]."),
        (_attend(q, ks, vs, with_diagonal(square)), DIAGONAL),  # mask | torch.eye(T)
    ]

    def diagnose(err: Exception) -> None:
        said = f"mask [{t}] at index 0 does not match the shape of the indexed tensor [{q.size(0)}"
        if isinstance(err, IndexError) and said in str(err):
            fail("a boolean index of shape [T] (~mask.any(-1)?) picks along the first "
                 "axis of a [B, T, ...] tensor, the batch: index the queries, "
                 f"out[:, ~mask.any(-1)] = 0 (or {ZERO_ROWS} after the softmax).")
        if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
            return
        try:
            got = fn(*one).detach()
            axis_added = close(got.diagonal().T, _attend(*one)[0])
        except Exception:
            axis_added = False
        if axis_added:  # B = 1 runs, and query i got mask row i: the mask's T met B
            fail(f"{axis} (torch said: {str(err).strip().splitlines()[0]})")
        try:
            got = fn(q.clone(), ks.clone(), vs.clone(), square.clone())
        except Exception:
            return
        for wrong, message in slips:
            if isinstance(got, torch.Tensor) and close(got.detach(), wrong):
                fail(f"{message} (torch said: {str(err).strip().splitlines()[0]})")

    return diagnose


def expect_batched_mask(fn: Callable, q, k, v, mask: torch.Tensor) -> None:
    """Run `fn` with a `[B, T, S]` mask (the stub allows one): `mask` `[T, S]` for batch 0, another
    with one all-False row for batch 1; name the slips a `[T, S]` mask hides: the all-False-row
    fix reducing over dim 1 (the queries there) or over the batch, one mask for every batch
    row (`mask[0]` in a loop, `mask.any(0)`, or a 3-D mask ignored)."""
    batched = torch.stack([mask, mask.roll(1, dims=-1)])
    batched[1, 2] = False  # batch 1, query 2 may attend nothing; batch 0 has no such row
    what = "attention(q, k, v, mask) with a [B, T, S] mask"
    want = _attend(q, k, v, batched[:, None])
    got = expect_tensor(call(fn, f"{what} (mask {list(batched.shape)} bool)", q.clone(),
                             k.clone(), v.clone(), batched.clone(),
                             diagnose=front_axis_crash(fn, q, k, v, batched)), what)
    b, t, d = want.shape
    loop = scaled_dot_product_attention(*(x[:, None].expand(-1, b, -1, -1) for x in (q, k, v)),
                                        batched[None])[0]
    expect_no_extra_mask_axis(got, want, what, loop)  # loop[b, c]: batch b under mask[c]
    expect_like(got, want, what, sizes={"B": b, "T": t, "S": k.size(1), "D": d})
    got = got.detach()
    nan = torch.isnan(got[1, 2]).any() and not torch.isnan(got[0]).any()
    if nan or close(got[0, 2], 0 * want[0, 2]) and not close(want[0, 2], 0 * want[0, 2]):
        both = batched.clone()
        both[0, 2] = False  # row 2 empty in every batch entry: a reduction over b finds it
        try:
            batch = close(fn(*(x.clone() for x in (q, k, v, both))),
                          _attend(q, k, v, both[:, None]))
        except Exception:
            batch = False
        if nan or batch:  # zeros: empty in every entry when one is (.all(0) of any(-1))
            fail(f"{what}: " + ("the all-False row (b=1, i=2) gives NaN" if nan else "batch 0's "
                 "row 2, which may attend keys, gives zeros") + ": the all-False-row fix "
                 "reduces over " + ("the batch too (dim 0: the row counts as " + (
                     "attending when batch 0's row 2 does)" if nan else "empty when batch 1's "
                     "row 2 is)") if batch else "the wrong axis of a [B, T, S] mask (dim 1 is "
                     "the queries there)") + ": use mask.any(dim=-1, keepdim=True), over the "
                 "keys only.")
    for one, said in ((mask, "mask[0], batch 0's mask"), (None, "no mask: a mask not [T, S] is "
                      "ignored (mask.dim() == 2 only?)"), *((getattr(batched, f)(0), "the mask "
                      f"reduced over the batch, mask.{f}(0)") for f in ("any", "all"))):
        if close(got, _attend(q, k, v, one)):  # one mask for every batch row
            fail(f"{what}: every batch row b uses {said}; use mask[b] (pass the whole "
                 "mask: masked_fill and any(-1) broadcast over the batch).")
    expect_close(got, want, what, dims="b i d")


def expect_padding_mask(fn: Callable, q, k, v, mask: torch.Tensor) -> None:
    """Run `fn` with a `[B, 1, S]` padding mask (legal: the mask is broadcastable to
    `[B, T, S]`), made of the first row of `mask` `[T, S]` and its roll; boolean indexing
    (`s[..., ~mask] = -inf`), which needs the mask's full shape, raises there and is named."""
    pad = torch.stack([mask[0], mask[0].roll(1)])[:, None]
    what = "attention(q, k, v, mask) with a [B, 1, S] padding mask"

    def diagnose(err: Exception) -> None:
        if isinstance(err, (IndexError, RuntimeError)):
            fail(f"{what}: a mask broadcastable to [B, T, S] (here [B, 1, S]) must work "
                 "too: use masked_fill, which broadcasts, not boolean indexing "
                 f"(torch said: {str(err).strip().splitlines()[0]})")

    got = expect_tensor(call(fn, f"{what} (mask {list(pad.shape)} bool)", q.clone(),
                             k.clone(), v.clone(), pad.clone(), diagnose=diagnose), what)
    want = _attend(q, k, v, pad[:, None])
    expect_like(got, want, what)
    expect_close(got.detach(), want, what, dims="b i d")


def expect_keeps_dtype(fn: Callable, what: str, q: torch.Tensor, k: torch.Tensor) -> None:
    """01 Ex1's float64 round: run `fn(q, k)` once more on float64 copies and fail unless
    the weights keep that dtype (a `.float()` on the way casts them back to float32) and
    are float64-accurate (a float32 step cast back, or an eps, is named). The copies hold
    values float32 cannot (`beyond_float32`): a `.float()` on an input shows."""
    q, k = beyond_float32(q, k)
    got = expect_tensor(call(fn, f"{what} with float64 inputs", q, k), what)
    if got.dtype != torch.float64:
        fail(f"{what} with float64 inputs returns {got.dtype}: the result must keep the "
             "inputs' dtype (float64 in, float64 out); drop the cast (.float(), .to(...)) "
             "or use the inputs' dtype.")
    want = scaled_dot_product_attention(q[:, None], k[:, None], k[:, None])[1][:, 0]
    expect_like(got, want, what)
    expect_float64_accurate(got.detach(), want, f"{what} with float64 inputs", MADE_SCALE)


def expect_square_mask(fn: Callable, q, k, v) -> None:
    """`fn` with `S = T` and a causal (non-symmetric) `[T, T]` mask: a mask transposed
    only when it is square is named."""
    t = q.size(1)
    ks, vs, mask = k[:, :t], v[:, :t], causal_mask(t)
    what = f"attention(q, k, v, mask) with S = T = {t} and a causal mask [T, T]"
    got = expect_tensor(call(fn, what, q.clone(), ks.clone(), vs.clone(), mask.clone()),
                        what)
    want = _attend(q, ks, vs, mask)
    expect_like(got, want, what)
    if not close(got, want) and close(got, _attend(q, ks, vs, mask.T)):
        fail(f"{what}: the mask is transposed (mask.mT): rows are queries, columns keys; "
             "use the mask as it is, square or not.")
    expect_close(got, want, what, dims="b i d")


def expect_large_scores(fn: Callable, what: str, reference: Callable, q: torch.Tensor,
                        *rest: torch.Tensor, dims: str) -> None:
    """Run `fn` once more with `q` times 50 (scores of a few hundred): `exp(s) / sum` without
    the row max overflows there (`exp` is inf past ~88 in float32, inf / inf is NaN), named, as
    is the result for `q` itself (kept between calls); then rows far apart (`expect_rows_apart`)."""
    big, what = q.detach() * 50, f"{what} with large scores (q * 50)"
    got = expect_tensor(call(fn, what, big.clone(), *[t.clone() for t in rest]), what)
    want = reference(big, *rest)
    expect_like(got, want, what)
    bad = ~torch.isfinite(got.detach())
    if bad.any() and torch.isfinite(want).all():
        fail(f"{what} gives NaN or inf (at {first_position(bad, dims)}): your softmax "
             "overflows for large scores (exp(100) is inf in float32): subtract each "
             "row's max first, (s - s.amax(-1, keepdim=True)).exp(), or use s.softmax(-1).")
    if not close(got, want) and close(got, reference(q, *rest)):
        fail(f"{what} gives the result of the earlier call on q itself (the same shapes): "
             "your function keeps results between calls (a cache keyed by the shapes?); "
             "compute it from each call's inputs.")
    tiny = (want < 1e-12) & (got.detach() >= 1e-10)  # weights (Ex. 1): a clamp or an eps
    if len(rest) == 1 and tiny.any() and close(got, want):
        fail(f"{what} gives a weight of at least 1e-10 where the softmax's is under 1e-12 "
             f"(at {first_position(tiny, dims)}): a clamp (clamp_min) or an eps added to the "
             "weights keeps them off the softmax: return s.softmax(-1) as it is.")
    scores = big @ rest[0].transpose(-2, -1) / big.size(-1) ** 0.5
    expect_unclamped(got, scores, None, what, (lambda w: w @ rest[1]) if rest[1:] else None)
    expect_close(got, want, what, dims=dims)
    expect_rows_apart(fn, what.split(" with large")[0], q, *rest, dims=dims)


def expect_value_width(fn: Callable, q, k, v, width: int = 10) -> None:
    """`fn(q, k, v)` with values narrower than queries and keys (`d_v != d`, a valid
    attention): scores divided by the width of the values are named."""
    d, narrow = q.size(-1), v[..., :width].clone()
    what = (f"attention(q, k, v) with v [{v.size(0)}, {v.size(1)}, {width}] narrower than q "
            f"and k (d_v = {width}, d = {d})")
    got = expect_tensor(call(fn, what, q.clone(), k.clone(), narrow.clone()), what)
    want = _attend(q, k, narrow)
    expect_like(got, want, what)
    if close(got, (q @ k.mT / width ** 0.5).softmax(-1) @ narrow) and not close(got, want):
        fail(f"{what}: you divided the scores by sqrt(v.size(-1)), the width of the values; "
             f"divide by sqrt(q.size(-1)), the width of queries and keys ({d}).")
    expect_close(got, want, what, dims="b i d")


def expect_as_in_a_model(fn: Callable, what: str, q, k, v, mask: torch.Tensor) -> None:
    """The last rounds of 01 Ex2, as a model runs it: the inputs on a GPU (the meta device), with
    no mask and with one, then float16 and bfloat16 as under `torch.autocast` (`half_rounds`)."""
    expect_any_device(fn, "attention(q, k, v)", q, k, v)  # mask=None, and a fully masked row
    expect_any_device(fn, what, q, k, v, mask)
    expect_half_rounds(fn, what, lambda dtype: (*(t.detach().to(dtype) for t in (q, k, v)),
                                                mask.clone()),
                       lambda dtype: _attend(*(t.detach().to(dtype).float() for t in (q, k, v)),
                                             mask),
                       empty=tuple(torch.nonzero(~mask.any(-1)).flatten().tolist()))
