"""Answers that work on the CPU only: a mask, an index, an accumulator, a scale or an empty
result made with `torch.zeros(...)`, `torch.ones(t, t).tril()`, `torch.arange(...)`,
`torch.full(...)` or `torch.tensor([...])` and no `device=`, or a numpy round trip. The checks
run on the CPU, where such a tensor sits with the inputs; in the notebooks' models the inputs
are on a GPU, and the answer fails there or returns a CPU tensor. Once an answer has passed
its value checks, its checker calls `expect_any_device`, which runs it once more with its
inputs on the `meta` device and names the tensor it made elsewhere.

Why meta: it has every operation's shapes and dtypes but no values, so the rerun costs next
to nothing, needs no GPU, and a tensor made without `device=` stays on the CPU beside it, as
it would beside a GPU's. A `TorchDispatchMode` raises where an operation mixes the two, as a
GPU does (not every meta kernel checks devices).

Allowed, as on a GPU: a 0-dim CPU tensor (`torch.tensor(8.0).sqrt()`: a GPU takes it as a
number), but not a CPU number written into (`n = torch.tensor(0.0); n += x.sum()`) nor
joined with the inputs (`torch.stack([x.sum(), torch.tensor(0.0)])`, as CUDA refuses);
indexing an input with CPU indices (`x[:, torch.arange(s)]`, `aten::index`, `index_put_`),
but not writing CPU values of more than one element at them; copies across devices
(`.to(x.device)`, `.copy_`), back to the CPU too (`.tolist()`, `.cpu()`, a numpy round trip
from there): the copy gets zeros for values (meta has none), and only a later use of it
(mixed with the inputs, or returned) is judged, as a GPU would. Not allowed: a CPU index
of `gather`, `index_select` or an embedding (a 0-dim one too), a CPU mask of `masked_fill`
or `where`, a CPU tensor indexed by the inputs, or written into with them (`out[i] = x[i]`,
`out += x`): a GPU refuses these ("expected all tensors to be on the same device"), or
the result comes back on the CPU.
Modules among the arguments (`mha`, `model`, `norm`) are copied onto the meta device too.
Such a tensor with a dimension (`torch.tensor([d]).sqrt()`) also sets the result's dtype
(float32 from bfloat16 inputs), which a checker finds first: `cpu_dtype` names it there.
Each message names the call that made the CPU tensor (`torch.arange(...)` without `device=`)
where it is one of torch's factories, or computed from one (`torch.ones(t, t).tril()`).

An answer that cannot run on the meta device for another reason (a boolean mask `d[keep]`,
`.item()`, an `if` on a tensor's values: sizes or a flow that depend on values) runs once
more on labnn's stand-in accelerator (`labnn.training.device_audit`), which keeps the values
and labels every tensor with the device it would be on: it names a mixture of the two
devices, numpy, and a result left on the CPU, as the meta rerun does (it lets a copy into
a CPU tensor pass, `out[i] = x[i]`, and judges only where the result ends up). The opposite
slip, a GPU named in the answer (`.cuda()`, `device="cuda"`), raises at the first call
(no GPU here, or inputs on the CPU beside it): `running` names it, `NAMED_GPU`.
"""

from __future__ import annotations

import copy
import re
from typing import Callable

import torch
# torch's meta kernels written in Python (`meta / 2.0`, `torch._refs`), and the
# `__torch_dispatch__` of every dispatch mode, import torch._dynamo at their first call
# (`torch._disable_dynamo`): 2-6 s that the first check of a session spent without output.
# Imported with the checkers instead, in the cell that imports them.
import torch._dynamo  # noqa: F401
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from labnn.exercises.grading.cpu_made import GPU, MAKE, Made, by, made_by, make, mixed
from labnn.exercises.grading.outcomes import fail
from labnn.training import device_audit

# operations that take CPU indices, or copy across devices, on a GPU too
_INDEX = {"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_",
          "aten::_unsafe_index_put"}  # an index's backward, in some torch versions
_ANY_DEVICE = _INDEX | {"aten::_to_copy", "aten::copy_", "aten::lift_fresh",
                        "aten::_local_scalar_dense"}
# joins that take no CPU number (0-dim tensor) among tensors on a GPU, as operands do
_JOINS = {"aten::cat", "aten::stack", "aten::_cat", "aten::_stack"}
# look-ups that take no CPU index on a GPU, a 0-dim one neither (`embed(torch.tensor(i))`)
_LOOKUPS = {"aten::embedding", "aten::index_select", "aten::gather", "aten::take"}
_JOIN_NAMES = {"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
               "column_stack", "row_stack"}
NUMPY = (f"goes through numpy (.numpy()): that works for CPU tensors only; {GPU}. Stay in "
         "torch (slicing, torch.cat, .detach() keep the device).")
NUMPY_GRAD = ("goes through numpy (.numpy()): that works for CPU tensors only, and raised here "
              "on one that requires grad (a .detach() first would cut its gradient): stay in "
              "torch (einsum, slicing, torch.cat keep the graph and the device).")

