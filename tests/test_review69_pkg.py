"""Review 69 of the package, each test written failing first."""

import pytest
import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.training import TrainConfig, Trainer
from labnn.training import trainer as trainer_module
from labnn.training.evaluate import evaluate, stream_loss
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig
from test_host_sync import count_reads, native_reads  # noqa: F401 (count_reads: a fixture)

V = 11
SIZE = dict(d_model=16, n_heads=2, n_layers=2)
MODELS = {
    "transformer": lambda: TransformerLM(TransformerConfig(V, seq_len=16, **SIZE)),
    "xl": lambda: TransformerXL(XLConfig(V, mem_len=8, **SIZE)),
    "feedback": lambda: FeedbackTransformer(FeedbackConfig(V, attn_len=4, **SIZE)),
    "kv": lambda: FeedbackTransformerKV(FeedbackKVConfig(V, attn_len=4, **SIZE)),
}


def ids(n=600):
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(0))


def train_config(stream, eval_iters=4):
    return TrainConfig(batch_size=2, seq_len=8, max_iters=4, eval_interval=100,
                       eval_iters=eval_iters, stream=stream, device="cpu",
                       show_progress=False)


# 1. the ids of a corpus are checked where they enter; the loops call past the door

@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_step_reads_nothing_back_in_its_model_call(name, stream, count_reads,
                                                              monkeypatch):
    """Every model's `forward` scanned the batch's ids (`check_tokens`, one `aminmax` read
    back to the host): a synchronisation per training step on a GPU, of ids the Trainer
    had checked at its door. The batch, the model's call and the loss read nothing now
    (the update's divergence check, left out here, reads one value on purpose)."""
    torch.manual_seed(0)
    trainer = Trainer(MODELS[name](), ids()[:400], ids()[400:], train_config(stream))
    monkeypatch.setattr(trainer_module, "update", lambda *args, **kwargs: None)
    trainer.model.train()
    for _ in range(2):  # the second step of a stream carries the state of the first
        count_reads["n"] = 0
        native = native_reads(trainer.train_step)
        assert (count_reads["n"], native) == (0, 0)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_an_evaluation_reads_back_as_often_for_any_number_of_batches(name, stream,
                                                                     count_reads):
    """`evaluate` read the ids of every batch back (the model's door): `eval_iters` + 1
    synchronisations per evaluation; `stream_loss` one per segment. Now the ids are
    checked once at the door of each, whatever the number of batches."""
    torch.manual_seed(0)
    model = MODELS[name]()

    def reads(n):
        count_reads["n"] = 0
        evaluate(model, ids(), train_config(stream, eval_iters=n))
        if stream:
            stream_loss(model, ids(), batch_size=2, seq_len=8, max_batches=n)
        return count_reads["n"]

    assert reads(6) == reads(2)


@pytest.mark.parametrize("name", list(MODELS))
def test_an_id_outside_the_vocabulary_is_still_refused_at_each_door(name):
    model = MODELS[name]()
    bad = ids().clone()
    bad[123] = V
    with pytest.raises(ValueError, match=r"train_ids hold ids in \[0, 11\], outside the "
                                         r"model's vocabulary \[0, 11\)"):
        Trainer(model, bad, ids(), train_config(False))
    for stream in (False, True):
        with pytest.raises(ValueError, match=r"ids hold ids in \[0, 11\], outside the "
                                             r"model's vocabulary \[0, 11\)"):
            evaluate(model, bad, train_config(stream))
    with pytest.raises(ValueError, match=r"ids hold ids in \[0, 11\], outside"):
        stream_loss(model, bad, batch_size=2, seq_len=8)
    with pytest.raises(ValueError, match="contains id 11, outside the vocabulary"):
        model(bad[None, 100:130])


