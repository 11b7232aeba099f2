"""The slips of the scale $1 / \\sqrt{d}$ in notebook 01's exercises that take one
(attention weights, attention, multi-head attention): `torch.sqrt` of a Python int (a
crash, named before `grading`'s generic int-for-a-tensor hint), sqrt(d) misread (`d ** 1 /
2`, another of q's sizes), and multi-head attention's scale forgotten, multiplied, taken
from the full width or a power of two (a d_head of another cell). A width written as a
number is named where a check reruns at another width: `attention_axes` (4-D heads),
`other_sizes` (another head count).

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `D` width
(`d_model`), `D_h` head width.
"""

from __future__ import annotations

import ast
import re
from typing import Callable

import torch

from labnn.exercises.grading import close, fail
from labnn.exercises.grading.expressions import evaluate, plain_value
from labnn.exercises.grading.python_slips import _failing_site

POWER = "** binds tighter than /; use d ** 0.5 (or math.sqrt(d))."
_TORCH_ROOT = re.compile(r"(r?sqrt)\(\): argument 'input' \(position 1\) must be Tensor, "
                         r"not (int|float)")
_NUMBER_ROOT = re.compile(r"'(int|float)' object has no attribute '(r?sqrt)'")


def name_int_root(err: Exception) -> None:
    """Fail when `err` is `torch.sqrt(d)` (or `rsqrt`) of a Python number, e.g. `d =
    q.size(-1)`, or `d.sqrt()` on one, naming the argument as the learner wrote it;
    otherwise return."""
    torch_root = isinstance(err, TypeError) and _TORCH_ROOT.match(str(err))
    number_root = isinstance(err, AttributeError) and _NUMBER_ROOT.match(str(err))
    if not (torch_root or number_root):
        return
    kind, root = torch_root.group(2, 1) if torch_root else number_root.group(1, 2)
    arg, value = _root_argument(err, root) or ("d", None)
    said = f"`{arg}` is a Python {kind}" + ("" if value is None else f" ({value:g})")
    how = (f"use math.sqrt({arg}) or {arg} ** 0.5" if root == "sqrt"
           else f"use 1 / math.sqrt({arg}) or {arg} ** -0.5")
    fail(f"{said}, but torch.{root} takes tensors" + ("" if torch_root else
         f" (a Python number has no .{root}())") + f": {how}.")


def _root_argument(err: Exception, root: str) -> tuple[str, float] | None:
    """The argument, as written, and value of the `torch.<root>(...)` call or `.<root>`
    attribute on a Python number in the expression that raised `err`; None if unknown."""
    site = _failing_site(err)
    if site is None:
        return None
    node, env = site
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute) and part.attr == root:
            operand = part.value  # d.sqrt()
        elif (isinstance(part, ast.Call) and part.args
              and plain_value(part.func, env) is getattr(torch, root)):
            operand = part.args[0]  # torch.sqrt(d)
        else:
            continue
        try:
            value = evaluate(operand, env, calls=True)
        except Exception:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ast.unparse(operand), value
    return None


def scale_misreads(weights: Callable[[float], torch.Tensor], q: torch.Tensor,
                   after: Callable[[torch.Tensor], torch.Tensor] = lambda w: w
                   ) -> list[tuple[torch.Tensor, str]]:
    """The scales that misread sqrt(d) (`d = q.size(-1)`, q `[B, T, D]`), as `(result,
    message)` pairs: d / 2 and 2d (`d ** 1 / 2`, parenthesised or not), and sqrt of
    another of q's sizes. `weights`: scale -> the softmax weights with the scores times
    it; `after`: what the answer does with them (e.g. ``w @ v``)."""
    d = q.size(-1)
    names = {0: "the batch size B", 1: "the number of queries"}
    return [
        (after(weights(2 / d)), f"you divided the scores by d / 2 = {d // 2}: `d ** 1 / 2` "
                                f"is (d ** 1) / 2, since {POWER}"),
        (after(weights(1 / (2 * d))), f"you divided the scores by 2d = {2 * d}: "
                                      f"`scores / d ** 1 / 2` divides by d, then by 2: {POWER}"),
        *[(after(weights(n ** -0.5)),
           f"you divided the scores by sqrt({n}) = sqrt(q.size({a})), {names[a]}; divide by "
           f"sqrt(d) = sqrt(q.size(-1)), the width of queries and keys ({d}).")
          for a, n in enumerate(q.shape[:-1]) if n not in (1, d)],
    ]


