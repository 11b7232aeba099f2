r"""How to train: the hyper-parameters of `labnn.training.trainer.Trainer`, its learning-rate
schedule, and the memory one of its steps needs.

Dimension letters (the package legend): `B` batch, `T` tokens per row.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass

import torch

from labnn.nn.attention import MultiHeadAttention
from labnn.nn.arguments import (ArgumentTypeError, check_bool, check_int, check_number,
                                int_error, is_int, is_number)
from labnn.training.too_large import TooLarge

# fields that may change between a run and its resumption (they do not change the steps).
# Not `max_iters`: the cosine decay is laid out over it (`lr_at`), so it may change only
# while the steps already taken are the same under both (`Trainer.load`).
RESUMABLE_CHANGES = (
    "eval_interval", "eval_iters", "device", "checkpoint", "show_progress"
)


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Defaults follow nanoGPT's small character-level Shakespeare recipe.

    Args:
        max_iters: optimisation steps; the learning rate's cosine decay ends there, so a
            resumed run keeps it (`Trainer.load` refuses another once past warm-up).
        batch_size: rows per batch `B`.
        seq_len: tokens per row `T`.
        lr: peak learning rate, reached after `warmup_iters` linear steps, then
            cosine-decayed to `min_lr`.
        min_lr: final learning rate (default `lr / 10`).
        warmup_iters: linear warm-up steps.
        weight_decay: AdamW decay of every parameter with two or more dimensions, as
            nanoGPT: weight matrices and tables (embeddings, learned positions, XL's
            $u$ and $v$, relative-bias tables); never of vectors (biases, norms).
        betas: AdamW betas.
        grad_clip: clip the global gradient norm to this (0 disables).
        eval_interval: evaluate every this many steps (and at the end).
        eval_iters: batches per evaluation.
        stream: contiguous-stream batches with model state carried across them.
        seed: seeds the random batches, training and evaluation ones (the trainer's own
            generators; unused with `stream`, whose batches come in the text's order);
            the model's initial weights and its dropout draw from torch's
            global generator: seed it before building the model
            (`labnn.seed_everything`, as the CLI does).
        device: where to train (default `pick_device()`).
        checkpoint: path to write at every evaluation (atomically); None writes nothing.
        show_progress: show a progress bar.

    Frozen, as the model configs are: every field is checked once, here, and a run never
    goes on under values that were not (`dataclasses.replace(config, lr=3e-4,
    min_lr=None)` makes a checked copy; a new `lr` keeps the old `min_lr` unless told).
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
        """Check every field (one rule per kind, `labnn.nn.arguments`); fill in `min_lr`."""
        for name in ("max_iters", "batch_size", "seq_len", "eval_interval", "eval_iters"):
            check_int(name, getattr(self, name))
        if not is_int(self.warmup_iters) or self.warmup_iters < 0:
            raise int_error(self.warmup_iters)(
                f"warmup_iters must be an int >= 0, got {self.warmup_iters!r}")
        check_int("seed", self.seed, low=0)
        if self.seed >= 2**64:
            raise ValueError(f"seed must be below 2**64 (torch's seeds are 64-bit), got "
                             f"{self.seed}")
        check_number("lr", self.lr, above=True)
        if self.min_lr is None:
            object.__setattr__(self, "min_lr", self.lr / 10)
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
        object.__setattr__(self, "betas", tuple(betas))
        check_bool("stream", self.stream)
        check_bool("show_progress", self.show_progress)
        if not (self.device is None or isinstance(self.device, (str, torch.device))):
            raise ArgumentTypeError(
                f"device must be a device name or None, got {self.device!r}")
        if isinstance(self.device, torch.device):  # kept as its name: a checkpoint holds it
            object.__setattr__(self, "device", str(self.device))
        if not (
            self.checkpoint is None or isinstance(self.checkpoint, (str, os.PathLike))
        ):
            raise ArgumentTypeError("checkpoint must be a path (str or os.PathLike) or None, "
                             f"got {self.checkpoint!r}")
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint", os.fspath(self.checkpoint))

    def lr_at(self, it: int) -> float:
        r"""Learning rate of step `it`: a linear warm-up over $w$ steps, then a cosine
        decay from $\eta$ (`lr`) to $\eta_{\min}$ (`min_lr`) at step $n$ (`max_iters`):

        $$\eta_i = \eta\,\frac{i + 1}{w} \;(i < w), \qquad
        \eta_i = \eta_{\min} + \tfrac12\big(1 + \cos(\pi p)\big)(\eta - \eta_{\min}),
        \; p = \min\!\Big(1, \frac{i - w}{\max(1,\, n - w)}\Big).$$
        """
        if it < self.warmup_iters:
            return self.lr * (it + 1) / self.warmup_iters
        done = (it - self.warmup_iters) / max(1, self.max_iters - self.warmup_iters)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, done)))
        return self.min_lr + cosine * (self.lr - self.min_lr)


class TrainConfigChanged(ValueError):
    """A resumption under another `TrainConfig` (but `RESUMABLE_CHANGES` and `max_iters`).

    Attributes:
        diffs: each field that differs -> (the checkpoint's value, the one asked for).
    """

    def __init__(self, path: str | os.PathLike, diffs: dict[str, tuple]):
        self.diffs = diffs
        super().__init__(f"checkpoint {path} was saved with another training config — "
                         + "; ".join(f"{k}: checkpoint {a!r} vs now {b!r}"
                                     for k, (a, b) in diffs.items()))


class ScheduleChanged(ValueError):
    """A resumption with another `max_iters` than the steps already taken followed.

    Attributes:
        saved_iter: the checkpoint's iteration.
        saved_max_iters: the `max_iters` of the run that wrote it.
        max_iters: the one asked for now.
    """

    def __init__(self, path: str | os.PathLike, saved_iter: int, saved_max_iters: int,
                 max_iters: int):
        self.saved_iter, self.saved_max_iters = saved_iter, saved_max_iters
        self.max_iters = max_iters
        reason = (f"iteration {saved_iter} is past its end" if saved_iter > max_iters
                  else "the learning-rate schedule's cosine decay is laid out over "
                  f"max_iters: it ends at step {saved_max_iters} there, {max_iters} here")
        super().__init__(
            f"checkpoint {path} is from iteration {saved_iter} of a run of "
            f"max_iters={saved_max_iters}: resuming with max_iters={max_iters} would not "
            f"train as a run of max_iters={max_iters} from the start ({reason}). Resume "
            f"with max_iters={saved_max_iters}, or start a new run")


def check_schedule(saved_max_iters: int, config: TrainConfig, saved_iter: int,
                   path: str | os.PathLike) -> None:
    """Raise `ScheduleChanged` unless a run of `config` takes its first `saved_iter`
    steps at the learning rates of the run of `saved_max_iters` steps that wrote
    checkpoint `path` (all else equal), and has not ended before them.

    The warm-up does not depend on `max_iters` (nor does the first cosine step), so a
    checkpoint written during warm-up continues to any `max_iters >= saved_iter`; past
    it, the cosine decay of one differs from the other's at every step.
    """
    if saved_max_iters == config.max_iters:
        return
    saved = dataclasses.replace(config, max_iters=saved_max_iters)
    if saved_iter > config.max_iters or any(
        saved.lr_at(i) != config.lr_at(i) for i in range(saved_iter)
    ):
        raise ScheduleChanged(path, saved_iter, saved_max_iters, config.max_iters)


def training_bytes(model: torch.nn.Module, config: TrainConfig, rows: int | None = None
                   ) -> int:
    """The sum of `training_terms`: a lower bound of one training step's memory."""
    return sum(training_terms(model, config, rows).values())


def training_terms(model: torch.nn.Module, config: TrainConfig, rows: int | None = None
                   ) -> dict[str, int]:
    r"""A rough lower bound of the memory one training step of `model` holds at its peak,
    in bytes, term by term: the attention scores, the activations, the logits, the
    parameters,

    $$b\,\big[(L + 1) R H T S \;+\; L R T (8D + 2F) \;+\; 2 R T V \;+\; 4N\big],$$

    with $b$ bytes per number (4 in float32), $R$ rows (`rows`, default `batch_size`),
    $T$ = `seq_len`, $S = T + M$ keys with $M$ = `mem_len` (Transformer-XL's memory), and $L, H, D,
    F, V$ the model config's `n_layers, n_heads, d_model, d_ff, vocab_size`: each
    layer keeps its `[R, H, T, S]` attention probabilities for the backward pass (and
    one more is being computed), a few `[R, T, D]` and `[R, T, F]` activations; the
    logits and their gradient are `[R, T, V]`; the $N$ parameters come with their
    gradients and AdamW's two moments. A model whose attention is `MultiHeadAttention`
    itself (`TransformerLM`) is counted as training through fused kernels that never
    hold the scores: its attention term is the `[T, S]` boolean mask, $T S$ bytes. On
    a CPU that holds without dropout; with dropout torch takes its math path, which
    holds them (torch 2.13), and the term is an underestimate, still a lower bound (on
    a GPU this was not checked). Dropout masks,
    workspaces and the allocator's rounding come on top, so a run near the bound may
    still not fit: it is for refusing what surely cannot (`Trainer` does, before
    allocating).
    """
    c = getattr(model, "config", None)
    n_layers, n_heads = getattr(c, "n_layers", 1), getattr(c, "n_heads", 1)
    d_model = getattr(c, "d_model", 1)
    d_ff = getattr(c, "d_ff", None) or 4 * d_model
    vocab = getattr(c, "vocab_size", 1)
    params = list(model.parameters())
    size = params[0].element_size() if params else 4
    r, t = rows or config.batch_size, config.seq_len
    s = t + (getattr(c, "mem_len", 0) or 0)
    kinds = {type(m) for m in model.modules()
             if isinstance(m, MultiHeadAttention) or type(m).__name__.endswith("Attention")}
    if kinds <= {MultiHeadAttention}:  # fused kernels: only the bool mask, 1 byte each
        attention = {"attention mask": t * s / size}
    else:
        attention = {"attention scores": (n_layers + 1) * r * n_heads * t * s}
    numbers = {
        **attention,
        "activations": n_layers * r * t * (8 * d_model + 2 * d_ff),
        "logits": 2 * r * t * vocab,
        "parameters with AdamW's state": 4 * sum(p.numel() for p in params),
    }
    return {k: int(size * n) for k, n in numbers.items()}


def available_memory(device: torch.device) -> int | None:
    """Bytes this process may still allocate on `device`, or None where it cannot be told
    (then nothing is refused).

    CUDA: the GPU's free memory plus what torch's cache holds unused. CPU: the
    system's available memory (`psutil` if installed, else `MemAvailable` of
    `/proc/meminfo`, else the free pages), and at most what the cgroup v2 memory limit
    of a container leaves (its reclaimable file cache counted as free).
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached
    if device.type != "cpu":
        return None
    try:
        import psutil

        free = psutil.virtual_memory().available
    except ImportError:
        meminfo = _read("/proc/meminfo") or ""
        found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M)
        try:
            free = (int(found[1]) * 1024 if found else
                    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
        except (AttributeError, ValueError, OSError):  # no such counter (macOS, Windows)
            return None
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and limit.strip().isdigit() and used and used.strip().isdigit():
        stat = _read("/sys/fs/cgroup/memory.stat") or ""
        cache = re.search(r"^inactive_file (\d+)", stat, re.M)
        free = min(free, int(limit) - int(used) + (int(cache[1]) if cache else 0))
    return free


def _read(path: str) -> str | None:
    """The text of `path`, or None where it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def check_memory(model: torch.nn.Module, config: TrainConfig, device: torch.device,
                 rows: int | None = None) -> None:
    """Raise `TooLarge` when one training step of `model` surely cannot fit on `device`
    (`training_terms` against `available_memory`). `model` may be on the meta device: a
    model too large to build is refused before its parameters are allocated.
    """
    terms, free = training_terms(model, config, rows), available_memory(device)
    if free is not None and sum(terms.values()) > free:
        raise TooLarge(config, terms, free, device, getattr(model, "config", None))
