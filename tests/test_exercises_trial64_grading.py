"""The shared gradient check (`labnn.exercises.grading.compare`) asked a result rebuilt
from its values (`torch.tensor(t.tolist())`, `torch.as_tensor(t.numpy())`) whether it was
detached with `.detach()`, `.data` or `torch.no_grad()`, none of which the learner wrote
(stop 64, trial of notebook 03; written failing first)."""

import pytest
import torch

from labnn.exercises.feedback_transformer import check_relative_bias


def rebuilt(table, s):
    copy = torch.tensor(table.tolist(), dtype=table.dtype)
    return copy[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1]


def test_a_result_rebuilt_from_its_values_is_named():
    with pytest.raises(AssertionError) as err:
        check_relative_bias(rebuilt)
    assert "rebuilt from its values" in str(err.value), str(err.value)
    assert len(str(err.value)) < 400