NAMED_GPU = ("moves a tensor to the GPU by name (.cuda(), device='cuda'): the check's inputs "
             "are on the CPU (maybe with no GPU). Make tensors where the inputs are: "
             "device=x.device.")


# torch's operators by their Python spelling: "(in `>`, torch's gt)", not "(in gt)"
_OPERATORS = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=",
              "add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@", "mm": "@",
              "bmm": "@", "bitwise_and": "&", "bitwise_or": "|", "logical_and": "&",
              "remainder": "%", "floor_divide": "//", "pow": "**"}


class _Mixed(Exception):
    """An operation got a tensor on the meta device and one (not 0-dim) on the CPU
    (`cpu`, when there was one to read)."""

    def __init__(self, name: str, cpu: torch.Tensor | None = None):
        super().__init__(name)
        self.cpu = cpu

    def __str__(self) -> str:
        name = super().__str__().split(".")[0]  # gt.Tensor: gt
        op = _OPERATORS.get(name.rstrip("_"))
        return f"`{op}`, torch's {name}" if op else name


class _Joined(Exception):
    """A join (`stack`, `cat`) got a tensor on the meta device (or the stand-in
    accelerator) and a 0-dim one on the CPU."""


def _audit_op(text: str) -> str:
    """Where `device_audit`'s error says the tensors met ("... device audit, in mul: ..."),
    as `mixed` writes it (" (in `*`, torch's mul)"), or ``""``."""
    found = re.search(r"device audit, in (\w+)", text)
    return f" (in {_Mixed(found[1])})" if found else ""


