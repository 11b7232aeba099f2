"""`labnn.training.optim.update` stepped at any rate it was given: `lr=-1.0` quietly
climbed the loss (stop 64, written failing first)."""

import pytest
import torch
from torch import nn

from labnn.training.optim import update


@pytest.mark.parametrize("lr, error", [(-1.0, ValueError), (float("nan"), ValueError),
                                       (float("inf"), ValueError), (True, TypeError),
                                       ("0.1", TypeError)])
def test_update_refuses_a_rate_that_is_not_a_finite_number_at_least_0(lr, error):
    model = nn.Linear(2, 1)
    before = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(1, 2)).sum()
    with pytest.raises(error, match="lr must be a finite number >= 0"):
        update(model, opt, loss, lr=lr, grad_clip=1.0)
    assert torch.equal(model.weight, before)  # nothing stepped


def test_update_steps_downhill_at_a_rate_of_0_1():
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.ones(1, 2)
    loss = model(x).sum()
    update(model, opt, loss, lr=0.1, grad_clip=0.0)
    assert model(x).sum() < loss
