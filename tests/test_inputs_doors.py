"""Public functions beyond the models' own doors, under bad input: the right result, or an
error naming the argument, the value and what was expected; never a silent wrong result."""

from __future__ import annotations

import pytest
import torch

from labnn.compiled import bucket
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.plot.loops import feedback_trace
from labnn.training.evaluate import stream_loss
from labnn.training.optim import update
from labnn.training.tasks import train_recall, warmup_cosine
from labnn.xl.memory import segment_mask
from labnn.xl.model import XLConfig
from labnn.xl.relative_attention import heads_first, relative_scores

SMALL = dict(vocab_size=11, d_model=16, n_heads=2, n_layers=2)


@pytest.mark.parametrize("grad_clip", [-1.0, float("nan"), "1"])
def test_a_negative_clip_is_refused_not_an_ascent(grad_clip):
    """`clip_grad_norm_` with a negative norm multiplies every gradient by a negative
    number: the step climbed the loss, silently."""
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    with pytest.raises(ValueError, match=rf"grad_clip must be .*got {grad_clip!r}"):
        update(model, opt, model(torch.ones(1, 3)).sum(), lr=0.1, grad_clip=grad_clip)
    assert torch.equal(model.weight, before)


def test_train_recall_names_its_clip():
    model = torch.nn.Linear(3, 1)
    batch = (torch.zeros(1, 3), torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"clip must be .*got -1.0"):
        train_recall(model, [batch], clip=-1.0)


@pytest.mark.parametrize("args,match", [
    ((5, 2, -1), r"mem_len must be a non-negative int, got -1"),
    ((5, 0, 1), r"seg_len must be a positive int, got 0"),
    ((-1, 2, 1), r"n must be a non-negative int, got -1"),
    ((5, 2.0, 1), r"seg_len must be a positive int, got 2.0"),
])
def test_segment_mask_names_a_bad_size(args, match):
    """`mem_len=-1` gave a mask in which a segment's first query saw not even itself."""
    with pytest.raises(ValueError, match=match):
        segment_mask(*args)


def test_segment_mask_of_an_empty_text():
    assert segment_mask(0, 2, 1).shape == (0, 0)


@pytest.mark.parametrize("args,match", [
    ((0, 10, 1.0, 0), r"warmup must be a positive int, got 0"),
    ((0, 0, 1.0, 1), r"n must be a positive int, got 0"),
])
def test_warmup_cosine_names_a_zero_length(args, match):
    with pytest.raises(ValueError, match=match):
        warmup_cosine(*args)


@pytest.mark.parametrize("n", [0, -5, 2.5])
def test_bucket_names_a_length_that_is_not_positive(n):
    """`bucket(0)` was 2 and `bucket(-5)` 8, silently."""
    with pytest.raises(ValueError, match=rf"n must be a positive int, got {n!r}"):
        bucket(n)


def test_bucket_rounds_up_to_four_significant_bits():
    """A ring rounded up to a power of two scored up to twice the positions a generation
    reads (4,096 slots for 2,080: the compiled transformer slower than the eager one at
    2,048 on a CPU); four significant bits waste at most 1/8, and lengths of one eighth of
    an octave still share a graph."""
    ns = (1, 2, 3, 8, 9, 15, 16, 17, 100, 294, 302, 2080, 4096)
    assert [bucket(n) for n in ns] == [1, 2, 3, 8, 9, 15, 16, 18, 104, 320, 320, 2304, 4096]
    assert all(n <= bucket(n) <= 1.125 * n for n in range(1, 5000))


def test_stream_loss_names_max_batches_not_skip():
    model = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match=r"max_batches must be a positive int or None, got 0"):
        stream_loss(model, torch.zeros(100, dtype=torch.long), batch_size=1, seq_len=4,
                    max_batches=0)
    with pytest.raises(ValueError, match=r"skip must be in \[0, 2\)"):
        stream_loss(model, torch.zeros(100, dtype=torch.long), batch_size=1, seq_len=4,
                    max_batches=2, skip=2)
    assert model.training  # a refused call leaves the model's mode as it was


