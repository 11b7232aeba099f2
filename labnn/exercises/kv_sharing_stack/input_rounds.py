"""Notebook 04's Exercises 1, 3 and 5 on inputs their main checks never hand in: float32
(the main checks run in float64 only, so float64 written into the code passes there), a
batch or a length of 1 (where `.squeeze()` drops an axis, and `read_grads[1]` does not
exist), a head width of 1, and a non-contiguous input (where `.view` raises).

Each round runs after the answer passed at the check's own sizes, and names the slip:
float64 hard-coded, the `.squeeze()`, the `.view`, the index past the one read.

Dimension letters as in `kv_sharing` and `custom_backward`: `T` steps, `B` batch, `F`
features of one step, `D` model width, `H` heads, `D_h` head width, `D_in`/`D_out` the
widths of one Linear.
"""

from __future__ import annotations

import inspect
import re
from typing import Callable, Sequence

import torch
from torch import nn

from labnn.exercises.grading import (call, close, expect_any_device, expect_tensor, fail,
                                     first_line)
from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading.sizes import expect_kept_ones, randn
from labnn.exercises.kv_sharing_stack.hidden_work import NumpyCalls, expect_not_widened, widening
from labnn.feedback.stack import Stack, _Append

# labnn's own stack, which Exercises 3 and 4 re-implement: an answer running it is refused
OWN_STACK = {Stack.push: "labnn.feedback.Stack.push",
             _Append.forward: "labnn.feedback.stack._Append.forward",
             _Append.backward: "labnn.feedback.stack._Append.backward"}


def summed_reads(reads: Sequence[torch.Tensor]) -> torch.Tensor:
    """Exercise 3's reference: the gradient of each pushed value, $\\sum_{t \\ge j} g_t[j]$,
    from the reads' gradients `reads[t]` `[t+1, F]`. Shape: -> `[T, F]`."""
    return torch.stack([sum(r[j] for r in reads[j:]) for j in range(len(reads))])


F32 = ("keep the inputs' dtype, torch.zeros_like(x), x.new_zeros(...) or dtype=x.dtype "
       "(and device=x.device): the model trains in float32")


def float32_round(what: str, run: Callable, args: tuple, want: Sequence[torch.Tensor],
                  later: list) -> None:
    """`run(*args)` on float32 inputs must give `want`, dtype included: a float64 written
    into the code passes the float64 checks and returns float64 here; `later` gets the
    round, to try on another device (a branch for float32 alone may make CPU tensors).

    Args:
        what: the call, e.g. ``"weight_gradient(xs, gs)"``.
        run: calls the learner's function on the float32 inputs `args`.
        want: the reference's float32 results, one per tensor `run()` returns.
    """
    what = f"{what} with float32 inputs"
    try:
        with widening() as wide, NumpyCalls() as numpy:
            got = run(*args)
    except Exception as err:  # the learner's code, on inputs it was not tried on
        line = quote(err, 90)
        fail(f"{what} raised {type(err).__name__} ({line}): a float64 written into the code "
             f"(.double(), dtype=torch.float64) meeting float32 inputs? Instead {F32}.")
    gots = list(got) if isinstance(got, (tuple, list)) else [got]
    for mine, ref in zip(gots, want):
        if isinstance(mine, torch.Tensor) and mine.dtype != ref.dtype and numpy.seen:
            fail(f"{what} has dtype {mine.dtype}: it goes through numpy (.numpy()), whose "
                 "np.zeros and sums make float64; on a GPU, where the models run, it fails. "
                 "Stay in torch: torch.zeros_like(x).")
        if isinstance(mine, torch.Tensor) and mine.dtype != ref.dtype:
            fail(f"{what} has dtype {mine.dtype}, expected {ref.dtype}: float64 written "
                 f"into the code (.double(), dtype=torch.float64)? Instead {F32}.")
        if not close(mine, ref, atol=1e-4, rtol=1e-3):  # float32 rounding is ~1e-7
            off = (mine.detach() - ref).abs().max().item()
            fail(f"{what} is off by up to {off:.1g}, far more than float32 rounding, though "
                 "it is right in float64: a step that loses precision in float32, such as a "
                 "difference of nearly equal numbers (a finite difference, (f(x + h) - "
                 "f(x - h)) / 2h)? Compute it exactly, in the inputs' dtype.")
    expect_not_widened(wide, what, "keep the inputs' dtype all the way")
    later.append((run, what, args))


