"""Every public entry point of the models, attention functions and data under hostile input (issue 12):
the right result, or an error naming the argument, the value and what was expected."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from labnn.nn.attention import KVBuffer, MultiHeadAttention, causal_mask, scaled_dot_product_attention
from labnn.data import (CharTokenizer, ProgramData, ProgramTokenizer, load_tiny_shakespeare, order_task,
                        program_task, random_batch, stream_batch, train_val_split)
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.nn.arguments import check_bool, check_dropout, check_int, check_number, check_sampling
from labnn.nn.generation import sample_next
from labnn.nn.positions import sinusoidal_encoding
from labnn.xl.relative_attention import RelativeMultiHeadAttention, relative_shift
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig

V = 11
SMALL = dict(vocab_size=V, d_model=16, n_heads=2, n_layers=2)


def make(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return {
        "lm": lambda: TransformerLM(TransformerConfig(**SMALL, seq_len=16)),
        "xl": lambda: TransformerXL(XLConfig(**SMALL, mem_len=4)),
        "fb": lambda: FeedbackTransformer(FeedbackConfig(**SMALL)),
        "fkv": lambda: FeedbackTransformerKV(FeedbackKVConfig(**SMALL)),
    }[kind]().eval()


MODELS = ["lm", "xl", "fb", "fkv"]
TOKENS = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("shape", [(0, 5), (2, 0)])
def test_empty_batches_and_sequences_give_empty_logits(kind, shape):
    logits, _ = make(kind)(torch.zeros(shape, dtype=torch.long))
    assert logits.shape == (*shape, V)


@pytest.mark.parametrize("kind", MODELS)
def test_empty_batch_generates_nothing(kind):
    assert make(kind).generate(torch.zeros(0, 3, dtype=torch.long), 2).shape == (0, 5)


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("tokens,error,match", [
    (TOKENS.to(torch.uint8), TypeError, "tokens must hold integer token ids.*uint8"),
    (TOKENS.float(), TypeError, "tokens must hold integer token ids.*float32"),
    (TOKENS > 3, TypeError, "tokens must hold integer token ids.*bool"),
    (TOKENS.to("meta"), ValueError, "tokens is on meta, but the model is on cpu"),
])
def test_tokens_of_a_wrong_dtype_or_device_are_named(kind, tokens, error, match):
    with pytest.raises(error, match=match):
        make(kind)(tokens)


def test_int32_tokens_give_the_same_logits_as_long():
    model = make("lm")
    torch.testing.assert_close(model(TOKENS.int())[0], model(TOKENS)[0])


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("kwargs,match", [
    (dict(n=True), "n must be a non-negative int, got True"),
    (dict(n=2, temperature=float("nan")), "temperature must be a number >= 0 and finite.*nan"),
    (dict(n=2, temperature=float("inf"), top_k=1), "temperature must be a number >= 0 and finite.*inf"),
    (dict(n=2, top_k=True), "top_k must be a positive int or None, got True"),
])
def test_generate_names_bad_arguments(kind, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(kind).generate(TOKENS, **kwargs)


@pytest.mark.parametrize("kind", MODELS)
def test_generate_needs_a_prompt_token(kind):
    with pytest.raises(ValueError, match=r"prompt must hold at least one token.*\[2, 0\]"):
        make(kind).generate(torch.zeros(2, 0, dtype=torch.long), 3)


def test_state_misuse_is_named():
    xl = make("xl")
    _, cache = xl.step(TOKENS)
    with pytest.raises(ValueError, match="mem_len=9 differs from the cache's 4"):
        xl.step(TOKENS[:, :1], cache, mem_len=9)
    with pytest.raises(ValueError, match=r"tokens must hold at least one token per stream, got shape \[2, 0\]"):
        xl.step(torch.zeros(2, 0, dtype=torch.long))
    fb = make("fb")
    _, state = fb(TOKENS)
    as_double = type(state)(state.memory.double(), tuple(k.double() for k in state.keys),
                            tuple(v.double() for v in state.values), state.offset)
    with pytest.raises(ValueError, match="state holds torch.float64 on cpu, but the model is torch.float32"):
        fb(TOKENS, as_double)
    fkv = make("fkv")
    _, kv_state = fkv(TOKENS)
    with pytest.raises(ValueError, match="state.offset must be a non-negative int.*-3"):
        fkv(TOKENS, KVState(kv_state.kv, -3))


# ---------------------------------------------------------------- attention functions and buffers

def test_attention_functions_name_bad_shapes_dtypes_and_types():
    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)
    with pytest.raises(ValueError, match="shapes disagree.*same D_h"):
        scaled_dot_product_attention(q, torch.randn(2, 2, 5, 3), k)
    with pytest.raises(ValueError, match="shapes disagree.*same number of keys"):
        scaled_dot_product_attention(q, k, torch.randn(2, 2, 4, 4))
    with pytest.raises(TypeError, match=r"q must be a floating tensor, got torch.int64"):
        scaled_dot_product_attention(q.long(), k, k)
    # a float32 tensor of the wrong rank is told its rank, not its dtype (trial 55a)
    with pytest.raises(ValueError, match=r"q must have 4 dimensions \[B, H, T, D_h\], got 3: "
                       r"\[2, 3, 4\]"):
        scaled_dot_product_attention(q[0], k, k)
    with pytest.raises(ValueError, match=r"q must have 4 dimensions .* got 5: \[1, 2, 2, 3, 4\]"):
        scaled_dot_product_attention(q[None], k, k)
    with pytest.raises(TypeError, match=r"k must be a tensor \[B, H, S, D_h\], got list"):
        scaled_dot_product_attention(q, [1.0], k)
    with pytest.raises(ValueError, match="causal_mask needs ints 0 <= t <= s, got t=3.0"):
        causal_mask(3.0)
    with pytest.raises(ValueError, match=r"relative_shift needs a tensor \[..., T, S\]"):
        relative_shift(torch.zeros(5))
    with pytest.raises(TypeError, match="positions must be a torch.Tensor, got list"):
        sinusoidal_encoding([1, 2], 4)
    with pytest.raises(ValueError, match="d must be a positive even int, got 4.0"):
        sinusoidal_encoding(torch.arange(3), 4.0)
    with pytest.raises(TypeError, match="rel_keys must be a tensor"):
        RelativeMultiHeadAttention(8, 2)(torch.randn(1, 3, 8), causal_mask(3), rel_keys=[1, 2])


def test_multi_head_attention_names_bad_inputs_and_caches():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"x must be \[B, T, D=8\], got \[1, 3, 6\]"):
        mha(torch.randn(1, 3, 6))
    with pytest.raises(ValueError, match="x is torch.float64 on cpu, but the module is torch.float32"):
        mha(x.double())
    with pytest.raises(ValueError, match=r"cache k must be \[B, H, S, D_h\].*got \[2, 2, 2, 4\]"):
        mha(x, cache=(torch.randn(2, 2, 2, 4),) * 2)
    with pytest.raises(ValueError, match="cache k is torch.float64"):
        mha(x, cache=(torch.randn(1, 2, 2, 4, dtype=torch.double),) * 2)
    with pytest.raises(TypeError, match="cache must be a \\(k, v\\) pair or a KVBuffer, got Tensor"):
        mha(x, cache=torch.randn(2, 1, 2, 2, 4))
    for heads in (True, 2.0):
        with pytest.raises(ValueError, match=f"n_heads must be a positive int, got {heads!r}"):
            MultiHeadAttention(8, heads)
    assert mha(torch.randn(0, 3, 8))[0].shape == (0, 3, 8) and mha(torch.randn(1, 0, 8))[0].shape == (1, 0, 8)


def test_kv_buffer_refuses_another_dtype_device_and_bad_sizes():
    buf = KVBuffer.empty(torch.zeros(1, 2, 0, 4))
    k64 = torch.randn(1, 2, 1, 4, dtype=torch.double)
    with pytest.raises(ValueError, match="keys are torch.float64 on cpu, but this buffer holds torch.float32"):
        buf.append(k64, k64)  # was silently cast to float32
    meta = torch.randn(1, 2, 1, 4, device="meta")
    with pytest.raises(ValueError, match="on meta, but this buffer holds torch.float32 on cpu"):
        buf.append(meta, meta)
    with pytest.raises(TypeError, match="keys and values must be tensors"):
        buf.append([1], [2])
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        buf.last(-1)
    with pytest.raises(ValueError, match=r"like must be a \[B, H, \*, D_h\] tensor of keys"):
        KVBuffer.empty(torch.zeros(2, 0, 4))
    with pytest.raises(ValueError, match="capacity must be a non-negative int, got -1"):
        KVBuffer.empty(torch.zeros(1, 2, 0, 4), -1)


def test_sample_next_needs_batched_logits():
    with pytest.raises(ValueError, match=r"logits must be a \[B, V\] tensor with V >= 1, got \[5\]"):
        sample_next(torch.randn(5))  # returned a 0-d tensor instead of [B]
    with pytest.raises(ValueError, match=r"got \[1, 0\]"):
        sample_next(torch.randn(1, 0))


@pytest.mark.parametrize("make_config,match", [
    (lambda: TransformerConfig(vocab_size=True), "vocab_size must be a positive int, got True"),
    (lambda: TransformerConfig(vocab_size=5, d_ff=-4), "d_ff must be a positive int or None, got -4"),
    (lambda: TransformerConfig(vocab_size=5, attn_len=True), "attn_len must be a positive int or None, got True"),
    (lambda: XLConfig(vocab_size=5, d_ff=True), "d_ff must be a positive int or None, got True"),
    (lambda: XLConfig(vocab_size=5, dropout="0.1"), r"dropout must be in \[0, 1\), got '0.1'"),
    (lambda: FeedbackConfig(vocab_size=5, dropout=None), r"dropout must be in \[0, 1\), got None"),
])
def test_configs_name_bad_fields(make_config, match):
    with pytest.raises(ValueError, match=match):
        make_config()


# ---------------------------------------------------------------- data

def test_tokenizer_names_bad_text_and_ids():
    tok = CharTokenizer("abc")
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        tok.encode(b"ab")
    with pytest.raises(TypeError, match="ids must hold integer ids, got dtype torch.bool"):
        tok.decode(torch.tensor([True, False]))  # decoded as 'ba'
    with pytest.raises(TypeError, match="ids must hold integer ids, got dtype torch.float32"):
        tok.decode(torch.tensor([0.0, 1.5]))
    with pytest.raises(TypeError, match=r"ids must be ints, got 1.0 \(float\)"):
        tok.decode([1.0])
    with pytest.raises(TypeError, match="ids must be a 1-D tensor or a sequence of ints, got str"):
        tok.decode("ab")
    with pytest.raises(TypeError, match="chars must be a str or a list of characters, got int"):
        CharTokenizer(123)
    with pytest.raises(ValueError, match="chars must hold at least one character"):
        CharTokenizer("")
    assert tok.encode("").shape == (0,) and tok.decode([]) == ""


def test_batchers_name_bad_sizes_ids_and_indices():
    ids = torch.arange(100) % 7
    with pytest.raises(ValueError, match="batch_size must be a positive int, got True"):
        random_batch(ids, True, 4)
    with pytest.raises(TypeError, match=r"ids must be a 1-D integer tensor, got torch.bool \[100\]"):
        random_batch(ids > 3, 2, 4)
    for index in (1.0, True):
        with pytest.raises(ValueError, match=f"index must be an int in \\[0, 12\\), got {index}"):
            stream_batch(ids, 2, 4, index)
    with pytest.raises(ValueError, match="ids hold 1 tokens: too few to split"):
        train_val_split(ids[:1])  # gave an empty training part
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\), got '0.1'"):
        train_val_split(ids, "0.1")
    with pytest.raises(TypeError, match="n, seq_len and vocab_size must be ints, got n=2.0"):
        order_task(2.0)


def test_data_directory_that_is_a_file_is_named(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; the data directory must be a folder"):
        load_tiny_shakespeare(f)  # was an 'offline?' download error or FileExistsError


def test_programs_name_bad_seeds_ids_and_data():
    for seed in (None, 1.5):
        with pytest.raises(ValueError, match=f"seed must be an int.*got {seed}"):
            program_task(5, 5, seed=seed)  # seed=None gave different programs at every call
    with pytest.raises(ValueError, match="n_train must be a positive int, got True"):
        program_task(True, 5)
    tok = ProgramTokenizer(3)
    for bad in (99, -1):  # -1 decoded silently as the last word
        with pytest.raises(ValueError, match=f"id {bad} is outside the program vocabulary"):
            tok.decode([bad])
    _, test, _ = program_task(8, 4, n_statements=6)
    with pytest.raises(TypeError, match="ProgramData.mask must be a bool tensor.*int64"):
        ProgramData(test.x, test.y, test.mask.long())  # an int mask indexed rows 0 and 1 instead
    with pytest.raises(ValueError, match="ProgramData needs x, y and mask of one shape"):
        ProgramData(test.x, test.y[:, :-1], test.mask)


# ---------------------------------------------------------------- generation (issue 29)

def one_layer_training(kind: str) -> torch.nn.Module:
    """An eval-mode model with ONE submodule left in training mode (its dropout on)."""
    model = make(kind)
    (model.blocks[1].attn if kind == "xl" else model.layers[1].attn).train()
    return model


@pytest.mark.parametrize("kind,path", [
    ("xl", "generate"), ("xl", "step"), ("xl", "compiled"),
    ("fb", "generate"), ("fb", "step"),
    ("fkv", "generate"), ("fkv", "step"), ("fkv", "compiled"),
])
def test_a_submodule_left_in_training_mode_is_refused_by_every_generation_path(kind, path):
    """One rule everywhere: decoding and generation need every module in eval mode (eager XL
    raised deep inside, eager feedback applied the layer's dropout, compiled generation
    ignored it). The message names the first submodule in training mode."""
    from labnn import compiled

    model = one_layer_training(kind)
    calls = {
        "generate": lambda: model.generate(TOKENS, 2),
        "step": lambda: model.step(TOKENS if kind == "xl" else TOKENS[:, 0]),
        "compiled": lambda: compiled.generate(model, TOKENS, 2, backend="eager"),
    }
    where = "blocks.1.attn" if kind == "xl" else "layers.1.attn"
    with pytest.raises(RuntimeError, match=rf"needs eval mode, but submodule {where} \(\w+\) is "
                                           r"in training mode.*call model.eval\(\) first"):
        calls[path]()
    model.eval()
    calls[path]()  # once every module is in eval mode, it runs


@pytest.mark.parametrize("kind", MODELS + ["compiled-xl", "compiled-fkv"])
def test_generate_on_the_meta_device_is_a_clear_error(kind):
    """A model on the meta device (built under `torch.device("meta")`, no values) failed with
    torch's `Tensor.item() cannot be called on meta tensors`."""
    from labnn import compiled

    model = make(kind.removeprefix("compiled-")).to("meta")
    prompt = TOKENS.to("meta")
    if kind.startswith("compiled"):
        def generate():
            return compiled.generate(model, prompt, 2, backend="eager")
    else:
        def generate():
            return model.generate(prompt, 2)
    with pytest.raises(ValueError, match=r"prompt is on the meta device, which holds no values.*"
                                         r"to_empty"):
        generate()
    with pytest.raises(ValueError, match=r"tokens is on the meta device"):
        model(prompt)


