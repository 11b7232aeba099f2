"""More equivalences every model keeps (see test_equivalences64): dropout is off in eval
mode (values and gradients equal a model without dropout), a seed fixes everything
(training steps and sampling), and a checkpoint saved by the trainer gives back the same
logits and the same next training step."""

from __future__ import annotations

import pytest
import torch

import labnn
from labnn.cli.commands import saved_model
from labnn.compiled import decoding as compiled
from labnn.data.programs import program_task
from labnn.training import checkpoint as ckpt
from labnn.training.tasks import evaluate_programs
from labnn.training.trainer import TrainConfig, Trainer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig
from test_equivalences64 import KINDS, V, build, call, step_logits, tokens, weighted

CLI_NAMES = {"transformer": "transformer", "xl": "xl", "feedback": "feedback",
             "feedback-kv": "feedback-kv"}


def with_dropout(kind: str, p: float, dtype=torch.float64):
    """The model `build(kind)` builds, with dropout `p` and the same weights."""
    model = build(kind, dtype=dtype, dropout=p)
    model.load_state_dict(build(kind, dtype=dtype).state_dict())
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_dropout_is_off_in_eval_mode_in_values_and_gradients(kind):
    plain, dropped = build(kind), with_dropout(kind, 0.5)
    x1, x2 = tokens(2, 5, 1), tokens(2, 4, 2)

    def run(model):
        out1, state = call(model, x1, None)
        out2, _ = call(model, x2, state)
        loss = weighted(out1, 0) + weighted(out2, 1)
        return out1, out2, torch.autograd.grad(loss, list(model.parameters()),
                                               allow_unused=True)

    want, got, again = run(plain), run(dropped.eval()), run(dropped)
    for w, g, a in zip(want[:2], got[:2], again[:2]):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
        assert torch.equal(g, a)
    for name, w, g in zip(dict(plain.named_parameters()), want[2], got[2]):
        if w is None:
            assert g is None, name
            continue
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10,
                                   msg=lambda text: f"{name}: {text}")
    trained, _ = call(dropped.train(), x1, None)
    assert not torch.allclose(trained, got[0])  # the dropout is there, in train mode


@pytest.mark.parametrize("kind", KINDS)
def test_eval_generation_ignores_dropout(kind):
    prompt = tokens(2, 3, 3)
    want = build(kind).generate(prompt, 6, temperature=0)
    assert torch.equal(with_dropout(kind, 0.5).generate(prompt, 6, temperature=0), want)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_changes_no_real_position_and_batching_no_score(kind):
    """Programs are padded on the right to the longest of their batch: a padded row's
    real positions keep the logits they have alone, and the printed-value accuracy is
    the same whatever the batch size (so whatever the padding)."""
    _, test, tok = program_task(1, 6, n_statements=3, seed=1)
    model = build(kind, vocab_size=tok.vocab_size)
    with torch.no_grad():
        padded, _ = call(model, test.x, None)
        lengths = (test.x != tok.pad_id).sum(1)
        for i in range(test.x.size(0)):
            n = int(lengths[i])
            alone, _ = call(model, test.x[i : i + 1, :n], None)
            torch.testing.assert_close(padded[i : i + 1, :n], alone, rtol=1e-10, atol=1e-10)
    scores = [evaluate_programs(model, test, batch_size=b) for b in (1, 4, 6)]
    assert scores == pytest.approx([scores[0]] * 3, abs=1e-12)


def seeded_run(kind: str, seed: int):
    """From `seed_everything(seed)`: build a model with dropout, take one training step,
    then sample from it with torch's global random numbers."""
    labnn.seed_everything(seed)
    model = build(kind, dtype=torch.float32, dropout=0.3)
    labnn.seed_everything(seed)  # `build` seeds torch itself: reseed for what follows
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    x = torch.randint(V, (2, 6))
    logits, _ = call(model, x[:, :-1], None)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    model.eval()
    sample = model.generate(x[:, :2], 8, temperature=1.0)
    return loss.detach(), [p.detach().clone() for p in model.parameters()], sample


@pytest.mark.parametrize("kind", ["transformer", "xl", "feedback", "feedback-kv",
                                  "feedback-kv-autograd"])
def test_a_seed_fixes_the_training_step_and_the_samples(kind):
    loss, params, sample = seeded_run(kind, 5)
    loss2, params2, sample2 = seeded_run(kind, 5)
    assert torch.equal(loss, loss2) and torch.equal(sample, sample2)
    for p, p2 in zip(params, params2):
        assert torch.equal(p, p2)
    other, _, _ = seeded_run(kind, 6)
    assert not torch.equal(other, loss)  # the seed is what fixed them


