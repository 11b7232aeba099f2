"""What a `labnn.training.trainer.Trainer` checks at its door, before any training: the
model, the token ids it trains on (`check_ids`), the entries it writes beside its state
(`checked_extra`), the flags of `fit` (`check_flags`), and a checkpoint to resume
(`check_resumable`, which the command line calls before it builds the model).

Dimension letters (the package legend): `N` ids of a corpus split.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from labnn.data.batching import check_id_tensor, check_in_vocab
from labnn.nn.arguments import check_bool, is_int
from labnn.nn.layers import past_the_door
from labnn.training import checkpoint as ckpt
from labnn.training.config import (RESUMABLE_CHANGES, TrainConfig, TrainConfigChanged,
                                   check_schedule)
from labnn.training.plain_data import to_plain

# what `Trainer.save` writes and `Trainer.load` reads back
TRAINING_STATE = ("model_class", "model_config", "model", "optimizer", "train_config",
                  "iter", "elapsed", "history", "generator", "torch_rng", "cuda_rng",
                  "state")


def checked_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` itself, checked: a dict of plain data (`to_plain`; a set was refused at the
    first save, after `eval_interval` steps of training) none of whose keys is a
    `TRAINING_STATE` entry it would replace (a resumed run would read the replacement:
    `{"iter": 0}` restarted training)."""
    if not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict of entries to save, got {type(extra).__name__}")
    to_plain(extra, "extra")
    if clash := sorted(set(TRAINING_STATE) & set(extra)):
        raise ValueError(f"extra entries {clash} would replace the checkpoint's training state")
    return extra


def rows_fit(n: int, batch_size: int, seq_len: int, stream: bool) -> bool:
    """Whether `n` tokens fill one batch: for a model that carries state along the text
    (`stream`), `batch_size` streams of `seq_len` inputs whose last targets are the next
    stream's first ids (`batch_size * seq_len + 1` in all, as `num_stream_batches`
    counts), else one row of `seq_len + 1` (the input and its next-token targets)."""
    return (n - 1) // batch_size >= seq_len if stream else n > seq_len


def check_ids(name: str, ids: torch.Tensor, config: TrainConfig,
              vocab_size: int | None) -> None:
    """Raise a clear error unless `ids` can feed batches of `config` to a model of
    `vocab_size` tokens.

    Shape:
        ids `[N]`.
    """
    check_id_tensor(ids, name)
    b, t = config.batch_size, config.seq_len
    if config.stream and not rows_fit(len(ids), b, t, stream=True):
        raise ValueError(f"{name} hold {len(ids)} tokens: too few for {b} streams of "
                         f"seq_len={t} + 1 tokens")
    if not config.stream and not rows_fit(len(ids), b, t, stream=False):
        raise ValueError(f"{name} hold {len(ids)} tokens, too few for seq_len={t} "
                         f"(need at least {t + 1})")
    check_in_vocab(ids, vocab_size, name)


def check_window(model: nn.Module, config: TrainConfig) -> None:
    """Raise a clear error unless `model` has a position for each of `config.seq_len`
    tokens: a `TransformerLM` with learned positions has `seq_len` of them."""
    mine = getattr(model, "config", None)
    if getattr(mine, "positions", None) == "learned" and config.seq_len > mine.seq_len:
        raise ValueError(f"TrainConfig.seq_len={config.seq_len} is longer than the model's "
                         f"seq_len={mine.seq_len} (its learned positions): train on rows of "
                         f"at most {mine.seq_len} tokens, or build the model with "
                         f"seq_len={config.seq_len}")


class PastTheDoor(nn.Module):
    """`model` as the training loop calls it: through its `forward_checked_ids` (its
    `forward` less the scan of the ids, which would read a value back to the host at
    every step; the Trainer checked its corpus once, `check_ids`), or `model` itself
    where it has none. A module, so that `DistributedDataParallel` can wrap it."""

    def __init__(self, model: nn.Module):
        """Hold `model` (its parameters are this module's)."""
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """`logits, state = model(tokens, state)` past the model's door.

        Shape:
            tokens `[B, T]` -> logits `[B, T, V]`.
        """
        call = past_the_door(self.model)
        return call(tokens) if state is None else call(tokens, state)


def check_model(model) -> None:
    """Raise a clear error unless `model` is an `nn.Module`."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")


def check_flags(**flags) -> None:
    """Raise a clear error unless every flag is True or False: `fit(resume="no")` resumed,
    and `trusted="no"` unpickled the checkpoint (whose pickle may run any code)."""
    for name, value in flags.items():
        check_bool(name, value)


def check_resumable(saved: dict[str, Any], model: nn.Module, config: TrainConfig,
                    path: str | os.PathLike) -> None:
    """Raise unless `saved` (the checkpoint read from `path`) continues a run of `model`
    under `config` as an uninterrupted run would. Its weights' shapes are left to
    `Trainer.load` (a stand-in `model` of the right class and config will do here).

    Raises:
        ValueError: it was not written by `Trainer.save`, or its iter is not an int >= 0.
        labnn.training.checkpoint.ConfigMismatch: another model class or config.
        labnn.training.config.TrainConfigChanged: other training settings (but
            `RESUMABLE_CHANGES`).
        labnn.training.config.ScheduleChanged: a `max_iters` that changes the learning
            rates of the steps taken.
    """
    missing = [k for k in TRAINING_STATE if k not in saved]
    if missing:
        raise ValueError(f"checkpoint {path} was not written by Trainer.save: it has no "
                         f"{', '.join(missing)}")
    if not is_int(saved["iter"]) or saved["iter"] < 0:
        raise ValueError(f"checkpoint {path}: its iter is {saved['iter']!r}, not an int >= 0")
    ckpt.check_compatible(saved, model, path)
    mine, theirs = asdict(config), saved["train_config"]
    diffs = {k: (theirs.get(k), mine[k]) for k in mine
             if k not in (*RESUMABLE_CHANGES, "max_iters") and theirs.get(k) != mine[k]}
    if diffs:
        raise TrainConfigChanged(path, diffs)
    check_schedule(theirs["max_iters"], config, saved["iter"], path)
