"""More named mistakes for notebook 03's `feedback_attention` and `memory_vector`:
labelled shapes (`[B=2, H=3, 1, D_h=4]` rather than `[2, 3, 1, 4]`), the keys or the
bias mixed up, a causal mask carried over from notebook 02. Used by
`labnn.exercises.feedback_transformer.memory_vector`. A scale written as a number (`/ 4.0`,
`/ math.sqrt(8)`) is told from one computed from a size by a rerun at other sizes."""

from __future__ import annotations

import math
from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     fail, first_line)
from labnn.exercises.grading.fresh_values import expect_initialised, uninitialised
from labnn.exercises.grading.sizes import randn
from labnn.exercises.grading.slips import gives
from labnn.exercises.feedback_transformer.scale_functions import batch_letters, named_function
from labnn.feedback.layer import feedback_attention


def labelled(shape, sizes: dict[str, int]) -> str:
    """`[B=2, H=3, 1, D_h=4]`: each size named by the one letter of `sizes` it equals."""
    names = {}
    for letter, n in sizes.items():
        names[n] = None if n in names else letter  # an ambiguous size stays bare
    return "[" + ", ".join(f"{names[n]}={n}" if names.get(n) else str(n)
                           for n in shape) + "]"


def attention_shape(got: torch.Tensor, q: torch.Tensor, sizes: dict[str, int],
                    what: str) -> None:
    """A result not shaped like q `[B, H, D_h]`: name the axes; a leftover query axis of
    size 1 or the shape of v (`[B, H, S, D_h]`) are named as such."""
    shape, want = tuple(got.shape), tuple(q.shape)
    if shape == want:
        return
    b, h, d = want
    mine = labelled(shape, sizes)
    if shape == (b, h, 1, d):
        fail(f"{what} has shape {mine} = [B, H, 1, D_h]: the query axis q[:, :, None] "
             "(one query) is still there: squeeze it, (... @ v).squeeze(2), or use "
             "einsum 'bhs,bhsd->bhd'; the result is [B, H, D_h], shaped like q.")
    if shape == (b, h, h, d) and h != sizes.get("S"):
        fail(f"{what} has shape {mine}: an axis of H = {h} where the query's axis of 1 "
             "was: bias [H, S] added to scores [B, H, 1, S] broadcasts to [B, H, H, S] "
             "(every head's bias on every head's scores): add bias[:, None, :], [H, 1, S].")
    if len(shape) == 4 and shape[:2] == (b, h) and shape[3] == d \
            and shape[2] == sizes.get("S", shape[2]):
        fail(f"{what} has shape {mine} = [B, H, S, D_h], the shape of k and v: the "
             "output is shaped like the query q, [B, H, D_h]"
             + (" (with no memory return q.new_zeros(q.shape) or torch.zeros_like(q), "
                "not shaped like v, e.g. zeros_like(v))." if shape[2] == 0 else "."))
    letters = [part.split("=")[0] for part in mine[1:-1].split(", ") if "=" in part]
    if len(set(letters)) < len(letters):  # B twice: the sizes do not tell the axes
        mine = "[" + ", ".join(map(str, shape)) + "]"
    same = (f": the same {got.numel()} numbers in another shape, a .reshape or .view with a "
            "size written wrong? Read the sizes from q (q.shape)." if got.numel() == q.numel()
            else ".")
    fail(f"{what} has shape {mine}, expected {labelled(want, sizes)} = [B, H, D_h], "
         f"shaped like the query q{same}")


