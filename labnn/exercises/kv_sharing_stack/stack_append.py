"""Checker for notebook 04's Exercise 4, `Append`: the autograd Function behind
`labnn.feedback.stack.Stack`.

Dimension letters (the package legend, plus two of this exercise): `T` steps, `B` batch,
`F` features of one step, `C` buffer capacity. Positions in messages use the lower-case
letters of the result's own dimensions, e.g. `at [t=3, b=0, f=1]`.

The learner's `Append` runs inside a small recurrence and is compared with autograd
through `torch.stack`; when it differs, the typical mistakes (the prefix's gradient
dropped, the oldest slot's gradient handed to the new value, slots split newest first,
a copy instead of a view of the buffer, the value's gradient summed over every slot or
left None, ...) are recomputed to say which one was made. The slips named from one direct
call or from an error of autograd (a slot one off, `n` read from the wrong axis of `top`, a
saved buffer written in place, `ctx.mark_dirty`) are in `stack_append_slips`; the gradient of
`top`, the caller's `grad` and a second backward are checked in `append_state`.
"""

from __future__ import annotations

import inspect
import re
from typing import Callable

import torch

from labnn.exercises.grading import (close, exercise, expect_close, expect_like, expect_tensor,
                                     expect_unchanged, fail, running, shares_memory, snapshot,
                                     expect_any_device)

from labnn.exercises.kv_sharing_stack import (fresh_rounds, input_rounds, large_rounds,
                                              other_sizes)
from labnn.exercises.kv_sharing_stack.custom_backward import (
    B, F, T, _diagnose, _expect_function_class, _randn)
from labnn.exercises.kv_sharing_stack.custom_backward_slips import (
    ctx_attribute_unset, expect_float64_gradient, expect_kept, expect_not_half,
    wrong_gradient_count)
from labnn.exercises.kv_sharing_stack.stack_append_slips import (
    B1, C1, F1, N1, backward_returns_list, batch_axis_sliced, buffer_gradient, gradient_shape,
    index_past_the_end, last_slot_refused, marked_dirty, one_append_inputs, past_the_end,
    saved_buffer_written, slot_slips)
from labnn.exercises.kv_sharing_stack.append_writes import (
    expect_first_push, expect_length_from_top, expect_one_slot_written, expect_slot_overwritten,
    float32_backward)
from labnn.exercises.kv_sharing_stack.append_state import (
    expect_grad_left_alone, expect_second_backward, expect_split_gradients,
    expect_top_gradient, expect_twice_differentiable)


def _source(f) -> str:
    """`f`'s source, or "" where Python cannot find it."""
    try:
        return inspect.getsource(f)
    except (OSError, TypeError):
        return ""


