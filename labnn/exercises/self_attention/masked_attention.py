"""Checkers for notebook 01's Exercises 1-3 (self-attention from scratch): attention
weights, attention with a mask, the causal mask. Exercises 4-5 (multi-head) are `multi_head`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys, `D`
width (`d_model`), `D_h` head width. Masks are boolean, True = may attend.

Each checker runs the learner's function on random inputs (a fixed seed, `T != S` so that
transposes show), compares it with `labnn.nn.attention` and, when it differs, recomputes
the typical mistakes (missing scale, softmax over the wrong axis, mask ignored, ...) to
name the one made. It also rejects in-place edits of the inputs, calls of `labnn`'s own
function, tensors made on the CPU. Positions are reported in the tensor's own dimensions:
`b` batch, `h` head, `i` query, `j` key, `d` feature.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from labnn.exercises.self_attention.attention_axes import (
    expect_4d, expect_output_scale, expect_scale)
from labnn.exercises.self_attention.causal_mask_slips import (
    SLOW_T, causal_slips, expect_causal_shape, expect_mask_equal, expect_mask_size,
    expect_no_int16_positions, mask_sizes, mirror_slips)
from labnn.exercises.self_attention.kept_buffers import (
    buffer_crash, expect_no_held_buffer, expect_no_kept_buffer, expect_past_4096)
from labnn.exercises.self_attention.attention_slips import (
    _attend, expect_as_in_a_model, expect_batched_mask, expect_empty_row_zeroed, expect_keeps_dtype,
    expect_large_scores, expect_no_default_mask, expect_padding_mask, expect_square_mask,
    expect_value_width, mask_broadcast, mask_none_crash)
from labnn.exercises.grading import (call, close, describe_shape, exercise, expect_close,
                                     expect_like, expect_no_nan, expect_own_code,
                                     expect_shape, expect_tensor, expect_unchanged, fail,
                                     expect_any_device, expect_new_each_call,
                                     expect_repeatable, snapshot)
from labnn.exercises.grading.slips import expect_every_row, scale_slips
from labnn.exercises.self_attention.backward_rounds import expect_backward, expect_backward_of
from labnn.exercises.self_attention.fresh_rounds import expect_fresh, expect_not_overwritten
from labnn.exercises.self_attention.padding_rounds import expect_all_false_attention
from labnn.exercises.self_attention.recorded_slips import (
    expect_finite_backward, torch_attention_refused)
from labnn.exercises.self_attention.own_parts import own_parts
from labnn.exercises.self_attention.zero_scores import expect_zero_score_allowed
from labnn.exercises.self_attention import far_scores, other_sizes
from labnn.exercises.self_attention.scale_slips import expect_scaled_without_mask, scale_misreads
from labnn.exercises.self_attention.softmax_mask_slips import (
    bool_index_too, exp2_slip, expect_bool_causal, expect_defined_values,
    expect_empty_rows_negated, expect_row_axis,
    mask_slips, softmax_slips)
from labnn.exercises.self_attention.weights_slips import (
    expect_batches_apart, expect_keys_scored, expect_rows_sum_to_one, no_mask_causal,
    normalisation_slips, not_softmax, output_slips, score_slips, weights_crash)

B, H, T, S, D = 2, 4, 5, 7, 24
D_H = D // H  # 6: every size differs, so that a swap of two axes shows in the shape
SIZES = {"B": B, "H": H, "T": T, "S": S, "D": D, "D_h": D_H}

EMPTY = "t = 0 (no tokens yet) must give an empty [0, 0] mask, as causal_mask(0) does"
# labnn's own attention, which the answers re-implement: refused however it is reached
OWN_SDPA = {scaled_dot_product_attention: "labnn.nn.attention.scaled_dot_product_attention"}


def _randn(*shape: int, seed: int) -> torch.Tensor:
    """A seeded standard normal tensor (the global random stream is left alone)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _random_mask(seed: int) -> torch.Tensor:
    """`[T, S]` mask, every row with a True and a False (so ~mask is valid too)."""
    mask = torch.rand(T, S, generator=torch.Generator().manual_seed(seed)) < 0.5
    mask[:, 0], mask[:, 1] = True, False
    return mask


def _copies(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Fresh copies for the learner's function (an in-place edit leaves the reference's)."""
    return [t.clone() for t in tensors]


def _reference_mha() -> MultiHeadAttention:
    """A seeded `MultiHeadAttention(D, H)` in eval mode (the global random stream kept)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9)
        return MultiHeadAttention(D, H).eval()