def test_sample_next_survives_half_logits_and_a_tiny_temperature():
    """`logits / temperature` overflowed: float16 logits of 100 at temperature 1e-3, or any
    logits at 1e-40, became inf, and the softmax NaN ("probability tensor contains either
    `inf`, `nan` or element < 0"). The most likely token now wins, as at temperature 0."""
    g = torch.Generator().manual_seed(0)
    assert sample_next(torch.tensor([[90.0, 100.0, 95.0]]).half(), 1e-3, generator=g).item() == 1
    assert sample_next(torch.tensor([[1.0, 3.0, 2.0]]), 1e-40, generator=g).item() == 1
    assert sample_next(torch.tensor([[3e38, -3e38]]), 0.5, generator=g).item() == 0
    assert sample_next(torch.tensor([[1.0, 3.0, 2.0]]), 1e-40, 2, generator=g).item() == 1


class _CudaGenerator(torch.Generator):
    """A generator that says it is a CUDA one (to test the device check without a GPU)."""

    device = torch.device("cuda", 0)


@pytest.mark.parametrize("kind", MODELS)
def test_generate_names_a_generator_of_another_type_or_device(kind):
    """A seed passed as the generator failed at the first sampled token inside
    `torch.multinomial` (at temperature 0, after the whole prompt was read), and a CUDA
    generator for CPU tokens with torch's "Expected a 'cpu' device type for generator"."""
    model = make(kind)
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator or None, got int"):
        model.generate(TOKENS, 2, generator=42)
    with pytest.raises(ValueError, match=r"generator is on cuda:0, but the prompt is on cpu"):
        model.generate(TOKENS, 2, generator=_CudaGenerator())


