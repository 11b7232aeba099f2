"""What an answer to notebook 04's exercises does that its values do not show: autograd
asked for a derivative in forward mode too, float64 computing cast back to float32, numpy's
float64 arrays (`NumpyCalls`), memory left uninitialised (`torch.empty`), a buffer of a
fixed size cut to T rows (kept between calls, or made at each one), and a backward whose
result cannot be differentiated again (the graph cut by `.detach()`, `.data`,
`torch.no_grad()` or `@once_differentiable`), and a weight gradient (Exercise 5) computed as
many products summed, not one (`expect_one_product`).

Watched at the dispatcher (a `TorchDispatchMode`) where the spelling varies: every cast to
float64 is one `_to_copy` (or an operation whose float32 inputs give a float64 result), and
every uninitialised tensor is one `empty`-like operation, whose memory is filled with NaN
(`grading.fresh_values.uninitialised`) so that what it held shows the same way on every run.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Callable, Iterator, Sequence

import torch
import torch.autograd.forward_ad as forward_ad
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labnn.exercises.grading import call, expect_tensor, fail
from labnn.exercises.grading.fresh_values import (  # noqa: F401 (custom_backward's)
    expect_initialised, uninitialised)
from labnn.exercises.grading.products import count
from labnn.exercises.grading.reference_calls import (AUTOGRAD, calls_refused, closure_values,
                                                    globals_read)

aten = torch.ops.aten
# the ways to ask autograd for a derivative an exercise asks the learner to write: reverse
# mode (`AUTOGRAD`) and forward mode
DERIVATIVE_CALLS = {**AUTOGRAD, torch.func.jvp: "torch.func.jvp",
                    torch.func.jacfwd: "torch.func.jacfwd",
                    torch.func.linearize: "torch.func.linearize",
                    forward_ad.make_dual: "torch.autograd.forward_ad.make_dual"}


class _Widened(TorchDispatchMode):
    """Records the first operation that makes a float64 tensor from floating inputs of a
    smaller dtype (`x.double()`, `x.to(torch.float64)`, `out64 += x32`)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.found:
            ins = [t.dtype for t in tree_leaves((args, kwargs))
                   if isinstance(t, torch.Tensor) and t.is_floating_point()]
            outs = [t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            if torch.float64 in outs and any(d != torch.float64 for d in ins):
                self.found.append(func.overloadpacket.__name__)
        return out


class NumpyCalls(TorchFunctionMode):
    """A block (`with NumpyCalls() as numpy:`) whose `.numpy()` calls set `numpy.seen`:
    numpy's arrays (np.zeros) are float64, which a float32 round then shows."""

    seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen = self.seen or getattr(func, "__name__", "") == "numpy"
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def widening() -> Iterator[_Widened]:
    """Run the block (the learner's code on float32 inputs) watching for float64 made from
    float32; pass what it yields to `expect_not_widened` after the block."""
    with _Widened() as mode:
        yield mode


def expect_not_widened(mode: _Widened, what: str, fix: str) -> None:
    """Fail when the block watched by `widening` made float64 from float32, though its
    results came back in float32 with the right values; `fix` says what to do."""
    if mode.found:
        fail(f"{what} computes in float64 ({mode.found[0]} made float64 from float32: a "
             ".double() or dtype=torch.float64 on the way, cast back?): twice the memory and "
             f"time; {fix}.")


def expect_no_fixed_buffer(fn: Callable, got: torch.Tensor, what: str,
                           reads: Callable[[int], Sequence[torch.Tensor]], t: int) -> None:
    """Fail when `fn` reads a tensor of at least 512 rows kept outside the call, or when its
    result `got` (`fn(reads(t))`) is a view of a larger tensor whose size does not grow with
    T (`fn(reads(t + 4))`'s is the same): a buffer of a fixed size, cut to T rows."""
    fix = ("T has no bound: make the result from T = len(read_grads) on every call, "
           "torch.zeros_like(read_grads[-1])")
    first = _allocated(fn, reads(t))
    if first is not None and first[0] > t:  # then at more steps than its rows (or t + 4)
        n = first[0] + 1 if first[0] < 4096 else t + 4
        try:
            later = _allocated(fn, reads(n))
        except Exception as err:  # noqa: BLE001 (the learner's, named below)
            later = f"raises {type(err).__name__} at T = {n}"
        if not isinstance(later, torch.Size) or later == first:
            said = later if isinstance(later, str) else f"the same at T = {n}"
            fail(f"{what} allocates a {list(first)} tensor for T = {t} steps, and {said}: a "
                 f"buffer of a fixed size, wrong for any longer T; {fix}.")
    for name, value in _kept_tensors(fn):
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.size(0) >= 512:
            fail(f"{what} reads `{name}`, a {list(value.shape)} tensor kept outside the "
                 f"function: a buffer of a fixed size, wrong for any longer T; {fix}.")
    size = got.untyped_storage().nbytes()
    if size <= got.numel() * got.element_size():
        return
    more = expect_tensor(call(fn, f"{what} with T = {t + 4}", list(reads(t + 4))),
                         what)
    if more.untyped_storage().nbytes() == size:
        rows = size // max(got[0].numel() * got.element_size(), 1)
        fail(f"{what} returns the first T rows of a buffer of {rows} rows, the same at T = "
             f"{t} and T = {t + 4}: more steps than that fail; {fix}.")


class _Made(TorchDispatchMode):
    """Records the shapes of the 2-D tensors made from sizes alone (zeros, empty, full, ones,
    and their `new_` forms), not from another tensor's shape (`zeros_like`)."""

    MAKERS = {aten.zeros, aten.empty, aten.full, aten.ones, aten.new_zeros, aten.new_empty,
              aten.new_full, aten.new_ones}

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[torch.Size] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in self.MAKERS and out.dim() == 2:
            self.shapes.append(out.shape)
        return out


def _allocated(fn: Callable, reads: Sequence[torch.Tensor]) -> torch.Size | None:
    """The largest (by rows) 2-D tensor `fn(reads)` makes from sizes alone, if any."""
    with _Made() as made:
        fn(list(reads))
    return max(made.shapes, key=lambda shape: shape[0], default=None)


def _kept_tensors(fn: Callable) -> list[tuple[str, object]]:
    """The globals `fn` reads by name and the values of its closure."""
    return [*globals_read(fn).items(),
            *((f"closure {i}", v) for i, v in enumerate(closure_values(fn)))]


ONCE_DIFFERENTIABLE = (
    "is marked @once_differentiable: it runs under torch.no_grad(), so a second derivative "
    "through it is lost, silently when torch.autograd.grad asks for it by the inputs "
    "(d2/dx2 of sum(x**3) came out as 2x, not 6x). Remove the decorator: autograd "
    "differentiates backward's own operations.")


def once_differentiable(backward: Callable) -> bool:
    """Whether `backward` is wrapped by torch's `@once_differentiable` (its code is the
    wrapper's, in torch/autograd/function.py)."""
    code = getattr(backward, "__code__", None)
    return code is not None and code.co_filename.replace("\\", "/").endswith(
        "autograd/function.py")


def graph_cut(part: Callable) -> str:
    """How `part`'s source (a backward) cuts the graph, for a message: `torch.no_grad()`,
    `.detach()` or `.data` when it holds one, else the three as a guess."""
    try:
        source = inspect.getsource(getattr(part, "__func__", part))
    except (OSError, TypeError):
        source = ""
    for found, say in (("no_grad", "torch.no_grad()"), (".detach(", "a .detach()"),
                       (".data", "a .data")):
        if found in source:
            return say
    return "a .detach(), .data or torch.no_grad()"


def expect_one_product(fn: Callable, xs: torch.Tensor, gs: torch.Tensor, what: str) -> None:
    """The exercise's point, once the values are right: dL/dW written (autograd not asked
    for it) as one product over all `T·B` rows, not a product per step or row, summed."""
    one = "G^T X = gs.flatten(0, 1).T @ xs.flatten(0, 1), [D_out, T·B] @ [T·B, D_in]"
    with calls_refused(DERIVATIVE_CALLS, lambda name: (
            f"{what} calls {name}: autograd finds dL/dW for you; the exercise is to write it, "
            f"as one product {one}.")):
        n, how, scalars, ops = count(lambda: fn(xs.clone(), gs.clone()))
    entries = gs.size(-1) * xs.size(-1)  # D_out·D_in = 12, not T, B or T·B (5, 2, 10)
    if n == entries and ("elementwise" in how or "dot" in how):
        fail(f"{what} computes the weight gradient entry by entry ({how}): D_out·D_in = "
             f"{n} sums of products, column o of G with column i of X. Write one matrix "
             f"product for all entries: {one}.")
    rows = gs[..., 0].numel()
    if scalars >= rows * entries:  # every g_o x_i of every (t, b) formed elementwise
        fail(f"{what} forms the outer products g x^T, one per step and row ({rows} of them, "
             f"T·B, each D_out·D_in = {entries} products, by {', '.join(ops)}), then sums "
             f"them: one matrix product does it all, {one}.")
    if n > 1:
        fail(f"{what} is not one matrix product: it ran {how}, {n} products in all (one per "
             f"step, example or pair of rows), then summed them. The exercise is one product "
             f"over all T·B rows at once: {one}.")
