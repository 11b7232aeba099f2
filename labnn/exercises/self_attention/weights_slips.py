"""Slips of notebook 01's attention-weights exercise that reruns tell apart: a product
with the wrong two axes of k (`k.T`, `k.transpose(0, 1)`), an entry-by-entry `q * k`,
q (or k) scored against itself, cosine similarity or a distance in place of the dot product,
weights made without the softmax's exp (`sigmoid`, `abs`, squares: `not_softmax`; with
the scale after the softmax, a base-2 exp and more for multi-head attention's heads),
weights made causal where no mask is asked for, values reversed along the keys. Named for
`labnn.exercises.self_attention.masked_attention`.

Dimension letters: `B` batch, `T` queries, `S` keys, `D` width.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from labnn.exercises.grading import close, fail, first_position
from labnn.exercises.grading.relations import half_precision
from labnn.exercises.grading.slips import rerun_broadcast
from labnn.exercises.self_attention.scale_slips import name_int_root

TRANSPOSED = ("k.T reverses all three axes of k [B, S, D] (with 2-D q and k it runs): "
              "transpose only the last two, k.transpose(-2, -1).")
SWAPPED_01 = ("k.transpose(0, 1) swaps the batch and key axes of k [B, S, D], so the "
              "product pairs the wrong axes: swap the keys' last two axes, "
              "q @ k.transpose(-2, -1).")
WRONG_AXES = ("the product used the wrong two axes of k (k.T or k.transpose(0, 1); with "
              "2-D q and k both run): swap the keys' last two axes, k.transpose(-2, -1).")
Q_TRANSPOSED = ("you transposed q instead of k (q.transpose(-2, -1) @ k pairs features "
                "with features, and needs T = S): transpose k, not q: "
                "q @ k.transpose(-2, -1), [B, T, S].")
K_KEPT = ("q @ k multiplies q's features [B, T, D] with k's positions [B, S, D] (it runs only "
          "when S = D): the scores pair every query with every key over their features, "
          "q @ k.transpose(-2, -1), [B, T, S].")
ELEMENTWISE = ("q * k multiplies entry by entry (and needs T = S): it pairs query i with "
               "key i only. Every query meets every key in the matrix product "
               "q @ k.transpose(-2, -1), [B, T, S].")

SELF_SCORED = ("{z} is scored against itself ({z} @ {z}.transpose(-2, -1), as x @ x.T in "
               "section 1, gives [B, {n}, {n}]): each query is scored against every key, "
               "q @ k.transpose(-2, -1), [B, T, S].")


def expect_keys_scored(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    """Fail when `got` is the softmax of `q` (or `k`) scored against itself, scaled or not."""
    for z, name, n in ((q, "q", "T"), (k, "k", "S")):
        if got.shape == (*z.shape[:-1], z.size(-2)) and any(
                close(got, _weights(z @ z.mT, d)) for d in (z.size(-1), 1)):
            fail(SELF_SCORED.format(z=name, n=n))


def _weights(scores: torch.Tensor, d: int) -> torch.Tensor:
    return (scores / d ** 0.5).softmax(dim=-1)


def _gives(fn: Callable, q: torch.Tensor, k: torch.Tensor, *wants: torch.Tensor) -> bool:
    """`fn(q, k)` runs and equals one of `wants` (same shape, close values)."""
    try:
        got = fn(q.clone(), k.clone())
    except Exception:
        return False
    return isinstance(got, torch.Tensor) and any(
        got.shape == w.shape and close(got, w) for w in wants)


def weights_crash(fn: Callable, q: torch.Tensor, k: torch.Tensor,
                  want: torch.Tensor) -> Callable[[Exception], None]:
    """A `diagnose` for `fn(q, k)` (q `[B, T, D]`, k `[B, S, D]`, `want` the right weights)
    that raised a broadcast error: rerun where the slip runs and name the one that fits
    (and `torch.sqrt` of an int, by `name_int_root`)."""
    def diagnose(err: Exception) -> None:
        name_int_root(err)
        said = f" (torch said: {str(err).strip().splitlines()[0]})"
        n = 3  # a cube: B = S = D, so that k.T and k.transpose(0, 1) both run, and differ
        gen = torch.Generator().manual_seed(13)
        tq, tk = (torch.randn(2, n, n, generator=gen) for _ in "qk")  # T = S = D
        if isinstance(err, RuntimeError) and _gives(fn, tq, tk, _weights(tq.mT @ tk, n),
                                                    _weights(tq.mT @ tk, 1)):
            fail(Q_TRANSPOSED + said)
        if isinstance(err, RuntimeError) and _gives(fn, tq, tk, _weights(tq @ tk, n),
                                                    _weights(tq @ tk, 1)):
            fail(K_KEPT + said)
        sq = k[:, :q.size(1)]  # keys as many as queries: q @ q.mT runs then
        if isinstance(err, RuntimeError) and _gives(fn, q, sq, *(_weights(q @ q.mT, d) for d in
                                                                 (q.size(-1), 1))):
            fail(SELF_SCORED.format(z="q", n="T") + said)
        if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
            return
        cq = torch.randn(n, 2, n, generator=torch.Generator().manual_seed(11))
        ck = torch.randn(n, n, n, generator=torch.Generator().manual_seed(12))
        for wrong_k, message in ((ck.transpose(0, 1), SWAPPED_01),
                                 (ck.permute(2, 1, 0), TRANSPOSED)):  # scaled or not
            if _gives(fn, cq, ck, _weights(cq @ wrong_k, n), _weights(cq @ wrong_k, 1)):
                fail(message + said)
        p = q * sq  # q * k runs with as many keys as queries
        if _gives(fn, q, sq, *(_weights(x, q.size(-1)) for x in
                              (p.sum(-1, keepdim=True), p.sum(-1), p))):
            fail(ELEMENTWISE + said)
        rerun_broadcast(err, lambda: close(fn(q[0], k[0]), want[0]), WRONG_AXES)
    return diagnose


def no_mask_causal(q: torch.Tensor, k: torch.Tensor, unmasked: str,
                   masked: bool = False) -> list[tuple[torch.Tensor, str]]:
    """Weights made causal where no mask is asked for (`unmasked` says so): the later keys'
    scores zeroed (`.tril()` of the scores), the weights cut after the softmax (`.tril()`,
    renormalised or not; `masked`: the renormalised one, a causal mask done right, too)."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    cut = scores.softmax(-1).tril()
    fix = f"{unmasked}: every query weighs every key, (scores / math.sqrt(d)).softmax(dim=-1)."
    return [(scores.tril().softmax(-1), "your weights are causal, made with zeros: .tril() "
             "sets the scores of the later keys to 0, which still get weight exp(0); " + fix),
            (cut, "your weights are cut to a causal triangle (.tril()) after the softmax, so "
                  "the rows no longer sum to 1; " + fix),
            *[(cut / cut.sum(-1, keepdim=True), "your weights are causal (each query "
               "weighs only the keys up to its own position); " + fix)] * masked]


