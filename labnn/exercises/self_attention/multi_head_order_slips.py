"""More slips of notebook 01's multi-head attention (Exercise 5), kept apart from
`multi_head_slips` for its length: a fully masked row zeroed after the
output projection instead of before it, heads split or merged feature-major, a bias added
twice, weights made without the softmax or misusing it (`weights_slips.head_weight_slips`),
and heads merged in another order or one head copied into every slot (read from the answer
itself, `expect_head_order`; for 4 too).

Dimension letters (the package legend): `B` batch, `H` heads, `T` tokens, `D` width
(`d_model`), `D_h` head width.
"""

from __future__ import annotations

import copy
import itertools
from typing import Callable

import torch

from labnn.exercises.self_attention import multi_head_slips
from labnn.exercises.self_attention.attention_axes import beyond_float32
from labnn.exercises.self_attention.attention_slips import expect_empty_row_zeroed
from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     expect_unchanged, fail, snapshot)
from labnn.exercises.grading.slips import MADE_SCALE, float64_round
from labnn.exercises.self_attention.fitted_scales import undo_out_proj
from labnn.exercises.self_attention.weights_slips import head_weight_slips, score_slips
from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention


def mha_slips(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
              y: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`multi_head_slips.mha_slips`, and heads split or merged feature-major (head h
    the features h, h + H, ...), mask.T, ...; `y` is the right
    result before the output projection, `[B, T, D]`."""
    b, t, d = y.shape
    heads = y.view(b, t, mha.n_heads, mha.d_head).transpose(1, 2)  # [B, H, T, D_h]
    heads_x = x.view(b, t, mha.n_heads, mha.d_head).transpose(1, 2)  # no projection
    interleaved = mha.out_proj(heads.permute(0, 2, 3, 1).reshape(b, t, d))
    split = [z.view(b, t, mha.d_head, mha.n_heads).permute(0, 3, 1, 2)  # head h: h, h + H, ..
             for z in mha.qkv(x).chunk(3, dim=-1)]
    o = scaled_dot_product_attention(*split, mask)[0]
    q, k, v = (z.view(b, t, mha.n_heads, mha.d_head).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    weighed = [(mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d)), said)
               for w, said in head_weight_slips(q @ k.mT / mha.d_head ** 0.5, mask, mha.d_head)
               + score_slips(q, k, mask)]
    feature_major = ("your heads are split feature-major (view(B, T, D_h, H)): head h gets "
                     "features h, h + H, ...; it must own the slice h*D_h:(h+1)*D_h: view as "
                     "[B, T, H, D_h], then transpose(1, 2)")
    return [*multi_head_slips.mha_slips(x, mha, mask, y),
            (mha.out_proj(o.transpose(1, 2).reshape(b, t, d)), feature_major + "."),
            (mha.out_proj(o.permute(0, 2, 3, 1).reshape(b, t, d)),
             feature_major + " (and merge back with transpose(1, 2), then reshape)."),
            (interleaved,
             "your heads are merged feature-major (permute(0, 2, 3, 1)): head slices "
             "interleave; merge as [B, T, H, D_h] (transpose(1, 2)) then reshape to "
             "[B, T, D]."),
            (mha(x, mask.T)[0],
             "your attention used mask.T: mask[i, j] says whether query i may attend key "
             "j (rows are queries); use it as given."),
            (mha.out_proj(y / mha.n_heads),
             f"you divided the merged heads by H = {mha.n_heads} before out_proj: the heads "
             "are concatenated, not averaged; merge them and apply mha.out_proj as they are."),
            (mha.out_proj(scaled_dot_product_attention(heads_x, heads_x, heads_x, mask)[0]
                          .transpose(1, 2).reshape(b, t, d)),
             "mha.qkv is never applied: q, k and v are the heads of x itself; project "
             "first, q, k, v = mha.qkv(x).chunk(3, dim=-1), then split each into heads."),
            *head_count_slips(x, mha, mask), *layout_slips(x, mha, mask),
            *bias_slips(x, mha, mask, y), *weighed]


def bias_slips(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
               y: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The bias of `mha.out_proj`, of `mha.qkv` or of both added again after calling the
    layer, as `(result, message)` pairs; `y` is the right result before `out_proj`."""
    bias = mha.out_proj.bias
    if bias is None or mha.qkv.bias is None:
        return []
    b, t, d = x.shape
    fused = torch.nn.functional.linear(x, mha.qkv.weight, 2 * mha.qkv.bias)
    heads = [z.view(b, t, mha.n_heads, -1).transpose(1, 2) for z in fused.chunk(3, -1)]
    y2 = mha.out_proj(scaled_dot_product_attention(*heads, mask)[0].transpose(1, 2)
                      .reshape(b, t, d))
    fix = "adds it already: drop your own + bias"
    return [(mha.out_proj(y) + bias, f"mha.out_proj.bias is added twice: mha.out_proj(y) {fix}."),
            (y2, f"mha.qkv.bias is added twice: mha.qkv(x) {fix}."),
            (y2 + bias, "the biases of mha.qkv and mha.out_proj are added twice: calling "
                        f"a Linear {fix}s.")]


def expect_head_order(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`heads` `[B, H, T, D_h]`, the right heads; `got` the answer's, split `[B, H, T, D_h]`
    or merged `[B, T, H * D_h]`: fail when each of its head slots holds one of the right
    heads but not all its own (heads flipped, rolled, or one head in every slot)."""
    b, h, t, dh = heads.shape
    if got.shape == (b, t, h * dh):
        got = got.reshape(b, t, h, dh).transpose(1, 2)
    if got.shape != heads.shape or h < 2:
        return
    order = []
    for slot in got.detach().unbind(1):
        match = [j for j, right in enumerate(heads.unbind(1)) if close(slot, right)]
        if not match:
            return
        order.append(match[0])
    if order == list(range(h)):
        return
    if len(set(order)) == 1:
        fail(f"{what}: every head's slot holds head {order[0]}'s output (one head indexed, "
             "then copied or expanded): each head h keeps its own output, features "
             "h*D_h:(h+1)*D_h of the merged [B, T, D].")
    fail(f"{what} puts the heads in the order [{', '.join(map(str, order))}] (slot s holds "
         "that head: flipped, rolled or a reversed list?): head h must fill features "
         "h*D_h:(h+1)*D_h, heads 0 to H-1 in order.")


def expect_mha_head_order(got: torch.Tensor, x: torch.Tensor, mha: MultiHeadAttention,
                          mask: torch.Tensor) -> None:
    """01 Ex5: `expect_head_order` on the heads merged in `got` (`mha.out_proj` undone),
    then `expect_head_pairing`."""
    merged = undo_out_proj(got, mha) if got.shape == x.shape else None
    if merged is not None:
        with torch.no_grad():
            q, k, v = (z.view(*x.shape[:2], mha.n_heads, -1).transpose(1, 2)
                       for z in mha.qkv(x).chunk(3, dim=-1))
            right = scaled_dot_product_attention(q, k, v, mask)[0].double()
            what = "multi_head_attention(x, mha, mask)"
            expect_head_order(merged, right, what)
            expect_head_pairing(merged.view(right.shape[0], -1, *right.shape[1::2])
                                .transpose(1, 2), (q, k, v), mask, what)


def _slot_sources(got: torch.Tensor, qkv: tuple, mask: torch.Tensor) -> list | None:
    """For each head slot of `got` `[B, H, T, D_h]`, the first `(i, j, l, masked)` whose
    attention of q head i, k head j and v head l (`qkv`), with `mask` or none, it holds;
    None when a slot holds none of them."""
    found = []
    for slot in got.split(1, dim=1):
        match = next((ijl + (m is not None,) for m in (mask, None)
                      for ijl in itertools.product(range(got.size(1)), repeat=3)
                      if close(slot, scaled_dot_product_attention(
                          *(z[:, n:n + 1] for z, n in zip(qkv, ijl)), m)[0].double())), None)
        if match is None:
            return None
        found.append(match)
    return found


def expect_head_pairing(got: torch.Tensor, qkv: tuple, mask: torch.Tensor, what: str) -> None:
    """`got` the answer's heads `[B, H, T, D_h]` before the merge, `qkv` the right q, k, v
    heads: fail when each slot s holds the attention of q head i, k head j and v head l,
    masked or not, but not all of (s, s, s, masked): the heads of one of q, k, v flipped or
    rolled alone, or the mask applied to some heads only (`scores[:, 0]`); or when q is
    scored against q itself."""
    h, (q, _, v) = got.size(1), qkv
    found = _slot_sources(got, qkv, mask)
    if found is None:
        if _slot_sources(got, (q, q, v), mask) is not None:
            fail(f"{what} scores q against itself (q @ q.transpose(-2, -1), as x @ x.T in "
                 "section 1): each query is scored against the keys, k, the second part of "
                 "mha.qkv(x): q @ k.transpose(-2, -1) in every head.")
        return
    orders = [[f[n] for f in found] for n in range(3)]
    masked = [s for s, f in enumerate(found) if f[3]]
    if orders != [list(range(h))] * 3:
        said = ", ".join(f"{z} {o}" for z, o in zip("abc", orders))
        fail(f"{what} pairs the heads of q, k and v wrongly: head slot s attends with q "
             f"head a[s], k head b[s] and v head c[s], {said}: split q, k and v alike (no "
             "flip, roll or index on one of them), so that head h uses q_h, k_h and v_h.")
    if len(masked) < h:
        fail(f"{what} masks the scores of head(s) {masked} only; the others attend every "
             "key: a [T, T] mask broadcasts over the scores [B, H, T, T], so "
             "scores.masked_fill(~mask, float('-inf')) masks every head (not scores[:, 0]).")


def layout_slips(x: torch.Tensor, mha: MultiHeadAttention,
                 mask: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """Each head scaled by sqrt(T) (q.shape[2] on heads), and heads interleaved (feature i
    to head i % H) by the split and merge alike, as `(result, message)` pairs."""
    b, t, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    q, k, v = mha.qkv(x).chunk(3, dim=-1)
    blocks = [z.view(b, t, h, dh).transpose(1, 2) for z in (q, k, v)]
    y = scaled_dot_product_attention(blocks[0] * (dh / t) ** 0.5, *blocks[1:], mask)[0]
    spread = [z.view(b, t, dh, h).permute(0, 3, 1, 2) for z in (q, k, v)]
    mixed = scaled_dot_product_attention(*spread, mask)[0]
    return [(mha.out_proj(y.transpose(1, 2).reshape(b, t, d)),
             f"each head is scaled by sqrt(T) = sqrt({t}) (q.shape[2] on heads is T): "
             "scale by sqrt(D_h) = sqrt(q.size(-1))."),
            (mha.out_proj(mixed.permute(0, 2, 3, 1).reshape(b, t, d)),
             "your heads are interleaved (feature i goes to head i % H): split contiguous "
             "blocks, x.view(B, T, H, D_h).transpose(1, 2), and merge back with "
             "transpose(1, 2).reshape(B, T, D).")]


def head_count_slips(x: torch.Tensor, mha: MultiHeadAttention,
                     mask: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`mha(x, mask)[0]` with each other head count that divides `D` (a fixed head count
    instead of `mha.n_heads`), as `(result, message)` pairs."""
    h, dh, d = mha.n_heads, mha.d_head, x.size(-1)
    slips = []
    try:
        for n in (n for n in range(1, d + 1) if d % n == 0 and n != h):
            mha.n_heads, mha.d_head = n, d // n
            slips.append((mha(x, mask)[0],
                          f"you split into {n} heads; mha.n_heads = {h}: use mha.n_heads "
                          "(and mha.d_head), not a fixed head count."))
    finally:
        mha.n_heads, mha.d_head = h, dh
    return slips


AXES = ("B", "H", "T", "D_h")
NAMES = ("batch", "heads", "positions", "head features")


def merge_axis_slips(heads: torch.Tensor, what: str) -> list[tuple[torch.Tensor, str]]:
    """`heads` `[B, H, T, D_h]` merged after a wrong transpose (of two axes other than
    1 and 2) and a reshape to `[B, T, D]`, as `(result, message)` pairs naming the swap."""
    b, h, t, dh = heads.shape
    slips = []
    for i, j in ((1, 3), (2, 3)):
        order = list(AXES)
        order[i], order[j] = order[j], order[i]
        slips.append((heads.transpose(i, j).reshape(b, t, h * dh),
                      f"{what} uses transpose({i}, {j}), which swaps the {NAMES[i]} and "
                      f"{NAMES[j]} ({AXES[i]} and {AXES[j]}: [{', '.join(order)}]): "
                      "merge with transpose(1, 2) "
                      "([B, T, H, D_h]) then reshape to [B, T, D]."))
    return slips


def expect_mha_empty_row(fn: Callable, mha, x: torch.Tensor) -> None:
    """01 Ex5: `fn(x, mha, mask)` with a causal mask whose query 2 may attend nothing
    must give what `mha` gives there (zeros before `out_proj`, so out_proj's bias)."""
    mask = causal_mask(x.size(1))
    mask[2] = False  # query 2 may attend nothing, e.g. a padding position
    what = "multi_head_attention(x, mha, mask) with a fully masked row"
    x_in, mask_in = x.clone(), mask.clone()
    got = expect_tensor(call(fn, f"{what} (query i=2 may attend no key)", x_in, mha, mask_in),
                        what)
    expect_unchanged(snapshot(x=x, mask=mask), what, x=x_in, mask=mask_in)  # mask |= empty
    with torch.no_grad():
        want = mha(x, mask)[0]
        v = mha.qkv(x).chunk(3, -1)[2]
        uniform, summed = mha.out_proj(v.mean(1)), mha.out_proj(v.sum(1))  # weights 1/S, 1
        unmasked = mha(x)[0][:, 2]  # no mask on any row
        alone = mha.out_proj(v)  # [B, S, D]: key j attended alone
    expect_like(got, want, what)
    expect_empty_row_zeroed(got.detach(), 2, uniform, unmasked, alone, summed)
    rest = torch.ones(x.size(1), dtype=torch.bool)
    rest[2] = False
    zeros = torch.zeros_like(want[:, 2])
    if (close(got.detach()[:, 2], zeros) and not close(want[:, 2], zeros)
            and close(got.detach()[:, rest], want[:, rest])):
        fail("on a query whose mask row is all False your output is 0; it must be "
             "mha.out_proj of a zero attention, i.e. out_proj's bias "
             f"({want[0, 2, 0].item():.4g} at d=0 here): zero the attention before out_proj (as "
             "Exercise 2 does), not the output after it.")
    expect_close(got, want, what, dims="b i d")


def expect_mha_float64(fn: Callable, mha, x: torch.Tensor, mask: torch.Tensor) -> None:
    """01 Ex5, the one dtype rule: with a float64 copy of `mha` and float64 x, the result is
    float64 and float64-accurate (no `.float()` on the way). x and every parameter hold
    values float32 cannot, so that a `.float()` on any of them, cast back, shows: x and the
    weights times 5/3 (`beyond_float32`), the biases drawn anew from N(0, 1) in float64, as
    large as the products they are added to. A float32 rounding errs by 6e-8 of a value at
    most, and `expect_float64_accurate` reads less than 1e-8 of the result as an eps: seed
    52 leaves each input's rounding (x, either weight or bias) over 2.5e-8 of it."""
    mha64 = copy.deepcopy(mha).double()
    gen = torch.Generator().manual_seed(52)
    with torch.no_grad():
        for p in mha64.parameters():
            p.copy_(beyond_float32(p)[0] if p.dim() > 1
                    else torch.randn(p.shape, generator=gen, dtype=p.dtype))
        (x64,) = beyond_float32(x)
        want = mha64(x64, mask)[0]
    float64_round(lambda x, mask: fn(x, mha64, mask), "multi_head_attention(x, mha, mask)",
                  (x64, mask.clone()), want, made=MADE_SCALE)
