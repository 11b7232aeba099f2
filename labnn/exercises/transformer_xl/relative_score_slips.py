"""The slips of notebook 02's relative scores that put the biases on the wrong side (`u`
added to the keys, `v` added to the position encodings `r`, either left out, or the two
swapped) or leave them unscaled (q divided before they are added), and the crashes whose
cause can be named (u and v without a query axis, r in the wrong layout, relative_shift
given something other than the position scores); named for
`labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys,
`D_h` head width.
"""

from __future__ import annotations

import itertools
import re
from typing import Callable

import torch

from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift
from labnn.exercises.grading import (close, describe_shape, explain, fail, first_line,
                                     name_axes)
from labnn.exercises.grading.sizes import written_size
from labnn.exercises.transformer_xl.relative_distances import (D_H, SIZES, S, T, _randn,
                                                               _visible_close)
from labnn.exercises.transformer_xl.bias_mixups import (
    bias_mixups, broadcast_axes, index_slips, k_axes, padded_columns, sizes_from_axes_1_2)

# q, k, r, u, v with every size, and every product of two, other than the check's
OTHER = ((3, 4, 5, 6), (3, 4, 11, 6), (11, 4, 6), (4, 6), (4, 6))
QUERY, KEY, OUT = "on the query side", "on the key side", "left out"
_DONE = {("u", KEY): "adds u to the keys (k + u)", ("u", OUT): "leaves u out",
         ("v", KEY): "adds v to r (r + v)", ("v", OUT): "leaves v out"}


