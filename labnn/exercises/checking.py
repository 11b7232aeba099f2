"""The machinery behind every exercise checker.

A checker is a function decorated with `@exercise("title")` that calls the learner's function on random
inputs, compares the result with the package's reference and calls `fail(...)` with a precise diagnosis
(wrong shape, mask ignored, softmax over the wrong axis, missing scale, ...) when something differs.

Outcomes, as a learner sees them in a notebook:

* the stub still raises `NotImplementedError` -> `ExerciseNotDone`, shown as one friendly line that points
  to the tiered hints below the cell (never the stub's own message, which could give the answer away);
* a diagnosis -> `ExerciseFailed`, shown as one line naming the mistake and where it shows, as a position in
  the tensor's own dimensions (`at [b=0, h=1, i=2, j=3]`);
* the learner's code raises something else -> that error, with its own traceback, to debug;
* everything matches -> a line saying so.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Sequence

import torch


class ExerciseError(AssertionError):
    """Base of the two exercise outcomes; rendered by IPython as a single line, without a traceback."""

    symbol = ""

    def _render_traceback_(self) -> list[str]:  # IPython calls this instead of printing a traceback
        return [f"{self.symbol} {self}"]


class ExerciseNotDone(ExerciseError):
    """The exercise stub has not been filled in yet."""

    symbol = "✏️"


class ExerciseFailed(ExerciseError):
    """The learner's function runs but its result differs from the reference."""

    symbol = "❌"


NOT_DONE = ("not solved yet — fill in the cell above and run it again; stuck? open Hint 1 below the cell.")


def fail(message: str) -> None:
    """Stop the check with a diagnosis the learner can act on."""
    raise ExerciseFailed(message)


def exercise(title: str) -> Callable[[Callable], Callable]:
    """Decorate a checker: turn an unfilled stub into `ExerciseNotDone` and report success in one line.

    Args:
        title: what the exercise asks for, e.g. ``"attention weights"``; used in every message.
    """

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(fn: Callable, *args, **kwargs) -> None:
            if not callable(fn):
                raise TypeError(f"{check.__name__} expects your function, got {type(fn).__name__}: {fn!r}")
            try:
                with torch.no_grad() if kwargs.pop("no_grad", False) else _nullcontext():
                    check(fn, *args, **kwargs)
            except NotImplementedError:
                raise ExerciseNotDone(f"{title}: {NOT_DONE}") from None
            except ExerciseFailed as err:
                raise ExerciseFailed(f"{title}: {err}") from None
            print(f"✅ {title}: correct — matches the reference on every test input.")

        return run

    return decorate


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


def describe_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def expect_tensor(got, what: str) -> torch.Tensor:
    """Fail unless `got` is a tensor."""
    if not isinstance(got, torch.Tensor):
        fail(f"{what} should return a torch.Tensor, but returned {type(got).__name__}.")
    return got


def name_axes(shape: Sequence[int], sizes: dict[str, int]) -> str | None:
    """The shape written with the names of its axes, e.g. ``"[B, D_h, H, T]"``.

    Args:
        shape: the sizes to name.
        sizes: name -> size, e.g. ``{"B": 2, "H": 4, "T": 5, "D_h": 6}``; every size must differ, or the
            axes could not be told apart.

    Returns:
        The names in brackets, or None when a size has no name (or the sizes do not tell the axes apart).
    """
    by_size = {size: name for name, size in sizes.items()}
    if len(by_size) != len(sizes) or any(int(n) not in by_size for n in shape):
        return None
    return "[" + ", ".join(by_size[int(n)] for n in shape) + "]"


def expect_shape(
    got: torch.Tensor, shape: Sequence[int], what: str, sizes: dict[str, int] | None = None
) -> None:
    """Fail with both shapes when `got` does not have `shape`; with `sizes` (see `name_axes`) both shapes are
    also written with the names of their axes, so that a swap of two axes shows."""
    expect_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        named = [name_axes(x, sizes) if sizes else None for x in (got.shape, shape)]
        mine, want = (describe_shape(x) + (f" = {n}" if n and all(named) else "")
                      for x, n in zip((got.shape, shape), named))
        fail(f"{what} has shape {mine}, expected {want}.")


def describe_position(index: Sequence[int], dims: str | Sequence[str] | None = None) -> str:
    """A position in a tensor, written with the tensor's own dimension names.

    Args:
        index: one integer per dimension, e.g. ``(0, 1, 2, 3)``.
        dims: the names of the dimensions, e.g. ``"b h i j"``; None writes the bare index.

    Returns:
        ``"[b=0, h=1, i=2, j=3]"``, or ``"[0, 1, 2, 3]"`` without names.

    Raises:
        ValueError: `dims` does not name every dimension of `index`.
    """
    index = [int(i) for i in index]
    if dims is None:
        return "[" + ", ".join(str(i) for i in index) + "]"
    names = dims.split() if isinstance(dims, str) else list(dims)
    if len(names) != len(index):
        raise ValueError(f"dims must name each of the {len(index)} dimensions, got {dims!r}")
    return "[" + ", ".join(f"{n}={i}" for n, i in zip(names, index)) + "]"


