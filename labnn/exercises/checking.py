"""The machinery behind every exercise checker.

A checker is a function decorated with `@exercise("title")` that calls the learner's function on random
inputs, compares the result with the package's reference and calls `fail(...)` with a precise diagnosis
(wrong shape, mask ignored, softmax over the wrong axis, missing scale, ...) when something differs.

Outcomes, as a learner sees them in a notebook:

* the stub still raises `NotImplementedError` -> `ExerciseNotDone`, shown as one friendly line;
* a diagnosis -> `ExerciseFailed`, shown as one line with what differs and a hint;
* the learner's code raises something else -> that error, with its own traceback, to debug;
* everything matches -> a line saying so.
"""

from __future__ import annotations

import functools
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
            except NotImplementedError as err:
                hint = f" Hint: {err}" if str(err) else ""
                raise ExerciseNotDone(f"{title}: not solved yet — fill in the cell above and run it again.{hint}") from None
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


def expect_shape(got: torch.Tensor, shape: Sequence[int], what: str) -> None:
    """Fail with both shapes when `got` does not have `shape`."""
    expect_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        fail(f"{what} has shape {describe_shape(got.shape)}, expected {describe_shape(shape)}.")


def close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True when the two tensors have the same shape and values within tolerance."""
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and torch.allclose(got.detach().to(want.dtype), want, atol=atol, rtol=rtol)
    )


def expect_close(got: torch.Tensor, want: torch.Tensor, what: str, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Fail with the largest difference and where it occurs when `got` differs from `want`."""
    expect_shape(got, want.shape, what)
    if torch.isnan(got).any():
        fail(f"{what} contains NaN (at {_first_index(torch.isnan(got))}).")
    if not close(got, want, atol, rtol):
        diff = (got.detach().to(want.dtype) - want).abs()
        where = _first_index(diff == diff.max())
        fail(
            f"{what} differs from the reference: largest difference {diff.max().item():.3g} at index {where} "
            f"(yours {got.flatten()[diff.argmax()].item():.4g}, expected {want.flatten()[diff.argmax()].item():.4g})."
        )


def _first_index(flags: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in flags.nonzero()[0])
