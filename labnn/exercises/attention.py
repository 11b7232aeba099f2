"""Checkers for notebook 01 (self-attention from scratch).

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys, `D` width (`d_model`), `D_h` head width.
Masks are boolean, True = may attend.

Each checker runs the learner's function on random inputs (a fixed seed, `T != S` so that transposes
show), compares it with `labnn.attention` and, when it differs, recomputes the typical mistakes (missing
scale, softmax over the wrong axis, mask ignored or inverted, heads split without a transpose, ...) to say
which one was made. It also rejects a function that edits its inputs in place, and one that hands back the
package's own result (calling `labnn`'s function, or the `MultiHeadAttention` module itself) instead of
computing it. Positions are reported in the tensor's own dimensions: `b` batch, `h` head, `i` query,
`j` key, `d` feature.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch

from ..attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from .checking import (
    call,
    close,
    describe_shape,
    exercise,
    expect_close,
    expect_own_code,
    expect_shape,
    expect_tensor,
    expect_unchanged,
    fail,
    first_position,
    name_axes,
    snapshot,
)

B, H, T, S, D = 2, 4, 5, 7, 24
D_H = D // H  # 6: every size differs, so that a swap of two axes always shows in the shape
SIZES = {"B": B, "H": H, "T": T, "S": S, "D": D, "D_h": D_H}


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _random_mask(seed: int) -> torch.Tensor:
    """`[T, S]` mask whose every row has at least one True and one False (so ~mask is valid too)."""
    mask = torch.rand(T, S, generator=torch.Generator().manual_seed(seed)) < 0.5
    mask[:, 0], mask[:, 1] = True, False
    return mask


def _copies(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Fresh copies for the learner's function, so that an in-place edit cannot change the reference's inputs."""
    return [t.clone() for t in tensors]


def _reference_mha() -> MultiHeadAttention:
    """A seeded `MultiHeadAttention(D, H)` in eval mode, built without touching the global random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9)
        return MultiHeadAttention(D, H).eval()


def _diagnose(got: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first known mistake whose result equals `got`."""
    for wrong, message in mistakes:
        if close(got, wrong):
            fail(message)


def _weights(q: torch.Tensor, k: torch.Tensor, scale: float, mask: torch.Tensor | None = None, dim: int = -1):
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=dim)


@exercise("attention weights")
def check_attention_weights(fn: Callable) -> None:
    """`fn(q, k)`: q `[B, T, D]`, k `[B, S, D]` -> softmax over the keys of $q k^\\top / \\sqrt{D}$, `[B, T, S]`."""
    q, k = _randn(B, T, D, seed=1), _randn(B, S, D, seed=2)
    want = scaled_dot_product_attention(q[:, None], k[:, None], k[:, None])[1][:, 0]
    what = "attention_weights(q, k)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    q_in, k_in = _copies(q, k)
    got = expect_tensor(call(fn, f"{what} with q {describe_shape(q.shape)}, k {describe_shape(k.shape)}",
                             q_in, k_in), what)
    expect_unchanged(snapshot(q=q, k=k), what, q=q_in, k=k_in)
    if tuple(got.shape) == (B, S, T):
        fail(f"the result has shape {describe_shape(got.shape)} = [B, S, T]: rows must be queries and columns "
             "keys, so compute q @ k.transpose(-2, -1), giving [B, T, S].")
    expect_shape(got, want.shape, "attention_weights(q, k)")
    scores = q @ k.transpose(-2, -1)
    _diagnose(got, [
        (_weights(q, k, 1.0), f"you forgot to divide the scores by sqrt(d) (d = q.size(-1) = {D}) before the "
                              "softmax."),
        (_weights(q, k, 1 / D), "you divided the scores by d; divide by sqrt(d) instead (math.sqrt(q.size(-1)))."),
        (_weights(q, k, S**-0.5), f"you divided the scores by sqrt({S}) = sqrt(k.size(1)), the number of keys; "
                                  f"divide by sqrt(d) = sqrt(q.size(-1)), the width of queries and keys ({D})."),
        (_weights(q, k, T**-0.5), f"you divided the scores by sqrt({T}) = sqrt(q.size(1)), the number of "
                                  f"queries; divide by sqrt(d) = sqrt(q.size(-1)), the width of queries and keys "
                                  f"({D})."),
        (_weights(q, k, D**-0.5, dim=-2), "the softmax runs over the queries (dim=-2): each query's weights over "
                                          "the keys must sum to 1, so use softmax(dim=-1)."),
        (_weights(q, k, D**-0.5, dim=0), "the softmax runs over the batch (dim=0): each query's weights over "
                                         "the keys must sum to 1, so use softmax(dim=-1)."),
        (scores / math.sqrt(D), "these are the scaled scores: apply the softmax over the keys (dim=-1)."),
        (scores, "these are the raw dot products: divide by sqrt(d), then softmax over the keys (dim=-1)."),
    ])
    sums = got.sum(-1)
    if not torch.allclose(sums, torch.ones(B, T), atol=1e-4):
        off = (sums - 1).abs() > 1e-4
        fail(f"each row (one query) must sum to 1 over the keys; yours do not (the row at "
             f"{first_position(off, 'b i')} sums to {sums[off][0].item():.4g}): apply softmax(dim=-1) last.")
    expect_close(got, want, what, dims="b i j")


