"""Checkers for notebook 02's Exercises 4-5, on relative attention: the shift and the four
score terms (`labnn.xl.relative_attention`); the distances, and the sizes all three use,
are in `labnn.exercises.transformer_xl.relative_distances`. The memory exercises are checked in
`labnn.exercises.transformer_xl.segment_memory`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries (segment), `M`
memory, `S = M + T` keys, `D` width, `D_h` head width. Masks are boolean, True = may
attend.

Each checker runs the learner's function on fixed random inputs (`T != M` so that
offsets show), compares it with the package's version and, when it differs, recomputes
the typical mistakes (memory offset forgotten, shift the wrong way, a bias term missing,
the two biases swapped, ...) to say which one was made. It rejects a function that edits
its inputs in place or calls the package's own version of what it should compute. Only
entries a query may see (`j <= M + i`) are compared where the reference leaves the rest
unspecified; positions are reported in the tensor's own dimensions (`b` batch, `h` head,
`i` query, `j` key, `d` feature).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_shift
from labnn.xl.relative_attention import relative_scores as package_scores
from labnn.exercises.self_attention.masked_attention import expect_backward
from labnn.exercises.self_attention.global_reads import expect_no_global_size
from labnn.exercises.transformer_xl.shift_crash import FROM_X, shift_crash
from labnn.exercises.transformer_xl.contiguity_slips import (expect_any_layout, layout_slips,
                                                             scores_any_layout)
from labnn.exercises.transformer_xl import other_sizes
from labnn.exercises.grading.devices import cpu_dtype, expect_any_device
from labnn.exercises.transformer_xl.more_inputs import finite_where_seen
from labnn.exercises.transformer_xl.exact_rounds import (
    edited_in_place, float64_seen, long_scores, long_shift, rounded_scale)
from labnn.exercises.transformer_xl.relative_score_slips import (
    FLIPPED, bias_side_slips, crash_slips, output_slips, prescaled_slips, term_slips,
    unshifted_bias_slips)
from labnn.exercises.transformer_xl.shift_in_scores import misplaced_position
from labnn.exercises.transformer_xl.bias_mixups import mixed_heads, per_head_number, reshaped_r
from labnn.exercises.grading import (call, describe_shape, exercise, expect_close,
                                     expect_like, expect_own_code, expect_tensor,
                                     expect_unchanged, fail, snapshot)
from labnn.exercises.grading.slips import beyond_float32
from labnn.exercises.transformer_xl.relative_distances import (
    B, D_H, H, S, SIZES, T, VISIBLE, _expect_any_lead, _more_shift_mistakes, _randn,
    _shift_rows, _visible, _visible_close, check_relative_distances)  # noqa: F401 (ex. of tests)
from labnn.exercises.transformer_xl.fresh_values import expect_fresh


@exercise("relative shift", refuse={relative_shift: "labnn.xl.relative_attention.relative_shift"})
def check_relative_shift(fn: Callable) -> None:
    """`fn(x)`: x `[B, H, T, S]` whose column `r` holds distance `S - 1 - r` ->
    `[B, H, T, S]` by (query, key)."""
    what = "relative_shift(x)"
    expect_own_code(fn, what, relative_shift=relative_shift)
    x = _randn(B, H, T, S, seed=1)
    x_in = x.clone()

    one_matrix_only = shift_crash(fn, x, what)
    want = relative_shift(x)
    called = f"{what} with x {describe_shape(x.shape)} = [B, H, T, S]"
    got = expect_tensor(call(fn, called, x_in, diagnose=one_matrix_only), what)
    expect_unchanged(snapshot(x=x), what, x=x_in)
    if tuple(got.shape) == (B, H, S, T):
        fail(f"{what} has shape {describe_shape(got.shape)} = [B, H, S, T]: the last "
             "step reads the numbers back as [..., T, S] (reshape(*lead, t, s)), not "
             "as the [S, T] of a transpose.")
    if tuple(got.shape) == (B, H, T, S + 1):
        fail(f"{what} has shape {describe_shape(got.shape)} = [B, H, T, S + 1]: the "
             "padded tensor still has its zero column; read it as [..., S + 1, T], "
             "drop the first row, read back as [..., T, S].")
    if tuple(got.shape) == (B * H, T, S):
        fail(f"{what} has shape {describe_shape(got.shape)} = [B * H, T, S]: B and H "
             "were merged (reshape(-1, ...)) and never restored; keep the leading axes, "
             "*lead, t, s = x.shape, and reshape(*lead, s + 1, t), then (*lead, t, s).")
    cpu_dtype(fn, what, (x,), got, want)  # torch.zeros(*lead, t, 1): float32, on the CPU
    expect_like(got, want, what, sizes=SIZES)
    pad = torch.nn.functional.pad
    right_padded = pad(x, (0, 1)).reshape(B, H, S + 1, T)
    right_pad = right_padded[..., :-1, :].reshape(B, H, T, S)
    right_pad_first_row = right_padded[..., 1:, :].reshape(B, H, T, S)
    to_the_left = ("pad on the left: F.pad(x, (1, 0)), then read as [..., S + 1, T], "
                   "drop the FIRST row and read back as [..., T, S].")
    left_padded = pad(x, (1, 0)).reshape(B, H, S + 1, T)
    left_pad_last_row = left_padded[..., :-1, :].reshape(B, H, T, S)
    mistakes = [
        (x, "the scores come back unshifted (row i must slide left by T - 1 - i): the "
            "padded scores were viewed as [..., T, S + 1] (or transposed and back where the "
            "trick reshapes): both put every number in its place again; view them as "
            "[..., S + 1, T], reshape(*lead, s + 1, t), drop the first row, read back as "
            "[..., T, S]."),
        (relative_shift(x.flip(-1)), "your shift reads the distances in ascending "
                                     "order; column r of x holds distance S - 1 - r "
                                     "(largest first), as relative_keys produces "
                                     "them."),
        (right_pad,
         "row i slides RIGHT by i (what a zero column padded on the right, F.pad(x, (0, "
         "1)), gives, with the last row dropped, or a left pad with one number dropped "
         "instead of a row); it must slide left by T - 1 - i. "
         "With the trick: " + to_the_left),
        (right_pad_first_row,
         "row i slides left by T - i, one place too far (what a zero column padded on "
         "the right, F.pad(x, (0, 1)), gives, with the first row dropped); it must "
         "slide by T - 1 - i. With the trick: " + to_the_left),
        (_shift_rows(x, lambda i: -i),
         "row i slides RIGHT by i: it must slide LEFT by T - 1 - i, so that column j "
         "holds distance M + i - j (the last query, i = T - 1, stays in place). In a "
         "loop: x[..., i, :].roll(-(T - 1 - i), dims=-1)."),
        (_shift_rows(x, lambda i: T - i),
         "row i slides left by T - i, one place too far: it must slide by T - 1 - i "
         "(the last query, i = T - 1, stays in place)."),
        (_shift_rows(x, lambda i: T - 2 - i),
         "row i slides left by T - 2 - i, one place short: it must slide by T - 1 - i "
         "(the first query, i = 0, slides furthest, by T - 1)."),
        (pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(x.shape),
         "you transposed the padded [..., T, S + 1] tensor to get [..., S + 1, T]: a "
         "transpose moves whole rows to columns, but the trick reads the same "
         "numbers, in memory order, in rows of T: use reshape(*lead, s + 1, t), not "
         "transpose."),
        (pad(x, (0, 0, 1, 0)).reshape(B, H, S, T + 1)[..., 1:].reshape(x.shape),
         "you padded along T, the queries (F.pad(x, (0, 0, 1, 0)) adds a row): the "
         "zero goes in a new first COLUMN, along S, the last axis: F.pad(x, (1, 0))."),
        (x.flip(-1), "you flipped the columns (x.flip(-1)): that reverses every row "
                     "the same way, but row i must slide left by its own amount, T - "
                     "1 - i: pad a zero column on the left, read as [..., S + 1, T], "
                     "drop the first row, read back as [..., T, S]."),
        (pad(x, (2, 0)).flatten(-2)[..., 2:][..., :T * S].reshape(x.shape),
         "you padded two zero columns (F.pad(x, (2, 0))): pad one, F.pad(x, (1, 0))."),
        (left_pad_last_row, "you dropped the last row of the [..., S + 1, T] view: "
                            "drop the first one (padded[..., 1:, :]); it holds the "
                            "padding zero and the start of row 0."),
        (torch.nn.functional.pad(x, (1, 0)).reshape(S + 1, -1)[1:].reshape(x.shape),
         "the reshape to [S + 1, T] drops the leading dimensions, which mixes the "
         "rows of different batch entries and heads: keep them, reshape(*lead, S + 1, "
         "T), with *lead, t, s = x.shape."),
        (pad(x, (1, 0)).reshape(-1)[T:][:x.numel()].reshape(x.shape),
         "you flattened the whole tensor (reshape(-1)), so the rows slide across batch "
         "entries and heads: keep the leading dimensions, reshape(*lead, S + 1, T), "
         "with *lead, t, s = x.shape."),
        (_shift_rows(x, lambda i: i), "row i slides left by i: it must slide by T - 1 "
                                      "- i (the last query, i = T - 1, stays in "
                                      "place, the first slides furthest)."),
        (_shift_rows(x, lambda i: -(T - 1 - i)), "the rows slide right: row i must "
                                                 "slide LEFT by T - 1 - i, so that "
                                                 "column j holds distance M + i - j."),
    ]
    for wrong, message in mistakes + _more_shift_mistakes(x, got, fn):
        if _visible_close(got, wrong):
            fail(message)
    if not _visible_close(got, want):
        expect_no_global_size(fn, what, FROM_X)
    expect_close(finite_where_seen(got, what, VISIBLE), want,
                 f"{what} on the entries a query may see (j <= M + i)", dims="b h i j",
                 where=VISIBLE)
    expect_fresh(fn, what, (x.clone(),), relative_shift, _visible_close, "b h i j", VISIBLE)
    expect_backward(lambda x: _visible(fn(x)), what, lambda x: _visible(relative_shift(x)),
                    dims={"x": "b h i r"}, x=x)
    _expect_any_lead(fn, x, want, what)
    expect_any_layout(fn, what)
    (thirds,) = beyond_float32(x)  # values float32 cannot hold: a float32 step shows
    float64_seen(fn, what, (thirds,), relative_shift(thirds))
    other_sizes.relative_shift_(fn)
    other_sizes.shift_size_one(fn)
    other_sizes.shift_no_memory(fn)
    long_shift(fn, what)  # S = 2100: indices in a small dtype
    expect_any_device(fn, what, x)


def _reference_scores(q, k, r, u, v, *, use_u=True, use_v=True, position=True,
                      shift=True, scale=1.0, content=True, scale_content_only=False,
                      shift_sum=False, r_reshaped=False, scale_position_only=False,
                      v_on_r=False, key_position=False):
    """The four terms with one mistake switched on; `scale` is the power of d_head
    divided by (0.5 right); `r_reshaped`: r `[S, H, D_h]` read as `[H, S, D_h]`;
    `v_on_r`: v added to r; `key_position`: the last T keys in the position term."""
    by_key = torch.einsum("bhid,bhjd->bhij", q + (u[:, None] if use_u else 0), k)
    if r_reshaped:
        r = r.reshape(r.size(1), r.size(0), r.size(2)).transpose(0, 1)
    query = k[..., -q.size(2):, :] if key_position else q
    if v_on_r:
        query, r = query - v[:, None], r + v
    by_distance = torch.einsum("bhid,rhd->bhir", query + (v[:, None] if use_v else 0), r)
    if scale_content_only or scale_position_only:
        content, position = by_key, relative_shift(by_distance)
        if scale_content_only:
            return content / q.size(-1) ** 0.5 + position
        return content + position / q.size(-1) ** 0.5
    if shift_sum:
        return relative_shift(by_key + by_distance) / q.size(-1) ** 0.5
    by_key = by_key if content else 0
    by_key_too = relative_shift(by_distance) if shift else by_distance
    scores = by_key + (by_key_too if position else 0)
    return scores / q.size(-1) ** (0.5 * scale)


@exercise("relative attention scores", refuse={
    RelativeMultiHeadAttention.scores: "RelativeMultiHeadAttention.scores (labnn.xl)",
    package_scores: "labnn.xl.relative_attention.relative_scores"})
def check_relative_scores(fn: Callable) -> None:
    """`fn(q, k, r, u, v)` -> scores `[B, H, T, S]`: terms (a)-(d), shifted, divided by
    sqrt(D_h).

    q `[B, H, T, D_h]`, k `[B, H, S, D_h]`, r `[S, H, D_h]` (distances `S - 1 .. 0`), u,
    v `[H, D_h]`.
    """
    what = "relative_scores(q, k, r, u, v)"
    q, k = _randn(B, H, T, D_H, seed=2), _randn(B, H, S, D_H, seed=3)
    r = _randn(S, H, D_H, seed=4)
    u, v = _randn(H, D_H, seed=5), _randn(H, D_H, seed=6)
    inputs = dict(q=q.clone(), k=k.clone(), r=r.clone(), u=u.clone(), v=v.clone())
    shapes = (f"q {describe_shape(q.shape)} = [B, H, T, D_h], k "
              f"{describe_shape(k.shape)}, r {describe_shape(r.shape)}, u and v "
              f"{describe_shape(u.shape)} = [H, D_h]")
    attn = RelativeMultiHeadAttention(H * D_H, H)
    with torch.no_grad():
        attn.content_bias.copy_(u)
        attn.position_bias.copy_(v)
    want = attn.scores(q, k, r)
    said = f"{what} with {shapes}"
    got = expect_tensor(call(fn, said, *inputs.values(),
                             diagnose=crash_slips(fn, said, want, q, k, r, u, v)), what)
    expect_unchanged(snapshot(q=q, k=k, r=r, u=u, v=v), what, **inputs)
    edited_in_place(what, inputs)  # values unchanged, as q += u * 0 leaves them
    cpu_dtype(fn, what, (q, k, r, u, v), got, want)  # e.g. / torch.tensor([d]).sqrt()
    expect_like(got, want, what, sizes=SIZES)
    rounded_scale(fn, got, want, D_H)  # here 2 = sqrt(T) and 3 = sqrt(S)
    mistakes = [
        (dict(scale=0), "the scores are not scaled: divide the sum of the four terms "
                        "by sqrt(d_head)."),
        (dict(scale=2), "you divided by d_head: divide by sqrt(d_head) "
                        "(math.sqrt(q.size(-1)))."),
        (dict(scale=math.log(H * D_H) / math.log(D_H)),
         "you divided by sqrt(n_heads * d_head) = sqrt(d_model); each head divides by "
         "sqrt(d_head) = sqrt(q.size(-1))."),
        *[(dict(scale=math.log(n) / math.log(D_H)),
           f"you divided by sqrt({name}) = sqrt({n}), the number of {axis}: scale by "
           f"sqrt(D_h) = sqrt(q.size(-1)) = sqrt({D_H}), the head width.")
          for n, name, axis in ((S, "k.size(-2)", "keys"), (T, "q.size(-2)", "queries"),
                                (H, "q.size(1)", "heads"))],
        (dict(use_u=False), "term (c) is missing: add the content bias u to the "
                            "queries before the product with k."),
        (dict(use_v=False), "term (d) is missing: add the position bias v to the "
                            "queries before the product with r."),
        (dict(use_u=False, use_v=False), "terms (c) and (d) are missing: use q + u "
                                         "against k and q + v against r."),
        (dict(position=False), "only the content terms are there: add (q + v) r^T, "
                               "shifted, for (b) + (d)."),
        (dict(content=False), "only the position terms are there: add (q + u) k^T for "
                              "(a) + (c)."),
        (dict(shift=False), "the position scores are indexed by distance, not by key: "
                            "apply relative_shift."),
        (dict(scale_content_only=True), "only the content term is divided by sqrt(d_head): "
                                        "divide the sum of both, content + shifted position, "
                                        "by sqrt(d_head)."),
        (dict(scale_position_only=True), "only the position term is divided by "
                                         "sqrt(d_head): divide the sum of both terms."),
        (dict(v_on_r=True), "v is added to r: the position bias goes with the queries, "
                            "(q + v[:, None]) against r."),
        (dict(key_position=True), "the position term uses k: it is the queries, "
                                  "(q + v) r^T, that meet the position encodings r."),
        (dict(shift_sum=True), "you shifted the sum of the two products: the content "
                               "scores (q + u) k^T are already indexed by key; shift "
                               "only the position term (q + v) r^T, which is indexed "
                               "by distance, then add."),
        (dict(r_reshaped=True),
         "r is rearranged with reshape: r.reshape(H, S, D_h) (or .view) regroups the "
         "numbers of r [S, H, D_h] in memory order, which mixes distances and heads; "
         "to put the heads first, swap the axes, r.transpose(0, 1) (or "
         "einsum('bhid,rhd->bhir', q + v[:, None], r))."),
        (dict(v=u), "u is added to the queries of both terms: the position term uses "
                    "the position bias v, (q + v) r^T; u goes with the content keys "
                    "only, (q + u) k^T."),
        (dict(u=v), "v is added to the queries of both terms: the content term uses "
                    "the content bias u, (q + u) k^T; v goes with the position keys "
                    "only, (q + v) r^T."),
        (dict(r=r.flip(0)), FLIPPED),
    ]
    for options, message in mistakes:
        options = {"r": r, "u": u, "v": v, **options}
        if _visible_close(got, _reference_scores(q, k, **options)):
            fail(message)
    for wrong, message in (bias_side_slips(q, k, r, u, v)
                           + prescaled_slips(q, k, r, u, v) + term_slips(q, k, r, u, v)
                           + unshifted_bias_slips(q, k, r, u, v)
                           + layout_slips(q, k, r, u, v)
                           + reshaped_r(q, k, r, u, v) + output_slips(want)):
        if _visible_close(got, wrong):
            fail(message)
    per_head_number(got, q, k, r, u, v)  # u or v reduced over its features, however
    mixed_heads(got, q, k, r, u, v, VISIBLE)  # head h with u[g], v[g] or r[:, g]: reversed, ...
    misplaced_position(got, want, q, k, r, u, v, what)  # an inline shift of one's own
    expect_close(finite_where_seen(got, what, VISIBLE), want,
                 f"{what} on the entries a query may see (j <= M + i)", dims="b h i j",
                 where=VISIBLE)
    expect_fresh(fn, what, tuple(t.clone() for t in (q, k, r, u, v)), _reference_scores,
                 _visible_close, "b h i j", VISIBLE)
    expect_backward(
        lambda *inputs: _visible(fn(*inputs)), what,
        lambda q, k, r, u, v: _visible(_reference_scores(q, k, r, u, v)),
        dims={"q": "b h i d", "k": "b h j d", "r": "r h d", "u": "h d", "v": "h d"},
        q=q, k=k, r=r, u=u, v=v)
    doubled = tuple(t.detach().double() for t in (q, k, r, u, v))  # the one dtype rule
    float64_seen(fn, what, doubled, _reference_scores(*doubled), scale_ok=True)
    scores_any_layout(fn, what, tuple(t.detach() for t in (q, k, r, u, v)), want)
    other_sizes.relative_scores(fn)
    other_sizes.scores_size_one(fn)
    other_sizes.scores_no_memory(fn)
    long_scores(fn, what)  # S = 2100, bfloat16: indices in q's dtype
    expect_any_device(fn, what, q, k, r, u, v)