def score_slips(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None
                ) -> list[tuple[torch.Tensor, str]]:
    """Weights of scores other than the dot product (the masked keys' weights 0; `mask`: True
    = may attend), scaled by 1/sqrt(d) or not: cosine similarity (q and k normalized), minus
    the distance between query and key or its square (`-torch.cdist(q, k) ** 2`)."""
    d, far = q.size(-1), torch.cdist(q, k)
    fill = (lambda z: z) if mask is None else (lambda z: z.masked_fill(~mask, float("-inf")))
    cos = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    fix = "scale the dot products by 1/sqrt(d): q @ k.transpose(-2, -1) / math.sqrt(d)."
    cosine = "you normalized q and k (cosine similarity): the exercise asks to " + fix
    apart = ("your scores are minus the distances between query and key (torch.cdist; "
             "-|q - k|^2 = 2 q.k - |q|^2 - |k|^2: a long key loses weight), not dot products: "
             + fix)
    return [(fill(z / r).softmax(-1), said) for z, said in (
        (cos, cosine), (-far, apart), (-far ** 2, apart)) for r in (1, d ** 0.5)]


def normalisation_slips(q: torch.Tensor, k: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """A hand-written softmax normalised over the whole tensor, or over each batch
    entry's `[T, S]` block, instead of over each row (the keys); the scores' ReLU over its
    row's sum (no exp); and scores taken against the keys of every batch entry summed
    (einsum 'btd,csd->bts', a new batch letter)."""
    e = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).exp()
    r = (q @ k.transpose(-2, -1)).relu()  # its ReLU over the row's sum: no scale counts
    rows = ("each row must sum to 1, so sum over the keys only: e / e.sum(dim=-1, "
            "keepdim=True) (or scores.softmax(dim=-1)).")
    return [
        (e / e.sum(), "your weights are normalised over every entry (the whole tensor, "
                      "e.sum() with no dim) instead of each row (one query): " + rows),
        (e / e.sum((-2, -1), keepdim=True),
         "your weights are normalised over each batch entry's whole [T, S] block "
         "instead of each row (one query): " + rows),
        (_weights(q @ k.sum(0, keepdim=True).transpose(-2, -1), q.size(-1)), SUMMED),
        (r / r.sum(-1, keepdim=True),
         "your weights are the scores' ReLU over its row's sum (scores.relu() / sum): a "
         "negative score gets weight 0 and the scale cancels out. The weights are a softmax, "
         "the exp of each score over its row's sum: (scores / math.sqrt(d)).softmax(dim=-1)."),
    ]


