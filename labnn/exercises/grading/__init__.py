"""The machinery behind every exercise checker, and the one import of every checker.

A checker is a function decorated with `@exercise("title")` that calls the learner's
function on random inputs (`call`), compares the result with the package's reference
(`labnn.exercises.grading.compare`: shapes, values, gradients) and calls `fail(...)` with a
precise diagnosis (wrong shape, mask ignored, softmax over the wrong axis, missing scale,
...) when something differs. Guards against the mistakes no value comparison sees live
here too: an input changed in place, a result that is a view of an input, the package's
own function handed in as the answer, a tensor made on the CPU whatever the inputs' device
(`labnn.exercises.grading.devices`). Every check runs `isolated` from the learner's
session, and every call of the learner's code is `guarded`
(`labnn.exercises.grading.isolation`): an answer that switches gradients off for good, changes
the default dtype or device, replaces one of torch's functions or changes the module it
is given is told so, and cannot poison the reference or the next check.

Outcomes, as a learner sees them in a notebook (`labnn.exercises.grading.outcomes`):

* the stub still raises `NotImplementedError` -> `ExerciseNotDone`, one friendly line
  pointing to the tiered hints below the cell;
* a diagnosis -> `ExerciseFailed`, one line naming the mistake and where it shows, as a
  position in the tensor's own dimensions (`at [b=0, h=1, i=2, j=3]`);
* the learner's code raises -> a known mistake behind the error is named (an
  `ExerciseFailed`, e.g. a mask given an axis that lines it up with the heads, or, for
  every exercise, a Python slip in the expression that raised: a size computed with `/`,
  a method not called; `labnn.exercises.grading.python_slips`); any
  other error keeps its type and traceback, to debug, after one line saying what the
  check called, with the shape and dtype of every tensor it handed in (`call`,
  `running`: one rule for every checker);
* everything matches -> a line saying so.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Callable, Iterator

import torch

# what every checker module imports from here
from labnn.exercises.grading.compare import (  # noqa: F401
    close,
    describe_position,
    describe_shape,
    expect_close,
    expect_dtype,
    expect_gradients,
    expect_like,
    expect_no_nan,
    expect_shape,
    expect_tensor,
    first_position,
    name_axes,
)
from labnn.exercises.grading.devices import (NAMED_GPU, NUMPY, NUMPY_GRAD,  # noqa: F401
                                             expect_any_device)
from labnn.exercises.grading.isolation import guarded, isolated
from labnn.exercises.grading.module_state import named_arguments
from labnn.exercises.grading.outcomes import (NOT_DONE, ExerciseError, ExerciseFailed,
                                              ExerciseNotDone, fail, first_line, is_stub)
from labnn.exercises.grading.python_slips import name_python_slip, other_exercise
from labnn.exercises.grading.reference_calls import expect_own_code, reference_refused
from labnn.exercises.grading.slips import out_under_autograd, truth_of_optional

EXERCISES = str(Path(__file__).parents[1])  # labnn/exercises: the checkers' code


def exercise(title: str, *, refuse: dict[Callable, str] | None = None
             ) -> Callable[[Callable], Callable]:
    """Decorate a checker: run it `isolated` from the learner's session, turn an unfilled
    stub into `ExerciseNotDone` and report success in one line.

    Args:
        title: what the exercise asks for, e.g. ``"attention weights"``; used in every
            message.
        refuse: the package's functions the exercise re-implements -> their names: the
            answer fails if it runs one, however it reaches it (`reference_refused`).
    """

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(fn: Callable, *args, **kwargs) -> None:
            __tracebackhide__ = True  # noqa: F841 (IPython and pytest leave this frame out)
            if not callable(fn):
                raise TypeError(f"{check.__name__} expects your function, got "
                                f"{type(fn).__name__}: {fn!r}")
            try:
                no_grad = kwargs.pop("no_grad", False)
                with isolated(), torch.no_grad() if no_grad else contextlib.nullcontext(), \
                        reference_refused("your function", refuse, "compute it yourself") \
                        if refuse else contextlib.nullcontext():
                    check(fn, *args, **kwargs)
            except ExerciseFailed as err:
                raise ExerciseFailed(f"{title}: {err}") from None
            except Exception as err:  # the learner's bug, shown from the learner's code on
                if isinstance(err, NotImplementedError) and is_stub(err):
                    raise ExerciseNotDone(f"{title}: {NOT_DONE}") from None
                raise err.with_traceback(from_the_learner(err.__traceback__))
            print(f"✅ {title}: correct — matches the reference on every test input.")

        return run

    return decorate


def from_the_learner(tb):
    """`tb` from its first frame outside `labnn.exercises` on: the learner's function and
    what it called, without the checker's frames that led to it (all of `tb` if every
    frame is the checker's: a bug of the checker itself)."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename.startswith(EXERCISES):
        first = first.tb_next
    return first or tb


