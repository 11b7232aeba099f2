"""Notebook 03's token loop on a sequence longer than any window a learner may write: a
memory cut to its last `n` steps (`[:, :, -8:]`, `-max_distance:`, `-(attn_len or 16):`)
or detached every `p` steps (truncated backpropagation, after reading `block_len`) is
right for the 7 tokens of the first check and wrong from step `n + 1` (or `p`) on; the
notebook's global model used in place of the loop's argument; a float32 tensor made
inside a float64 loop, or a bfloat16 one (where torch.cat cannot promote it).

Dimension letters (the package legend): `B` batch, `T` tokens, `D` model width.
"""

from __future__ import annotations

import dataclasses
import dis
import types
from typing import Callable

import torch
from torch import nn

from labnn.exercises.grading import (ExerciseFailed, call, close, expect_tensor, fail,
                                     first_line)
from labnn.exercises.grading.reference_calls import closure_values
from labnn.exercises.feedback_transformer.step_slips import off_entries
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer

T = 24  # past every window the trial wrote (6, 7, 8, max_distance = 10, 16)
MAX_DISTANCE = 10  # not a window of its own: a memory cut to max_distance shows
_WHOLE = ("The exercise has no window: step t attends to the memory of every earlier "
          "step; keep all keys and values.")


def jittered_model(config: FeedbackConfig, seed: int, *, scaled: bool = False
                   ) -> FeedbackTransformer:
    """A model of `config` in eval mode whose layer mix and relative biases are drawn
    (seeded) rather than zero, so that every mistake shows; `scaled`: its embedding at
    std 1 and each linear map at std 1/sqrt(fan_in), not GPT-2's 0.02, under which a
    memory vector moves the logits by ~1e-3 (a plain mean of the layers passed)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = FeedbackTransformer(config).eval()
        with torch.no_grad():
            model.mix.logits.normal_()
            for layer in model.layers:
                layer.attn.rel.bias.normal_()
            for m in model.modules() if scaled else ():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    m.weight.mul_(1 / m.weight.std() / getattr(m, "in_features", 1) ** 0.5)
    return model


def _model() -> FeedbackTransformer:
    """A 2-layer model of width 12, 3 heads, max_distance 10."""
    return jittered_model(FeedbackConfig(vocab_size=9, d_model=12, n_heads=3, n_layers=2,
                                         d_ff=24, max_distance=MAX_DISTANCE), seed=21,
                          scaled=True)


def windowed(model: FeedbackTransformer, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """The reference's logits with the memory cut to the last `n` steps (`attn_len = n`)."""
    config = model.config
    model.config = dataclasses.replace(config, attn_len=n)
    try:
        with torch.no_grad():
            return FeedbackTransformer._forward(model, tokens, None)[0]
    finally:
        model.config = config


def window_slip(model, tokens: torch.Tensor, got: torch.Tensor, step: int,
                what: str) -> None:
    """Name logits that first differ at `step`, equal to a memory of the last `step - 1`
    steps (a window, `[:, :, -n:]`)."""
    n = step - 1
    if n < 2 or not close(got.detach(), windowed(model, tokens, n)):
        return
    cap = (f" (max_distance = {n} caps the distances of the relative bias, not the memory)"
           if n == model.config.max_distance else "")
    fail(f"{what} keeps only the last {n} steps' keys and values (e.g. [:, :, -{n}:]): the "
         f"logits differ from step t = {step} on{cap}. " + _WHOLE)


def global_model(fn: Callable, model: nn.Module, what: str) -> None:
    """Fail when `fn` (or a function it holds) reads a module from its globals, e.g. the
    notebook's `feedback` model, instead of the model it is given."""
    todo, seen = [fn], set()
    while todo:
        f = todo.pop()
        if not isinstance(f, types.FunctionType) or f in seen:
            continue
        seen.add(f)
        todo += closure_values(f)
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            ops = list(dis.get_instructions(code))
            for i, op in enumerate(ops):
                if op.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
                    continue
                value = f.__globals__.get(op.argval)
                todo.append(value)
                if isinstance(value, nn.Module) and value is not model:
                    after = ops[i + 1] if i + 1 < len(ops) else None
                    attr = after.argval if after is not None and after.opname in (
                        "LOAD_ATTR", "LOAD_METHOD") else None
                    used = f"{op.argval}.{attr}" if attr else op.argval
                    fail(f"{what} uses {used}: `{op.argval}` is a global of your notebook "
                         f"(a {type(value).__name__}), not the model the loop is given; use "
                         f"the argument: model.{attr or 'embed, model.layers and the rest'}.")