@pytest.mark.parametrize("bias", [0, "no", None])
def test_xl_config_bias_is_a_bool(bias):
    """`bias=0` built a model without biases and `bias="no"` one with them."""
    with pytest.raises(ValueError, match=rf"bias must be True or False, got {bias!r}"):
        XLConfig(**SMALL, bias=bias)


@pytest.mark.parametrize("make", [
    lambda: FeedbackTransformer(FeedbackConfig(**SMALL)),
    lambda: FeedbackTransformerKV(FeedbackKVConfig(**SMALL)),
])
def test_feedback_doors_name_their_arguments(make):
    model = make().eval()
    with pytest.raises(TypeError, match=r"use_cache must be True or False, got 'no'"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 1, use_cache="no")
    with pytest.raises(ValueError, match=r"batch_size must be a non-negative int, got -1"):
        model.initial_state(-1)


def test_kv_state_from_a_state_of_another_kind_is_named():
    with pytest.raises(TypeError, match=r"state must be a FeedbackState .* got KVState"):
        KVState.from_feedback(KVState(torch.zeros(2, 1, 2, 0, 8), 0))


def test_feedback_trace_of_a_model_that_runs_no_feedback_layer_is_named():
    """The KV model's fused loop calls no `FeedbackLayer`: the trace came back empty and
    `feedback_steps` blamed its labels ("labels must have 0 entries")."""
    model = FeedbackTransformerKV(FeedbackKVConfig(**SMALL)).eval()
    with pytest.raises(TypeError, match=r"FeedbackTransformerKV.*loop='autograd'"):
        feedback_trace(model, torch.arange(4))
    model = FeedbackTransformerKV(FeedbackKVConfig(**SMALL, loop="autograd")).eval()
    trace = feedback_trace(model, torch.arange(4))
    assert len(trace) == 4 and all(len(step) == 2 for step in trace)


def _scores_inputs(b=2, h=2, t=3, s=5, dh=4):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, t, dh, generator=g)
    k = torch.randn(b, h, s, dh, generator=g)
    r = torch.randn(s, h, dh, generator=g)
    u, v = torch.randn(h, dh, generator=g), torch.randn(h, dh, generator=g)
    return q, k, r, u, v


def test_relative_scores_are_q_dot_k_plus_the_distance_term():
    """The equation of the docstring, with one column per key (no `align`)."""
    q, k, r, u, v = _scores_inputs()
    got = relative_scores(q, k.transpose(2, 3), heads_first(r), u, v)
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    position = torch.einsum("bhid,jhd->bhij", q + v[:, None], r)
    torch.testing.assert_close(got, (content + position) / 2)  # sqrt(D_h = 4)


@pytest.mark.parametrize("bad, match", [
    # keys not transposed: [B, H, S, D_h] reshapes to [B*H, D_h, S] without an error
    (lambda q, k, r, u, v: (q, k, None, None, None), r"keys_t must be \[B=2, H=2, D_h=4, S\].*"
     r"got \[2, 2, 5, 4\] \(the keys untransposed\? keys_t is k.transpose\(2, 3\)\)"),
    (lambda q, k, r, u, v: (q, k.transpose(2, 3)[:1], None, None, None),
     r"keys_t must be \[B=2, H=2, D_h=4, S\], got \[1, 2, 4, 5\]"),
    (lambda q, k, r, u, v: (q[0], k.transpose(2, 3), None, None, None),
     r"q must be \[B, H, T, D_h\], got \[2, 3, 4\]"),
    # a row per distance, not heads_first(r)
    (lambda q, k, r, u, v: (q, k.transpose(2, 3), r, u, v),
     r"rel_keys must be \[H=2, D_h=4, N\].*got \[5, 2, 4\] \(a row per distance\? "
     r"use heads_first\(r\)\)"),
    (lambda q, k, r, u, v: (q, k.transpose(2, 3), heads_first(r)[..., :4], u, v),
     r"rel_keys has 4 columns, one per key needs S=5 \(or an align\)"),
    (lambda q, k, r, u, v: (q, k.transpose(2, 3), heads_first(r), u[:, None], v),
     r"u must be \[H=2, D_h=4\], got \[2, 1, 4\]"),
    (lambda q, k, r, u, v: (q, k.transpose(2, 3), heads_first(r), u, v.T),
     r"v must be \[H=2, D_h=4\], got \[4, 2\]"),
])
def test_relative_scores_name_a_wrong_shape(bad, match):
    with pytest.raises(ValueError, match=match):
        relative_scores(*bad(*_scores_inputs()))


