"""Checkers for notebook 04 (shared keys/values and the stack).

Dimension letters: `T` steps, `B` batch, `F` features of one step, `N` buffer capacity, `H` heads,
`D` width, `D_h` head width.

Each checker runs the learner's code on seeded random inputs in float64, compares it with `labnn` (or with
autograd through `torch.stack`) and, when it differs, recomputes the typical mistakes (no chain rule, only
the last read counted, keys and values swapped, the prefix's gradient dropped, ...) to say which one was made.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .checking import close, exercise, expect_close, expect_shape, expect_tensor, fail

T, B, F, H, D = 5, 2, 3, 2, 8


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@exercise("a custom autograd Function (square)")
def check_square(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function` subclass: `fn.apply(x)` = x², with its own backward."""
    if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)):
        fail(f"pass the class itself (a torch.autograd.Function subclass), got {fn!r}.")
    x = _randn(4, 3, seed=1).requires_grad_()
    g = _randn(4, 3, seed=2)
    y = expect_tensor(fn.apply(x), "Square.apply(x)")
    expect_close(y, x.detach() ** 2, "Square.apply(x)")
    if y.grad_fn is None:
        fail("the output has no grad_fn: call Square.apply(x), and return a tensor computed from x in forward.")
    (got,) = torch.autograd.grad(y, x, g)
    if close(got, 2 * x.detach()):
        fail("backward returned d(x²)/dx = 2x alone: multiply by grad_output (the chain rule).")
    if close(got, g):
        fail("backward returned grad_output unchanged: multiply it by the local derivative 2x.")
    expect_close(got, 2 * x.detach() * g, "the gradient of Square.apply(x)")


@exercise("the gradient of a stacked value")
def check_value_gradients(fn: Callable) -> None:
    """`fn(read_grads)`: `read_grads[t]` `[t+1, F]` is the gradient arriving at the stack read at step `t`
    (slots `0..t`); return `[T, F]`, the gradient of each pushed value $v_j$: $\\sum_{t \\ge j} g_t[j]$."""
    reads = [_randn(t + 1, F, seed=10 + t) for t in range(T)]
    want = torch.stack([sum(reads[t][j] for t in range(j, T)) for j in range(T)])
    got = expect_tensor(fn(reads), "value_gradients(read_grads)")
    expect_shape(got, want.shape, "value_gradients(read_grads)")
    if close(got, reads[-1]):
        fail("that is the last read's gradient only: every read at step t >= j saw v_j, so add them all.")
    if close(got, torch.stack([reads[j][j] for j in range(T)])):
        fail("you took only the read at the step that pushed each value: later reads see it too.")
    expect_close(got, want, "value_gradients(read_grads)")


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


@exercise("the Append function (a stack with a preallocated buffer)")
def check_append(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function`: `fn.apply(top, value, buffer)` writes value `[B, F]` into
    `buffer[:, n]` (`n = top.size(1)`) and returns the prefix `[B, n+1, F]`; backward splits the gradient."""
    if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)):
        fail(f"pass the class itself (a torch.autograd.Function subclass), got {fn!r}.")
    x = _randn(T, B, F, seed=3).requires_grad_()
    g = _randn(T, B, F, seed=4)
    want = _recurrence(x, None)
    try:
        got = _recurrence(x, fn.apply)
        expect_close(got, want, "the outputs of a recurrence using Append")
        (grad,) = torch.autograd.grad(got, x, g)
    except RuntimeError as err:
        if "inplace" in str(err) or "version" in str(err):
            fail("autograd saw the buffer change under a saved prefix: return a view of `buffer.data` (a fresh "
                 "alias with its own version counter), not of `buffer` itself.")
        raise
    (ref,) = torch.autograd.grad(want, x, g)
    (no_prefix,) = torch.autograd.grad(_recurrence(x, _AppendWithoutPrefixGradient.apply), x, g)
    if close(grad, no_prefix):
        fail("gradients stop at the newest value: backward must also return grad[:, :n] for `top`, so the "
             "earlier values (reached through the previous prefix) get theirs.")
    expect_close(grad, ref, "the gradient through Append")


class _AppendWithoutPrefixGradient(torch.autograd.Function):
    """The typical mistake, recomputed for the diagnosis: backward forgets the prefix."""

    @staticmethod
    def forward(ctx, top, value, buffer):
        ctx.n = top.size(1)
        buffer[:, ctx.n].copy_(value)
        return buffer.data[:, : ctx.n + 1]

    @staticmethod
    def backward(ctx, grad):
        return None, grad[:, ctx.n], None


@exercise("one key/value projection shared by all layers")
def check_shared_kv(fn: Callable) -> None:
    """`fn(m, norm, kv, n_heads)`: memory vectors m `[B, D]`, a LayerNorm, a Linear `D -> 2D` (keys first)
    -> `(k, v)`, each `[B, H, D_h]`."""
    torch.manual_seed(0)
    norm, kv = nn.LayerNorm(D).double(), nn.Linear(D, 2 * D).double()
    with torch.no_grad():
        norm.weight.normal_(1, 0.3)
    m = _randn(B, D, seed=5)
    with torch.no_grad():
        out = kv(norm(m)).view(B, 2, H, D // H)
        raw = kv(m).view(B, 2, H, D // H)
        got = fn(m, norm, kv, H)
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(f"return a pair (k, v), got {type(got).__name__}.")
    k, v = (expect_tensor(t, name) for t, name in zip(got, ("k", "v")))
    expect_shape(k, (B, H, D // H), "k")
    expect_shape(v, (B, H, D // H), "v")
    if close(k, out[:, 1]) and close(v, out[:, 0]):
        fail("keys and values are swapped: the first D outputs of kv are the keys.")
    if close(k, raw[:, 0]):
        fail("normalize the memory vector first (norm(m)), as the model does before projecting it.")
    if close(k, kv(norm(m)).detach()[:, :D].view(B, D // H, H).transpose(1, 2)):
        fail("the heads are split the wrong way: view the D outputs as [H, D_h] (head-major).")
    expect_close(k, out[:, 0], "k")
    expect_close(v, out[:, 1], "v")


@exercise("the weight gradient of a layer applied at every step")
def check_weight_gradient(fn: Callable) -> None:
    """`fn(xs, gs)`: inputs xs `[T, B, D_in]` and output gradients gs `[T, B, D_out]` of one Linear applied
    at every step -> dL/dW `[D_out, D_in]` = $\\sum_t g_t^\\top x_t$, in one matrix product."""
    xs, gs = _randn(T, B, 3, seed=6), _randn(T, B, 4, seed=7)
    want = sum(gs[t].t() @ xs[t] for t in range(T))
    got = expect_tensor(fn(xs, gs), "weight_gradient(xs, gs)")
    if tuple(got.shape) == (3, 4):
        fail("the result is transposed: dL/dW has the weight's shape [D_out, D_in] = G^T X.")
    expect_shape(got, want.shape, "weight_gradient(xs, gs)")
    if close(got, gs[-1].t() @ xs[-1]):
        fail("that is the last step's gradient only: flatten steps and batch together, then G^T X.")
    expect_close(got, want, "weight_gradient(xs, gs)")
