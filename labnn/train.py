"""A small trainer for every labnn language model: AdamW, warmup + cosine, clipping, evaluation, checkpoints.

Dimension letters: `B` batch, `T` tokens per row, `V` vocabulary, `N` ids in a split.

Models are called as `logits, state = model(x, state)`. With `TrainConfig(stream=True)` batches are contiguous
streams (`labnn.data.stream_batches`) and the state a model returns (Transformer-XL's memory, the Feedback
Transformer's memory) is passed to the next batch and dropped at stream boundaries; the model detaches it.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import checkpoint as ckpt
from .data.batching import num_stream_batches, random_batch, stream_batch
from .progress import progress


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`device` if given, else CUDA, then Apple's MPS, then the CPU (or `$LABNN_DEVICE` when set)."""
    device = device or os.environ.get("LABNN_DEVICE")
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@dataclass
class TrainConfig:
    """How to train. Defaults follow nanoGPT's small character-level Shakespeare recipe.

    Args:
        max_iters: optimisation steps.
        batch_size: rows per batch `B`.
        seq_len: tokens per row `T`.
        lr: peak learning rate, reached after `warmup_iters` linear steps, then cosine-decayed to `min_lr`.
        min_lr: final learning rate (default `lr / 10`).
        warmup_iters: linear warm-up steps.
        weight_decay: AdamW decay, applied to matrices only (not to biases, norms or position tables).
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
        for name in ("max_iters", "batch_size", "seq_len", "eval_interval", "eval_iters"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.lr <= 0 or self.warmup_iters < 0 or self.grad_clip < 0:
            raise ValueError(f"need lr > 0, warmup_iters >= 0, grad_clip >= 0; got {self.lr}, {self.warmup_iters}, {self.grad_clip}")
        if self.min_lr is None:
            self.min_lr = self.lr / 10

    def lr_at(self, it: int) -> float:
        """Learning rate of step `it`: linear warm-up, then cosine decay to `min_lr` at `max_iters`."""
        if it < self.warmup_iters:
            return self.lr * (it + 1) / self.warmup_iters
        progress_ = (it - self.warmup_iters) / max(1, self.max_iters - self.warmup_iters)
        return self.min_lr + 0.5 * (1 + math.cos(math.pi * min(1.0, progress_))) * (self.lr - self.min_lr)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy. Shape: logits `[B, T, V]`, targets `[B, T]` -> scalar."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


@torch.no_grad()
def evaluate(model: nn.Module, ids: torch.Tensor, config: TrainConfig, device: torch.device | None = None) -> float:
    """Mean loss over `config.eval_iters` batches of `ids`, the same batches every time.

    Stream models read the first `eval_iters` contiguous batches with their memory carried; others read
    windows at offsets drawn from a generator seeded with `config.seed`.
    """
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    losses, state = [], None
    if config.stream:
        n = min(config.eval_iters, num_stream_batches(ids, config.batch_size, config.seq_len))
        batches = (stream_batch(ids, config.batch_size, config.seq_len, i) for i in range(n))
    else:
        g = torch.Generator().manual_seed(config.seed)
        batches = (random_batch(ids, config.batch_size, config.seq_len, g) for _ in range(config.eval_iters))
    for x, y in batches:
        logits, state = model(x.to(device), state) if config.stream else model(x.to(device))
        losses.append(lm_loss(logits, y.to(device)).item())
    model.train(was_training)
    return sum(losses) / len(losses)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Matrices decay; vectors (biases, norms) do not. Shared (tied) parameters appear once."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


@dataclass
class Trainer:
    """Train `model` on `train_ids`, evaluating on `val_ids`; `fit()` returns the history for plots.

    Resuming with `fit(resume=True)` from `config.checkpoint` continues exactly as an uninterrupted run would.
    """

    model: nn.Module
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    config: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        self.device = pick_device(self.config.device)
        self.model.to(self.device)
        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, self.config.weight_decay), lr=self.config.lr, betas=self.config.betas
        )
        self.generator = torch.Generator().manual_seed(self.config.seed)
        self.iter, self.state = 0, None
        self.history: dict[str, list[float]] = {k: [] for k in ("iter", "train_loss", "val_loss", "lr", "time")}
        self.elapsed = 0.0

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        if c.stream:
            i = self.iter % num_stream_batches(self.train_ids, c.batch_size, c.seq_len)
            if i == 0:
                self.state = None  # a new pass: memory from the end of the text must not leak into its start
            x, y = stream_batch(self.train_ids, c.batch_size, c.seq_len, i)
        else:
            x, y = random_batch(self.train_ids, c.batch_size, c.seq_len, self.generator)
        return x.to(self.device), y.to(self.device)

    def train_step(self) -> float:
        """One optimisation step; returns its loss."""
        c = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = c.lr_at(self.iter)
        x, y = self.batch()
        if c.stream:
            logits, self.state = self.model(x, self.state)
        else:
            logits, _ = self.model(x)
        loss = lm_loss(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        self.optimizer.step()
        self.iter += 1
        return loss.item()

    def record(self) -> None:
        h = self.history
        h["iter"].append(self.iter)
        h["train_loss"].append(evaluate(self.model, self.train_ids, self.config, self.device))
        h["val_loss"].append(evaluate(self.model, self.val_ids, self.config, self.device))
        h["lr"].append(self.config.lr_at(max(0, self.iter - 1)))
        h["time"].append(self.elapsed)

    def fit(self, resume: bool = False) -> dict[str, list[float]]:
        """Train until `config.max_iters`; with `resume`, first restore `config.checkpoint` if it exists."""
        c = self.config
        if resume and c.checkpoint and Path(c.checkpoint).exists():
            self.load(c.checkpoint)
        self.model.train()
        bar = progress(total=c.max_iters, initial=self.iter, desc="train", disable=not c.show_progress)
        if self.iter == 0:
            self.record()  # where training starts, for the loss curve
        start = time.perf_counter() - self.elapsed
        while self.iter < c.max_iters:
            loss = self.train_step()
            self.elapsed = time.perf_counter() - start
            bar.update(1)
            if self.iter % c.eval_interval == 0 or self.iter == c.max_iters:
                self.record()
                bar.set_postfix(loss=f"{loss:.3f}", val=f"{self.history['val_loss'][-1]:.3f}")
                if c.checkpoint:
                    self.save(c.checkpoint)
                start = time.perf_counter() - self.elapsed  # evaluation time is not training time
        bar.close()
        return self.history

    def save(self, path: str | Path, **extra) -> Path:
        """Write everything needed to continue exactly: weights, optimiser, RNG states, carried state, history."""
        return ckpt.save_atomic(
            {
                "model_class": type(self.model).__name__,
                "model_config": ckpt.config_dict(self.model.config),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "train_config": asdict(self.config),
                "iter": self.iter,
                "elapsed": self.elapsed,
                "history": self.history,
                "generator": self.generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "state": self.state,
                **extra,
            },
            path,
        )

    def load(self, path: str | Path) -> dict:
        """Restore a checkpoint written by `save`; `ValueError` when it was saved from another model config."""
        saved = ckpt.load(path, map_location=self.device)
        ckpt.check_compatible(saved, self.model, path)
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.iter, self.elapsed, self.history, self.state = saved["iter"], saved["elapsed"], saved["history"], saved["state"]
        self.generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        if saved["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        return saved