def test_a_per_example_mask_is_not_taken_for_a_per_head_one():
    """A 3-D mask against [B, H, T, S] scores broadcasts as [H, T, S]: with B == H a
    per-example padding mask [B, T, S] was applied head by head, silently."""
    from labnn.xl.relative_attention import RelativeMultiHeadAttention

    x, ok = torch.randn(2, 3, 8), torch.ones(2, 3, 3, dtype=torch.bool)
    for attn in (MultiHeadAttention(8, 2), RelativeMultiHeadAttention(8, 2)):
        with pytest.raises(ValueError, match=r"mask of shape \[2, 3, 3\] is ambiguous.*"
                                             r"mask\[:, None\].*mask\[None\]"):
            attn(x, ok)
        for fine in (ok[:1], ok[:, None], ok[None], ok[0]):  # [1, T, S], 4-D, [T, S]
            attn(x, fine)
    with pytest.raises(ValueError, match="ambiguous"):
        make("xl")(TOKENS[:, :3], mask=ok)


@pytest.mark.parametrize("kind", ["xl", "fb", "fkv"])
def test_step_builds_no_autograd_graph(kind):
    """Decoding token by token kept every step's graph (and the fused loop's saved
    activations) alive in the feedback models."""
    model = make(kind)
    logits, _ = model.step(TOKENS if kind == "xl" else TOKENS[:, 0])
    assert not logits.requires_grad and logits.grad_fn is None