def keys_and_bias_mixed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`(result, message)` pairs: scores against v, a scrambled bias, one key only,
    scores built `[H, B, S]` then `.reshape(B, H, S)` (the check has B != H)."""
    b, h, n, d = k.shape
    regrouped = torch.einsum("bhd,bhsd->hbs", q, k).reshape(b, h, n) / math.sqrt(d) + bias
    causal = torch.ones(1, n).tril() == 0  # row 0 of a causal mask: key 0 alone
    return [
        (feedback_attention(q, v, v, bias),
         "the scores compare q with v: they are q·k with the keys k; the weights then "
         "average the values v."),
        (feedback_attention(q, k, v, bias.T.reshape(bias.shape)),
         "the bias is scrambled: bias rows are heads, [H, S], and bias.T.reshape(bias."
         "shape) (or .view) mixes heads and keys: add bias as it is, head h adds bias[h]."),
        (feedback_attention(q, k, v, bias.masked_fill(causal, float("-inf"))),
         "your output is the value of the oldest key alone, v[:, :, 0]: a causal mask "
         "(e.g. ones(1, S).tril()) keeps only the first key. No mask here: the query "
         "sees every memory key, all of them earlier steps."),
        (torch.einsum("bhs,bhsd->bhd", regrouped.softmax(-1), v),
         "your scores were [H, B, S] and reshape(B, H, S) reorders their entries without "
         "moving axes: permute/transpose to [B, H, S] (reshape only regroups numbers in "
         "memory order), or compute them as [B, H, S] ('bhd,bhsd->bhs')."),
        (v[:, :, -1], "your output is the value of the newest key alone, v[:, :, -1]: "
                      "the query attends to every memory key, not only the last."),
        *batch_letters(q, k, v, bias),
    ]


def transposed_mix(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """`memory_vector` giving `[D, B]`, the transpose of `[B, D]` (e.g. `xs.permute(2, 1,
    0) @ softmax(w)`)."""
    if got.dim() == 2 and got.shape == want.shape[::-1] and got.shape != want.shape \
            and close(got.detach().T, want):
        b, d = want.shape
        fail(f"{what} has shape [D={d}, B={b}], the transpose of [B={b}, D={d}] (e.g. "
             "xs.permute(2, 1, 0) @ softmax(w) puts the features first): keep the batch "
             "first, e.g. torch.einsum('l,lbd->bd', w.softmax(0), xs) or "
             "xs.permute(1, 2, 0) @ w.softmax(0).")


def distances_from_zero(table: torch.Tensor, s: int, what: str) -> list:
    """`relative_bias(table, s)` with distances `s - 1, ..., 0` (the last key at distance
    0 takes entry -1): `(result, message)` pairs."""
    d = torch.arange(s - 1, -1, -1).clamp(max=table.size(1))
    return [(table[:, d - 1],
             f"{what}: off by one: your distances run s - 1, ..., 0, so the last key "
             "takes entry -1, the table's last column; they run s, ..., 1, "
             "torch.arange(s, 0, -1), and distance d uses entry d - 1.")]


def float_index_error(err: IndexError) -> bool:
    """Whether `err` is torch's refusal of a float tensor used as an index."""
    return "must be long" in str(err) or "used as indices" in str(err)


def large_logits(fn, xs: torch.Tensor) -> None:
    """Rerun `memory_vector(xs, w)` with large layer logits (`w` "can be any numbers"):
    `w.exp() / w.exp().sum()` overflows there, inf / inf = NaN; `softmax` subtracts the max."""
    w = torch.tensor([100.0, 90.0, -1000.0, 1000.0][:xs.size(0)], dtype=xs.dtype)
    w = torch.cat([w, w.new_zeros(xs.size(0) - w.numel())])
    want = torch.einsum("l,lbd->bd", w.softmax(0), xs)
    what = f"memory_vector(xs, w) with large logits w = {[round(x) for x in w.tolist()]}"
    got = expect_tensor(call(fn, what, xs, w), what)
    if got.shape == want.shape and not close(got, want) and not torch.isfinite(got).all():
        fail(f"with large logits (w = {[round(x) for x in w.tolist()]}) your weights overflow: "
             "exp(w) is inf (and exp(w - w.mean()) or exp(w - w[0]) too), inf / inf = NaN; "
             "use torch.softmax(w, 0): it subtracts the max first.")
    if got.shape == want.shape and not close(got, want):  # right at ordinary logits
        fail(f"{what} is wrong, though right at ordinary logits: exp(1000) overflows to inf, "
             "and what patches it afterwards (nan_to_num, a clamp, an eps) cannot give the "
             "weights back: use w.softmax(0), which subtracts the max first.")
    expect_close(got, want, what, dims="b d")


