"""`FeedbackTransformerKV` == `FeedbackTransformer(shared_kv=True)` with the same
weights (outputs, gradients, state), in every usage that breaks the naive stack trick;
decoding, cache size and bad input."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.feedback.stack import ListStack
from labnn.transformer import TransformerConfig, TransformerLM

V = 13
BASE = dict(vocab_size=V, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_distance=4)
CASES = [  # (model config, loop and stacking variant)
    dict(),  # the fused loop (default)
    dict(attn_len=3),
    dict(attn_len=3, block_len=4),
    dict(block_len=3),
    dict(n_layers=1, attn_len=1),
    dict(loop="autograd", stack="buffer"),
    dict(loop="autograd", stack="torch"),
    dict(loop="autograd", stack="buffer", batch_grads=False),
    dict(loop="autograd", attn_len=3, stack="buffer"),
    dict(loop="autograd", attn_len=3, block_len=4, stack="buffer"),
    dict(loop="autograd", attn_len=3, block_len=4, stack="torch", batch_grads=False),
    dict(loop="autograd", block_len=3, stack="buffer"),
    dict(loop="autograd", n_layers=1, attn_len=1, stack="buffer"),
]
LOOPS = [dict(), dict(loop="autograd")]


class Baseline(FeedbackTransformerKV):
    """The autograd loop with the comparison switches of the benchmarks: keys/values
    stacked with `torch.stack` (`stack="torch"`: `ListStack`) and/or each linear map
    applied per step (`batch_grads=False`: per-step weight gradients, twice
    differentiable)."""

    def __init__(self, config, stack="buffer", batch_grads=True):
        super().__init__(config)
        self.stack, self.batch_grads = stack, batch_grads

    def make_stack(self, capacity, like):
        if self.stack == "torch":
            return ListStack(capacity, like, dim=3)
        return super().make_stack(capacity, like)

    def block_linear(self, linear, steps, like):
        return super().block_linear(linear, steps, like) if self.batch_grads else linear


def kv_model(
    config: dict, stack: str | None = None, batch_grads: bool | None = None, **loop
) -> FeedbackTransformerKV:
    """`FeedbackTransformerKV`, or the `Baseline` when a comparison switch is given."""
    switches = {
        k: v
        for k, v in dict(stack=stack, batch_grads=batch_grads).items()
        if v is not None
    }
    config = FeedbackKVConfig(**config, **loop)
    return Baseline(config, **switches) if switches else FeedbackTransformerKV(config)


def pair(
    seed: int = 0, device="cpu", dtype=torch.float32, **overrides
) -> tuple[FeedbackTransformer, FeedbackTransformerKV]:
    """The naive model and the KV model with copied weights (non-zero mix logits and
    relative biases)."""
    variant = {
        k: overrides.pop(k) for k in ("loop", "stack", "batch_grads") if k in overrides
    }
    torch.manual_seed(seed)
    config = {**BASE, **overrides}
    naive = FeedbackTransformer(FeedbackConfig(**config, shared_kv=True))
    with torch.no_grad():
        naive.mix.logits.normal_(0, 0.5)
        for layer in naive.layers:
            layer.attn.rel.bias.normal_(0, 0.5)
    kv = kv_model(config, **variant)
    kv.load_state_dict(naive.state_dict())
    return naive.to(device, dtype), kv.to(device, dtype)


def tokens(b: int = 3, t: int = 10, seed: int = 1, device="cpu") -> torch.Tensor:
    return torch.randint(
        0, V, (b, t), generator=torch.Generator().manual_seed(seed)
    ).to(device)


def grads(model, loss) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, list(model.parameters())))


def assert_grads_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def weighted(logits: torch.Tensor) -> torch.Tensor:
    """A loss that weighs every position and logit differently."""
    w = torch.linspace(
        -1, 1, logits.numel(), dtype=logits.dtype, device=logits.device
    ).view_as(logits)
    return (logits * w).sum()


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())
)
def test_same_outputs_gradients_and_state_as_the_naive_model(case, device):
    naive, kv = pair(device=device, **case)
    x = tokens(device=device)
    want, want_state = naive(x)
    got, state = kv(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        state.kv, KVState.from_feedback(want_state).kv, atol=1e-5, rtol=1e-5
    )
    assert state.offset == want_state.offset == 10 and not state.kv.requires_grad
    more = tokens(t=7, seed=2, device=device)  # a second call continuing from the state
    want2, _ = naive(more, want_state)
    got2, _ = kv(more, state)
    torch.testing.assert_close(got2, want2, atol=1e-5, rtol=1e-5)
    assert_grads_close(
        grads(kv, weighted(got) + weighted(got2)),
        grads(naive, weighted(want) + weighted(want2)),
    )


def test_state_dicts_load_both_ways():
    naive, kv = pair()
    assert list(kv.state_dict()) == list(naive.state_dict())
    naive.load_state_dict(kv.state_dict(), strict=True)


def test_state_from_the_naive_model_continues_the_same():
    naive, kv = pair(attn_len=4)
    x, more = tokens(), tokens(t=5, seed=3)
    _, naive_state = naive(x)
    want, _ = naive(more, naive_state)
    got, _ = kv(more, KVState.from_feedback(naive_state))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_step_equals_forward_and_generation_matches():
    naive, kv = pair(attn_len=4)
    kv.eval()
    x = tokens()
    want, _ = kv(x)
    state, got = None, []
    for t in range(x.size(1)):
        logits, state = kv.step(x[:, t], state)
        got.append(logits)
    torch.testing.assert_close(torch.stack(got, 1), want, atol=1e-6, rtol=1e-5)
    prompt = x[:, :3]
    cached = kv.generate(prompt, 8, temperature=0)
    torch.testing.assert_close(
        cached, kv.generate(prompt, 8, temperature=0, use_cache=False)
    )
    torch.testing.assert_close(cached, naive.eval().generate(prompt, 8, temperature=0))


def test_cache_is_n_layers_times_smaller_than_a_transformers():
    _, kv = pair(n_layers=4)
    lm = TransformerLM(
        TransformerConfig(vocab_size=V, d_model=16, n_heads=2, n_layers=4, seq_len=32)
    )
    x = tokens(b=2, t=20)
    _, state = kv(x)
    _, cache = lm(x, use_cache=True)
    lm_bytes = sum(t.numel() * t.element_size() for layer in cache for t in layer)
    assert state.nbytes() == 2 * 2 * 20 * 16 * 4
    assert lm_bytes == 4 * state.nbytes()


@pytest.mark.parametrize("loop", LOOPS, ids=["fused", "autograd"])
def test_two_forwards_before_their_backwards_and_no_grad_forward_between(loop):
    naive, kv = pair(attn_len=3, **loop)
    x1, x2 = tokens(seed=4), tokens(b=2, seed=5)
    out1, out2 = kv(x1)[0], kv(x2)[0]
    with torch.no_grad():  # sampling in between
        kv(tokens(b=5, seed=6))
    got2, got1 = grads(kv, weighted(out2)), grads(kv, weighted(out1))
    assert_grads_close(got1, grads(naive, weighted(naive(x1)[0])))
    assert_grads_close(got2, grads(naive, weighted(naive(x2)[0])))


@pytest.mark.parametrize("loop", LOOPS, ids=["fused", "autograd"])
def test_backward_retain_graph_twice_and_partial_autograd_grad(loop):
    naive, kv = pair(**loop)
    x = tokens()
    out = kv(x)[0]
    loss = weighted(out)
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    want = grads(naive, weighted(naive(x)[0]))
    assert_grads_close([p.grad for p in kv.parameters()], [2 * w for w in want])
    early = torch.autograd.grad(
        weighted(out[:, :4]), list(kv.parameters()), allow_unused=True
    )
    want_early = torch.autograd.grad(
        weighted(naive(x)[0][:, :4]), list(naive.parameters()), allow_unused=True
    )
    for g, w in zip(early, want_early):
        assert (g is None) == (w is None) or torch.count_nonzero(
            g if g is not None else w
        ) == 0
        if g is not None and w is not None:
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("loop", LOOPS, ids=["fused", "autograd"])
def test_batch_size_and_dtype_may_change_between_calls(loop):
    naive, kv = pair(**loop)
    x1, x2 = tokens(b=3), tokens(b=1, seed=7)
    out1 = kv(x1)[0]
    kv64, naive64 = copy.deepcopy(kv).double(), copy.deepcopy(naive).double()
    out2 = kv64(x2)[0]
    assert out2.dtype == torch.float64
    assert_grads_close(
        grads(kv64, weighted(out2)), grads(naive64, weighted(naive64(x2)[0]))
    )
    # the float32 graph still backpropagates (through its own buffers)
    out1.sum().backward()


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(loop="autograd"), dict(loop="autograd", batch_grads=False)],
    ids=["fused", "autograd", "autograd-unbatched"],
)
def test_gradcheck_float64(variant):
    # one block: block boundaries detach the memory on purpose, which finite differences
    # would see
    _, kv = pair(dtype=torch.float64, attn_len=3, d_model=4, d_ff=4, **variant)
    names = [
        "kv.weight",
        "layers.1.attn.q.weight",
        "layers.0.ff.up.weight",
        "mix.logits",
        "layers.0.attn.rel.bias",
        "norm_mem.weight",
        "layers.1.norm_attn.bias",
        "layers.0.norm_ff.weight",
        "layers.1.ff.down.bias",
        "layers.0.attn.out_proj.weight",
    ]
    params = dict(kv.named_parameters())
    x = tokens(b=2, t=5)

    def f(*values):
        out, _ = torch.func.functional_call(
            kv, {**params, **dict(zip(names, values))}, (x,)
        )
        return out

    inputs = tuple(params[n].detach().clone().requires_grad_() for n in names)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("loop", ["fused", "autograd"])
def test_double_backward_is_a_clear_error_with_batched_weight_gradients(loop):
    _, kv = pair(loop=loop)
    loss = weighted(kv(tokens())[0])
    (g,) = torch.autograd.grad(
        loss, [kv.kv.weight], create_graph=False, retain_graph=True
    )
    with pytest.raises(RuntimeError, match="double backward.*block_linear returns the nn.Linear"):
        torch.autograd.grad(loss, [kv.kv.weight], create_graph=True)


def test_fused_loop_trains_with_dropout_through_the_autograd_loop():
    _, kv = pair(dropout=0.1)
    kv.train()
    torch.manual_seed(0)
    fused = kv(tokens())[0]
    kv.config = dataclasses.replace(kv.config, loop="autograd")  # read at each call
    torch.manual_seed(0)
    torch.testing.assert_close(fused, kv(tokens())[0], rtol=0, atol=0)


def test_fused_loop_without_gradients_keeps_no_activations():
    _, kv = pair()
    with torch.no_grad():
        got, state = kv(tokens())
    want, want_state = pair(loop="autograd")[1](tokens())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state.kv, want_state.kv, atol=1e-5, rtol=1e-5)
    assert got.grad_fn is None


def test_longer_than_512_tokens():
    _, kv = pair(n_layers=1, d_model=8, d_ff=8)
    with torch.no_grad():  # gradients over long stacks: tests/test_stack.py
        out, state = kv(tokens(b=1, t=520))
    assert out.shape == (1, 520, V) and state.kv.size(3) == 520


def test_bad_input_errors():
    with pytest.raises(ValueError, match="shared_kv must be True"):
        FeedbackKVConfig(**BASE, shared_kv=False)
    with pytest.raises(
        ValueError,
        match=r"loop must be one of \('fused', "
        r"'autograd'\), got 'manual'",
    ):
        FeedbackKVConfig(**BASE, loop="manual")
    with pytest.raises(TypeError, match="config must be a FeedbackKVConfig"):
        FeedbackTransformerKV(FeedbackConfig(**BASE, shared_kv=True))
    naive, kv = pair()
    _, naive_state = naive(tokens())
    with pytest.raises(TypeError, match="KVState.from_feedback"):
        kv(tokens(), naive_state)
    _, state = kv(tokens(b=3))
    with pytest.raises(ValueError, match="batch size 2"):
        kv(tokens(b=2), state)
    with pytest.raises(ValueError, match="float64"):
        kv(tokens(), KVState(state.kv.double(), state.offset))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        kv(torch.full((1, 3), V))


@pytest.mark.parametrize("trainable", ["mix.logits", "norm_mem", "kv.", "head."])
def test_fused_loop_gradients_when_only_the_mix_memory_norm_or_kv_projection_trains(
    trainable,
):
    """The fused loop must keep its activations whenever ANY of its inputs requires grad
    (issue 12: the backward raised AttributeError 'spec' when only these did)."""
    models = [pair(attn_len=3)[1], pair(loop="autograd", attn_len=3)[1]]
    for model in models:
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith(trainable))
    x = tokens()
    params = [[p for p in m.parameters() if p.requires_grad] for m in models]
    got, want = (
        torch.autograd.grad(weighted(m(x)[0]), ps) for m, ps in zip(models, params)
    )
    assert len(got) == len(want) > 0
    assert_grads_close(got, want)


# ---------------------------------------------------------------- autocast (issue 29)

def autocast_training_step(model, x):
    """Two blocks and two calls under `torch.autocast('cpu', bfloat16)`, the second from the
    first's state; returns the loss, the states and the parameters' gradients."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, state = model(x[:, :5])
        logits, state2 = model(x[:, 5:], state)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                 x[:, 5:].flatten())
    loss.backward()
    return loss, (state, state2), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("overrides", [dict(), dict(loop="autograd"), dict(dropout=0.1),
                                       dict(loop="autograd", attn_len=3, block_len=2)],
                         ids=["fused", "autograd", "fused-dropout", "autograd-window"])
