"""Notebook 03's answers that keep something from one call to the next. Each of the checks'
calls builds a new model, so an answer that keeps a value around still passed them:

- a token loop that keeps its keys and values (on the model, as `model._kv_cache`, or in a
  global that it resets only for another model or another batch size), or the layer-mix
  weights of an earlier model;
- a relative bias cached between calls (functools.lru_cache on (table, s), a dict keyed
  on s or the table's shape).

Once an answer has passed, each function here runs it again where a kept value shows: the
token loop on a new model of the same sizes (another seed), then on that same model with
other tokens, then once more after its weights changed in place (logits memoized per model
and tokens); the bias after its table changed in place, then with another table of the same
shape. Two more rounds: an output buffer filled and returned by every call (`fresh_result`,
the bias: the first result must survive a second call) and one zeros tensor handed out for
every empty memory (`empty_attention`); and a token loop must leave the gradients the model
already holds (no `model.zero_grad()` inside: gradients accumulate over micro-batches).

The memory vector and the attention run `fresh` instead
(`labnn.exercises.grading.fresh_values`): other values of the same sizes, then the same
tensors refilled in place, name a result cached by the shapes, `id()` or `data_ptr()`, an
output buffer, and (`fresh`'s own diagnosis) one input, or a value computed from it such as
softmax(w), kept from an earlier call.

Dimension letters (the package legend): `B` batch, `T` tokens, `L+1` layers, `D` width.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from labnn.exercises.grading import (ExerciseFailed, close, expect_close, expect_tensor, fail,
                                     first_line, first_position)
from labnn.exercises.grading import fresh_values
from labnn.exercises.feedback_transformer.long_memory import jittered_model
from labnn.exercises.feedback_transformer.step_slips import memory_on, off_entries
from labnn.exercises.grading.sizes import randn
from labnn.feedback.layer import RelativeBias
from labnn.feedback.model import FeedbackConfig

_FRESH = ("Start every call from its own empty memory, model.project_memory(x[:, :0]), and "
          "use only the model it is given.")


def _run(fn: Callable, model, tokens: torch.Tensor, what: str, said: str,
         before: set[str], earlier: torch.Tensor | None = None) -> None:
    """`fn(model, tokens)` gives the reference's logits, or fails naming state kept between
    calls; `said`: which call this is; `before`: the model's attributes before any call
    (one the loop set is named); `earlier`: the mix logits of the check's own model."""
    with torch.no_grad():
        want = model(tokens)[0]
    try:
        with torch.no_grad():
            got = fn(model, tokens.clone())
        shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        wrong = "" if shape == list(want.shape) else f" ({shape})"
        off = None if wrong else off_entries(got, want)
    except ExerciseFailed:
        raise
    except Exception as err:  # noqa: BLE001 (it ran on a model of the same sizes)
        wrong, off = f" ({type(err).__name__}: {first_line(err, 60)})", None
    if not wrong and not off.any():
        return
    where = wrong or f" (first at {first_position(off, 'b t v')})"
    added = sorted(set(vars(model)) - before)
    if not added and not wrong and _same_on_copy(fn, model, tokens, got):
        memory_on(fn, model, tokens, earlier)  # a memory vector wrong: named
        diff = float((got.detach() - want).abs().nan_to_num(float("inf")).max())
        fail(f"{what}{said} is off by up to {diff:.2g}{where}, as on a copy of this "
             "model: your loop keeps something between calls (a global?) or has a small "
             "mistake in every step (compare m with model.mix(torch.stack(outs))).")
    kept = f"model.{added[0]}, which it sets" if added else "a global, a default argument"
    fail(f"{what}{said} gives wrong logits{where}, though right on the check's model: your "
         f"loop keeps something between calls ({kept}). " + _FRESH)


def _same_on_copy(fn: Callable, model, tokens: torch.Tensor, got: torch.Tensor) -> bool:
    """`fn` gives `got` again on a deep copy of `model` (new object, the same weights): the
    wrong logits do not come from something kept on that model or keyed on its identity."""
    try:
        with torch.no_grad():
            again = fn(copy.deepcopy(model), tokens.clone())
    except Exception:  # noqa: BLE001 (the message is about `got`)
        return False
    return isinstance(again, torch.Tensor) and close(again.detach(), got.detach())


def token_loop(fn: Callable, what: str, tokens: torch.Tensor, config: FeedbackConfig,
               earlier: torch.Tensor | None = None) -> None:
    """Run `fn` on a new model of `config` (another seed) with the check's `tokens`, then on
    that model again with other tokens of the same shape: both are right unless the loop
    keeps keys, values or weights between calls; then again with those tokens after the
    model's weights changed in place (as `optimizer.step()` changes them): logits memoized
    per model and tokens are the old ones. `earlier`: the mix logits of the check's own model
    (layer weights kept from it are named)."""
    model = jittered_model(config, seed=13, scaled=True)
    other = torch.randint(0, config.vocab_size, tuple(tokens.shape),
                          generator=torch.Generator().manual_seed(14))
    before = set(vars(model))
    for p in model.parameters():  # gradients of earlier micro-batches, still to add to
        p.grad = torch.full_like(p, 0.5)
    _run(fn, model, tokens, what, " on a new model of the same sizes", before, earlier)
    if any(p.grad is None or not bool((p.grad == 0.5).all()) for p in model.parameters()):
        fail(f"{what} cleared the gradients the model already held (model.zero_grad() / "
             "optimizer.zero_grad() inside): gradients accumulate over micro-batches; "
             "leave clearing them to the training loop.")
    model.zero_grad()
    _run(fn, model, other, what, " called again on that model, with other tokens,", before)
    wider = torch.randint(0, config.vocab_size, (tokens.size(0) + 1, tokens.size(1)),
                          generator=torch.Generator().manual_seed(16))
    _run(fn, model, wider, what, f" again, on a batch of {len(wider)},",
         before)  # keys kept from a batch of another size
    with torch.no_grad():  # as an optimizer step does: in place, the same tensors
        old = model(other)[0]
        noise = torch.Generator().manual_seed(15)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=noise), alpha=0.1)
        try:
            got = fn(model, other.clone())
        except Exception:  # noqa: BLE001 (_run names it)
            got = None
    said = " after the model's weights changed in place (as optimizer.step() does)"
    if isinstance(got, torch.Tensor) and got.shape == old.shape and close(got.detach(), old):
        fail(f"{what}{said} gives the logits of the old weights, for the same model and "
             "tokens: your loop keeps its results between calls (memoized per model and "
             "tokens?): compute them anew in every call, from the model's current weights.")
    _run(fn, model, other, what, said + ",", before)


