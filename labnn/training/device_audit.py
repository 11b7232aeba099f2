"""A stand-in accelerator on a CPU-only machine: the notebooks' device mistakes, caught
where there is no GPU.

`LABNN_DEVICE=audit` makes `labnn.training.trainer.pick_device()` return the device `cpu:0` and
start this audit (`make test` runs every notebook so). The arithmetic still runs on the
CPU, but every tensor now lives on one of two devices, as on a machine with a GPU:

* on the *accelerator* (`.device` reads `cpu:0`): a tensor created with
  `device=cpu:0`, moved there by `.to(device)`, a module's parameters after
  `model.to(device)`, and whatever an operation computes from such a tensor;
* on the *host* (`.device` reads `cpu`): everything else.

An operation that mixes them fails as CUDA would ("Expected all tensors to be on the
same device"), and so do labnn's own door checks ("tokens is on cpu:0, but the model
is on cpu"), `torch.testing.assert_close` and `.numpy()` of an accelerator tensor. A
host tensor of zero dimensions (a Python number in disguise) may mix, as on CUDA, except as
the index of an embedding, `index_select` or `gather`.
Notebook 05 once built one model on the CPU and fed it data on the GPU: it crashed on
the first CUDA run, and passed every CPU-only one; under the audit it fails on the CPU.

Why no maintained tool: torch has no second CPU device (a "fake" device needs a C++
backend), and `FakeTensorMode` computes no values, which training and claims need. A
`TorchFunctionMode` sees each operation from Python and is enough to keep the label.
It skips what runs inside a backward pass (the engine hands out gradients the mode
never saw) and costs a few microseconds per operation: a test instrument, never on by
default.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

ACCELERATOR = torch.device("cpu", 0)
HOST = torch.device("cpu")
_LABEL = "_labnn_on_accelerator"
# calls that legitimately take tensors of both devices (autograd's entry points pass
# gradients that its engine made, which the audit never labelled)
_CROSSING = {"to", "copy_", "__setitem__", "__getitem__", "cpu", "cuda", "__get__",
             "__set__", "grad", "backward"}
# look-ups whose index a GPU wants on its own device, a 0-dim one too
_LOOKUPS = {"embedding", "index_select", "gather", "take"}


def on_accelerator(t) -> bool:
    """Whether `t` is a tensor the audit places on the accelerator."""
    return isinstance(t, torch.Tensor) and getattr(t, _LABEL, False)


def placed(value, on: bool):
    """Place every tensor in `value` (a tensor, or a tuple or list of them) on the
    accelerator (`on`) or the host, and return `value`."""
    if isinstance(value, torch.Tensor):
        try:
            setattr(value, _LABEL, on)
        except (AttributeError, RuntimeError):  # e.g. a tensor of a C++ subclass
            pass
    elif isinstance(value, (tuple, list)):
        for v in value:
            placed(v, on)
    return value


def _tensors(args, kwargs):
    """The tensors among the arguments, one level into lists and tuples."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _target(name: str, args, kwargs) -> torch.device | None:
    """The device a `.to(...)` or a factory's `device=` names, if any."""
    if name == "to":
        try:
            return torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        except (TypeError, RuntimeError):
            return None
    device = kwargs.get("device")
    return None if device is None else torch.device(device)


def _check_index(name: str, args) -> None:
    """Refuse a host tensor indexed by accelerator indices, as CUDA does (the reverse, and
    a 0-d index, which Python reads as a number, are allowed)."""
    if on_accelerator(args[0]) or args[0].dim() == 0:
        return
    index = args[1] if isinstance(args[1], (tuple, list)) else (args[1],)
    if any(on_accelerator(i) and i.dim() > 0 for i in index):
        raise RuntimeError(
            f"indices should be either on cpu or on the same device as the indexed tensor "
            f"({HOST}) (labnn device audit, in {name}: on a GPU this fails the same way; "
            "move the indexed tensor to `device`)")


class DeviceAudit(TorchFunctionMode):
    """Labels every tensor with the device it would be on, and refuses mixtures.

    `torch.compile` cannot keep the labels (a traced graph's outputs are new tensors):
    `traceable = False` asks `labnn.compiled` to run its steps eagerly while the audit
    is on, where it checks their own Python."""

    traceable = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch._C._current_autograd_node() is not None:  # inside backward
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "__get__" and getattr(func.__self__, "__name__", "") == "device":
            return ACCELERATOR if on_accelerator(args[0]) else func(*args, **kwargs)
        if name in ("numpy", "__array__") and on_accelerator(args[0]):
            raise TypeError(f"can't convert {ACCELERATOR} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first. "
                            "(labnn device audit: the tensor is on the accelerator)")
        if name in ("__getitem__", "__setitem__"):
            _check_index(name, args)
        tensors = list(_tensors(args, kwargs))
        accel = [t for t in tensors if on_accelerator(t)]
        host = [t for t in tensors if not on_accelerator(t) and (t.dim() or name in _LOOKUPS)]
        if accel and host and name not in _CROSSING:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {ACCELERATOR} and {HOST}! (labnn device audit, in {name}: on "
                "a GPU this fails the same way; move the model and every tensor it "
                "reads to `device`)")
        out = func(*args, **kwargs)
        target = _target(name, args, kwargs) if name in ("to",) or "device" in kwargs \
            else None
        if name == "cpu" or (target is not None and target.type == "cpu"
                             and target.index is None and name == "to"):
            if out is args[0] and on_accelerator(out):
                out = out.clone()  # a copy on the host, as from a GPU
            return placed(out, False)
        if target is not None and target == ACCELERATOR:
            if name == "to" and out is args[0]:
                out = out.clone()
            return placed(out, True)
        if accel and name not in ("__set__", "__setitem__", "copy_"):
            placed(out, True)
        return out


def _module_to(original):
    """`nn.Module.to` that also places the module's parameters and buffers."""

    def to(self, *args, **kwargs):
        with torch._C.DisableTorchFunction():  # the module's own bookkeeping, unlabelled
            out = original(self, *args, **kwargs)
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None:
            on = device == ACCELERATOR
            for t in (*self.parameters(), *self.buffers()):
                placed(t, on)
        return out

    return to


def start() -> torch.device:
    """Start the audit for the rest of this process (once) and return its accelerator.

    Returns:
        `cpu:0`, the device the notebooks then move their models and data to.
    """
    if not getattr(nn.Module.to, "_labnn_audit", False):
        to = _module_to(nn.Module.to)
        to._labnn_audit = True
        nn.Module.to = to
        DeviceAudit().__enter__()
    return ACCELERATOR