def bias_side_slips(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
                    v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with the content bias `u` and the position bias `v` each on the query
    side (right), on the key side (added to `k`, or to `r`) or left out, every wrong
    combination with its diagnosis; then the two biases swapped.

    Args:
        q: `[B, H, T, D_h]`; k: `[B, H, S, D_h]`; r: `[S, H, D_h]`; u, v: `[H, D_h]`.

    Returns:
        `(scores [B, H, T, S], message)` pairs.
    """
    by_key = {QUERY: (q + u[:, None]) @ k.mT, KEY: q @ (k + u[:, None]).mT, OUT: q @ k.mT}
    by_distance = {QUERY: (q + v[:, None]) @ r.permute(1, 2, 0),
                   KEY: q @ (r + v).permute(1, 2, 0), OUT: q @ r.permute(1, 2, 0)}
    scale = q.size(-1) ** 0.5
    slips = []
    for side_u, side_v in itertools.product(by_key, by_distance):
        done = [_DONE[bias] for bias in (("u", side_u), ("v", side_v)) if bias in _DONE]
        if done:
            scores = (by_key[side_u] + relative_shift(by_distance[side_v])) / scale
            slips.append((scores, "u and v are query-side biases: (q + u) k^T and "
                                  "(q + v) r^T, with u[:, None] and v[:, None]; yours "
                                  f"{' and '.join(done)}."))
    swapped = (q + v[:, None]) @ k.mT + relative_shift((q + u[:, None]) @ r.permute(1, 2, 0))
    slips.append((swapped / scale,
                  "the biases are swapped: u (the content bias) goes with the content "
                  "keys k, v (the position bias) with the position keys r: (q + u) k^T "
                  "+ shift((q + v) r^T)."))
    content_shifted = relative_shift(by_key[QUERY]) + by_distance[QUERY]
    slips.append((content_shifted / scale,
                  "you shifted the content term (q + u) k^T and not the position term: "
                  "(q + u) k^T is already indexed by key; shift the position term "
                  "(q + v) r^T, indexed by distance: (q + u) k^T + shift((q + v) r^T)."))
    return slips + bias_mixups(q, k, r, u, v)


def prescaled_slips(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
                    v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with q divided by sqrt(D_h) before u and v are added (so the biases
    go unscaled), with its diagnosis; arguments as `bias_side_slips`."""
    q = q / q.size(-1) ** 0.5
    scores = ((q + u[:, None]) @ k.mT
              + relative_shift((q + v[:, None]) @ r.permute(1, 2, 0)))
    return [(scores, "you divided q by sqrt(d_head) before adding u and v, so the biases "
                     "stay unscaled: divide the whole sum, (q + u) k^T + shift((q + v) "
                     "r^T), by sqrt(d_head).")]


def unshifted_bias_slips(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
                         v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with term (d), v r^T, added without the shift while (b), q r^T, is
    shifted (or the reverse), with their diagnoses; arguments as `bias_side_slips`."""
    rt = r.permute(1, 2, 0)  # [H, D_h, S]
    content, b = (q + u[:, None]) @ k.mT, q @ rt
    d = (v[:, None] @ rt)[None]  # [1, H, 1, S], by distance
    scale = q.size(-1) ** -0.5
    said = ("term {} is added unshifted{} while {} is shifted: both are indexed by "
            "distance (they multiply r); shift them together: relative_shift((q + "
            "v[:, None]) @ r^T).")
    alone = " (shifted alone, its one row, [1, H, 1, S], stays in place)"
    return [((content + relative_shift(b) + d) * scale, said.format("(d) v r^T", alone, "(b)")),
            ((content + b + relative_shift(d.expand_as(b))) * scale,
             said.format("(b) q r^T", "", "(d)"))]


def crash_slips(fn: Callable, what: str, want, q, k, r, u, v) -> Callable:
    """A `diagnose` for `relative_scores`: a broadcast error is named when the function
    runs with u and v given as `[H, 1, D_h]` (or explained with the fix); a broadcast or
    einsum error when the scores are right with r's axes permuted (r's layout named), or
    with k's (`k_axes`); an error of labnn's `relative_shift` when it was given anything
    but scores `[B, H, T, S]`; `.view` on a tensor whose layout it cannot regroup (the
    einsum's output) is named; any other error is the learner's own."""
    def rerun(*args):
        try:
            return fn(*(a.clone() for a in args))
        except Exception:
            return None

    def diagnose(err: Exception) -> None:
        _shift_argument(err)
        written_size(err, what.split(" with ")[0], lambda: rerun(q, k, r, u, v), lambda: rerun(
            *(_randn(*shape, seed=17) for shape in OTHER)), "read every size from the inputs "
            "(in a shift: *lead, t, s = x.shape).")
        padded_columns(lambda: rerun(q, k, r, u, v), err, what.split(" with ")[0])
        index_slips(err, what.split(" with ")[0], S)
        sizes_from_axes_1_2(err, what.split(" with ")[0], want.shape)  # inline shift
        if isinstance(err, RuntimeError) and "view size is not compatible" in str(err):
            fail(f"{what.split(' with ')[0]}: .view cannot regroup axes that are not adjacent "
                 "in memory, as in an einsum's output (einsum('bhtd,shd->bhts', ...) lays its "
                 "heads before its batch) or a transpose: use .reshape (or .flatten), which "
                 "copies only when it must.")
        einsum = isinstance(err, RuntimeError) and "einsum" in str(err)
        if not einsum and (not isinstance(err, RuntimeError) or not any(
                words in str(err) for words in ("must match the size", "batch2 tensor"))):
            return  # a broadcast, or a matmul's sizes ((q + u) @ k: batch2's)
        h, d = q.size(1), q.size(-1)
        if f"({d}) must match the size of tensor b ({h}) at non-singleton dimension 3" in str(err):
            fail(f"{what.split(' with ')[0]}: a tensor of H = {h} numbers met q's D_h = {d} "
                 "features (the last axis): a bias reduced over its features, u.mean(-1) "
                 "([H], one number per head)? u and v [H, D_h] hold one row per head: add "
                 "them whole, q + u[:, None].")
        uv = ("u and v [H, D_h] have no batch or query axis: add them to q as u[:, None] "
              "([H, 1, D_h]), which broadcasts over the batch and the queries")
        tries = [] if einsum else [(u[:, None], v[:, None]), (u[:, None], v), (u, v[:, None])]
        runs = [rerun(q, k, r, *biases) for biases in tries]  # both, or one left out
        if any(isinstance(got, torch.Tensor) and close(got.detach(), want) for got in runs):
            fail(uv + ".")
        if runs and runs[0] is not None:  # runs with u[:, None] given, but wrong: more axes?
            explain(what, err, "u and v [H, D_h] must meet q [B, H, T, D_h] on its heads: "
                    "u[:, None] ([H, 1, D_h]) broadcasts over the batch and queries; u as it "
                    "comes, or u[:, None, None], meets other axes")
            raise err
        broadcast_axes(err, q, k)  # u[None, None] in an einsum; a term [B, H, S, T]
        for p in itertools.permutations(range(3)):
            got = rerun(q, k, r.permute(*p), u, v)
            if isinstance(got, torch.Tensor) and close(got.detach(), want):
                if einsum:
                    read = ", ".join(["S", "H", "D_h"][a] for a in p)
                    fail(f"r is [S, H, D_h], but your einsum reads it as [{read}] (the "
                         f"scores are right with r.permute{p}): give r's subscripts in "
                         "its own order, e.g. einsum('bhtd,shd->bhts', q + v[:, None], r).")
                fail("r [S, H, D_h] is used in the wrong layout (the scores are right "
                     "with its axes permuted): r must be [H, D_h, S]: r.permute(1, 2, 0).")
        k_axes(lambda k: rerun(q, k, r, u, v), k, want, einsum)  # k.T, k.transpose(1, 2)
    return diagnose


def _shift_argument(err: Exception) -> None:
    """Name an error raised inside labnn's `relative_shift` when its argument was not
    scores by query and distance (e.g. r itself)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code is not relative_shift.__code__:
        tb = tb.tb_next
    x = tb.tb_frame.f_locals.get("x") if tb is not None else None
    if not isinstance(x, torch.Tensor) or name_axes(x.shape[-2:], SIZES) == "[T, S]":
        return
    named = name_axes(x.shape, SIZES)
    given = describe_shape(x.shape) + (f" = {named}" if named else "")
    width = x.dim() > 0 and x.size(-1) == D_H
    fail(f"relative_shift was given {given}" + (", not scores (its last axis is D_h)"
                                                  if width else "")
         + ": shift the product (q + v) r^T [B, H, T, S] (by query and distance), "
         + ("not r." if width else "then add it to (q + u) k^T."))


def _right_on_square(fn: Callable, x: torch.Tensor) -> bool:
    """Whether `fn` shifts the square `[B, H, T, T]` part of x (no memory) right, on the
    entries a query may see (False where it raises)."""
    square = x[..., :T].clone()
    try:
        return close(fn(square.clone())[..., causal_mask(T)],
                     relative_shift(square)[..., causal_mask(T)])
    except Exception:
        return False


def _rows_over_s(fn: Callable, x: torch.Tensor, err: Exception, what: str) -> None:
    """Name an IndexError at row T of x `[B, H, T, S]` when `fn` is right on a square
    `[B, H, T, T]` (no memory): something runs over the S columns where the T rows are
    meant."""
    if not isinstance(err, IndexError) or f"index {T} is out of bounds" not in str(err):
        return
    if _right_on_square(fn, x):
        fail(f"{what} reads row {T} of x [B, H, T, S] = {describe_shape(x.shape)}, which "
             f"has T = {T} rows: it works when S = T, so it runs over the S columns "
             "(x.size(-1)); loop over the T rows (x.size(-2)), not the S columns.")


def _t_as_s(fn: Callable, x: torch.Tensor, err: Exception, what: str) -> None:
    """Name a reshape that raised on x `[B, H, T, S]` when `fn` is right on a square
    `[B, H, T, T]`: T and S were confused (the failing view's last size says which)."""
    shape = re.search(r"shape '\[([-\d, ]+)\]' is invalid", str(err))
    if not shape:
        return
    if _right_on_square(fn, x):
        last = int(shape[1].split(",")[-1])
        used = ("your reshape used S where T belongs" if last == S else
                "your reshape uses one where the other belongs")
        fail(f"{what} works when T = S but not here: T is x.size(-2), S is x.size(-1); "
             f"they differ here (T={T}, S={S}): {used} (torch said: "
             f"{first_line(err)}).")


def one_matrix_only(fn: Callable, x: torch.Tensor, err: Exception, what: str) -> None:
    """Name a crash on x `[B, H, T, S]` when `fn` is right on one `[T, S]` matrix: T and S
    read from the first two axes (then it is also right on `[T, S, T, S]`), a 2-D reshape
    (torch names a 2-D shape), or else the leading axes lost somewhere."""
    try:
        works = _visible_close(fn(x[0, 0].clone()), relative_shift(x[0, 0]))
    except Exception:
        return
    if not works:
        return
    said = first_line(err) or type(err).__name__
    shown = f"[B, H, T, S] = {describe_shape(x.shape)}"
    probe = torch.randn(T, S, T, S, generator=torch.Generator().manual_seed(3))
    try:
        first_axes = _visible_close(fn(probe.clone()), relative_shift(probe))
    except Exception:
        first_axes = False
    if first_axes:
        fail(f"{what} works on one [T, S] matrix but not on {shown}: T and S are the LAST "
             "two axes: *lead, t, s = x.shape (or t, s = x.size(-2), x.size(-1)); "
             "x.size(0), x.size(1) are the batch and heads on a [B, H, T, S] input.")
    if re.search(r"shape '\[-?\d+, -?\d+\]' is invalid", said):
        fail(f"{what} works on one [T, S] matrix but not on {shown}: keep the leading "
             "dimensions, *lead, t, s = x.shape, and reshape(*lead, s + 1, t) (not "
             "reshape(s + 1, t), which mixes the rows of different batch entries and heads).")
    fail(f"{what} works on one [T, S] matrix but not on {shown}: keep the leading "
         "dimensions, *lead, t, s = x.shape, and carry *lead through every reshape "
         f"and slice (torch said: {said}).")


def output_slips(want: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The attention weights returned for the scores `want` (softmax over the keys, masked
    or not), with their diagnosis (head 0's biases for every head: `bias_mixups.head_slips`)."""
    weights = ("you returned the attention weights (a softmax over the keys): the exercise "
               "returns the scores before the softmax, [B, H, T, S] (the causal mask and "
               "softmax come after).")
    masked = want.masked_fill(~causal_mask(T, S), float("-inf")).softmax(-1)
    return [(want.softmax(-1), weights), (masked, weights)]


FLIPPED = ("r is reversed (r.flip(0)?): row r of r is the encoding of distance S - 1 - r, "
           "largest first, as relative_keys gives it and as relative_shift expects; use r as "
           "it comes.")
_TERMS = {"(a)": "(a), q k^T (the query against the keys)",
          "(b)": "(b), q r^T (the query against the relative positions)",
          "(c)": "(c), u k^T (the content bias against the keys)",
          "(d)": "(d), v r^T (the position bias against the relative positions)"}
_SUMS = {"(a)": "the content part is (q + u) k^T, not u k^T",
         "(b)": "the position part is (q + v) r^T, not v r^T",
         "(c)": "the content part is (q + u) k^T, not q k^T",
         "(d)": "the position part is (q + v) r^T, not q r^T"}


def term_slips(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
               v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with one of the four terms left out (the position terms shifted as
    the reference does), with r's or k's heads summed (an einsum letter for their heads
    that differs from q's), with k^T made by `k.reshape(B, H, D_h, S)` or k reversed, k and r
    swapped (the content term against r, the shifted one against k), divided by
    d / 2 or 2d (`d ** 1 / 2` misread) or multiplied by sqrt(d), each with its diagnosis;
    arguments as `bias_side_slips`."""
    rt = r.permute(1, 2, 0)  # [H, D_h, S]
    qr = q @ rt  # [B, H, T, S], by distance
    terms = {"(a)": q @ k.mT, "(b)": relative_shift(qr), "(c)": u[:, None] @ k.mT,
             "(d)": relative_shift((v[:, None] @ rt).expand_as(qr))}
    d = q.size(-1)
    total = sum(terms.values())
    slips = [((total - term) / d ** 0.5, f"term {_TERMS[name]}, is missing: {_SUMS[name]}.")
             for name, term in terms.items()]
    heads = ("your {} scores sum {} over the heads (an einsum letter for {}'s heads that "
             "differs from q's): use the same letter, e.g. {}.")
    r_sum, k_sum = r.sum(1, keepdim=True).expand_as(r), k.sum(1, keepdim=True).expand_as(k)
    by_key = (q + u[:, None]) @ k.mT
    by_r = relative_shift((q + v[:, None]) @ rt)
    by_r_sum = relative_shift((q + v[:, None]) @ r_sum.permute(1, 2, 0))
    slips += [((by_key + by_r_sum) / d ** 0.5,
               heads.format("position", "r", "r", "'bhid,jhd->bhij'")),
              (((q + u[:, None]) @ k_sum.mT + by_r) / d ** 0.5,
               heads.format("content", "k", "k", "'bhid,bhjd->bhij'"))]
    k_reshaped = k.reshape(*k.shape[:2], d, k.size(2))  # [B, H, D_h, S], not k^T
    slips.append((((q + u[:, None]) @ k_reshaped + by_r) / d ** 0.5,
                  "k^T is made with reshape: k.reshape(B, H, D_h, S) (or .view) regroups the "
                  "numbers of k [B, H, S, D_h] in memory order, which mixes keys and features; "
                  "reshape is not a transpose: swap the axes, k.transpose(-2, -1) (or k.mT)."))
    slips.append((((q + u[:, None]) @ k.flip(-2).mT + by_r) / d ** 0.5,
                  "your content term meets k reversed along the keys (k.flip(-2)): k is by key "
                  "already, in the scores' order; only r is by distance: (q + u[:, None]) @ k.mT."))
    slips.append((((q + u[:, None]) @ rt + relative_shift((q + v[:, None]) @ k.mT)) / d ** 0.5,
                  "k and r are swapped: the content keys k meet the queries unshifted, (q + u) "
                  "k^T; the position keys r, by distance, are the shifted term, shift((q + v) "
                  "r^T)."))
    power = "** binds tighter than /; use d ** 0.5 (or math.sqrt(d))."
    slips += [((by_key + by_r) / (d / 2), f"you divided the scores by d / 2 = {d // 2}: "
                                          f"`d ** 1 / 2` is (d ** 1) / 2, since {power}"),
              ((by_key + by_r) / (2 * d), f"you divided the scores by 2d = {2 * d}: "
                                          f"`scores / d ** 1 / 2` divides by d, then by 2: "
                                          f"{power}"),
              ((by_key + by_r) * d ** 0.5, "you multiplied the scores by sqrt(d_head): divide "
                                           "them by it, / math.sqrt(q.size(-1)).")]
    return slips
