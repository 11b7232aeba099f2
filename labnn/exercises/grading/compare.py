"""Comparing a learner's result with the reference: type, device, shape, dtype (one rule
for every checker, `expect_like`), values, gradients.

Every difference is reported as a position in the tensor's own dimensions
(`at [b=0, h=1, i=2, j=3]`) and, for shapes, with the names of the axes when their sizes
tell them apart (`[B, D_h, H, T]`), so that a swap of two axes shows.
"""

from __future__ import annotations

from typing import Sequence

import torch

from labnn.exercises.grading.outcomes import copied_leaves, fail, saved_changed
from labnn.exercises.grading.relations import (
    append, distinct_digits, half_precision, merged_out_of_order, shape_relation, value_relation)


def describe_shape(shape: Sequence[int]) -> str:
    """A shape as a learner writes it: `[2, 4, 5]`."""
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
        sizes: name -> size, e.g. ``{"B": 2, "H": 4, "T": 5, "D_h": 6}``; every size must
            differ, or the axes could not be told apart.

    Returns:
        The names in brackets, or None when a size has no name (or the sizes do not tell
        the axes apart).
    """
    by_size = {size: name for name, size in sizes.items()}
    if len(by_size) != len(sizes) or any(int(n) not in by_size for n in shape):
        return None
    return "[" + ", ".join(by_size[int(n)] for n in shape) + "]"


def expect_shape(got: torch.Tensor, shape: Sequence[int], what: str,
                 sizes: dict[str, int] | None = None) -> None:
    """Fail with both shapes when `got` does not have `shape`; with `sizes` (see
    `name_axes`) both shapes are also written with the names of their axes, so that a swap
    of two axes shows."""
    expect_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        named = [name_axes(x, sizes) if sizes else None for x in (got.shape, shape)]
        mine, want = (describe_shape(x) + (f" = {n}" if n and all(named) else "")
                      for x, n in zip((got.shape, shape), named))
        fail(append(f"{what} has shape {mine}, expected {want}.",
                    "" if all(named) else shape_relation(got.shape, shape)))


def expect_like(got, want: torch.Tensor, what: str, hint: str = "",
                sizes: dict[str, int] | None = None) -> torch.Tensor:
    """Fail unless `got` is a tensor of `want`'s shape, device and dtype: the one rule
    every checker applies to a result before comparing its values.

    The dtype must be the reference's, which is the inputs' (the model's): a float64
    answer to a float32 exercise is refused, naming both dtypes, even when its values
    match, because a `.double()` on the way doubles the memory and hides the dtype the
    model trains in; so are float16, integer, boolean and complex answers.

    Args:
        got: the learner's result.
        want: the reference.
        what: the call, e.g. ``"relative_shift(x)"``; starts every message.
        hint: what to do about a wrong dtype (default: keep the inputs' dtype).
        sizes: name -> size of the axes, to name them in a shape message
            (`expect_shape`).

    Returns:
        `got`.
    """
    expect_tensor(got, what)
    if got.device != want.device:
        if got.device.type == "meta":
            fail(f"{what} is on the meta device: a tensor with a shape but no values "
                 "(made with device='meta', or under torch.device('meta') or "
                 "torch.set_default_device('meta')). Compute it from the inputs, which "
                 f"are on {want.device}.")
        fail(f"{what} is on {got.device}, expected {want.device}, the inputs' device: "
             "create new tensors with device=x.device (or torch.zeros_like(x)).")
    if merged_out_of_order(got, want):
        fail(f"{what} has shape {describe_shape(got.shape)}, expected "
             f"{describe_shape(want.shape)}. {merged_out_of_order(got, want)}")
    expect_shape(got, want.shape, what, sizes)
    if got.dtype != want.dtype:
        why = ""
        if got.is_complex() and not want.is_complex():
            why = ": complex numbers, where the inputs are real"
        elif got.is_floating_point() and want.is_floating_point():
            why = (", the inputs' dtype: refused even where the values match")
        elif want.is_floating_point():
            why = (f": {'booleans' if got.dtype == torch.bool else 'integers'}, where the "
                   "result holds real numbers (rounded on the way?)")
        fail(f"{what} has dtype {got.dtype}, expected {want.dtype}{why}. "
             + (hint or "Keep the inputs' dtype: no .float(), .double(), .long() or "
                        ".to(...) on the way; make new tensors with torch.zeros_like(x), "
                        "x.new_zeros(...) or dtype=x.dtype, device=x.device."))
    return got


def describe_position(index: Sequence[int],
                      dims: str | Sequence[str] | None = None) -> str:
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
        raise ValueError(
            f"dims must name each of the {len(index)} dimensions, got {dims!r}")
    return "[" + ", ".join(f"{n}={i}" for n, i in zip(names, index)) + "]"


def first_position(flags: torch.Tensor, dims: str | Sequence[str] | None = None) -> str:
    """The first True entry of a boolean tensor, as `describe_position` writes it."""
    return describe_position(_first_index(flags), dims)


def _first_index(flags: torch.Tensor) -> tuple[int, ...]:
    """The index of the first True entry of `flags`."""
    return tuple(int(i) for i in flags.nonzero()[0])


def expect_dtype(got: torch.Tensor, dtype: torch.dtype, what: str,
                 hint: str = "") -> None:
    """Fail when `got` does not have `dtype` (e.g. a float where a LongTensor of indices
    is asked for)."""
    expect_tensor(got, what)
    if got.dtype != dtype:
        fail(f"{what} has dtype {got.dtype}, expected {dtype}."
             + (f" {hint}" if hint else ""))


def close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5,
          rtol: float = 1e-4) -> bool:
    """True when the two tensors have the same shape and values within tolerance (NaN
    where `want` has NaN counts as equal: a known mistake that produces NaN is still
    recognised)."""
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and got.device == want.device
        and not got.is_complex()
        and torch.allclose(got.detach().to(want.dtype), want, atol=atol, rtol=rtol,
                           equal_nan=True)
    )


def diagnose(got: torch.Tensor, want: torch.Tensor,
             mistakes: list[tuple[torch.Tensor, str]]) -> None:
    """Fail with the message of the first typical mistake whose result `got` reproduces
    (mistakes that happen to give the right answer on these inputs are skipped); a message
    may be a function that returns it (a rerun that tells two mistakes apart)."""
    for wrong, message in mistakes:
        if close(got, wrong) and not close(wrong, want):
            fail(message if isinstance(message, str) else message())


def expect_no_nan(got: torch.Tensor, want: torch.Tensor, what: str,
                  dims: str | Sequence[str] | None = None,
                  where: torch.Tensor | None = None) -> None:
    """Fail naming the first NaN of `got` where the reference `want` holds a number
    (`where`: only these entries)."""
    if not got.is_floating_point():
        return
    nan = torch.isnan(got.detach()) & ~torch.isnan(want)
    if where is not None:
        nan &= where
    if nan.any():
        fail(f"{what} contains NaN (first at {first_position(nan, dims)}).")


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
    r"""Fail with the largest difference, and where it is, when `got` differs from `want`.

    An entry differs when $|g - w| > \mathrm{atol} + \mathrm{rtol}\,|w|$, the rule of
    `torch.allclose`.

    Args:
        got: the learner's result.
        want: the reference.
        what: the call, e.g. ``"relative_shift(x)"``; starts every message.
        atol, rtol: tolerances of `torch.allclose`.
        dims: the names of `want`'s dimensions, e.g. ``"b h i j"``: positions are then
            reported as ``[b=0, h=1, i=2, j=3]``.
        where: boolean, broadcastable to `want`'s shape: compare only these entries (e.g.
            the keys a query may see); positions are still reported in the full tensor.
    """
    expect_like(got, want, what)
    got = got.detach()
    if where is None:
        keep = torch.ones(want.shape, dtype=torch.bool, device=want.device)
    else:
        keep = where.expand(want.shape)
    expect_no_nan(got, want, what, dims=dims, where=keep)
    if not want.is_floating_point():
        got, want = got.double(), want.double()
    diff = torch.where(keep, ((got - want).abs() - (atol + rtol * want.abs())).clamp(min=0.0), 0)
    if (diff > 0).any():
        size = torch.where(keep, (got - want).abs(), 0)  # not * keep: inf * 0 is NaN
        index = _first_index(size == size.max())
        n_bad, n_all = int((diff > 0).sum()), int(keep.sum())
        yours, expected = distinct_digits(got[index].item(), want[index].item())
        fail(append(
            f"{what} differs from the reference at {n_bad} of {n_all} entries compared; "
            f"the largest difference, {size.max().item():.3g}, is at "
            f"{describe_position(index, dims)} (yours {yours}, expected {expected}).",
            half_precision(got, want, keep) or value_relation(got, want, keep, atol, rtol,
                                                               dims)))


def expect_gradients(got: torch.Tensor | Sequence[torch.Tensor],
                     want: torch.Tensor | Sequence[torch.Tensor], what: str,
                     inputs: dict[str, tuple[torch.Tensor, torch.Tensor]],
                     dims: dict[str, str] | None = None, advice: str = "",
                     in_place: tuple[str, str] = ()) -> None:
    r"""Fail when gradients do not flow from the learner's result back to its inputs as
    they should.

    A random cotangent $u$ is backpropagated through `got` and through the reference
    `want`; the vector-Jacobian products $u^\top \partial y / \partial x$ with respect to
    every input are compared. Catches a `.detach()`, `.data` or `torch.no_grad()` that
    leaves the values right but cuts the gradient.

    Args:
        got: the learner's result (or a tuple of results), computed from the first tensor
            of each input.
        want: the reference result(s), computed from the second tensor of each input.
        what: the call, e.g. ``"memory_vector(xs, w)"``.
        inputs: name -> (the tensor the learner used, the one the reference used); both
            require grad.
        dims: name -> the dimension names of that input, for positions (``{"w": "l"}``).
        advice: appended to the message when an input gets no gradient.
        in_place: how an answer changes a saved tensor in place, and the fix, as this
            exercise says them (`outcomes.saved_changed`).
    """
    gots = [got] if isinstance(got, torch.Tensor) else list(got)
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    generator = torch.Generator().manual_seed(1234)
    cotangents = [torch.randn(w.shape, generator=generator, dtype=w.dtype) for w in wants]
    names = list(inputs)
    listed = ", ".join(f"`{n}`" for n in names)
    if not any(g.requires_grad for g in gots):
        which = ("gets no gradient: did you detach it or the result" if len(names) == 1
                 else "get no gradient: did you detach them or the result")
        how = (" (it was computed in inference mode, `torch.inference_mode()`, which "
               "records no graph)" if any(g.is_inference() for g in gots) else "")
        fail(f"{what} is detached from its inputs (no grad_fn){how}: {listed} {which} "
             "(`.detach()`, `.data`, `torch.no_grad()`, " + ("" if advice else "`.detach()"
             ".numpy()`, which a GPU tensor refuses too, ") + "or a tensor rebuilt from its "
             "values, torch.tensor(x.tolist()))?" + (f" {advice}" if advice else ""))
    if all(g.grad_fn is None for g in gots if g.requires_grad):
        fail(f"{what} is a new leaf tensor: it requires grad but has no grad_fn, so it "
             f"was made from values, not computed from {listed} (`torch.tensor(...)`, "
             "`.detach().requires_grad_()`, `.data`), and no gradient reaches them. "
             "Compute it from the inputs with tensor operations.")
    used = [(g, c.to(g.dtype)) for g, c in zip(gots, cotangents) if g.requires_grad]
    with saved_changed(what, *in_place):  # an intermediate the answer changed in place
        mine = torch.autograd.grad([g for g, _ in used], [inputs[n][0] for n in names],
                                   [c for _, c in used], allow_unused=True)
    ref = torch.autograd.grad(wants, [inputs[n][1] for n in names], cotangents, allow_unused=True)
    for name, a, b in zip(names, mine, ref):
        nan = None if a is None or b is None else torch.isnan(a) & ~torch.isnan(b)
        if nan is not None and nan.any():
            fail(f"the gradient of `{name}` through {what} has NaN (first at "
                 f"{first_position(nan, (dims or {}).get(name))}) where the reference's is "
                 "finite: backward gives NaN. A NaN of the forward pass (a softmax of only "
                 "-inf) flows back into what it met (NaN weights times v: v's gradient) even if "
                 "a later result is cleaned: zero such rows right after the softmax.")
    cut = [n for n, a, b in zip(names, mine, ref) if b is not None and b.abs().amax() > 0
           and (a is None or not a.abs().amax() > 0)]
    if cut:  # one input: itself detached; several: something they all feed
        who = " and ".join([", ".join(f"`{n}`" for n in cut[:-1]), f"`{cut[-1]}`"][not cut[1:]:])
        copies = copied_leaves([g for g, _ in used], [inputs[n][0] for n in names])
        fail(f"{who} get{'s' * (len(cut) == 1)} no gradient from {what}: " + (copies or advice or (
            f"{'were they' if cut[1:] else 'was it'}, or a value computed from "
            f"{'them' if cut[1:] else 'it'}, detached "
            "(`.detach()`, `.data`, `torch.no_grad()`) or turned into a Python number "
            "(`.item()`, `float(...)`)? The values are right, but no gradient flows back, "
            "so nothing before it could learn.")))
    for name, a, b in zip(names, mine, ref):
        if b is None:
            continue
        expect_close(torch.zeros_like(b) if a is None else a, b,
                     f"the gradient of {what} with respect to `{name}` (values right, "
                     "gradient wrong: is part of the path detached?)",
                     dims=(dims or {}).get(name))