def float32_made(fn: Callable, dtype: str = "float64") -> Callable:
    """`fn` for the run on a model of `dtype`: a dtype clash inside it (a float32 tensor
    made without dtype= meets the model) is named, not raised as torch's "mixed dtype"; so
    are float32 logits from a float64 model (the model's dtype, not the tokens')."""
    def token_loop(model, tokens):
        try:
            got = fn(model, tokens)
        except RuntimeError as err:
            said = first_line(err)
            if any(s in said for s in ("mixed dtype", "scalar type", "same dtype",
                                       "dtype Float", "found Float", "got Float")):
                fail(f"with a {dtype} model your loop made a float32 tensor (torch.zeros(...) "
                     "or torch.empty(...) without dtype=, or a .float()): make new tensors "
                     "in the model's dtype, dtype=x.dtype, x.new_zeros(...) or x[:, :0]. "
                     f"(torch said: {said[:120]})")
            raise
        made = getattr(got, "dtype", None)
        if dtype == "float64" and made in (torch.float32, torch.float16, torch.bfloat16):
            fail(f"with a float64 model your loop returns {made} logits, expected "
                 "torch.float64, the model's dtype (the tokens are integer ids): a tensor made "
                 "without dtype= (torch.zeros(B, T, V, device=x.device)) is float32; give it "
                 "dtype=x.dtype, or use x.new_zeros(...); no .float() on the way.")
        return got
    return token_loop


def bfloat16_round(fn: Callable, what: str, model, tokens: torch.Tensor) -> None:
    """Run `fn` on a bfloat16 `model`: a float32 tensor made without dtype= (the empty
    memory, `torch.zeros(B, H, 0, D_h, device=...)`) raises there, or gives float32 logits,
    which a float64 model hides (torch.cat promotes it)."""
    what = f"{what} with a bfloat16 model"
    with torch.no_grad():
        want = model(tokens)[0].float()
        got = expect_tensor(call(float32_made(fn, "bfloat16"), what, model, tokens), what)
    if got.dtype != torch.bfloat16:
        fail(f"{what} returns {str(got.dtype)[6:]} logits: keep the model's dtype; a tensor "
             "made without dtype= (torch.zeros(..., device=x.device)) is float32: give it "
             "dtype=x.dtype, or use x.new_zeros(...) or x[:, :0].")
    if got.shape != want.shape or not close(got.float(), want, atol=0.05, rtol=0.05):
        fail(f"the logits of {what} differ from the reference's beyond bfloat16's rounding, "
             "though they match for float32 and float64: keep every step in the model's "
             "dtype.")


def _steps(n: int) -> list[int]:
    """The steps whose gradients `_cuts` compares: all from 1, or every 4th (and the last)
    past 32 steps, where a detach every `p >= 4` steps still shows every cut."""
    return list(range(1, n)) if n <= 32 else sorted({*range(1, n, 4), n - 1})


def _embedding_gradients(loop: Callable, model, tokens: torch.Tensor) -> list | None:
    """For each step t >= 1 (`_steps`): the gradient of step t's logits (a fixed random
    direction) with respect to the embedding of every step, `[B, T, D]`, through `loop`'s
    graph; None unless `loop` embeds the tokens once, `[B, T, D]`."""
    made = []
    handle = model.embed.register_forward_hook(lambda _, __, out: made.append(out))
    try:
        got = loop(model, tokens)
    finally:
        handle.remove()
    if len(made) != 1 or tuple(made[0].shape[:2]) != tuple(tokens.shape) or not isinstance(
            got, torch.Tensor) or not made[0].requires_grad or not got.requires_grad:
        return None
    u = torch.randn(got.shape, generator=torch.Generator().manual_seed(5)).to(got.dtype)
    grads = [torch.autograd.grad((got[:, t] * u[:, t]).sum(), made[0], retain_graph=True,
                                 allow_unused=True)[0] for t in _steps(tokens.size(1))]
    return None if any(g is None for g in grads) else grads


