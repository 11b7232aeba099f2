"""Slips of notebook 04's Exercise 4, `Append`, named from one direct call or from an error
of autograd: the value written into (or the prefix cut at) the wrong slot, the prefix
returned newest first, a slot past the end, a capacity check that refuses the last slot, a
saved buffer that the next `Append` writes into, and a backward that slices the batch axis,
returns a list, gradients of the wrong shape or one for the buffer.

Dimension letters (the package legend, plus one of this exercise): `B` batch, `n` the
stack's current length, `C` buffer capacity, `F` features of one step. The direct call's
sizes `B, n, C, F = 2, 5, 12, 8` differ pairwise by more than one, so that a length read
from the wrong axis of `top` (`top.size(0)`, `top.size(-1)`) is not mistaken for a slot
one off, or the other way round.
"""

from __future__ import annotations

import re

import torch

from labnn.exercises.grading import close, fail, first_line, shares_memory

from labnn.exercises.kv_sharing_stack.custom_backward import _randn

B1, N1, C1, F1 = 2, 5, 12, 8  # the direct call's B, n, C, F


def one_append_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A buffer `[B, C, F]` whose first n slots hold earlier values, and its prefix."""
    buffer = torch.zeros(B1, C1, F1, dtype=torch.float64)
    buffer[:, :N1] = _randn(B1, N1, F1, seed=seed)
    return buffer, buffer.data[:, :N1]


def past_the_end(err: Exception) -> None:
    """Slot C = buffer.size(1) written (the capacity taken for the length n), or a slot
    number used on the batch axis."""
    said = f"index {C1} is out of bounds for dimension 1 with size {C1}"
    if isinstance(err, IndexError) and said in str(err):
        fail(f"Append.forward indexes slot {C1} = buffer.size(1), the buffer's capacity C "
             f"(every slot, filled or not): n is top.size(1) = {N1}, the stack's current "
             "length, and the value goes into buffer[:, n].")
    if isinstance(err, IndexError) and f"dimension 0 with size {B1}" in str(err):
        fail(f"Append.forward indexed dimension 0 of size B = {B1}, the batch axis, with a "
             f"slot number: buffer is [B, C, F] = {[B1, C1, F1]}, so write slot n with "
             f"buffer.data[:, n] = value. (torch said: {err})")


def last_slot_refused(fn, err: Exception) -> None:
    """Append raising `err` where the value goes into the buffer's last slot, n = C - 1,
    and not one slot before: a capacity check off by one (`n >= C - 1` for full)."""
    def raises(n: int) -> bool:
        buffer = one_append_inputs(seed=28)[0]
        try:
            fn.apply(buffer.data[:, :n], _randn(B1, F1, seed=29), buffer)
        except Exception:
            return True
        return False
    if raises(C1 - 1) and not raises(C1 - 2):
        fail(f"Append raised {type(err).__name__} ({first_line(err, 60)}) for the push into "
             f"the buffer's last slot, n = C - 1 (n = {C1 - 1}, C = {C1}): a buffer [B, C, "
             "F] holds C values, slots 0..C-1, so it is full only once n == C; a capacity "
             "check off by one (n >= C - 1, or n + 1 >= C)? Refuse n >= C only.")


def marked_dirty(err: Exception) -> None:
    """`ctx.mark_dirty(buffer)`, refused by autograd since forward returns a view of the
    buffer, not the buffer itself."""
    if isinstance(err, RuntimeError) and "marked as dirty" in str(err):
        fail("Append.forward calls ctx.mark_dirty(buffer), which declares that forward returns "
             "the changed buffer itself, whole; it returns a view of n + 1 slots, so autograd "
             "refuses. Drop mark_dirty: write the slot, return buffer.data[:, :n + 1].")


def slot_slips(out: torch.Tensor, buffer: torch.Tensor, value: torch.Tensor,
               what: str) -> None:
    """The value written into slot B or F (n read from the wrong axis of `top`), or into
    slot n ± 1, or a prefix of n or n + 2 slots: one off; an n counted apart from `top`
    (slot 0 written though top holds 5); or the prefix returned newest first (`.flip(1)`)."""
    slots = [s for s in range(C1) if torch.equal(buffer[:, s], value.detach())]
    s = slots[0] if slots else None
    k = out.size(1) if out.dim() == 3 and (out.size(0), out.size(2)) == (B1, F1) else None
    for size, axis in ((B1, "top.size(0) (or len(top)) is the batch size B"),
                       (F1, "top.size(-1) is the features F")):
        if s == size or (s is None and k == size + 1):
            fail(f"{what}: n = {axis} = {size}; top is [B, n, F], so the stack's length "
                 f"is n = top.size(1) = {N1}.")
    if shares_memory(out, buffer) and out.data_ptr() != buffer.data_ptr():
        return  # a view shifted by some slots: named by its start
    off = []
    if s in (N1 - 1, N1 + 1):
        off.append("writes slot " + (
            "n - 1, overwriting the newest old value" if s < N1 else "n + 1, one too far"))
    if k in (N1, N1 + 2):
        off.append("returns [B, n, F]: the prefix must include the new slot" if k == N1
                   else "returns n + 2 slots, one too many")
    if off:
        fail(f"{what} is off by one: it {'; it '.join(off)}. The n old values fill slots "
             "0..n-1: write the value into buffer[:, n], return buffer.data[:, :n + 1].")
    if s is not None and k == s + 1 and s < N1 - 1:
        fail(f"{what} writes slot {s} and returns {k} slot{'s' * (k > 1)}, though top "
             f"already holds n = {N1}: n is top's length, top.size(1), read at every call "
             "(a count kept between calls, on the class or in a global?).")
    prefix = buffer.data[:, :N1 + 1]
    if k == N1 + 1 and not shares_memory(out, buffer) and close(out, prefix.flip(1)):
        fail(f"{what} returns the stack newest first (.flip(1), or the slots in reverse): "
             "slot j holds v_j, oldest first, in the order of the positions the attention "
             "reads, and a reversed prefix is a copy (torch has no reversed view): return "
             "buffer.data[:, :n + 1] as it is.")


def saved_buffer_written(fn) -> None:
    """Autograd refused a saved tensor changed in place: name the learner's own save of the
    buffer (or of a view of `buffer`), which the next Append writes into."""
    buffer, top = one_append_inputs(seed=25)
    try:
        with torch.enable_grad():
            out = fn.apply(top, _randn(B1, F1, seed=26).requires_grad_(), buffer)
        buffer[:, N1 + 1] = 1.0  # the next Append's write
        _ = out.grad_fn.saved_tensors  # unpacking checks each saved tensor's version
    except RuntimeError as err:
        if "modified by an inplace operation" in str(err):
            fail("Append.forward saves the buffer (ctx.save_for_backward(buffer), or a view "
                 "of it), and the next Append writes into the buffer in place: autograd "
                 "refuses a saved tensor whose version changed since. Save no tensor: "
                 "backward needs only n, kept as ctx.n = n.")
    except Exception:
        return


def index_past_the_end(fn, err: IndexError) -> None:
    """Backward indexed past the n + 1 slots of grad: name the length saved on ctx when
    forward saved the new one, n + 1, or the buffer's capacity C, instead of n."""
    if "out of bounds for dimension 1" not in str(err):
        return
    saved, capacity = [], []
    buffer, top = one_append_inputs(seed=27)
    try:
        with torch.enable_grad():
            out = fn.apply(top, _randn(B1, F1, seed=24).requires_grad_(), buffer)
        ints = {k: v for k, v in vars(out.grad_fn).items() if type(v) is int}
        saved = [k for k, v in ints.items() if v == N1 + 1]
        capacity = [k for k, v in ints.items() if v == C1]
    except Exception:
        pass
    said = f" (torch said: {err})."
    if capacity:
        fail(f"forward saved ctx.{capacity[0]} = buffer.size(1), the buffer's capacity C, "
             "not the stack's length: grad has n + 1 slots (0..n); save "
             "n = top.size(1), the slot of `value`, whose gradient is grad[:, n]" + said)
    if saved:
        fail(f"forward saved ctx.{saved[0]} = n + 1, the new length, so backward's "
             f"grad[:, ctx.{saved[0]}] is one past the last of grad's n + 1 slots (0..n): "
             "save the old length n = top.size(1), the slot of `value`, whose gradient is "
             "grad[:, n]" + said)
    fail("backward reads a slot past the end of grad, which has n + 1 slots (0..n): "
         "`value` sits in slot n = top.size(1), the old length (save it on ctx in forward, "
         "ctx.n = n: a global or class attribute holds the last forward's), so its "
         "gradient is grad[:, n]" + said)