def test_a_training_step_under_autocast_bfloat16(overrides):
    """Under autocast the state holds autocast's dtype: it was refused ("state holds
    torch.bfloat16 ... but the model is torch.float32"), and the autograd loop's stacks
    refused the step's own values ("value has dtype torch.bfloat16, but this stack holds
    torch.float32")."""
    _, kv = pair(**overrides)
    kv.train()
    loss, states, grads_ = autocast_training_step(kv, tokens(t=10))
    assert torch.isfinite(loss)
    assert all(g is not None and torch.isfinite(g).all() for g in grads_)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # either state, and decoding
        kv.eval()(tokens(t=2), states[1])
        kv.generate(tokens(t=2), 3)
    if states[1].kv.dtype == torch.bfloat16:
        with pytest.raises(ValueError, match=r"state.kv is torch.bfloat16.*made under "
                                             r"torch.autocast"):
            kv(tokens(t=2), states[1])  # outside autocast


def test_a_layer_left_in_training_mode_gets_its_dropout_in_both_models():
    """Each module's own mode decides its dropout (as in `nn.Module`): with the model in eval
    mode and one layer in training mode, the naive model applied that layer's dropout and the
    fused loop (taken because the model was in eval mode) silently did not."""
    naive, kv = pair(dropout=0.5)
    naive.eval().layers[0].train()
    kv.eval().layers[0].train()
    with torch.no_grad():
        torch.manual_seed(1)
        want = naive(tokens())[0]
        torch.manual_seed(1)
        got = kv(tokens())[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
