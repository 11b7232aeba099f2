"""The slips of notebook 01's multi-head exercises that a written-out variant of the
reference, or a rerun, shows: heads averaged instead of joined, head count and head width
swapped, the last two axes transposed instead of heads before tokens, a Linear's weight
used untransposed, x used as the values, `mha.qkv(x)` cut along the wrong axis. Named for
`labnn.exercises.self_attention.multi_head` (a fixed head count: `other_sizes`).

Dimension letters (the package legend): `B` batch, `H` heads, `T` tokens, `D` width
(`d_model`), `D_h` head width.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.nn.attention import MultiHeadAttention
from labnn.exercises.grading import close, describe_shape, fail, name_axes
from labnn.exercises.self_attention.recorded_slips import expect_no_new_layer


def expect_heads_joined(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`got` = `merge_heads(heads)`, `heads` `[B, H, T, D_h]`: fail when a `D_h`-wide slice
    of `got` is the mean (or sum) of the heads, which merges them by averaging (or
    adding) instead of joining each head's features side by side."""
    b, h, t, dh = heads.shape
    if got.shape != (b, t, h * dh):
        return
    slices = got.detach().view(b, t, h, dh).unbind(2)
    for how, merged in (("averages", "mean"), ("adds", "sum")):
        if any(close(s, getattr(heads, merged)(1)) for s in slices):
            fail(f"{what} {how} the heads (x.{merged}(1)): concatenate them instead, each "
                 f"head keeping its own D_h = {dh} features: x.transpose(1, 2).reshape(B, "
                 "T, D).")


