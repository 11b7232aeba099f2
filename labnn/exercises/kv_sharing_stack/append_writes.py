"""What notebook 04's `Append` (Exercise 4) writes into the buffer at one push, and what it
returns at the first: only slot n may change, so that a push costs O(1), not O(C).

The values alone do not show it: clearing the slots after n (`buffer.data[:, n:] = 0`) or
copying the whole buffer back with slot n changed (`buffer.data.copy_(new)`) leaves every
value the recurrence reads as it should be. So the writes are watched at the dispatcher
(`TorchDispatchMode`, below Python: every spelling of a write, `[...] =`, `copy_`, `fill_`,
`index_copy_`, is one operation there) and the slots after n hold a sentinel that must
survive; and slot n, holding other numbers than zeros (as after `torch.empty`), must
be overwritten, not added into (`+=` is right only on zeros). The first push (n = 0)
must return a view of the buffer too, of one slot: a `.squeeze()` drops that slot's axis,
and `value.unsqueeze(1)` is not the buffer. And in float32, backward must return float32
gradients (autograd would cast a float64 one back).

Dimension letters as in `stack_append_slips`: `B` batch, `n` the stack's length, `C` the
buffer's capacity, `F` features of one step.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labnn.exercises.grading import fail, running, shares_memory
from labnn.exercises.kv_sharing_stack.custom_backward import _randn
from labnn.exercises.kv_sharing_stack.custom_backward_slips import backward_keeps_dtype
from labnn.exercises.kv_sharing_stack.hidden_work import expect_not_widened, widening
from labnn.exercises.kv_sharing_stack.input_rounds import quote
from labnn.exercises.kv_sharing_stack.stack_append_slips import (B1, C1, F1, N1,
                                                                  one_append_inputs)

aten = torch.ops.aten
# in-place operations that write only some entries of their target: which argument says
# how many (the values put, the source copied, the index scattered)
_INDEXED = {aten.index_put_: 2, aten.index_copy_: 3, aten.index_add_: 3, aten.scatter_: 2,
            aten.scatter_add_: 2, aten.index_fill_: 2}
FIX = "Write only slot n, buffer[:, n]."


class _Writes(TorchDispatchMode):
    """Records each write into the storage at `ptr`: `(operation, elements written)`."""

    def __init__(self, ptr: int) -> None:
        super().__init__()
        self.ptr = ptr
        self.found: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for i, spec in enumerate(func._schema.arguments):
            if spec.alias_info is None or not spec.alias_info.is_write:
                continue
            target = args[i] if i < len(args) else kwargs.get(spec.name)
            if (isinstance(target, torch.Tensor)
                    and target.untyped_storage().data_ptr() == self.ptr):
                at = _INDEXED.get(func.overloadpacket)
                source = args[at] if at is not None and at < len(args) else target
                size = source.numel() if isinstance(source, torch.Tensor) else target.numel()
                self.found.append((func.overloadpacket.__name__, size))
        return func(*args, **kwargs)


def expect_one_slot_written(fn, what: str) -> None:
    """One push with a `top` whose values differ from the buffer's first n slots and a
    sentinel in the slots after n: the old slots and the later ones must keep their values,
    and no single write may cover more than one slot."""
    buffer, _ = one_append_inputs(seed=22)
    buffer[:, N1 + 1:] = _randn(B1, C1 - N1 - 1, F1, seed=35)  # the sentinel
    kept = buffer.clone()
    watch = _Writes(buffer.untyped_storage().data_ptr())
    with running(what), watch:
        fn.apply(_randn(B1, N1, F1, seed=23), _randn(B1, F1, seed=21), buffer)
    if not torch.equal(buffer[:, :N1], kept[:, :N1]):
        fail(f"{what} wrote into the old slots 0..n-1 (copying `top` back in?): they "
             "hold the earlier values already; rewriting them is O(T) work per step, the "
             f"cost the buffer removes. {FIX}")
    slot = B1 * F1
    name, most = max(watch.found, key=lambda found: found[1], default=("", 0))
    if most >= buffer.numel():
        fail(f"{what} writes the whole buffer, [B, C, F] = {list(buffer.shape)}, at each "
             f"push ({name}: a copy of it put back?): that is O(C) work per step, the cost "
             f"the buffer removes. {FIX}")
    later = not torch.equal(buffer[:, N1 + 1:], kept[:, N1 + 1:])
    if most > slot or later:
        said = f"{most // slot} slots in one {name}" if most > slot else "their values"
        fail(f"{what} also writes the slots after n, n + 1..C-1 ({said}: clearing or "
             "filling them?): each is written when its own value comes; writing them at "
             f"every push is O(C) work per step. {FIX}")


def expect_slot_overwritten(fn, what: str) -> None:
    """One push into a buffer whose slot n holds other numbers (as `torch.empty` or a
    reused buffer leaves it): slot n must then hold the value, not the sum of the two."""
    buffer, top = one_append_inputs(seed=40)
    buffer[:, N1] = _randn(B1, F1, seed=41)  # not zeros
    old, value = buffer[:, N1].clone(), _randn(B1, F1, seed=42)
    with running(what):
        fn.apply(top, value, buffer)
    if torch.allclose(buffer[:, N1], old + value) and not torch.equal(buffer[:, N1], value):
        fail(f"{what} adds the value into slot n (buffer[:, n] += value, .add_): right "
             "only while the slot holds zeros, as the zeros of a fresh torch.zeros buffer "
             "do; a buffer from torch.empty, or one reused, holds other numbers there. "
             "Copy the value in: buffer[:, n].copy_(value).")


def expect_length_from_top(fn, what: str) -> None:
    """n is top.size(1), whatever the buffer holds: one push into a buffer whose slots after
    n hold other numbers (as `torch.empty` or a reused buffer leaves them), one into a buffer
    whose slot 1 holds a value of zeros (a pushed value may be 0). An `Append` that counts
    the filled slots from the values (nonzero entries) writes elsewhere, or past the end."""
    for slot, fill in ((slice(N1, None), True), (1, False)):
        buffer, top = one_append_inputs(seed=43)
        buffer[:, slot] = _randn(*buffer[:, slot].shape, seed=44) if fill else 0.0
        value = _randn(B1, F1, seed=45)
        try:
            fn.apply(top, value, buffer)
        except Exception as err:  # noqa: BLE001 - any error: the first push ran
            said = f"raised {type(err).__name__} ({quote(err, 60)})"
        else:
            if torch.equal(buffer[:, N1], value):
                continue
            said = "did not write slot n"
        how = ("with other numbers after slot n (as torch.empty leaves)" if fill
               else "with a value of zeros in slot 1")
        fail(f"{what} {how} {said}: n comes from the buffer's values (its nonzero slots?), "
             "right only into zeros; n is top.size(1), the stack's length: write buffer[:, n].")


def expect_first_push(fn) -> None:
    """The first push, n = 0: a view of the buffer's first slot, `[B, 1, F]`."""
    buffer, _ = one_append_inputs(seed=36)
    value = _randn(B1, F1, seed=37)
    what = "Append.apply(top [B, 0, F], value, buffer), the first push (n = 0),"
    with running(what):
        out = fn.apply(buffer.data[:, :0], value, buffer)
    if not isinstance(out, torch.Tensor):
        return
    if tuple(out.shape) == (B1, F1):
        fail(f"{what} returns [B, F] = {[B1, F1]}: the new slot's axis, of size n + 1 = 1, "
             "is dropped (a .squeeze()?); return buffer.data[:, :n + 1], [B, n+1, F], with "
             "no .squeeze().")
    if not shares_memory(out, buffer) or out.data_ptr() != buffer.data_ptr():
        unwritten = ("" if torch.equal(buffer[:, 0], value) else
                     " and leaves slot 0 unwritten")
        fail(f"{what} returns a tensor that is not a view of the buffer (value.unsqueeze(1)?)"
             f"{unwritten}: the stack is the buffer's prefix from the first push on; write "
             "slot n and return buffer.data[:, :n + 1] for every n, 0 included.")


def float32_backward(fn) -> None:
    """One push in float32, backward called directly: gradients of the inputs' dtype
    (`backward_keeps_dtype`)."""
    buffer = one_append_inputs(seed=38)[0].float()
    value = _randn(B1, F1, seed=39).float().requires_grad_()
    with running("Append.apply(top, value, buffer) in float32"), torch.enable_grad():
        with widening() as wide:
            out = fn.apply(buffer.data[:, :N1], value, buffer)
            if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                torch.autograd.grad(out, value, torch.ones_like(out))
    if isinstance(out, torch.Tensor) and out.dtype != buffer.dtype:
        fail(f"Append.apply(top, value, buffer) with a float32 buffer returns dtype {out.dtype}"
             " (a cast on the way, a copy): return the buffer's own prefix, "
             "buffer.data[:, :n + 1], a view in the buffer's dtype.")
    if isinstance(out, torch.Tensor) and out.grad_fn is not None:
        backward_keeps_dtype(fn, out, torch.ones_like(out), "Append")
    expect_not_widened(wide, "Append (forward and backward) on a float32 buffer",
                       "keep the buffer's dtype: write value as it is, slice grad as it is")
