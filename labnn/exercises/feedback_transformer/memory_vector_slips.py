"""Slips of notebook 03's exercises, named for `memory_vector`: those that
need the learner's function run again (a broadcast error that an axis short of the layer
weights, or a transposed bias, causes; a layer count hard-coded; a `.squeeze()` that drops
B = 1 or H = 1), a softmax or an exp one step too far (over the features after the layer
mix; of w * xs instead of w; on the bias before it is added), a 1-D index to `gather`, a
bias without the query axis of the scores, and q·k divided by sqrt(H).

Dimension letters: `L+1` layers (the embedding first), `B` batch, `H` heads, `S` keys,
`D` width, `D_h` head width.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.feedback.layer import feedback_attention
from labnn.exercises.grading import call, close, expect_like, expect_tensor
from labnn.exercises.grading.outcomes import fail, first_line
from labnn.exercises.feedback_transformer.feedback_attention_slips import layers_written
from labnn.exercises.feedback_transformer.scale_functions import swapped_letters
from labnn.exercises.feedback_transformer.weight_transforms import negative_step
from labnn.exercises.grading.slips import gives, rerun_broadcast


def mix_broadcast(fn: Callable, xs: torch.Tensor, w: torch.Tensor) -> Callable:
    """A `diagnose` for `memory_vector(xs, w)`: the weights `softmax(w)` `[L+1]` given
    one axis too few (`w.softmax(0)[:, None]`, `[L+1, 1]`, lines up with `[B, D]`), or
    multiplied with `w.softmax(0) @ xs` (a batch of `[B, D]` matrices); each is rerun on
    `xs` `[L+1, L+1, D]`, where both run."""
    n, d = xs.size(0), xs.size(-1)
    square = torch.randn(n, n, d, generator=torch.Generator().manual_seed(5))
    p = w.detach().softmax(0)
    short = ("w.softmax(0)[:, None] is [L+1, 1] and lines up with the LAST two axes of "
             "xs [L+1, B, D]")

    last = torch.randn(n, 2, n, generator=torch.Generator().manual_seed(6))

    def diagnose(err: Exception) -> None:
        rerun_broadcast(err, lambda: gives(fn, last, w.detach(), (p * last).sum(0)),
                        "w.softmax(0) [L+1] lines up with the LAST axis of xs [L+1, B, D]: "
                        "use w.softmax(0)[:, None, None].")
        rerun_broadcast(err, lambda: gives(fn, square, w.detach(),
                                           (p[:, None] * square).sum(0)),
                        f"{short}: add one more axis, w.softmax(0)[:, None, None], "
                        "[L+1, 1, 1].")
        if isinstance(err, RuntimeError) and gives(fn, square, w.detach(), p @ square):
            fail("the weights [L+1] meet the B axis of xs [L+1, B, D], not the layers "
                 "(w.softmax(0) @ xs, or weights on axis 1 summed over it): broadcast them "
                 "over the layers, (w.softmax(0)[:, None, None] * xs).sum(0). "
                 f"(torch said: {first_line(err)})")
        layers_written(err, fn, xs, w)  # softmax(w, 0).view(3, 1, 1): a count written out
        negative_step(err, "softmax(w)[l] weights xs[l], the embedding first.")

    return diagnose


def scores_broadcast(err: Exception, fn: Callable, q, k, v, bias: torch.Tensor,
                     what: str) -> None:
    """Name a broadcast error that `bias.T` (`[S, H]`) causes, rerun with `S = H`, or that
    `q @ k.transpose(-2, -1)` with q `[B, H, D_h]` (no query axis), or the weights
    `[B, H, S] @ v`, causes, rerun with `B = H`: where it runs, compare with the slip."""
    b, h = q.size(0), bias.size(0)
    qb, kb, vb = (t.detach().repeat(h, *[1] * (t.dim() - 1))[:h] for t in (q, k, v))
    scores = qb @ kb.transpose(-2, -1) / qb.size(-1) ** 0.5 + bias.detach()
    rerun_broadcast(err, lambda: gives(fn, qb, kb, vb, bias.detach(),
                                       scores.softmax(-1) @ vb) and b != h,
                    f"{what}: q has no query axis: q [B, H, D_h] @ k.transpose(-2, -1) "
                    "pairs q's batch axis with k's heads; use q.unsqueeze(-2) "
                    "([B, H, 1, D_h]) or einsum('bhd,bhsd->bhs', q, k).")
    query_axis(err, fn, q, k, v, bias, what)
    swapped_letters(err, fn, q, k, v, bias, what)  # 'bhd,hbsd->bhs': runs where B = H
    weights = (torch.einsum("bhd,bhsd->bhs", qb, kb) / qb.size(-1) ** 0.5
               + bias.detach()).softmax(-1)
    rerun_broadcast(err, lambda: gives(fn, qb, kb, vb, bias.detach(), weights @ vb) and b != h,
                    f"{what}: the weights [B, H, S] @ v [B, H, S, D_h] need a query axis: "
                    "weights.unsqueeze(-2) @ v ([B, H, 1, S] @ [B, H, S, D_h], then "
                    ".squeeze(-2)), or einsum('bhs,bhsd->bhd', weights, v).")
    q, kh, vh, bh = q.detach(), k[:, :, :h].detach(), v[:, :, :h].detach(), bias[:, :h]
    bh = bh.detach()
    rerun_broadcast(err, lambda: gives(fn, q, kh, vh, bh, feedback_attention(q, kh, vh, bh.T)),
                    f"{what}: the bias is transposed (bias.T is [S, H]): the bias [H, S] "
                    "lines up with the scores [B, H, S] as it is; add bias, not bias.T.")


def query_axis(err: Exception, fn: Callable, q, k, v, bias: torch.Tensor, what: str) -> None:
    """Name `q @ k.transpose(-1, -2)` with q `[B, H, D_h]` (no query axis): rerun with q
    given one, `q[:, :, None]`, and the bias too (`bias[:, None]`), where it is right."""
    if q.dim() != 3 or not isinstance(err, RuntimeError):
        return
    q, k, v, bias = (t.detach() for t in (q, k, v, bias))
    want = feedback_attention(q, k, v, bias)

    def right(b: torch.Tensor) -> bool:
        try:
            got = fn(q[:, :, None], k, v, b)
        except Exception:
            return False
        return (isinstance(got, torch.Tensor) and got.numel() == want.numel()
                and close(got.detach().reshape(want.shape), want))

    fix = next((f for b, f in ((bias, ""), (bias[:, None], ", bias[:, None] [H, 1, S] to "
               "match")) if right(b)), None)
    if fix is not None:
        rerun_broadcast(err, lambda: True, f"{what}: q [B, H, D_h] has no query axis: "
                        "q @ k.transpose(-1, -2) broadcasts q's H against k's batch; give q "
                        f"one, q[:, :, None] -> scores [B, H, 1, S]{fix}; or use "
                        "einsum('bhd,bhsd->bhs', q, k).")


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


def softmax_of_product(xs: torch.Tensor,
                       w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` with the softmax taken of `w * xs` over the layers (not of
    `w` alone), then summed or used to weight `xs`: `(result, message)` pairs."""
    p = (w[:, None, None] * xs).softmax(0)
    return [
        (p.sum(0), "you took the softmax of w * xs over the layers and summed it, which is "
         "1 everywhere: the softmax turns w alone into weights, (w.softmax(0)[:, None, "
         "None] * xs).sum(0)."),
        ((p * xs).sum(0), "you took the softmax of w * xs over the layers, one weight per "
         "entry: the softmax goes on w alone, softmax(w) over the L+1 layers, then weight "
         "xs: (w.softmax(0)[:, None, None] * xs).sum(0)."),
    ]


