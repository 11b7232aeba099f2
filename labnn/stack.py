r"""A growing stack of per-step tensors that costs O(1) per step, with exact gradients.

Dimension letters: `B` batch, `H` heads, `N` capacity (steps the buffer can hold), `n` steps pushed so
far, `D_h` head width; `...` any other dimensions of one step's value.

A recurrent model that attends over its own past (the Feedback Transformer) needs, at every step `t`, the
stack $S_t = [v_0, \dots, v_t]$ of everything pushed so far. `torch.stack` over a Python list builds
$S_t$ from scratch each step: $O(t)$ copying per step, $O(T^2)$ per sequence, and autograd keeps every
copy alive for the backward pass. `Stack` instead writes each value once into a buffer allocated for the
whole pass and returns views of its growing prefix. The gradient is what `torch.stack` would give:
$$\frac{\partial \mathcal{L}}{\partial v_j} = \sum_{t \ge j} \frac{\partial \mathcal{L}}{\partial S_t[j]} .$$

How it stays correct (each point closes a way the widely copied version of this trick goes wrong):

* One `Stack` per forward pass, sized for that pass (memory + block) and shaped, typed and placed like its
  values: a second forward, a `no_grad` forward, or another batch size, dtype or device builds its own
  buffer and never touches a buffer an earlier graph still needs.
* Append-only: a slot is written exactly once, before any view that covers it exists, so the bytes behind
  every view handed out never change afterwards.
* No gradient state outside autograd: each append's backward is a pure function of its incoming gradient
  (slice off the new slots, pass the rest down the chain), so `backward(retain_graph=True)` twice,
  `torch.autograd.grad`, partial graphs and double backward are exact.
* Clear errors for misuse: pushing past the capacity, or a value of another shape, dtype or device.
"""

from __future__ import annotations

import torch


class _Append(torch.autograd.Function):
    r"""Write `values` into the buffer after the `n` slots of `top` and return the `n + k` slot prefix.

    Autograd sees a chain $S_{t-1}, v_t \mapsto S_t$. Backward splits the incoming gradient
    $g = \partial\mathcal{L} / \partial S_t$ along the step dimension: the first `n` slots go to
    $S_{t-1}$ (where autograd adds them to the gradient of every other reader of $S_{t-1}$), the new
    slots go to $v_t$.
    """

    @staticmethod
    def forward(ctx, top: torch.Tensor, values: torch.Tensor, stack: Stack, one: bool) -> torch.Tensor:
        dim, n = stack.dim, top.size(stack.dim)
        k = 1 if one else values.size(dim)
        stack._buffer.narrow(dim, n, k).copy_(values.unsqueeze(dim) if one else values)
        ctx.dim, ctx.n, ctx.k, ctx.one = dim, n, k, one
        # `.data` gives a fresh alias of the buffer with its own version counter: the write above and later
        # appends (which touch only slots past this prefix) leave every prefix view's version unchanged.
        return stack._buffer.data.narrow(dim, 0, n + k)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        need_top, need_values = ctx.needs_input_grad[:2]
        grad_top = grad.narrow(ctx.dim, 0, ctx.n) if need_top else None
        if not need_values:
            return grad_top, None, None, None
        grad_values = grad.select(ctx.dim, ctx.n) if ctx.one else grad.narrow(ctx.dim, ctx.n, ctx.k)
        return grad_top, grad_values, None, None


class _StackBase:
    """Argument checks shared by `Stack` and `ListStack`."""

    def __init__(self, capacity: int, like: torch.Tensor, dim: int):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if not isinstance(like, torch.Tensor):
            raise TypeError(f"like must be a torch.Tensor (one step's value), got {type(like).__name__}")
        if not isinstance(dim, int) or not -like.dim() - 1 <= dim <= like.dim():
            raise ValueError(f"dim={dim!r} is out of range for values with {like.dim()} dimensions")
        self.capacity, self.dim, self.step_shape = capacity, dim % (like.dim() + 1), like.shape
        self.dtype, self.device = like.dtype, like.device

    def __len__(self) -> int:
        raise NotImplementedError

    def stacked_shape(self, n: int | str) -> tuple:
        """Shape of `n` stacked steps: `[*F[:dim], n, *F[dim:]]`."""
        return (*self.step_shape[: self.dim], n, *self.step_shape[self.dim :])

    def _check(self, value: torch.Tensor, k: int | None, name: str) -> int:
        """Validate one step (`k` None) or a block of steps; return how many steps it adds."""
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {value.dtype}, but this stack holds {self.dtype}")
        if value.device != self.device:
            raise ValueError(f"{name} is on {value.device}, but this stack lives on {self.device}")
        if k is None:
            want, k = tuple(self.step_shape), 1
        else:
            k = value.size(self.dim) if value.dim() == len(self.step_shape) + 1 else "k"
            want = self.stacked_shape(k)
        if tuple(value.shape) != tuple(want):
            shown = "[" + ", ".join(str(n) for n in want) + "]"
            raise ValueError(f"{name} has shape {list(value.shape)}, expected {shown}")
        if len(self) + k > self.capacity:
            raise IndexError(
                f"stack is full: it holds {len(self)} of {self.capacity} steps and cannot take {k} more; "
                "build each forward pass's stack with the pass's full length (memory + block)"
            )
        return k


