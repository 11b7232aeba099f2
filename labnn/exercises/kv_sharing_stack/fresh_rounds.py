"""Notebook 04's five exercises against state kept between calls
(`labnn.exercises.grading.fresh_values`): right after its first comparison of values, each
answer is called again with other values of the same sizes, dtype and requires_grad, then
on those tensors refilled in place. A result cached by the shapes (a dict,
`functools.lru_cache`), by the inputs' `id()` or `data_ptr()` (or by the modules'), a part of
it kept (`Square`'s 2x), or one output buffer per shape is named as such, not by a later
round that happens to try other sizes, float32 or a GPU. The shared keys and values are
also rerun with one memory vector changed, where another batch entry's must stay as they were.

The modules of the shared keys and values are handed in unchanged (`other_values` leaves
them as they are); the reads of the value gradients go in as one list per set of tensors,
the same list for the refilled ones; `Append` gets `top` as the prefix of each call's own
buffer. `again` calls the shared keys and values and the weight gradient once more with other
values of the same sizes, where a result kept between calls is wrong.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from labnn.exercises.grading import call, close, fail
from labnn.exercises.grading.clipping import expect_unclipped
from labnn.exercises.grading.fresh_values import expect_fresh
from labnn.exercises.grading.sizes import randn
from labnn.exercises.kv_sharing_stack.input_rounds import shared_kv_inputs, summed_reads


def _kept_part(fix: str) -> Callable[[object, object, str], None]:
    """`differs` for `expect_fresh`: a result that is neither right nor an earlier one, on
    values of the sizes where the first call was right, keeps a part between calls."""
    def differs(got: object, want: object, said: str) -> None:
        fail(f"{said}, is wrong, though right at its first call: a part of it kept between "
             "calls (a global, an attribute, a cache keyed on the shapes or id())? or a step "
             f"right only for some values; {fix}.")
    return differs


def _same(got: object, want: torch.Tensor) -> bool:
    return isinstance(got, torch.Tensor) and close(got, want)


def _same_pair(got: object, want: tuple[torch.Tensor, torch.Tensor]) -> bool:
    return (isinstance(got, (tuple, list)) and len(got) == 2
            and all(_same(t, w) for t, w in zip(got, want)))


def shared_kv(fn: Callable, m: torch.Tensor, norm: torch.nn.Module, kv: torch.nn.Module,
              h: int) -> None:
    """`fn(m, norm, kv, h)` on other memory vectors of m's sizes, the same modules."""
    def reference(m, norm, kv, h):
        with torch.no_grad():
            out = kv(norm(m)).view(m.size(0), 2, h, -1)
        return out[:, 0], out[:, 1]

    expect_fresh(fn, "shared_kv(m, norm, kv, n_heads)", (m, norm, kv, h), reference, _same_pair,
                 _kept_part("compute k and v from this call's m, norm and kv"))


def shared_kv_rows(fn: Callable, m: torch.Tensor, norm: torch.nn.Module,
                   kv: torch.nn.Module, h: int) -> None:
    """`fn(m, norm, kv, h)` again with memory vector m[0] alone changed: fail when the keys
    or values of another batch entry change too (a .roll or index along dim 0, a mean, sum
    or cumsum over it, a reshape across rows). Both calls on one seed: dropout alike."""
    other = m.detach().clone()
    other[0] = other[0].flip(0) * 2 + 1
    try:
        runs = []
        for x in (m.detach().clone(), other):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                runs.append(fn(x, norm, kv, h))
    except Exception:  # noqa: BLE001 (the check's own call ran: a rerun only names)
        return
    for name, a, b in zip(("keys", "values"), *runs):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dim() and a.size(0) == m.size(0)):
            continue
        moved = [i for i in range(1, m.size(0)) if not close(a[i].detach(), b[i].detach())]
        if moved:
            fail(f"the {name} of batch entry {moved[0]} change when only m[0] changes: "
                 "your code mixes the batch entries (a .roll, .flip or index along dim 0, a "
                 "mean, sum or cumsum over it, a reshape across rows?). Each entry's keys "
                 "and values come from its own m[b] alone: kv(norm(m)).")


def square_forward(fn, x: torch.Tensor) -> None:
    """`fn.apply(x)` on another x of the same sizes."""
    expect_fresh(lambda x: fn.apply(x), "Square.apply(x)", (x,), lambda x: x * x, _same,
                 _kept_part("return x * x from this call's x"))


