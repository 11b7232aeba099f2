"""Diagnoses for `merge_heads(x)`, x `[B, H, T, D_h]` -> `[B, T, D]` (notebook 01), kept out
of `multi_head` (a module stays under 320 lines): a result of the wrong shape
is named by its mistake where it can be recomputed, else written with labelled axes; a merge
that reads a size the last `split_heads` call saved is named too. And the notice printed
before an error of Exercise 5's first call (`explain_crash`)."""

from __future__ import annotations

import ast
import inspect
import re
from typing import Callable

import torch

from labnn.exercises.grading import call, close, describe_shape, expect_close, explain, fail
from labnn.exercises.grading.expressions import plain_value
from labnn.exercises.grading.python_slips import _failing_site, name_python_slip
from labnn.exercises.self_attention.global_reads import crash_advice
from labnn.exercises.grading.slips import beyond_float32, float64_round

REUSE_4D = ("if it reuses your attention functions from Ex. 1-2, they get 4-D heads "
            "[B, H, T, D_h] here: count their axes from the end (k.transpose(-2, -1), not "
            "transpose(1, 2)); their checks now also pass 4-D input")
MHA_PARTS = "qkv, out_proj, n_heads, d_head (= d_model // n_heads) and dropout"


def runs(fn: Callable, *args) -> bool:
    """Whether `fn(*args)` returns (the learner's code, rerun: any error only says no)."""
    try:
        fn(*args)
    except Exception:
        return False
    return True


def explain_crash(fn: Callable, what: str, err: Exception, args: tuple) -> None:
    """Print the notice that fits `err`, raised by `fn(*args)` (x, mha, mask), and raise
    it: a missing attribute of the module names the ones it has, a signature without
    `mask` the one expected, a `.view` the layout refuses the split or merge it was
    (`_view_advice`), a shape of a head width 3 * D_h or D that width, another shape
    error (RuntimeError, IndexError, ValueError) the 4-D heads that attention functions of
    Ex. 1-2 get (`REUSE_4D`)."""
    name_python_slip(err)  # what grading's `call` would have named before its notice
    try:
        inspect.signature(fn).bind(*args)
        signature = True
    except (TypeError, ValueError):
        signature = False
    missing = getattr(err, "name", None) if isinstance(err, AttributeError) else None
    if missing and getattr(err, "obj", None) is args[1]:
        advice = (f"mha has no attribute `{missing}`: a MultiHeadAttention has {MHA_PARTS}")
    elif not signature:
        advice = ("define it as multi_head_attention(x, mha, mask=None): the check passes "
                  "the mask as a third argument")
    elif isinstance(err, RuntimeError) and "view size is not compatible" in str(err):
        advice = _view_advice(err)
    elif isinstance(err, (RuntimeError, IndexError, ValueError)):
        advice = _head_width_advice(err, args[1]) or REUSE_4D
    else:
        advice = crash_advice(fn, err)
    explain(what, err, advice)
    raise err


_INVALID_SHAPE = re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)")


def _head_width_advice(err: Exception, mha) -> str:
    """What a `.view`/`.reshape` to an impossible shape read as a head's width, when that
    size is 3 * D_h (`mha.qkv.out_features // n_heads`, q, k and v together) or D (the
    model's width); empty otherwise."""
    found = _INVALID_SHAPE.search(str(err))
    dh, h = getattr(mha, "d_head", None), getattr(mha, "n_heads", None)
    if not found or not isinstance(dh, int) or not isinstance(h, int):
        return ""
    sizes = [int(n) for n in found.group(1).split(",") if n.strip()]
    said = f"a head is mha.d_head = d_model // n_heads = {dh} wide"
    if 3 * dh in sizes and 3 * dh != dh * h:
        return (f"your shape {sizes} makes heads {3 * dh} = 3 * D_h wide: mha.qkv's "
                f"out_features (3 * d_model) hold q, k and v together; {said}")
    if len(sizes) == 4 and h in sizes and sizes[-1] == dh * h:
        return f"your shape {sizes} gives each of the {h} heads all {dh * h} features; {said}"
    return ""


MERGE_VIEW = ("a .view on transposed heads, which are not contiguous in memory: "
              ".reshape(B, T, D) (or .contiguous().view(B, T, D)) merges them")
SPLIT_VIEW = ("a .view of a [B, T, D] chunk of mha.qkv(x) straight to [B, H, T, D_h]: the chunk "
              "is not contiguous, and a reshape would mix positions into heads (Ex. 4): "
              ".view(B, T, H, D_h).transpose(1, 2)")


