"""The matrix products an answer computes, counted as torch runs them: for an exercise whose
point is to compute many sums of products as one (notebook 04's weight gradient,
$G^\\top X$ over all steps at once, where a loop takes a product per step).

Counted at the dispatcher (a `TorchDispatchMode`), below Python, so that every spelling of
one product counts once: `@`, `torch.mm`, `addmm`, `tensordot`, an `einsum` that sums over
the rows. A batched product counts one per matrix of its batch (`bmm`, `baddbmm` or
`addbmm` over T steps is T products), an elementwise product that broadcasts its inputs into
a larger result counts as products too (`g[:, :, None] * x[:, None]`, `torch.outer`: every
product of a pair is formed one by one), and so does an elementwise product of two tensors of
one shape (`(g[:, o] * x[:, i]).sum()`, one entry of a product per call).

`count` also adds up the scalar products that elementwise operations form (`mul`, `addcmul`,
`prod`, of any shapes, broadcast or expanded): outer products $g x^\\top$ formed one by one
come to `T·B·D_out·D_in` of them, however they are spelled, where one matrix product forms
none elementwise.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_ONE = {aten.mm, aten.addmm, aten.mv, aten.addmv, aten.dot, aten.vdot, aten.addr}
_BATCHED = {aten.bmm: 0, aten.baddbmm: 1, aten.addbmm: 1}  # which argument holds the batch
_ELEMENTWISE = {aten.mul, aten.mul_, aten.addcmul, aten.addcmul_}


class Count(NamedTuple):
    """What `count` found: matrix products, how they ran, and elementwise scalar products."""

    products: int
    how: str
    scalars: int
    elementwise: tuple[str, ...]


class _Products(TorchDispatchMode):
    """Records each product run in the block: `(operation, how many products)`."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, int]] = []
        self.scalars: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        self._elementwise(packet, args, out)
        if packet in _ONE:
            self.found.append((packet.__name__, 1))
        elif packet in _BATCHED:
            self.found.append((packet.__name__, args[_BATCHED[packet]].size(0)))
        elif packet in (aten.mul, aten.mul_) and isinstance(out, torch.Tensor):
            largest = max((a.numel() for a in args if isinstance(a, torch.Tensor)), default=0)
            if out.numel() > largest:  # a broadcast: each pair's product formed on its own
                self.found.append(("mul, broadcast", out.numel() // max(largest, 1)))
            elif all(isinstance(a, torch.Tensor) and a.numel() == out.numel() > 1
                     for a in args[:2]):  # two vectors multiplied entry by entry
                self.found.append(("mul, elementwise", 1))
        return out

    def _elementwise(self, packet, args, out) -> None:
        """Add the scalar products of an elementwise product of two tensors (of any shapes),
        or of a `prod` over an axis, to `self.scalars`."""
        if not isinstance(out, torch.Tensor):
            return
        tensors = [a for a in args[:3] if isinstance(a, torch.Tensor) and a.numel() > 1]
        if packet in _ELEMENTWISE and len(tensors) >= 2:
            n = out.numel()
        elif packet == aten.prod and tensors:
            n = tensors[0].numel() - out.numel()
        else:
            return
        self.scalars[packet.__name__] = self.scalars.get(packet.__name__, 0) + n


def count(run: Callable[[], object]) -> Count:
    """Run `run()` and count the matrix products it computes, and the scalar products its
    elementwise operations form.

    Returns:
        A `Count`: the number of products, how they were computed (`"4 mm"`, `"1 bmm of
        5"`), the scalar products formed elementwise and the operations that formed them.
    """
    mode = _Products()
    with mode:
        run()
    total = sum(n for _, n in mode.found)
    calls: dict[str, list[int]] = {}
    for name, n in mode.found:
        calls.setdefault(name, []).append(n)
    how = ", ".join(f"{len(ns)} {name}" + (f" of {sum(ns)}" if sum(ns) > len(ns) else "")
                    for name, ns in calls.items())
    return Count(total, how, sum(mode.scalars.values()), tuple(mode.scalars))


def products(run: Callable[[], object]) -> tuple[int, str]:
    """Run `run()` and count the matrix products it computes.

    Returns:
        The number of products, and how they were computed (`"4 mm"`, `"1 bmm of 5"`).
    """
    return count(run)[:2]
