"""What one generated token of Transformer-XL costs, counted rather than timed: the
checks run at the door of `step` and `generate`, not per token, and caps on the work of
the per-token path (`_step` -> `read_one_token`), so that a later change cannot make the
step slower without a test saying so.

The step on a 2-core CPU is Python- and dispatch-bound (about 150-200 ATen operations
and some hundreds of Python calls for about 0.5-0.7 ms at attention length 1,024,
`benchmarks/bench_xl.py`): each cap is the count of this code, so that any operation or
call added to every token fails here first, to be justified or removed.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import labnn
from labnn.nn.arguments import check_eval_mode
from labnn.xl import model as xl_model
from labnn.xl.model import TransformerXL, XLConfig

LABNN = os.path.dirname(labnn.__file__)
LAYERS = 4
# per generated token with 4 layers (bench_xl's model): counted on this code
ATEN_OPS_CAP = 169
LABNN_CALLS_CAP = 111


def make_model(positions: str = "relative") -> TransformerXL:
    torch.manual_seed(0)
    config = XLConfig(13, d_model=16, n_heads=2, n_layers=LAYERS, mem_len=9,
                      positions=positions)
    return TransformerXL(config).eval()


class CountOps(TorchDispatchMode):
    """Every ATen operation (views included) run inside the `with`."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def labnn_calls(fn) -> Counter:
    """The calls of labnn's own Python functions while `fn` runs (torch's are left out:
    their count changes with torch's version, labnn's only with labnn)."""
    calls = Counter()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(LABNN):
            calls[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def generation_step(model):
    """`generate`'s per-token call, each call going on from the cache the last one left
    (an ordinary step: its storage has room, so no window is copied)."""
    with torch.inference_mode():
        _, cache = model.step(torch.randint(13, (1, 5)))  # room for 10 tokens
    token = torch.randint(13, (1, 1))

    @torch.inference_mode()
    def one():
        nonlocal cache
        _, cache = model._step(token, cache, None)
    one()  # warm: nothing first-time in what is counted
    return one


@pytest.mark.parametrize("positions", ["relative", "absolute"])
def test_generation_checks_the_cache_at_the_door_not_per_token(monkeypatch, positions):
    """`_step`, `generate`'s per-token call, ran `check_cache` at every token on the cache
    it had built itself (start_cache, then each step's own): right by construction. The
    public `step` checks a cache it is given, once per call, with the same messages."""
    model = make_model(positions)
    calls = []
    checked = xl_model.check_cache
    monkeypatch.setattr(xl_model, "check_cache",
                        lambda *a: calls.append(1) or checked(*a))
    prompt = torch.randint(13, (2, 4), generator=torch.Generator().manual_seed(0))
    out = model.generate(prompt, 6, temperature=0.0)
    assert calls == []
    with torch.inference_mode():
        _, cache = model.step(prompt)
        assert calls == []  # no cache given: nothing to check
        model.step(prompt[:, -1:], cache)
        assert calls == [1]
        with pytest.raises(ValueError, match="batch size 2, but the tokens have batch size 1"):
            model.step(prompt[:1, -1:], cache)
        with pytest.raises(ValueError, match="mem_len=3 differs from the cache's 9"):
            model.step(prompt[:, -1:], cache, mem_len=3)
        with pytest.raises(TypeError, match="cache must be an XLCache"):
            model.step(prompt[:, -1:], list(cache.kv))
    # the tokens generate drew are those of step after step on the same cache
    with torch.inference_mode():
        logits, cache = model.step(prompt)
        for i in range(4, 10):
            assert torch.equal(logits.argmax(-1), out[:, i])
            logits, cache = model.step(out[:, i : i + 1], cache)


def test_one_generated_token_runs_at_most_its_count_of_aten_operations():
    """The per-token path's ATen operations, views included: 201 before this test, 169
    now (42 a layer): the keys' window was cut twice and transposed twice per layer, the
    values' cut the keys' too, and the fused projection was split by a chunk, three views
    and three transposes where one view, one transpose and the chunk do."""
    one = generation_step(make_model())
    with CountOps() as counted:
        one()
    total = sum(counted.ops.values())
    assert total <= ATEN_OPS_CAP, (total, sorted(counted.ops.items()))
    assert counted.ops["narrow"] == 4 * LAYERS  # append: keys, values; read: keys_t, values


def test_one_generated_token_makes_at_most_its_count_of_labnn_calls():
    """labnn's own Python calls per generated token: 139 before this test, 111 now
    (27 a layer): `check_cache` and its helpers ran per token, KVBuffer cut its window
    for the keys and again for the values, `project` called `split_heads` three times
    through a generator."""
    one = generation_step(make_model())
    calls = labnn_calls(one)
    assert sum(calls.values()) <= LABNN_CALLS_CAP, sorted(calls.items())
    assert "cache.py:check_cache" not in calls


def test_eval_mode_door_walks_the_modules_without_naming_them(monkeypatch):
    """`check_eval_mode`, at the door of every `step` call, walked `named_modules()`
    (54 modules of bench_xl's model, about 20 us, a twentieth of a step on a CPU) to find
    none in training mode; the names are needed only for the message."""
    model = make_model()

    def named_modules(*args, **kwargs):
        raise AssertionError("named_modules walked for a model in eval mode")

    with monkeypatch.context() as patched:
        patched.setattr(torch.nn.Module, "named_modules", named_modules)
        check_eval_mode(model, "step() is for decoding and")
        with torch.inference_mode():
            model.step(torch.randint(13, (1, 3)))
    model.blocks[2].ff.dropout.train()
    model.blocks[3].train()
    with pytest.raises(RuntimeError, match=r"submodule blocks\.2\.ff\.dropout \(Dropout\) is in "
                                           "training mode"):
        check_eval_mode(model, "generation")
    model.train()
    with pytest.raises(RuntimeError, match=r"the model \(TransformerXL\) is in training mode"):
        check_eval_mode(model, "generation")


def test_projections_split_no_tokens_too():
    """`split_heads` viewed the width as `-1` heads after this file's first change: a
    memory of no tokens (`mem_len=0`, notebook 02's claim 2) could not be viewed
    ('cannot reshape tensor of 0 elements'). The count of heads is the width's."""
    from labnn.nn.attention import MultiHeadAttention

    mha = MultiHeadAttention(16, 2)
    k, v = mha.project_kv(torch.randn(3, 0, 16))
    assert k.shape == v.shape == (3, 2, 0, 8)
    q, (k, v) = mha.project(torch.randn(0, 4, 16))
    assert q.shape == k.shape == (0, 2, 4, 8)
    model = make_model()
    logits, mems = model(torch.randint(13, (2, 3)), mem_len=0)
    logits2, _ = model(torch.randint(13, (2, 3)), mems, mem_len=0)
    assert [m.shape for m in mems] == [(2, 0, 16)] * LAYERS and logits2.shape == (2, 3, 13)