@exercise("attention with a mask")
def check_attention(fn: Callable) -> None:
    """`fn(q, k, v, mask=None)`: q `[B, T, D]`, k, v `[B, S, D]`, mask `[T, S]` (True = may attend) -> `[B, T, D]`;
    a query that may attend nothing gets zeros."""
    q, k, v = _randn(B, T, D, seed=3), _randn(B, S, D, seed=4), _randn(B, S, D, seed=5)

    def ref(mask):
        return scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]

    what = "attention(q, k, v)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    q_in, k_in, v_in = _copies(q, k, v)
    shapes = f"q {describe_shape(q.shape)}, k and v {describe_shape(k.shape)}"
    got = expect_tensor(call(fn, f"{what} with mask=None ({shapes})", q_in, k_in, v_in,
                             advice="your function must handle mask=None (no mask: every query may attend "
                                    "every key)"), what)
    expect_unchanged(snapshot(q=q, k=k, v=v), what, q=q_in, k=k_in, v=v_in)
    if tuple(got.shape) == (B, T, S):
        fail(f"{what} returned shape [B, T, S] = {describe_shape(got.shape)}: those are the weights; "
             "return weights @ v, shape [B, T, D].")
    expect_shape(got, (B, T, D), what)
    _diagnose(got, [
        (_weights(q, k, 1.0) @ v, "you forgot to divide the scores by sqrt(d) before the softmax."),
        (_weights(q, k, D**-0.5, dim=-2) @ v, "the softmax runs over the queries: use softmax(dim=-1), over the "
                                               "keys."),
    ])
    expect_close(got, ref(None), what, dims="b i d")

    mask = _random_mask(seed=6)
    what = "attention(q, k, v, mask)"
    q_in, k_in, v_in, mask_in = _copies(q, k, v, mask)
    got = expect_tensor(call(fn, f"{what} ({shapes}, mask {describe_shape(mask.shape)} bool)",
                             q_in, k_in, v_in, mask_in), what)
    expect_unchanged(snapshot(q=q, k=k, v=v, mask=mask), what, q=q_in, k=k_in, v=v_in, mask=mask_in)
    expect_shape(got, (B, T, D), what)
    _diagnose(got, [
        (ref(None), "the mask is ignored: set the scores where mask is False to -inf before the softmax "
                    "(scores.masked_fill(~mask, float('-inf')))."),
        (ref(~mask), "the mask is inverted: True means MAY attend, so fill the scores where the mask is False "
                     "(masked_fill(~mask, ...)), not where it is True."),
        ((_weights(q, k, D**-0.5) * mask) @ v, "you zeroed the masked weights after the softmax, so the rows no "
                                               "longer sum to 1: mask the scores (with -inf) before the softmax."),
        ((q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~mask, 0.0).softmax(-1) @ v,
         "you filled the masked scores with 0: a score of 0 still gets weight exp(0) after the softmax; fill "
         "them with float('-inf'), whose weight is exactly 0."),
    ])
    expect_close(got, ref(mask), what, dims="b i d")

    mask[1] = False  # query 1 may attend nothing, e.g. a padding position
    what = "attention(q, k, v, mask) with a fully masked row"
    got = expect_tensor(call(fn, f"{what} (query i=1 may attend no key)", *_copies(q, k, v, mask)), what)
    expect_shape(got, (B, T, D), what)
    if torch.isnan(got[:, 1]).any():
        fail(f"a query whose mask row is all False (query i=1, at {first_position(torch.isnan(got), 'b i d')}) "
             "gives NaN (softmax of only -inf is 0/0). Such a row must give "
             "zeros: after the softmax, weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0). "
             "(If you zero such rows already, check the axis: mask.any(dim=-1) asks whether each query may "
             "attend any key; mask.any(dim=-2) asks it of each key and changes nothing here.)")
    if close(got[:, 1], v.mean(dim=1)):
        fail("a query whose mask row is all False gets the mean of the values (a large negative fill instead "
             "of -inf gives uniform weights); it must get zeros: after the softmax, "
             "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).")
    expect_close(got, ref(mask), what, dims="b i d")