def _squeezes(fn: Callable) -> bool:
    """Whether `fn`'s source, or (for a class) its forward's or backward's, holds a
    `.squeeze(`: in IPython a class defined in a cell has no source, its functions do."""
    parts = [fn] + [vars(fn)[k] for k in ("forward", "backward", "setup_context")
                    if isinstance(fn, type) and k in vars(fn)]
    for part in parts:
        try:
            if ".squeeze(" in inspect.getsource(getattr(part, "__func__", part)):
                return True
        except (OSError, TypeError):
            continue
    return False


def quote(err: BaseException | str, limit: int = 70) -> str:
    """torch's message, short: for a gradient of the wrong shape its two shapes; else its
    first line, cut at a word boundary (marked "…") beyond `limit` characters."""
    said = first_line(err)
    found = re.search(r"invalid gradient at index \d+ - got \[.*?\] but expected shape "
                      r"compatible with \[.*?\]", said)
    if found:
        return found[0]
    found = re.search(r"grad_output\[0\] has a shape of torch\.Size\((\[.*?\])\) and "
                      r"output\[0\] has a shape of torch\.Size\((\[.*?\])\)", said)
    if found:
        return f"grad_output[0] has a shape of {found[1]}, output[0] {found[2]}"
    if len(said) <= limit:
        return said
    return said[:limit].rsplit(" ", 1)[0] + "…"


def edge_round(what: str, run: Callable, args: tuple, want: torch.Tensor, fn: Callable,
               dims: str, ones: str, later: list, index: str = "") -> None:
    """`run(*args)` on inputs with an axis of size 1, or not contiguous, must give `want`;
    a `.squeeze()`, a `.view` or a list read past its one entry is named; `later` gets the
    round, to try on another device once every round's values are right (`on_devices`).

    Args:
        what: the call with these inputs, e.g. ``"weight_gradient(xs, gs) with ..."``.
        run: calls the learner's function on them, `args`.
        want: the reference's result.
        fn: the learner's function (its source shows a `.squeeze(`).
        dims: the names of `want`'s axes, e.g. ``"T F"``.
        ones: what is special about the inputs, e.g. ``"B = 1"``.
        index: what to say of an IndexError on a list ("" to say nothing special).
    """
    try:
        got = run(*args)
    except Exception as err:  # the learner's code, at sizes it was not written for
        said = str(err)
        line = quote(said)
        if "view size is not compatible" in said:
            why = ("a .view on inputs that are not contiguous (a transpose here): use "
                   ".reshape(...) or .flatten(0, 1), which copy only when needed")
        elif _squeezes(fn):
            why = (f"a .squeeze() with no dim drops every axis of size 1, here {ones} too: "
                   "keep every axis (squeeze only a dim you added yourself)")
        elif index and isinstance(err, IndexError) and "list index" in said:
            why = index
        else:
            why = f"right at the check's sizes, not with {ones}: read every size from the inputs"
        fail(f"{what} raised {type(err).__name__} ({line}): {why}.")
    if not isinstance(got, torch.Tensor):
        fail(f"{what} returned {type(got).__name__}, not a tensor.")
    if got.shape != want.shape:
        expect_kept_ones(what, got, want, dims)
        fail(f"{what} has shape {list(got.shape)}, expected {list(want.shape)} = [{dims}]: "
             f"right at the check's sizes, not with {ones}; read every size from the inputs.")
    if not close(got.detach(), want):
        expect_unclipped(got, want, what)  # a .clamp() the check's values stayed within
        fail(f"{what} differs from the reference: right at the check's sizes, not with "
             f"{ones}.")
    later.append((run, what, args))


def on_devices(later: list) -> None:
    """The rounds in `later` (what each round function returns) once more with their inputs
    on another device, after the check's own inputs: a branch for their sizes or dtype alone
    (`if len(read_grads) == 1:`) may make its tensors on the CPU."""
    for run, what, args in later:
        expect_any_device(run, what, *args)


def shared_kv_inputs(b: int, d: int, dtype: torch.dtype, seed: int, transposed: bool = False
                      ) -> tuple[torch.Tensor, nn.Module, nn.Module]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        norm, kv = nn.LayerNorm(d).to(dtype), nn.Linear(d, 2 * d).to(dtype)
    m = randn(d, b, seed=seed, dtype=dtype).t() if transposed else randn(b, d, seed=seed,
                                                                          dtype=dtype)
    return m, norm, kv