def not_softmax(s: torch.Tensor, mask: torch.Tensor | None = None
                ) -> list[tuple[torch.Tensor, str]]:
    """Weights of the scaled scores `s` made without the softmax's exp (the masked keys'
    weights 0; `mask`: True = may attend): `sigmoid(s)`, over its row's sum or not, the
    softmax of `s.abs()`, the squared scores or their ReLU over their row's sum."""
    keep = (lambda w: w) if mask is None else (lambda w: w.masked_fill(~mask, 0.0))
    sig, sq, rl = keep(s.sigmoid()), keep(s ** 2), keep(s.relu())
    ab = s.abs() if mask is None else s.abs().masked_fill(~mask, float("-inf"))
    fix = ("the weights are a softmax, the exp of each score over its row's sum: "
           "(scores / math.sqrt(d)).softmax(dim=-1).")
    return [(sig, "your weights are sigmoid(scores): each lies in (0, 1) on its own, so a "
                  "row does not sum to 1; " + fix),
            (sig / sig.sum(-1, keepdim=True), "your weights are sigmoid(scores) over its "
             "row's sum: sigmoid flattens large scores (sigmoid(5) and sigmoid(10) are both "
             "about 1), the exp keeps them apart; " + fix),
            (ab.softmax(-1), "your weights are the softmax of |scores| (.abs()): a "
             "key pointing away from the query (a negative score) weighs as much as one "
             "pointing its way; keep the sign: " + fix),
            (sq / sq.sum(-1, keepdim=True), "your weights are the squared scores over their "
             "row's sum: squaring loses the sign, so a key pointing away weighs as much as "
             "one pointing the query's way; " + fix),
            ((rl / rl.sum(-1, keepdim=True)).nan_to_num(0.0), "your weights are the scores' "
             "ReLU over its row's sum: a negative score gets weight 0 and the scale cancels "
             "out; " + fix)]


def head_weight_slips(s: torch.Tensor, mask: torch.Tensor, d: int
                      ) -> list[tuple[torch.Tensor, str]]:
    """Multi-head attention's weights of the heads' scaled scores `s` (width `d`, masked
    with `mask`) with the slips exercises 1 and 2 name: `not_softmax`, the scale applied
    after the softmax, a base-2 exp, a softmax of minus the scores or taken twice."""
    def soft(z: torch.Tensor) -> torch.Tensor:
        return z.masked_fill(~mask, float("-inf")).softmax(-1)
    fix = "softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head)) over the keys."
    return [*not_softmax(s, mask),
            (soft(s * d ** 0.5) / d ** 0.5, "you divided by sqrt(d_head) after the softmax "
             "(the weights, v or the heads' output): the scale belongs inside it, " + fix),
            (soft(s * math.log(2)), "your softmax uses a base-2 exponential (torch.exp2, "
             "2 ** s = e ** (s ln 2)): the scores end up scaled by ln 2; use " + fix),
            (soft(-s), "your weights are the softmax of minus the scores: the largest dot "
                       "product must get the largest weight, " + fix),
            (soft(soft(s)), "you took a softmax twice (of weights that already sum to 1): "
                            "take one, " + fix)]