class Stack(_StackBase):
    """Append-only buffer for one forward pass; `push` returns the stack of everything pushed so far.

    Build a new `Stack` for every forward pass (never keep one on a module): its buffer holds exactly
    `capacity` steps shaped, typed and placed like `like`.

    Args:
        capacity: the most steps it will hold (e.g. memory length + block length); any positive int.
        like: one step's value (only its shape, dtype and device are used).
        dim: where the step dimension goes in the stacked result, as in `torch.stack(values, dim)`.

    Shape:
        `push(value)`: value `[*F]` -> `[*F[:dim], n, *F[dim:]]`; e.g. keys `[B, H, D_h]` with `dim=2`
        stack to `[B, H, n, D_h]`, whose `(B, H)` dimensions merge into one batch dimension without a copy.

    Examples:
        >>> stack = Stack(3, torch.zeros(2, 4))
        >>> for v in torch.randn(3, 2, 4):
        ...     s = stack.push(v)
        >>> s.shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, capacity: int, like: torch.Tensor, *, dim: int = 1):
        super().__init__(capacity, like, dim)
        self._buffer = torch.empty(self.stacked_shape(capacity), dtype=like.dtype, device=like.device)
        self._top = self._buffer.data.narrow(self.dim, 0, 0)

    def __len__(self) -> int:
        return self._top.size(self.dim)

    def view(self) -> torch.Tensor:
        """Everything pushed so far, `[*F[:dim], n, *F[dim:]]` (a view: never modify it in place)."""
        return self._top

    def push(self, value: torch.Tensor) -> torch.Tensor:
        """Append one step's `value` `[*F]` and return the stack of all `n` values so far."""
        self._check(value, None, "value")
        self._top = _Append.apply(self._top, value, self, True)
        return self._top

    def extend(self, values: torch.Tensor) -> torch.Tensor:
        """Append `k` steps at once (e.g. the memory carried from the previous block) and return the stack.

        Shape:
            values `[*F[:dim], k, *F[dim:]]` -> `[*F[:dim], n, *F[dim:]]`.
        """
        self._check(values, 0, "values")
        self._top = _Append.apply(self._top, values, self, False)
        return self._top


class ListStack(_StackBase):
    """The same interface as `Stack`, built with `torch.stack` over a Python list at every step.

    The straightforward way, kept for comparison: each `push` copies the whole history ($O(n)$ per step),
    and autograd keeps every copy alive until the backward pass ($O(T^2)$ memory over a sequence).
    """

    def __init__(self, capacity: int, like: torch.Tensor, *, dim: int = 1):
        super().__init__(capacity, like, dim)
        self._values: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self._values)

    def view(self) -> torch.Tensor:
        """Everything pushed so far (a fresh tensor)."""
        if not self._values:
            return torch.empty(self.stacked_shape(0), dtype=self.dtype, device=self.device)
        return torch.stack(self._values, dim=self.dim)

    def push(self, value: torch.Tensor) -> torch.Tensor:
        """Append one step's `value` `[*F]` and return `torch.stack` of all values so far."""
        self._check(value, None, "value")
        self._values.append(value)
        return self.view()

    def extend(self, values: torch.Tensor) -> torch.Tensor:
        """Append `k` steps at once; see `Stack.extend`."""
        self._check(values, 0, "values")
        self._values.extend(values.unbind(self.dim))
        return self.view()