def shared_kv(fn: Callable) -> list:
    """`fn(m, norm, kv, n_heads)` with B = 1; with H = 1; with D_h = 1 and m not contiguous;
    in float32; with a LayerNorm whose eps is not the default (`_shared_kv_eps`)."""
    name, later = "shared_kv(m, norm, kv, n_heads)", []
    for b, d, h, seed, ones, flip in ((1, 12, 2, 70, "B = 1", False),
                                      (3, 6, 1, 74, "H = 1", False),
                                      (3, 4, 4, 71, "D_h = 1 (n_heads = D)", True)):
        m, norm, kv = shared_kv_inputs(b, d, torch.float64, seed, flip)
        with torch.no_grad():
            want = kv(norm(m)).view(b, 2, h, -1)
        for i, part in enumerate("kv"):
            edge_round(f"{part} of shared_kv with m [{b}, {d}], n_heads = {h} ({ones})",
                       lambda m, norm, kv, i=i: fn(m.clone(), norm, kv, h)[i], (m, norm, kv),
                       want[:, i], fn, "B H D_h", ones, later)
    m, norm, kv = shared_kv_inputs(4, 12, torch.float32, 72)
    with torch.no_grad():
        want = kv(norm(m)).view(4, 2, 2, -1).unbind(1)
    float32_round(name, lambda m, norm, kv: fn(m.clone(), norm, kv, 2), (m, norm, kv), want,
                  later)
    _shared_kv_eps(fn, name)
    return later


def _shared_kv_eps(fn: Callable, name: str) -> None:
    """A LayerNorm with eps = 0.1 on small memory vectors: an eps written as a number
    (1e-5, LayerNorm's default, which every other round uses) instead of norm.eps shows."""
    m, norm, kv = shared_kv_inputs(3, 12, torch.float64, 73)
    norm.eps, m = 0.1, m * 0.1  # the variance ~0.01: eps weighs
    with torch.no_grad():
        want = kv(norm(m)).view(3, 2, 2, -1)
    got = call(fn, f"{name} with norm = LayerNorm(12, eps=0.1)", m.clone(), norm, kv, 2)
    if not all(isinstance(got[i], torch.Tensor) and close(got[i], want[:, i]) for i in (0, 1)):
        with torch.no_grad():  # eps = 1e-5: F.layer_norm's default, or the number written
            usual = kv(nn.functional.layer_norm(m, (12,), norm.weight, norm.bias))[:, :12]
        how = ("used eps = 1e-5, the default (eps= left out of F.layer_norm, or written as a "
               "number)" if close(got[0], usual.view(3, 2, -1)) else "did not use norm.eps")
        fail(f"{name} with norm = LayerNorm(12, eps=0.1) differs from norm(m)'s: your "
             f"normalisation {how}; read it from the module, norm.eps (or call norm(m)).")


def value_gradients(fn: Callable) -> list:
    """`fn(read_grads)` with T = 1; with F = 1; with reads not contiguous; with T = 12 and
    T = 600 (a buffer of a fixed size, the naive stack's 512 rows too); in float32; twice
    (`_value_gradients_own_result`). Each but T = 600 is tried on another device after: a
    loop over the reads' rows makes 180,000 operations there, 108 s through the meta rerun."""
    name, later = "value_gradients(read_grads)", []
    index = ("with T = 1 read_grads holds one read, read_grads[0]: an index such as "
             "read_grads[1] is out of range; read the sizes from read_grads[-1] and "
             "len(read_grads)")
    for t_, f_, ones, flip in ((1, 3, "T = 1", False), (4, 1, "F = 1", False),
                               (3, 4, "reads not contiguous", True),
                               (12, 2, "T = 12", False),  # a buffer of 8 rows (Stack(8, ...))
                               (600, 2, "T = 600", False)):  # or of 512
        reads = [randn(f_, t + 1, seed=80 + t, dtype=torch.float64).t() if flip
                 else randn(t + 1, f_, seed=80 + t, dtype=torch.float64) for t in range(t_)]
        want = summed_reads(reads)
        edge_round(f"{name} with T = {t_} reads of F = {f_}" + " (transposed)" * flip,
                   lambda rs: fn([r.clone() for r in rs]), (reads,),  # clone keeps strides
                   want, fn, "T F", ones, later if t_ < 600 else [], index)
    reads = [randn(t + 1, 3, seed=85 + t) for t in range(4)]
    float32_round(name, lambda rs: fn([r.clone() for r in rs]), (reads,), [summed_reads(reads)],
                  later)
    _value_gradients_own_result(fn, name)
    return later