@exercise("causal mask")
def check_causal_mask(fn: Callable) -> None:
    """`fn(t)` -> `[t, t]` bool, True where query `i` may attend key `j`, i.e. `j <= i`."""
    name = getattr(fn, "__name__", "")
    name = name if name.isidentifier() else "causal_mask"
    expect_own_code(fn, f"{name}(t)", causal_mask=causal_mask)
    for t in (4, 7, 1):
        what = f"{name}({t})"
        got = expect_tensor(call(fn, what, t), what)
        expect_shape(got, (t, t), what)
        if got.dtype != torch.bool:
            fail(f"{what} has dtype {got.dtype}; masks are booleans (True = may attend): build it with "
                 "dtype=torch.bool or compare, e.g. j <= i.")
        want = causal_mask(t)
        _diagnose(got, [
            (torch.ones(t, t, dtype=torch.bool).tril(-1), f"{what} forbids the diagonal: a token may attend to "
                                                          "itself (j <= i, not j < i)."),
            (torch.ones(t, t, dtype=torch.bool).tril(1), f"{what} lets query i see key i + 1, the next token: "
                                                         "it must see only j <= i."),
            (~want, f"{what} is inverted: True must mean 'may attend' (the past and itself), False the future."),
            (want.T, f"{what} is transposed: row i is query i and may attend the keys j <= i (lower triangle)."),
            (torch.ones(t, t, dtype=torch.bool), f"{what} lets every query see every key: the future must be False."),
        ] if t > 1 else [])
        if not torch.equal(got, want):
            i, j = (int(n) for n in (got != want).nonzero()[0])
            fail(f"{what} at [i={i}, j={j}] is {bool(got[i, j])}: query i={i} "
                 f"{'may' if j <= i else 'must not'} attend key j={j}.")