def expect_empty_memory(fn, q: torch.Tensor, sizes: dict[str, int]) -> None:
    """`fn(q, k, v, bias)` with no memory (`S = 0`) gives zeros shaped like `q`, of its
    dtype: checked in float64, where a `torch.zeros(q.shape)` shows."""
    b, h, d = q.shape
    empty = q.new_zeros(b, h, 0, d)
    what = f"feedback_attention with no memory (S = 0, {str(q.dtype)[6:]})"
    with uninitialised() as blank:  # torch.empty_like(q): whatever memory held, NaN here
        got = expect_tensor(call(fn, what, q, empty, empty, empty[0, :, :, 0],
                                 diagnose=_empty_reduction), what)
    attention_shape(got, q, sizes, what)
    expect_initialised(blank, got, what, "return zeros, torch.zeros_like(q)")
    if got.dtype != q.dtype:
        fail(f"with no memory (S = 0) your zeros are {got.dtype}, q is {q.dtype}: use "
             "q.new_zeros(q.shape) or torch.zeros_like(q), which keep q's dtype and device.")
    expect_like(got, torch.zeros_like(q), what)
    if torch.isnan(got).any():
        fail("with an empty memory (S = 0) your result contains NaN: there is nothing "
             "to attend to, so return zeros (torch.zeros_like(q)) in that case.")
    if close(got, q):
        fail("with an empty memory (S = 0) there is nothing to attend to: the output "
             "is zeros, not q.")
    expect_close(got, torch.zeros_like(q), "feedback_attention with no memory (S = 0)",
                 dims="b h d")


def _empty_reduction(err: Exception) -> None:
    """Name a max taken over zero keys (`amax`, `max`: nothing to reduce raises)."""
    if isinstance(err, (IndexError, RuntimeError)) and "non-zero size" in str(err):
        fail("with no memory (S = 0) your max over the keys has nothing to reduce and "
             f"raises ({first_line(err)}): return zeros shaped like q when k.size(2) == 0, "
             "before any score, q.new_zeros(q.shape).")


