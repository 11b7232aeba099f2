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


# 2. a model call checks its ids' type and shape once

@pytest.fixture
def token_checks(monkeypatch):
    """Calls of `check_tokens`, from every model module that imports it."""
    import importlib

    from labnn.nn import arguments

    calls = []
    original = arguments.check_tokens

    def counted(*args, **kwargs):
        calls.append(kwargs.get("scan", True))
        return original(*args, **kwargs)

    for module in ("labnn.transformer", "labnn.feedback.base", "labnn.feedback.model",
                   "labnn.feedback.kv", "labnn.xl.model", "labnn.compiled.decoding"):
        monkeypatch.setattr(importlib.import_module(module), "check_tokens", counted)
    return calls


@pytest.mark.parametrize("name", ["transformer", "feedback", "kv"])
def test_a_model_call_checks_its_ids_once(name, token_checks):
    """`forward` checked the ids (`check_tokens`, with the scan of their range), then
    `forward_checked_ids` checked their type and shape again, and `TransformerLM`'s
    `check_cache` a third time: each check now runs once per call."""
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x = ids()[:16].view(2, 8)
    _, state = model(x[:, :4], **({"use_cache": True} if name == "transformer" else {}))
    assert token_checks == [True]
    token_checks.clear()
    model(x[:, 4:], state)
    assert token_checks == [True]
    token_checks.clear()
    model.forward_checked_ids(x[:, 4:], state)
    assert token_checks == [False]


@pytest.mark.parametrize("name", ["transformer", "feedback", "kv"])
def test_a_model_call_still_names_bad_ids(name):
    model = MODELS[name]()
    for call in (model, model.forward_checked_ids):
        with pytest.raises(TypeError, match="tokens must hold integer token ids"):
            call(torch.zeros(2, 3))
        with pytest.raises(ValueError, match=r"tokens must have 2 dimensions, got shape \[3\]"):
            call(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens contains id 11, outside the vocabulary"):
        model(torch.tensor([[1, V]]))


def test_the_trainer_and_the_batching_word_a_corpus_of_the_wrong_kind_alike():
    """The Trainer's `check_ids` said `got int64 [2, 300]`, batching's `check_id_tensor`
    (`evaluate`, `random_batch`) `got torch.int64 [2, 300]`: one check, one wording now."""
    from labnn.data.batching import random_batch
    from labnn.training import TrainConfig, Trainer
    from labnn.training.evaluate import evaluate

    config = TrainConfig(batch_size=2, seq_len=8, device="cpu", show_progress=False)
    for bad, got in ((ids().view(2, 300), r"torch.int64 \[2, 300\]"),
                     (ids().float(), r"torch.float32 \[600\]"), (ids().tolist(), "list")):
        with pytest.raises(TypeError, match=rf"^train_ids must be a 1-D integer tensor, "
                                            rf"got {got}$"):
            Trainer(MODELS["xl"](), bad, ids(), config)
        for call in (lambda: evaluate(MODELS["xl"](), bad, config),
                     lambda: random_batch(bad, 2, 8)):
            with pytest.raises(TypeError, match=rf"^ids must be a 1-D integer tensor, "
                                                rf"got {got}$"):
                call()


# 3. a checkpoint path under a file; a top-k above the vocabulary

def test_fit_names_a_checkpoint_path_under_a_file_before_training(tmp_path, monkeypatch):
    from labnn.training import TrainConfig, Trainer

    (tmp_path / "a.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    config = TrainConfig(batch_size=2, seq_len=8, max_iters=3, eval_interval=100,
                         device="cpu", show_progress=False, checkpoint="a.pt/x.pt")
    trainer = Trainer(MODELS["xl"](), ids()[:400], ids()[400:], config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(NotADirectoryError, match=r"a.pt/x.pt: .*a.pt is a file, not a "
                                                 r"folder; give another path"):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_sample_says_what_a_top_k_above_the_vocabulary_does(capsys, tmp_path):
    """`--top-k 1000` of 65 characters kept all 65, as `generate(top_k=...)` documents
    (`top_k >= V` keeps all), but `--help` did not say so."""
    from labnn.cli import main
    from test_cli import TINY, cli

    path = tmp_path / "tiny.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    capsys.readouterr()
    outs = [cli(capsys, "sample", "--checkpoint", str(path), "--tokens", "20", *k)[:2]
            for k in ((), ("--top-k", "100000"))]
    assert outs[0] == outs[1] and outs[0][0] == 0
    code, out, _ = cli(capsys, "sample", "--help")
    assert "the vocabulary size or more keeps all" in " ".join(out.split())


# 4. compiled generation: the prompt scanned once, nothing read back per token

@pytest.mark.parametrize("name", ["transformer", "xl", "kv"])
def test_compiled_generation_scans_its_prompt_once(name, token_checks, count_reads):
    """`compiled.generate` checked the prompt's ids at its door, then read the prompt
    through the model's public `forward` (or XL's `step`), which scanned them again: two
    reads back to the host where one does."""
    from labnn import compiled

    torch.manual_seed(0)
    model = MODELS[name]().eval()
    prompt = ids()[:10].view(2, 5)
    compiled.generate(model, prompt, 4, 0.0, backend="eager")
    assert token_checks.count(True) == 1, token_checks


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", ["transformer", "transformer-band", "xl", "feedback-kv"])
def test_compiled_generation_reads_no_value_per_token_in_torch_either(name, temperature,
                                                                      count_reads):
    """The ring steps, run eagerly on a CPU (`backend="eager"`): no read back to the host
    per token, in Python (`count_reads`) or in torch (`aten::_local_scalar_dense`)."""
    from labnn import compiled
    from test_host_sync import models, native_reads

    torch.manual_seed(0)
    model = models()[name].eval()
    prompt = torch.randint(11, (2, 5), generator=torch.Generator().manual_seed(1))

    def reads(n):
        count_reads["n"] = 0
        native = native_reads(lambda: compiled.generate(
            model, prompt, n, temperature, generator=torch.Generator().manual_seed(0),
            backend="eager"))
        return count_reads["n"], native

    reads(3)  # the first call's own reads (the backend's set-up), once per process
    few, many = reads(10), reads(40)
    assert few == many, f"{name}: {few} reads (Python, torch) for 10 tokens, {many} for 40"


def test_the_float16_refusal_says_what_bfloat16_weights_lose():
    """The float16 refusal advised "convert the model to bfloat16" with no word that bfloat16
    weights (8 significant bits) lose every AdamW step under about 1/256 of the weight: at
    the warm-up's 1e-5 one step moves 20 % of a small model's weights (99 % at 1e-3). It
    now advises autocast and says what bfloat16 weights lose; the loss is measured here."""
    from labnn.training.optim import check_weight_dtype

    with pytest.raises(TypeError, match=r"torch.autocast \(bfloat16 weights train, but a step "
                                        r"under about 1/256 of a weight rounds away\)"):
        check_weight_dtype(MODELS["transformer"]().half())
    moved = {}
    for lr in (1e-5, 1e-3):
        torch.manual_seed(0)
        model = MODELS["transformer"]().bfloat16()
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        x = ids()[:64].view(4, 16)
        loss = torch.nn.functional.cross_entropy(model(x)[0].flatten(0, 1).float(),
                                                 x.roll(-1, 1).flatten())
        loss.backward()
        opt.step()
        changed = sum((p != b).sum().item() for p, b in zip(model.parameters(), before))
        moved[lr] = changed / sum(b.numel() for b in before)
    assert moved[1e-5] < 0.5 < moved[1e-3], moved  # most of the small steps rounded away
