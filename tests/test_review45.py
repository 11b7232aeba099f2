"""Review 45: silent wrong results and lost data, each test naming the bug it pins."""

from __future__ import annotations

import pytest
import torch

from labnn.training.trainer import TrainConfig, Trainer
from labnn.xl.model import TransformerXL, XLConfig


def _xl():
    torch.manual_seed(0)
    return TransformerXL(XLConfig(vocab_size=13, d_model=16, n_heads=2, n_layers=1, mem_len=8))


def _ids():
    ids = torch.randint(0, 13, (40,), generator=torch.Generator().manual_seed(0)).repeat(20)
    return ids[:600], ids[600:]


def _config(path, device="cpu", **kw):
    base = dict(max_iters=6, batch_size=2, seq_len=8, warmup_iters=2, eval_interval=3,
                eval_iters=1, stream=True, device=device, show_progress=False,
                checkpoint=str(path))
    return TrainConfig(**{**base, **kw})


def test_resume_reads_the_checkpoint_on_the_cpu_whatever_the_training_device(tmp_path):
    """Bug: `Trainer.load` read the checkpoint with `map_location=self.device`, which puts
    the saved RNG states on the training device; `torch.set_rng_state` and
    `Generator.set_state` take CPU tensors only ("RNG state must be a torch.ByteTensor"),
    so resuming any run on a GPU failed. Here the meta device stands in for the GPU:
    `torch.load(map_location=meta)` moves every tensor off the CPU, as CUDA's would. The
    carried state must still end up on the training device."""
    tr, va = _ids()
    path = tmp_path / "a.pt"
    Trainer(_xl(), tr, va, _config(path, max_iters=3)).fit()
    resumed = Trainer(_xl(), tr, va, _config(path))
    resumed.device = torch.device("meta")  # as if training on an accelerator
    resumed.load(path)
    assert resumed.iter == 3
    assert all(m.device.type == "meta" for m in resumed.state)  # the carried state moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_run_resumed_on_a_gpu_continues_exactly(tmp_path):
    """The same bug on a real GPU: a resumed run equals the uninterrupted one."""
    tr, va = _ids()
    straight = Trainer(_xl(), tr, va, _config(tmp_path / "s.pt", "cuda")).fit()
    path = tmp_path / "a.pt"
    Trainer(_xl(), tr, va, _config(path, "cuda", max_iters=3)).fit()
    resumed = Trainer(_xl(), tr, va, _config(path, "cuda"))
    assert resumed.fit(resume=True)["val_loss"] == straight["val_loss"]
    assert all(m.device.type == "cuda" for m in resumed.state)


@pytest.mark.parametrize("kind", ["transformer", "feedback-kv", "learned-long"])
def test_compiled_generation_of_no_token_returns_the_prompt(kind):
    """Bug: `compiled.generate(model, prompt, 0)` with a one-token prompt raised
    "n must be a positive int, got 0" (`ring_slots` bucketed `T0 + n - 1 = 0`
    positions), and a learned-position prompt longer than `seq_len` was refused although
    no ring is read; `model.generate(prompt, 0)` returns the prompt, and so does
    `python -m labnn sample --compile --tokens 0`'s check. n = 0 is valid everywhere
    else."""
    from labnn import compiled
    from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
    from labnn.transformer import TransformerConfig, TransformerLM

    torch.manual_seed(0)
    sizes = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1)
    t0 = 1
    if kind == "feedback-kv":
        model = FeedbackTransformerKV(FeedbackKVConfig(**sizes))
    else:
        model = TransformerLM(TransformerConfig(seq_len=8, **sizes))
        t0 = 10 if kind == "learned-long" else 1
    prompt = torch.randint(0, 11, (2, t0))
    model.eval()
    assert torch.equal(model.generate(prompt, 0), prompt)
    assert torch.equal(compiled.generate(model, prompt, 0, backend="eager"), prompt)


def test_weight_decay_falls_on_the_parameters_its_docstring_names():
    """`TrainConfig.weight_decay` said "not to biases, norms or position tables" while
    `param_groups` decays every parameter of two or more dimensions, learned position
    tables, XL's u and v and the relative-bias tables among them (as nanoGPT, whose rule
    it is). The docstring now names them; vectors (biases, norms) are never decayed."""
    from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
    from labnn.training.config import TrainConfig
    from labnn.training.optim import param_groups
    from labnn.transformer import TransformerConfig, TransformerLM

    doc = " ".join(TrainConfig.__doc__.split())
    assert "learned positions, XL's $u$ and $v$, relative-bias tables" in doc
    assert "never of vectors (biases, norms)" in doc
    sizes = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1)
    for model in (TransformerLM(TransformerConfig(**sizes)), TransformerXL(XLConfig(**sizes)),
                  FeedbackTransformer(FeedbackConfig(**sizes))):
        decay, keep = (
            {id(p) for p in group["params"]} for group in param_groups(model, 0.1))
        for name, p in model.named_parameters():
            assert (id(p) in decay) == (p.dim() >= 2) and (id(p) in keep) == (p.dim() < 2), name
        tables = [n for n, p in model.named_parameters() if id(p) in decay and (
            "pos_emb" in n or "content_bias" in n or "position_bias" in n or "rel" in n)]
        assert tables or isinstance(model, TransformerLM) and model.pos_emb is None, tables
