"""Review 63 of labnn.nn: sampling from something that is not logits."""

import pytest
import torch

from labnn.nn.generation import sample_next


@pytest.mark.parametrize("logits", [torch.tensor([[False, True]]), torch.tensor([[0, 3, 2]])])
def test_sample_next_refuses_logits_that_are_not_floating(logits):
    # a mask or the argmax ids passed by mistake were read as logits 0 and 1 and sampled
    with pytest.raises(TypeError, match="logits"):
        sample_next(logits, 1.0)