def mha_slips(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
              y: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """More known mistakes of multi-head attention, as `(result, message)` pairs (the heads
    summed or averaged and repeated, ...); `y` is the right result before the output
    projection."""
    w, bias = mha.out_proj.weight, mha.out_proj.bias
    linear = ("y @ mha.out_proj.weight uses the weight untransposed: a Linear's weight is "
              "[out, in], so it computes y @ W.T + b; call mha.out_proj(y).")
    h, dh = mha.n_heads, mha.d_head
    swapped = (f"you split into mha.d_head = {dh} heads of width {h}: n_heads and d_head "
               f"are swapped; split into mha.n_heads = {h} heads of mha.d_head = {dh} "
               "features each.")
    added = ("a float mask (mask.float()) is added to the scores, 0 or 1, so nothing is "
             "masked (F.scaled_dot_product_attention adds a float attn_mask): pass the "
             "bool mask (True = may attend).")
    b, t, _ = y.shape
    joined = ("the heads are combined by a {} over dim 1 (the heads) and {}: each head "
              "keeps its own D_h features in y; concatenate them, "
              "y.transpose(1, 2).reshape(B, T, D).")
    return [*[(mha.out_proj(getattr(y.view(b, t, h, dh), how)(2).repeat(1, 1, h)),
               joined.format(how, "the result repeated H times")) for how in ("sum", "mean")],
            *[(mha.out_proj(getattr(y.view(b, t, h, dh), how)(2).repeat_interleave(h, -1)),
               joined.format(how, "each feature repeated H times")) for how in ("sum", "mean")],
            (y @ w + bias, linear), (y @ w, linear),
            *[(heads_attention(x, mha, mask, dh, scale), swapped) for scale in (h, dh)],
            *[(heads_attention(x, mha, m.float(), h, dh), added) for m in (mask, ~mask)]]


def heads_attention(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
                    n_heads: int, scale: float) -> torch.Tensor:
    """Multi-head attention with `n_heads` heads of width `D / n_heads`, scores divided
    by sqrt(`scale`); a float `mask` is added to them."""
    b, t, d = x.shape
    q, k, v = (z.view(b, t, n_heads, d // n_heads).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.mT / scale ** 0.5
    s = s + mask if mask.is_floating_point() else s.masked_fill(~mask, float("-inf"))
    return mha.out_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def split_slips(x: torch.Tensor, h: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """Wrong `split_heads(x, h)` results for x `[B, T, D]`, as `(result, message)` pairs."""
    b, t, d = x.shape
    return [
        (x.reshape(b, h, t, d // h),
         f"{what} reshapes [B, T, D] straight to [B, H, T, D_h], which mixes features of "
         "different positions into one head. View as [B, T, H, D_h], then "
         ".transpose(1, 2)."),
        (x.view(b, t, d // h, h).permute(0, 3, 1, 2),
         f"{what} interleaves the heads (feature i goes to head i % H); head h must own "
         "the contiguous slice h*D_h:(h+1)*D_h: view as [B, T, H, D_h]."),
        (x.view(t, b, h, d // h).permute(1, 2, 0, 3),
         f"{what}: view(T, B, ...) reads the batch and token axes of x [B, T, D] in the "
         "wrong order (a view keeps memory order): view(B, T, H, D_h), then "
         ".transpose(1, 2)."),
    ]


VALUES_X = ("the values are x itself (v = x): the value projection is skipped; v must come "
            "from the third chunk of mha.qkv(x), q, k, v = mha.qkv(x).chunk(3, dim=-1).")


def expect_heads_transposed(got: torch.Tensor, x: torch.Tensor, what: str) -> None:
    """`got` = `split_heads(x, H)`: fail when it is the right view `[B, T, H, D_h]` with
    its last two axes swapped (`.transpose(-2, -1)`) instead of heads before tokens."""
    b, t, d = x.shape
    h = got.size(-1) if got.dim() == 4 else 0
    if h and d % h == 0 and close(got, x.view(b, t, h, d // h).transpose(-2, -1)):
        fail(f"{what}: the view [B, T, H, D_h] is right, but .transpose(-2, -1) swaps "
             "its last two axes, giving [B, T, D_h, H]: move the head axis before the "
             "tokens instead, .transpose(1, 2).")


class _Cut(torch.Tensor):
    """The output of `mha.qkv` in a rerun: records the axis it is cut along."""

    target, axes, sizes = None, [], []
    CUTS = {torch.Tensor.chunk: 2, torch.chunk: 2, torch.Tensor.split: 2, torch.split: 2,
            torch.Tensor.tensor_split: 2, torch.tensor_split: 2, torch.Tensor.unbind: 1,
            torch.unbind: 1}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in cls.CUTS and args and args[0] is cls.target:
            at = cls.CUTS[func]
            cls.axes.append(kwargs.get("dim", args[at] if len(args) > at else 0))
            if func in (torch.Tensor.split, torch.split):  # split(size): pieces of that size
                cls.sizes.append(args[1] if len(args) > 1 else kwargs.get("split_size"))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def expect_qkv_cut(fn, x: torch.Tensor, mask: torch.Tensor, n_heads: int) -> None:
    """After `fn(x, mha, mask)` raised: rerun it and fail when it cuts `mha.qkv(x)`,
    `[B, T, 3 * D]`, into q, k, v along the batch or the tokens, not the features."""
    with torch.random.fork_rng(devices=[]):  # any weights: only the cut is watched
        mha = MultiHeadAttention(x.size(-1), n_heads)

    def watch(module, inputs, out):
        _Cut.target = out.as_subclass(_Cut)
        return _Cut.target

    _Cut.axes, _Cut.sizes = [], []
    handle = mha.qkv.register_forward_hook(watch)
    try:
        with torch.no_grad():
            fn(x.clone(), mha, mask.clone())
    except Exception:
        pass
    finally:
        handle.remove()
        _Cut.target = None
    axes = {0: "the batch (dim 0)", 1: "time (dim 1, the tokens)", -3: "the batch (dim 0)",
            -2: "time (dim 1, the tokens)"}
    size, d = (_Cut.sizes or [None])[0], x.size(-1)
    if isinstance(size, int) and size != d:
        fail(f"you cut mha.qkv(x), [B, T, 3 * D], with .split({size}, dim=-1): split takes "
             f"the size of each piece ({3 * d // size} pieces of {size}), chunk the count: "
             "q, k, v = mha.qkv(x).chunk(3, dim=-1) (or .split(D, dim=-1)).")
    if _Cut.axes and _Cut.axes[0] in axes:
        fail(f"you cut mha.qkv(x), [B, T, 3 * D], into q, k, v along "
             f"{axes[_Cut.axes[0]]}: cut it along the features, "
             "q, k, v = mha.qkv(x).chunk(3, dim=-1).")


def merge_crash(what: str, shape: torch.Size) -> Callable[[Exception], None]:
    """A `diagnose` for `merge_heads(x)`, x `[B, H, T, D_h]` of `shape`: `.view` on the
    transposed heads, and a reshape to a size not taken from x (a global such as the
    notebook's d_model), are named, with the axis that is wrong."""
    b, h, t, dh = shape

    def diagnose(err: Exception) -> None:
        said = str(err).strip().splitlines()[0] if str(err).strip() else ""
        if isinstance(err, RuntimeError) and "view size is not compatible" in said:
            fail(f"{what} calls .view on the transposed heads, which are not contiguous "
                 "in memory: use .reshape(B, T, D) (or .contiguous().view(B, T, D)).")
        found = re.search(r"shape '\[([-\d, ]+)\]' is invalid", said)
        sizes = [int(n) for n in found.group(1).split(",")] if found else []
        if not isinstance(err, RuntimeError) or len(sizes) != 3:
            return
        for name, size, right in zip(("B", "T", "H * D_h"), sizes, (b, t, h * dh)):
            if size not in (-1, right):
                fail(f"{what} reshapes to {sizes}, whose {name} axis is {size}, but x "
                     f"[B, H, T, D_h] = {list(shape)} gives {name} = {right}: take the sizes "
                     "from the tensor (b, h, t, d_h = x.shape; width h * d_h), not from a "
                     f"global such as d_model (torch said: {said})")

    return diagnose


def expect_merged_shape(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`got` = `merge_heads(heads)`, `heads` `[B, H, T, D_h]`: a result that joined the
    tokens too (`flatten(1)`), or that reduced the heads to one head's width, is named."""
    b, h, t, dh = heads.shape
    if tuple(got.shape) == (b, h, t * dh):
        mine = f"has shape [B, H, T*D_h] = {list(got.shape)}, expected [B, T, D] = {[b, t, h * dh]}"
        if close(got, heads.flatten(2)):
            fail(f"{what} {mine}: the heads never moved after the tokens, so flatten(2) (or a "
                 "reshape to [B, H, -1]) joins each head's tokens; .transpose(1, 2) first (to "
                 "[B, T, H, D_h]), then .flatten(2).")
        if close(got, heads.transpose(1, 2).reshape(b, h, t * dh)):
            fail(f"{what} {mine}: x.size(1) is H in [B, H, T, D_h]: the tokens are x.size(2); "
                 "after .transpose(1, 2), .reshape(B, T, D).")
        fail(f"{what} {mine}: the heads stay a separate axis; .transpose(1, 2), then "
             ".reshape(B, T, D).")
    if tuple(got.shape) == (b, t * h * dh):
        fail(f"{what} has shape [B, T*H*D_h] = {list(got.shape)}, expected [B, T, H*D_h] = "
             f"{[b, t, h * dh]}: after .transpose(1, 2), flatten(1) joins the tokens too; "
             "join only the heads and their features, .flatten(2) (or .reshape(B, T, D)).")
    if tuple(got.shape) == (b, t, dh):
        how = next((f" (x.{r}(1))" for r in ("sum", "mean") if close(got, getattr(
            heads, r)(1))), "")
        fail(f"{what} has shape [B, T, D_h] = {list(got.shape)}: the heads are reduced to "
             f"one head's width{how}; concatenate the heads (H * D_h = {h * dh} features), "
             "not sum them: x.transpose(1, 2).reshape(B, T, D).")


def split_crash(split_heads: Callable, x: torch.Tensor, n_heads: int,
                what: str) -> Callable[[Exception], None]:
    """A `diagnose` for `split_heads(x, n_heads)`, x `[B, T, D]`: rerun it and fail when
    it cuts x along the batch or the tokens (chunk/split/unbind), not the features."""
    def diagnose(err: Exception) -> None:
        _Cut.target, _Cut.axes, _Cut.sizes = x.clone().as_subclass(_Cut), [], []
        try:
            split_heads(_Cut.target, n_heads)
        except Exception:
            pass
        finally:
            _Cut.target = None
        axes = {0: "the batch (dim 0)", -3: "the batch (dim 0)", 1: "the tokens (dim 1)",
                -2: "the tokens (dim 1)"}
        if _Cut.axes and _Cut.axes[0] in axes:
            fail(f"{what} cuts x [B, T, D] along {axes[_Cut.axes[0]]}: the heads split "
                 "the features, the last axis (dim=-1): x.view(B, T, H, D_h)"
                 ".transpose(1, 2).")
        viewed = re.search(r"shape '\[([\d, -]+)\]' is invalid", str(err))
        dh = x.size(-1) // n_heads
        fixed = [int(n) for n in viewed.group(1).split(",")[2:]] if viewed else []
        if len(fixed) == 2 and n_heads in fixed and dh not in fixed:
            w = fixed[1 - fixed.index(n_heads)]
            fail(f"{what}: your view asks for heads of a fixed width {w}, but x has D = "
                 f"{x.size(-1)} features, {n_heads} heads of D_h = {dh}: compute it, d_head "
                 "= x.size(-1) // n_heads.")

    return diagnose


def expect_heads_not_swapped(got: torch.Tensor, what: str, sizes: dict[str, int]) -> None:
    """`split_heads`' result with the head count and the head width swapped, named (and
    `torch.split`, which takes a piece's size where `torch.chunk` takes a count)."""
    b, t, d, h, dh = (sizes[n] for n in ("B", "T", "D", "H", "D_h"))
    if tuple(got.shape) in {(b, dh, t, h), (b, t, dh, h)}:
        fail(f"{what} has shape {describe_shape(got.shape)} = "
             f"{name_axes(got.shape, sizes)}: head count and head width swapped. Split "
             f"D = {d} into H = n_heads = {h} heads of D_h = D // n_heads = {dh} "
             "features: view as [B, T, H, D_h] (n_heads first), then .transpose(1, 2). "
             "(torch.split(x, n, dim=-1) cuts pieces of n features each; torch.chunk(x, n, "
             "dim=-1) cuts n pieces.)")


def expect_weight_rows(err: Exception, what: str, mha: MultiHeadAttention) -> None:
    """A crash of `x @ W` with `W` a third of `mha.qkv.weight` `[3D, D]` cut along its
    columns (`chunk(3, dim=1)` gives `[3D, D/3]`) is named."""
    d = mha.qkv.in_features
    if d % 3 == 0 and f"and {3 * d}x{d // 3})" in str(err):
        fail(f"{what}: mha.qkv.weight is [3D, D] = [{3 * d}, {d}] (nn.Linear stores [out, "
             "in]): its rows are W^Q, then W^K, then W^V, so cut it with .chunk(3, dim=0) "
             "and use each transposed, x @ W_q.T (or cut the output, mha.qkv(x).chunk(3, "
             f"dim=-1)). (torch: {str(err).strip().splitlines()[0]})")


def expect_repeatable(fn: Callable, got: torch.Tensor, what: str, *args) -> None:
    """Call `fn(*args)` once more (clones of tensors) and fail when the answer differs
    from `got`: something random in it, such as F.dropout."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(1)  # another random stream than the first call's
        again = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    if isinstance(again, torch.Tensor) and not close(got.detach(), again):
        expect_no_new_layer(fn, *args)
        fail(f"{what} gives a different result on each call with the same inputs: the "
             "output is random. F.dropout defaults to training=True: no dropout here (or "
             "training=self.training).")


def expect_out_proj_merged(err: Exception, what: str, mha: MultiHeadAttention) -> None:
    """A crash of `mha.out_proj` (D -> D) fed one head's D_h features is named."""
    dh, d = mha.d_head, mha.out_proj.in_features
    if f"x{dh} and {d}x{d})" in str(err):
        fail(f"{what}: mha.out_proj got one head's D_h = {dh} features, but it maps D = {d} "
             "to D: merge the heads to [B, T, D] before out_proj. (torch: "
             f"{str(err).strip().splitlines()[0]})")


def expect_split_shape(got: torch.Tensor, x: torch.Tensor, n_heads: int, what: str) -> None:
    """Fail with labelled axes when `split_heads` gave another shape than
    `[B, H, T, D_h]`; name a head width taken from the token axis (`T // H`)."""
    b, t, d = x.shape
    want = (b, n_heads, t, d // n_heads)
    slip_t = got.dim() == 4 and got.shape[-1] == t // n_heads != d // n_heads
    if tuple(got.shape) == want or (all(n in want for n in got.shape) and not slip_t):
        return  # expect_like names every axis
    names = dict(zip(want, ("B", "H", "T", "D_h")))
    label = "[" + ", ".join(f"{names[n]}={n}" if n in names else str(n)
                            for n in got.shape) + "]"
    slip = ""
    if slip_t:
        slip = (" Your head width is T // H (the token axis): it is D // H, the feature "
                "width split over the heads (D_h = x.size(-1) // n_heads).")
    fail(f"{what} has shape {label}, expected [B, H, T, D_h] = "
         f"[B={b}, H={n_heads}, T={t}, D_h={d // n_heads}].{slip}")