def _recurrence(x: torch.Tensor, push: Callable | None) -> torch.Tensor:
    """Each step attends over the stack of earlier states (reference: `torch.stack`),
    then pushes its own."""
    states, s = [], None
    buffer = x.new_empty(x.size(1), x.size(0), x.size(2))  # [B, C, F], C = T
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
    """Call `Append.apply` once, directly: a view of the buffer, the value in slot n,
    n+1 slots; at sizes B, n, C, F that no slip can mix up (`stack_append_slips`)."""
    buffer, top = one_append_inputs(seed=20)
    value = _randn(B1, F1, seed=21).requires_grad_()
    before = snapshot(value=value, top=top)
    what = f"Append.apply(top [B, n, F] = {list(top.shape)}, value, buffer)"
    with running(what, diagnose=lambda err: marked_dirty(err) or past_the_end(err)):
        out = expect_tensor(fn.apply(top, value, buffer), what)
    expect_kept(before, what, "copy it as it is into the slot: buffer[:, n].copy_(value).",
                value=value)
    expect_unchanged(before, what, value=value)
    slot_slips(out, buffer, value, what)
    n = N1
    whole = tuple(out.shape) == tuple(buffer.shape)
    if whole and torch.equal(out.detach()[:, :n + 1], buffer.data[:, :n + 1]):
        fail(f"{what} returns the whole buffer, all its slots, [B, C, F] = {list(out.shape)}: "
             "return only the stack so far, its first n + 1 slots, [B, n+1, F]: "
             "buffer.data[:, :n + 1].")
    expect_like(out, buffer.data[:, :n + 1], what,
                sizes={"B": B1, "n+1": n + 1, "F": F1, "C": C1})
    if shares_memory(out, buffer) and out.data_ptr() != buffer.data_ptr():
        start = (out.data_ptr() - buffer.data_ptr()) // (buffer.element_size() * F1)
        fail(f"{what} returns a view of the buffer starting at slot {start}, not 0"
             + (" (one slot off?)" if start == 1 else "") + ": write the value into "
             "buffer[:, n] and return buffer.data[:, :n + 1].")
    if not shares_memory(out, buffer):
        fail(f"{what} returns a new tensor (a copy), not a view of the buffer: copying "
             "the prefix each step is the O(T) cost the buffer removes. Write into "
             "buffer[:, n], return buffer.data[:, :n + 1].")
    if not torch.equal(buffer[:, n], value.detach()):
        if torch.equal(buffer[:, C1 - 1], value.detach()):
            fail(f"{what} wrote the value into slot -1, the buffer's last slot, instead of "
                 "slot n: the n old values fill slots 0..n-1, so the new one goes into "
                 "buffer[:, n].")
        for low, call in ((torch.float32, ".float()"), (torch.float16, ".half()"),
                          (torch.bfloat16, ".bfloat16()")):
            if torch.equal(buffer[:, n], value.detach().to(low).to(buffer.dtype)):
                fail(f"{what}: slot n holds the value rounded to {str(low)[6:]} (a {call} on "
                     f"the way): the buffer is float64; no {call}, "
                     "buffer[:, n].copy_(value).")
        fail(f"{what} did not write the value into buffer[:, n]: copy it there "
             "(buffer[:, n].copy_(value)), so that later prefixes see it too.")
    expect_unchanged(before, what, top=top)
    expect_slot_overwritten(fn, what)  # slot n not zeros: += is not a copy
    expect_length_from_top(fn, what)  # n from the buffer's values, not top.size(1)
    # again with other values of these sizes: a prefix kept between calls (`fresh_rounds`)
    fresh_rounds.append(fn, _randn(B1, F1, seed=21).requires_grad_(),
                        one_append_inputs(seed=20)[0], N1)
    # Again with a `top` whose values differ from the buffer's first n slots, and a sentinel
    # after slot n: Append may read only top's size and write only slot n (`append_writes`).
    expect_one_slot_written(fn, what)
    expect_first_push(fn)


@exercise("the Append function (a stack with a preallocated buffer)",
          refuse=input_rounds.OWN_STACK)