def _on_cpu(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0


def _number(t: object) -> object:
    """A 0-dim CPU tensor on the meta device: a GPU takes it as a number, where some meta
    kernels (`masked_fill`'s) refuse it."""
    is_number = isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0
    return t.to("meta") if is_number else t


class _Devices(TorchDispatchMode):
    """Raises `_Mixed` where an operation mixes the meta device with the CPU, as a GPU
    would (not every meta kernel checks)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _ANY_DEVICE and _out_of_meta(name, args, kwargs):
            # a copy back to the CPU (.tolist(), .cpu(), cpu_out[i] = x[i]): a GPU makes
            # it too; zeros stand in for its values, its later use is what is judged
            if name == "aten::copy_":
                return args[0]
            return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(t.is_meta for t in tensors) and name not in _ANY_DEVICE:
            if name in _JOINS and any(t.device.type == "cpu" and t.dim() == 0 for t in tensors):
                raise _Joined(name.split("::")[-1].strip("_"))
            if any(_on_cpu(t) or name in _LOOKUPS and t.device.type == "cpu"
                   for t in tensors) or _written_on_cpu(func, args, kwargs):
                raise _Mixed(name.split("::")[-1], next(filter(_on_cpu, tensors), None))
            args, kwargs = tree_map(_number, (args, kwargs))
        elif any(t.is_meta for t in tensors) and name in _INDEX and (
                _on_cpu(args[0]) or name != "aten::index" and len(args) > 2 and _on_cpu(args[2])):
            # a CPU tensor indexed by the inputs, or CPU values written at an index
            raise _Mixed(name.split("::")[-1])
        return func(*args, **kwargs)


def _written_on_cpu(func, args: tuple, kwargs: dict) -> bool:
    """Whether `func` writes into a CPU tensor, a 0-dim one too (`n = torch.tensor(0.0);
    n += x.sum()`): a GPU takes a CPU number as an operand, never as the result."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        t = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            return True
    return False


def _out_of_meta(name: str, args: tuple, kwargs: dict) -> bool:
    """`_to_copy` of a meta tensor to the CPU, or `copy_` of one into a CPU tensor."""
    if name == "aten::copy_":
        return args[0].device.type == "cpu" and args[1].is_meta
    device = kwargs.get("device")
    return (name == "aten::_to_copy" and args[0].is_meta and device is not None
            and torch.device(device).type == "cpu")


def _to_meta(a: object) -> object:
    """A tensor (its `requires_grad` kept) or a module's copy on the meta device."""
    if isinstance(a, torch.Tensor):
        return a.detach().to("meta").requires_grad_(a.requires_grad)
    if isinstance(a, torch.nn.Module):
        return copy.deepcopy(a).to("meta")
    return a


def expect_any_device(fn: Callable, what: str, *args) -> None:
    """Fail when `fn(*args)`, run with its tensors (also in lists and tuples) and modules
    moved to the meta device, mixes them with a tensor it made on the CPU, goes through
    numpy, or returns a tensor that is not on the meta device.

    Args:
        fn: the learner's function, or a function that calls it (and backward).
        what: the call, as messages name it, e.g. ``"attention(q, k, v, mask)"``.
    """
    meta = tree_map(_to_meta, args)
    try:
        with _Devices(), Made(lambda t: t.device.type == "cpu"):
            got = fn(*meta)
    except _Joined as err:
        _joined(what, err)
    except _Mixed as err:
        fail(mixed(what, made_by(err), f" (in {err})"))
    except Exception as err:  # the learner's code on shapes without values
        text = str(err)
        if "numpy" in text:
            fail(f"{what} {NUMPY}")
        if "expected device" in text or "same device" in text:
            fail(mixed(what, made_by(err), _audit_op(text)))
        if "copy out of meta" in text:  # a copy `_out_of_meta` did not catch
            fail(f"{what} writes into a tensor made on the CPU (or calls .cpu()): with "
                 f"its inputs on a GPU, the result would come back on the CPU: {MAKE}.")
        _expect_on_the_stand_in(fn, what, args)
        return
    for t in tree_leaves(got):
        if isinstance(t, torch.Tensor) and not t.is_meta:
            _returned(what, t, "the meta device")


def _returned(what: str, t: torch.Tensor, tried: str) -> None:
    """Fail for `t`, returned on the CPU, naming the factory call that made it if known."""
    made = made_by(t)
    fail(f"{what} returns a tensor on the CPU whatever its inputs' device"
         + (f", made{by(made)}" if made else "") + f" (tried with them on {tried}): in a "
         "model they are on a GPU" + (f". {make(made)}" if made else f"; {MAKE}."))


def cpu_dtype(fn: Callable, what: str, args: tuple, got: torch.Tensor,
              want: torch.Tensor) -> None:
    """Fail when `got`, `fn(*args)`, has another dtype than `want` because `fn` mixed its
    inputs with a tensor of that dtype it made on the CPU (`torch.tensor([d]).sqrt()`,
    `torch.ones(1)`): a tensor with a dimension sets the result's dtype, as a 0-dim one
    does not, and a GPU refuses it; `expect_like`'s dtype message would blame a cast.

    Args:
        fn: the learner's function.
        what: the call, as messages name it.
        args: the inputs `got` was computed from.
        got: `fn(*args)`.
        want: the reference.
    """
    if got.dtype == want.dtype or got.shape != want.shape or got.device != want.device:
        return
    try:
        with _Devices():
            fn(*tree_map(_to_meta, args))
    except _Mixed as err:
        if err.cpu is not None and err.cpu.dtype == got.dtype:
            fail(f"{what} has dtype {got.dtype}, expected {want.dtype}: it mixes the inputs "
                 f"with a {str(got.dtype)[6:]} tensor {list(err.cpu.shape)} made on the CPU "
                 f"(in {err}): having a dimension, it sets the result's dtype; on a GPU it "
                 "fails. Use a Python number, or x.new_tensor(...) (x's dtype and device).")
    except Exception:  # anything else is for the checks that follow
        pass


def _on_the_stand_in(a: object) -> object:
    """A copy of a tensor, or of a module, that the audit places on its accelerator."""
    if isinstance(a, torch.Tensor):
        copied = a.detach().clone().requires_grad_(a.requires_grad)
        return device_audit.placed(copied, True)
    if isinstance(a, torch.nn.Module):
        copied = copy.deepcopy(a)
        for t in (*copied.parameters(), *copied.buffers()):
            device_audit.placed(t, True)
        return copied
    return a


def _expect_on_the_stand_in(fn: Callable, what: str, args: tuple) -> None:
    """`expect_any_device` for an answer the meta device cannot run: the same call with
    its inputs on `device_audit`'s accelerator, where values are real."""
    placed = tree_map(_on_the_stand_in, args)
    off = lambda t: not device_audit.on_accelerator(t)  # noqa: E731
    try:
        with device_audit.DeviceAudit(), _Joins(), Made(off):
            got = fn(*placed)
    except _Joined as err:
        _joined(what, err)
    except Exception as err:  # the learner's code: judged for its devices only
        text = str(err)
        if "numpy" in text:
            fail(f"{what} {NUMPY}")
        if "same device" in text:
            fail(mixed(what, made_by(err), _audit_op(text)))
        return
    for t in tree_leaves(got):
        if isinstance(t, torch.Tensor) and not device_audit.on_accelerator(t):
            _returned(what, t, "a stand-in GPU")


class _Joins(TorchFunctionMode):
    """On the stand-in, refuses a join (`torch.stack`, `torch.cat`, ...) of tensors on the
    accelerator with a 0-dim host tensor, which the audit lets mix as a number: CUDA takes
    a CPU number as an operand of arithmetic, not as a tensor to join."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _JOIN_NAMES:
            tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if any(map(device_audit.on_accelerator, tensors)) and any(
                    not device_audit.on_accelerator(t) and t.dim() == 0 for t in tensors):
                raise _Joined(func.__name__)
        return func(*args, **kwargs)


def _joined(what: str, op: Exception) -> None:
    """Fail naming a CPU number (0-dim tensor) joined with the inputs' tensors by `op`."""
    fail(f"{what} joins (torch.{op}) tensors of its inputs with a number made on the CPU "
         f"(torch.tensor(...) without device=): {GPU} (a GPU takes a CPU number in "
         "arithmetic, not in a join). Make it where the inputs are: torch.tensor(..., "
         "device=x.device), or x.new_tensor(...).")
