"""Review 64 of labnn.feedback: the fused loop gave zero gradients where the autograd loop
and the reference model leave a parameter's `.grad` None, the parameter playing no part
in the outputs. AdamW decays and moves a parameter with a zero gradient and skips one
with None: `kv.weight` then trained differently with `block_len=1`."""

import pytest
import torch

from labnn.feedback import (FeedbackConfig, FeedbackKVConfig, FeedbackTransformer,
                            FeedbackTransformerKV)
from labnn.training.optim import param_groups

V = 11


def without_grad(model, x, state):
    model.train()
    model(x, state)[0].square().sum().backward()
    return sorted(n for n, p in model.named_parameters() if p.grad is None)


def models(block_len):
    torch.manual_seed(0)
    ref = FeedbackTransformer(FeedbackConfig(V, d_model=8, n_heads=2, n_layers=2,
                                             block_len=block_len, shared_kv=True))
    out = {"reference": ref}
    for loop in ("autograd", "fused"):
        out[loop] = FeedbackTransformerKV(FeedbackKVConfig(
            V, d_model=8, n_heads=2, n_layers=2, block_len=block_len, loop=loop))
        out[loop].load_state_dict(ref.state_dict())
    return out


@pytest.mark.parametrize("block_len, t, carried", [(1, 4, True), (1, 4, False),
                                                   (None, 1, True), (None, 1, False),
                                                   (2, 5, False)])
def test_fused_loop_leaves_the_same_grads_none(block_len, t, carried):
    torch.manual_seed(1)
    x, prompt = torch.randint(0, V, (2, t)), torch.randint(0, V, (2, 3))
    found = {}
    for name, model in models(block_len).items():
        state = model.eval()(prompt)[1] if carried else None
        found[name] = without_grad(model, x, state)
    assert found["fused"] == found["autograd"] == found["reference"]


def test_block_len_1_trains_kv_alike_in_both_loops():
    trained = {}
    for name, model in models(1).items():
        if name == "reference":
            continue
        opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-2)
        x = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(2))
        model.train()
        for _ in range(5):
            opt.zero_grad()
            model(x)[0].sum().backward()
            opt.step()
        trained[name] = model.kv.weight.detach()
    # the fused loop's zero gradients decayed kv.weight by 2.8e-4 in 5 steps
    torch.testing.assert_close(trained["fused"], trained["autograd"], rtol=0, atol=1e-6)