def square_gradient(fn, x: torch.Tensor, g: torch.Tensor) -> None:
    """The gradient of `fn.apply(x)` for grad_output `g`, on other x and g of their sizes:
    a backward that keeps 2x (or the gradient) between calls."""
    def gradient(x, g):
        return torch.autograd.grad(fn.apply(x), x, g)[0]

    expect_fresh(gradient, "the gradient of Square.apply(x)", (x, g), lambda x, g: 2 * x * g,
                 _same, _kept_part("use this call's x: grad_output * 2 * x"))


def value_gradients(fn: Callable, reads: list[torch.Tensor]) -> None:
    """`fn(read_grads)` on other reads of the same sizes, then on those refilled in place,
    handed in the same list (a cache keyed on `id(read_grads)` finds it)."""
    lists: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def on_list(*reads):
        return fn(lists.setdefault(tuple(map(id, reads)), list(reads)))

    expect_fresh(on_list, "value_gradients(read_grads)", tuple(r.clone() for r in reads),
                 lambda *r: summed_reads(r), _same,
                 _kept_part("add into a new tensor, torch.zeros_like(read_grads[-1]), at "
                            "every call"))


def weight_gradient(fn: Callable, xs: torch.Tensor, gs: torch.Tensor) -> None:
    """`fn(xs, gs)` on other xs and gs of their sizes."""
    expect_fresh(fn, "weight_gradient(xs, gs)", (xs.clone(), gs.clone()),
                 lambda xs, gs: gs.flatten(0, 1).t() @ xs.flatten(0, 1), _same,
                 _kept_part("compute it from this call's xs and gs"))


def append(fn, value: torch.Tensor, buffer: torch.Tensor, n: int) -> None:
    """`fn.apply(top, value, buffer)`, top the first n slots of `buffer`, on another value
    and buffer of their sizes: the prefix returned must be this call's buffer's."""
    before: dict[int, torch.Tensor] = {}

    def push(value, buffer):
        before[buffer.data_ptr()] = buffer.detach().clone()
        return fn.apply(buffer.data[:, :n], value, buffer)

    def reference(value, buffer):
        out = before[buffer.data_ptr()][:, :n + 1]  # detached: id() differs.clone()
        out[:, n] = value
        return out

    expect_fresh(push, "Append.apply(top, value, buffer)", (value, buffer), reference, _same,
                 _kept_part("return this call's buffer.data[:, :n + 1]"))


def again(what: str, got: object, want: Sequence[torch.Tensor], fix: str) -> None:
    """A second call with the sizes, dtype and device of the check's first, other values:
    a result (or a part of it) kept between calls, keyed by the sizes, gives the first's."""
    gots = list(got) if isinstance(got, (tuple, list)) else [got]
    if not (len(gots) == len(want) and all(isinstance(t, torch.Tensor) and close(t, w)
                                           for t, w in zip(gots, want))):
        if len(gots) == len(want) == 1:
            expect_unclipped(gots[0], want[0], f"{what}, called again")
        fail(f"{what}, called again with the same sizes and other values, is wrong there: "
             "your function keeps something between calls (a result, or a part of it, in a "
             f"global or a cache keyed by the sizes); {fix}.")


def shared_kv_again(fn: Callable, b: int, d: int, h: int) -> None:
    """`fn` on new m and new modules of the check's sizes (`again`)."""
    m, norm, kv = shared_kv_inputs(b, d, torch.float64, 74)
    with torch.no_grad():
        want = kv(norm(m)).view(b, 2, h, -1).unbind(1)
    what = "shared_kv(m, norm, kv, n_heads)"
    again(what, call(fn, f"{what}, again", m, norm, kv, h), want,
          "compute k and v from this call's m, norm and kv")


def weight_gradient_again(fn: Callable, xs: torch.Tensor, gs: torch.Tensor) -> None:
    """`fn` on other xs and gs of the check's sizes (`again`)."""
    xs, gs = (randn(*t.shape, seed=s, dtype=t.dtype) for t, s in ((xs, 96), (gs, 97)))
    what = "weight_gradient(xs, gs)"
    again(what, call(fn, f"{what}, again", xs, gs), [gs.flatten(0, 1).t() @ xs.flatten(0, 1)],
          "compute it from this call's xs and gs")