def _diagnose(got: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first known mistake whose result equals `got`."""
    for wrong, message in mistakes:
        if close(got, wrong):
            fail(message)


def _weights(q: torch.Tensor, k: torch.Tensor, scale: float,
             mask: torch.Tensor | None = None, dim: int = -1):
    r"""$\mathrm{softmax}(q k^\top \cdot \mathrm{scale})$ over `dim`, masked with
    $-\infty$: the right weights with the defaults, a known mistake with others."""
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=dim)


@exercise("attention weights", refuse=OWN_SDPA)
@torch_attention_refused  # torch's too (Ex. 2 and 5 refuse it: own_parts)
def check_attention_weights(fn: Callable) -> None:
    """`fn(q, k)`: q `[B, T, D]`, k `[B, S, D]` -> softmax over the keys of
    $q k^\\top / \\sqrt{D}$, `[B, T, S]`."""
    q, k = _randn(B, T, D, seed=1), _randn(B, S, D, seed=2)
    want = scaled_dot_product_attention(q[:, None], k[:, None], k[:, None])[1][:, 0]
    what = "attention_weights(q, k)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    # the learner's inputs require grad (copies of leaves, so that an in-place edit is
    # still allowed, and named below): the gradients are compared at the end
    q_leaf, k_leaf = q.clone().requires_grad_(), k.clone().requires_grad_()
    q_in, k_in = q_leaf.clone(), k_leaf.clone()
    shapes = f"q {describe_shape(q.shape)}, k {describe_shape(k.shape)}"
    got = expect_tensor(call(fn, f"{what} with {shapes}", q_in, k_in,
                             diagnose=weights_crash(fn, q, k, want)), what)
    expect_unchanged(snapshot(q=q, k=k), what, q=q_in, k=k_in)
    returned = got.detach().clone()  # a later call that writes into it is named
    if tuple(got.shape) == (B, S, T):
        fail(f"the result has shape {describe_shape(got.shape)} = [B, S, T]: rows must "
             "be queries and columns keys, so compute q @ k.transpose(-2, -1), giving "
             "[B, T, S].")
    expect_keys_scored(got, q, k)  # q @ q.mT, [B, T, T]
    expect_like(got, want, what)
    scores = q @ k.transpose(-2, -1)
    _diagnose(got, [
        (_weights(q, k, 1.0),
         f"you forgot to divide the scores by sqrt(d) (d = q.size(-1) = {D}) before the "
         "softmax."),
        (_weights(q, k, 1 / D),
         "the scores end up divided by d: either q and k were each divided by sqrt(d) (the "
         "scale applied twice), or you divided the scores by d; divide by sqrt(d) instead, "
         "once, the scores only (math.sqrt(q.size(-1)))."),
        *exp2_slip(q, k),
        *scale_slips(lambda scale: _weights(q, k, scale), D, S),
        *scale_misreads(lambda scale: _weights(q, k, scale), q),
        *softmax_slips(q, k),
        (scores.div(D**0.5).log_softmax(-1),
         "these are log-probabilities (log_softmax): use softmax(dim=-1) (or exp them)."),
        (scores / scores.sum(-1, keepdim=True),
         "you divided the scores by their sum, with no exp: apply the softmax, "
         "(scores / math.sqrt(d)).softmax(dim=-1)."),
        *score_slips(q, k), *normalisation_slips(q, k), *not_softmax(scores / D**0.5),
        *no_mask_causal(q, k, "this exercise has no mask", masked=True),
        (scores / math.sqrt(D),
         "these are the scaled scores: apply the softmax over the keys (dim=-1)."),
        (scores,
         "these are the raw dot products: divide by sqrt(d), then softmax over the keys "
         "(dim=-1)."),
    ])
    expect_scale(got, q, k)
    expect_no_nan(got, want, what, dims="b i j")
    expect_batches_apart(fn, q, k, got)
    expect_not_overwritten(got, returned, what)
    expect_rows_sum_to_one(got, want)
    expect_every_row(got, want, what)
    expect_close(got, want, what, dims="b i j")
    expect_fresh(fn, what, tuple(t.clone().requires_grad_() for t in (q, k)),
                 lambda q, k: _weights(q, k, D**-0.5), dims="b i j")
    expect_large_scores(fn, what, lambda q, k: _weights(q, k, D**-0.5), q, k, dims="b i j")
    expect_4d(fn, (B, H, T, S, D_H), output=False, width=D)
    other_sizes.weights_size_one(fn)
    expect_any_device(fn, what, q, k)
    expect_keeps_dtype(fn, what, q, k)  # last call: the isolation tests count on it
    q_ref, k_ref = q.clone().requires_grad_(), k.clone().requires_grad_()
    want = scaled_dot_product_attention(q_ref[:, None], k_ref[:, None], k_ref[:, None])[1]
    expect_backward_of(got, want[:, 0], what, {"q": (q_leaf, q_ref), "k": (k_leaf, k_ref)},
                        dims={"q": "b i d", "k": "b j d"})


@exercise("attention with a mask", refuse=OWN_SDPA)
@own_parts(2)  # torch's fused attention and labnn's masked_softmax refused
def check_attention(fn: Callable) -> None:
    """`fn(q, k, v, mask=None)`: q `[B, T, D]`, k, v `[B, S, D]` (once narrower v), mask
    `[T, S]` (True = may attend) -> `[B, T, D]`; a query that may attend nothing gets zeros."""
    q, k, v = _randn(B, T, D, seed=3), _randn(B, S, D, seed=4), _randn(B, S, D, seed=5)

    def ref(mask):
        out, _ = scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)
        return out[:, 0]

    what = "attention(q, k, v)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    q_in, k_in, v_in = _copies(q, k, v)
    shapes = f"q {describe_shape(q.shape)}, k and v {describe_shape(k.shape)}"
    first = f"{what} with mask=None ({shapes})"
    by_keys = weights_crash(lambda q, k: fn(q, k, torch.eye(k.size(-2), device=k.device).expand(
        *k.shape[:-1], -1)), q, k, _weights(q, k, D**-0.5))  # out = weights (k.T named)
    none = mask_none_crash(fn, first, _random_mask(seed=6), q, k, v)
    got = expect_tensor(call(fn, first, q_in, k_in, v_in,
                             diagnose=lambda err: by_keys(err) or none(err)), what)
    expect_unchanged(snapshot(q=q, k=k, v=v), what, q=q_in, k=k_in, v=v_in)
    if tuple(got.shape) == (B, T, S):
        fail(f"{what} returned shape [B, T, S] = {describe_shape(got.shape)}: those are "
             "the weights; return weights @ v, shape [B, T, D].")
    expect_like(got, ref(None), what)
    expect_repeatable(fn, what, got, q, k, v)
    expect_scaled_without_mask(fn, got, q, k, v)
    _diagnose(got, [
        *[(w @ v, said) for w, said in exp2_slip(q, k) + softmax_slips(q, k)
          + no_mask_causal(q, k, "mask=None means no mask") + not_softmax(q @ k.mT / D**0.5)
          + score_slips(q, k)],
        *scale_slips(lambda scale: _weights(q, k, scale), D, S, after=lambda w: w @ v),
        *scale_misreads(lambda scale: _weights(q, k, scale), q, after=lambda w: w @ v),
        (_weights(q, k, D**-0.5) @ k,
         "you weighted the keys (w @ k): the attention weights average the values, w @ v."),
        *output_slips(q, k, v),
    ])
    expect_output_scale(got, q, k, v)
    expect_no_default_mask(fn, got.detach(), q, k, v, _random_mask(seed=6))
    expect_every_row(got, ref(None), what)
    expect_close(got, ref(None), what, dims="b i d")
    expect_fresh(fn, what, (q, k, v), _attend, dims="b i d")
    expect_value_width(fn, q, k, v)
    expect_large_scores(fn, what, _attend, q, k, v, dims="b i d")

    mask = _random_mask(seed=6)
    what = "attention(q, k, v, mask)"
    q_in, k_in, v_in, mask_in = _copies(q, k, v, mask)
    got = expect_tensor(call(fn, what, q_in, k_in, v_in, mask_in,
                             diagnose=bool_index_too(mask_broadcast(fn, q, k, v, mask))), what)
    expect_unchanged(snapshot(q=q, k=k, v=v, mask=mask), what,
                     q=q_in, k=k_in, v=v_in, mask=mask_in)
    expect_like(got, ref(mask), what)
    expect_empty_rows_negated(fn, got, q, k, v, mask)
    _diagnose(got, mask_slips(q, k, v, mask, ref))
    far_scores.expect_far_rounds(fn, what, got, q, k, v, mask)
    expect_zero_score_allowed(fn, what, q, k, v, mask)  # s * mask, then s == 0 masked
    expect_close(got, ref(mask), what, dims="b i d")
    masked_got, full_mask = got, mask.clone()

    mask[1] = False  # query 1 may attend nothing, e.g. a padding position
    what = "attention(q, k, v, mask) with a fully masked row"
    q_in, k_in, v_in, mask_in = _copies(q, k, v, mask)
    got = expect_tensor(call(fn, f"{what} (query i=1 may attend no key)",
                             q_in, k_in, v_in, mask_in), what)
    expect_unchanged(snapshot(q=q, k=k, v=v, mask=mask), what,  # e.g. mask |= empty rows
                     q=q_in, k=k_in, v=v_in, mask=mask_in)
    expect_like(got, ref(mask), what)
    if not close(got, ref(mask)) and close(got, masked_got.detach()):
        fail(f"{what} gives the result of the earlier call's mask (the same shape, where "
             "query 1 could attend): the mask, or what you made of it (~mask, its empty "
             "rows), is kept between calls; compute it from each call's mask.")
    expect_empty_row_zeroed(got.detach(), 1, v.mean(dim=1), ref(None)[:, 1], v, v.sum(1))
    expect_row_axis(got.detach(), q, k, v, mask)
    expect_close(got, ref(mask), what, dims="b i d")
    far_scores.expect_fill_below(fn, "attention(q, k, v, mask)", masked_got, q, k, v,
                                 full_mask, levels=far_scores.DEEP)  # -1e4, -65504
    expect_batched_mask(fn, q, k, v, _random_mask(seed=6))
    expect_padding_mask(fn, q, k, v, _random_mask(seed=6))
    expect_square_mask(fn, q, k, v)
    expect_4d(fn, (B, H, T, S, D_H), output=True, mask=_random_mask(seed=7), width=D)
    expect_finite_backward(fn, q, k, v, mask)
    expect_backward(fn, what, lambda q, k, v, mask: scaled_dot_product_attention(
                        q[:, None], k[:, None], v[:, None], mask)[0][:, 0],
                    dims={"q": "b i d", "k": "b j d", "v": "b j d"}, q=q, k=k, v=v, mask=mask)
    expect_all_false_attention(fn, q, k, v)  # a batch of pure padding, and its gradient
    other_sizes.attention_size_one(fn)
    expect_as_in_a_model(fn, what, q, k, v, mask)  # on a GPU, under autocast
    far_scores.expect_fill_below(fn, "attention(q, k, v, mask)", masked_got, q, k, v,
                                 full_mask, levels=far_scores.FAR)  # -1e9 (where), once right


@exercise("causal mask", refuse={causal_mask: "labnn.nn.attention.causal_mask"})
@own_parts(3)  # torch.nn.Transformer.generate_square_subsequent_mask refused
def check_causal_mask(fn: Callable) -> None:
    """`fn(t)` -> `[t, t]` bool, True where query `i` may attend key `j`: `j <= i`."""
    name = getattr(fn, "__name__", "")
    name = name if name.isidentifier() else "causal_mask"
    expect_own_code(fn, f"{name}(t)", causal_mask=causal_mask)
    largest = 0
    for t in mask_sizes(fn, name):  # 16-2100: a mask cut from a fixed-size one shows
        what, largest = f"{name}({t})", max(largest, t)
        got = expect_tensor(call(fn, what, t, advice=EMPTY if t == 0 else "",
                                 diagnose=buffer_crash(what, t)), what)
        expect_mask_size(got, t, what, fn)
        expect_causal_shape(got, t, what, fn)
        expect_shape(got, (t, t), what)
        want = causal_mask(t)
        if got.dtype != torch.bool:
            expect_bool_causal(got, want, what)
            fail(f"{what} has dtype {got.dtype}; masks are booleans (True = may attend): "
                 "build it with dtype=torch.bool or compare, e.g. j <= i.")
        if got.device != want.device:  # the notebook's `device`, with no input to read one
            fail(f"{what} is on the {got.device} device: with no input tensor to take a device "
                 "from, make the mask on the default device, the CPU (no device=, no "
                 ".to(device)); a model moves it, or builds it with device=x.device.")
        expect_like(got, want, what)
        _diagnose(got, causal_slips(t, what, want, fn if got.all() else None)
                  + mirror_slips(t, what, want))
        if t != SLOW_T:  # a slow answer's long round: one call, its reruns at 300 done
            expect_defined_values(fn, t, got, what)
        expect_mask_equal(got, want, what, fn)
    expect_no_kept_buffer(fn, name, largest)
    expect_past_4096(fn, name, largest)
    expect_no_held_buffer(fn, name, max(largest, 4200 if largest == 2100 else 0))
    expect_no_int16_positions(fn, name)  # right up to 32,767, where int16 wraps
    expect_new_each_call(fn, f"{name}(5)", 5, fix="Build a new mask on every call, from t: "
                         "torch.ones(t, t, dtype=torch.bool).tril().")
