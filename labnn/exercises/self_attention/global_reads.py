"""What a learner's function reads from the notebook's globals instead of its arguments:
a module (`narrow`, a `MultiHeadAttention` of another cell, in place of the argument
`mha`), a tensor (the demonstration's `scores`), a size (`T_`, `S_` of a demonstration
cell), and a name no cell has defined (a helper whose cell has not run). Named for the
checkers of notebooks 01 and 02, whose answers read everything from their arguments.
"""

from __future__ import annotations

from typing import Callable

import torch

from labnn.exercises.grading import describe_shape, fail
from labnn.exercises.grading.reference_calls import globals_read
from labnn.nn.attention import MultiHeadAttention


def expect_no_global_module(fn: Callable, what: str) -> None:
    """Fail when `fn` reads a global `MultiHeadAttention` (one of the notebook's) instead
    of its argument `mha`."""
    for name, value in globals_read(fn).items():
        if isinstance(value, MultiHeadAttention):
            d = value.qkv.in_features
            fail(f"{what} reads the global `{name}`, a MultiHeadAttention({d}, "
                 f"{value.n_heads}) from another cell, not its argument mha: use mha.qkv, "
                 "mha.n_heads and mha.out_proj, the module the call hands in.")


def crash_advice(fn: Callable, err: Exception) -> str:
    """What to say of an error `fn` raised when it reads a global tensor or uses a name
    that is not defined, else ``""``."""
    if isinstance(err, NameError):
        name = getattr(err, "name", None) or str(err).split("'")[1:2]
        name = name if isinstance(name, str) else "".join(name)
        return (f"your function uses `{name}`, which is not defined in this session (a "
                "function from a cell that has not run, or a typo): run that cell, or "
                "compute it here")
    tensors = {n: v for n, v in globals_read(fn).items() if isinstance(v, torch.Tensor)}
    if tensors:
        name, value = next(iter(tensors.items()))
        return (f"your function reads the global `{name}` {describe_shape(value.shape)}, a "
                "tensor from another cell, not one computed from its arguments: compute "
                "it inside the function")
    return ""


def global_sizes(fn: Callable) -> dict[str, int]:
    """The integers (not bools) `fn` reads from the globals: sizes of another cell."""
    return {n: v for n, v in globals_read(fn).items()
            if isinstance(v, int) and not isinstance(v, bool)}


def expect_no_global_size(fn: Callable, what: str, fix: str) -> None:
    """Fail when `fn` reads an integer from the globals (`T_ = 3` of a demonstration cell)
    where a size must come from the input; `fix` says where it comes from."""
    sizes = global_sizes(fn)
    if sizes:
        said = ", ".join(f"`{n}` = {v}" for n, v in sizes.items())
        fail(f"{what} reads the global {said}, from another cell (the demonstration's?), "
             f"not from its input: {fix}.")
