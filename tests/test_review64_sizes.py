"""Review 64: a size given as a float (`d_model=64.0`) or a bool is a TypeError, as
`labnn.nn.arguments.check_int` raises it everywhere else (an `ArgumentTypeError`, which
is a ValueError too, so code that caught ValueError keeps working); a bad int stays a
ValueError."""

import pytest
import torch

from labnn.data.recall import recall_batch
from labnn.feedback import FeedbackConfig, FeedbackTransformerKV, FeedbackKVConfig, KVState
from labnn.feedback.stack import Stack
from labnn.nn import causal_mask, sinusoidal_encoding
from labnn.nn.arguments import ArgumentTypeError
from labnn.plot.figures import line_plot, panels
from labnn.plot.scenes import reach_steps
from labnn.training import TrainConfig
from labnn.xl import XLConfig


def kv_step(offset):
    model = FeedbackTransformerKV(FeedbackKVConfig(7, d_model=8, n_heads=2, n_layers=1))
    state = KVState(model.initial_state(1).kv, offset)
    return model(torch.zeros(1, 1, dtype=torch.long), state)


CALLS = {
    "sinusoidal d": lambda v: sinusoidal_encoding(torch.arange(3), v),
    "causal_mask t": lambda v: causal_mask(v, 4),
    "causal_mask s": lambda v: causal_mask(2, v),
    "clamp_len": lambda v: XLConfig(7, d_model=8, n_heads=2, clamp_len=v),
    "state.offset": kv_step,
    "Stack capacity": lambda v: Stack(v, torch.zeros(2, 3), dim=0),
    "Stack dim": lambda v: Stack(4, torch.zeros(2, 3), dim=v),
    "warmup_iters": lambda v: TrainConfig(warmup_iters=v),
    "recall seq_len": lambda v: recall_batch(torch.tensor([0]), v),
    "panels n": lambda v: panels(v),
    "line_plot smooth": lambda v: line_plot([0, 1, 2], {"a": [1, 2, 3]}, smooth=v),
    "reach_steps n_layers": lambda v: reach_steps({"m": causal_mask(3)}, v),
}
FLOATS = {"sinusoidal d": 4.0, "causal_mask t": 2.0, "causal_mask s": 4.0, "clamp_len": 2.0,
          "state.offset": 0.0, "Stack capacity": 4.0, "Stack dim": 0.0, "warmup_iters": 2.0,
          "recall seq_len": 6.0, "panels n": 2.0, "line_plot smooth": 2.0,
          "reach_steps n_layers": 2.0}
BAD_INTS = {"sinusoidal d": 3, "causal_mask t": -1, "causal_mask s": 1, "clamp_len": 0,
            "state.offset": -1, "Stack capacity": 0, "Stack dim": 5, "warmup_iters": -1,
            "recall seq_len": 1, "panels n": 0, "line_plot smooth": 0,
            "reach_steps n_layers": 0}


@pytest.mark.parametrize("name", CALLS)
def test_a_float_size_is_a_type_error(name):
    with pytest.raises(ArgumentTypeError):
        CALLS[name](FLOATS[name])


@pytest.mark.parametrize("name", CALLS)
def test_a_bool_size_is_a_type_error(name):
    with pytest.raises(TypeError):
        CALLS[name](True)


@pytest.mark.parametrize("name", CALLS)
def test_a_bad_int_size_stays_a_value_error(name):
    with pytest.raises(ValueError) as err:
        CALLS[name](BAD_INTS[name])
    assert not isinstance(err.value, TypeError)


def test_the_config_door_already_says_type_error():
    with pytest.raises(TypeError, match="d_model"):
        FeedbackConfig(7, d_model=64.0)
