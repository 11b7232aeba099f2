"""The state every check runs in, and the guard around each call of the learner's code.

A learner's answer runs in the learner's own Python process, so it can change what torch
does for all code after it: switch gradients off (`torch.set_grad_enabled(False)`, or a
`torch.no_grad()` entered without `with`), change the default dtype or device, turn on
deterministic algorithms, leave autocast or inference mode on, replace one of torch's own
functions (`torch.Tensor.softmax = ...`), or change the module it is handed. Left alone,
such a change poisons the reference the check compares with, and every later check.

* `isolated()` wraps a whole check (`labnn.exercises.grading.exercise`): whatever the
  session holds, the check runs with gradients on, float32 by default, on the CPU, with
  torch's own functions and a seeded global random stream; the session's own state is
  put back afterwards.
* `guarded(...)` wraps each call of the learner's code (`labnn.exercises.grading.call`):
  a change of that state, or of a module among the arguments, is undone at once and
  named. The random stream is put back silently (seeding is no mistake).
"""

from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterator

import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

from labnn.exercises.grading.module_state import module_change, module_state, named_arguments
from labnn.exercises.grading.outcomes import fail

_CPU = torch.device("cpu")
_checks: list[contextlib.ExitStack] = []  # the checks running now, innermost last


def _autocast() -> bool:
    return torch.is_autocast_enabled("cpu")


def _set_autocast(on: bool) -> None:
    torch.set_autocast_enabled("cpu", on)


def _default_device() -> torch.device:
    """The device new tensors go to. torch 2.9's `torch.get_default_device` raises
    AttributeError once `torch.set_default_device(None)` has run; a new tensor's device
    is the same answer, read another way."""
    try:
        return torch.get_default_device()
    except AttributeError:
        return torch.empty(()).device


def _reset_default_device() -> None:
    """`torch.set_default_device(None)`, leaving torch as a new session has it: torch
    2.9's own `get_default_device` fails on the None that call leaves behind."""
    torch.set_default_device(None)
    context = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)  # a threading.local
    if context is not None and getattr(context, "device_context", False) is None:
        del context.device_context


def _deterministic() -> tuple[bool, bool]:
    return (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled())


def _set_deterministic(state: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(state[0], warn_only=state[1])


# name -> (read, write, the checks' value, what a change to `value` did); read in this
# order, so that inference mode, which also switches gradients off, is named first
_SETTINGS: dict[str, tuple[Callable, Callable | None, object, Callable[[object], str]]] = {
    "inference": (torch.is_inference_mode_enabled, None, False,
                  lambda on: "left inference mode on (`torch.inference_mode()` entered "
                             "without `with`)"),
    "grad": (torch.is_grad_enabled, torch.set_grad_enabled, True,
             lambda on: "switched gradients on for all later code "
                        "(`torch.set_grad_enabled(True)`)" if on else
                        "switched gradients off for all later code "
                        "(`torch.set_grad_enabled(False)`, or `torch.no_grad()` entered "
                        "without `with`)"),
    "dtype": (torch.get_default_dtype, torch.set_default_dtype, torch.float32,
              lambda dtype: f"changed the default dtype to {dtype} "
                            "(`torch.set_default_dtype`)"),
    "deterministic": (_deterministic, _set_deterministic, (False, False),
                      lambda state: "turned deterministic algorithms "
                                    f"{'on' if state[0] else 'off'} "
                                    f"(`torch.use_deterministic_algorithms({state[0]})`)"),
    "matmul": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision,
               "highest",
               lambda precision: "changed the float32 matmul precision to "
                                 f"{precision!r} (`torch.set_float32_matmul_precision`)"),
    "anomaly": (torch.is_anomaly_enabled, torch.set_anomaly_enabled, False,
                lambda on: "left anomaly detection on "
                           "(`torch.autograd.set_detect_anomaly(True)`)"),
    "autocast": (_autocast, _set_autocast, False,
                 lambda on: "left autocast on (`torch.autocast(...)` entered without "
                            "`with`)"),
}

# torch's own functions, as they were when the checkers were imported (before any
# learner's cell ran): modules -> their callables, classes -> their whole namespace
_NAMESPACES = (torch, torch.nn.functional, torch.linalg, torch.special, torch.Tensor,
               nn.Module, nn.Linear, nn.LayerNorm, nn.Embedding)
_PRISTINE = {
    owner: {name: value for name, value in vars(owner).items()
            if not isinstance(owner, types.ModuleType) or callable(value)}
    for owner in _NAMESPACES
}
_MISSING = object()


def _label(owner, name: str) -> str:
    """How a learner writes the attribute, e.g. ``torch.Tensor.softmax``."""
    if isinstance(owner, types.ModuleType):
        return f"{owner.__name__}.{name}"
    return f"torch.{'nn.' if issubclass(owner, nn.Module) else ''}{owner.__name__}.{name}"


def _torchs_own(value: object) -> bool:
    """Whether `value` comes from torch itself, e.g. the `torch.manual_seed` that
    importing `torch._dynamo` wraps in place."""
    return (getattr(value, "__module__", None) or "").split(".")[0] == "torch"