def _view_advice(err: Exception) -> str:
    """What a `.view` that the memory layout refuses did, read from the receiver of the
    `.view(...)` that raised `err`: a 3-D chunk of `mha.qkv(x)` viewed straight to
    `[B, H, T, D_h]` (the split with no transpose), 4-D heads (a merge after the
    transpose), or, unknown, both said."""
    site = _failing_site(err)
    receiver = None
    for part in ast.walk(site[0]) if site else ():
        if isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute) and (
                part.func.attr == "view"):
            moved = any(n in ast.unparse(part.func.value) for n in ("transpose", "permute"))
            receiver = 4 if moved else getattr(plain_value(part.func.value, site[1]), "ndim", 0)
            break
    if receiver in (3, 4):
        return SPLIT_VIEW if receiver == 3 else MERGE_VIEW
    return ("a .view the memory layout refuses: of transposed heads (merge with .reshape(B, "
            "T, D)) or of a chunk of mha.qkv(x) to [B, H, T, D_h] (split with .view(B, T, H, "
            "D_h).transpose(1, 2))")


def label_axes(shape: torch.Size, sizes: dict[str, int]) -> str:
    """`shape` with each axis named by the letter of `sizes` of its size, ``?`` where no
    single letter (or more than one) has it, e.g. ``"[B, T, ?]"``."""
    def name(n: int) -> str:
        named = [k for k, v in sizes.items() if v == n]
        return named[0] if len(named) == 1 else "?"
    return "[" + ", ".join(name(int(n)) for n in shape) + "]"


def expect_merged_named(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`got` = `merge_heads(heads)`, heads `[B, H, T, D_h]`, of the wrong shape: name
    `torch.cat(list(x), -1)` (a loop over the batch), else show both shapes labelled."""
    b, h, t, dh = heads.shape
    if tuple(got.shape) == (b, t, h * dh):
        return
    want = f"expected {[b, t, h * dh]} = [B, T, D]"
    by_batch = torch.cat(list(heads), -1)
    if got.shape == by_batch.shape and close(got, by_batch):
        fail(f"{what} has shape [H, T, B·D_h] = {describe_shape(got.shape)}, {want}: "
             "list(x) / iterating a tensor runs over its first axis, the batch: "
             "concatenate the heads, torch.cat(x.unbind(1), -1), or transpose(1, 2) then "
             "reshape.")
    labelled = label_axes(got.shape, {"B": b, "H": h, "T": t, "D_h": dh, "D": h * dh})
    fail(f"{what} has shape {describe_shape(got.shape)}, {want}: its axes read "
         f"{labelled} (D = H·D_h = {h * dh}, ? = no axis size); join each position's heads "
         "and their features: x.transpose(1, 2).reshape(B, T, D).")


def expect_heads_float64(split_heads, merge_heads, x: torch.Tensor, n_heads: int) -> None:
    """The one dtype rule for 01 Ex4: `split_heads` and `merge_heads` on float64 input
    give float64 (`.float()` on the way casts back to float32, which float32 input hides),
    every value kept (x is divided by 3, values float32 cannot hold: a `.float()` cast back
    to float64 shows)."""
    b, t, d = x.shape
    (x,) = beyond_float32(x)
    heads = x.view(b, t, n_heads, d // n_heads).transpose(1, 2)
    float64_round(lambda x: split_heads(x, n_heads), f"split_heads(x, {n_heads})", (x,), heads)
    float64_round(merge_heads, "merge_heads(x)", (heads.contiguous(),), x)


def expect_merge_alone(split_heads: Callable, merge_heads: Callable) -> None:
    """`merge_heads` of `[3, 2, 3, 5]` heads right after `split_heads` of a `[2, 5, 24]`
    input, whose sizes all differ: a merge that reshapes to a size the last split saved
    (a global) fails there, and is named when it is right after a split of its own size."""
    heads = torch.randn(3, 2, 3, 5, generator=torch.Generator().manual_seed(25))
    merged = heads.transpose(1, 2).reshape(3, 3, 10)
    what = "merge_heads(x) with x [3, 2, 3, 5] right after split_heads(x, 4) of x [2, 5, 24]"
    call(split_heads, "split_heads(x, 4) with x [2, 5, 24]", torch.randn(2, 5, 24), 4)
    try:
        got = merge_heads(heads.clone())
        if close(got, merged):
            return
    except Exception:
        pass
    call(split_heads, "split_heads(x, 2) with x [3, 3, 10]", merged.clone(), 2)
    try:
        again = merge_heads(heads.clone())
    except Exception:
        again = None
    if isinstance(again, torch.Tensor) and close(again, merged):
        fail("merge_heads(x) with x [3, 2, 3, 5] is right just after a split of its size, "
             "[3, 3, 10], not after split_heads(x, 4) of x [2, 5, 24]: it reads a size saved "
             "by the last split_heads call (a global); read every size from its own input: "
             "B, H, T, D_h = x.shape, then .reshape(B, T, H * D_h).")
    expect_close(call(merge_heads, what, heads.clone()), merged, what, dims="b i d")
