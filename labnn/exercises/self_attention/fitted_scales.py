r"""The scale of notebook 01's attention scores fitted from the learner's answer, for the
slips a list of known constants misses: a divisor that changes from query to query
(`q.norm(dim=-1)`, the spread of each row's scores) or from key to key (`k.norm(dim=-1)`)
in Exercises 1, 2 and 5, and, in
Exercise 5, any constant other than $\sqrt{D_h}$ (`sqrt(D_h) / H`, `sqrt(D_h) * H`,
`D_h / H`, ...), fitted from the heads' weights recovered from the output.

Each row of weights $w = \mathrm{softmax}(s / c)$ gives $\log w = s / c + \text{const}$:
$1 / c$ is the slope of a least-squares fit of the log-weights on the raw scores $s$, row
by row, over the keys the row may attend (rows of three keys or more: two points fit any
slope).

Dimension letters: `B` batch, `H` heads, `T` queries, `S` keys, `D` width, `D_h` head width.
"""

from __future__ import annotations

import math

import torch

from labnn.exercises.grading import fail

RIGHT = "one number for every query: scores / math.sqrt(q.size(-1))"


def row_scales(w: torch.Tensor, s: torch.Tensor,
               allowed: torch.Tensor | None = None, tol: float = 1e-4) -> torch.Tensor | None:
    """The divisor `c [..., T]` of each row such that `w = softmax(s / c)` over the keys
    `allowed` (bool, broadcastable to `w`; None: every key), NaN for rows of fewer than
    three allowed keys; None when some row is no such softmax (within `tol` of the
    largest log-weight, relative) or no row has three allowed keys."""
    w, s = w.detach().double(), s.detach().double()
    allowed = (torch.ones_like(w, dtype=torch.bool) if allowed is None
               else allowed.to(w.device).expand_as(w))
    fit = allowed.sum(-1) >= 3
    if not fit.any() or not torch.isfinite(w).all() or (w[~allowed] != 0).any():
        return None
    if (w[allowed & fit[..., None]] <= 0).any():
        return None
    n = allowed.sum(-1, keepdim=True).clamp(min=1)
    log_w = torch.where(allowed, w.clamp(min=1e-300).log(), 0.0)
    x = torch.where(allowed, s - torch.where(allowed, s, 0.0).sum(-1, keepdim=True) / n, 0.0)
    y = torch.where(allowed, log_w - log_w.sum(-1, keepdim=True) / n, 0.0)
    slope = (x * y).sum(-1) / (x * x).sum(-1).clamp(min=1e-300)
    off = (y - slope[..., None] * x).abs().amax(-1)
    if not ((slope[fit] > 0).all() and (off[fit] <= tol * (1 + y.abs().amax(-1)[fit])).all()):
        return None
    return torch.where(fit, 1 / slope, math.nan)


def expect_row_scale(w: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     allowed: torch.Tensor | None = None, tol: float = 1e-4,
                     head: str = "", width: str = "d") -> None:
    """Fail when the weights `w` are a softmax of the raw scores `q @ k.mT` divided by a
    number that changes from query to query, naming it when it is the query's length
    `q.norm(dim=-1)` (queries normalised), its root, or the spread of the row's scores;
    return otherwise (one constant for every row is left to the callers)."""
    c = row_scales(w, q @ k.transpose(-2, -1), allowed, tol)
    if c is None:
        _expect_no_key_norm(w, q, k, allowed, head, width)
        return
    rows = ~c.isnan()
    lo, hi = float(c[rows].min()), float(c[rows].max())
    if hi - lo <= 1e-2 * hi:
        return
    s = (q @ k.transpose(-2, -1)).double().masked_fill(
        ~(torch.ones_like(w, dtype=torch.bool) if allowed is None else allowed), math.nan)
    norm = q.detach().double().norm(dim=-1)
    named = {
        "q.norm(dim=-1), each query's length (q / q.norm(...): normalised queries)": norm,
        "q.norm(dim=-1).sqrt(), the root of each query's length": norm.sqrt(),
        "the spread (std) of each query's own scores (a layer norm of the scores?)":
            _nan_std(s, 1),
        "the spread (std, unbiased=False) of each query's own scores (a layer norm of the "
        "scores?)": _nan_std(s, 0),
    }
    said = next((said for said, value in named.items()
                 if torch.allclose(c[rows], value[rows], rtol=1e-3, atol=1e-6)),
                "a number that changes from query to query (a norm or statistic of each row?)")
    fail(f"{head}your scores are divided by {said}, {lo:.3g} to {hi:.3g} here, not by "
         f"sqrt({width}) = sqrt({q.size(-1)}), {RIGHT}.")


