r"""A linear map applied step by step inside a recurrence, its weight gradient computed
once per pass.

Dimension letters (the package legend): `T` steps of the pass, `B` batch, `D_in` and
`D_out` the linear map's input and output widths.

`labnn.feedback.kv`'s autograd loop applies each `nn.Linear` of a layer once per token;
with `StepLinear` the weight gradient of all `T` applications is one matrix product at
the end.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_int, compute_dtype
from labnn.feedback.stack import Stack, eager_under_compile


class StepLinear:
    r"""An `nn.Linear` applied step by step inside a recurrence, its weight gradient
    computed once per pass.

    Autograd would compute $\partial\mathcal{L}/\partial W$ at every step, an outer
    product of a few rows written to a full weight-sized tensor and added to the running
    sum. This computes, per step, only what the recurrence needs ($y_t = x_t W^\top + b$
    forward, $g_t W$ backward), keeps $x_t$ and $g_t$ in
    buffers, and finishes with one large matrix product:
    $$\frac{\partial \mathcal{L}}{\partial W} = \sum_t g_t^\top x_t = G^\top X, \qquad
    \frac{\partial \mathcal{L}}{\partial b} = \sum_t g_t .$$
    The step gradients $g_t$ reach the buffer $G$ through a chain of zero-valued carrier
    tensors: each step writes its row and hands the buffer down, and the first
    (earliest) link computes the weight gradient once every later step is done. $G$ is
    allocated by each backward pass, so repeated and partial backward passes are exact.
    Double backward (`create_graph=True`) raises.

    Build one per forward pass (like `Stack`), with the number of steps it will be called.

    Under `torch.autocast` it computes as `F.linear` does there: in autocast's dtype
    (the inputs kept in it); the gradients reach each tensor in its own dtype.

    `torch.compile` runs it eagerly (`eager_under_compile`): its backward recognises
    its own buffer by storage identity (`_base`, `data_ptr`), which the compiler's fake
    tensors do not carry (traced, it failed with `IndexError: tuple index out of
    range`). The layers between its calls compile as usual.

    Args:
        linear: the layer whose weight and bias are used.
        steps: how many times it will be called.
        like: one step's input `[B, D_in]` (only its shape, dtype and device are used).
    """

    @eager_under_compile
    def __init__(self, linear: torch.nn.Linear, steps: int, like: torch.Tensor):
        """A `Stack` for the `steps` inputs $x_t$ and the root of the carrier chain that
        will collect the step gradients $g_t$.
        """
        check_int("steps", steps)
        if not isinstance(like, torch.Tensor) or like.size(-1) != linear.weight.size(1):
            raise ValueError(f"like must be one step's input [B, D_in={linear.weight.size(1)}], "
                             f"got {list(getattr(like, 'shape', [type(like).__name__]))}")
        self.linear, self.steps, self.shape = linear, steps, like.shape
        self.dtype = compute_dtype(linear.weight)  # autocast's, where it is on
        self._inputs = Stack(steps, like.to(self.dtype), dim=0)
        out = (steps, *like.shape[:-1], linear.out_features)
        self._carrier = _LinearRoot.apply(linear.weight, linear.bias, self, out)

    @eager_under_compile
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: `[B, D_in]` -> `[B, D_out]`."""
        if x.shape != self.shape:  # metadata only: no wait for the device
            raise ValueError(f"x has shape {list(x.shape)}, expected {list(self.shape)}, "
                             "as `like` was when this StepLinear was made")
        y, self._carrier = _LinearStep.apply(x, self._carrier, self)
        return y


class _LinearRoot(torch.autograd.Function):
    """Start of the carrier chain: zeros `[T, B, D_out]`; backward turns the step
    gradients `G` into dW, db."""

    @staticmethod
    def forward(ctx, weight, bias, owner: StepLinear, shape: tuple[int, ...]):
        """A zero carrier `[T, B, D_out]` (an expanded scalar: no memory) whose gradient
        will be the buffer $G$; remembers the owner, whose inputs $X$ the backward reads.
        """
        ctx.owner = owner
        ctx.set_materialize_grads(False)
        return weight.new_zeros(()).expand(shape)

    @staticmethod
    def backward(ctx, grads: torch.Tensor | None):
        r"""$\partial\mathcal{L}/\partial W = G^\top X$ and
        $\partial\mathcal{L}/\partial b = \sum_t g_t$, once, from every step's gradient
        row.
        """
        _no_double_backward()
        if grads is None:
            return None, None, None, None
        x = ctx.owner._inputs.view()  # [T, B, D_in]
        n = x.size(0)
        # G is in the weight's dtype; X in autocast's, under autocast
        g, x = grads[:n].flatten(0, -2), x.flatten(0, -2).to(grads.dtype)
        grad_w = g.t() @ x if ctx.needs_input_grad[0] else None
        grad_b = g.sum(0) if ctx.needs_input_grad[1] else None
        return grad_w, grad_b, None, None


class _LinearStep(torch.autograd.Function):
    """One step: `y = x W^T + b` and the next carrier link; backward writes `g_t` into
    row `t` of `G`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, carrier: torch.Tensor, owner: StepLinear):
        r"""$y_t = x_t W^\top + b$; the input is pushed for the weight gradient, and the
        carrier loses its first row (step `t`'s) on the way to the next step.
        """
        lin, t = owner.linear, len(owner._inputs)
        # grad mode is off here: a plain write into the input buffer (autocast's dtype
        # under autocast, as F.linear below computes)
        owner._inputs.push(x.to(owner.dtype))
        ctx.t, ctx.steps, ctx.x_dtype = t, owner.steps, x.dtype
        ctx.save_for_backward(lin.weight)
        ctx.set_materialize_grads(False)
        return torch.nn.functional.linear(x, lin.weight, lin.bias), carrier[1:]

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor | None, grad_rest: torch.Tensor | None):
        r"""$\partial\mathcal{L}/\partial x_t = g_t W$ for the recurrence, and $g_t$
        written into row `t` of the buffer $G$ that travels down the carrier chain (a
        new buffer when this is the first link a backward pass reaches).
        """
        _no_double_backward()
        (weight,) = ctx.saved_tensors
        t = ctx.t
        want_x = grad_y is not None and ctx.needs_input_grad[0]
        # under autocast g_t is in autocast's dtype: W is cast to it, g_t W back to x_t's
        grad_x = (grad_y @ weight.to(grad_y.dtype)).to(ctx.x_dtype) if want_x else None
        if not ctx.needs_input_grad[1]:
            return grad_x, None, None
        if grad_y is None and grad_rest is None:
            return grad_x, None, None
        rows = grad_rest._base if grad_rest is not None else None
        ours = (rows is not None and rows.size(0) == ctx.steps and grad_rest.numel() > 0
                and grad_rest.data_ptr() == rows[t + 1].data_ptr())
        if not ours:
            # the first link this backward pass reaches, or a gradient that is not our
            # buffer: start a buffer
            shape = (ctx.steps, *(grad_y if grad_y is not None else grad_rest).shape[-2:])
            rows = weight.new_zeros(shape)
            if grad_rest is not None:
                rows[t + 1 :].copy_(grad_rest)
        if grad_y is not None:
            rows[t].copy_(grad_y)
        return grad_x, rows[t:], None


def _no_double_backward() -> None:
    """Raise a clear error when a backward pass is itself being differentiated."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "StepLinear does not support double backward (create_graph=True); to "
            "differentiate twice, apply the nn.Linear itself at every step (per-step "
            "weight gradients: a subclass of FeedbackTransformerKV whose block_linear "
            "returns the nn.Linear)"
        )