@pytest.mark.parametrize("name", list(MODELS))
def test_past_the_door_is_forward_less_its_scan(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x = ids()[None, :14].expand(2, -1)
    logits, state = model(x[:, :7])
    past, past_state = model.forward_checked_ids(x[:, :7])
    torch.testing.assert_close(past, logits, rtol=0, atol=0)
    more = model(x[:, 7:], state)[0] if state is not None else model(x[:, 7:])[0]
    past_more = model.forward_checked_ids(x[:, 7:], past_state)[0]
    torch.testing.assert_close(past_more, more, rtol=0, atol=0)


# 2. edge inputs

@pytest.mark.parametrize("name", list(MODELS))
def test_int32_ids_train_and_evaluate_as_long_ones_do(name):
    """The models take torch.int32 ids and so did the Trainer's door, but the loss's
    `cross_entropy` refuses int32 targets: the first evaluation failed deep in torch
    ('expected target dtype to be Long or Byte, but got Int')."""
    def run(dtype):
        torch.manual_seed(0)
        corpus = ids().to(dtype)
        trainer = Trainer(MODELS[name](), corpus[:400], corpus[400:], train_config(True))
        history = trainer.fit()
        return history["val_loss"], evaluate(trainer.model, corpus, train_config(False))

    assert run(torch.int32) == run(torch.long)


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8, torch.int8])
def test_ids_of_a_dtype_no_model_takes_are_refused_at_the_door_by_name(dtype):
    """The Trainer's door took any integer ids, and the first step refused them naming
    'tokens', the model's argument; evaluate and stream_loss likewise."""
    model, corpus = MODELS["transformer"](), ids().to(dtype)
    message = (rf"train_ids must hold torch.long \(or torch.int32\) ids, got {dtype}: "
               r"convert them with .long\(\)")
    with pytest.raises(TypeError, match=message):
        Trainer(model, corpus, ids(), train_config(False))
    with pytest.raises(TypeError, match=message.replace("train_ids", "ids")):
        evaluate(model, corpus, train_config(False))
    with pytest.raises(TypeError, match=message.replace("train_ids", "ids")):
        stream_loss(model, corpus, batch_size=2, seq_len=8)


@pytest.mark.parametrize("name", list(MODELS))
def test_float16_weights_are_refused_before_adamw_makes_them_nan(name):
    """AdamW's eps (1e-8) is 0 in float16: the first step divided 0 by 0 and made every
    weight NaN, and the Trainer then said 'the loss is nan at iteration 1: ... Try a lower
    lr', which cannot help. The door now says what will not work, and what does."""
    with pytest.raises(TypeError, match=r"model has torch.float16 parameters \(.*\): "
                                        r"AdamW cannot train them"):
        Trainer(MODELS[name]().half(), ids()[:400], ids()[400:], train_config(False))
    Trainer(MODELS[name]().bfloat16(), ids()[:400], ids()[400:], train_config(False)).fit()


def test_the_task_loops_refuse_float16_weights_too():
    from labnn.data.programs import program_task
    from labnn.training.tasks import train_on_programs, train_recall

    model = MODELS["transformer"]().half()
    x = ids()[:16].view(2, 8)
    with pytest.raises(TypeError, match="AdamW cannot train them"):
        train_recall(model, [(x, x)])
    train, test, _ = program_task(n_train=8, n_test=8, seed=0)
    with pytest.raises(TypeError, match="AdamW cannot train them"):
        train_on_programs(model, train, test, iters=1)


@pytest.mark.parametrize("name", ["transformer", "xl", "kv"])
def test_a_compiled_decoder_refuses_a_token_unlike_its_example(name):
    """`decoder` checks its example token at its door, but each call took any token: one
    of `[B, 2]` was read as its first column (on a CPU; the second token silently lost),
    and on a GPU the graph's `copy_` broadcast a `[1, 1]` token into every stream. Each
    call now compares the token's shape, dtype and device with the example (no value is
    read: nothing waits for the device)."""
    from labnn import compiled
    from labnn.compiled.decoding import read_prompt

    torch.manual_seed(0)
    model = MODELS[name]().eval()
    prompt = ids()[:8].view(2, 4)
    logits, ring = read_prompt(model, prompt, compiled.ring_slots(model, 4, 4))
    token = logits.argmax(-1, keepdim=True)
    decode = compiled.decoder(model, ring, token, backend="eager")
    for bad in (token[:1], torch.cat([token, token], 1), token[:, 0], token.int(),
                token.tolist()):
        with pytest.raises(ValueError, match=r"token must be a \[2, 1\] torch.int64 tensor "
                                             r"on cpu, as the decoder's example, got "):
            decode(bad)
    assert decode(token).shape == (2, V)