def _cuts(fn: Callable, model, tokens: torch.Tensor) -> list[int]:
    """Where `fn`'s memory is detached: for each step, 1 + the last earlier step whose
    embedding gets a wrong gradient from it (the steps before a detach miss a path),
    those not 0, distinct and sorted; [] when the gradients cannot be compared."""
    try:  # the learner's graph may not backpropagate (a tensor written in place)
        mine = _embedding_gradients(lambda m, x: call(fn, "token_loop(model, tokens)", m, x),
                                    model, tokens)
    except RuntimeError:
        return []
    ref = _embedding_gradients(lambda m, x: FeedbackTransformer._forward(m, x, None)[0],
                               model, tokens)
    if mine is None or ref is None:
        return []
    cuts = set()
    for a, b in zip(mine, ref):
        off = ((a - b).abs().sum((0, 2)) > 1e-3 * b.abs().sum((0, 2)) + 1e-7).nonzero()
        if len(off):
            cuts.add(int(off[-1]) + 1)
    return sorted(cuts)


def expect_whole_memory(fn: Callable, what: str, params: Callable[[nn.Module], dict],
                        gradients: Callable) -> None:
    """Run `fn(model, tokens)` on `T = 24` tokens: fail by name when the memory is cut to a
    window or detached every few steps (right in 7 tokens, not in 24).

    Args:
        fn: the learner's token loop.
        what: the call, e.g. ``"token_loop(model, tokens)"``.
        params: model -> its parameters by name.
        gradients: `expect_memory_gradients(got, want, what, params)`.
    """
    model = _model()
    tokens = torch.randint(0, 9, (2, T), generator=torch.Generator().manual_seed(22))
    want = model(tokens)[0]
    what = f"{what} with tokens [2, {T}]"
    got = expect_tensor(call(fn, what, model, tokens), what)
    if got.shape != want.shape:
        fail(f"{what} has shape {list(got.shape)}, expected {list(want.shape)}, though the "
             "7 tokens of the first check match: read T from tokens.size(1).")
    if not close(got.detach(), want.detach()):
        off = off_entries(got, want)
        step = int(off.any(2).any(0).nonzero()[0])
        window_slip(model, tokens, got, step, what)
        fail(f"the logits of {what} differ from step t = {step} on, though the 7 tokens of "
             "the first check match: nothing may depend on the sequence's length. "
             + _WHOLE)
    named_detach(fn, model, tokens, what, lambda: gradients(got, want, what, params(model)))


def named_detach(fn: Callable, model, tokens: torch.Tensor, what: str,
                 gradients: Callable[[], None]) -> None:
    """Run `gradients()` (the check of the loop's gradients); when it fails and the
    embeddings' gradients show the memory detached at some steps (not at every step: that
    keeps the check's own message), name the detach instead."""
    try:
        gradients()
    except ExerciseFailed:
        cuts = _cuts(fn, model, tokens)
        gaps = {b - a for a, b in zip(cuts, cuts[1:])}
        if not cuts or gaps == {1}:
            raise
        sampled = gaps == {4} and cuts[0] > 32  # every step compared there (every 4th) cut
        every = (f"every {gaps.pop()} steps" if len(gaps) == 1
                 else f"at step{'s' * (len(cuts) > 1)} {', '.join(map(str, cuts))}")
        if sampled:
            every = (f"at step {cuts[0] - 1} and every later step compared (every 4th "
                     f"past 32: {cuts[1] - 1}, ..., {cuts[-1] - 1})")
        fail(f"{what}: the memory is detached {every} (truncated backpropagation: later "
             f"steps' gradients miss the paths through the steps before {cuts[-1]}); the "
             "values are right but the exercise backpropagates through the whole sequence: "
             "never detach the memory, its keys or values.")
