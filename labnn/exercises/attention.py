"""Checkers for notebook 01 (self-attention from scratch).

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys, `D` width (`d_model`), `D_h` head width.
Masks are boolean, True = may attend.

Each checker runs the learner's function on random inputs (a fixed seed, `T != S` so that transposes
show), compares it with `labnn.attention` and, when it differs, recomputes the typical mistakes (missing
scale, softmax over the wrong axis, mask ignored or inverted, heads split without a transpose, ...) to say
which one was made.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable

import torch

from ..attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from .checking import close, describe_shape, exercise, expect_close, expect_shape, expect_tensor, fail

B, H, T, S, D = 2, 4, 5, 7, 16


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
    got = expect_tensor(fn(*_copies(q, k)), "attention_weights(q, k)")
    if tuple(got.shape) == (B, S, T):
        fail(f"the result has shape {describe_shape(got.shape)} = [B, S, T]: rows must be queries and columns "
             "keys, so compute q @ k.transpose(-2, -1), giving [B, T, S].")
    expect_shape(got, want.shape, "attention_weights(q, k)")
    scores = q @ k.transpose(-2, -1)
    _diagnose(got, [
        (_weights(q, k, 1.0), "you forgot to divide the scores by sqrt(d) (d = q.size(-1) = 16) before the softmax."),
        (_weights(q, k, 1 / D), "you divided the scores by d; divide by sqrt(d) instead (math.sqrt(q.size(-1)))."),
        (_weights(q, k, D**-0.5, dim=-2), "the softmax runs over the queries (dim=-2): each query's weights over "
                                          "the keys must sum to 1, so use softmax(dim=-1)."),
        (scores / math.sqrt(D), "these are the scaled scores: apply the softmax over the keys (dim=-1)."),
        (scores, "these are the raw dot products: divide by sqrt(d), then softmax over the keys (dim=-1)."),
    ])
    if not torch.allclose(got.sum(-1), torch.ones(B, T), atol=1e-4):
        fail("each row (one query) must sum to 1 over the keys; yours do not: apply softmax(dim=-1) last.")
    expect_close(got, want, "attention_weights(q, k)")


@exercise("attention with a mask")
def check_attention(fn: Callable) -> None:
    """`fn(q, k, v, mask=None)`: q `[B, T, D]`, k, v `[B, S, D]`, mask `[T, S]` (True = may attend) -> `[B, T, D]`;
    a query that may attend nothing gets zeros."""
    q, k, v = _randn(B, T, D, seed=3), _randn(B, S, D, seed=4), _randn(B, S, D, seed=5)

    def ref(mask):
        return scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[0][:, 0]

    what = "attention(q, k, v)"
    got = expect_tensor(fn(*_copies(q, k, v)), what)
    if tuple(got.shape) == (B, T, S):
        fail(f"{what} returned shape [B, T, S] = {describe_shape(got.shape)}: those are the weights; "
             "return weights @ v, shape [B, T, D].")
    expect_shape(got, (B, T, D), what)
    _diagnose(got, [
        (_weights(q, k, 1.0) @ v, "you forgot to divide the scores by sqrt(d) before the softmax."),
        (_weights(q, k, D**-0.5, dim=-2) @ v, "the softmax runs over the queries: use softmax(dim=-1), over the "
                                               "keys."),
    ])
    expect_close(got, ref(None), what)

    mask = _random_mask(seed=6)
    what = "attention(q, k, v, mask)"
    got = expect_tensor(fn(*_copies(q, k, v, mask)), what)
    expect_shape(got, (B, T, D), what)
    _diagnose(got, [
        (ref(None), "the mask is ignored: set the scores where mask is False to -inf before the softmax "
                    "(scores.masked_fill(~mask, float('-inf')))."),
        (ref(~mask), "the mask is inverted: True means MAY attend, so fill the scores where the mask is False "
                     "(masked_fill(~mask, ...)), not where it is True."),
        ((_weights(q, k, D**-0.5) * mask) @ v, "you zeroed the masked weights after the softmax, so the rows no "
                                               "longer sum to 1: mask the scores (with -inf) before the softmax."),
    ])
    expect_close(got, ref(mask), what)

    mask[1] = False  # query 1 may attend nothing, e.g. a padding position
    what = "attention(q, k, v, mask) with a fully masked row"
    got = expect_tensor(fn(*_copies(q, k, v, mask)), what)
    expect_shape(got, (B, T, D), what)
    if torch.isnan(got[:, 1]).any():
        fail("a query whose mask row is all False gives NaN (softmax of only -inf is 0/0). Such a row must give "
             "zeros: after the softmax, weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).")
    if close(got[:, 1], v.mean(dim=1)):
        fail("a query whose mask row is all False gets the mean of the values (a large negative fill instead "
             "of -inf gives uniform weights); it must get zeros: after the softmax, "
             "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).")
    expect_close(got, ref(mask), what)


@exercise("causal mask")
def check_causal_mask(fn: Callable) -> None:
    """`fn(t)` -> `[t, t]` bool, True where query `i` may attend key `j`, i.e. `j <= i`."""
    for t in (4, 7, 1):
        what = f"causal_mask({t})"
        got = expect_tensor(fn(t), what)
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
            fail(f"{what}[{i}, {j}] is {bool(got[i, j])}: query {i} {'may' if j <= i else 'must not'} attend key {j}.")


@exercise("split and merge heads")
def check_heads(split_heads: Callable, merge_heads: Callable) -> None:
    """`split_heads(x, n_heads)`: `[B, T, D]` -> `[B, H, T, D_h]`; `merge_heads(x)`: `[B, H, T, D_h]` -> `[B, T, D]`.
    Head `h` owns features `h * D_h ... (h + 1) * D_h - 1`."""
    d_head = D // H
    x = _randn(B, T, D, seed=7)
    want = _reference_mha().split_heads(x)
    what = f"split_heads(x, {H})"
    got = expect_tensor(split_heads(x.clone(), H), what)
    if tuple(got.shape) == (B, T, H, d_head):
        fail(f"{what} has shape [B, T, H, D_h] = {describe_shape(got.shape)}: move the heads before the positions "
             "with .transpose(1, 2).")
    expect_shape(got, want.shape, what)
    _diagnose(got, [
        (x.reshape(B, H, T, d_head), f"{what} reshapes [B, T, D] straight to [B, H, T, D_h], which mixes "
                                     "features of different positions into one head. View as [B, T, H, D_h], "
                                     "then .transpose(1, 2)."),
        (x.view(B, T, d_head, H).permute(0, 3, 1, 2), f"{what} interleaves the heads (feature i goes to head i % H); "
                                                       "head h must own the contiguous slice h*D_h:(h+1)*D_h: view as "
                                                       "[B, T, H, D_h]."),
    ])
    expect_close(got, want, what)

    heads = _randn(B, H, T, d_head, seed=8)
    what = "merge_heads(x)"
    got = expect_tensor(merge_heads(heads.clone()), what)
    expect_shape(got, (B, T, D), what)
    _diagnose(got, [
        (heads.reshape(B, T, D), f"{what} reshapes [B, H, T, D_h] straight to [B, T, D], which mixes positions: "
                                 ".transpose(1, 2) first (to [B, T, H, D_h]), then .reshape(B, T, D)."),
    ])
    expect_close(got, heads.transpose(1, 2).reshape(B, T, D), what)
    expect_close(merge_heads(split_heads(x, H)), x, "merge_heads(split_heads(x))")


def _mha_variant(x, mha, mask, *, scale_width=None, split="right", merge="right", out_proj=True, order=(0, 1, 2)):
    """A written-out multi-head attention with one mistake switched on (the defaults give the right answer)."""
    b, t, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (parts[i] for i in order)
    if split == "right":
        q, k, v = (z.view(b, t, h, dh).transpose(1, 2) for z in (q, k, v))
    elif split == "reshape":
        q, k, v = (z.reshape(b, h, t, dh) for z in (q, k, v))
    else:  # one head of the full width
        q, k, v = (z[:, None] for z in (q, k, v))
    y = _weights(q, k, (scale_width or q.size(-1)) ** -0.5, mask) @ v
    y = y.reshape(b, t, d) if merge == "reshape" else y.transpose(1, 2).reshape(b, t, d)
    return mha.out_proj(y) if out_proj else y


@exercise("multi-head attention")
def check_multi_head_attention(fn: Callable) -> None:
    """`fn(x, mha, mask=None)`: x `[B, T, D]`, `mha` a `labnn.attention.MultiHeadAttention` whose `qkv`, `out_proj`
    and `n_heads` to use, mask `[T, T]` (True = may attend) -> `[B, T, D]`, equal to `mha(x, mask)[0]`."""
    mha = _reference_mha()
    x, mask = _randn(B, T, D, seed=10), causal_mask(T)
    with torch.no_grad():
        want = mha(x, mask)[0]
        what = "multi_head_attention(x, mha, mask)"
        got = expect_tensor(fn(x.clone(), mha, mask.clone()), what)
        expect_shape(got, want.shape, what)
        variant = functools.partial(_mha_variant, x, mha, mask)
        wrong_order = ("q, k and v are taken in the wrong order from the fused projection: "
                       "mha.qkv(x).chunk(3, dim=-1) gives q, k, v in that order.")
        _diagnose(got, [
            (variant(scale_width=D), "you divided by sqrt(d_model); each head divides its scores by "
                                     "sqrt(d_head) = sqrt(d_model / n_heads)."),
            (variant(split="one"), "you computed a single head of width d_model: split q, k, v into n_heads heads "
                                   "of width d_head."),
            (variant(split="reshape"), "the heads are split with a plain reshape to [B, H, T, D_h], which mixes "
                                       "positions: view as [B, T, H, D_h], then transpose(1, 2)."),
            (variant(merge="reshape"), "the heads are merged with a plain reshape, which mixes positions: "
                                       "transpose(1, 2) back to [B, T, H, D_h] first."),
            (variant(out_proj=False), "you forgot the output projection: return mha.out_proj(y)."),
            (mha(x)[0], "the mask is ignored: pass it to the attention of every head."),
            *[(variant(order=p), wrong_order) for p in itertools.permutations(range(3)) if p != (0, 1, 2)],
        ])
        expect_close(got, want, what)
