"""Review 63 of labnn.xl: a mask of the opposite polarity was read without a word."""

import pytest
import torch

from labnn.nn.attention import causal_mask
from labnn.xl import TransformerXL, XLConfig


def _model():
    torch.manual_seed(0)
    return TransformerXL(XLConfig(13, d_model=16, n_heads=2, n_layers=2, mem_len=4)).eval()


def test_an_inverted_causal_mask_is_refused():
    # True = masked (nn.Transformer's polarity): every query read only the later keys
    model, x = _model(), torch.randint(0, 13, (2, 5))
    _, mems = model(x)
    with pytest.raises(ValueError, match="True = may attend"):
        model(x, mems, mask=~causal_mask(5, 9))
    with pytest.raises(ValueError, match="inverted"):
        model(x, mask=torch.ones(5, 5, dtype=torch.bool).triu(1))


def test_masks_that_see_later_keys_and_themselves_still_run():
    model, x = _model(), torch.randint(0, 13, (2, 5))
    full, _ = model(x, mask=torch.ones(5, 5, dtype=torch.bool))  # bidirectional
    assert full.shape == (2, 5, 13)
    causal, _ = model(x, mask=causal_mask(5, 5))
    torch.testing.assert_close(causal, model(x)[0])
