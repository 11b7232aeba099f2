"""Review 71 of the package, each test written failing first."""

import pytest
import torch

from labnn.transformer import TransformerConfig, TransformerLM
from test_host_sync import count_reads  # noqa: F401 (a fixture)
from test_review69_pkg import MODELS, SIZE, V, ids  # the same four models and corpus

# torch ops whose output size depends on the data (a boolean index is `nonzero`): on a GPU
# each waits for the device. (The reads of values, `aten::_local_scalar_dense`, are not
# counted here: on a CPU the optimizer reads its host step counts so, at every step;
# tests/test_review70_pkg.py counts the Python reads of device tensors.)
SYNCING = ("aten::nonzero", "aten::masked_select")


def syncing_ops(fn) -> int:
    """How many times `fn` ran an op of `SYNCING` (torch's profiler, on the CPU)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key in SYNCING)


# 1. train_on_programs: no boolean index of the logits per step

def test_train_on_programs_waits_for_the_device_at_no_step():
    """The loss was `cross_entropy(logits[mask], y[mask])`: a boolean index, whose output
    size depends on the data, is a synchronisation per step on a GPU (`nonzero`)."""
    from labnn.data.programs import program_task
    from labnn.training.tasks import train_on_programs

    train, test, tok = program_task(n_train=64, n_test=16, n_statements=3, seed=0)

    def syncs(iters):
        torch.manual_seed(0)
        model = TransformerLM(TransformerConfig(tok.vocab_size, seq_len=64, **SIZE))
        return syncing_ops(lambda: train_on_programs(model, train, test, iters=iters,
                                                     batch_size=4, eval_programs=16))

    few, many = syncs(3), syncs(12)
    assert many == few, f"{few} data-sized ops in 3 steps, {many} in 12"


def test_the_program_loss_is_the_mean_over_the_printed_values():
    """The same loss and gradient as the boolean index's (the printed values only)."""
    from labnn.data.programs import program_task
    from labnn.training.tasks import program_loss

    train, _, tok = program_task(n_train=8, n_test=4, n_statements=3, seed=0)
    logits = torch.randn(*train.x.shape, tok.vocab_size, requires_grad=True)
    want = torch.nn.functional.cross_entropy(logits[train.mask], train.y[train.mask])
    got = program_loss(logits, train.y, train.mask)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, logits)[0],
                               torch.autograd.grad(want, logits)[0], rtol=0, atol=0)
