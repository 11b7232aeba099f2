"""Checkers for notebook 04 (shared keys/values and the stack).

Dimension letters: `T` steps, `B` batch, `F` features of one step, `N` buffer capacity, `H` heads,
`D` width, `D_h` head width. Positions in messages use the lower-case letters of the result's own
dimensions, e.g. `at [t=3, b=0, f=1]`.

Each checker runs the learner's code on seeded random inputs in float64, compares it with `labnn` (or with
autograd through `torch.stack`) and, when it differs, recomputes the typical mistakes (no chain rule, only
the last read counted, keys and values or their biases swapped, a copy instead of a view of the buffer, the
prefix's gradient dropped, an input changed in place, ...) to say which one was made.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F_
from torch import nn

from .checking import (
    close,
    exercise,
    expect_close,
    expect_dtype,
    expect_gradients,
    expect_no_alias,
    expect_shape,
    expect_tensor,
    expect_unchanged,
    fail,
    shares_memory,
    snapshot,
)

T, B, F, H, D = 5, 2, 3, 2, 8


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


DTYPE_HINT = ("The inputs here are float64: keep their dtype (no .float() on the way, and create new "
              "tensors with torch.zeros_like(...) or dtype=x.dtype; torch.zeros(...) alone gives float32).")


def _diagnose(got: torch.Tensor, want: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first typical mistake whose result `got` reproduces (mistakes that
    happen to give the right answer on these inputs are skipped)."""
    for wrong, message in mistakes:
        if close(got, wrong) and not close(wrong, want):
            fail(message)


def _expect_function_class(fn, name: str) -> None:
    if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)):
        got = (f"an instance of {type(fn).__name__}" if isinstance(fn, torch.autograd.Function)
               else f"{type(fn).__name__} {getattr(fn, '__name__', '')}".strip())
        fail(f"pass the class itself, {name} (a torch.autograd.Function subclass), not {got}: the check "
             f"calls {name}.apply(...).")


def _wrong_gradient_count(err: RuntimeError) -> bool:
    return "incorrect number of gradients" in str(err)