class StepLinear:
    r"""An `nn.Linear` applied step by step inside a recurrence, its weight gradient computed once per pass.

    Autograd would compute $\partial\mathcal{L}/\partial W$ at every step, an outer product of a few rows
    written to a full weight-sized tensor and added to the running sum. This computes, per step, only what
    the recurrence needs ($y_t = x_t W^\top + b$ forward, $g_t W$ backward), keeps $x_t$ and $g_t$ in
    buffers, and finishes with one large matrix product:
    $$\frac{\partial \mathcal{L}}{\partial W} = \sum_t g_t^\top x_t = G^\top X, \qquad
    \frac{\partial \mathcal{L}}{\partial b} = \sum_t g_t .$$
    The step gradients $g_t$ reach the buffer $G$ through a chain of zero-valued carrier tensors: each step
    writes its row and hands the buffer down, and the first (earliest) link computes the weight gradient
    once every later step is done. $G$ is allocated by each backward pass, so repeated and partial backward
    passes are exact. Double backward (`create_graph=True`) raises.

    Build one per forward pass (like `Stack`), with the number of steps it will be called.

    Args:
        linear: the layer whose weight and bias are used.
        steps: how many times it will be called.
        like: one step's input `[B, D_in]` (only its shape, dtype and device are used).
    """

    def __init__(self, linear: torch.nn.Linear, steps: int, like: torch.Tensor):
        self.linear, self.steps = linear, steps
        self._inputs = Stack(steps, like, dim=0)
        out = (steps, *like.shape[:-1], linear.out_features)
        self._carrier = _LinearRoot.apply(linear.weight, linear.bias, self, out)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: `[B, D_in]` -> `[B, D_out]`."""
        y, self._carrier = _LinearStep.apply(x, self._carrier, self)
        return y


class _LinearRoot(torch.autograd.Function):
    """Start of the carrier chain: zeros `[T, B, D_out]`; backward turns the step gradients `G` into dW, db."""

    @staticmethod
    def forward(ctx, weight, bias, step: StepLinear, shape: tuple[int, ...]) -> torch.Tensor:
        ctx.step = step
        ctx.set_materialize_grads(False)
        return weight.new_zeros(()).expand(shape)

    @staticmethod
    def backward(ctx, grads: torch.Tensor | None):
        _no_double_backward()
        if grads is None:
            return None, None, None, None
        x = ctx.step._inputs.view()  # [T, B, D_in]
        n = x.size(0)
        g, x = grads[:n].flatten(0, -2), x.flatten(0, -2)
        grad_w = g.t() @ x if ctx.needs_input_grad[0] else None
        grad_b = g.sum(0) if ctx.needs_input_grad[1] else None
        return grad_w, grad_b, None, None


class _LinearStep(torch.autograd.Function):
    """One step: `y = x W^T + b` and the next carrier link; backward writes `g_t` into row `t` of `G`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, carrier: torch.Tensor, step: StepLinear):
        lin, t = step.linear, len(step._inputs)
        step._inputs.push(x)  # grad mode is off here: a plain write into the input buffer
        ctx.t, ctx.steps = t, step.steps
        ctx.save_for_backward(lin.weight)
        ctx.set_materialize_grads(False)
        return torch.nn.functional.linear(x, lin.weight, lin.bias), carrier[1:]

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor | None, grad_rest: torch.Tensor | None):
        _no_double_backward()
        (weight,) = ctx.saved_tensors
        t = ctx.t
        grad_x = grad_y @ weight if grad_y is not None and ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:
            return grad_x, None, None
        if grad_y is None and grad_rest is None:
            return grad_x, None, None
        rows = grad_rest._base if grad_rest is not None else None
        if rows is None or rows.size(0) != ctx.steps or grad_rest.numel() == 0 or grad_rest.data_ptr() != rows[t + 1].data_ptr():
            # the first link this backward pass reaches, or a gradient that is not our buffer: start a buffer
            shape = (ctx.steps, *(grad_y if grad_y is not None else grad_rest).shape[-2:])
            rows = weight.new_zeros(shape)
            if grad_rest is not None:
                rows[t + 1 :].copy_(grad_rest)
        if grad_y is not None:
            rows[t].copy_(grad_y)
        return grad_x, rows[t:], None


def _no_double_backward() -> None:
    if torch.is_grad_enabled():
        raise RuntimeError(
            "StepLinear does not support double backward (create_graph=True); to differentiate twice, "
            "apply the nn.Linear itself (FeedbackKVConfig(batch_grads=False))"
        )
