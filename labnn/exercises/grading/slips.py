"""Slips that several exercises share, named the same way everywhere: only the first row
of the batch computed, a broadcast error that an axis of the inputs causes, the typical
wrong scalings of dot-product scores, `if mask:` on an optional tensor argument, `out=`
where autograd must follow.

Every helper fails (`fail`) with one sentence naming the slip and the fix, or returns
when the answer does not show it.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from labnn.exercises.grading.compare import close, expect_close, expect_like
from labnn.exercises.grading.outcomes import fail, first_line
from labnn.exercises.grading.python_slips import name_python_slip

MASK_IGNORED = ("the mask argument is ignored: your answer always applies a causal mask; use "
                "the mask it is given, and none when mask=None.")
MASK_NONE_CAUSAL = ("mask=None must attend everywhere: with mask=None your answer applies a "
                    "causal mask; apply a mask only when one is given.")
# a float32 tensor made of a number, and its fix (a float32 step's commonest cause)
MADE = "torch.tensor(n): use the number n"
MADE_SCALE = "torch.tensor(d): use math.sqrt(d)"  # where the exercise scales by 1/sqrt(d)


def expect_every_row(got: torch.Tensor, want: torch.Tensor, what: str,
                     row: str = "batch row", fix: str = "",
                     untouched: torch.Tensor | None = None) -> None:
    """Fail when row 0 (along dim 0) of `got` is right and the wrong later rows are rows
    never computed: copies of row 0 (expanded), zeros, or `untouched`'s rows (the loop
    body ran for row 0 alone). Rows wrong in another way are another mistake: no
    diagnosis here.

    Args:
        got, want: the learner's result and the reference, of the same shape.
        what: the call, e.g. ``"attention(q, k, v)"``.
        row: what a row along dim 0 is, e.g. ``"batch row"``.
        fix: what to do, appended after a colon.
        untouched: what a row holds before it is computed (e.g. the input it is
            written into), if not zeros.
    """
    got, want = got.detach(), want.detach()
    if got.shape != want.shape or got.size(0) < 2 or close(got, want):
        return
    if not close(got[:1], want[:1]):
        return
    wrong = [b for b in range(1, got.size(0)) if not close(got[b:b + 1], want[b:b + 1])]
    copied = all(close(got[b:b + 1], got[:1]) for b in wrong)
    blank = untouched if untouched is not None else torch.zeros_like(got)
    if not copied and not all(close(got[b:b + 1], blank[b:b + 1]) for b in wrong):
        return
    if wrong == list(range(1, got.size(0))):
        said = f"only {row} 0 is computed"
    else:  # some computed, some never: a loop stopping short (range(n - 1)), or skipping
        said = (f"{row}{'s' * (len(wrong) > 1)} {', '.join(map(str, wrong))} "
                f"{'are' if len(wrong) > 1 else 'is'} never computed"
                + (" (a loop that stops one short?)" if wrong == [got.size(0) - 1] else ""))
    fail(f"{what}: {row} 0 is right but {row} {wrong[0]} is not"
         + (" (it repeats row 0)" if copied else "")
         + f": {said}; compute every {row}" + (f": {fix}" if fix else "."))


def rerun_broadcast(err: Exception, rerun: Callable[[], bool], message: str) -> None:
    """Name a torch broadcast error (``must match the size``) when `rerun`, the learner's
    function on inputs where that axis does not clash, runs and gives what the slip
    predicts (it returns True): `message` (the slip) then torch's own line. Otherwise
    (another error, a rerun that raises or gives anything else) return, and the caller
    raises the learner's own error."""
    if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
        return
    try:
        named = rerun()
    except Exception:
        return
    if named:
        fail(f"{message} (torch said: {str(err).strip().splitlines()[0]})")


def scale_slips(weights: Callable[[float], torch.Tensor], d: int, keys: int,
                after: Callable[[torch.Tensor], torch.Tensor] = lambda w: w
                ) -> list[tuple[torch.Tensor, str]]:
    """The typical wrong scalings of the scores, as `(result, message)` pairs.

    Args:
        weights: scale -> the softmax weights with the scores multiplied by it.
        d: the width of queries and keys (the right scale is 1 / sqrt(d)).
        keys: the number of keys.
        after: what the answer does with the weights (e.g. ``w @ v``).
    """
    return [
        (after(weights(d ** 0.5)),
         f"you multiplied the scores by sqrt(d) (d = {d}): divide by it, "
         "scores / math.sqrt(q.size(-1))."),
        (after(weights(keys ** -0.5)),
         f"you divided the scores by sqrt({keys}) = sqrt(k.size(1)), the number of keys: "
         f"divide by sqrt(d) = sqrt(q.size(-1)), the width of queries and keys ({d})."),
    ]


