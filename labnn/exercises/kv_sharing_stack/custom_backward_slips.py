"""Diagnoses shared by notebook 04's checkers (`custom_backward`, `stack_append`,
`kv_sharing`): a caller's list or tensor changed by the learner's function (its values, its
order, or only its version counter), a width written as a number, a gradient that is
right only at float32 precision although the check runs in float64, a gradient divided by
T or B (or scaled by a size) told apart from a constant factor, one weight gradient per step
never summed, and a loop that reads one entry past the end of `read_grads`, a backward that
reads an attribute forward never set on ctx; and the weight gradient's slips: its inputs changed
first (an activation, a mean taken off), one step met by a sum over the steps, `.T` on a
3-D tensor, `torch.tensordot` contracting the wrong axes."""

from __future__ import annotations

import inspect
import re

import torch
import torch.nn.functional as F_

from labnn.exercises.grading import describe_shape, fail, name_axes
from labnn.exercises.grading.compare import close
from labnn.exercises.grading.sizes import randn
from labnn.exercises.grading.slips import constant_error, gives


def wrong_gradient_count(err: Exception) -> bool:
    """Whether autograd refused a backward for the number of gradients it returned."""
    return "incorrect number of gradients" in str(err)


def ctx_attribute_unset(err: Exception, name: str) -> None:
    """`name.backward` reading an attribute of ctx that forward never set (ctx.n, ctx.x, or
    a misspelt ctx.saved_tensors): torch says only that the Backward object has none."""
    said = re.search(r"'\w+Backward' object has no attribute '(\w+)'", str(err))
    if not isinstance(err, AttributeError) or not said:
        return
    attr = said.group(1)
    if attr.startswith("saved") and attr != "saved_tensors":
        fail(f"{name}.backward reads ctx.{attr}, which does not exist: what "
             "ctx.save_for_backward(...) kept comes back as ctx.saved_tensors, a tuple.")
    fail(f"{name}.backward reads ctx.{attr}, which forward never set (it is the same ctx): "
         f"keep it there in forward, ctx.{attr} = ... for a number, "
         "ctx.save_for_backward(...) for a tensor, read back from ctx.saved_tensors.")


def expect_list_unchanged(given: list, kept: list, what: str, name: str) -> None:
    """Refuse a call that changed the caller's list `given` (`kept`: a copy of it made
    before the call): entries removed, added or replaced (.pop(), .clear(), del, ...)."""
    if len(given) == len(kept) and all(a is b for a, b in zip(given, kept)):
        return
    if len(given) == len(kept) and all(a is b for a, b in zip(given, kept[::-1])):
        fail(f"{what} reversed the caller's list {name} in place ({name}.reverse()): it is "
             f"the caller's; read it without changing it: {name}[::-1] or reversed({name}) "
             "give a reversed copy.")
    ids = sorted(map(id, kept))
    how = (".pop() / .clear() / del" if len(given) < len(kept) else
           ".append() / .insert()" if len(given) > len(kept) else
           ".sort() or another reordering" if sorted(map(id, given)) == ids else
           f"{name}[i] = ...")
    fail(f"{what} changed the caller's list {name} (it had {len(kept)} entries, now "
         f"{len(given)}: {how}): read it without changing it (index it, or iterate).")


def width_as_number(err: Exception, what: str, f: int) -> None:
    """torch's broadcast error at the features (dim 1) where one side has the inputs' F:
    a width written as a number (the notebook's F = 4)."""
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b "
                      r"\((\d+)\) at non-singleton dimension 1", str(err))
    if found and f in map(int, found.groups()) and found[1] != found[2]:
        other = int(found[1]) if int(found[2]) == f else int(found[2])
        fail(f"{what}: your code has a width of {other} where read_grads[t] has F = {f} "
             "features (a width written as a number, the notebook's?): read it from the "
             "inputs, read_grads[-1].size(1), or start from torch.zeros_like(read_grads[-1]).")


def expect_kept(before: dict[str, torch.Tensor], what: str, fix: str,
                **after: torch.Tensor) -> None:
    """Refuse a call that changed the values of an input tensor in place, in one short
    sentence ending in `fix` (`grading.expect_unchanged` names the other changes)."""
    for name, tensor in after.items():
        old = before[name].detach()
        if tensor.shape == old.shape and not torch.equal(tensor.detach(), old):
            fail(f"{what} modified its input `{name}` in place: it is the caller's; {fix}")


