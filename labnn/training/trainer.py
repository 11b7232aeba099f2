r"""The trainer of every labnn language model: batches, AdamW steps, evaluation, checkpoints.

Dimension letters (the package legend): `B` batch, `T` tokens per row, `V` vocabulary,
`N` ids of a corpus split.

Models are called as `logits, state = model(x, state)`. With `TrainConfig(stream=True)`
batches are contiguous streams (`labnn.data.stream_batch`) and the state a model returns
(Transformer-XL's memory, the Feedback Transformer's memory) is passed to the next batch
and dropped at stream boundaries; the model detaches it. How to train (`TrainConfig`,
the learning-rate schedule) is `labnn.training.config`; one update (clipping, AdamW) is
`labnn.training.optim.update`, shared with the task loops of `labnn.training.tasks`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from labnn.training import checkpoint as ckpt, distributed
from labnn.training.safe_files import check_replacing, same_file
from labnn.data.batching import num_stream_batches, random_batch, stream_batch
from labnn.training.distributed import pick_device
# evaluate: importable from here, as before
from labnn.training.evaluate import evaluate, evaluate_checked_ids, lm_loss  # noqa: F401
from labnn.training.optim import (Diverged, TrainingDiverged, check_grad_mode,
                                  check_weight_dtype, param_groups, update)
from labnn.training.progress import progress
from labnn.training.config import TrainConfig, check_memory
from labnn.training.trainer_inputs import (PastTheDoor, check_flags, check_ids, check_model,
                                           check_resumable, check_window, checked_extra)


@dataclass
class Trainer:
    """Train `model` on `train_ids`, evaluating on `val_ids`; `fit()` returns the history.

    Resuming with `fit(resume=True)` from `config.checkpoint` continues exactly as an
    uninterrupted run would; a resumption that cannot (another batch size, seed, learning
    rate, or a `max_iters` that changes the steps already taken) is refused. Under
    `torchrun` each process trains on its share of every batch and rank 0 alone evaluates
    and saves (`labnn.training.distributed`); the code below reads as for one process.

    Args:
        model: a labnn language model (`logits, state = model(x, state)`, with a `config`).
        train_ids: token ids to train on `[N]`.
        val_ids: token ids to evaluate on `[N]`.
        config: how to train.
        extra: entries written into every checkpoint beside the training state (the CLI's
            tokenizer); none may be named as one of `TRAINING_STATE`.
    """

    model: nn.Module
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    config: TrainConfig = field(default_factory=TrainConfig)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check the data against the model, place the model, build the optimiser."""
        check_model(self.model)
        check_weight_dtype(self.model)
        c, self.extra = self.config, checked_extra(self.extra)
        if not isinstance(c, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(c).__name__}")
        vocab_size = getattr(getattr(self.model, "config", None), "vocab_size", None)
        for name in ("train_ids", "val_ids"):
            check_ids(name, getattr(self, name), c, vocab_size)
        check_window(self.model, c)
        self.ranks, self.device = distributed.setup(pick_device(c.device), c.batch_size)
        # before anything is allocated
        rows = distributed.memory_rows(self.ranks, self.device, c.batch_size)
        check_memory(self.model, c, self.device, rows)
        self.model.to(self.device)
        # what a step calls: the model past its door (the ids were checked above, once),
        # under torchrun in a DDP wrapper
        self.train_model = distributed.wrap(PastTheDoor(self.model), self.ranks, self.device)
        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, c.weight_decay), lr=c.lr, betas=c.betas)
        self.generator = torch.Generator().manual_seed(c.seed)
        # start_iter: where the last fit() began (a resumed checkpoint's iteration)
        self.iter, self.start_iter, self.state, self.saved_iter = 0, 0, None, None
        self.owns_checkpoint = False  # saved to or read from config.checkpoint: fit goes on
        self.history: dict[str, list[float]] = {
            k: [] for k in ("iter", "train_loss", "val_loss", "lr", "time")}
        self.elapsed = 0.0

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next global batch's rows for this process (all of them in one process).

        Shape:
            -> x, y `[B, T]` (`[B / P, T]` under `torchrun` with `P` processes).
        """
        c = self.config
        if c.stream:
            i = self.iter % num_stream_batches(self.train_ids, c.batch_size, c.seq_len)
            if i == 0:  # a new pass: the text's end must not be remembered at its start
                self.state = None
            x, y = stream_batch(self.train_ids, c.batch_size, c.seq_len, i)
        else:
            x, y = random_batch(self.train_ids, c.batch_size, c.seq_len, self.generator)
        return self.ranks.rows(x).to(self.device), self.ranks.rows(y).to(self.device)

    def train_step(self) -> torch.Tensor:
        """One optimisation step at the schedule's learning rate; returns its loss, unread.

        Raises:
            TrainingDiverged: (a `FloatingPointError`) the loss or the gradient norm is
                NaN or infinite; the weights are left unchanged.
        """
        c = self.config
        x, y = self.batch()
        if c.stream:
            logits, self.state = self.train_model(x, self.state)
        else:
            logits, _ = self.train_model(x)
        loss = lm_loss(logits, y)
        try:
            update(self.model, self.optimizer, loss, lr=c.lr_at(self.iter),
                   grad_clip=c.grad_clip)
        except Diverged as err:
            self.diverged(err)
        self.iter += 1
        return loss.detach()

    def diverged(self, err: Diverged) -> None:
        """Stop with an error that says what went wrong, where, and what was kept."""
        c = self.config
        raise TrainingDiverged(str(err), self.iter, {"lr": c.lr, "grad_clip": c.grad_clip},
                               c.checkpoint, self.saved_iter) from None

    def record(self) -> None:
        """Evaluate on both splits and append to the history (rank 0 only)."""
        if not self.ranks.is_main:
            return
        h, c = self.history, self.config
        h["iter"].append(self.iter)
        for split in ("train", "val"):  # ids checked once, at the door (check_ids)
            ids = getattr(self, f"{split}_ids")
            h[f"{split}_loss"].append(evaluate_checked_ids(self.model, ids, c, self.device))
        h["lr"].append(c.lr_at(max(0, self.iter - 1)))
        h["time"].append(self.elapsed)

    def fit(
        self, resume: bool = False, *, overwrite: bool = False, trusted: bool = False,
        saved: dict | None = None
    ) -> dict[str, list[float]]:
        """Train until `config.max_iters`; with `resume`, first restore
        `config.checkpoint` if it exists (`trusted`, `saved`: as in `load`; under `torchrun`
        rank 0 alone reads it, under its lock, and every rank restores its copy). A file
        there is replaced only with `overwrite` (the command line's `--overwrite`), else a
        run started without `resume` would lose it at its first save (a trainer goes on over
        its own file).

        Raises:
            FileExistsError: `config.checkpoint` exists, and neither `resume` nor
                `overwrite` was given; raised before any training.
            OSError: `config.checkpoint` cannot be written; raised before any training.
            RuntimeError: called with gradients off (`torch.no_grad()`,
                `torch.inference_mode()`), or the model's parameters were made under
                `torch.inference_mode()`.
        """
        check_flags(resume=resume, overwrite=overwrite, trusted=trusted)
        check_grad_mode(self.model, "Trainer.fit")
        c = self.config
        if not self.owns_checkpoint:  # a second fit() goes on over the file it wrote
            check_replacing(c.checkpoint, resume, overwrite)
        with contextlib.ExitStack() as stack:
            if c.checkpoint and self.ranks.is_main:
                ckpt.check_writable(c.checkpoint)  # not at the first save, hours from now
                stack.enter_context(ckpt.exclusive(c.checkpoint))  # no second writer
            if resume and c.checkpoint:  # rank 0 reads it under its lock, for every rank
                if not self.ranks.is_main:
                    saved = None  # not held while rank 0's copy comes
                saved = self._resumed(trusted, saved)
                if saved is not None:
                    self._restore(saved, c.checkpoint)
            del saved  # the model and optimiser hold copies: not kept while training
            return self._fit()

    def _resumed(self, trusted: bool, saved: dict | None) -> dict | None:
        """The checkpoint `fit(resume=True)` continues from (None: no file yet), as rank 0
        reads it under its lock (or was handed it, `saved`), in every rank
        (`distributed.from_main`)."""
        path = self.config.checkpoint

        def read() -> dict | None:
            if saved is not None or not Path(path).exists():
                return saved
            return ckpt.load(path, map_location="cpu", trusted=trusted)

        return distributed.from_main(read, self.ranks)

    def _fit(self) -> dict[str, list[float]]:
        """The training loop of `fit`, from `self.iter` on."""
        c = self.config
        self.model.train()
        self.start_iter = self.iter
        show = c.show_progress and self.ranks.is_main
        bar = progress(total=c.max_iters, initial=self.iter, desc="train", disable=not show)
        with bar:
            if self.iter == 0:
                self.record()  # where training starts, for the loss curve
            self._show_losses(bar)
            start = time.perf_counter() - self.elapsed
            while self.iter < c.max_iters:
                self.train_step()
                self.elapsed = time.perf_counter() - start
                bar.update(1)
                if self.iter % c.eval_interval == 0 or self.iter == c.max_iters:
                    self.record()
                    self._show_losses(bar)
                    if c.checkpoint:
                        self.save(c.checkpoint)
                    start = time.perf_counter() - self.elapsed  # evaluating is not training
        return self.history

    def _show_losses(self, bar) -> None:
        """The last evaluated losses on the progress bar (rank 0), as the history has them."""
        if self.ranks.is_main and (h := self.history)["train_loss"]:
            bar.set_postfix(train=f"{h['train_loss'][-1]:.3f}", val=f"{h['val_loss'][-1]:.3f}")

    def save(self, path: str | Path, **extra) -> Path:
        """Write everything needed to continue exactly: weights, optimiser, RNG states,
        carried state, history.

        Under `torchrun` every rank calls it (to gather the carried state) and rank 0
        writes.
        """
        state = distributed.gather_state(self.state, self.ranks)
        cuda_rng = distributed.device_rng_states(self.ranks, self.device)
        if self.ranks.is_main:
            try:
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
                        "cuda_rng": cuda_rng,
                        "state": state,
                        **checked_extra({**self.extra, **extra}),
                    },
                    path,
                )
            except ckpt.SavedThenInterrupted:
                self.saved_iter = self.iter  # the file is in place: say so
                raise
        self.saved_iter = self.iter
        self.owns_checkpoint |= same_file(path, self.config.checkpoint)
        return Path(path)

    def load(self, path: str | Path, *, trusted: bool = False, saved: dict | None = None
             ) -> dict:
        """Restore a checkpoint written by `save`.

        Under `torchrun` every rank calls it (a collective) and rank 0 alone reads `path`
        (or takes its `saved`); every rank restores rank 0's copy
        (`labnn.training.distributed.from_main`), so all start from the same bytes even if
        the file is replaced meanwhile. (`fit(resume=True)` reads it under its lock.)

        Args:
            path: the checkpoint.
            trusted: also read a checkpoint of an older labnn that holds pickled
                objects (`labnn.training.checkpoint.load`); only for a file you wrote yourself.
                The next `save` writes it in the safe format.
            saved: `path` as `labnn.training.checkpoint.load(path)` already read it (the
                command line checks it before building the model): not read again
                (under `torchrun`, rank 0's).

        Raises:
            ValueError: it was saved from another model config, or with training
                settings that would make the continuation differ from an uninterrupted
                run (`labnn.training.config.TrainConfigChanged` for any field but
                `RESUMABLE_CHANGES`; `labnn.training.config.ScheduleChanged` for a
                `max_iters` that changes the learning rates of the steps taken).
            labnn.training.checkpoint.UntrustedCheckpointError: it holds pickled objects and
                `trusted` is False.
            RuntimeError: (under `torchrun`, in the other ranks) rank 0 could not read it.
        """
        def read() -> dict:  # on the CPU: torch sets RNG states from CPU tensors only
            return saved or ckpt.load(path, map_location="cpu", trusted=trusted)

        return self._restore(distributed.from_main(read, self.ranks), path)

    def _restore(self, saved: dict, path: str | Path) -> dict:
        """`load` of a checkpoint already read (in every rank)."""
        check_resumable(saved, self.model, self.config, path)
        ckpt.check_weights(saved["model"], self.model, path)
        distributed.restore_device_rng(saved["cuda_rng"], self.ranks, self.device)
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.iter, self.elapsed = saved["iter"], saved["elapsed"]
        self.history = saved["history"]
        self.state = distributed.state_rows(saved["state"], self.ranks, self.device)
        self.saved_iter = self.iter
        self.owns_checkpoint |= same_file(path, self.config.checkpoint)
        self.generator.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        return saved
