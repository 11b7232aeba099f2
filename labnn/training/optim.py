r"""One optimisation step, shared by every training loop of the package.

`labnn.training.trainer.Trainer` (language modelling on a corpus) and the task loops of
`labnn.training.tasks` (the printed values of programs, delayed recall) differ in what
they batch, which loss they take and how the learning rate moves; the update itself is
the same:

$$g = \nabla_\theta \ell, \qquad
g \leftarrow g \cdot \min\!\Big(1, \frac{c}{\lVert g \rVert}\Big), \qquad
\theta \leftarrow \mathrm{AdamW}(\theta, g, \eta)$$

with $c$ the clipping threshold and $\eta$ this step's learning rate. A NaN or infinite
loss or gradient norm stops training before the weights change (the task loops, which
read it on the device at an interval, stop at their next read).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from labnn.nn.arguments import check_number


class Diverged(FloatingPointError):
    """The loss or the gradient norm is NaN or infinite; `update` left the weights
    unchanged (the task loops' `check_steps` says at which step, some steps later)."""


class TrainingDiverged(FloatingPointError):
    """Training met a NaN or infinite loss or gradient norm and stopped (the weights are
    those of the step before).

    The advice is data: `knobs` holds the `TrainConfig` fields that tame a divergence,
    with their values, so that a front end names them its own way (the command line's
    `--lr`; `message(names=...)`) rather than rewriting this message.

    Attributes:
        reason: what was not finite, e.g. `"the loss is nan"`.
        iteration: the iteration it happened at.
        knobs: `{"lr": ..., "grad_clip": ...}`, the values this run used.
        checkpoint: `TrainConfig.checkpoint`. saved_iter: the iteration it holds, or
            `None` when nothing was written.
    """

    def __init__(self, reason: str, iteration: int, knobs: dict[str, float],
                 checkpoint: str | None, saved_iter: int | None):
        self.reason, self.iteration, self.knobs = reason, iteration, knobs
        self.checkpoint, self.saved_iter = checkpoint, saved_iter
        super().__init__(self.message())

    def message(self, names: dict[str, str] | None = None) -> str:
        """The error's sentence, each knob called `names[field]` (a knob `names`
        leaves out is not offered; `None`: every knob by its field name)."""
        names = names if names is not None else {k: k for k in self.knobs}
        lr, clip = names.get("lr"), names.get("grad_clip")
        tries = [f"a lower {lr} (now {self.knobs['lr']:g})"] if lr else []
        if clip:
            value = self.knobs["grad_clip"]
            tries.append(f"{clip} (now {value:g})" if value else
                         f"a {clip} (now 0: no clipping)")
        if self.saved_iter is None:
            kept = "no checkpoint was written"
        else:
            kept = (f"the last checkpoint, {self.checkpoint}, is from iteration "
                    f"{self.saved_iter}")
        advice = f". Try {' or '.join(tries)}" if tries else ""
        return (f"{self.reason} at iteration {self.iteration}: training diverged"
                f"{advice}; {kept}")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's two groups: matrices and tables decay (every parameter of two or more
    dimensions); vectors (biases, norms) do not.

    Shared (tied) parameters appear once.
    """
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def check_weight_dtype(model: nn.Module) -> None:
    """Raise a clear error if `model` has float16 parameters, which AdamW cannot train: its
    `eps` (1e-8) is 0 in float16, so a weight whose squared gradients round to 0 divides
    0 by 0 at the first step, and every later loss is NaN (bfloat16 reaches 1e-8).
    bfloat16 parameters train, with a loss: a step smaller than about 1/256 of its weight
    (8 significant bits) rounds away, as most do at a warm-up's first learning rates."""
    half = [n for n, p in model.named_parameters() if p.dtype == torch.float16]
    if half:
        raise TypeError(
            f"model has torch.float16 parameters ({len(half)}, e.g. {half[0]!r}): AdamW "
            "cannot train them (its eps=1e-8 is 0 in float16, and its first step makes them "
            "NaN); keep them float32 and compute in float16 under torch.autocast (bfloat16 "
            "weights train, but a step under about 1/256 of a weight rounds away)")


def check_grad_mode(model: nn.Module, who: str) -> None:
    """Raise a `RuntimeError` naming why `who` (a training loop) cannot train `model`
    here: gradients are off, or its parameters are inference tensors (which autograd
    never tracks)."""
    if torch.is_inference_mode_enabled():
        block = "torch.inference_mode()"
    elif not torch.is_grad_enabled():
        block = "torch.no_grad() (or torch.set_grad_enabled(False))"
    else:
        frozen = [n for n, p in model.named_parameters() if p.is_inference()]
        if frozen:
            raise RuntimeError(
                f"the parameters of the model ({len(frozen)}, e.g. {frozen[0]!r}) were "
                "created under torch.inference_mode(), and autograd cannot train them: "
                "build the model outside that block")
        return
    raise RuntimeError(f"{who} needs gradients, but it was called under {block}: call it "
                       "outside that block")


def update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    *,
    lr: float,
    grad_clip: float,
    finite: torch.Tensor | None = None,
) -> torch.Tensor:
    """Backpropagate `loss`, clip the global gradient norm to `grad_clip`, step at `lr`.

    Args:
        model: whose parameters' gradients are clipped.
        optimizer: steps those parameters; every group's learning rate becomes `lr`.
        loss: a scalar to minimise.
        lr: this step's learning rate, a finite number >= 0 (a negative one climbs).
        grad_clip: the largest gradient norm kept (0 or None: no clipping).
        finite: None: the loss and the norm are checked here, one read back to the host
            per step. Else a boolean tensor on the device, and-ed in place with "both are
            finite", read by the caller when it chooses (`labnn.training.tasks`' loops,
            at an interval): nothing waits for the device, and the step is taken anyway.

    Returns:
        The gradient norm before clipping.

    Raises:
        ValueError: `lr` or `grad_clip` is negative or not finite (`TypeError`: not a
            number); nothing is stepped.
        Diverged: the loss or the norm is NaN or infinite (the weights are unchanged);
            only when `finite` is None.
    """
    check_number("lr", lr)
    if grad_clip is not None:  # a negative norm would flip every gradient: an ascent
        check_number("grad_clip", grad_clip, expected="a finite number >= 0 (0 or None: no "
                     "clipping)")
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip or math.inf)
    if finite is not None:
        finite &= torch.isfinite(loss.detach() + norm)
    elif not torch.isfinite(loss.detach() + norm):  # NaN or inf in either
        what, value = (
            ("loss", loss) if not torch.isfinite(loss) else ("gradient norm", norm)
        )
        raise Diverged(f"the {what} is {value.item()}")
    optimizer.step()
    return norm