def expect_reduced_axis(got: torch.Tensor, want: torch.Tensor, axes: dict[str, int],
                        reduce: str, what: str) -> None:
    """Fail when `got` has the shape of an input with named `axes` (name -> size, in
    order) less another axis than `reduce` (in any order), where `want` has not: the sum
    (or mean) ran over the wrong axis, named."""
    for other in axes:
        kept = [n for n in axes if n != other]
        if (other != reduce and got.shape != want.shape
                and sorted(got.shape) == sorted(axes[n] for n in kept)):
            fail(f"{what} has shape {list(got.shape)}, expected {list(want.shape)}: the "
                 f"sum ran over {other}, not over {reduce} (dim "
                 f"{list(axes).index(reduce)} of [{', '.join(axes)}]).")


def gives(fn: Callable, *args) -> bool:
    """Whether `fn(*args[:-1])` runs and gives `args[-1]` (a rerun that names a slip)."""
    try:
        return close(fn(*args[:-1]), args[-1])
    except Exception:
        return False


class _Probe(torch.Tensor):
    """An argument handed in again to find a truth test on it: `bool()` of the very
    object (not of a tensor computed from it) raises `_Tested`."""

    target = None

    def __bool__(self) -> bool:
        if self is _Probe.target:
            raise _Tested
        return super().__bool__()


class _Tested(Exception):
    """`bool()` was asked of the probed argument."""


def out_under_autograd(what: str, err: Exception) -> None:
    """torch refusing `out=` where autograd must follow (an input requires grad): named
    for every exercise, before a checker's own diagnosis reruns the function on inputs
    that need no gradient (where `out=` runs)."""
    text = str(err)
    if "out=... arguments don't support automatic differentiation" in text:
        op = text.split("(", 1)[0].strip()
        fail(f"{what}: {op}(..., out=...) writes into a tensor that autograd cannot follow "
             "(torch refuses out= when an input requires grad): return a new tensor, "
             f"{op}(...) without out=.")


def truth_of_optional(fn: Callable, args: tuple, kwargs: dict, err: Exception) -> None:
    """After torch's "Boolean value of Tensor ... is ambiguous": rerun `fn` with each
    tensor argument whose default is None in turn as a probe, and name `if mask:` when
    the truth of that very argument was asked (the fix: `if mask is not None:`)."""
    if "Boolean value of Tensor" not in str(err):
        return
    name_python_slip(err)  # `not mask`, `a > 0 and b`: the expression names them first
    try:
        signature = inspect.signature(fn)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return
    for name, value in dict(bound.arguments).items():
        if (not isinstance(value, torch.Tensor) or value.numel() < 2
                or signature.parameters[name].default is not None):
            continue

        def run(probe: torch.Tensor, name: str = name) -> None:
            bound.arguments[name] = probe
            fn(*bound.args, **bound.kwargs)

        try:
            asked = asks_truth(run, value)
        finally:
            bound.arguments[name] = value
        if asked:
            fail(f"`if {name}:` asks the truth of a tensor of {value.numel()} values, which "
                 f"is ambiguous: to test whether the optional `{name}` was given, write "
                 f"`if {name} is not None:`.")


def asks_truth(run: Callable[[torch.Tensor], object], value: torch.Tensor) -> bool:
    """Whether `run(probe)`, with `probe` a copy of `value`, asks `bool()` of that very
    object (`if mem:`), not of a tensor computed from it."""
    _Probe.target = probe = value.detach().clone().as_subclass(_Probe)
    try:
        run(probe)
    except _Tested:
        return True
    except Exception:
        return False
    finally:
        _Probe.target = None
    return False


def beyond_float32(*tensors: torch.Tensor, factor: float = 1 / 3) -> tuple[torch.Tensor, ...]:
    """float64 copies of `tensors` times `factor` (1/3 by default): values float32 cannot
    hold, for the float64 round's inputs. The check's own numbers are float32 ones; cast up
    as they are, a `.float()` on one of them (cast back) would lose nothing and pass."""
    return tuple(t.detach().double() * factor for t in tensors)


def float64_round(fn: Callable, what: str, args: tuple, want: torch.Tensor,
                  hint: str = "", precise: bool = True, made: str = MADE) -> None:
    """The one dtype rule on float64 inputs: run `fn` once more on `args` (float64 copies
    of the check's inputs) and refuse a result of another dtype with `expect_like`'s
    message, which float32-only inputs cannot show (`.float()`, `torch.zeros(n)`); then
    (`precise`) refuse values that match only at float32 precision (a float32 step inside
    a float64 result), naming it, or that differ beyond float64's rounding.

    Args:
        fn: the learner's function.
        what: the call, e.g. ``"memory_vector(xs, w)"``.
        args: the float64 inputs.
        want: the reference on those inputs.
        hint: what to do about a wrong dtype (default: `expect_like`'s).
        precise: compare the values at float64 precision (rtol 1e-10); False for results
            that are ratios of counts, where `hits.sum() / n` is float32 by torch's default.
        made: a float32 tensor made of a number, and its fix (`expect_float64_accurate`).
    """
    from labnn.exercises.grading import call  # the package imports this module
    what = f"{what} with float64 inputs"
    got = expect_like(call(fn, what, *args, diagnose=_dtype_clash(what)), want, what,
                      hint).detach()
    if precise:
        expect_float64_accurate(got, want, what, made)


