"""Checkers for notebook 01's Exercises 4-5 (multi-head): splitting and merging heads, and
multi-head attention from the parts of a `labnn.nn.attention.MultiHeadAttention`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` tokens, `D` width
(`d_model`), `D_h` head width. The sizes and inputs are those of
`masked_attention`, where every size differs so that a swap of two axes shows.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch

from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from labnn.exercises.self_attention.multi_head_merge_slips import (
    expect_heads_float64, expect_merged_named, explain_crash, runs)
from labnn.exercises.self_attention.multi_head_order_slips import (
    expect_head_order, expect_mha_empty_row, expect_mha_head_order, merge_axis_slips, mha_slips)
from labnn.exercises.self_attention.masked_attention import (
    B, D, H, OWN_SDPA, SIZES, T, _diagnose, _randn, _reference_mha, _weights, expect_backward)
from labnn.exercises.grading import (call, describe_shape, exercise, expect_close,
                                     expect_like, expect_own_code, expect_tensor, expect_unchanged,
                                     expect_any_device, fail, snapshot)
from labnn.exercises.self_attention import mha_rounds, other_sizes, recorded_slips
from labnn.exercises.self_attention.fitted_scales import expect_mha_scale
from labnn.exercises.self_attention.fresh_rounds import expect_fresh
from labnn.exercises.self_attention.global_reads import expect_no_global_module
from labnn.exercises.self_attention.own_parts import own_parts
from labnn.exercises.self_attention.scale_slips import mha_scale_slips, name_int_root
from labnn.exercises.self_attention.softmax_mask_slips import one_row
from labnn.exercises.self_attention.multi_head_slips import (
    VALUES_X, expect_heads_joined, expect_heads_not_swapped, expect_heads_transposed,
    expect_merged_shape, expect_out_proj_merged, expect_qkv_cut, expect_repeatable,
    expect_split_shape, expect_weight_rows, merge_crash, split_crash, split_slips)


@exercise("split and merge heads")
@own_parts(4)  # labnn's MultiHeadAttention.split_heads refused
def check_heads(split_heads: Callable, merge_heads: Callable) -> None:
    """`split_heads(x, n_heads)`: `[B, T, D]` -> `[B, H, T, D_h]`; `merge_heads(x)`: back.
    Head `h` owns features `h * D_h` to `(h + 1) * D_h - 1`."""
    d_head = D // H
    x = _randn(B, T, D, seed=7)
    want = _reference_mha().split_heads(x)
    what = f"split_heads(x, {H})"
    x_in = x.clone()
    call_what = f"{what} with x {describe_shape(x.shape)} = [B, T, D]"
    got = expect_tensor(call(split_heads, call_what, x_in, H,
                             diagnose=split_crash(split_heads, x, H, what)), what)
    expect_unchanged(snapshot(x=x), what, x=x_in)
    expect_heads_transposed(got, x, what)
    expect_heads_not_swapped(got, what, SIZES)
    if tuple(got.shape) == (B, T, H, d_head):
        fail(f"{what} has shape [B, T, H, D_h] = {describe_shape(got.shape)}: move the "
             "heads before the positions with .transpose(1, 2).")
    expect_split_shape(got, x, H, what)
    expect_like(got, want, what, sizes=SIZES)
    _diagnose(got, split_slips(x, H, what))
    expect_head_order(got, want, what)  # heads flipped, or head 0 in every slot
    expect_close(got, want, what, dims="b h i d")
    expect_fresh(split_heads, what, (x, H), lambda x, _: _reference_mha().split_heads(x),
                 dims="b h i d")
    expect_backward(lambda x: split_heads(x, H), what, _reference_mha().split_heads,
                    dims={"x": "b i d"}, x=x)

    heads = _randn(B, H, T, d_head, seed=8)
    what = "merge_heads(x)"
    heads_in = heads.clone()
    call_what = f"{what} with x {describe_shape(heads.shape)} = [B, H, T, D_h]"
    got = expect_tensor(call(merge_heads, call_what, heads_in,
                             diagnose=merge_crash(what, heads.shape)), what)
    expect_unchanged(snapshot(x=heads), what, x=heads_in)
    if tuple(got.shape) == (B, H * T, d_head):
        fail(f"{what} has shape [B, H*T, D_h] = {describe_shape(got.shape)}: the heads are "
             "joined along the positions; join them along the features, dim=-1.")
    if tuple(got.shape) == (B, T, H, d_head):
        fail(f"{what} has shape [B, T, H, D_h] = {describe_shape(got.shape)}: the heads "
             "are back after the positions but not yet joined; finish with "
             ".reshape(B, T, H * D_h).")
    merged = heads.transpose(1, 2).reshape(B, T, D)
    expect_merged_shape(got, heads, what)
    expect_merged_named(got, heads, what)
    expect_like(got, merged, what, sizes=SIZES)
    _diagnose(got, [
        (heads.reshape(B, T, D),
         f"{what} reshapes [B, H, T, D_h] straight to [B, T, D], which mixes positions: "
         ".transpose(1, 2) first (to [B, T, H, D_h]), then .reshape(B, T, D)."),
        (heads.permute(0, 2, 3, 1).reshape(B, T, D),
         f"{what} interleaves the heads (feature c comes from head c % H); head h must "
         "fill the contiguous slice h*D_h:(h+1)*D_h: .transpose(1, 2), then reshape."),
        *merge_axis_slips(heads, what),
        (heads.transpose(1, 2).reshape(B, D, T).transpose(1, 2),
         f"{what} reshapes to [B, D, T] and transposes back, which regroups the numbers in "
         "memory order, not by feature: .transpose(1, 2).reshape(B, T, D) directly."),
    ])
    expect_heads_joined(got, heads, what)
    expect_head_order(got, heads, what)
    expect_close(got, merged, what, dims="b i d")
    expect_fresh(merge_heads, what, (heads,), lambda x: x.transpose(1, 2).reshape(B, T, D),
                 dims="b i d")
    expect_backward(merge_heads, what, lambda x: x.transpose(1, 2).reshape(B, T, D),
                    dims={"x": "b h i d"}, x=heads)
    what = "merge_heads(split_heads(x))"
    split = call(split_heads, f"split_heads(x, {H})", x.clone(), H)
    expect_close(call(merge_heads, what, split), x, what, dims="b i d")
    other_sizes.expect_other_heads(split_heads, merge_heads, x, H)
    other_sizes.expect_any_size_heads(split_heads, merge_heads, H)
    expect_heads_float64(split_heads, merge_heads, x, H)
    expect_any_device(split_heads, f"split_heads(x, {H})", x, H)  # x on a GPU, as in a model
    expect_any_device(merge_heads, "merge_heads(x)", heads)


def _mha_variant(x, mha, mask, *, scale_width=None, split="right", merge="right",
                 out_proj=True, order=(0, 1, 2), mask_after=False, group="qkv",
                 qkv_bias=True, out_bias=True, weight_view=False, dim=-1,
                 value="v", zero_empty=False, residual=False):
    """A written-out multi-head attention with one mistake switched on (the defaults give
    the right answer). `group`: how the fused projection is cut, "qkv" (all of q, then k,
    then v), "interleaved" (feature by feature) or "per_head" (q, k, v of each head
    side by side); `value="k"` averages the keys; `zero_empty` gives a query that may
    attend nothing zeros; `residual` adds x to the result."""
    b, t, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    weight = mha.qkv.weight.view(d, 3 * d).t() if weight_view else mha.qkv.weight
    fused = torch.nn.functional.linear(x, weight, mha.qkv.bias if qkv_bias else None)
    if group == "interleaved":
        parts = fused.view(b, t, d, 3).unbind(-1)
    elif group == "per_head":
        parts = [z.reshape(b, t, d) for z in fused.view(b, t, h, 3 * dh).chunk(3, -1)]
    else:
        parts = fused.chunk(3, dim=-1)
    q, k, v = (parts[i] for i in order)
    v = {"k": k, "x": x}.get(value, v)  # the keys, or x itself, as the values
    if split == "right":
        q, k, v = (z.view(b, t, h, dh).transpose(1, 2) for z in (q, k, v))
    elif split == "reshape":
        q, k, v = (z.reshape(b, h, t, dh) for z in (q, k, v))
    elif split == "unmoved":  # [B, T, H, D_h]: the heads never moved before the tokens
        q, k, v = (z.view(b, t, h, dh) for z in (q, k, v))
    else:  # one head of the full width
        q, k, v = (z[:, None] for z in (q, k, v))
    scale = (scale_width or q.size(-1)) ** -0.5
    if mask_after:  # the weights of the masked keys zeroed after an unmasked softmax
        y = (_weights(q, k, scale) * mask) @ v
    else:
        w = _weights(q, k, scale, mask, dim=dim)
        y = (w.nan_to_num(0.0) if zero_empty else w) @ v
    y = (y if merge == "reshape" or split == "unmoved" else y.transpose(1, 2)).reshape(b, t, d)
    if out_proj:
        y = torch.nn.functional.linear(y, mha.out_proj.weight,
                                       mha.out_proj.bias if out_bias else None)
    return x + y if residual else y


@exercise("multi-head attention", refuse=OWN_SDPA)
@own_parts(5)  # torch's fused attention, labnn's split_heads and masked_softmax refused
def check_multi_head_attention(fn: Callable) -> None:
    """`fn(x, mha, mask=None)`: x `[B, T, D]`, `mha` a
    `labnn.nn.attention.MultiHeadAttention` whose `qkv`, `out_proj` and `n_heads` to use,
    mask `[T, T]` (True = may attend) -> `[B, T, D]`, equal to `mha(x, mask)[0]`."""
    mha = _reference_mha()
    x, mask = _randn(B, T, D, seed=10), causal_mask(T)
    what = "multi_head_attention(x, mha, mask)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    expect_no_global_module(fn, what)
    with torch.no_grad():
        want = mha(x, mask)[0]
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return MultiHeadAttention.forward(mha, *args, **kwargs)

    mha.forward = spy  # an instance attribute: mha(x) now records that it was called
    x_in, mask_in = x.clone(), mask.clone()
    call_what = (f"{what} with x {describe_shape(x.shape)}, mask {describe_shape(mask.shape)} "
                 f"bool, mha = MultiHeadAttention({D}, {H})")

    def mask_broadcast(err: Exception) -> None:
        """A broadcast error that only the mask causes: named, with the shapes (and
        `torch.sqrt` of an int, by `name_int_root`)."""
        name_int_root(err)
        recorded_slips.in_place_crash(what)(err)  # q *= scale on a view of the chunks
        recorded_slips.name_reversed_axes(fn, x, mha, mask)  # k.T of the heads
        expect_qkv_cut(fn, x, mask, H)  # q, k, v cut from mha.qkv(x) along a wrong axis
        expect_out_proj_merged(err, what, mha)
        expect_weight_rows(err, what, mha)
        if isinstance(err, RuntimeError) and "must match the size" in str(err) and runs(
                fn, x.clone(), mha, None):
            fail(f"{what} raised a broadcast error only with a mask: mask [T, T] fits the "
                 "scores [B, H, T, T] as it is; mask[:, None, :] = [T, 1, T] lines the "
                 "queries up with the heads: use mask itself (or "
                 f"mask[None, None]). (torch: {str(err).strip().splitlines()[0]})")
        explain_crash(fn, call_what, err, (x_in, mha, mask_in))  # the notice, then err

    try:  # with gradients on, as in a model: switching them off for good shows
        got = expect_tensor(call(fn, call_what, x_in, mha, mask_in,
                                 diagnose=mask_broadcast), what)
    finally:
        del mha.forward
    if calls:
        fail(f"{what} calls the module itself (mha(x, ...)), the reference it is "
             "checked against: compute the attention from its parts, mha.qkv, the "
             "heads, the softmax and mha.out_proj.")
    expect_unchanged(snapshot(x=x, mask=mask), what, x=x_in, mask=mask_in)
    expect_like(got, want, what, sizes=SIZES)
    expect_repeatable(fn, got, what, x, mha, mask)
    with torch.no_grad():
        _diagnose(got.detach(), _mha_mistakes(x, mha, mask))
    expect_mha_head_order(got, x, mha, mask)  # merged flipped, or head 0 in every slot
    expect_mha_scale(got, x, mha, mask)  # another constant, or one per query (q.norm)
    expect_close(got, want, what, dims="b i d")
    expect_fresh(fn, what, (x, mha, mask), lambda x, mha, mask: mha(x, mask)[0], dims="b i d")
    mha_rounds.expect_mask_used(fn, mha, x)
    other_sizes.expect_other_head_count(fn, x, mask, H, mha)
    expect_mha_empty_row(fn, mha, x)
    other_sizes.expect_any_size_attention(fn, H)
    mha_rounds.expect_more_rounds(fn, mha, x, mask)  # float64, float16, far, no bias
    empty = mask.index_fill(0, torch.tensor([2]), False)  # query 2 may attend no key
    expect_backward(lambda x, mask: fn(x, mha, mask), what, lambda x, mask: mha(x, mask)[0],
                    dims={"x": "b i d"}, params={f"mha.{n}": p for n, p in mha.named_parameters()},
                    x=x, mask=empty)
    expect_any_device(fn, "multi_head_attention(x, mha, None)", x, mha, None)
    expect_any_device(fn, what, x, mha, empty)  # mha and x on a GPU, as in a model


def _mha_mistakes(x: torch.Tensor, mha: MultiHeadAttention,
                  mask: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The known mistakes of multi-head attention: each result, and what to say."""

    def variant(mask=mask, **options):
        return _mha_variant(x, mha, mask, **options)

    wrong_order = ("q, k and v are taken in the wrong order from the fused projection: "
                   "mha.qkv(x).chunk(3, dim=-1) gives q, k, v in that order.")
    mixes = "which mixes features of different positions"
    return [
        *mha_scale_slips(variant, x.size(-1), mha.n_heads),
        (variant(split="one"),
         "you computed a single head of width d_model: split q, k, v into n_heads heads "
         "of width d_head."),
        (variant(split="reshape"),
         f"the heads are split with a plain reshape to [B, H, T, D_h], {mixes} into one "
         "head: view as [B, T, H, D_h], then transpose(1, 2)."),
        (variant(merge="reshape"),
         f"the heads are merged with a plain reshape, {mixes}: transpose(1, 2) back to "
         "[B, T, H, D_h] first."),
        (variant(split="reshape", merge="reshape"),
         "the heads are split and merged with a plain reshape ([B, T, D] straight to "
         f"[B, H, T, D_h] and back, as Exercise 4 warned), {mixes} into one head: split "
         "with view(B, T, H, D_h).transpose(1, 2), merge with "
         "transpose(1, 2).reshape(B, T, D)."),
        (variant(group="interleaved"),
         "q, k and v are interleaved: view(B, T, D, 3) gives feature c of q, k and v "
         "from the neighbouring columns 3c, 3c + 1, 3c + 2, but the fused projection "
         "holds all of q, then all of k, then all of v: mha.qkv(x).chunk(3, dim=-1) (or "
         ".view(B, T, 3, D).unbind(2))."),
        (variant(mask=None, split="unmoved"),
         "q, k, v stay [B, T, H, D_h]: the scores then compare heads, not tokens (attention "
         "across heads): move the heads before the tokens: .transpose(1, 2) to [B, H, T, D_h]."),
        (variant(out_proj=False),
         "you forgot the output projection: return mha.out_proj(y)."),
        (variant(group="per_head"),
         "q, k and v are cut per head: view(B, T, H, 3 * D_h).chunk(3, -1) reads the "
         "fused projection as the q, k, v of head 0, then of head 1, ..., but it holds "
         "all of q (D features), then all of k, then all of v: "
         "mha.qkv(x).chunk(3, dim=-1) first, then split each into heads."),
        (variant(qkv_bias=False, out_bias=False),
         "the biases of both projections are missing: x @ mha.qkv.weight.T (and "
         "y @ mha.out_proj.weight.T) leaves out mha.qkv.bias (and mha.out_proj.bias); "
         "call the layers, mha.qkv(x) and mha.out_proj(y), which add them."),
        (variant(qkv_bias=False),
         "the bias of the projection to q, k, v is missing: x @ mha.qkv.weight.T "
         "leaves out mha.qkv.bias; call the layer, mha.qkv(x), which adds it."),
        (variant(out_bias=False),
         "the bias of the output projection is missing: y @ mha.out_proj.weight.T "
         "leaves out mha.out_proj.bias; call the layer, mha.out_proj(y), which adds it."),
        *[(variant(weight_view=True, qkv_bias=bias),
           f"the weight of mha.qkv is reshaped with .view(D, 3 * D) (or .reshape) to "
           f"multiply x by it: a Linear's weight is [out, in] = [3D, D] = "
           f"[{3 * D}, {D}], and .view(D, 3D) regroups its numbers in memory order "
           "instead of transposing them: use mha.qkv.weight.T (.t()), or call "
           "mha.qkv(x), which adds the bias too.")
          for bias in (True, False)],
        *[(variant(dim=1, zero_empty=nan),  # NaN of a key masked for every head put to 0?
           "the softmax runs over the heads (dim=1 of the scores [B, H, T, T]): each "
           "head normalizes its own scores over the keys, softmax(dim=-1).")
          for nan in (False, True)],
        (variant(dim=-2),
         "the softmax runs over the queries (dim=-2 of the scores [B, H, T, T]): "
         "normalize over the keys, softmax(dim=-1)."),
        (mha(x)[0], "the mask is ignored: pass it to the attention of every head."),
        *[(variant(mask=mask[i].expand_as(mask)), one_row(i)) for i in range(len(mask))],
        (mha.out_proj(torch.zeros_like(x)),
         "every query's attention came out 0 (your output is mha.out_proj of zeros, its "
         "bias), though each may attend some key: you zeroed the rows with a True "
         "(mask.any(-1) without its ~?). Zero the rows with no True: "
         "w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)."),
        (variant(mask=~mask),
         "the mask is inverted: True means MAY attend, so fill the scores where the "
         "mask is False (masked_fill(~mask, float('-inf')))."),
        (variant(mask=~mask, zero_empty=True),
         "the mask is inverted (attn_mask=~mask?): True means MAY attend, in labnn and in "
         "F.scaled_dot_product_attention alike: pass mask itself."),
        (variant(value="k"), "you weighted the keys (v = k): the attention weights "
                             "average the values, the third part of mha.qkv(x)."),
        (variant(residual=True), "you returned x + attention: the residual connection "
                                 "belongs to the block, not here; return mha.out_proj(y)."),
        (variant(mask_after=True),
         "you zeroed the masked weights after the softmax, so the rows no longer "
         "sum to 1: mask the scores (with -inf) before the softmax."),
        *[(variant(order=p), wrong_order)
          for p in itertools.permutations(range(3)) if p != (0, 1, 2)],
        *mha_slips(x, mha, mask, variant(out_proj=False)), (variant(value="x"), VALUES_X)]
