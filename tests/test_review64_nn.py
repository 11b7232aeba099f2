"""Review 64 of labnn.nn: what the sampling docstring says of tiny temperatures, and the
prompt that `generate` took without a check."""

import pytest
import torch

from labnn.nn import sample_next


def test_a_temperature_below_float16s_tiny_still_samples_float16_logits():
    # the docstring said greedy below "the smallest normal number of the logits' type"
    # (6.1e-5 for float16); the draw computes in float32, whose 1.2e-38 is the limit
    logits = torch.tensor([[0.0, 0.0, -5.0]], dtype=torch.float16)
    g = torch.Generator().manual_seed(0)
    drawn = torch.stack([sample_next(logits, 1e-5, None, g) for _ in range(50)]).flatten()
    assert set(drawn.tolist()) == {0, 1}
    assert (sample_next(logits, 1e-39) == 0).all()  # below float32's: greedy
    doc = sample_next.__doc__
    assert "at least float32" in doc and "of the logits' type (1.2e-38" not in doc


def test_generate_names_a_prompt_that_is_not_a_tensor_of_ids():
    # a list prompt failed with "AttributeError: 'list' object has no attribute 'device'",
    # a float one was only refused by the model, deep in the loop
    from labnn.nn import generate

    def next_logits(new, seen, cache):
        return torch.zeros(seen.size(0), 5), None

    with pytest.raises(TypeError, match="prompt must be a torch.Tensor of token ids"):
        generate(next_logits, [[1, 2]], 3)
    with pytest.raises(TypeError, match="prompt must hold integer token ids"):
        generate(next_logits, torch.zeros(1, 2), 3)
    with pytest.raises(ValueError, match="prompt must have 2 dimensions"):
        generate(next_logits, torch.zeros(2, dtype=torch.long), 3)
    assert generate(next_logits, torch.zeros(1, 2, dtype=torch.long), 3).shape == (1, 5)