def relative_bias(fn: Callable, table: torch.Tensor, s: int) -> None:
    """Run `fn(table, s)` on a copy of the check's table, again after that copy changed in
    place (as `optimizer.step()` changes it), then on another table of the same shape,
    dtype and device: a result kept between calls gives the old bias."""
    what, mine = f"relative_bias(table, {s})", table.detach().clone()
    fix = ("a result kept between calls (functools.lru_cache, a dict keyed on s or the "
           "table's shape?): recompute the bias from the table each call.")
    for said, change in ((" after the table changed in place (table.add_(1.0), as an "
                          "optimizer step does)", lambda t: t.add_(1.0)),
                         (" with another table of the same shape",
                          lambda t: randn(*t.shape, seed=17))):
        old = RelativeBias.lookup(mine, s)
        try:
            fn(mine, s)  # the call a cache keeps
            with torch.no_grad():
                mine = change(mine)
            got = fn(mine, s)
        except Exception:  # noqa: BLE001 (it ran on this table: the later rounds say more)
            return
        want = RelativeBias.lookup(mine, s)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and not close(
                got.detach(), want):
            gave = "the old table's bias" if close(got.detach(), old) else "a wrong bias"
            fail(f"{what}{said} gives {gave}, though right before: {fix}")


def fresh(fn: Callable, what: str, args: tuple, reference: Callable, kept: tuple[str, ...],
          dims: str) -> None:
    """`fresh_values.expect_fresh` on `args` (the check's first values, which `fn` got
    right): a result that matches neither the reference nor an earlier result is named as
    one input of an earlier call kept (`kept`: how to say each, e.g. "softmax(w)") where
    that input gives it, else told apart by `expect_close` (`dims`)."""
    seen = []

    def ref(*given):
        seen.append(tuple(a.clone() for a in given))
        return reference(*given)

    def differs(got: object, want: torch.Tensor, said: str) -> None:
        now = seen[-1]
        for earlier in seen[:-1]:
            for i, name in enumerate(kept):
                mixed = now[:i] + (earlier[i],) + now[i + 1:]
                if not close(earlier[i], now[i]) and close(got, reference(*mixed)):
                    fail(f"{said}, gives the result with {name} of an earlier call: {name} "
                         "kept between calls (a global, a default argument, an attribute); "
                         f"{fresh_values.AFRESH}")
        expect_close(expect_tensor(got, said), want, said, dims=dims)

    fresh_values.expect_fresh(fn, what, args, ref, close, differs)


def fresh_result(fn: Callable, what: str, got, *other) -> None:
    """Call `fn(*other)` (inputs of the shapes `got` came from, other values): `got`, the
    first call's result, must stay as it was; a buffer filled and returned by every call
    is overwritten."""
    if not isinstance(got, torch.Tensor) or got.device.type == "meta":  # no values there
        return
    kept = got.detach().clone()
    try:
        fn(*other)
    except Exception:  # noqa: BLE001 (it ran on these shapes: the later rounds say more)
        return
    if not torch.equal(got.detach().nan_to_num(), kept.nan_to_num()):
        fail(f"{what}: a second call (other inputs, same sizes) overwrote what the first "
             "returned: an output buffer kept between calls (filled with .copy_ or out=); "
             "return a new tensor each call.")


def empty_attention(fn: Callable, q: torch.Tensor) -> None:
    """`fn(q, k, v, bias)` with an empty memory (S = 0) twice, the first result changed in
    place in between: the second must be zeros still, not the first tensor handed out
    again (zeros cached by shape, dtype and device)."""
    b, h, d = q.shape
    empty = q.new_zeros(b, h, 0, d)
    try:
        first = fn(q.clone(), empty.clone(), empty.clone(), q.new_zeros(h, 0))
        with torch.no_grad():
            first.add_(1.0)  # as a caller may write into its result
        again = fn(q.clone(), empty.clone(), empty.clone(), q.new_zeros(h, 0))
    except Exception:  # noqa: BLE001 (expect_empty_memory names its errors)
        return
    if isinstance(again, torch.Tensor) and again.shape == q.shape and bool(
            (again.detach() != 0).any()) and close(again.detach(), first.detach()):
        fail("feedback_attention with an empty memory (S = 0), called twice: the second "
             "call handed out the first call's tensor again (written into in between, it "
             "is no longer zeros): zeros kept between calls (a dict, a global); return "
             "new ones each call, torch.zeros_like(q).")