@exercise("split and merge heads")
def check_heads(split_heads: Callable, merge_heads: Callable) -> None:
    """`split_heads(x, n_heads)`: `[B, T, D]` -> `[B, H, T, D_h]`; `merge_heads(x)`: `[B, H, T, D_h]` -> `[B, T, D]`.
    Head `h` owns features `h * D_h ... (h + 1) * D_h - 1`."""
    d_head = D // H
    x = _randn(B, T, D, seed=7)
    want = _reference_mha().split_heads(x)
    what = f"split_heads(x, {H})"
    x_in = x.clone()
    got = expect_tensor(call(split_heads, f"{what} with x {describe_shape(x.shape)} = [B, T, D]", x_in, H),
                        what)
    expect_unchanged(snapshot(x=x), what, x=x_in)
    if tuple(got.shape) in {(B, d_head, T, H), (B, T, d_head, H)}:
        fail(f"{what} has shape {describe_shape(got.shape)} = {name_axes(got.shape, SIZES)}: head count and "
             f"head width swapped. Split D = {D} into H = n_heads = {H} heads of D_h = D // n_heads = "
             f"{d_head} features: view as [B, T, H, D_h] (n_heads first), then .transpose(1, 2).")
    if tuple(got.shape) == (B, T, H, d_head):
        fail(f"{what} has shape [B, T, H, D_h] = {describe_shape(got.shape)}: move the heads before the positions "
             "with .transpose(1, 2).")
    expect_shape(got, want.shape, what, SIZES)
    _diagnose(got, [
        (x.reshape(B, H, T, d_head), f"{what} reshapes [B, T, D] straight to [B, H, T, D_h], which mixes "
                                     "features of different positions into one head. View as [B, T, H, D_h], "
                                     "then .transpose(1, 2)."),
        (x.view(B, T, d_head, H).permute(0, 3, 1, 2), f"{what} interleaves the heads (feature i goes to head i % H); "
                                                       "head h must own the contiguous slice h*D_h:(h+1)*D_h: view as "
                                                       "[B, T, H, D_h]."),
    ])
    expect_close(got, want, what, dims="b h i d")

    heads = _randn(B, H, T, d_head, seed=8)
    what = "merge_heads(x)"
    heads_in = heads.clone()
    got = expect_tensor(call(merge_heads, f"{what} with x {describe_shape(heads.shape)} = [B, H, T, D_h]",
                             heads_in), what)
    expect_unchanged(snapshot(x=heads), what, x=heads_in)
    if tuple(got.shape) == (B, T, H, d_head):
        fail(f"{what} has shape [B, T, H, D_h] = {describe_shape(got.shape)}: the heads are back after the "
             "positions but not yet joined; finish with .reshape(B, T, H * D_h).")
    expect_shape(got, (B, T, D), what, SIZES)
    _diagnose(got, [
        (heads.reshape(B, T, D), f"{what} reshapes [B, H, T, D_h] straight to [B, T, D], which mixes positions: "
                                 ".transpose(1, 2) first (to [B, T, H, D_h]), then .reshape(B, T, D)."),
        (heads.permute(0, 2, 3, 1).reshape(B, T, D), f"{what} interleaves the heads (feature c comes from head "
                                                      "c % H); head h must fill the contiguous slice "
                                                      "h*D_h:(h+1)*D_h: .transpose(1, 2), then reshape."),
    ])
    expect_close(got, heads.transpose(1, 2).reshape(B, T, D), what, dims="b i d")
    expect_close(merge_heads(split_heads(x, H)), x, "merge_heads(split_heads(x))", dims="b i d")


def _mha_variant(x, mha, mask, *, scale_width=None, split="right", merge="right", out_proj=True, order=(0, 1, 2),
                mask_after=False, interleaved=False):
    """A written-out multi-head attention with one mistake switched on (the defaults give the right answer)."""
    b, t, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    parts = mha.qkv(x).view(b, t, d, 3).unbind(-1) if interleaved else mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (parts[i] for i in order)
    if split == "right":
        q, k, v = (z.view(b, t, h, dh).transpose(1, 2) for z in (q, k, v))
    elif split == "reshape":
        q, k, v = (z.reshape(b, h, t, dh) for z in (q, k, v))
    else:  # one head of the full width
        q, k, v = (z[:, None] for z in (q, k, v))
    if mask_after:  # the weights of the masked keys zeroed after an unmasked softmax
        y = (_weights(q, k, (scale_width or q.size(-1)) ** -0.5) * mask) @ v
    else:
        y = _weights(q, k, (scale_width or q.size(-1)) ** -0.5, mask) @ v
    y = y.reshape(b, t, d) if merge == "reshape" else y.transpose(1, 2).reshape(b, t, d)
    return mha.out_proj(y) if out_proj else y


