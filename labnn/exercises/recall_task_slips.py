"""Slips of notebook 05's `make_recall`, named for `labnn.exercises.recall_task`: a
`scatter_` whose `src` has one axis fewer than its index (values `[N]` with an index
`[N, 1]`), found by rerunning the learner's function and recording the torch call that
raised.

Dimension letters: `N` sequences, `T` tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from labnn.exercises.grading.outcomes import fail


class _LastCall(TorchFunctionMode):
    """Records the last torch function called (the one that raised, after an error)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.last = (getattr(func, "__name__", ""), args, kwargs)
        return func(*args, **kwargs)


def scatter_src_rank(err: Exception, fn: Callable, *inputs: torch.Tensor) -> None:
    """Name `x.scatter_(1, positions[:, None], values)` with a 1-D `src`: rerun `fn` on
    copies of `inputs`; if the call that raised is a scatter whose src has fewer axes than
    its index, say so."""
    if not isinstance(err, (IndexError, RuntimeError)):
        return
    mode = _LastCall()
    try:
        with mode:
            fn(*(t.clone() for t in inputs))
    except Exception:
        pass
    name, args, kwargs = mode.last or ("", (), {})
    if name not in ("scatter", "scatter_") or len(args) < 3:
        return
    index, src = args[2], args[3] if len(args) > 3 else kwargs.get("src")
    if isinstance(src, torch.Tensor) and isinstance(index, torch.Tensor) and (
            index.dim() == 2 and index.size(1) == 1 and src.shape == index.shape[:1]):
        fail(f"{name}(dim, index, src): src must have index's shape: index is "
             f"{list(index.shape)} = [N, 1], src {list(src.shape)} = [N]: give values its "
             "column axis, values[:, None]. "
             f"(torch said: {str(err).strip().splitlines()[0]})")
