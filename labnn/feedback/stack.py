r"""A growing stack of per-step tensors that grows in O(1) per step, with exact gradients.

Dimension letters (the package legend): `B` batch, `H` heads, `C` capacity (steps the
buffer can hold), `D_h` head width; `n` counts the steps pushed so far and `E` stands for
the shape of one pushed value (`[*E]`, its elements).

A recurrent model that attends over its own past (the Feedback Transformer) needs, at
every step `t`, the stack $S_t = [v_0, \dots, v_t]$ of everything pushed so far.
`torch.stack` over a Python list builds $S_t$ from scratch each step: $O(t)$ copying per
step, $O(T^2)$ per sequence, and autograd keeps every copy alive for the backward pass.
`Stack` instead writes each value once into a buffer allocated for the whole pass and
returns views of its growing prefix: a push copies one step, whatever the stack holds.
The backward pass is not constant per step: each prefix $S_t$ hands its gradient, `t + 1`
slots, down the chain to $S_{t-1}$, O(t) per step as with `torch.stack` (per step 57, 93
and 161 µs at `T` = 500, 1,000 and 2,000, one step `[1, 256]`, each step reading its
newest slot; a 2-core x86_64 VM shared with other jobs, 2026-11-30). What `Stack` saves
is the forward's copying and the copies autograd keeps. The gradient is what
`torch.stack` would give:
$$\frac{\partial \mathcal{L}}{\partial v_j} = \sum_{t \ge j}
\frac{\partial \mathcal{L}}{\partial S_t[j]} .$$

How it stays correct (each point closes a way the widely copied version of this trick
goes wrong):

* One `Stack` per forward pass, sized for that pass (memory + block) and shaped, typed
  and placed like its values: a second forward, a `no_grad` forward, or another batch
  size, dtype or device builds its own buffer and never touches a buffer an earlier
  graph still needs.
* Append-only: a slot is written exactly once, before any view that covers it exists, so
  the bytes behind every view handed out never change afterwards.
* No gradient state outside autograd: each append's backward is a pure function of its
  incoming gradient (slice off the new slots, pass the rest down the chain), so
  `backward(retain_graph=True)` twice, `torch.autograd.grad`, partial graphs and double
  backward are exact.
* Clear errors for misuse: pushing past the capacity, or a value of another shape, dtype
  or device.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_int, int_error, is_int


class _Append(torch.autograd.Function):
    r"""Write `values` into the buffer after the `n` slots of `top` and return the
    prefix of `n + k` slots.

    Autograd sees a chain $S_{t-1}, v_t \mapsto S_t$. Backward splits the incoming
    gradient $g = \partial\mathcal{L} / \partial S_t$ along the step dimension: the
    first `n` slots go to $S_{t-1}$ (where autograd adds them to the gradient of every
    other reader of $S_{t-1}$), the new slots go to $v_t$.
    """

    @staticmethod
    def forward(ctx, top: torch.Tensor, values: torch.Tensor, stack: Stack, one: bool):
        r"""Copy `values` into the free slots after `top` and return the longer prefix,
        a view of the buffer (autograd records this call as
        $S_{t-1}, v_t \mapsto S_t$).
        """
        dim, n = stack.dim, top.size(stack.dim)
        k = 1 if one else values.size(dim)
        stack._buffer.narrow(dim, n, k).copy_(values.unsqueeze(dim) if one else values)
        ctx.dim, ctx.n, ctx.k, ctx.one = dim, n, k, one
        # `.data` gives a fresh alias of the buffer with its own version counter: the
        # write above and later appends (which touch only slots past this prefix) leave
        # every prefix view's version unchanged.
        return stack._buffer.data.narrow(dim, 0, n + k)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Split the incoming gradient along the step dimension: the first `n` slots
        to the shorter prefix $S_{t-1}$, the new ones to the appended values.
        """
        need_top, need_values = ctx.needs_input_grad[:2]
        grad_top = grad.narrow(ctx.dim, 0, ctx.n) if need_top else None
        if not need_values:
            return grad_top, None, None, None
        if ctx.one:
            return grad_top, grad.select(ctx.dim, ctx.n), None, None
        grad_values = grad.narrow(ctx.dim, ctx.n, ctx.k)
        return grad_top, grad_values, None, None


def eager_under_compile(fn):
    """`torch.compiler.disable(fn)`, applied at `fn`'s first call rather than at import.

    `torch.compiler.disable` imports `torch._dynamo` as it decorates: about as long as
    `import torch` itself (4.2 and 7.9 s after 3.3 and 7.6 s for `import torch`, in two
    runs on a 2-core x86_64 VM shared with other jobs, torch 2.13.0, 2026-11-30), paid by
    every process that loads a feedback model, the command line and the notebooks among
    them, whether or not it ever compiles. `torch._disable_dynamo` is the form torch
    applies to its own functions for this reason (the compiler treats it as `disable`);
    it has no public name, so where a torch lacks it this falls back to
    `torch.compiler.disable`.
    """
    lazy = getattr(torch, "_disable_dynamo", None)
    return lazy(fn) if lazy is not None else torch.compiler.disable(fn)