def batch_axis_sliced(err: IndexError) -> None:
    """Backward indexed grad's axis 0, the batch (`grad[:n], grad[n]`), for the steps."""
    if "for dimension 0 with size" in str(err):
        fail("Append.backward indexes axis 0 of grad, the batch: grad is [B, n+1, F], so "
             "slice the step axis: grad[:, :n], grad[:, n] for top and value. "
             f"(torch said: {err})")


def _backward_once(fn, seed: int) -> tuple[object, torch.Tensor] | None:
    """What `fn.backward` returns when called once on a direct Append's own node (the ctx
    it gets), with the buffer; None when that raises."""
    buffer, top = one_append_inputs(seed=seed)
    try:
        with torch.enable_grad():
            out = fn.apply(top, _randn(B1, F1, seed=seed + 1).requires_grad_(), buffer)
        return fn.backward(out.grad_fn, torch.ones_like(out)), buffer
    except Exception:
        return None


def backward_returns_list(fn, err: Exception) -> None:
    """Autograd counted one gradient: name a backward that returns a list."""
    got, _ = _backward_once(fn, seed=28) or (None, None)
    if isinstance(got, list):
        fail("Append.backward returned a list: autograd reads it as one gradient "
             f"({str(err).split('(')[-1].rstrip(')')}). Return a tuple, one gradient per "
             "input of forward: return a, b, None.")