def expect_float64_gradient(got: torch.Tensor, want: torch.Tensor, what: str,
                            where: str = "backward", keep: str = "grad_output") -> None:
    """After a float32-level comparison passed: refuse a float64 gradient that matches
    only at float32 precision (autograd casts a float32 gradient back to the input's
    float64, so only the rounding shows). `where` names the code, `keep` its input."""
    if close(got, want, atol=1e-12, rtol=1e-10):
        return
    off = (got - want).abs().max().item()
    constant = constant_error(got, want)
    if constant:
        fail(f"{what} is off by ~{off:.0e} at float64: {constant}, in {where}; compute "
             "exactly what is asked.")
    either = "" if torch.equal(got, got.float().double()) else (
        ", or a small constant (an eps) added")
    fail(f"{what} is only float32-accurate (differs by ~{off:.0e} at float64): a "
         f".float() or float32 step in {where}{either}; keep the dtype of {keep}.")


def expect_not_half(got: torch.Tensor, want: torch.Tensor, what: str, where: str,
                    keep: str) -> None:
    """Before `expect_close`: name, briefly, an error of a float16/bfloat16 step's size
    (~1e-3 of each value), unless it is a small constant added (`constant_error`)."""
    if got.shape != want.shape or close(got, want) or not close(got, want, atol=1e-2,
                                                                rtol=1e-2):
        return
    if constant_error(got, want):
        return  # `expect_close` shows where, and names the constant
    off = (got - want).abs().max().item()
    fail(f"{what} is off by up to {off:.0e}, as a float16/bfloat16 step (.half()) would "
         f"make it, in {where}; keep the dtype of {keep}.")


def result_like_first_read(err: Exception, fn, what: str, t: int, f: int) -> None:
    """A result made from `read_grads[0]` (`[1, F]`), seen in torch's in-place broadcast
    error and in `fn`'s source (`zeros_like(read_grads[0])`, `read_grads[0].new_zeros`)."""
    if f"output with shape [1, {f}] doesn't match the broadcast shape" not in str(err):
        return
    try:
        name = next(iter(inspect.signature(fn).parameters))
        source = inspect.getsource(fn)
    except (TypeError, OSError, StopIteration, ValueError):
        return
    first = rf"{re.escape(name)}\[0\]"
    if re.search(rf"_like\(\s*{first}|{first}\.(new_zeros|clone|zero_)", source):
        fail(f"{what}: your result was made from {name}[0] ([1, F]): it needs one row per "
             f"value, [T, F] = [{t}, {f}]: torch.zeros(T, F, dtype=..., device=...) or "
             "zeros_like of the stacked values.")


_CAST = {torch.float64: "double", torch.float16: "half", torch.bfloat16: "bfloat16"}


def backward_keeps_dtype(fn, out: torch.Tensor, grad: torch.Tensor, name: str) -> None:
    """`fn.backward` called directly on `out`'s node (float32 inputs, `grad` float32): a
    gradient of another dtype (a `.double()` on the way) is named, though autograd casts
    it back to the input's dtype and the values come out right."""
    try:
        got = fn.backward(out.grad_fn, grad)
    except Exception:  # named by the checks that run backward through autograd
        return
    for t in got if isinstance(got, tuple) else (got,):
        if isinstance(t, torch.Tensor) and t.dtype != grad.dtype:
            fail(f"{name}.backward returns {str(t.dtype)[6:]} gradients for float32 inputs "
                 f"(a .{_CAST.get(t.dtype, 'to')}() on the way?): autograd casts them "
                 "back, so the values pass, but the result must keep its inputs' dtype: "
                 "drop the cast, keep grad's dtype.")


def read_order(got: torch.Tensor, reads: list[torch.Tensor], want: torch.Tensor,
               what: str) -> None:
    """Exercise 3's sums taken in the wrong order, named from `got`'s values: each read
    added newest first (`.flip(0)`), or each value's gradient taken one slot off (`g[1:]`
    into `out[:t]`, an index t - 1 where t belongs), seen on the rows 1..T-2, whose
    neighbours both exist."""
    if got.shape != want.shape or close(got, want):
        return
    steps = len(reads)
    flipped = sum(F_.pad(r.flip(0), (0, 0, 0, steps - len(r))) for r in reads)
    if close(got, flipped):
        fail(f"{what} adds each read newest first (.flip(0), or its slots in reverse): row "
             "j of read_grads[t] is slot j, the gradient of v_j, oldest first: add "
             "read_grads[t] as it is, out[:t + 1] += read_grads[t].")
    inner = range(1, steps - 1)
    below = torch.stack([sum(reads[t][j - 1] for t in range(j, steps)) for j in inner])
    up, down = "+ 1 of the reads (g[1:] added into out[:t]?)", (
        "- 1 of the reads (an index t - 1 where t belongs, or g[:t] into out[1:t + 1]?)")
    for shifted, how in ((want[2:], up), (want[:-2], down), (below, down)):
        if close(got[1:-1], shifted) and not close(want[1:-1], shifted):
            fail(f"{what} takes each value's gradient one slot off: row j holds slot j "
                 f"{how}: v_j's gradient is slot j of every read t >= j, "
                 "out[:t + 1] += read_grads[t].")


