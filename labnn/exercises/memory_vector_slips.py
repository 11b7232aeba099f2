"""Slips of notebook 03's exercises, named for `labnn.exercises.memory_vector`: those that
need the learner's function run again (a broadcast error that an axis short of the layer
weights, or a transposed bias, causes), and a softmax or an exp one step too far (over
the features after the layer mix; on the bias before it is added).

Dimension letters: `L+1` layers (the embedding first), `B` batch, `H` heads, `S` keys,
`D` width, `D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.feedback.layer import feedback_attention
from labnn.exercises.grading.outcomes import fail
from labnn.exercises.grading.slips import gives, rerun_broadcast


def mix_broadcast(fn: Callable, xs: torch.Tensor, w: torch.Tensor) -> Callable:
    """A `diagnose` for `memory_vector(xs, w)`: the weights `p = softmax(w)` `[N]` given
    one axis too few (`p[:, None]`, `[N, 1]`, lines up with `[B, D]`), or multiplied with
    `p @ xs` (a batch of `[B, D]` matrices); each is rerun on `xs` `[N, N, D]`, where
    both run."""
    n, d = xs.size(0), xs.size(-1)
    square = torch.randn(n, n, d, generator=torch.Generator().manual_seed(5))
    p = w.detach().softmax(0)
    short = "p[:, None] is [N, 1] and lines up with the LAST two axes of xs [N, B, D]"

    last = torch.randn(n, 2, n, generator=torch.Generator().manual_seed(6))

    def diagnose(err: Exception) -> None:
        rerun_broadcast(err, lambda: gives(fn, last, w.detach(), (p * last).sum(0)),
                        "w.softmax(0) [L+1] lines up with the LAST axis of xs [L+1, B, D]: "
                        "use w.softmax(0)[:, None, None].")
        rerun_broadcast(err, lambda: gives(fn, square, w.detach(),
                                           (p[:, None] * square).sum(0)),
                        f"{short}: add one more axis, p[:, None, None], [N, 1, 1].")
        if isinstance(err, RuntimeError) and gives(fn, square, w.detach(), p @ square):
            fail("p @ xs multiplies p [N] with each [B, D] matrix of xs [N, B, D], not "
                 "along the layers: broadcast p over the layers, "
                 "(p[:, None, None] * xs).sum(0). "
                 f"(torch said: {str(err).strip().splitlines()[0]})")

    return diagnose


def scores_broadcast(err: Exception, fn: Callable, q, k, v, bias: torch.Tensor,
                     what: str) -> None:
    """Name a broadcast error that `bias.T` (`[S, H]`) causes, rerun with `S = H`, or that
    `q @ k.transpose(-2, -1)` with q `[B, H, D_h]` (no query axis) causes, rerun with
    `B = H`: where it runs, compare with what the slip gives."""
    b, h = q.size(0), bias.size(0)
    qb, kb, vb = (t.detach().repeat(h, *[1] * (t.dim() - 1))[:h] for t in (q, k, v))
    scores = qb @ kb.transpose(-2, -1) / qb.size(-1) ** 0.5 + bias.detach()
    rerun_broadcast(err, lambda: gives(fn, qb, kb, vb, bias.detach(),
                                       scores.softmax(-1) @ vb) and b != h,
                    f"{what}: q has no query axis: q [B, H, D_h] @ k.transpose(-2, -1) "
                    "pairs q's batch axis with k's heads; use q.unsqueeze(-2) "
                    "([B, H, 1, D_h]) or einsum('bhd,bhsd->bhs', q, k).")
    q, kh, vh, bh = q.detach(), k[:, :, :h].detach(), v[:, :, :h].detach(), bias[:, :h]
    bh = bh.detach()
    rerun_broadcast(err, lambda: gives(fn, q, kh, vh, bh, feedback_attention(q, kh, vh, bh.T)),
                    f"{what}: the bias is transposed (bias.T is [S, H]): the bias [H, S] "
                    "lines up with the scores [B, H, S] as it is; add bias, not bias.T.")


def softmax_after_mix(xs: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` with a softmax over the features `D` after the mix, of
    `softmax(w)` or of the raw logits `w`: `(result, message)` pairs."""
    return [
        (torch.einsum("l,lbd->bd", w.softmax(0), xs).softmax(-1),
         "no softmax over D: the memory vector is the mix itself, sum_l softmax(w)[l] * "
         "xs[l]; the softmax is over the L+1 layer weights only."),
        (torch.einsum("l,lbd->bd", w, xs).softmax(-1),
         "your softmax runs over D, on the mix of the raw logits w: it belongs to the "
         "layer weights, softmax(w) over the L+1 layers, and the mix itself, sum_l "
         "softmax(w)[l] * xs[l], has none."),
    ]


def bias_transformed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`feedback_attention(q, k, v, bias)` with the bias exponentiated before it is added
    to the scores (e.g. `scaled_dot_product_attention(..., attn_mask=bias.exp())`, as if
    a float mask multiplied the weights): `(result, message)` pairs."""
    return [
        (feedback_attention(q, k, v, bias.exp()),
         "you added bias.exp() to the scores: add the bias as it is, q·k / sqrt(d_head) "
         "+ bias (a float attn_mask is added to the scores too, not multiplied into the "
         "weights)."),
    ]