def bias_transformed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`feedback_attention(q, k, v, bias)` with the bias exponentiated before it is added
    to the scores (e.g. `scaled_dot_product_attention(..., attn_mask=bias.exp())`, as if
    a float mask multiplied the weights), or summed over the heads: `(result, message)`
    pairs."""
    return [
        (feedback_attention(q, k, v, bias.exp()),
         "you added bias.exp() to the scores: add the bias as it is, q·k / sqrt(d_head) "
         "+ bias (a float attn_mask is added to the scores too, not multiplied into the "
         "weights)."),
        (feedback_attention(q, k, v, bias.sum(0, keepdim=True)),
         "the bias is summed over the heads (bias.sum(0)): head h adds its own row, "
         "bias[h], to its scores: add bias [H, S] as it is."),
    ]


def layers_left_out(fn: Callable, xs: torch.Tensor, w: torch.Tensor, got: torch.Tensor,
                    what: str) -> None:
    """Name a `memory_vector(xs, w)` that mixes only the first `k` of the `L+1` layers
    (weighted by `softmax(w)` of all or of those `k`); rerun with two more layers, it
    tells a hard-coded count (`range(3)`) from one computed from `xs`."""
    def first(xs, w, k):
        weights = (w.softmax(0), w[:k].softmax(0))
        return [(p[:k, None, None] * xs[:k]).sum(0) for p in weights]

    xs, w, n = xs.detach(), w.detach(), xs.size(0)
    ks = [k for k in range(1, n) if any(close(got, f) for f in first(xs, w, k))]
    if not ks:
        return
    k, seeds = ks[0], (torch.Generator().manual_seed(i) for i in (7, 8))
    more, wm = (torch.randn(*shape, generator=g)
                for shape, g in zip(((n + 2, *xs.shape[1:]), (n + 2,)), seeds))
    if any(gives(fn, more, wm, f) for f in first(more, wm, k)):
        fail(f"{what} mixes only the first {k} of the L + 1 = {n} layers, and again {k} of "
             f"{n + 2} when given {n + 2}: the layer count is hard-coded, {k} instead of "
             "L + 1 = len(xs): sum over all of them, (w.softmax(0)[:, None, None] * xs).sum(0).")
    fail(f"{what} mixes only the first {k} of the L + 1 = {n} layers: the mix runs over all "
         "of them, embedding first to top layer, (w.softmax(0)[:, None, None] * xs).sum(0).")


def gather_rank(err: Exception, what: str) -> None:
    """Name `table.gather(1, d)` with a 1-D index on the 2-D table `[H, max_distance]`."""
    if "Index tensor must have the same number of dimensions" in str(err):
        fail(f"{what}: gather needs an index of the table's rank, one row per head: expand "
             "your 1-D index to [H, s], idx.expand(table.size(0), -1), or index the "
             "columns, table[:, idx]. "
             f"(torch said: {first_line(err)})")


def clamped_to_heads(fn: Callable, got: torch.Tensor, table: torch.Tensor, s: int,
                     what: str) -> None:
    """Name `relative_bias(table, s)` whose distances are clamped at `H`, the table's rows,
    not at `max_distance`, its columns; rerun on a table with one head fewer, it tells
    `.clamp(max=table.size(0))` from a number written out."""
    h, width = table.shape
    d = torch.arange(s, 0, -1)
    wrong = table[:, d.clamp(max=h) - 1]
    if close(wrong, table[:, d.clamp(max=width) - 1]) or not close(got, wrong):
        return
    fewer = torch.randn(h - 1, width, generator=torch.Generator().manual_seed(9))
    rows = gives(fn, fewer, s, fewer[:, d.clamp(max=h - 1) - 1])
    fail(f"{what}: you clamped the distances at "
         + (f"table.size(0) = H = {h}, the number of heads" if rows else f"{h}")
         + f": the table has one column per distance, max_distance = table.size(1) = "
         f"{width}: .clamp(max=table.size(1)).")


def bias_without_query_axis(err: Exception, q: torch.Tensor, k: torch.Tensor,
                            what: str) -> None:
    """Name the bias `[H, S]` added to scores with a query axis, `[B, H, 1, S]` (e.g.
    `scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=bias)`): it lines up
    with their last two axes, so it broadcasts to `[B, H, H, S]`."""
    b, h, s = q.size(0), q.size(1), k.size(2)
    if (f"output with shape [{b}, {h}, 1, {s}] doesn't match the broadcast shape "
            f"[{b}, {h}, {h}, {s}]") in str(err):
        fail(f"{what}: the bias [H, S] lines up with the last two axes of the scores "
             "[B, H, 1, S] (with q's query axis) and broadcasts to [B, H, H, S]: give it "
             "that axis too, bias[:, None] = [H, 1, S] (e.g. attn_mask=bias[:, None]). "
             f"(torch said: {first_line(err)})")


def scale_slips(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`feedback_attention(q, k, v, bias)` with q·k divided by `sqrt(H)`, `q.size(1)`, or
    multiplied by `sqrt(d_head)` instead of divided."""
    h, d = q.size(1), q.size(-1)
    return [(feedback_attention(q * (d / h) ** 0.5, k, v, bias),
             f"you divided q·k by sqrt(H) = sqrt({h}), q.size(1), the number of heads: "
             f"divide by sqrt(d_head) = sqrt(q.size(-1)), the width of one head ({d})."),
            (feedback_attention(q * d, k, v, bias),
             f"you multiplied q·k by sqrt(d_head) = sqrt({d}): divide by it instead, "
             "q·k / sqrt(d_head) + bias.")]


