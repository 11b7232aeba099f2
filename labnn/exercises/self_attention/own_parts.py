"""What notebook 01's Exercises 2-5 ask the learner to write, refused when the answer runs
someone else's instead: torch's fused attention in Exercises 2 and 5 (as in Exercise 1,
`recorded_slips.torch_attention_refused`: they ask for the masking), labnn's
`masked_softmax` (2, 5) and `MultiHeadAttention.split_heads` (4, 5), and
`torch.nn.Transformer`'s causal mask (3). Calls made by the checker itself (its reference,
`mha(x)`) are not the learner's and are let through.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading import ExerciseFailed, fail
from labnn.exercises.grading.reference_calls import by_the_learner, calls_refused
from labnn.nn.attention import MultiHeadAttention, masked_softmax

_SPLIT = MultiHeadAttention.split_heads
_TORCH_MASK = torch.nn.Transformer.generate_square_subsequent_mask
_BUILD_MASK = "build the mask yourself, e.g. torch.ones(t, t, dtype=torch.bool).tril()"
_OWN_HELPERS = ("Exercise 5 asks you to write the attention of the heads: use your own "
                "functions of Exercises 2 and 4 (attention, split_heads, merge_heads) on the "
                "q, k, v of mha.qkv(x)")

SDPA_REFUSED = {
    2: "Exercise 2 asks you to write the masking: torch's fused attention is refused here (as "
       "in Exercise 1), whatever is done to its output, and your function runs {name}: mask "
       "the scores with scores.masked_fill(~mask, float('-inf')), take the softmax, then "
       "zero the rows with no allowed key (~mask.any(-1, keepdim=True)).",
    5: "Exercise 5 asks you to write the attention of the heads: torch's fused attention is "
       "refused here (as in Exercises 1 and 2), whatever is done to its output, and your "
       "function runs {name}: use your attention of Exercise 2 on the heads.",
}
PARTS = {  # exercise -> {labnn's or torch's function: what to say when the answer runs it}
    2: {masked_softmax: "your function runs labnn.nn.attention.masked_softmax, labnn's own "
        "masking (and zeroing of the empty rows), which Exercise 2 asks you to write: "
        "scores.masked_fill(~mask, float('-inf')).softmax(-1), then zero the rows with no "
        "allowed key."},
    3: {_TORCH_MASK: "your function runs torch.nn.Transformer.generate_square_subsequent_mask"
        f", torch's causal mask (a float one, 0 and -inf): {_BUILD_MASK}."},
    4: {_SPLIT: "split_heads runs labnn's MultiHeadAttention.split_heads, the reference it is "
        "checked against: write it yourself, x.view(B, T, n_heads, D // n_heads)"
        ".transpose(1, 2)."},
    5: {masked_softmax: f"your function runs labnn.nn.attention.masked_softmax: {_OWN_HELPERS}"
        ".", _SPLIT: "your function runs labnn's MultiHeadAttention.split_heads (mha."
        f"split_heads): {_OWN_HELPERS}."},
}


class _LearnerAttention(TorchFunctionMode):
    """Records the name of torch's fused attention (`F.scaled_dot_product_attention`, or an
    aten op whose name holds "scaled_dot_product") when the learner's code runs it, not the
    checker's (the module `mha(x)` runs it for its reference)."""

    called = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if "scaled_dot_product" in name and not self.called and by_the_learner(
                sys._getframe(0)):
            self.called = (f"torch.ops.aten.{name}" if name.startswith("_")
                           else "torch.nn.functional.scaled_dot_product_attention")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = func(*args, **(kwargs or {}))
        for said in caught:  # torch's warning (`k.T` of 3-D k) at the caller's line, not here
            warnings.warn(said.message, said.category, stacklevel=2)
        return out


def own_parts(exercise: int) -> Callable[[Callable], Callable]:
    """Decorate the checker of 01's Exercise `exercise` (2-5): the answer fails with the
    message of `PARTS` when it runs one of that exercise's functions (even when a round
    raised first), and, in Exercises 2 and 5, with `SDPA_REFUSED` when it runs torch's
    fused attention, unless a round named another mistake first."""
    refused = PARTS[exercise]

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(fn: Callable, *args, **kwargs) -> None:
            mode, named = _LearnerAttention(), False
            watch = mode if exercise in SDPA_REFUSED else contextlib.nullcontext()
            with calls_refused({f: f for f in refused}, lambda f: refused[f]):
                try:
                    with watch:
                        check(fn, *args, **kwargs)
                except ExerciseFailed:
                    named = True
                    raise
                finally:
                    if mode.called and not named and exercise in SDPA_REFUSED:
                        fail(SDPA_REFUSED[exercise].format(name=mode.called))
        return run

    return decorate