def first_position(flags: torch.Tensor, dims: str | Sequence[str] | None = None) -> str:
    """The first True entry of a boolean tensor, as `describe_position` writes it."""
    return describe_position(_first_index(flags), dims)


def expect_dtype(got: torch.Tensor, dtype: torch.dtype, what: str, hint: str = "") -> None:
    """Fail when `got` does not have `dtype` (e.g. a float where a LongTensor of indices is asked for)."""
    expect_tensor(got, what)
    if got.dtype != dtype:
        fail(f"{what} has dtype {got.dtype}, expected {dtype}." + (f" {hint}" if hint else ""))


def snapshot(**tensors: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
    """Copies of the inputs handed to the learner, taken before the call, for `expect_unchanged`."""
    return {name: None if t is None else t.detach().clone().requires_grad_(t.requires_grad)
            for name, t in tensors.items()}


def expect_unchanged(before: dict[str, torch.Tensor | None], what: str, **after: torch.Tensor | None) -> None:
    """Fail when the learner's function changed one of its input tensors in place.

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
                 f"`{name}.requires_grad_(False)`): that cuts the caller's `{name}` from its graph too. Use "
                 f"`{name}.detach()`, which returns a new, detached tensor and leaves `{name}` as it was.")
        now = tensor.detach()
        same = now.shape == old.shape and torch.equal(now.isnan(), old.isnan()) and torch.equal(
            now.nan_to_num(0.0) if now.is_floating_point() else now,
            old.nan_to_num(0.0) if old.is_floating_point() else old)
        if not same:
            where = "" if now.shape != old.shape else f" (first change at {first_position(now != old)})"
            ops = (f"`{name}.logical_not_()`, `{name} &= ...`" if old.dtype == torch.bool else
                   f"`{name} /= ...`, `{name}.add_(...)`")
            new = f"`~{name}`, `{name} & other`" if old.dtype == torch.bool else f"`{name} / ...`"
            fail(f"{what} modified its input `{name}` in place{where}: an in-place operation ({ops}, "
                 f"`{name}[...] = ...`, a method ending in `_`) changes the caller's tensor too. Compute a new "
                 f"tensor instead (e.g. {new}, or edit `{name}.clone()`).")


def call(fn: Callable, what: str, *args, advice: str = "", diagnose: Callable[[], None] | None = None,
         **kwargs):
    """Call the learner's function; if it raises, say first what the check was calling.

    The learner's own error (a shape mismatch, ``~None``, ...) keeps its traceback, to debug; one line
    printed before it (on stderr) says which call raised it and, with `advice`, what the function must
    handle, e.g. ``the check called attention(q, k, v) with mask=None: your function must handle
    mask=None``.

    Args:
        fn: the learner's function.
        what: the call as the learner would write it, with the shapes of its inputs.
        *args, **kwargs: the arguments.
        advice: what the function must handle, appended after a colon.
        diagnose: called when `fn` raises, before the line is printed: it may `fail(...)` with a
            diagnosis of a known mistake (e.g. a function that only works on 2-D input); if it returns,
            the learner's error is raised as described.
    """
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, ExerciseError):
        raise
    except Exception as err:
        if diagnose is not None:
            diagnose()
        print(f"⚠️ the check called {what}" + (f": {advice}" if advice else "")
              + f"; your function raised the {type(err).__name__} below.", file=sys.stderr)
        raise


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the two tensors are views of the same storage (writing one may change the other)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def expect_no_alias(got: torch.Tensor, what: str, **inputs: torch.Tensor | None) -> None:
    """Fail when the result is a view of one of the inputs instead of a new tensor."""
    for name, tensor in inputs.items():
        if tensor is not None and shares_memory(got, tensor):
            fail(f"{what} returns a view of its input `{name}` (they share memory), so a later in-place change "
                 f"to one silently changes the other: return a new tensor (e.g. `.clone()`).")


def _global_functions(fn: Callable) -> list:
    """The global objects `fn`'s code (nested functions and lambdas included) refers to by name."""
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    found = [cell.cell_contents for cell in getattr(fn, "__closure__", None) or () if _filled(cell)]
    todo = [code] if code is not None else []
    while todo:
        code = todo.pop()
        found += [namespace[name] for name in code.co_names if name in namespace]
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell: a closure variable not assigned yet
        return False
    return True


def expect_own_code(fn: Callable, what: str, **references: Callable) -> None:
    """Fail when the learner hands in, or calls, the package's own version instead of writing one.

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"relative_shift(x)"``.
        **references: the package's functions the exercise re-implements, by the name a learner knows them.
    """
    used = _global_functions(fn)
    for name, ref in references.items():
        if fn is ref or any(obj is ref for obj in used):
            fail(f"{what} calls labnn's own `{name}`, the reference it is checked against: the exercise is to "
                 "compute it yourself from tensor operations.")


def close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True when the two tensors have the same shape and values within tolerance (NaN where `want` has NaN
    counts as equal: a known mistake that produces NaN is still recognised)."""
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and torch.allclose(got.detach().to(want.dtype), want, atol=atol, rtol=rtol, equal_nan=True)
    )


def expect_close(
    got: torch.Tensor,
    want: torch.Tensor,
    what: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    *,
    dims: str | Sequence[str] | None = None,
    where: torch.Tensor | None = None,
) -> None:
    """Fail with the largest difference and where it occurs when `got` differs from `want`.

    Args:
        got: the learner's result.
        want: the reference.
        what: the call, e.g. ``"relative_shift(x)"``; starts every message.
        atol, rtol: tolerances of `torch.allclose`.
        dims: the names of `want`'s dimensions, e.g. ``"b h i j"``: positions are then reported as
            ``[b=0, h=1, i=2, j=3]``.
        where: boolean, broadcastable to `want`'s shape: compare only these entries (e.g. the keys a query
            may see); positions are still reported in the full tensor.
    """
    expect_shape(got, want.shape, what)
    got = got.detach().to(want.dtype) if want.is_floating_point() else got.detach()
    keep = torch.ones(want.shape, dtype=torch.bool, device=want.device) if where is None else where.expand(want.shape)
    nan = torch.isnan(got) & keep if got.is_floating_point() else torch.zeros_like(keep)
    if nan.any():
        fail(f"{what} contains NaN (first at {first_position(nan, dims)}).")
    if not want.is_floating_point():
        got, want = got.double(), want.double()
    diff = ((got - want).abs() - (atol + rtol * want.abs())).clamp(min=0.0) * keep
    if (diff > 0).any():
        size = ((got - want).abs() * keep)
        index = _first_index(size == size.max())
        n_bad, n_all = int((diff > 0).sum()), int(keep.sum())
        fail(
            f"{what} differs from the reference at {n_bad} of {n_all} entries compared; the largest difference, "
            f"{size.max().item():.3g}, is at {describe_position(index, dims)} "
            f"(yours {got[index].item():.4g}, expected {want[index].item():.4g})."
        )


def _first_index(flags: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in flags.nonzero()[0])


def expect_gradients(
    got: torch.Tensor | Sequence[torch.Tensor],
    want: torch.Tensor | Sequence[torch.Tensor],
    what: str,
    inputs: dict[str, tuple[torch.Tensor, torch.Tensor]],
    dims: dict[str, str] | None = None,
    advice: str = "",
) -> None:
    """Fail when gradients do not flow from the learner's result back to its inputs as they should.

    A random cotangent is backpropagated through `got` and through the reference `want`; the gradients
    with respect to every input are compared. Catches a `.detach()`, `.data` or `torch.no_grad()` that
    leaves the values right but cuts the gradient.

    Args:
        got: the learner's result (or a tuple of results), computed from the first tensor of each input.
        want: the reference result(s), computed from the second tensor of each input.
        what: the call, e.g. ``"memory_vector(xs, w)"``.
        inputs: name -> (the tensor the learner used, the one the reference used); both require grad.
        dims: name -> the dimension names of that input, for positions (``{"w": "l"}``).
        advice: appended to the message when an input gets no gradient.
    """
    gots = [got] if isinstance(got, torch.Tensor) else list(got)
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    generator = torch.Generator().manual_seed(1234)
    cotangents = [torch.randn(w.shape, generator=generator, dtype=w.dtype) for w in wants]
    names = list(inputs)
    if not any(g.requires_grad for g in gots):
        listed = ", ".join(f"`{n}`" for n in names)
        fail(f"{what} is detached from its inputs (no grad_fn): {listed} "
             + ("gets no gradient: did you detach it or the result" if len(names) == 1 else
                "get no gradient: did you detach them or the result")
             + " (`.detach()`, `.data`, `torch.no_grad()`)?" + (f" {advice}" if advice else ""))
    mine = torch.autograd.grad(
        [g for g in gots if g.requires_grad], [inputs[n][0] for n in names],
        [c.to(g.dtype) for g, c in zip(gots, cotangents) if g.requires_grad], allow_unused=True)
    ref = torch.autograd.grad(wants, [inputs[n][1] for n in names], cotangents, allow_unused=True)
    for name, a, b in zip(names, mine, ref):
        if b is not None and b.abs().amax() > 0 and (a is None or not a.abs().amax() > 0):
            fail(f"`{name}` gets no gradient from {what}: " + (advice or (
                f"did you detach it (`{name}.detach()`, `.data`, or `torch.no_grad()`)? The values are "
                f"right, but no gradient flows back to `{name}`, so nothing before it could learn.")))
    for name, a, b in zip(names, mine, ref):
        if b is None:
            continue
        expect_close(torch.zeros_like(b) if a is None else a, b,
                     f"the gradient of {what} with respect to `{name}` (values right, gradient wrong: is part "
                     "of the path detached?)", dims=(dims or {}).get(name))