def _expect_no_key_norm(w: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                        allowed: torch.Tensor | None, head: str, width: str) -> None:
    """Fail when `w` is the softmax of the scores divided by each key's length,
    `k.norm(dim=-1)` (keys normalised): a divisor per key, which no row fit shows."""
    s = (q @ k.transpose(-2, -1)).double() / k.detach().double().norm(dim=-1)[..., None, :]
    if allowed is not None:
        s = s.masked_fill(~allowed, -math.inf)
    by_keys = s.softmax(-1).nan_to_num(0.0)
    if w.shape == by_keys.shape and torch.allclose(w.double(), by_keys, rtol=1e-3, atol=1e-5):
        fail(f"{head}your scores are divided by k.norm(dim=-1), each key's length (keys "
             f"normalised), not by sqrt({width}) = sqrt({q.size(-1)}), {RIGHT}.")


def _nan_std(s: torch.Tensor, correction: int) -> torch.Tensor:
    """The std of each row of `s` over its entries that are not NaN."""
    kept = ~s.isnan()
    n = kept.sum(-1)
    mean = torch.where(kept, s, 0.0).sum(-1, keepdim=True) / n[..., None].clamp(min=1)
    var = torch.where(kept, (s - mean) ** 2, 0.0).sum(-1) / (n - correction).clamp(min=1)
    return var.sqrt()


def undo_out_proj(got: torch.Tensor, mha) -> torch.Tensor | None:
    """01 Ex5: the merged heads `[B, T, D]` (float64) whose `mha.out_proj` is `got`, the
    answer's output; None when `got` is not `[B, T, D]` and finite, or the weight singular."""
    if got.dim() != 3 or got.size(-1) != mha.out_proj.out_features or not torch.isfinite(
            got).all():
        return None
    with torch.no_grad():
        out = got.detach().double()
        if mha.out_proj.bias is not None:
            out = out - mha.out_proj.bias.double()
        try:  # a random square weight is invertible, but in case
            return torch.linalg.solve(mha.out_proj.weight.double(), out.mT).mT
        except RuntimeError:
            return None


def expect_mha_scale(got: torch.Tensor, x: torch.Tensor, mha, mask: torch.Tensor | None
                     ) -> None:
    """01 Ex5: recover each head's weights from `got` = the answer's output `[B, T, D]`
    (undo `mha.out_proj`, split the heads, times the pseudo-inverse of each head's values
    `[T, D_h]`, exact when T <= D_h) and fail when they are a softmax of the raw scores
    divided by a constant other than sqrt(D_h), or by a number per query
    (`expect_row_scale`); return when they are not such a softmax."""
    b, t, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    merged = None if got.shape != x.shape or t > dh else undo_out_proj(got, mha)
    if merged is None:
        return
    with torch.no_grad():
        q, k, v = (z.double().view(b, t, h, dh).transpose(1, 2)
                   for z in mha.qkv(x.detach()).chunk(3, dim=-1))
        w = merged.view(b, t, h, dh).transpose(1, 2) @ torch.linalg.pinv(v)
    if mask is not None:  # the masked weights, 0 up to the float32 of the output
        if (w.abs() > 1e-5).masked_fill(mask, False).any():
            return
        w = w.masked_fill(~mask, 0.0)
    c = row_scales(w, q @ k.mT, mask, tol=1e-3)
    if c is None:
        _expect_no_key_norm(w, q, k, mask, "in each head ", "D_h")
        return
    expect_row_scale(w, q, k, mask, tol=1e-3, head="in each head ", width="D_h")
    scale = float(c[~c.isnan()].mean())
    if abs(scale - math.sqrt(dh)) <= 1e-3 * math.sqrt(dh):
        return
    forms = {"sqrt(D_h) / n_heads": dh ** 0.5 / h, "sqrt(D_h) * n_heads": dh ** 0.5 * h,
             "D_h / n_heads": dh / h, "sqrt(d_model) * n_heads": d ** 0.5 * h,
             "D_h * n_heads": dh * h, "D_h": dh, "n_heads": h, "sqrt(d_model)": d ** 0.5}
    said = next((f" = {name}" for name, value in forms.items()
                 if abs(scale - value) <= 1e-3 * value), "")
    fail(f"your scores are divided by {scale:.4g}{said}, not by sqrt(D_h) = "
         f"sqrt(mha.d_head) = sqrt({dh}) = {dh ** 0.5:.4g}: each head divides its scores by "
         "the root of its own width, math.sqrt(q.size(-1)) with q the heads [B, H, T, D_h], "
         "nothing else.")