def test_sinusoidal_positions_need_an_even_width_at_the_config():
    with pytest.raises(ValueError, match=r"d_model=15 must be even and divisible by "
                                         r"n_heads=3"):
        TransformerConfig(vocab_size=5, d_model=15, n_heads=3, positions="sinusoidal")
    TransformerConfig(vocab_size=5, d_model=15, n_heads=3)  # learned positions: any width


@pytest.mark.parametrize("kind", ["lm", "xl"])
def test_attention_maps_are_the_eval_mode_maps_and_leave_every_mode_as_it_was(kind):
    """In training mode dropout changed the maps from call to call."""
    torch.manual_seed(0)
    size = dict(SMALL, dropout=0.5)
    model = (TransformerLM(TransformerConfig(**size, seq_len=16)) if kind == "lm"
             else TransformerXL(XLConfig(**size, mem_len=4)))
    want = model.eval().attention_maps(TOKENS)
    model.train()
    model.blocks[0].eval()  # a mixed state, as a user may leave it
    got = model.attention_maps(TOKENS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert model.training and not model.blocks[0].training and model.blocks[1].training


@pytest.mark.parametrize("kind", [*MODELS, "compiled"])
def test_on_token_is_given_each_token_as_it_is_drawn(kind):
    """`generate(..., on_token=f)` calls `f` once per new token, with the column `[B]` just
    drawn and before the next is drawn: what a caller needs to show text as it comes."""
    from labnn.compiled import decoding as compiled
    from labnn.nn import generation

    model = make("xl" if kind == "compiled" else kind)
    seen, draws = [], []
    real = generation.sample_next

    def counted(*args, **kwargs):
        draws.append(len(seen))  # tokens already handed over when this one is drawn
        return real(*args, **kwargs)

    generation.sample_next, saved = counted, generation.sample_next
    try:
        g = torch.Generator().manual_seed(1)
        if kind == "compiled":
            out = compiled.generate(model, TOKENS, 6, generator=g, backend="eager",
                                    on_token=seen.append)
        else:
            out = model.generate(TOKENS, 6, generator=g, on_token=seen.append)
    finally:
        generation.sample_next = saved
    assert draws == list(range(6))
    assert all(t.shape == (2,) for t in seen)
    assert torch.equal(torch.stack(seen, 1), out[:, 5:])
    first = out[:, 5].clone()
    with torch.inference_mode():  # a caller writing into what it was given changes nothing
        seen[0].fill_(-1)
    assert torch.equal(out[:, 5], first)


@pytest.mark.parametrize("kind", MODELS)
def test_on_token_must_be_callable(kind):
    with pytest.raises(TypeError, match=r"on_token must be a callable or None, got list"):
        make(kind).generate(TOKENS, 2, on_token=[])


@pytest.mark.parametrize("call, match", [
    (lambda: check_int("n_heads", np.int64(4)),
     r"n_heads must be a positive int, got np\.int64\(4\) \(a NumPy int64: pass int"),
    (lambda: check_int("n_heads", 4.0), r"n_heads must be a positive int, got 4\.0$"),
    (lambda: check_bool("causal", 1), r"causal must be True or False, got 1$"),
    (lambda: check_number("lr", np.float32(0.1)), r"a NumPy float32: pass float\(\.\.\.\)"),
    (lambda: check_sampling(torch.tensor(0.8), None), r"temperature must be .*got "
     r"tensor\(0\.8000\) \(a tensor: pass a Python number, \.item\(\)\)"),
    (lambda: check_dropout("0.1"), r"dropout must be in \[0, 1\), got '0\.1'"),
])
def test_a_value_of_the_wrong_type_is_a_type_error_that_names_the_fix(call, match):
    """Wrong types raised ValueError, and a NumPy integer (a size read from an array) was
    refused as "must be a positive int, got 4" with nothing to say it was the type: now a
    TypeError naming the fix, and still a ValueError for code that catches that (the CLI)."""
    with pytest.raises(TypeError, match=match) as info:
        call()
    assert isinstance(info.value, ValueError)


def test_a_value_of_the_right_type_out_of_range_stays_a_value_error():
    for call in (lambda: check_int("n_heads", 0), lambda: check_number("lr", math.nan),
                 lambda: check_sampling(-1.0, None), lambda: check_dropout(1.5)):
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, TypeError)