def gradient_shape(err: Exception) -> None:
    """Autograd refused a gradient whose shape is not its input's: name which input."""
    found = re.search(r"invalid gradient at index (\d) - got (\[.*?\]) but expected shape "
                      r"compatible with (\[.*?\])", str(err))
    fix = "each gradient has its input's shape, grad[:, :n] for top [B, n, F], grad[:, n] "
    if found:
        name = ("top", "value", "buffer")[int(found.group(1))]
        fail(f"Append.backward's gradient for `{name}` has the wrong shape, "
             f"{found.group(2)}, where {name} is {found.group(3)}: {fix}for value [B, F].")
    if "invalid gradient at index" in str(err):
        fail(f"Append.backward returned a gradient of the wrong shape: {fix}for value "
             f"[B, F]. (torch said: {err})")


def buffer_gradient(fn) -> None:
    """Refuse a backward that returns a gradient for `buffer`, where the exercise asks for
    None: torch drops it silently only because the buffer does not require grad."""
    got, buffer = _backward_once(fn, seed=29) or (None, None)
    if isinstance(got, tuple) and len(got) > 2 and got[2] is not None:
        shape = list(got[2].shape) if isinstance(got[2], torch.Tensor) else None
        fail("Append.backward returns a gradient for `buffer`"
             + (f" (of shape {shape}, where the buffer is {list(buffer.shape)})"
                if shape and shape != list(buffer.shape) else "")
             + ": return None for `buffer`, which is only storage (torch dropped yours "
             "only because it does not require grad): grad[:, :n], grad[:, n], None.")
