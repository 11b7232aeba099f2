"""Checkers for notebook 04's Exercises 2-3 (shared keys/values and the stack): the warm-up
Function (`Square`) and the gradient of values read through stacks. `Append` is checked by
`stack_append`, the shared projection and the batched weight gradient by
`labnn.exercises.kv_sharing_stack.kv_sharing`; their shared helpers are here.

Dimension letters (the package legend, plus one of these exercises): `T` steps, `B`
batch, `F` features of one step, `H` heads, `D` model width, `D_h` head width. Positions
in messages use the lower-case letters of the result's own dimensions, e.g.
`at [t=3, b=0, f=1]`.

Each checker runs the learner's code on seeded random inputs in float64, compares it
with `labnn` (or with autograd through `torch.stack`) and, when it differs, recomputes
the typical mistakes (no chain rule, only the last read counted, keys and values or
their biases swapped, a copy instead of a view of the buffer, the prefix's gradient
dropped, an input changed in place, an input kept on ctx without save_for_backward,
...) to say which one was made.
"""

from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn.functional as F_

from labnn.exercises.kv_sharing_stack import (fresh_rounds, input_rounds, large_rounds,
                                              other_sizes)
from labnn.exercises.kv_sharing_stack.custom_backward_slips import (
    backward_keeps_dtype, expect_float64_gradient, expect_kept, expect_list_unchanged,
    expect_not_half, read_order, reads_past_the_end, result_like_first_read, width_as_number)
from labnn.exercises.kv_sharing_stack.square_slips import (
    absolute_x_named, forward_in_place, gradient_slips, square_backward_error)
from labnn.exercises.kv_sharing_stack.square_state import (
    expect_any_shape, expect_input_saved, expect_state_on_ctx, expect_twice_differentiable,
    own_derivative)
from labnn.exercises.kv_sharing_stack.hidden_work import (
    DERIVATIVE_CALLS, expect_initialised, expect_no_fixed_buffer, uninitialised)
from labnn.exercises.grading.reference_calls import calls_refused
from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading import (call, exercise, expect_close, expect_like, expect_no_alias,
                                     expect_tensor, expect_unchanged, fail, running,
                                     shares_memory, snapshot, expect_any_device)
from labnn.exercises.grading.compare import close
from labnn.exercises.grading.slips import gives, rerun_broadcast
from labnn.exercises.grading.compare import diagnose as _diagnose

T, B, F, H, D = 5, 2, 3, 2, 8


def _randn(*shape: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


DTYPE_HINT = ("The inputs are float64: no .float() on the way; make new tensors with "
              "zeros_like(x), x.new_zeros(...) or dtype=x.dtype, device=x.device "
              "(torch.zeros(...) alone gives float32, on the CPU).")


def _expect_function_class(fn, name: str) -> None:
    if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)):
        got = (f"an instance of "
               f"{type(fn).__name__}" if isinstance(fn, torch.autograd.Function)
               else f"{type(fn).__name__} {getattr(fn, '__name__', '')}".strip())
        fail(f"pass the class itself, {name} (a torch.autograd.Function subclass), "
             f"not {got}: the check "
             f"calls {name}.apply(...).")


@exercise("a custom autograd Function (square)")
def check_square(fn: Callable) -> None:
    """`fn` is a `torch.autograd.Function` subclass: `fn.apply(x)` = x², with its own
    backward (autograd asked for the derivative is refused)."""
    with own_derivative():
        _check_square(fn)


