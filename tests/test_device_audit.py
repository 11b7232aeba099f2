"""The device audit (`LABNN_DEVICE=audit`) fails on the CPU where a GPU run would fail:
a model left on the CPU while its data is on `device` (notebook 05's first CUDA run)."""

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

PRELUDE = """
import torch
from labnn.training.trainer import pick_device
from labnn.xl.model import TransformerXL, XLConfig
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
device = pick_device()
print(device)
"""


def run(body: str) -> subprocess.CompletedProcess:
    """Run `body` after the prelude in a fresh interpreter with LABNN_DEVICE=audit (the
    audit lasts for the process, as in a notebook's kernel)."""
    code = PRELUDE + textwrap.dedent(body)
    env = {"LABNN_DEVICE": "audit", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


def test_the_notebook_05_mistake_fails_on_the_cpu():
    # build() returned TransformerXL(...) without .to(device); the data was on device
    result = run("""
        model = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=1))
        x = torch.randint(11, (2, 8), device=device)
        model(x)
    """)
    assert result.returncode != 0
    assert "tokens is on cpu:0, but the model is on cpu" in result.stderr


def test_a_tensor_left_on_the_host_fails_like_cuda():
    result = run("""
        a = torch.randn(3, device=device)
        b = torch.randn(3)
        a + b
    """)
    assert "Expected all tensors to be on the same device" in result.stderr


@pytest.mark.parametrize("body", [
    # everything moved: a training step and generation, as the notebooks do them
    """
    model = TransformerLM(TransformerConfig(11, seq_len=16, d_model=16, n_heads=2,
                                            n_layers=1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(11, (2, 9)).to(device)
    logits, _ = model(x[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
    loss.backward(); opt.step()
    print(loss.item(), model.eval().generate(x[:, :2], 3).cpu().numpy().shape)
    """,
    """
    model = FeedbackTransformerKV(FeedbackKVConfig(11, d_model=16, n_heads=2,
                                                   n_layers=1)).to(device)
    x = torch.randint(11, (2, 9), device=device)
    logits, state = model(x)
    logits.sum().backward()
    xl = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=1)).to(device)
    out, mems = xl(x)
    out.sum().backward()
    print(xl.eval().generate(x[:, :2], 3).tolist())
    """,
    # compiled generation, every model with a ring: torch.compile cannot keep the audit's
    # labels (every compiled step mixed "devices"), so its steps run eagerly under it
    """
    from labnn import compiled
    size = dict(d_model=16, n_heads=2, n_layers=2)
    x = torch.randint(11, (2, 4), device=device)
    for model in (TransformerLM(TransformerConfig(11, seq_len=16, **size)),
                  TransformerXL(XLConfig(11, mem_len=4, **size)),
                  FeedbackTransformerKV(FeedbackKVConfig(11, attn_len=4, **size))):
        model = model.to(device).eval()
        got = compiled.generate(model, x, 6, temperature=0)
        assert torch.equal(got, model.generate(x, 6, temperature=0)), type(model).__name__
    """,
    # nothing moved at all: plain CPU work is still fine under the audit
    """
    model = TransformerLM(TransformerConfig(11, seq_len=16, d_model=16, n_heads=2,
                                            n_layers=1))
    print(model(torch.randint(11, (2, 5)))[0].detach().numpy().shape)
    """,
])
def test_correct_code_runs_under_the_audit(body):
    result = run(body)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("cpu:0")


def test_make_recall_works_where_its_inputs_are():
    """`labnn.data.recall.make_recall` made its row index and its position range on the
    CPU: on a GPU, inputs there failed (notebook 05's solution of the exercise, the same
    code, too)."""
    result = run("""
        from labnn.data.recall import make_recall
        filler = torch.randint(3, 9, (2, 6)).to(device)
        x, y = make_recall(filler, torch.tensor([1, 2]).to(device),
                           torch.tensor([0, 3]).to(device))
        print(x.tolist(), y.tolist())
    """)
    assert result.returncode == 0, result.stderr[-1500:]


@pytest.mark.parametrize("line", ["ids[offsets]", "host[offsets] = 1"])
def test_a_host_tensor_indexed_by_accelerator_indices_fails_like_cuda(line):
    """CUDA refuses to index a CPU tensor with GPU indices ("indices should be either on
    cpu or on the same device as the indexed tensor"); the audit let both devices meet in
    indexing, so a corpus left on the host and offsets made on `device` passed every CPU
    run. (Host indices into an accelerator tensor stay allowed, as on CUDA.)"""
    result = run(f"""
        ids, host = torch.arange(100), torch.zeros(100)
        offsets = torch.randint(0, 90, (4, 1), device=device) + torch.arange(9, device=device)
        torch.arange(100, device=device)[torch.tensor([1, 2])]  # allowed, as on CUDA
        {line}
    """)
    assert "indices should be either on cpu or on the same device as the indexed tensor" \
        in result.stderr, result.stderr[-1000:]