SUMMED = ("each query scored the keys of every batch entry summed together (einsum with "
          "a different letter for k's batch axis sums over it): keep the batch axis "
          "paired, einsum('...td,...sd->...ts', q, k) or q @ k.transpose(-2, -1).")


def expect_batches_apart(fn: Callable, q: torch.Tensor, k: torch.Tensor,
                         got: torch.Tensor) -> None:
    """Rerun `fn` with batch entry 1 of q and k changed (`got` = `fn(q, k)`, B >= 2):
    fail when the weights of batch entry 0 change, i.e. batch entries were mixed."""
    try:
        again = fn(*(torch.cat([t[:1], t[1:].flip(1) * 2]) for t in (q, k)))
    except Exception:
        return
    if isinstance(again, torch.Tensor) and again.shape == got.shape and not close(
            again[:1].detach(), got[:1].detach()):
        fail("the weights of batch entry 0 change when only q[1] and k[1] change: your "
             "batches are mixed; each query must be scored against its own batch "
             "entry's keys only: keep the batch axis paired, einsum('...td,...sd->...ts', q, k) "
             "or q @ k.transpose(-2, -1).")


def output_slips(q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """Wrong `attention(q, k, v)` results, as `(result, message)` pairs: the 1/sqrt(d)
    applied to the output instead of the scores (or as well), and the weighted values averaged over
    the keys (the reference divided by S) instead of summed, the values reversed."""
    d, s = q.size(-1), k.size(-2)
    w = (q @ k.transpose(-2, -1) / d ** 0.5).softmax(-1)
    return [((q @ k.transpose(-2, -1)).softmax(-1) @ v / d ** 0.5,
             "you divided the output by sqrt(d); the scale belongs inside the softmax: "
             "softmax(q @ k.transpose(-2, -1) / math.sqrt(d)) @ v."),
            (w @ v / d ** 0.5, "you divided by sqrt(d) twice: the scores, and the output "
                               "(or the weights) after the softmax; divide the scores once."),
            ((w.unsqueeze(-1) * v.unsqueeze(-3)).mean(-2),
             f"your output is the reference divided by S = {s}, the number of keys: the "
             "weighted values are summed over the keys (w @ v), not averaged (.mean)."),
            *[(w @ v.flip(-2), "your weights meet the values reversed along the keys "
               "(v.flip(-2), w.flip(-1), or an index counted from the end): weight j meets "
               "value S-1-j; weight each value by its own key's weight, w @ v.")] * (s > 1)]


def expect_rows_sum_to_one(got: torch.Tensor, want: torch.Tensor) -> None:
    """`got`, weights `[B, T, S]`: fail unless each row sums to 1 over the keys; rows off
    by a half-precision rounding (a `.half()` round trip) are left to `expect_close`,
    which names that."""
    sums = got.sum(-1)
    if torch.allclose(sums, torch.ones_like(sums), atol=1e-4) or half_precision(
            got.detach(), want, torch.ones_like(want, dtype=torch.bool)):
        return
    kept = got.detach() != 0
    ratio = got.detach()[kept] / want[kept]
    if (~kept & (want > 1e-6)).any() and kept.any() and torch.allclose(
            ratio, ratio[0].expand_as(ratio), rtol=1e-4) and ratio[0] > 1:
        p = 1 - 1 / float(ratio[0])
        fail(f"some weights are exactly 0 and the others scaled by {float(ratio[0]):.4g}: "
             f"dropout (p = {p:.2g}) applied to the weights, and F.dropout defaults to "
             "training=True. The exercise asks for the softmax itself: leave dropout out "
             "(or pass training=False).")
    off = (sums - 1).abs() > 1e-4
    fail(f"each row (one query) must sum to 1 over the keys; yours do not (the row "
         f"at {first_position(off, 'b i')} sums to {sums[off][0].item():.4g}): apply "
         "softmax(dim=-1) last.")