def scaled_gradient(fn, got: torch.Tensor, want: torch.Tensor, what: str, sizes: dict,
                    rerun: tuple[torch.Tensor, torch.Tensor]) -> None:
    """A result `c` times `want` with c a size (T, B, T·B, D_in, D_out) or its inverse at
    the check's `sizes` is that size's factor only if it follows the size at other sizes
    too (`rerun`, the inputs xs, gs there); else it is a constant (a learning rate 0.1
    where T·B = 10), named so."""
    if got.shape != want.shape:
        return
    flat = want.flatten()
    c = float(got.detach().flatten() @ flat / (flat @ flat))
    xs, gs = rerun
    other = gs.flatten(0, 1).t() @ xs.flatten(0, 1)
    t2, b2 = xs.size(0), xs.size(1)
    mean = "the loss's own mean is already inside gs, so just add (no division)."
    for n, n2, name, said in ((sizes["B"], b2, "B", "the batch size"),
                              (sizes["T"], t2, "T", "the steps"),
                              (sizes["T"] * sizes["B"], t2 * b2, "T·B", "the rows"),
                              (sizes["D_in"], xs.size(2), "D_in", "the input width"),
                              (sizes["D_out"], gs.size(2), "D_out", "the output width")):
        for p in (-1, 1):
            if not close(got, want * n**p):
                continue
            if not gives(fn, xs, gs, other * n2**p):  # not this size's factor there
                if gives(fn, xs, gs, other * n**p):
                    fail(f"{what} is {c:.3g} times the gradient G^T X at every size, a "
                         "constant (a learning rate?), not a size of the inputs: return the "
                         "gradient itself, gs.flatten(0, 1).T @ xs.flatten(0, 1), no scaling.")
                continue
            fail({(-1, "B"): f"you divided by the batch size: {mean}",
                  (-1, "T"): "you averaged over the steps: the gradients of all steps add "
                  "up (no division by T).",
                  (-1, "T·B"): f"you averaged over steps and batch: {mean}"}.get((p, name), (
                      f"{what} is G^T X {'times' if p > 0 else 'divided by'} {name}, {said} "
                      f"({n} here, {n2} with {name} = {n2}): dL/dW is the plain sum of "
                      "g^T x over the steps and examples, no factor: "
                      "gs.flatten(0, 1).T @ xs.flatten(0, 1).")))


def expect_one_weight_gradient(got: torch.Tensor, want: torch.Tensor, what: str,
                               sizes: dict[str, int]) -> None:
    """Fail when `got` is `[T, D_out, D_in]`, `[B, ...]` or `[T, B, ...]`: one weight
    gradient per step (or example), where the shared weight has one, their sum."""
    lead, tail = tuple(got.shape[:-2]), tuple(got.shape[-2:])
    per = {(sizes["T"],): "step", (sizes["B"],): "example",
           (sizes["T"], sizes["B"]): "step and example"}.get(lead)
    if tail != tuple(want.shape) or per is None:
        return
    summed = close(got.detach().flatten(0, -3).sum(0), want)
    fail(f"{what} has shape {describe_shape(got.shape)} = {name_axes(got.shape, sizes)}: "
         f"one weight gradient per {per}" + (" (their sum is right)" if summed else "")
         + ". The weight is shared by all steps and examples: sum them, one [D_out, "
         "D_in], gs.flatten(0, 1).T @ xs.flatten(0, 1).")


def reads_past_the_end(err: Exception, what: str, reads: int) -> None:
    """`read_grads[T]` indexed (a loop up to T inclusive): the list holds T reads."""
    if isinstance(err, IndexError) and "list index out of range" in str(err):
        fail(f"{what} raised IndexError (list index out of range): read_grads holds T = "
             f"{reads} reads, read_grads[0] to read_grads[{reads - 1}]; a loop up to T "
             "inclusive (range(j, T + 1), t <= T)? Sum over t in range(j, T).")


