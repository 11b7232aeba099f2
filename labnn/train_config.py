r"""How to train: the hyper-parameters of `labnn.train.Trainer` and its learning-rate
schedule.

Dimension letters (the package legend): `B` batch, `T` tokens per row.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from .checks import check_bool, check_int, check_number, is_int, is_number

# fields that may change between a run and its resumption (they do not change the steps)
RESUMABLE_CHANGES = (
    "max_iters", "eval_interval", "eval_iters", "device", "checkpoint", "show_progress"
)


@dataclass
class TrainConfig:
    """How to train. Defaults follow nanoGPT's small character-level Shakespeare recipe.

    Args:
        max_iters: optimisation steps.
        batch_size: rows per batch `B`.
        seq_len: tokens per row `T`.
        lr: peak learning rate, reached after `warmup_iters` linear steps, then
            cosine-decayed to `min_lr`.
        min_lr: final learning rate (default `lr / 10`).
        warmup_iters: linear warm-up steps.
        weight_decay: AdamW decay, applied to matrices only (not to biases, norms or
            position tables).
        betas: AdamW betas.
        grad_clip: clip the global gradient norm to this (0 disables).
        eval_interval: evaluate every this many steps (and at the end).
        eval_iters: batches per evaluation.
        stream: contiguous-stream batches with model state carried across them.
        seed: seeds parameters' dropout, batch order and evaluation batches.
        device: where to train (default `pick_device()`).
        checkpoint: path to write at every evaluation (atomically); None writes nothing.
        show_progress: show a progress bar.
    """

    max_iters: int = 2000
    batch_size: int = 12
    seq_len: int = 64
    lr: float = 1e-3
    min_lr: float | None = None
    warmup_iters: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0
    eval_interval: int = 250
    eval_iters: int = 20
    stream: bool = False
    seed: int = 1337
    device: str | None = None
    checkpoint: str | None = None
    show_progress: bool = True

    def __post_init__(self) -> None:
        """Check every field (one rule per kind, `labnn.checks`); fill in `min_lr`."""
        for name in ("max_iters", "batch_size", "seq_len", "eval_interval", "eval_iters"):
            check_int(name, getattr(self, name))
        if not is_int(self.warmup_iters) or self.warmup_iters < 0:
            raise ValueError(
                f"warmup_iters must be an int >= 0, got {self.warmup_iters!r}"
            )
        check_int("seed", self.seed, low=0)
        check_number("lr", self.lr, above=True)
        if self.min_lr is None:
            self.min_lr = self.lr / 10
        check_number("min_lr", self.min_lr, high=self.lr, expected=(
            f"a finite number >= 0 and <= lr={self.lr}, or None (lr / 10)"))
        check_number("weight_decay", self.weight_decay)
        check_number(
            "grad_clip", self.grad_clip, expected="a finite number >= 0 (0 disables)"
        )
        betas = self.betas
        pair = isinstance(betas, (tuple, list)) and len(betas) == 2
        if not pair or not all(is_number(b) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.betas = tuple(betas)
        check_bool("stream", self.stream)
        check_bool("show_progress", self.show_progress)
        if not (self.device is None or isinstance(self.device, (str, torch.device))):
            raise ValueError(f"device must be a device name or None, got {self.device!r}")
        if not (
            self.checkpoint is None or isinstance(self.checkpoint, (str, os.PathLike))
        ):
            raise ValueError("checkpoint must be a path (str or os.PathLike) or None, "
                             f"got {self.checkpoint!r}")
        if self.checkpoint is not None:
            self.checkpoint = os.fspath(self.checkpoint)

    def lr_at(self, it: int) -> float:
        r"""Learning rate of step `it`: a linear warm-up over $w$ steps, then a cosine
        decay from $\eta$ (`lr`) to $\eta_{\min}$ (`min_lr`) at step $n$ (`max_iters`):

        $$\eta_i = \eta\,\frac{i + 1}{w} \;(i < w), \qquad
        \eta_i = \eta_{\min} + \tfrac12\big(1 + \cos(\pi p)\big)(\eta - \eta_{\min}),
        \; p = \min\!\Big(1, \frac{i - w}{n - w}\Big).$$
        """
        if it < self.warmup_iters:
            return self.lr * (it + 1) / self.warmup_iters
        done = (it - self.warmup_iters) / max(1, self.max_iters - self.warmup_iters)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, done)))
        return self.min_lr + cosine * (self.lr - self.min_lr)