def _value_gradients_own_result(fn: Callable, name: str) -> None:
    """Two calls with reads of the same sizes and other values: a buffer kept between
    calls (never zeroed, or zeroed and returned again) gives a wrong second result or
    changes the first; and with T = 1 the result must not be the caller's own read."""
    a, b = ([randn(t + 1, 3, seed=seed + t, dtype=torch.float64) for t in range(4)]
            for seed in (100, 110))
    first = expect_tensor(call(fn, f"{name} with T = 4", [r.clone() for r in a]), name)
    kept = first.detach().clone()
    second = expect_tensor(call(fn, f"{name} with T = 4, again", [r.clone() for r in b]), name)
    right = close(second, summed_reads(b))
    if not right or not torch.equal(first.detach(), kept):
        said = "changes the first result" if right else "is wrong again"
        fail(f"{name}, called twice with reads of the same sizes and other values, {said}: "
             "your function keeps a buffer between calls (a global, an attribute); make a "
             "new one each call, torch.zeros_like(read_grads[-1]).")
    one = [randn(1, 3, seed=120, dtype=torch.float64)]
    got = expect_tensor(call(fn, f"{name} with T = 1", one), name)
    if got.untyped_storage().data_ptr() == one[0].untyped_storage().data_ptr():
        fail(f"{name} with T = 1 returns read_grads[0] itself (or a view of it): the "
             "caller's tensor, which a change to your result changes too; return a new "
             "tensor (add into torch.zeros_like(read_grads[-1]), or .clone()).")


def square(fn: Callable) -> list:
    """`Square` on x `[1, 3]` and `[4, 1]`: a `.squeeze()` in its backward returns a
    gradient of another shape there, which autograd refuses; then in float32."""
    later: list = []
    for shape in ((1, 3), (4, 1)):
        x = randn(*shape, seed=130, dtype=torch.float64).requires_grad_()
        g = randn(*shape, seed=131, dtype=torch.float64)
        edge_round(f"the gradient of Square.apply(x) with x {list(shape)}",
                   lambda x, g: torch.autograd.grad(fn.apply(x), x, g)[0], (x, g),
                   2 * x.detach() * g, fn, "x's axes", "an axis of size 1", later)
    x, g = randn(4, 3, seed=132).requires_grad_(), randn(4, 3, seed=133)
    float32_round("Square.apply(x)", lambda x: fn.apply(x), (x,), [x.detach() ** 2], later)
    float32_round("the gradient of Square.apply(x)", lambda x, g: torch.autograd.grad(
        fn.apply(x), x, g)[0], (x, g), [2 * x.detach() * g], later)
    return later


def weight_gradient(fn: Callable) -> list:
    """`fn(xs, gs)` with B = 1; with T = 1; with D_out = 1 and D_in = 1 (a `.squeeze()`
    drops them); in float32. (`gs.view(-1, D_out)`, which
    fails on inputs that are not contiguous, is accepted: the exercise's inputs are.)"""
    name, later = "weight_gradient(xs, gs)", []
    for t, b, d_in, d_out, ones in ((4, 1, 5, 2, "B = 1"), (1, 3, 5, 2, "T = 1"),
                                    (4, 3, 5, 1, "D_out = 1"), (4, 3, 1, 2, "D_in = 1")):
        xs = randn(t, b, d_in, seed=90, dtype=torch.float64)
        gs = randn(t, b, d_out, seed=91, dtype=torch.float64)
        edge_round(f"{name} with xs [{t}, {b}, {d_in}], gs [{t}, {b}, {d_out}] ({ones})",
                   lambda xs, gs: fn(xs.clone(), gs.clone()), (xs, gs),
                   gs.flatten(0, 1).t() @ xs.flatten(0, 1), fn, "D_out D_in", ones, later)
    xs, gs = randn(4, 3, 5, seed=92), randn(4, 3, 2, seed=93)
    float32_round(name, lambda xs, gs: fn(xs.clone(), gs.clone()), (xs, gs),
                  [gs.flatten(0, 1).t() @ xs.flatten(0, 1)], later)
    return later


def append(fn: Callable, recurrence: Callable) -> list:
    """`fn.apply` in `recurrence(x, push)` with B = 1 (how a model decodes) and with F = 1:
    a `.squeeze()` in its backward returns a value gradient without its axis of 1, which
    autograd refuses."""
    later: list = []
    for shape, ones in (((4, 1, 5), "B = 1"), ((4, 3, 1), "F = 1")):
        x = randn(*shape, seed=140, dtype=torch.float64).requires_grad_()
        g = randn(*shape, seed=141, dtype=torch.float64)
        (want,) = torch.autograd.grad(recurrence(x, None), x, g)
        edge_round(f"Append's gradient with x {list(shape)} ({ones})",
                   lambda x, g: torch.autograd.grad(recurrence(x, fn.apply), x, g)[0], (x, g),
                   want, fn, "T B F", ones, later)
    return later