def weight_slips(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 bias: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The weights that are not `softmax(q·k / sqrt(d_head) + bias)` over the keys: the
    raw scores, their log_softmax, a softmax over a size-1 query axis (every weight 1),
    the bias multiplied in, a softmax over the batch, every key masked (zero output)."""
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / q.size(-1) ** 0.5
    mix = lambda weights: torch.einsum("bhs,bhsd->bhd", weights, v)  # noqa: E731
    return [(mix(scores + bias), "the scores weight the values as they are: take their "
                                 "softmax over the keys first, (scores + bias).softmax(-1)."),
            (mix((scores + bias).log_softmax(-1)), "you used log_softmax: the weights are "
                                                   "softmax(scores + bias), which sum to one."),
            (v.sum(2), "every key got weight 1 (a softmax over a size-1 axis, e.g. the query "
                       "axis of [B, H, 1, S]?): take it over the keys, the last axis."),
            (mix((scores + bias).sigmoid()), "you used sigmoid(scores + bias) as the weights: "
                                             "each lies in (0, 1), but they do not sum to one "
                                             "over the keys; take their softmax, "
                                             "(scores + bias).softmax(-1)."),
            (mix((scores * bias).softmax(-1)), "the bias multiplies the scores: add it, "
                                               "q·k / sqrt(d_head) + bias."),
            (mix((scores + bias).softmax(0)), "the softmax runs over the batch (dim 0): it "
                                              "must run over the memory keys, the last dim "
                                              "of the scores [b, h, s]."),
            (torch.zeros_like(v[:, :, 0]), "your output is zero everywhere, though the memory "
             "holds keys: was every key masked (masked_fill where the mask is True, with "
             "True = may attend) and the NaN zeroed? No mask here: every key is attended to."),
            (torch.full_like(v[:, :, 0], float("nan")), "your output is NaN everywhere: a "
             "softmax over scores that are all -inf? (every key masked: masked_fill where the "
             "mask is True, with True = may attend) No mask here: every key is attended to."),
            (mix(((scores + bias) / scores.new_tensor(q.size(-1)).sqrt()).softmax(-1)),
             f"your scores, bias included, are divided once more, by {q.size(-1) ** 0.5:g} = "
             "sqrt(d_head) here (scaled twice, or a temperature?): the softmax takes "
             "q·k / sqrt(d_head) + bias as it is."),
            (mix((scores * q.size(-1) ** 0.5 + bias).softmax(-1)) / q.size(-1) ** 0.5,
             "you divided the output (the weighted values) by sqrt(d_head), not the scores: "
             "the scale goes inside the softmax, softmax(q·k / sqrt(d_head) + bias)."),
            *[(torch.einsum("bhs,bhsd->bhd", (scores[..., keep] + bias[:, keep]).softmax(-1),
                            v[:, :, keep]), f"your query leaves out the {which} key: {why}")
              for keep, which, why in (
                  (slice(None, -1), "last", "the last key is the previous step (distance 1), "
                   "not the token itself, whose memory is not written yet; attend to all S."),
                  (slice(1, None), "first", "the first key is the oldest step kept (distance "
                   "S); attend to all S keys."))]]


def untransposed_keys(err: Exception, fn, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, bias: torch.Tensor, what: str) -> None:
    """`q.unsqueeze(2) @ k`, k not transposed: a shape error, rerun with `S = D_h` keys,
    where it runs, compared with the scores it then computes."""
    if not isinstance(err, RuntimeError) or k.size(2) == q.size(-1):
        return
    d = q.size(-1)
    k4, v4, bias4 = k.detach()[:, :, :d], v.detach()[:, :, :d], bias.detach()[:, :d]
    if k4.size(2) != d:
        return
    scores = (q.detach()[:, :, None] @ k4).squeeze(2) / d ** 0.5 + bias4
    wrong = torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v4)
    if gives(fn, q.detach(), k4, v4, bias4, wrong):
        fail(f"{what}: q @ k needs the keys transposed: k is [B, H, S, D_h], so the product "
             "runs only when S = D_h; use q.unsqueeze(2) @ k.transpose(-1, -2) ([B, H, 1, "
             "D_h] @ [B, H, D_h, S]) or einsum('bhd,bhsd->bhs', q, k).")


def one_batch_one_head(fn: Callable, d_head: int) -> None:
    """Rerun `feedback_attention` with `B = 1` and `H = 1`: a `.squeeze()` with no axis
    drops those size-1 axes too."""
    shapes = ((1, 1, d_head), (1, 1, 3, d_head), (1, 1, 3, d_head), (1, 3))
    q, k, v, bias = (torch.randn(*s, generator=torch.Generator().manual_seed(20 + i))
                     for i, s in enumerate(shapes))
    want, what = feedback_attention(q, k, v, bias), "feedback_attention with B = 1, H = 1"

    def dropped(err: Exception) -> None:  # it ran at B = 2, H = 3: a size-1 axis lost
        fail(f"{what} raised {type(err).__name__}, though it runs at B = 2, H = 3: a "
             "size-1 axis lost on the way? .squeeze() with no dim drops every one, B and H "
             "too: squeeze only the query axis, .squeeze(2) or [:, :, 0].")
    got = expect_tensor(call(fn, what, q, k, v, bias, diagnose=dropped), what)
    if got.shape != want.shape and got.shape == want.squeeze().shape:
        fail(f"{what} returns {list(got.shape)}, expected [B, H, D_h] = "
             f"{list(want.shape)}: .squeeze() drops every size-1 axis (here B and H too): "
             "drop only the query axis, .squeeze(2) or [:, :, 0].")
    expect_close(got, want, what, dims="b h d")


def one_layer(fn: Callable, xs: torch.Tensor, w: torch.Tensor
              ) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector` returning one layer: the embedding `xs[0]` or the layer of the largest
    logit `xs[w.argmax()]`; where the two are one (the check's w has its largest logit
    first), a rerun with the logits rolled by one tells them apart. `(result, message)`
    pairs."""
    pick = [(xs[w.argmax()], "that is the one layer of the largest weight, xs[w.argmax()]: "
                             "the memory mixes ALL layers, each weighted by softmax(w).")]
    first = [(xs[0], "that is the embedding xs[0] alone: the memory mixes ALL layers, "
                     "xs[0] to xs[L], each weighted by softmax(w)[l].")]
    if int(w.argmax()) != 0:
        return first + pick
    return first if gives(fn, xs.clone(), w.roll(1), xs[0]) else pick


def _scales(d: int) -> dict[float, str]:
    """The numbers a scale written out may be, each with how to say it (`sqrt(8)`): whole
    numbers and their roots, less 1 (no scale) and sqrt(d), right at head width `d`."""
    ns = (2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256)
    said = {math.sqrt(n): f"sqrt({n})" for n in ns} | {float(n): f"{n}" for n in ns}
    return {c: name for c, name in said.items() if not math.isclose(c, math.sqrt(d))}


def written_scale(fn: Callable, got: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, bias: torch.Tensor, what: str) -> None:
    """Name q·k divided by a number written out: `got` is the attention scaled by some
    `1 / c` other than `1 / sqrt(D_h)`, and a rerun at B = 3, H = 2, S = 4, D_h = 9 (every
    size changed) still divides by `c`; a `c` that follows a size (`/ q.size(-1)`, 4 here)
    is left to the slips that name it."""
    d = q.size(-1)
    if close(got.detach(), feedback_attention(q, k, v, bias)):
        return
    named_function(fn, got, q, k, v, bias, what)  # log(d), d ** 1/2: a function of d
    for c, name in _scales(d).items():
        if not close(got.detach(), feedback_attention(q * math.sqrt(d) / c, k, v, bias)):
            continue
        q9, k9, v9, bias9 = (randn(*shape, seed=50 + i) for i, shape in enumerate(
            ((3, 2, 9), (3, 2, 4, 9), (3, 2, 4, 9), (2, 4))))
        h, s = q.size(1), k.size(2)
        here = {d: "d_head", math.sqrt(s): "sqrt(S), S the keys", math.sqrt(h): "sqrt(H)",
                math.sqrt(h * d): "sqrt(H·d_head)"}
        size = next((f" (= {v}, here)" for n, v in here.items() if math.isclose(n, c)), "")
        if gives(fn, q9, k9, v9, bias9, feedback_attention(q9 * 3 / c, k9, v9, bias9)):
            fail(f"{what} divides q·k by {name}{size}, and by {name} again with D_h = 9 (B, "
                 "H, S changed too): a size written as a number; read D_h from q.shape[-1] "
                 "and divide by math.sqrt(D_h).")
        return


def layers_written(err: Exception, fn: Callable, xs: torch.Tensor, w: torch.Tensor) -> None:
    """Part of `memory_vector`'s `diagnose`: a function that raised at the check's `L + 1`
    layers is rerun with 1 to 8 layers; right at one count, it wrote that count as a
    number (`softmax(w, 0).view(3, 1, 1)`). The reruns' inputs require grad where the
    check's did: a `.numpy()` of them raises at every count."""
    n = xs.size(0)
    for m in (m for m in range(1, 9) if m != n):
        xm, wm = randn(m, *xs.shape[1:], seed=70 + m), randn(m, seed=80 + m)
        want = torch.einsum("l,lbd->bd", wm.softmax(0), xm)
        if gives(fn, xm.requires_grad_(xs.requires_grad), wm.requires_grad_(w.requires_grad),
                 want):
            fail(f"memory_vector(xs, w) raised {type(err).__name__} with L + 1 = {n} layers "
                 f"but is right with {m}: the layer count is a size written as a number "
                 f"({m}): read L + 1 from w.size(0) or xs.size(0). "
                 f"(torch said: {first_line(err)})")
