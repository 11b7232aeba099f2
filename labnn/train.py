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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import checkpoint as ckpt
from . import distributed
from .data.batching import num_stream_batches, random_batch, stream_batch
from .progress import progress


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`device` if given, else CUDA, then Apple's MPS, then the CPU (or `$LABNN_DEVICE` when set).

    Raises:
        ValueError: `device` is not a device name, or names a kind of device this machine does not have.
    """
    device = device or os.environ.get("LABNN_DEVICE")
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        picked = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device name (expected 'cpu', 'cuda', 'cuda:1', 'mps')") from None
    if picked.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} was asked for, but CUDA is not available here; use 'cpu'")
        if picked.index is not None and picked.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} was asked for, but there are {torch.cuda.device_count()} GPUs")
    mps = getattr(torch.backends, "mps", None)
    if picked.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"device {device!r} was asked for, but Apple's MPS is not available here; use 'cpu'")
    return picked


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check(name: str, value, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}")


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
            _check(name, getattr(self, name), _is_int(getattr(self, name)) and getattr(self, name) > 0,
                   "a positive int")
        _check("warmup_iters", self.warmup_iters, _is_int(self.warmup_iters) and self.warmup_iters >= 0,
               "an int >= 0")
        _check("seed", self.seed, _is_int(self.seed) and self.seed >= 0, "a non-negative int")
        _check("lr", self.lr, _is_real(self.lr) and self.lr > 0, "a finite number > 0")
        if self.min_lr is None:
            self.min_lr = self.lr / 10
        _check("min_lr", self.min_lr, _is_real(self.min_lr) and 0 <= self.min_lr <= self.lr,
               f"a finite number >= 0 and <= lr={self.lr}, or None (lr / 10)")
        _check("weight_decay", self.weight_decay, _is_real(self.weight_decay) and self.weight_decay >= 0,
               "a finite number >= 0")
        _check("grad_clip", self.grad_clip, _is_real(self.grad_clip) and self.grad_clip >= 0,
               "a finite number >= 0 (0 disables)")
        betas_ok = isinstance(self.betas, (tuple, list)) and len(self.betas) == 2
        _check("betas", self.betas, betas_ok and all(_is_real(b) and 0 <= b < 1 for b in self.betas),
               "two numbers in [0, 1)")
        self.betas = tuple(self.betas)
        for name in ("stream", "show_progress"):
            _check(name, getattr(self, name), isinstance(getattr(self, name), bool), "True or False")
        _check("device", self.device, self.device is None or isinstance(self.device, (str, torch.device)),
               "a device name or None")
        path_ok = self.checkpoint is None or isinstance(self.checkpoint, (str, os.PathLike))
        _check("checkpoint", self.checkpoint, path_ok, "a path (str or os.PathLike) or None")
        if self.checkpoint is not None:
            self.checkpoint = os.fspath(self.checkpoint)

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


# fields that may change between a run and its resumption (they do not change the training steps)
RESUMABLE_CHANGES = ("max_iters", "eval_interval", "eval_iters", "device", "checkpoint", "show_progress")


def check_ids(name: str, ids: torch.Tensor, config: TrainConfig, vocab_size: int | None) -> None:
    """Raise a clear error unless `ids` can feed batches of `config` to a model of `vocab_size` tokens."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.is_complex():
        got = type(ids).__name__
        if isinstance(ids, torch.Tensor):
            got = f"{str(ids.dtype).removeprefix('torch.')} {list(ids.shape)}"
        raise TypeError(f"{name} must be a 1-D integer tensor, got {got}")
    b, t = config.batch_size, config.seq_len
    if config.stream and (len(ids) - 1) // b < t:
        raise ValueError(f"{name} hold {len(ids)} tokens: too few for {b} streams of seq_len={t} + 1 tokens")
    if not config.stream and len(ids) <= t:
        raise ValueError(f"{name} hold {len(ids)} tokens, too few for seq_len={t} (need at least {t + 1})")
    low, high = ids.aminmax()
    if vocab_size is not None and (low < 0 or high >= vocab_size):
        raise ValueError(
            f"{name} hold ids in [{low}, {high}], outside the model's vocabulary [0, {vocab_size})"
        )