@exercise("a custom autograd Function (square)")
def check_square(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function` subclass: `fn.apply(x)` = x², with its own backward."""
    _expect_function_class(fn, "Square")
    x = _randn(4, 3, seed=1).requires_grad_()
    g = _randn(4, 3, seed=2)
    before = snapshot(x=x)
    y = expect_tensor(fn.apply(x), "Square.apply(x)")
    expect_unchanged(before, "Square.forward", x=x)
    x0 = x.detach()
    expect_shape(y, x.shape, "Square.apply(x)")
    expect_dtype(y, x.dtype, "Square.apply(x)", DTYPE_HINT)
    _diagnose(y.detach(), x0**2, [
        (2 * x0, "forward returns 2x, the derivative: forward computes the value, x * x; backward the "
                 "gradient."),
        (x0, "forward returns x unchanged: it must return x * x."),
    ])
    expect_close(y, x0**2, "Square.apply(x)", dims="i j")
    if y.grad_fn is None:
        fail("the output has no grad_fn: call Square.apply(x), and return a tensor computed from x in forward.")
    try:
        (got,) = torch.autograd.grad(y, x, g)
    except RuntimeError as err:
        if _wrong_gradient_count(err):
            fail(f"backward must return exactly one gradient per input of forward (here one, for x): {err}")
        raise
    if got is None:
        fail("backward returned None: return the gradient with respect to x, grad_output * 2 * x.")
    want = 2 * x0 * g
    _diagnose(got, want, [
        (2 * x0, "backward returned d(x²)/dx = 2x alone: multiply by grad_output (the chain rule)."),
        (g, "backward returned grad_output unchanged: multiply it by the local derivative 2x."),
        (g * x0, "backward is missing the factor 2: d(x²)/dx = 2x."),
        (2 * g * x0**2, "backward uses the saved OUTPUT y = x² where x belongs: 2·y·grad_output is not the "
                        "gradient; save the input (ctx.save_for_backward(x)) and return grad_output * 2 * x."),
        (g * x0**2, "backward multiplied grad_output by the OUTPUT x²: the local derivative is 2x."),
        (2 * g, "backward returned 2 * grad_output: the local derivative is 2x, so multiply by x too."),
    ])
    expect_close(got, want, "the gradient of Square.apply(x)", dims="i j")


@exercise("the gradient of a stacked value")
def check_value_gradients(fn: Callable) -> None:
    """`fn(read_grads)`: `read_grads[t]` `[t+1, F]` is the gradient arriving at the stack read at step `t`
    (slots `0..t`); return `[T, F]`, the gradient of each pushed value $v_j$: $\\sum_{t \\ge j} g_t[j]$."""
    reads = [_randn(t + 1, F, seed=10 + t) for t in range(T)]
    names = {f"read_grads[{t}]": r for t, r in enumerate(reads)}
    before = snapshot(**names)
    want = torch.stack([sum(reads[t][j] for t in range(j, T)) for j in range(T)])
    what = "value_gradients(read_grads)"
    got = expect_tensor(fn(reads), what)
    expect_unchanged(before, what, **names)
    expect_no_alias(got, what, **names)
    if tuple(got.shape) == (F,):
        fail(f"{what} has shape [F] = [{F}]: you summed over the slots too; keep one row per value, [T, F].")
    expect_shape(got, want.shape, what)
    expect_dtype(got, want.dtype, what, DTYPE_HINT)
    count = torch.arange(T, 0, -1, dtype=torch.float64)[:, None]  # reads that saw v_j: T - j
    right_aligned = torch.zeros(T, F, dtype=torch.float64)
    for r in reads:
        right_aligned[T - r.size(0):] += r
    off_by_one = torch.zeros(T, F, dtype=torch.float64)
    for t, r in enumerate(reads):
        off_by_one[:t] += r[:t]
    _diagnose(got, want, [
        (off_by_one, "off by one: read t covers slots 0..t, that is t + 1 rows (all of read_grads[t], or "
                     "[:t + 1]); slicing [:t] drops each read's newest slot."),
        (reads[-1], "that is the last read's gradient only: every read at step t >= j saw v_j, so add them all."),
        (torch.stack([reads[j][j] for j in range(T)]), "you took only the read at the step that pushed each "
                                                       "value: later reads see it too."),
        (torch.stack([reads[j][0] for j in range(T)]), "row j of your result is slot 0 of read j: the gradient "
                                                       "of v_j is slot j, summed over the reads t >= j."),
        (right_aligned, "the reads are aligned at the end: read t covers slots 0..t, so add it into the FIRST "
                        "t+1 rows."),
        (want / count, "you averaged the reads: the gradients of all reads of v_j add up (sum, not mean)."),
        (want / T, "you divided by T: the gradients of all reads of v_j add up, with no normalization."),
    ])
    expect_close(got, want, what, dims="j f")


def _recurrence(x: torch.Tensor, push: Callable | None) -> torch.Tensor:
    """Each step attends over the stack of earlier states (reference: `torch.stack`), then pushes its own."""
    states, s = [], None
    buffer = torch.empty(x.size(1), x.size(0), x.size(2), dtype=x.dtype)  # [B, N, F]
    top = buffer.data[:, :0]
    for t in range(x.size(0)):
        h = x[t]
        if t:
            w = torch.einsum("bf,bnf->bn", x[t], s).softmax(-1)
            h = torch.tanh(x[t] + torch.einsum("bn,bnf->bf", w, s))
        states.append(h)
        if push is None:
            s = torch.stack(states, dim=1)
        else:
            s = top = push(top, h, buffer)
    return torch.stack(states)


def _check_one_append(fn) -> None:
    """Call `Append.apply` once, directly: a view of the buffer, the value in slot n, n+1 slots."""
    n, capacity = 2, 4
    buffer = torch.zeros(B, capacity, F, dtype=torch.float64)
    buffer[:, :n] = _randn(B, n, F, seed=20)
    top = buffer.data[:, :n]
    value = _randn(B, F, seed=21).requires_grad_()
    before = snapshot(value=value, top=top)
    what = f"Append.apply(top, value, buffer) with n = top.size(1) = {n}"
    out = expect_tensor(fn.apply(top, value, buffer), what)
    expect_unchanged(before, what, value=value)
    if tuple(out.shape) == (B, n, F):
        fail(f"{what} returns [B, n, F] = {list(out.shape)}: the prefix must include the new slot, "
             f"[B, n+1, F] (buffer.data[:, :n + 1]).")
    expect_shape(out, (B, n + 1, F), what)
    if not shares_memory(out, buffer) or out.data_ptr() != buffer.data_ptr():
        fail(f"{what} returns a new tensor (a copy), not a view of the buffer: copying the prefix at every "
             "step is exactly the O(T) cost the buffer removes. Write the value into buffer[:, n] and return "
             "the view buffer.data[:, :n + 1].")
    if not torch.equal(buffer[:, n], value.detach()):
        for slot, hint in ((n - 1, "n - 1, overwriting the newest old value"), (n + 1, "n + 1, one too far")):
            if torch.equal(buffer[:, slot], value.detach()):
                fail(f"{what} wrote the value into slot {hint}: the n old values fill slots 0..n-1, so the new "
                     "one goes into buffer[:, n].")
        fail(f"{what} did not write the value into buffer[:, n]: copy it there (buffer[:, n].copy_(value)), "
             "so that later prefixes see it too.")
    expect_unchanged(before, what, top=top)
    # Again with a `top` whose values differ from the buffer's first n slots: Append may read only its
    # size; writing anything but slot n (e.g. copying `top` back in) is O(T) work per step.
    buffer = torch.zeros(B, capacity, F, dtype=torch.float64)
    buffer[:, :n] = _randn(B, n, F, seed=22)
    old = buffer[:, :n].clone()
    fn.apply(_randn(B, n, F, seed=23), value.detach(), buffer)
    if not torch.equal(buffer[:, :n], old):
        fail(f"{what} wrote into the old slots 0..n-1 of the buffer (copying `top` back in?): they already "
             "hold the earlier values, so re-copying the prefix at every step is O(T) work per step, the "
             "very cost the buffer removes. Write only the new slot, buffer[:, n].")


@exercise("the Append function (a stack with a preallocated buffer)")
def check_append(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function`: `fn.apply(top, value, buffer)` writes value `[B, F]` into
    `buffer[:, n]` (`n = top.size(1)`) and returns the prefix `[B, n+1, F]`, a view of the buffer; backward
    splits the gradient."""
    _expect_function_class(fn, "Append")
    _check_one_append(fn)
    x = _randn(T, B, F, seed=3).requires_grad_()
    g = _randn(T, B, F, seed=4)
    want = _recurrence(x, None)
    try:
        got = _recurrence(x, fn.apply)
        expect_close(got, want, "the outputs of a recurrence using Append", dims="t b f")
        (grad,) = torch.autograd.grad(got, x, g)
    except RuntimeError as err:
        if "inplace" in str(err) or "version" in str(err):
            fail("autograd saw the buffer change under a saved prefix: return a view of `buffer.data` (a "
                 "detached alias with its own version counter), not of `buffer` itself.")
        if _wrong_gradient_count(err):
            fail(f"backward must return one gradient per input of forward: (for top, for value, None for "
                 f"buffer): {err}")
        if "invalid gradient at index" in str(err):
            fail("backward returned a gradient of the wrong shape: each gradient has the shape of its input, "
                 "so `top` [B, n, F] gets grad[:, :n] and `value` [B, F] gets grad[:, n] (torch said: "
                 f"{err}).")
        raise
    (ref,) = torch.autograd.grad(want, x, g)
    mistakes = []
    for mistake, message in [
        (_AppendWithoutPrefixGradient, "gradients stop at the newest value: backward must also return "
         "grad[:, :n] for `top`, so the earlier values (reached through the previous prefix) get theirs."),
        (_AppendOldestSlotGradient, "backward hands `value` the gradient of slot 0: the value sits in slot n, "
         "so its gradient is grad[:, n]."),
        (_AppendNewestFirstGradient, "backward splits the gradient newest first (grad[:, 1:] for `top`, "
         "grad[:, 0] for `value`): the slots are oldest first, so `top` gets grad[:, :n] and `value` "
         "grad[:, n]."),
    ]:
        (wrong,) = torch.autograd.grad(_recurrence(x, mistake.apply), x, g)
        mistakes.append((wrong, message))
    _diagnose(grad, ref, mistakes)
    expect_close(grad, ref, "the gradient through Append (d loss / d x)", dims="t b f")


class _AppendWithoutPrefixGradient(torch.autograd.Function):
    """A typical mistake, recomputed for the diagnosis: backward forgets the prefix."""

    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        buffer[:, ctx.n].copy_(value)
        return buffer.data[:, : ctx.n + 1]

    @staticmethod
    def backward(ctx, grad):
        return None, grad[:, ctx.n], None


class _AppendOldestSlotGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the value gets the gradient of slot 0."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, 0], None


class _AppendNewestFirstGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the gradient split as if the newest slot came first."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


@exercise("one key/value projection shared by all layers")
def check_shared_kv(fn: Callable) -> None:
    """`fn(m, norm, kv, n_heads)`: memory vectors m `[B, D]`, a LayerNorm, a Linear `D -> 2D` (keys first)
    -> `(k, v)`, each `[B, H, D_h]`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        norm, kv = nn.LayerNorm(D).double(), nn.Linear(D, 2 * D).double()
        with torch.no_grad():
            norm.weight.normal_(1, 0.3)
            norm.bias.normal_(0, 0.3)
    m_leaf, m_ref = _randn(B, D, seed=5).requires_grad_(), _randn(B, D, seed=5).requires_grad_()
    m = m_leaf.clone()  # not a leaf: an in-place change is reported, not refused by autograd
    d_h = D // H
    with torch.no_grad():
        normed = norm(m)
        out = kv(normed).view(B, 2, H, d_h)
        raw = kv(m).view(B, 2, H, d_h)
        no_bias = F_.linear(normed, kv.weight).view(B, 2, H, d_h)
        fresh = kv(F_.layer_norm(m, (D,))).view(B, 2, H, d_h)
        norm_after = torch.stack([norm(t) for t in kv(m).chunk(2, -1)], 1).view(B, 2, H, d_h)
        w, b = kv.weight, kv.bias
        k_swapped_bias = F_.linear(normed, w[:D], b[D:]).view(B, H, d_h)
        v_swapped_bias = F_.linear(normed, w[D:], b[:D]).view(B, H, d_h)
    what = "shared_kv(m, norm, kv, n_heads)"
    before = snapshot(m=m)
    got = fn(m, norm, kv, H)
    expect_unchanged(before, what, m=m)
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(f"{what}: return a pair (k, v), got {type(got).__name__}.")
    k, v = (expect_tensor(t, name) for t, name in zip(got, ("k", "v")))
    for name, t in (("k", k), ("v", v)):
        if tuple(t.shape) == (B, D):
            fail(f"{name} has shape [B, D] = [{B}, {D}]: split it into heads, [B, H, D_h] = [{B}, {H}, {d_h}].")
        expect_shape(t, (B, H, d_h), name)
        expect_dtype(t, m.dtype, name, DTYPE_HINT)
    k0, v0 = k.detach(), v.detach()
    if close(k0, out[:, 1]) and close(v0, out[:, 0]):
        fail("keys and values are swapped: the first D outputs of kv are the keys.")
    if close(k0, raw[:, 0]):
        fail("normalize the memory vector first (norm(m)), as the model does before projecting it.")
    if close(k0, norm_after[:, 0]):
        fail("you normalized after projecting: apply `norm` to m first, then project, kv(norm(m)).")
    if close(k0, fresh[:, 0]):
        fail("you normalized with a fresh layer_norm (no learned scale and shift): use the given `norm` "
             "module, norm(m), whose weight and bias are trained with the model.")
    if close(k0, no_bias[:, 0]) or close(v0, no_bias[:, 1]):
        fail("the projection's bias is missing: kv(x) (or F.linear(x, kv.weight, kv.bias)) adds kv.bias; "
             "x @ kv.weight.T alone does not.")
    if close(k0, k_swapped_bias) or close(v0, v_swapped_bias):
        fail("the biases are swapped: the keys' bias is kv.bias[:D] (with the weight rows kv.weight[:D]), the "
             "values' bias kv.bias[D:].")
    flat = kv(normed).detach()
    if close(k0, flat[:, :D].view(B, d_h, H).transpose(1, 2)):
        fail("the heads are split the wrong way: view the D outputs as [H, D_h] (head-major), not [D_h, H].")
    if close(k0, flat.view(B, H, 2, d_h)[:, :, 0]):
        fail("keys and values are interleaved per head: the 2D outputs are [keys (D), values (D)], so view "
             "them as [B, 2, H, D_h] (keys/values first, then heads).")
    expect_close(k, out[:, 0], "k", dims="b h d")
    expect_close(v, out[:, 1], "v", dims="b h d")
    if not (k.requires_grad and v.requires_grad):
        fail("k or v is detached (no gradient flows back through it): the projection kv and the norm would "
             "never learn. Drop the .detach() / torch.no_grad().")
    ref = kv(norm(m_ref)).view(B, 2, H, d_h)
    expect_gradients((k, v), (ref[:, 0], ref[:, 1]), what,
                     {"m": (m_leaf, m_ref), "norm.weight": (norm.weight, norm.weight),
                      "norm.bias": (norm.bias, norm.bias), "kv.weight": (kv.weight, kv.weight),
                      "kv.bias": (kv.bias, kv.bias)},
                     dims={"m": "b d", "norm.weight": "d", "norm.bias": "d", "kv.weight": "o i",
                           "kv.bias": "o"})


@exercise("the weight gradient of a layer applied at every step")
def check_weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)`: inputs xs `[T, B, D_in]` and output gradients gs `[T, B, D_out]` of one Linear applied
    at every step -> dL/dW `[D_out, D_in]` = $\\sum_t g_t^\\top x_t$, in one matrix product."""
    xs, gs = _randn(T, B, 3, seed=6), _randn(T, B, 4, seed=7)
    want = sum(gs[t].t() @ xs[t] for t in range(T))
    what = "weight_gradient(xs, gs)"
    before = snapshot(xs=xs, gs=gs)
    got = expect_tensor(fn(xs, gs), what)
    expect_unchanged(before, what, xs=xs, gs=gs)
    if tuple(got.shape) == (3, 4):
        fail("the result is transposed, [D_in, D_out]: dL/dW has the weight's shape [D_out, D_in] = G^T X.")
    expect_shape(got, want.shape, what)
    expect_dtype(got, want.dtype, what, DTYPE_HINT)
    _diagnose(got, want, [
        (gs.sum((0, 1))[:, None] * xs.sum((0, 1))[None],
         "you took the product of the sums (sum of G times sum of X): the gradient is the sum of the "
         "products, one g_t^T x_t per (t, b) row, which G^T X computes."),
        (want / B, "you divided by the batch size: the loss's own mean is already inside gs, so just add "
                   "(no division)."),
        (gs.transpose(0, 1).flatten(0, 1).t() @ xs.flatten(0, 1),
         "the rows of G and X are paired with different (t, b): flatten both the same way "
         "(gs.flatten(0, 1) and xs.flatten(0, 1))."),
        (gs[-1].t() @ xs[-1], "that is the last step's gradient only: the layer is applied at every step, so "
                              "flatten steps and batch together, then G^T X."),
        (want / T, "you averaged over the steps: the gradients of all steps add up (no division by T)."),
        (want / (T * B), "you averaged over steps and batch: the loss's own mean is already inside gs, so "
                         "just add (no division)."),
        (gs[:, 0].t() @ xs[:, 0], "only batch element 0 is counted: flatten steps AND batch, [T·B, D]."),
        (gs.flatten(0, 1).t() @ xs.transpose(0, 1).flatten(0, 1),
         "the rows of G and X are paired with different (t, b): flatten both the same way "
         "(gs.flatten(0, 1) and xs.flatten(0, 1))."),
    ])
    expect_close(got, want, what, dims="o i")
