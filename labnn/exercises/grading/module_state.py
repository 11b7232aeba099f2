"""What a learner's function was handed: its arguments by name, and the state of a module
among them, to tell whether the function changed that module in place
(`labnn.exercises.grading.isolation.guarded`) and to describe a call
(`labnn.exercises.grading.call`).
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn

from labnn.exercises.grading.compare import first_position
from labnn.exercises.grading.outcomes import fail

_MISSING = object()


def named_arguments(fn: Callable, args: tuple, kwargs: dict) -> dict[str, object]:
    """The arguments of a call by the names the learner's function gives them."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {}
    if len(bound) != len(args) + len(kwargs):
        bound = {f"argument {i + 1}": a for i, a in enumerate(args)} | kwargs
    return bound


def module_state(module: nn.Module) -> dict[str, object]:
    """What a function given `module` must leave as it was: every submodule, parameter,
    buffer and plain attribute (by object), the values of the tensors and whether they
    require grad."""
    state = {}
    for path, sub in module.named_modules():
        prefix = f"{path}." if path else ""
        for key, value in vars(sub).items():
            if not key.startswith("_"):
                state[f"{prefix}{key}"] = value
        for table in ("_modules", "_parameters", "_buffers"):
            for key, value in getattr(sub, table).items():
                state[f"{prefix}{key}"] = value
                if isinstance(value, torch.Tensor):
                    state[f"{prefix}{key}", "values"] = value.detach().clone()
                    state[f"{prefix}{key}", "grad"] = value.requires_grad
    return state


_LEAVE_IT = ("The check hands your function the very module it compares with: compute new "
             "tensors from its parameters (`w = m.weight * 2`, not `m.weight.mul_(2)`) and "
             "leave the module as it was.")


def module_change(name: str, module: nn.Module, before: dict[str, object]) -> str | None:
    """What the learner's call changed in `module` and how to avoid it, in words, or None."""
    change = _what_changed(name, module, before)
    return None if change is None else "".join(change)


def _what_changed(name: str, module: nn.Module,
                  before: dict[str, object]) -> tuple[str, str] | None:
    """(what changed, how to avoid it): a switched mode has a fix of its own."""
    leave = f". {_LEAVE_IT}"
    after = module_state(module)
    kinds = {id(p): "parameter" for p in module.parameters()}
    for key, old in before.items():
        new = after.get(key, _MISSING)
        if isinstance(key, tuple):
            path, what = key
            kind = kinds.get(id(after.get(path)), "buffer")
            if what == "grad" and new != old:
                return (f"its {kind} `{path}` "
                        f"{'now requires' if new else 'no longer requires'} grad "
                        f"(`requires_grad_({new})`)", leave)
            if what == "values" and new is not _MISSING and new.dtype != old.dtype:
                return (f"its {kind} `{path}` is now {new.dtype}, was {old.dtype}: `.float()`, "
                        f"`.double()` or `.to(...)` on a module converts it in place", leave)
            if what == "values" and new is not _MISSING and not torch.equal(new, old):
                where = (f" (first change at {first_position(new != old)})"
                         if new.shape == old.shape and new.dim() else "")
                return f"its {kind} `{path}` holds other values{where}", leave
        elif new is not old and not (isinstance(old, (bool, int, float, str))
                                     and new == old):
            if new is _MISSING:
                return f"`{name}.{key}` is gone", leave
            if isinstance(old, (bool, int, float, str)):
                was = f"`{name}.{key}` was {old!r}, now {new!r}"
                if str(key).endswith("training"):  # the fix: leave the mode alone
                    switch = f"{name}.{'eval' if old else 'train'}()"
                    return f"{was} ({switch} inside)", ": leave the module in the mode it gets."
                return was, leave
            return f"`{name}.{key}` is now another object", leave
    return None


def expect_parameter_order(fn: Callable, signature: str) -> None:
    """Fail when the learner's function names its parameters as the exercise does, but
    in another order: the check passes them by position, so each gets another's value.

    Args:
        fn: the learner's function.
        signature: the call as the exercise states it, e.g.
            ``"segment_mask(n, seg_len, mem_len)"``.
    """
    name, _, rest = signature.partition("(")
    wanted = [p.split("=")[0].strip() for p in rest.rstrip(")").split(",")]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    mine = [p.name for p in params[:len(wanted)]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if mine != wanted and sorted(mine) == sorted(wanted):
        swapped = next(w for w, m in zip(wanted, mine) if w != m)
        got = mine[wanted.index(swapped)]
        fail(f"the check calls {signature}, by position: your parameters are "
             f"({', '.join(mine)}), in another order, so your `{got}` receives "
             f"{swapped}. Keep the order ({', '.join(wanted)}).")
