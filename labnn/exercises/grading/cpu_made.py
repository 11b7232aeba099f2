"""Which call of an answer made a tensor on the CPU: `Made`, a `TorchFunctionMode`,
labels each tensor a torch factory (`torch.arange`, `torch.zeros`, ...) makes without
`device=`, or a copy moved to the CPU (`.cpu()`), and each computed from one, with that call;
`grading.devices` names it in its messages ("by your torch.arange(...) without device=")
and says how to make it where the inputs are.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

MAKE = ("make tensors where the inputs are (device=x.device, x.new_zeros(...), "
        "torch.zeros_like(x), F.pad)")
GPU = "fine here, but on a GPU, where the models run, this fails"
MADE = "_labnn_made"  # a tensor's label: the factory call that made it on the CPU
MOVED = ".cpu()"  # the label of a copy moved off the inputs' device (.cpu(), .to("cpu"))
# factories that make a CPU tensor without device= (what is computed from one keeps its label)
FACTORIES = {"arange", "zeros", "ones", "full", "empty", "tensor", "as_tensor", "eye", "rand",
             "randn", "randint", "linspace", "tril_indices", "triu_indices"}


def mixed(what: str, made: str | None, where: str = "") -> str:
    """The message for a tensor made on the CPU mixed with the inputs, naming the factory
    call that `made` it where the check saw it."""
    return (f"{what} mixes its inputs with a tensor made on the CPU{where}"
            + ("," + by(made) if made else "") + f": {GPU}. " + (
                make(made) if made else "torch.zeros, torch.arange... without device= make "
                f"CPU tensors: {MAKE}."))


def by(made: str | None) -> str:
    """Who made the CPU tensor, in words (nothing when unknown)."""
    if made == MOVED:
        return " by your .cpu() (or .to('cpu'))"
    return f" by your {made}(...) without device=" if made else ""


def make(made: str) -> str:
    """The fix: the same call, with the inputs' device (no copy to the CPU)."""
    if made == MOVED:
        return ("Keep it where the inputs are: no .cpu() or .to('cpu') in the computation "
                "(copy to the CPU only what you print or plot).")
    return f"Make it where the inputs are: {made}(..., device=x.device)."


def made_of(tree: object, off: Callable[[object], bool]) -> str | None:
    """The label of the first tensor in `tree` that `off` finds off the inputs' device."""
    tensors = sorted((t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)),
                     key=lambda t: t.dim() == 0)  # a CPU number mixes: rather another
    return next((getattr(t, MADE) for t in tensors if off(t) and hasattr(t, MADE)), None)


def label(obj: object, made: str | None) -> None:
    """Give `obj` (a tensor, an error) the label `made`, unless it has one."""
    if made and not hasattr(obj, MADE):
        try:
            setattr(obj, MADE, made)
        except (AttributeError, RuntimeError):  # e.g. a tensor of a C++ subclass
            pass


class Made(TorchFunctionMode):
    """Labels each tensor that a factory (`torch.arange`, ...) makes without `device=`, and
    each computed from one off the inputs' device (`off`), with that call, and passes it
    on to the error of an operation that mixes such a tensor with the inputs."""

    def __init__(self, off: Callable[[object], bool]):
        super().__init__()
        self.off = off

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except Exception as err:
            label(err, made_of((args, kwargs), self.off))
            raise
        name = getattr(func, "__name__", "")
        made = (f"torch.{name}" if name in FACTORIES and func is getattr(torch, name)
                and kwargs.get("device") is None else made_of((args, kwargs), self.off))
        if not made and name in ("cpu", "to") and isinstance(out, torch.Tensor) \
                and self.off(out) and not self.off(args[0]):  # a copy off the device
            made = MOVED
        for t in tree_leaves(out) if made else ():
            if isinstance(t, torch.Tensor) and self.off(t):
                label(t, made)
        return out


def made_by(obj: object) -> str | None:
    """The call that made `obj` (a tensor, an error) on the CPU, where `Made` saw it."""
    return getattr(obj, MADE, None)
