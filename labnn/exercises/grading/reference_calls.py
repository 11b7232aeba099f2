"""The reference refused: named in the answer (`expect_own_code`), or however it is
reached (`reference_refused`).

`expect_own_code` reads which functions an answer names; an answer can still reach the
package's own version through a module (`labnn.data.recall.make_recall(...)`), an unbound
method (`FeedbackTransformer.forward(model, tokens)`) or a private one. `reference_refused`
watches the learner's call instead: entering one of the references from outside the
checkers fails by name. It watches without taking a hook the learner's own tools hold
(`%prun`, a debugger, coverage): `sys.monitoring` (Python 3.12+) reports the entries of
the references' code alone, beside any profiler; before 3.12, the profile or the trace
hook, whichever is free.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import sys
from pathlib import Path
from typing import Callable, Iterator

import torch

from labnn.exercises.grading.outcomes import fail

_CHECKERS = str(Path(__file__).resolve().parents[1])  # labnn/exercises: a checker's own,
_GRADING = str(Path(__file__).resolve().parent)  # but grading's `call` runs the answer
_BETWEEN = (str(Path(__file__).resolve().parents[2]), str(Path(torch.__file__).parent),
            str(Path(contextlib.__file__).parent))  # labnn, torch, Python: whoever called
# grading's own module that calls a checker's reference (the learner's code only through `call`)
_REFERENCE_CALLER = str(Path(__file__).resolve().with_name("fresh_values.py"))


def by_the_learner(frame) -> bool:
    """Whether `frame` was entered on the learner's behalf: the first caller up the stack
    that is not labnn's, torch's or Python's own code is the learner's (or grading's
    `call`, handing in the answer itself), not a checker computing its reference. A
    `__torch_function__` (a mode that reruns a call, as `devices` does) is passed over."""
    caller = frame.f_back
    while caller is not None:
        name = caller.f_code.co_filename
        if name.startswith(_GRADING) and caller.f_code.co_name == "__torch_function__":
            caller = caller.f_back  # a check's mode passing a call on (devices' labels)
            continue
        if name == _REFERENCE_CALLER:
            return False
        if name.startswith(_GRADING) or not name.startswith(_BETWEEN):
            return True
        if name.startswith(_CHECKERS):
            return False
        caller = caller.f_back
    return False


def reference_refused(what: str, references: dict[Callable, str],
                      build: str) -> contextlib.AbstractContextManager[None]:
    """Fail, after the block, if the learner's code entered one of `references`.

    Args:
        what: the call, e.g. ``"make_recall(filler, values, positions)"``.
        references: each function the exercise re-implements -> the name to say, e.g.
            ``{make_recall: "labnn.data.recall.make_recall"}``.
        build: what to build the answer from, e.g. ``"build x and y from tensor
            operations"``.

    Raises:
        ExerciseFailed: a reference was entered from the learner's code, or handed in as
            the answer (a checker's own diagnosis may compute one); raised even when the
            block raised, which it replaces.
    """
    return calls_refused(references, lambda name: (
        f"{what} runs {name}, the reference it is checked against, so it would pass "
        f"without implementing anything: {build}."))


# the ways to ask autograd for a derivative an exercise asks the learner to write
AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad", torch.autograd.backward:
            "torch.autograd.backward (a tensor's .backward())", torch.func.vjp: "torch.func.vjp",
            torch.func.grad: "torch.func.grad"}


@contextlib.contextmanager
def calls_refused(refused: dict[Callable, str],
                  message: Callable[[str], str]) -> Iterator[None]:
    """Fail with `message(name)`, after the block, if the learner's code entered one of
    `refused` (each function -> the name to say); the mechanism of `reference_refused`,
    for calls an exercise refuses that are not its reference (a backward that asks
    `torch.autograd.grad` for the derivative it is to write)."""
    codes = {inspect.unwrap(f).__code__: name for f, name in refused.items()}
    called: list[str] = []

    def entered(frame) -> None:
        if not called and by_the_learner(frame):
            called.append(codes[frame.f_code])

    try:
        with _entries(codes, entered):
            yield
    finally:  # named even when a guard of the checker raised first
        if called:
            fail(message(called[0]))


_TOOLS = (4, 3)  # sys.monitoring's tool ids that Python assigns to no kind of tool


@contextlib.contextmanager
def _entries(codes, entered: Callable) -> Iterator[None]:
    """Call `entered(frame)` whenever a function whose code is in `codes` starts, during
    the block, with a hook nobody else holds (when every one is held, by a profiler and
    a debugger at once, the block runs unwatched: `expect_own_code` still applies)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        tool = next((t for t in _TOOLS if monitoring.get_tool(t) is None), None)
        if tool is None:
            yield
            return
        start = monitoring.events.PY_START
        monitoring.use_tool_id(tool, "labnn reference_refused")
        try:
            # the code that started is the caller of this callback's frame
            monitoring.register_callback(tool, start, lambda code, offset: entered(
                sys._getframe(1)))
            for code in codes:
                monitoring.set_local_events(tool, code, start)
            yield
        finally:  # before 3.14 freeing the id leaves its events and callback behind
            for code in codes:
                monitoring.set_local_events(tool, code, 0)
            monitoring.register_callback(tool, start, None)
            monitoring.free_tool_id(tool)
        return
    for get, put in ((sys.getprofile, sys.setprofile), (sys.gettrace, sys.settrace)):
        if get() is None:
            def hook(frame, event, arg):
                if event == "call" and frame.f_code in codes:
                    entered(frame)
            put(hook)
            try:
                yield
            finally:
                put(None)
            return
    yield


def globals_read(fn: Callable) -> dict[str, object]:
    """The globals `fn`'s code (nested functions and lambdas included) loads by name,
    with their values; names not defined are left out. Attribute names are not globals:
    `F.scaled_dot_product_attention` is torch's, even where the notebook has imported
    labnn's function under that name."""
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    found, todo = {}, [code] if code is not None else []
    while todo:
        code = todo.pop()
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in namespace:
                found[ins.argval] = namespace[ins.argval]
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return found


def closure_values(fn: Callable) -> list:
    """The values `fn` holds in its closure (a cell not assigned yet holds none)."""
    values = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            pass
    return values


def expect_own_code(fn: Callable, what: str, **references: Callable) -> None:
    """Fail when the learner hands in, or calls, the package's own version instead of
    writing one.

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"relative_shift(x)"``.
        **references: the package's functions the exercise re-implements, by the name a
            learner knows them.
    """
    used = [*closure_values(fn), *globals_read(fn).values()]
    for name, ref in references.items():
        if fn is ref or any(obj is ref for obj in used):
            fail(f"{what} calls labnn's own `{name}`, the reference it is checked "
                 "against: the exercise is to compute it yourself from tensor "
                 "operations.")