def test_relative_scores_name_an_align_of_the_wrong_shape():
    q, k, r, u, v = _scores_inputs(t=3, s=3)
    with pytest.raises(ValueError, match=r"align must give \[B=2, H=2, T=3, S=3\], "
                                         r"got \[2, 2, 3, 3, 1\]"):
        relative_scores(q, k.transpose(2, 3), heads_first(r), u, v,
                        align=lambda p: p.unsqueeze(-1))


@pytest.mark.parametrize("t0, n, match", [
    (10, -3, r"n must be a non-negative int, got -3"),  # was a ring of 6 slots
    (0, 1, r"t0 must be a positive int, got 0"),  # was "n must be a positive int, got 0"
    (2, -5, r"n must be a non-negative int, got -5"),  # was "n ... got -4"
])
def test_ring_slots_name_their_own_arguments(t0, n, match):
    from labnn.compiled import ring_slots
    from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV

    model = FeedbackTransformerKV(FeedbackKVConfig(**SMALL, attn_len=4))
    with pytest.raises(ValueError, match=match):
        ring_slots(model, t0, n)


def test_a_padding_mask_per_example_is_told_its_form():
    """A `[B, S]` padding mask against `[B, H, T, S]` scores is read as `[T, S]` (silently
    when B == T): where it does not fit, the error names the per-example form."""
    from labnn.nn.attention import MultiHeadAttention

    mha = MultiHeadAttention(8, 2)
    x = torch.randn(3, 5, 8)
    with pytest.raises(ValueError, match=r"a padding mask per example, \[B, S\], is "
                                         r"mask\[:, None, None\]"):
        mha(x, torch.ones(3, 5, dtype=torch.bool))
    out, _, _ = mha(x, torch.ones(3, 5, dtype=torch.bool)[:, None, None])
    assert out.shape == (3, 5, 8)


def test_step_linear_names_its_own_arguments():
    """A bad `steps` was told as the inner Stack's "capacity", a call's input of the wrong
    width as "value"."""
    from labnn.feedback.step_linear import StepLinear

    lin = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match=r"steps must be a positive int, got 0"):
        StepLinear(lin, 0, torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"like must be one step's input \[B, D_in=4\], "
                                         r"got \[2, 5\]"):
        StepLinear(lin, 2, torch.zeros(2, 5))
    step = StepLinear(lin, 2, torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"x has shape \[2, 5\], expected \[2, 4\]"):
        step(torch.zeros(2, 5))


@pytest.mark.parametrize("make", [
    lambda: FeedbackTransformer(FeedbackConfig(**SMALL)),
    lambda: FeedbackTransformerKV(FeedbackKVConfig(**SMALL))])
def test_initial_state_on_another_device_is_named(make):
    """The plain model failed inside torch ("Tensor on device cpu is not on the expected
    device meta!"); the KV model made the state and refused it at the next call."""
    model = make()
    with pytest.raises(ValueError, match=r"device is meta, but the model is on cpu"):
        model.initial_state(2, device="meta")
    assert model.initial_state(2, device="cpu").__class__.__name__.endswith("State")
