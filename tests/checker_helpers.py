"""What every checker test asserts: a wrong answer gets its diagnosis, a right one the ✅ line."""

import math
import re
import types

import pytest
import torch

from labnn.exercises.grading import ExerciseFailed


def fails_with(check, *args, match=None):
    """`check(*fns)` fails with a diagnosis matching the regex `match` (keyword, or the last argument)."""
    fns, match = (args, match) if match is not None else (args[:-1], args[-1])
    with pytest.raises(ExerciseFailed, match=match):
        check(*fns)


def passes(check, *args, capsys=None):
    """`check(*fns)` accepts the answer and says so (`capsys`: keyword, or the last argument)."""
    fns, capsys = (args, capsys) if capsys is not None else (args[:-1], args[-1])
    check(*fns)
    assert "✅" in capsys.readouterr().out


def named_briefly(check, fns, pattern, flags=0):
    """A learner trial's case: `check(*fns)` fails with a message matching `pattern`, in under 400 characters."""
    with pytest.raises(ExerciseFailed) as info:
        check(*fns)
    message = str(info.value)
    assert re.search(pattern, message, flags), message
    assert len(message) < 400, message


def judge(check, fns, pattern, capsys):
    """A learner trial's case, crash or not: `named_briefly`; for an answer that crashes, the
    check's notice (on stderr) printed before the learner's own error, which it re-raises, is
    the message (the pattern may match the notice or the error's own line)."""
    try:
        named_briefly(check, fns, pattern, re.S)
    except AssertionError:
        raise
    except Exception as error:  # the learner's own error, after the check's notice
        out = capsys.readouterr().err
        notice = out[out.rfind("⚠️"):]
        assert re.search(pattern, notice + f"{type(error).__name__}: {error}", re.S), notice
        assert len(notice) < 400, notice


def trial_case(cases: dict, marked: dict):
    """`case(tag, check, fns, pattern, xfail=None)` for a learner trial's module: records a wrong
    answer (`fns` a function or a tuple of them) and the regex a message naming it matches; `xfail`
    (a reason, kept in `marked`) marks a case not named when the trial found it."""
    def case(tag, check, fns, pattern, xfail=None):
        cases[tag] = (check, fns if isinstance(fns, tuple) else (fns,), pattern)
        if xfail:
            marked[tag] = xfail
    return case


def trial_tests(cases: dict, right: dict, xfail: dict):
    """A learner trial module's two tests: every wrong answer named briefly (`judge`; strict xfail
    for the cases in `xfail`), every right answer accepted. Assign them to module names that start
    with `test_` so that pytest collects them."""
    @pytest.mark.parametrize("tag", [
        pytest.param(t, marks=pytest.mark.xfail(strict=True, reason=xfail[t])) if t in xfail
        else t for t in cases])
    def wrong_answer_named(tag, capsys):
        judge(*cases[tag], capsys)

    @pytest.mark.parametrize("tag", list(right))
    def right_answer_accepted(tag, capsys):
        passes(*right[tag], capsys)

    return wrong_answer_named, right_answer_accepted


def autograd_function(name: str, forward, backward) -> type:
    """A `torch.autograd.Function` subclass named `name`, as a learner writes one in a cell:
    its methods are copies of `forward` and `backward` named `name.forward`, `name.backward`
    (what Python's errors call them, e.g. "Square.forward() takes 2 positional arguments")."""
    def method(fn, attr):
        fn = types.FunctionType(fn.__code__, fn.__globals__, attr, fn.__defaults__,
                                fn.__closure__)
        fn.__qualname__ = f"{name}.{attr}"
        return staticmethod(fn)
    return type(name, (torch.autograd.Function,),
                {"forward": method(forward, "forward"), "backward": method(backward, "backward")})


def feedback_token_loop(mix, run=lambda layer, t, h, k, v: layer(h, k, v)):
    """Notebook 03's token loop (Exercise 4) as a learner writes it, its memory vector of a step
    `mix(model, outs)` (`outs`: the embedding and each layer's output `[B, D]`), each layer at
    step `t` run as `run(layer, t, h, k, v)`: right with `model.mix(torch.stack(outs))` and
    `layer(h, k, v)`, any slip of the mix or of a layer's call otherwise."""
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :0])
        tops = []
        for t in range(tokens.size(1)):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(run(layer, t, outs[-1], keys[i], values[i]))
            tops.append(outs[-1])
            k, v = model.project_memory(mix(model, outs)[:, None])
            keys = [torch.cat(p, 2) for p in zip(keys, k)]
            values = [torch.cat(p, 2) for p in zip(values, v)]
        return model.head(torch.stack(tops, 1))
    return token_loop


def square_with(backward_of) -> type:
    """Notebook 04's `Square` (Exercise 2), forward `x * x` with `x` saved, and the gradient
    `backward_of(x, grad_output)`: right with `2 * x * grad_output`."""
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return backward_of(x, g)
    return autograd_function("Square", forward, backward)


def cache_bytes_with(per=lambda t: t.nbytes, state=None):
    """Notebook 05's cache size (Exercise 4) as a learner writes it: each key's and value's
    bytes `per(t)`, a `KVState`'s one kv `state(kv)` (`per` by default); right with nbytes."""
    from labnn.feedback import KVState
    from labnn.xl import XLCache

    def cache_bytes(cache):
        if isinstance(cache, KVState):
            return (state or per)(cache.kv)
        pairs = [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else cache
        return sum(per(k) + per(v) for k, v in pairs)
    return cache_bytes


def accuracy_by_distance_with(hits_of=lambda logits, y: logits.argmax(-1) == y,
                              at_distance=lambda hits, at: hits[at].sum() / at.sum()):
    """Notebook 05's accuracy by distance (Exercise 3) as a learner writes it, a loop over the
    distances: the hits `hits_of(logits, y)`, each distance's entry `at_distance(hits, at)`
    (`at`: the labelled positions at that distance); right with the argmax's hits, their mean."""
    from labnn.data.recall import IGNORE

    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = labelled.long().cumsum(1) * labelled
        hits = hits_of(logits, y)
        out = logits.new_full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            at = d == k
            if at.any():
                out[k - 1] = at_distance(hits, at)
        return out
    return accuracy_by_distance


def reach_with(xl):
    """Notebook 05's reach (Exercise 1) with the XL reach `xl(L, M, i)` (right: L * M + i)."""
    def reach(memory, n_layers, span, position=0):
        if memory == "window":
            return n_layers * span
        if memory == "XL":
            return xl(n_layers, span, position)
        return math.inf
    return reach