def _dtype_clash(what: str) -> Callable[[Exception], None]:
    """A `diagnose` for a float64 round: torch refusing to mix float32 and float64 (a
    `.float()` on the way meets the float64 weights or inputs) is named."""
    def diagnose(err: Exception) -> None:
        text = str(err)
        if "same dtype" in text or "expected scalar type" in text.lower():
            fail(f"{what} raised torch's dtype error ({first_line(text, 90)}): "
                 "a cast on the way (.float(), .to(torch.float32)) meets float64 tensors; "
                 "drop it and keep the inputs' dtype.")
    return diagnose


def constant_error(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """What a small error of `got` against `want` (of one shape) is, when its pattern
    tells: the same amount added to every value (an eps), every value scaled by one
    factor a little off 1, or an error below float32's rounding of these values (float32
    keeps ~6e-8 of each value: a float32 step leaves errors of that size, which vary
    from value to value). None when the pattern does not tell (a float32 step, or a
    constant added where its effect varies)."""
    got, want = got.detach().double(), want.detach().double()
    off, scale = got - want, want.abs().max().nan_to_num()
    if got.shape != want.shape or got.numel() < 4 or not off.abs().max() > 0:
        return None
    big = want.abs() > 1e-3 * scale
    spread = want.max() - want.min() > 0.1 * scale  # equal values round alike
    rel = off[big] / want[big]
    if spread and (off - off.median()).abs().max() < 1e-2 * off.abs().max():
        return "the same small constant added to every value (an eps?)"
    if spread and rel.numel() > 3 and (rel - rel.median()).abs().max() < 1e-2 * rel.abs().max():
        factor = rel.median().item()
        sign = "-" if factor < 0 else "+"
        return f"every value scaled by ~1 {sign} {abs(factor):.0e} (a constant a little off)"
    if rel.numel() > 3 and rel.abs().max() < 1e-8:
        return ("an error below float32's rounding: a small constant (an eps) added "
                "somewhere, or a float32 step (.float()) whose error shrank on the way")
    return None


def expect_float64_accurate(got: torch.Tensor, want: torch.Tensor, what: str,
                            made: str = MADE) -> None:
    """Fail unless a float64 `got` equals `want` to float64's rounding, naming a float32
    step on the way (`made`: a tensor made of a number without dtype=, and its fix, as the
    exercise would write them) or a small constant added (both pass a float32-sized
    tolerance)."""
    if close(got, want, atol=1e-12, rtol=1e-10):
        return
    off = (got - want).abs().nan_to_num()
    scale = want.abs().max().nan_to_num()
    if close(got, want, atol=1e-6, rtol=1e-5) and off.max() > 1e-10 * scale:
        step = ("a float32 step on the way (.float(), dtype=torch.float32, or a tensor made "
                f"without dtype=, e.g. {made})")
        eps = "a small constant (an eps) added somewhere"
        # a float32 step leaves values float32 can hold, or errors of float32's size
        # (~1e-7 relative); a constant added somewhere (an eps) need leave neither
        constant = constant_error(got, want)
        fix = "keep every step in the inputs' dtype and compute exactly what is asked."
        if constant and "float32" not in constant:  # a constant, not a dtype, to fix
            fix = "compute exactly what is asked: no eps, every constant exact."
        if constant:
            said = f"off by ~{off.max().item():.0e}: {constant}"
        elif torch.equal(got, got.float().double()):
            said = f"only float32-accurate (differs by ~{off.max().item():.0e}): {step}"
        else:  # below float32's precision too: a float32 step's error can shrink on the way
            said = (f"only float32-accurate (differs by ~{off.max().item():.0e}): {step}, or "
                    f"{eps}")
        fail(f"{what}: your result is float64 but {said}; {fix}")
    if close(got, want, atol=1e-4, rtol=1e-3):  # within a float32 check's tolerance
        fail(f"{what}: your result is off by ~{off.max().item():.0e}, far more than "
             f"rounding: a small constant (an eps) added somewhere, or a constant a little "
             "off (the scale?); compute exactly what is asked.")
    expect_close(got, want, what)
    expect_close(got, want, what, atol=1e-12, rtol=1e-10)