def test_messages_name_the_argument_the_caller_passed():
    """A package reader's findings: `KVBuffer.of(k, v)` named `like`, an argument the caller
    never passed; a cache of `[k, v]` lists was told "got list" of the whole cache; float ids
    to `ProgramTokenizer.decode` were "outside the program vocabulary"; a 2-D `positions`
    was told its type, which was right, not its shape."""
    from labnn.data.recall import RecallVocab, recall_batch

    with pytest.raises(ValueError, match=r"v must be \[B, H, S, D_h\], got \[2, 3, 4\]"):
        KVBuffer.of(torch.randn(1, 2, 3, 4), torch.randn(2, 3, 4))
    tf = TransformerLM(TransformerConfig(V, seq_len=8, d_model=8, n_heads=2, n_layers=1))
    x = torch.zeros(1, 2, dtype=torch.long)
    cache = [list(kv) for kv in tf(x, use_cache=True)[1]]
    with pytest.raises(TypeError, match=r"cache\[0\] must be a \(k, v\) tuple or a KVBuffer.*"
                                        r"got list"):
        tf(x[:, :1], cache, use_cache=True)
    with pytest.raises(ValueError, match=r"ids must be a 1-D tensor of integer ids, got "
                                         r"float32 \[2\]"):
        ProgramTokenizer(3).decode(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"positions must be a 1-D integer tensor, got shape "
                                        r"\[2, 2\]"):
        recall_batch(torch.zeros(2, 2, dtype=torch.long), 5, RecallVocab(4, 2))
