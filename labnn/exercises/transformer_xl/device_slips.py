"""Notebook 02's answers that work on the CPU only: a zero column, an index, a scale or an
empty memory made with `torch.zeros(...)`, `torch.arange(...)` or `torch.full(...)` and no
`device=`, or a numpy round trip. The checks run on the CPU, where such a tensor sits with
the inputs; in the notebook's model the inputs are on a GPU, and the answer fails there or
returns a CPU tensor. Once an answer has passed, `expect_any_device` runs it once more with
its inputs on the `meta` device (shapes, no values) and names the tensor it made elsewhere.

A 0-dim CPU tensor (`torch.tensor(8.0).sqrt()`) is allowed: a GPU takes it as a number. A
CPU index of `gather`, or a CPU mask of `masked_fill` or `where`, is not: a GPU refuses it
("expected all tensors to be on the same device").
An answer that cannot run on the meta device for another reason (`.item()` on an input, an
operation without a meta kernel) is not judged here.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labnn.exercises.grading import fail

# operations that take CPU indices or copy across devices on a GPU too
_ANY_DEVICE = {"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_",
               "aten::_to_copy", "aten::copy_", "aten::lift_fresh",
               "aten::_local_scalar_dense"}
MAKE = ("make them where the inputs are (device=x.device, x.new_zeros(...), "
        "torch.zeros_like(x), F.pad(x, ...))")


class _Mixed(Exception):
    """An operation got a tensor on the meta device and one (not 0-dim) on the CPU."""


class _Devices(TorchDispatchMode):
    """Raises `_Mixed` where an operation mixes the meta device with the CPU, as a GPU
    would (not every meta kernel checks)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name not in _ANY_DEVICE:
            tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if any(t.is_meta for t in tensors) and any(
                    t.device.type == "cpu" and t.dim() > 0 for t in tensors):
                raise _Mixed(func._schema.name.split("::")[-1])
        return func(*args, **kwargs)


def expect_any_device(fn: Callable, what: str, *args) -> None:
    """Fail when `fn(*args)`, run with its tensor arguments moved to the meta device,
    mixes them with a tensor it made on the CPU, goes through numpy, or returns a tensor
    that is not on the meta device."""
    meta = tuple(a.detach().to("meta").requires_grad_(a.requires_grad)
                 if isinstance(a, torch.Tensor) else a for a in args)
    try:
        with _Devices():
            got = fn(*meta)
    except _Mixed as err:
        fail(f"{what} mixes its inputs with a tensor made on the CPU (in {err}): fine "
             "here, but the model's inputs are on a GPU, where this fails. torch.zeros, "
             f"torch.arange, torch.full... without device= make CPU tensors: {MAKE}.")
    except Exception as err:  # the learner's code on shapes without values
        text = str(err)
        if "numpy" in text:
            fail(f"{what} goes through numpy (.numpy()): that works for CPU tensors only, "
                 "and fails for the model's, on a GPU: stay in torch (slicing, torch.cat, "
                 ".detach() keep the device).")
        if "expected device" in text or "same device" in text:
            fail(f"{what} mixes its inputs with a tensor made on the CPU: fine here, but "
                 "the model's inputs are on a GPU, where this fails. torch.zeros, "
                 f"torch.arange... without device= make CPU tensors: {MAKE}.")
        if "copy out of meta" in text:
            fail(f"{what} writes into a tensor made on the CPU (or calls .cpu()): with the "
                 "model's inputs on a GPU, the result would come back on the CPU: "
                 + MAKE + ".")
        return
    if isinstance(got, torch.Tensor) and not got.is_meta:
        fail(f"{what} returns a tensor on {got.device.type} whatever its inputs' device "
             "(tried with them on the meta device): in the model they are on a GPU; "
             + MAKE + ".")