def mha_scale_slips(variant: Callable[..., torch.Tensor], d: int, h: int
                    ) -> list[tuple[torch.Tensor, str]]:
    """The wrong scales of multi-head attention (`d` = d_model, `h` heads of `D_h = d //
    h`), as `(result, message)` pairs; `variant(scale_width=c)` is the answer with the
    scores divided by sqrt(c) (c = 1: no scale)."""
    dh = d // h
    on_heads = f"math.sqrt(q.size(-1)) with q the heads [B, H, T, D_h], D_h = {dh}"
    named = {1, 1 / dh, dh, dh ** 2, d, d ** 2, h, d / h ** 2, (dh / 2) ** 2, (2 * dh) ** 2}
    return [
        *[(variant(scale_width=n),
           f"you divided the scores by sqrt({n}), none of this module's sizes: a width "
           f"written as a number, or a d_head from another cell? Each head divides by "
           f"sqrt(mha.d_head) = sqrt({dh}): {on_heads}.")
          for n in (2, 8, 16, 32, 64, 128, 256, 512) if n not in named],
        (variant(scale_width=1),
         f"you forgot to divide the scores by sqrt(D_h) before the softmax: {on_heads}."),
        (variant(scale_width=1 / dh),
         f"you multiplied the scores by sqrt(D_h) = sqrt({dh}): divide by it, {on_heads}."),
        (variant(scale_width=dh ** 2),
         f"the scores are divided by D_h = {dh}, not sqrt(D_h): scaled twice (q / sqrt(D_h), "
         "then attention() scales again) or by D_h itself: divide once, by sqrt."),
        (variant(scale_width=d),
         f"you divided by sqrt(d_model) = sqrt({d}), the full width (x.size(-1), or {d} "
         f"written as a number); each head divides its scores by sqrt(d_head) = sqrt(D_h) = "
         f"sqrt({dh}): {on_heads}."),
        (variant(scale_width=d ** 2),
         f"you divided the scores by D = {d}, d_model itself: each head divides them by "
         f"sqrt(D_h) = sqrt({dh}): {on_heads}."),
        (variant(scale_width=d / h ** 2),
         f"you divided the scores by sqrt(d_model) / n_heads = sqrt({d}) / {h}, the root of "
         f"d_model alone: each head divides by sqrt(d_model / n_heads) = sqrt(D_h) = "
         f"sqrt({dh}): {on_heads}."),
        (variant(scale_width=h), "you divided the scores by sqrt(n_heads): each head "
                                 "divides by sqrt(d_head) = sqrt(d_model / n_heads)."),
        (variant(scale_width=(dh / 2) ** 2),
         f"you divided the scores by D_h / 2 = {dh / 2:g}: `d ** 1 / 2` is (d ** 1) / 2, "
         f"since {POWER}"),
        (variant(scale_width=(2 * dh) ** 2),
         f"you divided the scores by 2 * D_h = {2 * dh}: `scores / d ** 1 / 2` divides by "
         f"d, then by 2: {POWER}"),
    ]


def expect_scaled_without_mask(fn: Callable, got: torch.Tensor, q: torch.Tensor,
                               k: torch.Tensor, v: torch.Tensor) -> None:
    """`got` = `fn(q, k, v)` with mask=None: fail when its scores were not divided by
    sqrt(d), d = q.size(-1), and say where the scale went when `fn` with a mask that is
    all True does divide them (the scale written under `if mask is not None:`)."""
    scores = q @ k.transpose(-2, -1)
    if not close(got, scores.softmax(-1) @ v):
        return
    every = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device)
    try:
        masked = fn(q.clone(), k.clone(), v.clone(), every)
    except Exception:
        masked = None
    if close(masked, (scores / q.size(-1) ** 0.5).softmax(-1) @ v):
        fail("with mask=None your scores are not divided by sqrt(d), with a mask they are: "
             "the scale sits under `if mask is not None:`. Divide by sqrt(d) on every "
             "call, before that `if`; only the mask belongs under it.")
    fail("you forgot to divide the scores by sqrt(d) before the softmax.")