def embedding_left_out(xs: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` without the embedding `xs[0]`: the softmax taken over the
    layers' weights `w[1:]` alone, or over all of `w` and then cut, `softmax(w)[1:]`."""
    fix = ("the embedding xs[0] is left out of the mix: it runs over all L+1 entries of xs, "
           "the embedding first, (w.softmax(0)[:, None, None] * xs).sum(0)")
    return [(torch.einsum("l,lbd->bd", w[1:].softmax(0), xs[1:]), fix + "."),
            (torch.einsum("l,lbd->bd", w.softmax(0)[1:], xs[1:]),
             fix + " (weights softmax(w)[1:] sum to less than one).")]


def bias_shape(got: torch.Tensor, h: int, s: int, width: int, what: str) -> None:
    """Name a `relative_bias(table, s)` of the wrong shape with its axes labelled
    (`[2, 3] = [S, H]`), and the slips that give the usual wrong shapes: `[S, H]`, the
    table's rows (heads) indexed with the distances, or the whole table."""
    shape = tuple(got.shape)
    if shape == (h, s) or len({h, s, width}) < 3:
        return
    sizes = {h: "H", s: "S", width: "max_distance"}
    named = (" = [" + ", ".join(sizes[n] for n in shape) + "]"
             if all(n in sizes for n in shape) else "")
    why = {(s, h): "heads come first (index the table's columns, table[:, ...])",
           (s, width): "table[d - 1] indexes the table's rows, which are the heads "
                       "(table is [H, max_distance]): the distances index its columns, "
                       "table[:, d - 1]",
           (width, s): "you indexed the heads axis (rows): the distances index the "
                       "columns, table[:, d - 1]",
           (h, width): "one column per table entry, not per key: pick a column per key, "
                       "table[:, d.clamp(max=max_distance) - 1]"}.get(shape)
    fail(f"{what} has shape {list(shape)}{named}"
         + (f": {why}; expected [H, S] = [{h}, {s}]." if why else
            f", expected [H, S] = [{h}, {s}]: one bias per head and key, "
            "table[:, d.clamp(max=max_distance) - 1]."))


def weights_misapplied(xs: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` with `w` exponentiated before its softmax, or with the plain
    sum of the layers scaled by the weights' total or weighted by a softmax over an axis of
    size 1: `(result, message)` pairs."""
    p = w.exp().softmax(0)
    return [
        (torch.einsum("l,lbd->bd", p, xs),
         "you exponentiated w before the softmax (w.exp().softmax(0)): softmax(w) already "
         "exponentiates, so the weights are w.softmax(0), with no .exp()."),
        (xs.sum(0) * w.softmax(0).sum(), "that is the plain sum of the layers, each weight "
         "1: the weights were never applied per layer (times their sum, 1, changes nothing), "
         "or the softmax ran over an axis of size 1 (w[:, None].softmax(1) is all ones): "
         "softmax over the layers, (w.softmax(0)[:, None, None] * xs).sum(0)."),
    ]


def one_head_for_all(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """`relative_bias(table, s)` that gives every head the row of one head `h` of the table
    `[H, max_distance]` (e.g. `table[0, d - 1].expand(H, s)`): `(result, message)` pairs."""
    h, width = table.shape
    cols = torch.arange(s, 0, -1).clamp(max=width) - 1
    return [(table[i, cols].expand(h, s), f"{what}: every head got head {i}'s biases, "
             f"table[{i}, d - 1]: each head has its own row; index the table per head, "
             "table[:, d - 1].") for i in range(h)]


def expect_no_keys(fn: Callable, table: torch.Tensor) -> None:
    """`relative_bias(table, 0)`, the first step's empty memory: an empty `[H, 0]` bias of the
    table's dtype (float32, then float64), which indexing with `torch.arange(s, 0, -1)` gives
    and a `torch.stack` of no columns does not."""
    what, h = "relative_bias(table, 0)", table.size(0)
    empty = f"with no keys (the first step's empty memory) the bias is an empty [H, S] = [{h}, 0]"

    def crashed(err: Exception) -> None:
        if "ambiguous" in str(err):  # a -1 next to a size 0: any count fits 0 entries
            fail(f"{what}: reshape(-1, s) (or view) raised {type(err).__name__}: with s = 0 "
                 "the -1 is ambiguous (any count fits 0 entries): name both sizes, "
                 "reshape(table.size(0), s), or drop it: table[:, d - 1] is [H, S].")
        built = ("a torch.stack/cat of per-key columns has nothing to join; "
                 if "non-empty" in str(err) else "")
        fail(f"{what} raised {type(err).__name__} ({err}): {empty}: {built}index the table "
             "with torch.arange(s, 0, -1), which is empty for s = 0.")

    for t in (table, table.double()):  # float64: a torch.zeros(H, 0) without dtype shows
        got = expect_tensor(call(fn, what, t, 0, diagnose=crashed), what)
        if tuple(got.shape) != (h, 0):
            fail(f"{what} has shape {list(got.shape)}: {empty}.")
        expect_like(got, t[:, :0], f"{what} on a {t.dtype} table")