def check_append(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function`: `fn.apply(top, value, buffer)` writes value
    `[B, F]` into `buffer[:, n]` (`n = top.size(1)`) and returns the prefix `[B, n+1,
    F]`, a view of the buffer; backward splits the gradient."""
    _expect_function_class(fn, "Append")
    _check_one_append(fn)
    x = _randn(T, B, F, seed=3).requires_grad_()
    g = _randn(T, B, F, seed=4)
    want = _recurrence(x, None)

    stage = ["forward"]

    def append_error(err: Exception) -> None:
        """Name the known mistakes behind an error of autograd."""
        if stage[0] == "forward":
            last_slot_refused(fn, err)  # the recurrence fills its buffer to the last slot
        ctx_attribute_unset(err, "Append")
        if isinstance(err, IndexError) and stage[0] == "backward":
            index_past_the_end(fn, err)
            batch_axis_sliced(err)
        if not isinstance(err, RuntimeError):
            return
        if "inplace" in str(err) or "version" in str(err):
            saved_buffer_written(fn)
            if ".detach()" in _source(fn.forward):
                fail("autograd saw the buffer change under a saved prefix: buffer.detach() "
                     "shares buffer's version counter, so a write through it still counts; "
                     "write and return views of `buffer.data`, an alias with its own.")
            fail("autograd saw the buffer change under a saved prefix: return a view "
                 "of `buffer.data` (a "
                 "detached alias with its own version counter), not of `buffer` itself.")
        if wrong_gradient_count(err):
            source = _source(fn.backward)  # a def without return, not a lambda
            if "got 1)" in str(err) and "def " in source and not re.search(r"\breturn\b",
                                                                          source):
                fail("Append.backward returned None (a missing return?): it must return "
                     "three gradients: grad[:, :n] for top, grad[:, n] for value, None "
                     "for buffer.")
            backward_returns_list(fn, err)
            fail(f"backward must return one gradient per input of forward: (for top, "
                 f"for value, None for "
                 f"buffer): {err}")
        gradient_shape(err)

    with running("Append.apply in a recurrence, forward and backward",
                 diagnose=append_error):
        got = _recurrence(x, fn.apply)
        expect_close(got, want, "the outputs of a recurrence using Append",
                     dims="t b f")
        stage[0] = "backward"
        (grad,) = torch.autograd.grad(got, x, g)
    (ref,) = torch.autograd.grad(want, x, g)
    mistakes = []
    for mistake, message in [
        (_AppendWithoutPrefixGradient, "gradients stop at the newest value: backward "
                                       "must also return grad[:, :n] for `top`, so the "
                                       "earlier values (reached through the previous "
                                       "prefix) get theirs."),
        (_AppendOldestSlotGradient, "backward hands `value` the gradient of slot 0: "
                                    "the value sits in slot n, so its gradient is "
                                    "grad[:, n]."),
        (_AppendPreviousSlotGradient, "backward hands `value` the gradient of slot "
                                      "n - 1, the newest OLD value: the value sits in "
                                      "slot n, so its gradient is grad[:, n]."),
        (_AppendSummedGradient, "backward hands `value` the gradient summed over all "
                                "slots: the value sits in slot n only, so its gradient "
                                "is grad[:, n]."),
        (_AppendNoValueGradient, "backward returns None for `value`, so the pushed values "
                                 "get no gradient from the stack: return grad[:, n] for "
                                 "`value` (slot n holds it); only `buffer` gets None."),
        (_AppendNewestFirstGradient, "backward splits the gradient newest first "
                                     "(grad[:, 1:] for `top`, grad[:, 0] for `value`): "
                                     "the slots are oldest first, so `top` gets "
                                     "grad[:, :n] and `value` grad[:, n]."),
    ]:
        (wrong,) = torch.autograd.grad(_recurrence(x, mistake.apply), x, g)
        mistakes.append((wrong, message))
    if not close(grad, ref):
        expect_grad_left_alone(fn)  # grad written in place, or no grad_fn: named first
    _diagnose(grad, ref, mistakes)
    expect_not_half(grad, ref, "the gradient through Append", "Append.backward", "grad")
    if not close(grad, ref):
        expect_split_gradients(fn)  # which of the two is wrong, and how
    expect_close(grad, ref, "the gradient through Append (d loss / d x, x [T, B, F] the states "
                 "of a recurrence that pushes them; torch.stack's as the reference: check how "
                 "backward splits grad)", dims="t b f")
    expect_float64_gradient(grad, ref, "the gradient through Append (d loss / d x)",
                            "Append.backward", "grad")
    buffer_gradient(fn)
    expect_top_gradient(fn)
    expect_second_backward(fn, _recurrence, x, g, ref)
    expect_twice_differentiable(fn)
    other_sizes.append(fn, _recurrence)
    large_rounds.append(fn)  # a value and a gradient up to about 1e6: a clamp shows
    later = input_rounds.append(fn, _recurrence)  # B = 1, F = 1
    float32_backward(fn)
    expect_any_device(lambda x, g: torch.autograd.grad(_recurrence(x, fn.apply), x, g)[0],
                      "Append in a recurrence (forward and backward)", x, g)  # x on a GPU
    input_rounds.on_devices(later)  # then each extra round's inputs: a branch for their sizes


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
    """A typical mistake, recomputed for the diagnosis: the value gets the gradient of
    slot 0."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, 0], None


class _AppendNewestFirstGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the gradient split as if the
    newest slot came first."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, 1:], grad[:, 0], None


class _AppendPreviousSlotGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the value gets the gradient of
    slot n - 1."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n - 1], None


class _AppendSummedGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the value gets the gradient of
    every slot, summed."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], grad.sum(1), None


class _AppendNoValueGradient(_AppendWithoutPrefixGradient):
    """A typical mistake, recomputed for the diagnosis: the value gets no gradient."""

    @staticmethod
    def backward(ctx, grad):
        return grad[:, : ctx.n], None, None
