"""Trial 49: a learner calling labnn's building blocks and models directly, with typical
mistakes. Each test below was written failing, from what the trial found: a wrong input that
passed silently (a silent wrong result), failed deep inside torch, or got a message that
misnamed it. The rule: a clear ValueError/TypeError naming the argument, its value and what
was expected, at the door (shapes, dtypes and devices only: no read of values).
"""

import dataclasses

import pytest
import torch

from labnn.feedback.stack import Stack
from labnn.nn.arguments import check_tokens
from labnn.nn.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from labnn.nn.block import TransformerBlock
from labnn.nn.layers import FeedForward
from labnn.transformer import TransformerConfig
from labnn.xl import TransformerXL, XLConfig
from labnn.xl.relative_attention import RelativeMultiHeadAttention


def test_a_cache_whose_keys_and_values_differ_in_length_is_refused():
    """The fused path attended 4 values with 3 keys' weights (no error; the output
    matched neither end of v), and handed the mismatched cache back."""
    attn = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 1, 16)
    cache = (torch.randn(2, 2, 3, 8), torch.randn(2, 2, 4, 8))
    for need_weights in (False, True):
        with pytest.raises(ValueError, match=r"cache k .*3.* v .*4|same number of keys"):
            attn(x, cache=cache, need_weights=need_weights)


def test_written_out_attention_refuses_batches_that_do_not_broadcast():
    """q of batch 2 against k and v of batch 3 failed inside einsum."""
    q, kv = torch.randn(2, 2, 3, 4), torch.randn(3, 2, 3, 4)
    with pytest.raises(ValueError, match=r"broadcast"):
        scaled_dot_product_attention(q, kv, kv)
    one = torch.randn(1, 2, 3, 4)  # broadcasting stays allowed
    out, _ = scaled_dot_product_attention(q, one, one)
    assert out.shape == (2, 2, 3, 4)


@pytest.mark.parametrize("p", [-1.0, 1.0, 2.0, True, "0.1"])
def test_written_out_attention_refuses_a_dropout_outside_0_1(p):
    """-1.0 was ignored (dropout applied only when p > 0), 2.0 failed inside torch."""
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got"):
        scaled_dot_product_attention(q, q, q, dropout_p=p, training=True)


def test_written_out_attention_refuses_a_training_flag_that_is_not_a_bool():
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(ValueError, match=r"training must be True or False, got 'yes'"):
        scaled_dot_product_attention(q, q, q, dropout_p=0.1, training="yes")


@pytest.mark.parametrize("build, pattern", [
    (lambda: MultiHeadAttention(16, 2, dropout=True), r"dropout must be in \[0, 1\), got True"),
    (lambda: MultiHeadAttention(16, 2, dropout=-1.0), r"dropout must be in \[0, 1\), got -1.0"),
    (lambda: MultiHeadAttention(16, 2, bias=1), r"bias must be True or False, got 1"),
    (lambda: FeedForward(16, -1), r"d_ff must be a positive int, got -1"),
    (lambda: FeedForward(16, 0), r"d_ff must be a positive int, got 0"),
    (lambda: FeedForward(16.0, 8), r"d_model must be a positive int, got 16.0"),
    (lambda: FeedForward(16, 8, dropout=1.5), r"dropout must be in \[0, 1\), got 1.5"),
    (lambda: TransformerBlock(16, 2, -4), r"d_ff must be a positive int, got -4"),
    (lambda: RelativeMultiHeadAttention(5, 5), r"d_model=5 must be even"),
])
def test_building_blocks_check_their_arguments_when_built(build, pattern):
    """The configs refused these; the blocks built directly did not (a negative width
    failed inside torch, d_ff=0 gave a layer of zeros, dropout=True dropped everything,
    an odd d_model for sinusoids was named `d` at the first call)."""
    with pytest.raises(ValueError, match=pattern):
        build()


def _relative():
    attn = RelativeMultiHeadAttention(16, 2).eval()
    return attn, torch.randn(2, 3, 16), causal_mask(3)


@pytest.mark.parametrize("make, pattern", [
    (lambda a: a.relative_keys(3).flatten(1), r"rel_keys must be \[R, H=2, D_h=8\]"),
    (lambda a: torch.randn(3, 4, 4), r"rel_keys must be \[R, H=2, D_h=8\]"),
    (lambda a: a.key_table(4), r"rel_keys must be \[R, H=2, D_h=8\].*key_table"),
    (lambda a: a.relative_keys(3).double(), r"rel_keys is torch.float64"),
])
def test_relative_keys_of_another_shape_or_dtype_are_refused(make, pattern):
    """Only `rel_keys.size(0)` was checked: a 2-D table failed in `permute`, a table of
    other heads in `bmm`, a float64 one in a dtype error, and `key_table(4)` (`[H, D_h, R]`)
    was said to cover "2 distances" (its H)."""
    attn, x, mask = _relative()
    with pytest.raises(ValueError, match=pattern):
        attn(x, mask, rel_keys=make(attn))


def test_a_memory_transposed_is_named_without_inventing_its_length():
    """mems[0] of shape [M, B, D] was said to be expected as [B=2, M=2, D=16]: the M
    read from the wrong tensor itself."""
    model = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=2, mem_len=4)).eval()
    x = torch.randint(11, (2, 3))
    _, mems = model(x)
    with pytest.raises(ValueError) as error:
        model(x, [m.transpose(0, 1) for m in mems])
    assert "M=2" not in str(error.value) and "[B=2, M, D=16]" in str(error.value)


def test_a_cache_made_before_model_double_is_not_blamed_on_autocast():
    model = TransformerXL(XLConfig(11, d_model=16, n_heads=2, n_layers=1, mem_len=4)).eval()
    _, cache = model.step(torch.randint(11, (1, 2)))
    model.double()
    with pytest.raises(ValueError, match=r"float32 .* but the model runs torch.float64") as error:
        model.step(torch.randint(11, (1, 1)), cache)
    assert "autocast" not in str(error.value)


@pytest.mark.parametrize("config", [
    TransformerConfig(11, d_model=16, n_heads=2, n_layers=1, seq_len=8),
    XLConfig(11, d_model=16, n_heads=2, n_layers=1, mem_len=4),
])
def test_a_models_config_cannot_be_changed_under_it(config):
    """`model.config.seq_len = 50` made the next call fail with torch's IndexError
    (`n_heads` changed was silently ignored): a config is read when the model is built,
    so it is frozen; `dataclasses.replace` makes another for another model."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seq_len = 50
    assert dataclasses.replace(config, d_model=32).d_model == 32


def test_stack_refuses_a_bool_dim():
    with pytest.raises(ValueError, match=r"dim=True"):
        Stack(2, torch.zeros(3), dim=True)


def test_token_messages_say_what_is_accepted():
    with pytest.raises(ValueError, match=r"token must have 1 dimension, got"):
        check_tokens(torch.zeros(1, 1, dtype=torch.long), 5, "token", 1)
    with pytest.raises(TypeError, match=r"torch.long or torch.int32"):
        check_tokens(torch.zeros(1, 1), 5)
