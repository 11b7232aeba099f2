"""`labnn.feedback.stack`: Stack == torch.stack in values and gradients, in every usage that
breaks the naive trick."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from labnn.feedback.stack import ListStack, Stack
from labnn.feedback.step_linear import StepLinear

T, B, F = 6, 3, 4


def recurrence(x: torch.Tensor, stack_cls=Stack, dim: int = 1) -> torch.Tensor:
    """A tiny feedback recurrence: each step attends over the stack of all earlier
    states, then pushes its own.

    Shape: x `[T, B, F]` -> `[T, B, F]`. With `stack_cls=None` the stack is rebuilt with
        `torch.stack`
    (the reference).
    """
    states: list[torch.Tensor] = []
    stack = stack_cls(x.size(0), x[0], dim=dim) if stack_cls is not None else None
    s = None
    for t in range(x.size(0)):
        h = x[t]
        if t:
            mem = s.movedim(dim, 1)  # [B, t, F]
            w = torch.einsum("bf,bnf->bn", x[t], mem).softmax(-1)
            h = torch.tanh(x[t] + torch.einsum("bn,bnf->bf", w, mem))
        states.append(h)
        s = stack.push(h) if stack is not None else torch.stack(states, dim=dim)
    return torch.stack(states)


def reference_grad(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    (grad,) = torch.autograd.grad(recurrence(x, None), x, g)
    return grad


def inputs(
    seed: int, b: int = B, dtype=torch.float32, device="cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, b, F, generator=gen, dtype=dtype).to(device).requires_grad_()
    return x, torch.randn(T, b, F, generator=gen, dtype=dtype).to(device)


def devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("stack_cls", [Stack, ListStack])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_values_and_gradients_equal_torch_stack(stack_cls, dim):
    x, g = inputs(0)
    y = recurrence(x, stack_cls, dim)
    torch.testing.assert_close(y, recurrence(x, None, dim))
    (grad,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(grad, reference_grad(x, g))


def test_push_returns_views_of_one_buffer_that_never_change():
    stack = Stack(4, torch.zeros(2, 3))
    first = stack.push(torch.ones(2, 3))
    kept = first.clone()
    for i in range(3):
        latest = stack.push(torch.full((2, 3), float(i + 2)))
    assert latest.shape == (2, 4, 3) and first.data_ptr() == latest.data_ptr()
    torch.testing.assert_close(first, kept)
    torch.testing.assert_close(latest[:, 0], torch.ones(2, 3))
    assert first._version == 0


def test_two_forwards_before_their_backwards():
    (x1, g1), (x2, g2) = inputs(1), inputs(2)
    y1, y2 = recurrence(x1), recurrence(x2)
    (grad1,) = torch.autograd.grad(y1, x1, g1)
    (grad2,) = torch.autograd.grad(y2, x2, g2)
    torch.testing.assert_close(grad1, reference_grad(x1, g1))
    torch.testing.assert_close(grad2, reference_grad(x2, g2))


def test_no_grad_forward_between_forward_and_backward():
    x, g = inputs(3)
    y = recurrence(x)
    with torch.no_grad():  # sampling or validation in between
        recurrence(torch.randn(T, B, F))
    y.backward(g)
    torch.testing.assert_close(x.grad, reference_grad(x, g))


def test_backward_with_retain_graph_twice_accumulates_exactly():
    x, g = inputs(4)
    y = recurrence(x)
    y.backward(g, retain_graph=True)
    y.backward(g)
    torch.testing.assert_close(x.grad, 2 * reference_grad(x, g))


def test_autograd_grad_partial_outputs_and_repeated_calls():
    x, g = inputs(5)
    y = recurrence(x)
    (early,) = torch.autograd.grad(
        y[:3], x, g[:3], retain_graph=True
    )  # only the first 3 steps' outputs
    (full,) = torch.autograd.grad(y, x, g, retain_graph=True)
    (again,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(
        early, reference_grad(x, torch.cat([g[:3], torch.zeros_like(g[3:])]))
    )
    torch.testing.assert_close(full, reference_grad(x, g))
    torch.testing.assert_close(again, full)


def test_gradient_with_respect_to_an_intermediate_state():
    x, g = inputs(6)
    states: list[torch.Tensor] = []

    def hook_recurrence(x, stack_cls):
        nonlocal states
        states = []
        stack = Stack(T, x[0]) if stack_cls else None
        s, out = None, []
        for t in range(T):
            h = (
                x[t]
                if t == 0
                else torch.tanh(
                    x[t]
                    + (s * x[t, :, None]).sum(1, keepdim=True).softmax(1).mul(s).sum(1)
                )
            )
            states.append(h)
            out.append(h)
            s = stack.push(h) if stack else torch.stack(states, dim=1)
        return torch.stack(out)

    y = hook_recurrence(x, True)
    (got,) = torch.autograd.grad(y, states[2], g)
    y_ref = hook_recurrence(x, False)
    (want,) = torch.autograd.grad(y_ref, states[2], g)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", devices())
def test_batch_size_dtype_and_device_may_change_between_calls(device):
    x1, g1 = inputs(7, b=3)
    x2, g2 = inputs(8, b=5, dtype=torch.float64, device=device)
    y1, y2 = recurrence(x1), recurrence(x2)
    assert y2.dtype == torch.float64 and y2.device.type == device
    y2.backward(g2)
    y1.backward(g1)
    torch.testing.assert_close(x1.grad, reference_grad(x1, g1))
    torch.testing.assert_close(x2.grad, reference_grad(x2, g2))


def test_gradcheck_and_gradgradcheck_float64():
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(recurrence, (x,))
    assert torch.autograd.gradgradcheck(recurrence, (x,))


def test_longer_than_any_fixed_capacity():
    x = torch.randn(600, 1, 2, requires_grad=True)
    stack = Stack(600, x[0])
    for t in range(600):
        s = stack.push(x[t] * 2)
    assert s.shape == (1, 600, 2)
    (s * torch.arange(600.0)[:, None]).sum().backward()
    torch.testing.assert_close(
        x.grad, 2 * torch.arange(600.0)[:, None, None].expand(600, 1, 2)
    )


def test_extend_then_push_gives_gradient_to_both():
    prefix = torch.randn(B, 3, F, requires_grad=True)
    value = torch.randn(B, F, requires_grad=True)
    stack = Stack(4, value)
    stack.extend(prefix)
    s = stack.push(value)
    weights = torch.arange(4.0)[None, :, None]
    (s * weights).sum().backward()
    torch.testing.assert_close(prefix.grad, weights[:, :3].expand(B, 3, F))
    torch.testing.assert_close(value.grad, torch.full((B, F), 3.0))
    assert len(stack) == 4


@pytest.mark.parametrize("stack_cls", [Stack, ListStack])
def test_bad_input_errors(stack_cls):
    with pytest.raises(ValueError, match="capacity must be a positive int, got 0"):
        stack_cls(0, torch.zeros(2))
    with pytest.raises(TypeError, match="like must be a torch.Tensor"):
        stack_cls(2, [0.0, 1.0])
    with pytest.raises(ValueError, match="dim=3 is out of range"):
        stack_cls(2, torch.zeros(2, 2), dim=3)
    stack = stack_cls(2, torch.zeros(2, 3))
    with pytest.raises(
        ValueError, match=r"value has shape \[3, 3\], expected \[2, 3\]"
    ):
        stack.push(torch.zeros(3, 3))
    with pytest.raises(
        TypeError,
        match="value has dtype torch.float64, but this stack holds torch.float32",
    ):
        stack.push(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError, match="value is on meta, but this stack lives on cpu"
    ):
        stack.push(torch.zeros(2, 3, device="meta"))
    with pytest.raises(
        ValueError,
        match=r"values has shape \[2, 3\], expected \[2, "
        r"k, 3\]",
    ):
        stack.extend(torch.zeros(2, 3))
    stack.extend(torch.zeros(2, 2, 3))
    with pytest.raises(IndexError, match="stack is full: it holds 2 of 2 steps"):
        stack.push(torch.zeros(2, 3))


def test_modifying_a_returned_view_in_place_is_an_error():
    stack = Stack(2, torch.zeros(2, 3))
    s = stack.push(torch.ones(2, 3, requires_grad=True))
    with pytest.raises(RuntimeError, match="view"):
        s.mul_(2)


def linear_recurrence(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, batched: bool
) -> torch.Tensor:
    """h_t = W tanh(x_t + h_{t-1}[:, :F]) + b, with the Linear applied per step or
    through a StepLinear."""
    lin = SimpleNamespace(weight=weight, bias=bias, out_features=weight.size(0))
    step = (
        StepLinear(lin, x.size(0), x[0])
        if batched
        else (lambda z: torch.nn.functional.linear(z, weight, bias))
    )
    h, outs = torch.zeros(x.size(1), weight.size(0), dtype=x.dtype), []
    for t in range(x.size(0)):
        h = step(torch.tanh(x[t] + h[:, : x.size(2)]))
        outs.append(h)
    return torch.stack(outs)


def linear_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, F, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(F + 2, F, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(F + 2, generator=gen, dtype=torch.float64, requires_grad=True)
    return x, w, b, torch.randn(T, B, F + 2, generator=gen, dtype=torch.float64)


def test_step_linear_gradients_equal_per_step_linear_even_twice_and_partially():
    x, w, b, g = linear_inputs()
    want = torch.autograd.grad(linear_recurrence(x, w, b, False), (x, w, b), g)
    y = linear_recurrence(x, w, b, True)
    for _ in range(
        2
    ):  # a second backward pass over the same graph gets its own gradient buffer
        for got, ref in zip(
            torch.autograd.grad(y, (x, w, b), g, retain_graph=True), want
        ):
            torch.testing.assert_close(got, ref)
    early_want = torch.autograd.grad(
        linear_recurrence(x, w, b, False)[:2], (w, b), g[:2]
    )
    for got, ref in zip(torch.autograd.grad(y[:2], (w, b), g[:2]), early_want):
        torch.testing.assert_close(got, ref)


def test_step_linear_gradcheck_and_double_backward_error():
    x, w, b, _ = linear_inputs(1)
    assert torch.autograd.gradcheck(lambda *a: linear_recurrence(*a, True), (x, w, b))
    y = linear_recurrence(x, w, b, True).sum()
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(y, w, create_graph=True)


def test_step_linear_under_autocast_equals_per_step_linear():
    """Under `torch.autocast` a linear map computes in autocast's dtype: StepLinear kept its
    inputs in a stack of the input's dtype and refused them ("value has dtype torch.bfloat16,
    but this stack holds torch.float32"). Now it computes as `F.linear` does under autocast,
    and returns gradients of each parameter's own dtype (bfloat16 rounding: loose
    tolerance)."""
    x, w, b, g = (t.detach().float().requires_grad_(t.requires_grad) for t in linear_inputs())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want_y = linear_recurrence(x, w, b, False)
        got_y = linear_recurrence(x, w, b, True)
    assert got_y.dtype == want_y.dtype == torch.bfloat16
    torch.testing.assert_close(got_y, want_y, rtol=0, atol=0)
    want = torch.autograd.grad(want_y, (x, w, b), g.to(want_y.dtype))
    got = torch.autograd.grad(got_y, (x, w, b), g.to(got_y.dtype))
    for got_, want_ in zip(got, want):
        assert got_.dtype == torch.float32
        torch.testing.assert_close(got_, want_, rtol=2e-2, atol=5e-2)