def _check_square(fn: Callable) -> None:
    _expect_function_class(fn, "Square")
    x = _randn(4, 3, seed=1)
    x[1, 2] = x[3, 0] = 0.0  # exact zeros: a division by x gives NaN there
    x.requires_grad_()
    g = _randn(4, 3, seed=2)
    before = snapshot(x=x)
    with running("Square.apply(x) with x [4, 3]", diagnose=lambda e: forward_in_place(e, fn)):
        y = expect_tensor(fn.apply(x), "Square.apply(x)")
    expect_unchanged(before, "Square.forward", x=x)
    x0 = x.detach()
    expect_like(y, x0**2, "Square.apply(x)", DTYPE_HINT)
    _diagnose(y.detach(), x0**2, [
        (2 * x0, "forward returns 2x, the derivative: forward computes the value, x * "
                 "x; backward the "
                 "gradient."),
        (x0, "forward returns x unchanged: it must return x * x."),
    ])
    expect_close(y, x0**2, "Square.apply(x)", dims="i j")
    expect_float64_gradient(y, x0**2, "Square.apply(x)", "forward", "x")
    if y.grad_fn is None:
        fail("the output has no grad_fn: call Square.apply(x), and return a tensor "
             "computed from x in forward.")

    g_before = g.clone()
    with running("Square.backward (through torch.autograd.grad) with grad_output [4, 3]",
                 diagnose=lambda err: square_backward_error(err, fn, y)):
        (got,) = torch.autograd.grad(y, x, g)
    if not torch.equal(g, g_before):
        fail("Square.backward changed grad_output in place (e.g. grad_output.mul_(...) or "
             "*=): it belongs to the caller, and autograd may pass it on elsewhere; return "
             "a new tensor, grad_output * 2 * x."
             + (" (Its values are right.)" if close(got, 2 * x0 * g_before) else ""))
    if got is None:
        fail("backward returned None: return the gradient with respect to x, "
             "grad_output * 2 * x.")
    if not torch.equal(x.detach(), before["x"].detach()):
        fail("Square.backward changed the saved x in place (e.g. x *= 2): "
             "ctx.saved_tensors hands back the caller's own x, so the caller's x changed "
             "too. Compute a new tensor instead: return grad_output * 2 * x.")
    want = 2 * x0 * g
    gradient_slips(fn, got, want, x0, g)
    _diagnose(got, want, [
        (2 * x0, "backward returned d(x²)/dx = 2x alone: multiply by grad_output (the "
                 "chain rule)."),
        (g, "backward returned grad_output unchanged: multiply it by the local "
            "derivative 2x."),
        (2 * x0 + g, "backward adds grad_output to the local derivative 2x: the chain "
                     "rule multiplies them, grad_output * 2 * x."),
        (g * x0, "backward is missing the factor 2: d(x²)/dx = 2x."),
        *[(c * x0 * g * g, f"your backward multiplies by grad_output twice ({said}): the "
           "chain rule multiplies the local derivative 2x by grad_output once: grad_output "
           "* 2 * x.") for c, said in ((2, "2·x·g·g"), (1, "x·g·g, and no 2"))],
        *[(2 * x0 * getattr(g, red)(*dim, **keep), f"grad_output was reduced "
           f"(grad_output.{red}({', '.join([*map(str, dim)] + ['keepdim=True'] * bool(keep))}))"
           ": multiply it elementwise, grad_output * 2 * x.")
          for red in ("sum", "mean")
          for dim, keep in (((), {}), ((0,), {}), ((1,), {"keepdim": True}))],
        (-2 * g * x0, "backward has the wrong sign: d(x²)/dx = +2x; return grad_output "
                      "* 2 * x."),
        (2 * g * g, "backward returned 2 * g * g: it multiplies grad_output by itself "
                    "instead of x; return grad_output * 2 * x."),
        (2 * g * x0**2, "backward uses the saved OUTPUT y = x² where x belongs: "
                        "2·y·grad_output is not the "
                        "gradient; save the input (ctx.save_for_backward(x)) and "
                        "return grad_output * 2 * x."),
        (g * x0**2, "backward multiplied grad_output by the OUTPUT x²: the local "
                    "derivative is 2x."),
        (2 * g, "backward returned 2 * grad_output: the local derivative is 2x, so "
                "multiply by x too."),
        (2 * g * x0.abs(), absolute_x_named(fn)),
    ])
    expect_not_half(got, want, "the gradient of Square.apply(x)", "backward", "grad_output")
    expect_close(got, want, "the gradient of Square.apply(x)", dims="i j")
    # after y's backward: a forward between would overwrite x kept on the class
    fresh_rounds.square_forward(fn, x0.clone().requires_grad_())
    fresh_rounds.square_gradient(fn, x0.clone().requires_grad_(), g.clone())
    expect_float64_gradient(got, want, "the gradient of Square.apply(x)")
    expect_state_on_ctx(fn, x0, g)
    expect_input_saved(fn, x0, g, want)
    expect_twice_differentiable(fn)
    expect_any_shape(fn)
    large_rounds.square(fn)  # x up to about 1e6: a clamp shows
    later = input_rounds.square(fn)  # and in float32: x kept as x there too
    with torch.enable_grad():
        x32 = x0.float().requires_grad_()
        backward_keeps_dtype(fn, call(fn.apply, "Square.apply(x) in float32", x32), g.float(),
                             "Square")
    expect_input_saved(fn, x0.float(), g.float(), want.float())
    strided = x0.t().contiguous().t()  # x0's values, its columns adjacent: not contiguous
    expect_input_saved(fn, strided, g, want)
    expect_any_device(lambda x, g: torch.autograd.grad(fn.apply(x), x, g)[0],
                      "Square (forward and backward)", x, g)  # x on a GPU, in a model
    input_rounds.on_devices(later)  # then each extra round's inputs: a branch for their sizes