@exercise("multi-head attention")
def check_multi_head_attention(fn: Callable) -> None:
    """`fn(x, mha, mask=None)`: x `[B, T, D]`, `mha` a `labnn.attention.MultiHeadAttention` whose `qkv`, `out_proj`
    and `n_heads` to use, mask `[T, T]` (True = may attend) -> `[B, T, D]`, equal to `mha(x, mask)[0]`."""
    mha = _reference_mha()
    x, mask = _randn(B, T, D, seed=10), causal_mask(T)
    what = "multi_head_attention(x, mha, mask)"
    expect_own_code(fn, what, scaled_dot_product_attention=scaled_dot_product_attention)
    with torch.no_grad():
        want = mha(x, mask)[0]
        calls = []

        def spy(*args, **kwargs):
            calls.append(1)
            return MultiHeadAttention.forward(mha, *args, **kwargs)

        mha.forward = spy  # an instance attribute: mha(x) now records that it was called
        x_in, mask_in = x.clone(), mask.clone()
        try:
            got = expect_tensor(call(fn, f"{what} with x {describe_shape(x.shape)}, mask "
                                         f"{describe_shape(mask.shape)} bool, mha = MultiHeadAttention({D}, {H})",
                                     x_in, mha, mask_in), what)
        finally:
            del mha.forward
        if calls:
            fail(f"{what} calls the module itself (mha(x, ...)), the reference it is checked against: compute "
                 "the attention from its parts, mha.qkv, the heads, the softmax and mha.out_proj.")
        expect_unchanged(snapshot(x=x, mask=mask), what, x=x_in, mask=mask_in)
        expect_shape(got, want.shape, what, SIZES)

        def variant(mask=mask, **options):
            return _mha_variant(x, mha, mask, **options)
        wrong_order = ("q, k and v are taken in the wrong order from the fused projection: "
                       "mha.qkv(x).chunk(3, dim=-1) gives q, k, v in that order.")
        _diagnose(got, [
            (variant(scale_width=D), "you divided by sqrt(d_model); each head divides its scores by "
                                     "sqrt(d_head) = sqrt(d_model / n_heads)."),
            (variant(split="one"), "you computed a single head of width d_model: split q, k, v into n_heads heads "
                                   "of width d_head."),
            (variant(split="reshape"), "the heads are split with a plain reshape to [B, H, T, D_h], which mixes "
                                       "features of different positions into one head: view as "
                                       "[B, T, H, D_h], then transpose(1, 2)."),
            (variant(merge="reshape"), "the heads are merged with a plain reshape, which mixes features of "
                                       "different positions: transpose(1, 2) back to [B, T, H, D_h] first."),
            (variant(split="reshape", merge="reshape"),
             "the heads are split and merged with a plain reshape ([B, T, D] straight to [B, H, T, D_h] and "
             "back, as Exercise 4 warned), which mixes features of different positions into one head: split "
             "with view(B, T, H, D_h).transpose(1, 2), merge with transpose(1, 2).reshape(B, T, D)."),
            (variant(interleaved=True),
             "q, k and v are interleaved: view(B, T, D, 3) gives feature c of q, k and v from the "
             "neighbouring columns 3c, 3c + 1, 3c + 2, but the fused projection holds all of q, then all of "
             "k, then all of v: mha.qkv(x).chunk(3, dim=-1) (or .view(B, T, 3, D).unbind(2))."),
            (variant(out_proj=False), "you forgot the output projection: return mha.out_proj(y)."),
            (mha(x)[0], "the mask is ignored: pass it to the attention of every head."),
            (variant(mask=~mask), "the mask is inverted: True means MAY attend, so fill the scores where the "
                                  "mask is False (masked_fill(~mask, float('-inf')))."),
            (variant(mask_after=True), "you zeroed the masked weights after the softmax, so the rows no longer "
                                       "sum to 1: mask the scores (with -inf) before the softmax."),
            *[(variant(order=p), wrong_order) for p in itertools.permutations(range(3)) if p != (0, 1, 2)],
        ])
        expect_close(got, want, what, dims="b i d")
