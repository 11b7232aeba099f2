"""Checkers for notebook 03's Exercises 1-3 (the Feedback Transformer): the pieces of one
step. The token loop and the cache size (Exercises 4-5) are checked by `token_loop`.

Dimension letters (the package legend): `B` batch, `H` heads, `S` memory keys, `D` model
width, `D_h` head width, `L` layers; positions in messages in lower case, `at [b=0, d=2]`.

Each checker runs the learner's function on seeded random inputs, compares it with
`labnn.feedback.layer` and, when it differs, recomputes the typical mistakes (no softmax,
newest-first distances, an input changed in place, ...) to name one.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.feedback.layer import LayerMix, RelativeBias, feedback_attention, feedback_weights
from labnn.exercises.grading import (call, close, exercise, expect_any_device, expect_close,
                                     expect_gradients, expect_like, expect_repeatable,
                                     expect_tensor, expect_unchanged, fail, first_line,
                                     snapshot)
from labnn.exercises.grading.compare import diagnose as _diagnose
from labnn.exercises.grading.fresh_values import expect_initialised, uninitialised
from labnn.exercises.grading.sizes import randn as _randn
from labnn.exercises.grading.slips import (beyond_float32, expect_reduced_axis, float64_round,
                                          gives)
from labnn.exercises.feedback_transformer.feedback_attention_slips import (
    attention_shape, expect_empty_memory, keys_and_bias_mixed, large_logits, one_batch_one_head,
    one_layer, transposed_mix, untransposed_keys, weight_slips, written_scale)
from labnn.exercises.feedback_transformer import (dtype_rounds, kept_state, other_sizes,
                                                   weight_transforms)
from labnn.exercises.feedback_transformer.memory_vector_slips import (
    bias_shape, bias_transformed, bias_without_query_axis, clamped_to_heads, embedding_left_out,
    expect_no_keys, layers_left_out, mix_broadcast, scale_slips, scores_broadcast,
    softmax_after_mix, softmax_of_product, weights_misapplied)
from labnn.exercises.feedback_transformer.relative_bias_slips import (
    BIAS_REFERENCES, distance_slips, index_error, long_distances)

B, H, S, D_H, L, D = 2, 3, 6, 4, 3, 12
MAX_DISTANCE = 5  # not H or H + 1: a clamp to table.size(0) shows


def _leaves(*tensors: torch.Tensor) -> tuple[list, list, list]:
    """For each input: a leaf that requires grad (the learner's gradients land there),
    the non-leaf copy handed to the learner (so that an in-place change is reported, not
    refused by autograd), and a leaf for the reference."""
    mine = [t.clone().requires_grad_() for t in tensors]
    given = [t.clone() for t in mine]
    ref = [t.clone().requires_grad_() for t in tensors]
    return mine, given, ref


def _mix(xs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The memory vector, sum_l softmax(w)_l xs[l]."""
    return torch.einsum("l,lbd->bd", w.softmax(0), xs)


@exercise("memory vector (layer mix)", refuse={
    LayerMix.forward: "labnn.feedback.layer.LayerMix.forward",
    LayerMix.weights: "labnn.feedback.layer.LayerMix.weights"})
def check_memory_vector(fn: Callable) -> None:
    """`fn(xs, w)`: xs `[L+1, B, D]` (embedding first), w `[L+1]` -> $\\sum_l
    \\mathrm{softmax}(w)_l x^l$, `[B, D]`."""
    (xs_leaf, w_leaf), (xs, w), (xs_ref, w_ref) = _leaves(_randn(L + 1, B, D, seed=1),
                                                          _randn(L + 1, seed=2))
    mix = LayerMix(L + 1)
    with torch.no_grad():
        mix.logits.copy_(w)
    want = mix(xs).detach()
    before = snapshot(xs=xs, w=w)
    with uninitialised() as blank:  # a sum started from torch.empty_like: NaN here
        got = expect_tensor(call(fn, "memory_vector(xs, w)", xs, w,
                                 diagnose=mix_broadcast(fn, xs, w)), "memory_vector(xs, w)")
    expect_initialised(blank, got, "memory_vector(xs, w)", "start from zeros, or sum the "
                       "weighted layers, (w.softmax(0)[:, None, None] * xs).sum(0)")
    expect_unchanged(before, "memory_vector(xs, w)", xs=xs, w=w)
    if close(got, want):  # a result cached (by the shapes, id(), data_ptr()), a buffer
        kept_state.fresh(fn, "memory_vector(xs, w)", (xs_ref.clone(), w_ref.clone()),
                         _mix, ("xs", "softmax(w)"), "b d")
    if tuple(got.shape) == (L + 1, B, D):
        fail("the result still has one entry per layer, [L+1, B, D]: sum the weighted "
             "layers over the layer axis (dim 0) to get [B, D].")
    if tuple(got.shape) == (1, B, D):
        fail(f"memory_vector(xs, w) has shape [1, B, D] = [1, {B}, {D}]: the layer axis is "
             "kept, size 1 (keepdim=True?): drop it, .sum(0); the memory vector is [B, D].")
    transposed_mix(got, want, "memory_vector(xs, w)")
    expect_reduced_axis(got, want, {"L+1": L + 1, "B": B, "D": D}, "L+1",
                        "memory_vector(xs, w)")
    expect_like(got, want, "memory_vector(xs, w)")
    xs, w = xs.detach(), w.detach()
    p = w.softmax(0)
    if not close(got, want):  # dropout on the weights: another result at each call
        expect_repeatable(fn, "memory_vector(xs, w)", got, xs, w)
    relu = close(got, _mix(xs, w.relu().log())) and weight_transforms.relu_weights(
        lambda a, b: gives(fn, xs.clone(), a, _mix(xs, b)), w, "memory_vector(xs, w)", "w")
    if relu:  # the checks' w has one positive logit: all the weight on one layer
        fail(relu)
    _diagnose(got, want, [
        (torch.einsum("l,lbd->bd", w / w.sum(), xs),
         "you divided w by its sum, with no exp: the weights are softmax(w)."),
        (want / (L + 1), "you took the mean of the weighted layers, which divides by "
         "L+1 (1/(L+1) too small): the softmax weights already sum to one, so SUM over "
         "the layer axis."),
        (torch.einsum("l,lbd->bd", w, xs), "you used the raw logits w as weights: take "
         "softmax(w) first, so that the weights are positive and sum to one."),
        (xs.mean(0), "that is the plain average of the layers: weight layer l by "
                     "softmax(w)[l]."),
        (xs[-1], "that is the top layer only: the memory mixes ALL layers, the "
                 "embedding xs[0] included."),
        *one_layer(fn, xs, w),
        *embedding_left_out(xs, w),
        (torch.einsum("l,lbd->bd", p.flip(0), xs), "the weights are paired with the layers "
         "in reverse order: softmax(w)[l] weights xs[l]."),
        *[(torch.einsum("l,lbd->bd", weights, xs.softmax(axis)),
           f"you took a softmax of the layer outputs xs (over {where}): the softmax "
           "turns the layer logits w into weights, softmax(w) over the layer axis, and "
           "the layers themselves are mixed as they are, sum_l softmax(w)[l] * xs[l].")
          for weights in (p, w)
          for axis, where in ((0, "the layers, dim 0"), (-1, "the features, dim -1"))],
        (torch.einsum("l,lbd->bd", w.sigmoid(), xs),
         "you used sigmoid(w) as weights: each lies in (0, 1), but together they do not "
         "sum to one, so the mix is not an average of the layers; softmax(w) over the "
         "layer axis normalizes them."),
        (torch.einsum("l,lbd->bd", w.sigmoid() / w.sigmoid().sum(), xs),
         "you normalized sigmoid(w): the model's weights are softmax(w), "
         "exp(w_l) / sum_k exp(w_k), a different normalization of the same logits."),
        (torch.einsum("l,lbd->bd", w.exp(), xs), "you used exp(w) as weights without "
         "dividing by their sum: softmax(w) = exp(w) / exp(w).sum() sums to one."),
        (torch.einsum("l,lbd->bd", w.log_softmax(0), xs), "you used log_softmax: the "
         "weights must be softmax(w), which sum to one."),
        *softmax_of_product(xs, w),
        *softmax_after_mix(xs, w),
        *weights_misapplied(xs, w), *weight_transforms.mix_slips(xs, w),
    ])
    layers_left_out(fn, xs, w, got, "memory_vector(xs, w)")
    weight_transforms.row_weights(got, xs, "memory_vector(xs, w)", "w")  # from the content
    weight_transforms.expect_mix_weights(got, xs, w, "memory_vector(xs, w)", "w")
    expect_close(got, want, "memory_vector(xs, w)", dims="b d")
    want = _mix(xs_ref, w_ref)
    expect_gradients(got, want, "memory_vector(xs, w)",
                     {"xs": (xs_leaf, xs_ref), "w": (w_leaf, w_ref)},
                     dims={"xs": "l b d", "w": "l"})
    dtype_rounds.memory_vector(fn, xs, w)  # float64 that float32 cannot hold, bfloat16
    xs, w = xs.double(), w.double()
    large_logits(fn, xs)
    other_sizes.memory_vector(fn)
    # a model's xs and w: on a GPU, also at the sizes and logits an answer may branch on
    for said, args in (("", (xs, w)), (" with one layer", (xs[:1], w[:1])),
                       (" with B = 1", (xs[:, :1], w)), (" with large logits", (
                           xs, torch.tensor([1e3, -1e3, 90, 100], dtype=xs.dtype)))):
        expect_any_device(fn, "memory_vector(xs, w)" + said, *args)


@exercise("relative position bias", refuse=BIAS_REFERENCES)
def check_relative_bias(fn: Callable) -> None:
    """`fn(table, s)`: table `[H, max_distance]` (entry `d - 1` for distance `d`), `s`
    keys oldest first -> `[H, S]` where key `j` is at distance `s - j`, clamped to
    `max_distance`."""
    (table_leaf,), (table,), (table_ref,) = _leaves(_randn(H, MAX_DISTANCE, seed=3))
    rel = RelativeBias(H, MAX_DISTANCE)
    with torch.no_grad():
        rel.bias.copy_(table)
    for s in (2, 7, 4):  # 4: past 2, within max_distance (a key order right for s <= 2)
        what = f"relative_bias(table, {s})"
        want = rel(s).detach()
        before = snapshot(table=table)

        got = expect_tensor(call(fn, what, table, s,
                                 diagnose=index_error(fn, what, s, H, MAX_DISTANCE)), what)
        kept_state.fresh_result(fn, what, got, table.detach() * 2 + 1, s)
        expect_unchanged(before, what, table=table)
        bias_shape(got, H, s, MAX_DISTANCE, what)
        expect_like(got, want, what)
        d = torch.arange(s, 0, -1)
        t0 = table.detach()
        clamped_to_heads(fn, got, t0, s, what)
        _diagnose(got, want, distance_slips(t0, s, what))
        expect_close(got, want, what, dims="h j")
        expect_gradients(got, table_ref[:, d.clamp(max=MAX_DISTANCE) - 1], what,
                         {"table": (table_leaf, table_ref)}, dims={"table": "h d"})
        kept_state.relative_bias(fn, t0, s)  # a result cached per s, shape or table
        (t64,) = beyond_float32(_randn(H, MAX_DISTANCE, seed=3))  # a .float() shows
        float64_round(fn, what, (t64, s), t64[:, d.clamp(max=MAX_DISTANCE) - 1])
    expect_no_keys(fn, table.detach())
    other_sizes.relative_bias(fn)
    long_distances(fn)  # s = 200: int8 distances
    for s in (7, 0, 1, 2):  # a model's table: on a GPU (an answer may branch on s)
        expect_any_device(fn, f"relative_bias(table, {s})", table.detach(), s)


@exercise("feedback attention", refuse={
    feedback_attention: "labnn.feedback.layer.feedback_attention",
    feedback_weights: "labnn.feedback.layer.feedback_weights"})
def check_feedback_attention(fn: Callable) -> None:
    """`fn(q, k, v, bias)`: q `[B, H, D_h]`, k and v `[B, H, S, D_h]`, bias `[H, S]` ->
    `[B, H, D_h]`; zeros when `S = 0`."""
    leaves, (q, k, v, bias), refs = _leaves(
        _randn(B, H, D_H, seed=4), _randn(B, H, S, D_H, seed=5),
        _randn(B, H, S, D_H, seed=6), _randn(H, S, seed=7))
    what = "feedback_attention(q, k, v, bias)"
    want = feedback_attention(q, k, v, bias).detach()
    before = snapshot(q=q, k=k, v=v, bias=bias)

    def bias_broadcast(err: Exception) -> None:
        """The bias given an axis, bias[:, None, :]: retried with as many batch entries
        as heads (B = H), where it runs, does the bias of head b go to batch entry b?"""
        scores_broadcast(err, fn, q, k, v, bias, what)
        untransposed_keys(err, fn, q, k, v, bias, what)
        bias_without_query_axis(err, q, k, what)
        if not isinstance(err, RuntimeError):
            return
        qb, kb, vb = (_randn(H, H, *shape, seed=11 + i)
                      for i, shape in enumerate(((D_H,), (S, D_H), (S, D_H))))
        scores = torch.einsum("bhd,bhsd->bhs", qb, kb) / math.sqrt(D_H) + bias[:, None, :]
        wrong = torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), vb)
        try:
            got = fn(qb, kb, vb, bias.detach().clone())
        except Exception:
            return
        if isinstance(got, torch.Tensor) and close(got, wrong.detach()):
            fail(f"{what} raised a broadcast error between the batch (B = {B}) and the "
                 f"heads (H = {H}): bias[:, None, :] = [H, 1, S] lines the heads up with "
                 "the batch (with B = H it runs: head b's bias goes to batch entry b). "
                 "Add bias [H, S] as it is. "
                 f"(torch said: {first_line(err)})")

    got = expect_tensor(call(fn, what, q, k, v, bias, diagnose=bias_broadcast), what)
    expect_unchanged(before, what, q=q, k=k, v=v, bias=bias)
    if close(got, want):  # a result cached (by the shapes, id(), data_ptr()), a buffer
        kept_state.fresh(fn, what, tuple(t.clone() for t in refs), feedback_attention,
                         ("q", "the keys k", "the values v", "the bias"), "b h d")
    if tuple(got.shape) == (B, H, S):
        fail(f"{what} returns [B, H, S]: those are the attention weights over the "
             "keys; weight the values with them ('bhs,bhsd->bhd') to get [B, H, D_h].")
    attention_shape(got, q, {"B": B, "H": H, "S": S, "D_h": D_H}, what)
    expect_like(got, want, what)
    q, k, v, bias = (t.detach() for t in (q, k, v, bias))
    scores = torch.einsum("bhd,bhsd->bhs", q, k)
    scaled = scores / math.sqrt(D_H)
    written_scale(fn, got, q, k, v, bias, what)  # / 4.0, / math.sqrt(8): a number
    if not close(got, want):  # dropout on the weights: another result at each call
        expect_repeatable(fn, what, got, q, k, v, bias)
    _diagnose(got, want, [
        (feedback_attention(q * math.sqrt(D_H), k, v, bias),
         "you forgot to divide q·k by sqrt(d_head)."),
        (feedback_attention(q / math.sqrt(D_H), k, v, bias),
         "you divided q·k by d_head: divide by sqrt(d_head)."),
        (feedback_attention(q, v, k, bias), "k and v are swapped: the scores compare q "
                                            "with the keys k, the weights average v."),
        (feedback_attention(q, k, v, torch.zeros_like(bias)),
         "the relative bias is missing: add it to the scaled scores, before the softmax."),
        (torch.einsum("bhs,bgsd->bhd", (scaled + bias).softmax(-1), v) / H,
         "your einsum mixes the heads ('bhs,bgsd->bhd'): use one letter for the heads, "
         "'bhs,bhsd->bhd'."),
        (feedback_attention(q, k, v, bias.mean(0, keepdim=True)),
         "the bias is averaged over the heads: head h adds its own row, bias[h]."),
        (feedback_attention(q, k, v, bias / math.sqrt(D_H)),
         "you divided the bias by sqrt(d_head) too (e.g. (q·k + bias) / sqrt(d_head)): "
         "only q·k is scaled; the bias is added to the scaled scores as it is, "
         "q·k / sqrt(d_head) + bias."),
        (feedback_attention(q * math.sqrt(D_H / S), k, v, bias),
         f"you divided q·k by sqrt(S) = sqrt({S}), the number of memory keys: divide "
         "by sqrt(d_head), the width of one head, q.size(-1)."),
        (feedback_attention(q * math.sqrt(D_H / S), k, v, bias / math.sqrt(S)),
         f"you divided q·k + bias by sqrt(S) = sqrt({S}), the number of memory keys: "
         "divide q·k alone by sqrt(d_head), the width of one head, then add the bias."),
        (feedback_attention(q, k, v, bias / math.sqrt(S)),
         f"you divided the bias by sqrt(S) = sqrt({S}), the number of memory keys: "
         "only q·k is scaled (by sqrt(d_head)); add the bias as it is."),
        (feedback_attention(q, k, v, bias * math.sqrt(D_H)),
         f"your bias counts {math.sqrt(D_H):g} = sqrt(d_head) times (added twice, or "
         "multiplied by sqrt(d_head)?): divide q·k by sqrt(d_head), then add the bias once."),
        (feedback_attention(q, k, v, -bias), "the bias is subtracted: add it to the "
                                             "scores."),
        *((feedback_attention(q, k, v, bias.new_zeros(()).where(keep, -math.inf)),
           f"the bias is a boolean mask (True where bias {sign} 0 may attend, e.g. attn_mask="
           f"bias {sign} 0): keys are dropped, nothing is added: a float bias is added to each"
           " score, q·k / sqrt(d_head) + bias (attn_mask=bias, as floats, adds it).")
          for keep, sign in ((bias > 0, ">"), (bias <= 0, "<="))),
        (feedback_attention(q * math.sqrt(D_H / (H * D_H)), k, v, bias),
         "you divided q·k by sqrt(H·d_head), the width of all heads together: divide "
         "by sqrt(d_head), the width of one head, q.size(-1)."),
        (feedback_attention(q, k, v, bias.flip(-1)), "the bias is reversed along the keys "
         "(bias.flip(-1)): bias[h, s] belongs to key s; add it as it is."),
        (torch.einsum("bhs,bhsd->bhd", (scaled + bias).softmax(1), v),
         "the softmax runs over the heads (dim 1): it must run over the memory keys, "
         "the last dim of the scores [b, h, s]."),
        (torch.einsum("bhs,bhsd->bhd", scaled.softmax(-1) + bias, v),
         "the bias is added after the softmax: add it to the scores, then take the "
         "softmax."),
        (torch.einsum("bhs,bhsd->bhd", (scaled + bias).softmax(-1), k),
         "you weighted the keys: the attention weights average the VALUES v."),
        *bias_transformed(q, k, v, bias), *weight_transforms.attention_slips(q, k, v, bias),
        *keys_and_bias_mixed(q, k, v, bias),
        *scale_slips(q, k, v, bias), *weight_slips(q, k, v, bias),
    ])
    expect_close(got, want, what, dims="b h d")
    names = ("q", "k", "v", "bias")
    expect_gradients(got, feedback_attention(*refs), what,
                     {n: (a, b) for n, a, b in zip(names, leaves, refs)},
                     dims={"q": "b h d", "k": "b h s d", "v": "b h s d", "bias": "h s"})
    dtype_rounds.feedback_attention(fn, q, k, v, bias)  # float64 float32 cannot hold, bfloat16
    one_batch_one_head(fn, D_H)
    expect_empty_memory(fn, q.double(), {"B": B, "H": H, "S": 0, "D_h": D_H})
    kept_state.empty_attention(fn, q)  # zeros cached, handed out again
    other_sizes.feedback_attention_(fn)
    other_sizes.far_scores(fn)
    other_sizes.far_heads(fn)  # heads 1000 apart, rows spanning 800: a max per row only
    for n in (S, 0, 1):  # a model's inputs: on a GPU, at every S an answer may branch on
        said = what + (f" with S = {n}" if n < S else "")
        expect_any_device(fn, said, q, k[:, :, :n], v[:, :, :n], bias[:, :n])
    expect_any_device(fn, f"{what} with B = 1, H = 1", q[:1, :1], k[:1, :1], v[:1, :1],
                      bias[:1])