@exercise("the gradient of a stacked value", refuse=input_rounds.OWN_STACK)
def check_value_gradients(fn: Callable) -> None:
    """`fn(read_grads)`: `read_grads[t]` `[t+1, F]` is the gradient arriving at the
    stack read at step `t` (slots `0..t`); return `[T, F]`, the gradient of each pushed
    value $v_j$: $\\sum_{t \\ge j} g_t[j]$ (autograd asked for it is refused)."""
    with calls_refused(DERIVATIVE_CALLS, lambda name: (
            f"value_gradients calls {name}: autograd finds the sum for you; the exercise is "
            "to write it: out[:t + 1] += read_grads[t], from torch.zeros_like(read_grads[-1]).")):
        _check_value_gradients(fn)


def _check_value_gradients(fn: Callable) -> None:
    reads = [_randn(t + 1, F, seed=10 + t) for t in range(T)]
    names = {f"read_grads[{t}]": r for t, r in enumerate(reads)}
    before = snapshot(**names)
    want = input_rounds.summed_reads(reads)
    what = "value_gradients(read_grads)"

    def misaligned(err: Exception) -> None:
        """F.pad on the features (the shapes in torch's error say so), or each read added
        from row t (rerun with reads of T rows each, where it runs)."""
        if f"got [1, {F + T - 1}] at entry 0 and [2, {F + T - 2}] at entry 1" in str(err):
            fail(f"{what}: F.pad(g, (0, n)) pads the last axis, the features: pad the "
                 "rows, F.pad(g, (0, 0, 0, T - len(g))).")
        if "stack expects each tensor to be equal size" in str(err):
            fail(f"{what}: torch.stack needs tensors of one shape, but read_grads[t] is "
                 "[t + 1, F], the lengths differ: add each into its own rows, "
                 "out[:t + 1] += read_grads[t] (or pad each to T rows first).")
        result_like_first_read(err, fn, what, T, F)
        reads_past_the_end(err, what, T)
        width_as_number(err, what, F)
        short = re.search(r"output with shape \[(\d+), \d+\] doesn't match the broadcast "
                          r"shape \[(\d+), \d+\]", str(err))
        if short and int(short[2]) == int(short[1]) + 1:
            fail(f"{what}: read_grads[t] has t + 1 rows, slots 0..t, one more than out[:t]: "
                 "add it into out[:t + 1] (read t covers slot t too).")
        full = [_randn(T, F, seed=20 + t) for t in range(T)]
        from_row_t = torch.stack([sum(full[t][j - t] for t in range(j + 1)) for j in range(T)])
        rerun_broadcast(err, lambda: gives(fn, full, from_row_t),
                        f"{what}: read_grads[t] is added from row t on: its row j is slot "
                        "j, the gradient of v_j; add it into rows 0..t, out[:t + 1].")
        rerun_broadcast(err, lambda: gives(fn, full, sum(full)),
                        f"{what} adds the reads as they are (sum(read_grads)?): read_grads[t] "
                        "is [t + 1, F], the lengths differ; add each into its own slots, "
                        "out[:t + 1] += read_grads[t], or pad them to T rows.")
        earlier = torch.stack([sum(full[t][j] for t in range(j + 1)) for j in range(T)])
        if isinstance(err, IndexError) and gives(fn, full, earlier):
            fail(f"{what} sums read_grads[t][j] over the reads t <= j, so it reads slot j "
                 "of a read that has only slots 0..t: v_j, pushed at step j, is read at "
                 "the steps t >= j; sum read_grads[t][j] over t >= j.")

    given = list(reads)  # the learner's copy: a .pop() must not break the check
    with uninitialised() as blank:
        got = expect_tensor(call(fn, what, given, diagnose=misaligned), what)
    expect_initialised(blank, got, what, "start from zeros, torch.zeros_like(read_grads[-1])")
    expect_list_unchanged(given, reads, what, "read_grads")
    expect_kept(before, what, "add into a new tensor, torch.zeros_like(read_grads[-1]).",
                **names)
    expect_unchanged(before, what, **names)
    if shares_memory(got, reads[-1]) and close(got, reads[-1]):
        fail(f"{what} returns a view of its input `read_grads[{T - 1}]`, the last read's "
             "gradient only: every read at step t >= j saw v_j; add them all into a new "
             "tensor.")
    expect_no_alias(got, what, **names)
    if tuple(got.shape) == (F,):
        fail(f"{what} has shape [F] = [{F}]: you summed over the slots too; keep one "
             f"row per value, [T, F].")
    if tuple(got.shape) == (T * (T + 1) // 2, F):
        fail(f"{what} has 1 + 2 + ... + T = {T * (T + 1) // 2} rows: torch.cat puts the "
             "reads one after another; add each into the rows of its own slots instead, "
             "out[:t + 1] += read_grads[t], [T, F].")
    rows = got.size(0) if got.dim() == 2 and got.size(1) == F else T
    if rows < T and close(got, want[:rows]):
        fail(f"{what} has {rows} row{'s' * (rows > 1)}, expected T = {T}, one row per "
             "value: T = len(read_grads), the number of reads (steps)"
             + (", not read_grads[0].size(0) = 1, the slots of the first read."
                if rows == 1 else "."))
    expect_like(got, want, what, DTYPE_HINT)
    # reads that saw v_j: T - j
    count = torch.arange(T, 0, -1, dtype=torch.float64)[:, None]
    right_aligned = torch.zeros(T, F, dtype=torch.float64)
    for r in reads:
        right_aligned[T - r.size(0):] += r
    off_by_one = torch.zeros(T, F, dtype=torch.float64)
    for t, r in enumerate(reads):
        off_by_one[:t] += r[:t]
    from_t = torch.zeros(T, F, dtype=torch.float64)
    for t, r in enumerate(reads):
        if r.size(0) >= T - t:
            from_t[t:] += r[:T - t]
    _diagnose(got, want, [
        (from_t, "the slots are aligned from step t: row j of read t is slot j, the "
                 "gradient of v_j, so add read_grads[t] into rows 0..t, not from row t."),
        (off_by_one, "off by one: each read's newest slot is left out (slicing [:t], or "
                     "a loop over t > j): read t covers slots 0..t, t + 1 rows, all of "
                     "read_grads[t]; v_j is read at every step t >= j, t = j included."),
        (reads[-1], "that is the last read's gradient only: every read at step t >= j "
                    "saw v_j, so add them all."),
        (torch.stack([reads[j][j] for j in range(T)]), "you took only the read at the "
                                                       "step that pushed each "
                                                       "value: later reads see it too."),
        (torch.stack([reads[j][0] for j in range(T)]), "row j of your result is slot "
                                                       "0 of read j: the gradient "
                                                       "of v_j is slot j, summed over "
                                                       "the reads t >= j."),
        (right_aligned, "the reads are aligned at the end: read t covers slots 0..t, "
                        "so add it into the FIRST "
                        "t+1 rows."),
        (want / count, "you averaged the reads: the gradients of all reads of v_j add "
                       "up (sum, not mean)."),
        (want / T, "you divided by T: the gradients of all reads of v_j add up, with "
                   "no normalization."),
        (torch.stack([sum(reads[t][t] for t in range(j, T)) for j in range(T)]),
         "you added read t's slot t, read_grads[t][t], to every value 0..t: read t's "
         "gradient for value j is read_grads[t][j]: out[:t + 1] += read_grads[t] (row j to "
         "value j), not one slot broadcast."),
        (torch.stack([reads[t][t] for t in range(T)]).cumsum(0),
         "you summed the reads t <= j: v_j is read at the steps t >= j after its push; "
         "sum read_grads[t][j] over t >= j."),
        (want.cumsum(0), "you took a cumulative sum over the values (cumsum): row j is "
                         "v_j's own gradient, read_grads[t][j] summed over t >= j, with "
                         "no running sum over j on top; drop the cumsum."),
        (torch.stack([r.sum(0) for r in reads]),
         "row t of your result sums read t over its slots: row j must add slot j of "
         "every read t >= j (sum over the reads, not the slots)."),
        *[(want - F_.pad(r, (0, 0, 0, T - r.size(0))),
           ("the last read, read_grads[T - 1], is left out" if t == T - 1 else
            f"read_grads[{t}] is left out") + ": sum read_grads[t][j] over every read "
           "t >= j, up to t = T - 1: range(j, T), T = len(read_grads).")
          for t, r in enumerate(reads)],
        (want + reads[-1], "the last read, read_grads[-1], is counted twice: a total "
         "that starts from read_grads[-1] (or its clone) and then adds every read adds it "
         "again: start from zeros, torch.zeros_like(read_grads[-1])."),
    ])
    read_order(got, reads, want, what)
    expect_unclipped(got, want, what)
    expect_close(got, want, what, dims="j f")
    fresh_rounds.value_gradients(fn, reads)  # before a later round names a kept result
    expect_no_fixed_buffer(fn, got, what, lambda t: [_randn(i + 1, F, seed=10 + i)
                                                     for i in range(t)], T)
    other_sizes.value_gradients(fn)
    large_rounds.value_gradients(fn)
    expect_float64_gradient(got, want, what, "value_gradients", "read_grads")
    later = input_rounds.value_gradients(fn)
    expect_any_device(fn, what, reads)  # a model's gradients: on a GPU
    input_rounds.on_devices(later)  # then each extra round's inputs: a branch for their sizes