def weight_gradient_inputs(xs: torch.Tensor, gs: torch.Tensor) -> list[tuple]:
    """Rows of the weight gradient's diagnosis table for a product of xs and gs that are not
    the Linear's own (`[T, B, D]` each): one passed through an activation, centred (its
    mean over the rows, the steps or the batch taken off) or that mean alone, or one
    step of one met by the other summed over the steps."""
    fix = "gs.flatten(0, 1).T @ xs.flatten(0, 1)"
    ops = {"passes through .relu()": torch.relu, "passes through .abs()": torch.abs,
           "passes through .tanh()": torch.tanh,
           **{f"has its mean over dim {a} taken off": lambda t, a=a: t - t.mean(a, True)
              for a in (0, 1)},
           "has its mean over the T*B rows taken off": lambda t: t - t.flatten(0, 1).mean(0),
           **{f"is replaced by its mean over dim {a} (broadcast back)":
              lambda t, a=a: t.mean(a, True).expand_as(t) for a in (0, 1)}}
    rows = [((op(gs) if on == "gs" else gs).flatten(0, 1).t()
             @ (op(xs) if on == "xs" else xs).flatten(0, 1),
             f"{on if said[0] == 'p' else 'xs (or gs, the same sum)'} {said} first: xs are "
             "the Linear's inputs and gs its outputs' gradients, as they are (no activation, "
             f"no mean over an axis): {fix}.") for on in ("xs", "gs") for said, op in ops.items()]
    for t in (0, -1):
        rows += [(gs[t].t() @ xs.sum(0), f"gs[{t}] (one step's gradients) meets xs summed "
                  f"over the steps: every step's g_t meets its own x_t, and all (t, b) rows "
                  f"add up: {fix}."),
                 (gs.sum(0).t() @ xs[t], f"gs summed over the steps meets xs[{t}] (one "
                  f"step's inputs): every step's g_t meets its own x_t, and all (t, b) rows "
                  f"add up: {fix}.")]
    return rows


def dot_t_3d(err: Exception, fn, what: str) -> None:
    """`gs.T @ xs` on `[T, B, D]` tensors: .T reverses all three axes. Rerun where
    T = B = D_out, so that the product runs, and compare."""
    xs, gs = (randn(3, 3, w, seed=s, dtype=torch.float64) for w, s in ((5, 30), (3, 31)))
    if isinstance(err, RuntimeError) and gives(fn, xs, gs, gs.permute(2, 1, 0) @ xs):
        fail(f"{what}: .T on a 3-D tensor reverses all its axes (gs.T is [D_out, B, T]), "
             "so @ pairs the wrong ones. Flatten (T, B) first: "
             "gs.flatten(0, 1).T @ xs.flatten(0, 1).")


def tensordot_axes(err: Exception) -> None:
    """Name torch.tensordot's error when the axes it contracts differ in size, by the two
    axes torch names: `dims=n` contracts the LAST n axes of the first tensor with the FIRST
    n of the second, `dims=([a, b], [c, d])` axis a with c and b with d."""
    said = (str(err).strip().splitlines() or [""])[0]
    if not (isinstance(err, RuntimeError) and "contracted dimensions need to match" in said):
        return
    found = re.search(r"in dim (-?[0-2]) and second has size \d+ in dim (-?[0-2])\b", said)
    names = ("the steps", "the batch", "the features")
    a, b = (int(found[1]) % 3, int(found[2]) % 3) if found else (0, 0)  # [T, B, D] both
    paired = f"(torch said: {said}): " if found is None else (
        f"paired axis {a} of its first tensor ({names[a]}) with axis {b} of the second "
        f"({names[b]}): ")
    fail(f"torch.tensordot {paired}dims pairs the axes to contract in order (dims=n: the "
         "last n of the first tensor with the first n of the second). Contract steps with "
         "steps, batch with batch: tensordot(gs, xs, dims=([0, 1], [0, 1])), [D_out, D_in].")


def view_not_contiguous(err: Exception, fn, what: str) -> None:
    """torch's "view size is not compatible": a `.view` of a tensor that is not contiguous
    (a half cut by chunk or a slice, or a transpose); where `fn`'s source views the heads
    first (`.view(n_heads, B, ...)`), that order mixes batch entries into heads as well."""
    said = (str(err).strip().splitlines() or [""])[0]
    if not (isinstance(err, RuntimeError) and "view size is not compatible" in said):
        return
    try:
        heads_first = re.search(r"\.view\(\s*(n_heads|[hH])\s*,", inspect.getsource(fn))
    except (OSError, TypeError):
        heads_first = None
    fail("a .view of a tensor that is not contiguous (a chunk's half, a slice, a "
         f"transpose) fails in {what}" + (
             "; and view(n_heads, B, D_h), like reshape, mixes batch entries into heads"
             if heads_first else "") +
         ": view the whole output once, kv(norm(m)).view(B, 2, H, D_h), then out[:, 0] "
         "and out[:, 1].")
