"""The Feedback Transformer's three ways through its tokens, whole models in float64 (see
test_equivalences64): the naive token loop (`FeedbackTransformer(shared_kv=True)`), the
KV model's fused loop and its autograd loop agree in logits, state and gradients, over
a carried state, in every window and block; and a call whose blocks are one token long
is the same as one call per token, gradients included (test_feedback_kv compares the
models in float32, test_feedback_loop one block in float64)."""

from __future__ import annotations

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from test_equivalences64 import SIZES, V, tokens, weighted

CASES = [dict(), dict(attn_len=3), dict(block_len=2), dict(attn_len=2, block_len=3),
         dict(n_layers=1, attn_len=1)]


def three(**overrides):
    """The naive model and the KV model with the fused and the autograd loop, sharing
    one set of random float64 weights (mix logits and relative biases included)."""
    torch.manual_seed(0)
    config = {**SIZES, "d_ff": 16, "max_distance": 4, **overrides}
    naive = FeedbackTransformer(FeedbackConfig(**config, shared_kv=True)).double()
    with torch.no_grad():
        for p in naive.parameters():
            p.add_(0.3 * torch.randn_like(p))
    models = [naive]
    for loop in ("fused", "autograd"):
        kv = FeedbackTransformerKV(FeedbackKVConfig(**config, loop=loop)).double()
        kv.load_state_dict(naive.state_dict())
        models.append(kv)
    return models


def run(model, calls):
    """Each token tensor of `calls` after the other, the state carried: the logits of
    every call, the last state, and the gradients of a loss weighing every logit."""
    state, outs = None, []
    for x in calls:
        logits, state = model(x, state)
        outs.append(logits)
    loss = sum(weighted(out, i) for i, out in enumerate(outs))
    return outs, state, grads_of(loss, model)


def grads_of(loss, model) -> list[torch.Tensor]:
    """Each parameter's gradient; zeros for one the loss does not reach (with blocks of
    one token the memory's projection reaches no later token)."""
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def kv_of(state) -> torch.Tensor:
    return (KVState.from_feedback(state) if not isinstance(state, KVState) else state).kv


def assert_same(got, want, names):
    (outs, state, grads), (want_outs, want_state, want_grads) = got, want
    for out, w in zip(outs, want_outs):
        torch.testing.assert_close(out, w, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(kv_of(state), kv_of(want_state), rtol=1e-10, atol=1e-10)
    for name, g, w in zip(names, grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10,
                                   msg=lambda text: f"{name}: {text}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_token_loop_fused_loop_and_autograd_loop_agree_in_float64(case):
    models = three(**case)
    calls = [tokens(2, 5, 1), tokens(2, 4, 2)]
    names = list(dict(models[0].named_parameters()))
    want = run(models[0].train(), calls)  # dropout is 0: train mode runs the training loops
    for model in models[1:]:
        assert_same(run(model.train(), calls), want, names)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["token-loop", "fused", "autograd"])
@pytest.mark.parametrize("attn_len", [None, 2])
def test_blocks_of_one_token_are_one_call_per_token(which, attn_len):
    """`block_len=1` detaches the memory after every token, as a call per token does:
    logits, state and gradients agree."""
    model = three(block_len=1, attn_len=attn_len)[which].train()
    x = tokens(2, 6, 3)
    names = list(dict(model.named_parameters()))
    whole = run(model, [x])
    state, outs = None, []
    for t in range(x.size(1)):
        logits, state = model(x[:, t : t + 1], state)
        outs.append(logits)
    loss = weighted(torch.cat(outs, 1), 0)
    grads = grads_of(loss, model)
    assert_same(([torch.cat(outs, 1)], state, grads), whole, names)


@pytest.mark.parametrize("which", [0, 1], ids=["token-loop", "fused"])
def test_step_by_step_decoding_equals_the_training_forward(which):
    """`step` (no graph, eval mode) token after token == one forward over the tokens."""
    model = three(attn_len=3)[which].eval()
    x = tokens(2, 7, 4)
    with torch.no_grad():
        full, full_state = model(x)
    state, got = None, []
    for t in range(x.size(1)):
        logits, state = model.step(x[:, t], state)
        got.append(logits)
    torch.testing.assert_close(torch.stack(got, 1), full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(kv_of(state), kv_of(full_state), rtol=1e-10, atol=1e-10)
    assert V == full.size(-1)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack_extend_then_push_passes_gradcheck_in_every_dim(dim):
    """`_Append` both ways (`extend`: k steps, `push`: one) against finite differences,
    the stack read after every append (test_stack gradchecks `push` alone)."""
    from labnn.feedback.stack import Stack

    gen = torch.Generator().manual_seed(0)
    prefix = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    values = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    prefix = prefix.movedim(1, dim).detach().requires_grad_()

    def appended(prefix, values):
        stack = Stack(6, values[0], dim=dim)
        reads = [stack.extend(prefix)]
        for v in values:  # each step reads the stack so far, then pushes its own
            w = reads[-1].sum(dim).tanh()
            reads.append(stack.push(v * w))
        return tuple(r.sum(dim) * (i + 1) for i, r in enumerate(reads)) + (reads[-1],)

    assert torch.autograd.gradcheck(appended, (prefix, values))
