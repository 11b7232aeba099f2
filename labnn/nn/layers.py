r"""Building blocks every model of the package shares: the feed-forward network, the
initialisation, the parameter count, and a mode (training or evaluation) for a block of
code.

Dimension letters: `D` model width, `F` feed-forward width.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from labnn.nn.arguments import check_bool, check_dropout, check_int

INIT_STD = 0.02  # GPT-2's initial weight scale


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network:
    $\mathrm{FF}(x) = W_2\,\mathrm{GELU}(W_1 x + b_1) + b_2$.

    Shape:
        `[..., D]` -> `[..., D]`.
    """

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0, bias: bool = True):
        """`up` is $W_1$ (weight `[F, D]`), `down` is $W_2$ (weight `[D, F]`)."""
        super().__init__()
        check_int("d_model", d_model)
        check_int("d_ff", d_ff)
        check_dropout(dropout)
        check_bool("bias", bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, *, up: Callable | None = None,
                down: Callable | None = None) -> torch.Tensor:
        """Widen, apply GELU, narrow back (dropout on the result).

        Args:
            x: the input.
            up, down: what applies $W_1$ and $W_2$ (default: `self.up`, `self.down`);
                the feedback layers pass `labnn.feedback.step_linear.StepLinear`s, which
                keep a block's inputs for one weight gradient.
        """
        up = self.up if up is None else up
        down = self.down if down is None else down
        return self.dropout(down(F.gelu(up(x))))


def num_params(module: nn.Module) -> int:
    """Number of trainable parameters of `module`; a tied weight (the embedding shared
    with the output head) is counted once, as `module.parameters()` yields it once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def init_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation, for `model.apply`: normal(0, `INIT_STD`) weights,
    zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


@contextlib.contextmanager
def in_mode(model: nn.Module, training: bool) -> Iterator[nn.Module]:
    """`model` and every submodule in training mode (`training=True`) or eval mode inside
    the `with` block; afterwards each module's own mode is back, even after an error.

    `model.train(was_training)` would not do: it sets every submodule to the top
    module's mode, so one left in eval mode on purpose would be switched back to
    training.
    """
    modes = [(module, module.training) for module in model.modules()]
    model.train(training)
    try:
        yield model
    finally:
        for module, was_training in modes:
            module.training = was_training


def evaluating(model: nn.Module) -> contextlib.AbstractContextManager[nn.Module]:
    """`in_mode(model, training=False)`: eval mode inside the `with` block, each module's
    own mode back afterwards."""
    return in_mode(model, training=False)


def past_the_door(model: nn.Module, method: str = "forward") -> Callable:
    """How a loop calls `model` on ids it checked where they entered (the `Trainer`'s
    corpus, `evaluate`'s and `stream_loss`'s): its `forward_checked_ids`, labnn's
    `forward` less the scan of the ids (a read back to the host per call). `model`
    itself where that would skip something: it has no `forward_checked_ids`, its
    `forward` is not labnn's (a subclass's own, or one set on the instance), or a hook
    is registered on it (hooks run only in `model(...)`).

    `method="stream_logits"`: its `stream_logits_checked_ids` likewise (which calls
    `forward` past the door, hooks and all), else its own `stream_logits`.
    """
    own = getattr(type(model), method, None)
    labnn = getattr(own, "__module__", "").startswith("labnn.")
    hooked = method == "forward" and (model._forward_hooks or model._forward_pre_hooks)
    public = model if method == "forward" else getattr(model, method)
    if method in vars(model) or not labnn or hooked:
        return public
    return getattr(model, f"{method}_checked_ids", public)
