"""More slips of notebook 01's attention-weight and causal-mask exercises, for `masked_attention`:
scores floor-divided (`//`), a softmax over the wrong axis or a "stable" one that subtracts a max
(or mean) over the wrong axis, nn.Transformer's additive float mask, a mask started from
`torch.empty`, a row flag `mask.any(-1)[:, None]`, a view of the mask or a boolean index behind
the batch axis (`s[:, ~mask] = ...`), which break a `[B, T, S]` mask; Exercise 2's masks misused.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width; masks `[T, S]`, True = may attend.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading import close, fail, first_line


def exp2_slip(q: torch.Tensor, k: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The weights of a softmax written with a base-2 exponential, `torch.exp2`: the
    scores scaled by ln 2 (2 ** s = e ** (s ln 2)), as a `(weights, message)` pair."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    return [((scores * math.log(2)).softmax(-1),
             "your softmax uses a base-2 exponential (torch.exp2, 2 ** s): 2 ** s = "
             "e ** (s ln 2), so the scores end up scaled by ln 2 = 0.693; the softmax "
             "exponentiates base e: use torch.exp, or scores.softmax(dim=-1).")]


def softmax_slips(q: torch.Tensor, k: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """Wrong weights for q `[B, T, D]`, k `[B, S, D]`, as `(weights, message)` pairs: the
    scores floor-divided by sqrt(d), exp(s - max) normalized over the keys with the max
    taken over the queries or the batch, a softmax over those axes, or taken twice, or of
    minus the scores."""
    d = q.size(-1)
    scores = q @ k.transpose(-2, -1) / d ** 0.5
    floored = (q @ k.transpose(-2, -1) // d ** 0.5).softmax(-1)
    slips = [(floored, "you scaled with // (floor division): it rounds each scaled score "
                       "down to a whole number; divide with /, scores / math.sqrt(d).")]
    for (dim, axis), stat in itertools.product(
            ((1, "the queries (dim=1)"), (0, "the batch (dim=0)")), ("max", "mean")):
        e = (scores - getattr(scores, stat.replace("max", "amax"))(dim, keepdim=True)).exp()
        slips.append((e / e.sum(-1, keepdim=True),
                      f"{stat} over the wrong axis: your scores subtract their {stat} over "
                      f"{axis}, a different constant for each key, which changes the "
                      "softmax over the keys: subtract s.max(-1, keepdim=True) (over the "
                      "keys), or use s.softmax(dim=-1)."))
    twice = ("you took a softmax twice (a softmax of weights that already sum to 1): "
             "apply one softmax, over the keys, (scores / math.sqrt(d)).softmax(dim=-1).")
    slips += [(scores.neg().softmax(-1),
               "your weights are the softmax of minus the scores (the sign flipped, as for a "
               "distance): the largest dot product must get the largest weight, "
               "(q @ k.transpose(-2, -1) / math.sqrt(d)).softmax(dim=-1)."),
              (scores.softmax(-1).softmax(-1), twice),
              (scores.softmax(-2).softmax(-1), twice.replace(
                  "(a softmax", "(over the queries, then over the keys: a softmax"))]
    for dim, axis, why in ((-2, "the queries", ""),
                           (0, "the batch", " (F.softmax(s) with no dim picks 0 for 3-D s)")):
        slips.append((scores.softmax(dim), f"the softmax runs over {axis} (dim={dim}): each "
                      "query's weights over the keys must sum to 1, so use softmax(dim=-1)"
                      f"{why}."))
    return slips


def expect_bool_causal(got: torch.Tensor, want: torch.Tensor, what: str,
                       build: str = "torch.ones(t, t, dtype=torch.bool).tril()") -> None:
    """`got` a float mask: fail by name when it is nn.Transformer's additive mask (0 = attend,
    -inf = masked) of `want`, whose `.bool()` inverts it; `build`: how to build a bool one."""
    additive = torch.zeros(want.shape).masked_fill(~want, float("-inf"))
    if got.is_floating_point() and torch.equal(got.float(), additive):
        fail(f"{what} is an additive float mask (nn.Transformer.generate_square_subsequent_"
             "mask: 0 = attend, -inf = masked, added to the scores); here a mask is bool, "
             "True = may attend, and .bool() would invert it (-inf is True): use mask == 0, "
             f"or {build}.")


def expect_defined_values(fn: Callable, t: int, got: torch.Tensor, what: str) -> None:
    """`got` = `fn(t)`, a wrong bool mask: fail by name when `fn(t)` changes between calls (values
    never set, as torch.empty gives): for the reruns `torch.empty` hands out tensors of all True,
    then all False (restored after each), as what uninitialised memory holds is chance."""
    real = torch.empty
    for fill in (True, False):
        torch.empty = lambda *args, fill=fill, **kwargs: real(*args, **kwargs).fill_(fill)
        try:
            again = fn(t)
        except Exception:
            return
        finally:
            torch.empty = real
        if not (isinstance(again, torch.Tensor) and torch.equal(again, got)):
            fail(f"{what} changes between calls with the same t: torch.empty (or a random "
                 "tensor) holds arbitrary values, never set; start from torch.ones(t, t, "
                 "dtype=torch.bool).tril().")


def expect_empty_rows_negated(fn: Callable, got: torch.Tensor, q, k, v,
                              mask: torch.Tensor) -> None:
    """`got` = `fn(q, k, v, mask)`, every query with a key it may attend: fail when it is all
    zeros, and stays so with an all-True mask: the rows that may attend some key zeroed in place
    of the empty ones (`mask.any(-1)` without its `~`)."""
    zeros = torch.zeros_like(got.detach())
    if not close(got, zeros):
        return
    try:
        again = fn(q.clone(), k.clone(), v.clone(), torch.ones_like(mask))
    except Exception:
        return
    if close(again, zeros):
        fail("every query's output came out 0, with an all-True mask too: you zeroed the "
             "rows that may attend some key (mask.any(-1) is True there). Zero the rows "
             "with no True: weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).")


def inf_fill_slips(q, k, v, mask: torch.Tensor,
                   added: list[torch.Tensor]) -> list[tuple[torch.Tensor, str]]:
    """The attention outputs of masked scores filled with +inf (the minus sign dropped),
    NaN rows or 0 after nan_to_num, as `(output, message)` pairs; where one equals `added`'s
    (the mask added as `(~mask) * -inf`), the message names both causes."""
    scores = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~mask, float("inf"))
    w = scores.softmax(-1)
    fix = "fill with float('-inf'): scores.masked_fill(~mask, float('-inf'))."
    inf = "the fill is +inf (the minus sign dropped)"
    added_inf = " or the mask was added as (~mask) * float('-inf') (0 * -inf is NaN)"
    nan = (w @ v, f"the rows came out NaN: either {inf}{added_inf}; {fix}")
    zero = (w.nan_to_num(0.0) @ v,  # the same rows as zeroing those that are not all True
            f"every row with a masked key came out 0: {inf}{added_inf}, then nan_to_num; or "
            "the empty rows were found with mask.all(-1) where mask.any(-1) belongs (a row "
            f"is empty only with no True). {fix[0].upper()}{fix[1:]}")
    pairs = []
    for (out, message), other in zip((nan, zero), added):
        if not close(out, other):  # the mask was not added: that cause is left out
            message = message.replace(added_inf, "").replace("either ", "")
        pairs.append((out, message))
    return pairs


def expect_row_axis(got: torch.Tensor, q, k, v, mask: torch.Tensor) -> None:
    """`got`, wrong with a fully masked row: named when empty rows were found over the queries."""
    w = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~mask, -1e9).softmax(-1)
    cols = mask.any(-2, keepdim=True)
    for out in (w * cols @ v, w.masked_fill(~cols, 0.0) @ v):
        if close(got, out):
            fail("the empty rows are found with mask.any(-2), over the queries: that marks "
                 "the keys no query may attend (columns). A query may attend nothing when "
                 "its row is all False, over the keys: mask.any(-1, keepdim=True), [T, 1].")


def bool_index_too(diagnose: Callable) -> Callable:
    """Wrap a crash `diagnose` of attention(q, k, v, mask): `s[~mask] = ...` on `[B, T, S]`."""
    def wrapped(err: Exception) -> None:
        diagnose(err)
        if isinstance(err, IndexError) and "shape of the mask" in str(err):
            fail("s[~mask] = ... : boolean indexing needs the mask's full shape, and mask "
                 "[T, S] does not match the scores [B, T, S]; use "
                 "s.masked_fill(~mask, float('-inf')), which broadcasts over the batch.")
    return wrapped


def expect_no_extra_mask_axis(got: torch.Tensor, want: torch.Tensor, what: str,
                              loop: torch.Tensor | None = None) -> None:
    """Name a mask that got an axis it did not need, seen with a `[B, T, S]` mask (a
    `[T, S]` one hides it): `mask[None]` (`[1, B, T, S]`, the output `[1, B, T, D]`),
    the whole mask handed to each batch element in a loop (`loop`, `[B, B, T, D]`: entry
    `[b, c]` is batch `b` under `mask[c]`) or `mask.unsqueeze(1)` (`[B, 1, T, S]`,
    broadcast to `[B, B, T, S]`: entry `[b, c]` is batch `c` under `mask[b]`)."""
    b, t, d = want.shape
    if got.shape == (1, b, t, d) and close(got[0], want):
        fail(f"{what} has shape {list(got.shape)} = [1, B, T, D], expected [B, T, D]: the "
             "mask got a batch axis (mask[None] or .unsqueeze(0)) it already has; a [T, S] "
             "mask broadcasts over the batch as it is: use the mask as given.")
    if got.shape == (b, b, t, d) and loop is not None and close(got, loop):
        fail(f"{what} has shape {list(got.shape)} = [B, B, T, D], expected [B, T, D]: each "
             "batch element got the whole [B, T, S] mask (a loop over the batch passing "
             "mask), so its scores [T, S] broadcast against it to [B, T, S]: index mask[b] "
             "inside the loop, or use the mask as it is on the whole batch.")
    if got.shape == (b, b, t, d) and close(got.diagonal(0, 0, 1).permute(2, 0, 1), want):
        fail(f"{what} has shape {list(got.shape)} = [B, B, T, D], expected [B, T, D]: the "
             "mask got a head axis (mask.unsqueeze(1), [B, 1, T, S]), but these scores "
             "[B, T, S] have none, so it broadcasts to [B, B, T, S]: use the mask as it is.")


def front_axis_crash(fn: Callable, q, k, v, batched: torch.Tensor) -> Callable:
    """A `diagnose` for the call with a `[B, T, S]` mask: a broadcast error of the row flag
    `mask.any(-1)[:, None]` ([B, 1, T] there) or `mask.any(1)[..., None]` (over the queries),
    named when `fn` runs on square inputs (`S = T`) and gives what it gives; an IndexError, when
    a rerun indexes with a boolean tensor; a view's size error, when batch 0's mask runs."""
    t = q.size(1)
    square, ks, vs = batched[..., :t].clone(), k[:, :t], v[:, :t]
    scores = (q @ ks.mT / q.size(-1) ** 0.5).masked_fill(~square, -torch.inf)
    front = scores.softmax(-1).masked_fill(~square.any(-1)[:, None], 0.0) @ vs
    over_queries = scores.softmax(-1).masked_fill(~square.any(1)[..., None], 0.0) @ vs

    def diagnose(err: Exception) -> None:
        if isinstance(err, IndexError) and _indexes_by_mask(fn, q, k, v, batched):
            fail("works for a [T, S] mask, fails for the [B, T, S] mask the docstring allows: "
                 "a boolean index (s[:, ~mask] = ...) must match the axes it indexes, and "
                 "this mask has one more; use s.masked_fill(~mask, float('-inf')), which "
                 f"broadcasts any mask shape. (torch: {first_line(err, 80)})")
        if isinstance(err, RuntimeError) and "is invalid for input of size" in str(err):
            try:  # the mask viewed or reshaped to [1, T, S] (or [T, S]): mask[0] runs
                fn(q.clone(), k.clone(), v.clone(), batched[0].clone())
            except Exception:
                return
            fail("works for a [T, S] mask, fails for the [B, T, S] one the docstring allows: a "
                 "view or reshape of the mask to [T, S] (or [1, T, S]) cannot hold B * T * S "
                 f"entries; use the mask as given. (torch: {first_line(err, 80)})")
        if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
            return
        try:
            got = fn(q.clone(), ks.clone(), vs.clone(), square.clone())
        except Exception:
            return
        if isinstance(got, torch.Tensor) and close(got.detach(), front):
            fail("works for a [T, S] mask, fails for [B, T, S]: the row flag "
                 "mask.any(-1)[:, None] puts its new axis after the first one: for a "
                 "[B, T, S] mask that is [B, 1, T]; keep the reduced axis in place with "
                 "mask.any(-1, keepdim=True) ([..., T, 1]) so it broadcasts for both mask "
                 f"shapes. (torch: {str(err).strip().splitlines()[0]})")
        if isinstance(got, torch.Tensor) and close(got.detach(), over_queries):
            fail("works for a [T, S] mask, fails for [B, T, S]: mask.any(1) reduces over "
                 "dim 1, the keys of a [T, S] mask but the queries of a [B, T, S] one: the "
                 "all-False-row fix reduces over the wrong axis; use mask.any(dim=-1, "
                 f"keepdim=True), right for both. (torch: {first_line(err, 80)})")

    return diagnose


class _BoolIndex(TorchFunctionMode):
    """Records whether a tensor was indexed (read or written) with a boolean tensor."""

    seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("__getitem__", "__setitem__", "index_put_", "index_put") and len(args) > 1:
            index = args[1] if isinstance(args[1], (tuple, list)) else (args[1],)
            self.seen |= any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                             for i in index)
        return func(*args, **(kwargs or {}))


def _indexes_by_mask(fn: Callable, *args: torch.Tensor) -> bool:
    """Rerun `fn(*args)` (clones): whether it indexes a tensor with a boolean one."""
    mode = _BoolIndex()
    try:
        with mode, torch.no_grad():
            fn(*(a.clone() for a in args))
    except Exception:
        pass  # the error the check already met: the record up to it is what counts
    return mode.seen


def one_row(i: int) -> str:
    """What to say of the mask row of query `i` used for every query (`mask[i]`)."""
    return (f"you used mask[{i}], the mask row of query {i}, for every query: mask [T, S] holds "
            "one row per query (query i may attend the keys where mask[i] is True); use it "
            "whole, scores.masked_fill(~mask, float('-inf')), which broadcasts over the batch.")


DIAGONAL = ("the mask's diagonal is forced on (mask | torch.eye(...)): query i attends key i "
            "even where the mask says False, harmless for a causal mask but wrong for a "
            "padding or banded one. Use the mask as given; a row with no True gets zeros "
            "after the softmax.")


def with_diagonal(mask: torch.Tensor) -> torch.Tensor:
    """`mask` `[..., T, S]` with every `[i, i]` True, as `mask | torch.eye(T, S)` makes it."""
    return mask | torch.eye(mask.size(-2), mask.size(-1), dtype=torch.bool, device=mask.device)


def mask_use_slips(ref: Callable[[torch.Tensor], torch.Tensor], mask: torch.Tensor
                   ) -> list[tuple[torch.Tensor, str]]:
    """The attention `ref(m)` of a mask `[T, S]` used wrongly, as `(result, message)`
    pairs: the row of one query for every query (`mask[0]`, `mask[-1]`), the mask cut to
    a triangle (`mask.tril()`, `mask & causal`: combined with a causal mask, or `|`), its
    diagonal forced on (`mask | torch.eye(T, S)`)."""
    rows = [(ref(mask[i].expand_as(mask)), one_row(i)) for i in range(mask.size(-2))]
    rows.append((ref(with_diagonal(mask)), DIAGONAL))
    causal = ("the mask is combined with a causal mask ({}): use the mask "
              "it is given as it is; it is causal only when the caller says so.")
    return rows + [
        *[(ref(mask.tril(d)), causal.format(f"mask.tril({d or ''}), or mask & causal"))
          for d in (0, -1)],
        (ref(mask | torch.ones_like(mask).tril()), causal.format("mask | causal")),
        *[(ref(mask.triu(d)), f"the mask is cut to its upper triangle (mask.triu({d or ''})): "
           "use the mask it is given as it is, a triangle of neither side.") for d in (0, 1)],
    ]


def mask_slips(q, k, v, mask: torch.Tensor, ref: Callable[[torch.Tensor], torch.Tensor]
               ) -> list[tuple[torch.Tensor, str]]:
    """01 Ex2's wrong `attention(q, k, v, mask)` results (`ref(m)`: the reference under
    mask `m`), as `(result, message)` pairs: the mask ignored, inverted, applied after the
    softmax, added, multiplied by -inf, filled with 0, or used wrongly (`mask_use_slips`)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = (scores + (~mask) * float("-inf")).softmax(-1)  # 0 * -inf = NaN on every allowed key
    times_inf = [w @ v, w.nan_to_num(0.0) @ v]  # NaN everywhere, or 0 after nan_to_num
    return [
        (ref(None), "the mask is ignored: set the scores where mask is False to -inf before "
                    "the softmax (scores.masked_fill(~mask, float('-inf')))."),
        (ref(~mask), "the mask is inverted: True means MAY attend, so fill the scores where "
                     "the mask is False (masked_fill(~mask, ...)), not where it is True."),
        ((scores.softmax(-1) * mask) @ v,
         "you zeroed the masked weights after the softmax, so the rows no longer sum to "
         "1: mask the scores (with -inf) before the softmax."),
        ((scores + mask).softmax(-1) @ v,
         "you added the boolean mask to the scores: True counts as 1 and False as 0, "
         "so every key keeps a finite score and a weight, the allowed ones just 1 "
         "higher. Fill the scores where the mask is False with -inf instead: "
         "scores.masked_fill(~mask, float('-inf'))."),
        *inf_fill_slips(q, k, v, mask, times_inf), *mask_use_slips(ref, mask),
        *[(out, "you got what scores + (~mask) * float('-inf') gives: 0 * -inf is NaN, so "
           "every allowed key's score is NaN too; fill instead: "
           "scores.masked_fill(~mask, float('-inf')).") for out in times_inf],
        (scores.masked_fill(~mask, 0.0).softmax(-1) @ v,
         "you filled the masked scores with 0: a score of 0 still gets weight exp(0) "
         "after the softmax; fill them with float('-inf'), whose weight is exactly 0."),
    ]