def _patches() -> list[tuple[object, str, object]]:
    """The functions of torch replaced (or shadowed, or deleted) since the checkers were
    imported, not by torch itself: (owner, name, the value there now, or `_MISSING`)."""
    found = []
    for owner, pristine in _PRISTINE.items():
        now = vars(owner)
        changed = [(name, now.get(name, _MISSING)) for name, value in pristine.items()
                   if now.get(name, _MISSING) is not value]
        if not isinstance(owner, types.ModuleType):  # a new attribute hiding a base's
            changed += [(name, value) for name, value in now.items()
                        if name not in pristine
                        and any(name in vars(base) for base in owner.__mro__[1:])]
        for name, value in changed:
            if _torchs_own(value):
                pristine[name] = value
            else:
                found.append((owner, name, value))
    return found


def _put(patches: list[tuple[object, str, object]]) -> None:
    """Set each (owner, name) to the value given (`_MISSING`: delete it)."""
    for owner, name, value in patches:
        if value is _MISSING:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, value)


def _pristine(patches: list[tuple[object, str, object]]) -> list[tuple[object, str, object]]:
    return [(owner, name, _PRISTINE[owner].get(name, _MISSING))
            for owner, name, _ in patches]


def _set_modes(modes: list) -> None:
    """Make `modes` the stack of torch function modes (e.g. the `torch.device(...)`
    context behind `torch.set_default_device`)."""
    while _get_current_function_mode_stack():
        _pop_mode()
    for mode in modes:
        _push_mode(mode)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Run a check in the checkers' own state, and put the session's back afterwards."""
    session = {name: read() for name, (read, *_) in _SETTINGS.items()}
    patches = _patches()
    device = _default_device()
    _put(_pristine(patches))
    try:
        with contextlib.ExitStack() as stack, torch.random.fork_rng(devices=[]):
            stack.enter_context(torch.inference_mode(False))
            if device != _CPU:
                _reset_default_device()
                if _default_device() == _CPU:
                    stack.callback(torch.set_default_device, device)
                else:  # a torch.device(...) context left entered: covered for the check
                    stack.enter_context(_CPU)
            for name, (_, write, value, _) in _SETTINGS.items():
                if write is not None:
                    write(value)
            torch.manual_seed(0)
            _checks.append(stack)
            try:
                yield
            finally:
                _checks.pop()
                _put(_pristine(_patches()))
    finally:
        for name, (_, write, _, _) in _SETTINGS.items():
            if write is not None:
                write(session[name])
        _put(patches)


def _modes_changed(before: list, device: torch.device) -> str | None:
    """Undo a change of the default device or of the function modes; say what it was."""
    now = _default_device()
    if now != device:
        _reset_default_device()
    if [id(m) for m in _get_current_function_mode_stack()] != [id(m) for m in before]:
        extra = [m for m in _get_current_function_mode_stack() if m not in before]
        _set_modes(before)
        if now == device and extra:
            return f"left `{type(extra[-1]).__name__}` entered (a torch function mode)"
    if now != device:
        return (f"changed the default device to {now.type if now.index is None else now} "
                "(`torch.set_default_device`, or `torch.device(...)` entered without "
                "`with`)")
    return None


_OUTLIVES = ("that change outlives your function: it would reach every later cell, "
             "this check's reference included (the check has undone it here)")
_FIXES = {
    "grad": "Leave gradients on (where a step must not record one, `with "
            "torch.no_grad():` switches them back on at its end).",
    "inference": "Use `with torch.inference_mode():`, which ends with its block.",
    "dtype": "Give the dtype where a tensor is made instead (dtype=x.dtype, or "
             "torch.zeros_like(x)).",
    "device": "Give the device where a tensor is made instead (device=x.device, or "
              "torch.zeros_like(x)).",
    "patch": "Write your own function under its own name instead.",
}


@contextlib.contextmanager
def guarded(what: str, fn: Callable | None = None, args: tuple = (),
            kwargs: dict | None = None) -> Iterator[None]:
    """Run learner's code: a change it makes to torch's global state, or to a module
    among `args`/`kwargs`, is undone and, when the code returned normally, named.

    Args:
        what: the call, as the messages start, e.g. ``"attention_weights(q, k)"``.
        fn: the learner's function, whose signature names the modules it is given.
        args, kwargs: its arguments.
    """
    settings = {name: read() for name, (read, *_) in _SETTINGS.items()}
    modes, device = _get_current_function_mode_stack(), _default_device()
    rng = torch.get_rng_state()
    modules = {name: (m, module_state(m))
               for name, m in named_arguments(fn, args, kwargs or {}).items()
               if isinstance(m, nn.Module)} if fn is not None else {}
    ok = False
    try:
        yield
        ok = True
    finally:
        said = _modes_changed(modes, device)
        key = "device"
        for name, (read, write, _, says) in _SETTINGS.items():
            now = read()
            if now == settings[name]:
                continue
            if write is not None:
                write(settings[name])
            elif _checks:  # inference mode: switched off until the check ends
                _checks[-1].enter_context(torch.inference_mode(False))
            if said is None:
                said, key = says(now), name
        patches = _patches()
        if patches:
            _put(_pristine(patches))
            if said is None:
                said, key = (f"replaced `{_label(*patches[0][:2])}` with its own "
                             "function"), "patch"
        torch.set_rng_state(rng)
        if ok and said is not None:
            fail(f"calling {what}, your function {said}: {_OUTLIVES}. "
                 + _FIXES.get(key, "Leave it as it was."))
        if ok:
            for name, (module, before) in modules.items():
                change = module_change(name, module, before)
                if change is not None:
                    call = what.split(" with ")[0]  # the shapes say nothing here
                    fail(f"calling {call}, your function changed `{name}` in place: {change}")