def call(fn: Callable, what: str, *args, advice: str = "",
         diagnose: Callable[[Exception], None] | None = None, **kwargs):
    """Call the learner's function; if it raises, say first what the check was calling.

    The one rule for a learner's exception, in every checker: a known mistake behind it
    is named (`diagnose`); any other keeps its type and traceback, to debug, after one
    line (on stderr) that says which call raised it, with the shape and dtype of every
    tensor handed in, e.g. ``the check called attention(q, k, v) with q [2, 5, 24] ...:
    your function must handle mask=None``. The call is `guarded`: a change it makes to
    torch's global state (gradients switched off, the default dtype, one of torch's
    functions replaced, ...) or to a module among the arguments is undone and named.

    Args:
        fn: the learner's function.
        what: the call as the learner would write it, e.g. ``"attention(q, k, v)"``;
            without a ``" with "`` of its own, the arguments are described after it.
        *args, **kwargs: the arguments.
        advice: what the function must handle, appended after a colon.
        diagnose: called with the error when `fn` raises, before the line is printed: it
            may `fail(...)` with a diagnosis of a known mistake (e.g. a function that only
            works on 2-D input); if it returns, the learner's error is raised as
            described.
    """
    if " with " not in what:
        what = f"{what}{describe_arguments(named_arguments(fn, args, kwargs))}"
    with running(what, fn, args, kwargs, advice=advice, diagnose=diagnose):
        return fn(*args, **kwargs)


def expect_repeatable(fn: Callable, what: str, got: torch.Tensor | tuple, *args) -> None:
    """Fail when calling `fn` again on copies of the same inputs gives another result
    than `got`, a tensor or a tuple of them (dropout, an unseeded randn, ... in the
    learner's function)."""
    copies = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12345)  # each call is guarded: the random stream is put back
        again = call(fn, what, *copies)
    pairs = zip(again, got) if isinstance(again, (tuple, list)) else [(again, got)]
    if any(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
           and not close(a, b.detach(), 0.0, 0.0) for a, b in pairs):
        fail(f"two calls of {what} on the same inputs give different results: something "
             "random (dropout?) is in your function; the exercise computes it without "
             "dropout (or use training=False).")


@contextlib.contextmanager
def running(what: str, fn: Callable | None = None, args: tuple = (),
            kwargs: dict | None = None, advice: str = "",
            diagnose: Callable[[Exception], None] | None = None) -> Iterator[None]:
    """Run learner's code that is not one call of `fn` (e.g. the backward of its
    `autograd.Function`) `guarded`, under the rule of `call`: a known mistake behind an
    exception is named by `diagnose`, any other is raised after `explain`."""
    try:
        with guarded(what, fn, args, kwargs):
            yield
    except ExerciseError:
        raise
    except Exception as err:
        if is_stub(err):
            raise
        if fn is not None:  # `if mask:` on an optional tensor: named for every exercise
            with guarded(what):
                truth_of_optional(fn, args, kwargs or {}, err)
        out_under_autograd(what, err)
        if diagnose is not None:
            with guarded(what):
                diagnose(err)
        if "numpy" in str(err):  # `.numpy()` of a tensor that requires grad, or a GPU's
            fail(f"{what} {NUMPY_GRAD if 'requires grad' in str(err) else NUMPY}")
        said = str(err)  # a GPU by name: none here, or one the check's inputs are not on
        if "compiled with CUDA" in said or "cuda" in said and "same device" in said:
            fail(f"{what} {NAMED_GPU} (torch: {said.strip().splitlines()[0][:60]})")
        with guarded(what):  # a size computed with `/`, `t.element_size` not called, ...
            other_exercise(what, err)
            name_python_slip(err)
        explain(what, err, advice)
        raise


def explain(what: str, err: Exception, advice: str = "") -> None:
    """The line printed (on stderr) before a learner's own exception: what the check
    called, and what the function must handle."""
    print(f"⚠️ the check called {what}" + (f": {advice}" if advice else "")
          + f"; your function raised the {type(err).__name__} below.", file=sys.stderr)