@dataclass
class Trainer:
    """Train `model` on `train_ids`, evaluating on `val_ids`; `fit()` returns the history for plots.

    Resuming with `fit(resume=True)` from `config.checkpoint` continues exactly as an uninterrupted run would.
    Under `torchrun` each process trains on its share of every batch and rank 0 alone evaluates and saves
    (`labnn.distributed`); the code below reads as for one process.

    Args:
        model: a labnn language model (`logits, state = model(x, state)`, with a `config`).
        train_ids: token ids to train on `[N]`.
        val_ids: token ids to evaluate on `[N]`.
        config: how to train.
        extra: entries written into every checkpoint beside the training state (the CLI's tokenizer).
    """

    model: nn.Module
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    config: TrainConfig = field(default_factory=TrainConfig)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(self.config).__name__}")
        vocab_size = getattr(getattr(self.model, "config", None), "vocab_size", None)
        check_ids("train_ids", self.train_ids, self.config, vocab_size)
        check_ids("val_ids", self.val_ids, self.config, vocab_size)
        self.ranks, self.device = distributed.setup(pick_device(self.config.device), self.config.batch_size)
        self.model.to(self.device)
        self.train_model = distributed.wrap(self.model, self.ranks, self.device)  # `model` in one process
        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, self.config.weight_decay), lr=self.config.lr, betas=self.config.betas
        )
        self.generator = torch.Generator().manual_seed(self.config.seed)
        self.iter, self.state, self.saved_iter = 0, None, None
        self.history: dict[str, list[float]] = {k: [] for k in ("iter", "train_loss", "val_loss", "lr", "time")}
        self.elapsed = 0.0

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next global batch's rows for this process (all of them in one process)."""
        c = self.config
        if c.stream:
            i = self.iter % num_stream_batches(self.train_ids, c.batch_size, c.seq_len)
            if i == 0:
                self.state = None  # a new pass: memory from the end of the text must not leak into its start
            x, y = stream_batch(self.train_ids, c.batch_size, c.seq_len, i)
        else:
            x, y = random_batch(self.train_ids, c.batch_size, c.seq_len, self.generator)
        return self.ranks.rows(x).to(self.device), self.ranks.rows(y).to(self.device)

    def train_step(self) -> float:
        """One optimisation step; returns its loss.

        Raises:
            FloatingPointError: the loss or the gradient norm is NaN or infinite; the weights are left unchanged.
        """
        c = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = c.lr_at(self.iter)
        x, y = self.batch()
        if c.stream:
            logits, self.state = self.train_model(x, self.state)
        else:
            logits, _ = self.train_model(x)
        loss = lm_loss(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip or math.inf)
        if not torch.isfinite(loss.detach() + norm):  # NaN or inf in either
            self.diverged(loss, norm)
        self.optimizer.step()
        self.iter += 1
        return loss.item()

    def diverged(self, loss: torch.Tensor, norm: torch.Tensor) -> None:
        """Stop with an error that says what went wrong, where, and what was kept."""
        what, value = ("loss", loss) if not torch.isfinite(loss) else ("gradient norm", norm)
        kept = (
            f"the last checkpoint, {self.config.checkpoint}, is from iteration {self.saved_iter}"
            if self.saved_iter is not None else "no checkpoint was written"
        )
        raise FloatingPointError(
            f"the {what} is {value.item()} at iteration {self.iter}: training diverged. Try a lower lr "
            f"(now {self.config.lr:g}) or grad_clip; {kept}"
        )

    def record(self) -> None:
        """Evaluate on both splits and append to the history (rank 0 only)."""
        if not self.ranks.is_main:
            return
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
        show = c.show_progress and self.ranks.is_main
        with progress(total=c.max_iters, initial=self.iter, desc="train", disable=not show) as bar:
            if self.iter == 0:
                self.record()  # where training starts, for the loss curve
            start = time.perf_counter() - self.elapsed
            while self.iter < c.max_iters:
                loss = self.train_step()
                self.elapsed = time.perf_counter() - start
                bar.update(1)
                if self.iter % c.eval_interval == 0 or self.iter == c.max_iters:
                    self.record()
                    loss = distributed.mean(loss, self.ranks)  # over all rows, not this process's share
                    if self.ranks.is_main:
                        bar.set_postfix(loss=f"{loss:.3f}", val=f"{self.history['val_loss'][-1]:.3f}")
                    if c.checkpoint:
                        self.save(c.checkpoint)
                    start = time.perf_counter() - self.elapsed  # evaluation time is not training time
        return self.history

    def save(self, path: str | Path, **extra) -> Path:
        """Write everything needed to continue exactly: weights, optimiser, RNG states, carried state, history.

        Under `torchrun` every rank calls it (to gather the carried state) and rank 0 writes.
        """
        state = distributed.gather_state(self.state, self.ranks)
        if self.ranks.is_main:
            ckpt.save_atomic(
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
                    "state": state,
                    **self.extra,
                    **extra,
                },
                path,
            )
        self.saved_iter = self.iter
        return Path(path)

    def load(self, path: str | Path) -> dict:
        """Restore a checkpoint written by `save`.

        Raises:
            ValueError: it was saved from another model config, or with training settings that would make
                the continuation differ from an uninterrupted run (any field but `RESUMABLE_CHANGES`).
        """
        saved = ckpt.load(path, map_location=self.device)
        ckpt.check_compatible(saved, self.model, path)
        mine = asdict(self.config)
        diffs = [
            f"{k}: checkpoint {saved['train_config'].get(k)!r} vs now {mine[k]!r}"
            for k in mine
            if k not in RESUMABLE_CHANGES and saved["train_config"].get(k) != mine[k]
        ]
        if diffs:
            raise ValueError(f"checkpoint {path} was saved with another training config — " + "; ".join(diffs))
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.iter, self.elapsed, self.history = saved["iter"], saved["elapsed"], saved["history"]
        self.state = distributed.state_rows(saved["state"], self.ranks)
        self.saved_iter = self.iter
        self.generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        if saved["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        return saved
