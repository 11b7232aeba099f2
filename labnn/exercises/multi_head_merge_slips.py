"""Diagnoses for `merge_heads(x)`, x `[B, H, T, D_h]` -> `[B, T, D]` (notebook 01), kept out
of `labnn.exercises.multi_head` (a module stays under 320 lines): a result of the wrong shape
is named by its mistake where it can be recomputed, else written with labelled axes."""

from __future__ import annotations

import itertools

import torch

from labnn.exercises.grading import close, describe_shape, fail


def label_axes(shape: torch.Size, sizes: dict[str, int]) -> str | None:
    """`shape` with each axis named by one letter of `sizes` or a product of them, e.g.
    ``"[H=4, T=5, B·D_h=12]"``; None when an axis has no name or two names."""
    names: dict[int, list[str]] = {}
    for k in (1, 2, 3):
        for combo in itertools.combinations(sizes, k):
            names.setdefault(int(torch.tensor([sizes[c] for c in combo]).prod()),
                             []).append("·".join(combo))
    if any(len(names.get(int(n), [])) != 1 for n in shape):
        return None
    return "[" + ", ".join(f"{names[int(n)][0]}={int(n)}" for n in shape) + "]"


def expect_merged_named(got: torch.Tensor, heads: torch.Tensor, what: str) -> None:
    """`got` = `merge_heads(heads)`, heads `[B, H, T, D_h]`, of the wrong shape: name
    `torch.cat(list(x), -1)` (a loop over the batch), else show both shapes labelled."""
    b, h, t, dh = heads.shape
    if tuple(got.shape) == (b, t, h * dh):
        return
    want = f"expected [B, T, D] = {[b, t, h * dh]}"
    by_batch = torch.cat(list(heads), -1)
    if got.shape == by_batch.shape and close(got, by_batch):
        fail(f"{what} has shape [H, T, B·D_h] = {describe_shape(got.shape)}, {want}: "
             "list(x) / iterating a tensor runs over its first axis, the batch: "
             "concatenate the heads, torch.cat(x.unbind(1), -1), or transpose(1, 2) then "
             "reshape.")
    labelled = label_axes(got.shape, {"B": b, "H": h, "T": t, "D_h": dh})
    if labelled:
        fail(f"{what} has shape {labelled}, {want}: the heads (H) must end up joined with "
             "their features (D_h) after the tokens: x.transpose(1, 2).reshape(B, T, D).")