def test_a_forward_of_ones_own_is_what_the_loops_call():
    """The loops call `forward_checked_ids`, labnn's `forward` less its scan: a learner's
    subclass whose `forward` adds something, or a forward set on the instance, would have
    been skipped silently. Such a model is called through its own `forward`."""
    class Shifted(TransformerLM):
        def forward(self, tokens, cache=None, *, use_cache=False):
            logits, cache = super().forward(tokens, cache, use_cache=use_cache)
            return logits + 0.5 * logits.detach(), cache

    torch.manual_seed(0)
    plain = MODELS["transformer"]()
    shifted = Shifted(plain.config)
    shifted.load_state_dict(plain.state_dict())
    config = train_config(False)
    assert evaluate(shifted, ids(), config) != evaluate(plain, ids(), config)
    patched = MODELS["transformer"]()
    patched.load_state_dict(plain.state_dict())
    patched.forward = shifted.forward
    assert evaluate(patched, ids(), config) == evaluate(shifted, ids(), config)
    for model in (shifted, plain):  # the same weights, the same batch
        torch.manual_seed(0)
        Trainer(model, ids()[:400], ids()[400:], config).train_step()
    assert any(not torch.equal(a, b) for a, b in zip(shifted.parameters(), plain.parameters()))


def test_a_forward_hook_on_the_model_still_runs_in_the_loops():
    """A hook registered on the model itself (a learner recording activations or
    changing the logits) runs in `model(x)` only: the loops call the model through its
    `__call__` then, not past its door, so the hook is never skipped silently."""
    torch.manual_seed(0)
    plain = MODELS["xl"]()
    hooked = MODELS["xl"]()
    hooked.load_state_dict(plain.state_dict())
    calls = []
    hooked.register_forward_hook(lambda m, a, out: calls.append(1) or (out[0] * 2, out[1]))
    config = train_config(True)
    assert evaluate(hooked, ids(), config) != evaluate(plain, ids(), config)
    assert calls
    seen = len(calls)
    kw = dict(batch_size=2, seq_len=8)
    assert stream_loss(hooked, ids(), **kw) != stream_loss(plain, ids(), **kw)
    assert len(calls) > seen
    pre = MODELS["xl"]()
    pre.register_forward_pre_hook(lambda m, a: calls.append(2))
    Trainer(pre, ids()[:400], ids()[400:], train_config(False)).train_step()
    assert calls[-1] == 2


@pytest.mark.parametrize("bad, got", [
    (lambda k, v: (k, v[:, :, :2]), r"\[\[3, 2, 3, 8\], \[3, 2, 2, 8\]\]"),
    (lambda k, v: (k, v, v), r"\[\[3, 2, 3, 8\], \[3, 2, 3, 8\], \[3, 2, 3, 8\]\]"),
    (lambda k, v: (k[0], v[0]), r"\[\[2, 3, 8\], \[2, 3, 8\]\]"),
    (lambda k, v: (k, None), r"\[\[3, 2, 3, 8\], 'NoneType'\]"),
])
def test_a_cache_pair_of_the_wrong_shapes_says_what_it_got(bad, got):
    """'cache[0] must be (k, v), each [B, H, S, D_h]' named no shape, and a triple failed
    unpacking ('too many values to unpack (expected 2)')."""
    model = MODELS["transformer"]().eval()
    x = ids()[:21].view(3, 7)
    _, cache = model(x[:, :3], use_cache=True)
    cache = [bad(k, v) for k, v in cache]
    with pytest.raises(ValueError, match=r"cache\[0\] must be \(k, v\), two tensors of one "
                                         r"shape \[B, H, S, D_h\], got " + got):
        model(x[:, 3:], cache)


def test_a_training_window_longer_than_the_learned_positions_is_refused_at_the_door():
    """TrainConfig(seq_len=16) for a TransformerLM of seq_len=8 built the Trainer, and the
    first evaluation said 'sequence of 16 tokens ... is longer than seq_len=8', which of
    the two seq_lens left unsaid."""
    model = TransformerLM(TransformerConfig(V, seq_len=8, **SIZE))
    with pytest.raises(ValueError, match=r"TrainConfig.seq_len=16 is longer than the model's "
                                         r"seq_len=8 \(its learned positions\)"):
        Trainer(model, ids()[:400], ids()[400:], TrainConfig(batch_size=2, seq_len=16,
                                                             device="cpu"))
    sinusoidal = TransformerLM(TransformerConfig(V, seq_len=8, positions="sinusoidal", **SIZE))
    Trainer(sinusoidal, ids()[:400], ids()[400:], TrainConfig(batch_size=2, seq_len=16,
                                                              device="cpu"))