class StackBase:
    """Argument checks shared by `Stack` and `ListStack`."""

    def __init__(self, capacity: int, like: torch.Tensor, dim: int):
        """Check the arguments once: a positive capacity, one step's value as a tensor, a
        valid `dim`; remember its shape, dtype and device.
        """
        check_int("capacity", capacity)
        if not isinstance(like, torch.Tensor):
            raise TypeError("like must be a torch.Tensor (one step's value), got "
                            f"{type(like).__name__}")
        if not is_int(dim) or not -like.dim() - 1 <= dim <= like.dim():
            raise int_error(dim)(
                f"dim={dim!r} is out of range for values with {like.dim()} dimensions")
        self.capacity, self.dim = capacity, dim % (like.dim() + 1)
        self.item_shape = like.shape  # one pushed value's
        self.dtype, self.device = like.dtype, like.device

    def __len__(self) -> int:
        """How many steps have been pushed so far."""
        raise NotImplementedError

    def stacked_shape(self, n: int | str) -> tuple:
        """Shape of `n` stacked steps: `[*E[:dim], n, *E[dim:]]`."""
        return (*self.item_shape[: self.dim], n, *self.item_shape[self.dim :])

    def _check(self, value: torch.Tensor, k: int | None, name: str) -> int:
        """Validate one step (`k` None) or a block of steps; return how many steps it
        adds."""
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise TypeError(
                f"{name} has dtype {value.dtype}, but this stack holds {self.dtype}")
        if value.device != self.device:
            raise ValueError(
                f"{name} is on {value.device}, but this stack lives on {self.device}")
        if k is None:
            want, k = tuple(self.item_shape), 1
        else:
            k = value.size(self.dim) if value.dim() == len(self.item_shape) + 1 else "k"
            want = self.stacked_shape(k)
        if tuple(value.shape) != tuple(want):
            shown = "[" + ", ".join(str(n) for n in want) + "]"
            raise ValueError(f"{name} has shape {list(value.shape)}, expected {shown}")
        if len(self) + k > self.capacity:
            raise IndexError(
                f"stack is full: it holds {len(self)} of {self.capacity} steps and "
                f"cannot take {k} more; build each forward pass's stack with the pass's "
                "full length (memory + block)"
            )
        return k


class Stack(StackBase):
    """Append-only buffer for one forward pass; `push` returns the stack of everything
    pushed so far.

    Build a new `Stack` for every forward pass (never keep one on a module): its buffer
    holds exactly `capacity` steps shaped, typed and placed like `like`.

    `torch.compile` runs the methods that write (`__init__`, `push`, `extend`) eagerly
    (`eager_under_compile`): each prefix is a view of the buffer taken through
    `.data`, an alias that the compiler's autograd tracing refuses ("non-differentiable
    view input mutations").

    Args:
        capacity: the most steps it will hold (e.g. memory length + block length); any
            positive int.
        like: one step's value (only its shape, dtype and device are used).
        dim: where the step dimension goes in the stacked result, as in
            `torch.stack(values, dim)`.

    Shape:
        `push(value)`: value `[*E]` -> `[*E[:dim], n, *E[dim:]]`; e.g. keys
        `[B, H, D_h]` with `dim=2` stack to `[B, H, n, D_h]`, whose `(B, H)`
        dimensions merge into one batch dimension without a copy.

    Examples:
        >>> stack = Stack(3, torch.zeros(2, 4))
        >>> for v in torch.randn(3, 2, 4):
        ...     s = stack.push(v)
        >>> s.shape
        torch.Size([2, 3, 4])
    """

    @eager_under_compile
    def __init__(self, capacity: int, like: torch.Tensor, *, dim: int = 1):
        super().__init__(capacity, like, dim)  # the buffer, then its empty prefix
        self._buffer = like.new_empty(self.stacked_shape(capacity))
        self._top = self._buffer.data.narrow(self.dim, 0, 0)

    def __len__(self) -> int:
        """How many steps have been pushed so far (the prefix's length)."""
        return self._top.size(self.dim)

    def view(self) -> torch.Tensor:
        """Everything pushed so far, `[*E[:dim], n, *E[dim:]]` (a view: never modify it
        in place)."""
        return self._top

    @eager_under_compile
    def push(self, value: torch.Tensor) -> torch.Tensor:
        """Append one step's `value` `[*E]` and return the stack of all `n` values so
        far."""
        self._check(value, None, "value")
        self._top = _Append.apply(self._top, value, self, True)
        return self._top

    @eager_under_compile
    def extend(self, values: torch.Tensor) -> torch.Tensor:
        """Append `k` steps at once (e.g. the memory carried from the previous block)
        and return the stack.

        Shape:
            values `[*E[:dim], k, *E[dim:]]` -> `[*E[:dim], n, *E[dim:]]`.
        """
        self._check(values, 0, "values")
        self._top = _Append.apply(self._top, values, self, False)
        return self._top


class ListStack(StackBase):
    """The same interface as `Stack`, built with `torch.stack` over a Python list at
    every step.

    The straightforward way, kept for comparison: each `push` copies the whole history
    ($O(n)$ per step), and autograd keeps every copy alive until the backward pass
    ($O(T^2)$ memory over a sequence).
    """

    def __init__(self, capacity: int, like: torch.Tensor, *, dim: int = 1):
        """An empty Python list of pushed values."""
        super().__init__(capacity, like, dim)
        self._values: list[torch.Tensor] = []

    def __len__(self) -> int:
        """How many steps have been pushed so far."""
        return len(self._values)

    def view(self) -> torch.Tensor:
        """Everything pushed so far (a fresh tensor)."""
        if not self._values:
            shape = self.stacked_shape(0)
            return torch.empty(shape, dtype=self.dtype, device=self.device)
        return torch.stack(self._values, dim=self.dim)

    def push(self, value: torch.Tensor) -> torch.Tensor:
        """Append one step's `value` `[*E]` and return `torch.stack` of all values so
        far."""
        self._check(value, None, "value")
        self._values.append(value)
        return self.view()

    def extend(self, values: torch.Tensor) -> torch.Tensor:
        """Append `k` steps at once; see `Stack.extend`."""
        self._check(values, 0, "values")
        self._values.extend(values.unbind(self.dim))
        return self.view()