def describe_arguments(arguments: dict[str, object]) -> str:
    """`` with q [2, 3, 4], mask [5, 5] bool, n=3``: the tensors among `arguments`, by
    shape (and dtype unless float32), and the numbers and None by value; empty when
    there is nothing to say."""
    said = []
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            dtype = "" if value.dtype == torch.float32 else " " + (
                "bool" if value.dtype == torch.bool else str(value.dtype).split(".")[-1])
            said.append(f"{name} {describe_shape(value.shape)}{dtype}")
        elif value is None or isinstance(value, (bool, int, float)):
            said.append(f"{name}={value!r}")
    return " with " + ", ".join(said) if said else ""


class Snapshot(dict):
    """`snapshot`'s copies by name, and each tensor's identity and version counter."""

    versions: dict[str, tuple[int, int]]


def snapshot(**tensors: torch.Tensor | None) -> Snapshot:
    """Copies of the inputs handed to the learner, and their version counters, taken
    before the call, for `expect_unchanged`."""
    before = Snapshot({name: None if t is None
                       else t.detach().clone().requires_grad_(t.requires_grad)
                       for name, t in tensors.items()})
    before.versions = {n: (id(t), t._version) for n, t in tensors.items() if t is not None}
    return before


def expect_unchanged(before: dict[str, torch.Tensor | None], what: str,
                     **after: torch.Tensor | None) -> None:
    """Fail when the learner's function changed one of its input tensors in place: its
    values, or only its version counter (an in-place operation that left the values).

    Args:
        before: `snapshot(...)` of the inputs, taken before the call.
        what: the call, e.g. ``"attention(q, k, v)"``.
        **after: the very tensors that were passed, by the same names.
    """
    for name, tensor in after.items():
        old = before[name]
        if tensor is None or old is None:
            continue
        if old.requires_grad and not tensor.requires_grad:
            fail(f"{what} detached its input `{name}` in place (`{name}.detach_()` or "
                 f"`{name}.requires_grad_(False)`): that cuts the caller's `{name}` from "
                 f"its graph too. Use `{name}.detach()`, which returns a new, detached "
                 f"tensor and leaves `{name}` as it was.")
        now = tensor.detach()
        if not _same(now, old):
            where = ""
            if now.shape == old.shape:
                where = f" (first change at {first_position(now != old)})"
            boolean = old.dtype == torch.bool
            ops = "`.logical_not_()`, `&=`" if boolean else "`/=`, `.add_(...)`"
            new = f"`~{name}`" if boolean else f"`{name} / ...`"
            fail(f"{what} modified its input `{name}` in place{where}: in-place operations "
                 f"({ops}, `[...] = ...`, methods ending in `_`), on it or a view of it "
                 f"(`expand`, a slice), change the caller's tensor. Compute a new tensor "
                 f"instead ({new}, or edit `{name}.clone()`).")
        kept = getattr(before, "versions", {}).get(name)  # of this very tensor, not a copy
        if kept and kept[0] == id(tensor) and kept[1] != tensor._version:
            fail(f"{what} changed its input `{name}` in place (`.clamp_(...)`, `*= 1`, "
                 "`%= n`, any method ending in `_`): its values stay the same here, but its "
                 "version counter moved, and autograd refuses a backward through any "
                 "operation that saved it. Compute a new tensor instead (`.clamp(...)`).")


def _same(now: torch.Tensor, old: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN."""
    if now.shape != old.shape or not torch.equal(now.isnan(), old.isnan()):
        return False
    return torch.equal(now.nan_to_num(0.0) if now.is_floating_point() else now,
                       old.nan_to_num(0.0) if old.is_floating_point() else old)


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the two tensors are views of the same storage (writing one may change
    the other)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def expect_no_alias(got: torch.Tensor, what: str, hint: str = "",
                    **inputs: torch.Tensor | None) -> None:
    """Fail when the result is a view of one of the inputs instead of a new tensor
    (`hint`, e.g. ``" (xs[0]?)"``, says after the input's name how it came about)."""
    for name, tensor in inputs.items():
        if (isinstance(got, torch.Tensor) and tensor is not None
                and shares_memory(got, tensor)):
            fail(f"{what} returns a view of its input `{name}`{hint} (they share memory), so a "
                 "later in-place change to one silently changes the other: return a new "
                 "tensor (e.g. `.clone()`).")


def expect_new_each_call(fn: Callable, what: str, *args, fix: str) -> None:
    """Call `fn(*args)` twice: fail when both results share memory (a cache,
    functools.lru_cache, views of one kept buffer), so that a caller's in-place edit of
    one changes the next; `fix` says how to make it afresh."""
    first, again = (call(fn, what, *args) for _ in range(2))
    if (isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor)
            and shares_memory(first, again)):
        fail(f"{what} returns the same tensor on every call (functools.lru_cache, a dict, "
             "or views of one kept buffer): a caller that edits it in place changes the "
             f"next call's. {fix}")