def trainer(kind: str, path) -> Trainer:
    ids = torch.randint(0, V, (30,), generator=torch.Generator().manual_seed(0)).repeat(12)
    config = TrainConfig(max_iters=4, batch_size=2, seq_len=6, warmup_iters=1,
                         eval_interval=2, eval_iters=1, stream=kind != "transformer",
                         device="cpu", show_progress=False, checkpoint=str(path))
    return Trainer(build(kind, dtype=torch.float32, dropout=0.1).train(), ids[:300],
                   ids[300:], config)


@pytest.mark.parametrize("kind", ["transformer", "xl", "feedback", "feedback-kv"])
def test_a_checkpoint_gives_the_same_logits_and_the_same_next_step(kind, tmp_path):
    path = tmp_path / "m.pt"
    first = trainer(kind, path)
    for _ in range(2):
        first.train_step()
        first.iter += 1
    first.save(path, cli_model=CLI_NAMES[kind])
    rng = torch.get_rng_state()  # what the file holds; building models below draws from it
    # what `sample` rebuilds from the file reads the model's logits, state included
    loaded = saved_model(ckpt.load(path), path).eval()
    first.model.eval()
    x = tokens(2, 5, 4)
    with torch.no_grad():
        want, state = call(first.model, x, None)
        got, loaded_state = call(loaded, x, None)
        assert torch.equal(got, want)
        if first.state is not None:  # the carried training state continues alike
            assert torch.equal(call(loaded, x, first.state)[0],
                               call(first.model, x, first.state)[0])
    first.model.train()
    # a trainer resumed from the file takes the step the first one takes next
    second = trainer(kind, path)
    torch.manual_seed(99)  # a disturbed global RNG must not matter
    second.load(path)
    loss = second.train_step()
    torch.set_rng_state(rng)
    assert torch.equal(loss, first.train_step())
    for (name, a), b in zip(first.model.named_parameters(), second.model.parameters()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kind", ["transformer", "transformer-band", "xl", "xl-absolute",
                                  "feedback-kv"])
@torch.inference_mode()
def test_the_compiled_decoder_gives_the_eager_logits_in_float64(kind):
    """Through `torch.compile` (dynamo's eager backend, on the CPU): the ring path's
    logits, token after token, are the eager cache's to 1e-12 (test_compiled compares
    the ring steps uncompiled, in float32, and compiled generation by its tokens)."""
    torch._dynamo.reset()
    model, x, t0 = build(kind), tokens(2, 12, 5), 3
    first, ring = compiled.read_prompt(model, x[:, :t0], compiled.ring_slots(model, t0, 10))
    decode = compiled.decoder(model, ring, x[:, t0 : t0 + 1], backend="eager")
    got = torch.stack([first] + [decode(x[:, t : t + 1]).clone() for t in range(t0, 12)], 1)
    if isinstance(model, TransformerXL):  # its ring keeps config.mem_len positions
        logits, cache = model.step(x[:, :t0])
        want = [logits]
        for t in range(t0, 12):
            logits, cache = model.step(x[:, t : t + 1], cache)
            want.append(logits)
    else:
        want = step_logits(model, x, t0).unbind(1)
    torch.testing.assert_close(got, torch.stack(list(want), 1), rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()


def fitted(kind: str, seed: int, train_seed: int):
    """`seed_everything(seed)`, a model initialised from it (not `build`, which seeds
    torch itself), and four training steps with dropout under `TrainConfig.seed`."""
    labnn.seed_everything(seed)
    cls, config_cls, stream = {"transformer": (TransformerLM, TransformerConfig, False),
                               "xl": (TransformerXL, XLConfig, True),
                               "feedback-kv": (FeedbackTransformerKV, FeedbackKVConfig,
                                               True)}[kind]
    model = cls(config_cls(vocab_size=V, d_model=8, n_heads=2, n_layers=1, dropout=0.2))
    ids = torch.randint(0, V, (360,), generator=torch.Generator().manual_seed(0))
    config = TrainConfig(max_iters=4, batch_size=2, seq_len=6, warmup_iters=1,
                         eval_interval=2, eval_iters=1, stream=stream, seed=train_seed,
                         device="cpu", show_progress=False)
    history = Trainer(model, ids[:300], ids[300:], config).fit()
    return history["train_loss"] + history["val_loss"], list(model.parameters())


@pytest.mark.parametrize("kind", ["transformer", "xl", "feedback-kv"])
def test_the_seeds_fix_a_whole_training_run(kind):
    losses, params = fitted(kind, 3, 7)
    again, params2 = fitted(kind, 3, 7)
    assert losses == again
    for p, p2 in zip(params, params2):
        assert torch.equal(p, p2)
    assert fitted(kind, 4, 7)[0] != losses  # the initialisation follows seed_everything
    # TrainConfig.seed draws the random batches; streams come in the text's order
    assert (fitted(kind, 3, 8)[0] != losses) == (kind == "transformer")
