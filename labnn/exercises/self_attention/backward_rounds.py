"""The backward pass of notebook 01's attention exercises (1, 2, 4, 5): gradients of the
learner's answer compared with the reference's, and a backward that raises because the
answer changed in place a tensor autograd saved, named from torch's own message (the
operation whose output was changed, or a boolean mask, and the tensor's version).

Dimension letters: `b` batch, `h` head, `i` query, `j` key, `d` feature.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from labnn.exercises.grading import call, expect_gradients, expect_tensor, fail
from labnn.exercises.self_attention.recorded_slips import in_place_crash

_SAVED = re.compile(r"\[(?:torch\.|CPU|CUDA)?(\w+?)(?:Tensor|Type) (\[[\d, ]*\])\]"
                    r"(?:, which is output \d+ of (\w+))?,? is at version (\d+); "
                    r"expected version (\d+)")


_VIEWS = {"as_strided", "view", "unsafe_view", "expand", "reshape_alias", "transpose", "t",
          "permute", "select", "slice", "unsqueeze", "squeeze"}


def _snake(name: str) -> str:
    """`MaskedFillBackward0` -> `masked_fill`: the operation an autograd node stands for."""
    name = re.sub(r"Backward\d*$", "", name)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def name_saved_edit(err: Exception, what: str) -> None:
    """Fail by name when `err` is autograd's refusal of a saved tensor changed in place:
    the operation whose output it is (`exp`: `s.exp_()` then `s /= ...`), or a boolean
    tensor (a mask that `masked_fill` saved, then negated in place); else return (the
    softmax's weights too: `expect_gradients` names them)."""
    found = _SAVED.search(str(err))
    if "modified by an inplace operation" not in str(err) or not found:
        return
    kind, shape, op, now, saved = found.groups()
    if op and _snake(op) == "softmax":  # the weights: `expect_gradients` says it so
        return
    edits = f"version {now}, saved at {saved}"
    if op and _snake(op) in _VIEWS:  # a view torch made itself, as a matrix product does
        fail(f"the backward pass through {what} raised: a tensor autograd saved (seen through "
             f"a {shape} view, as a matrix product reads its operands) was changed in place "
             f"after ({edits}): once a tensor has been used, make a new one instead of "
             "editing it (q = q + v, not q += v, q.add_(v) or q[...] = ...).")
    if op:
        fail(f"the backward pass through {what} raised: the output of `{_snake(op)}` "
             f"({shape}), which autograd saved, was changed in place after ({edits}): "
             f"write every step after `{_snake(op)}` out of place, e.g. "
             "`e = e / e.sum(-1, keepdim=True)`, not `/=`, `.div_()` or `e[...] = ...`.")
    if kind.lower().startswith("bool"):
        fail(f"the backward pass through {what} raised: a bool tensor {shape} (the mask?) "
             f"that autograd saved was changed in place after use ({edits}), e.g. "
             "mask.logical_not_() or mask[...] = ...: use ~mask, a new tensor, and leave "
             "the caller's mask as it is.")
    fail(f"the backward pass through {what} raised: a {shape} tensor autograd saved was "
         f"changed in place after use ({edits}): write the steps that follow it out of "
         "place (x = x * 2, not x *= 2, x.mul_(2) or x[...] = ...).")


def expect_backward(fn: Callable, what: str, reference: Callable,
                    dims: dict[str, str] | None = None,
                    params: dict[str, torch.Tensor] | None = None,
                    **inputs: torch.Tensor) -> None:
    """Call `fn` once more on copies of `inputs` that require grad, backpropagate a random
    upstream gradient through its answer and through `reference` (called the same way),
    and fail unless the gradients of every floating-point input (and of `params`, shared
    by both) agree: an answer computed under `torch.no_grad()`, from `.data` or
    `.detach()`-ed, one whose backward gives NaN, and one whose backward raises (an
    in-place edit of a tensor autograd saved) are refused, by name."""
    mine = {n: t.clone().requires_grad_(t.is_floating_point()) for n, t in inputs.items()}
    theirs = {n: t.clone().requires_grad_(t.is_floating_point()) for n, t in inputs.items()}
    got = expect_tensor(call(fn, what, *mine.values(), diagnose=in_place_crash(what)), what)
    want = reference(*theirs.values())
    pairs = {n: (mine[n], theirs[n]) for n in inputs if inputs[n].is_floating_point()}
    pairs.update({n: (p, p) for n, p in (params or {}).items()})
    expect_backward_of(got, want, what, pairs, dims)


def expect_backward_of(got: torch.Tensor, want: torch.Tensor, what: str,
                       pairs: dict[str, tuple[torch.Tensor, torch.Tensor]],
                       dims: dict[str, str] | None = None) -> None:
    """`expect_gradients` on an answer already computed; a backward that raises is
    refused by name (`name_saved_edit`)."""
    leaves = [mine for mine, _ in pairs.values() if mine.requires_grad]
    if got.requires_grad and leaves:
        try:  # a first backward, kept: an in-place edit named from torch's message
            torch.autograd.grad(got, leaves, torch.ones_like(got), retain_graph=True,
                                allow_unused=True)
        except RuntimeError as err:
            name_saved_edit(err, what)
    try:  # a tensor changed in place after use is named by expect_gradients
        expect_gradients(got, want, what, pairs, dims=dims, in_place=(
            "e.g. the weights after the softmax: w.masked_fill_(...), w[w != w] = 0 or "
            "w.nan_to_num_(0)", "use the out-of-place form, w = w.masked_fill(...) "
            "or w = w.nan_to_num(0)"))
    except RuntimeError as err:
        said = (str(err).strip() or type(err).__name__).splitlines()[0].split(" Hint:")[0]
        fail(f"backward through your answer raised (torch: {said[:120]}): did you edit in "
             "place a tensor autograd saved (s /= ..., .div_(), s[...] = ..., "
             "mask.logical_not_())? Write that step out of place (s = s / ...).")
