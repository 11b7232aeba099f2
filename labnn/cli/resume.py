"""What `train --resume` checks of its `--out` before a model is built: that the
checkpoint continues the run the options describe (its model, model config, training
options and `--iters`). Else the line naming the model's size, printed before training,
would count a model that is then refused. The checkpoint is read here once, and handed to
`Trainer.fit`: under the lock that `fit` then holds (`held_out`), so that no other run of
the same `--out` saves it between the read and the training. Under `torchrun` only rank 0
holds the lock: the other ranks' reads here check at the door alone, and `fit` gives every
rank rank 0's copy to train from.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from labnn.cli.errors import (config_changed, schedule_changed, train_config_changed,
                              untrusted)
from labnn.cli.options import UsageError
from labnn.data import CharTokenizer
from labnn.training import checkpoint as ckpt
from labnn.training.config import ScheduleChanged, TrainConfig, TrainConfigChanged
from labnn.training.trainer_inputs import TRAINING_STATE, check_resumable


@contextlib.contextmanager
def held_out(args: argparse.Namespace) -> Iterator[None]:
    """Hold `--out` for this run (`labnn.training.checkpoint.exclusive`, which `Trainer.fit`
    inside takes again) from before `check_resume` reads it, with `--resume` of a file that
    exists; in the process that saves it alone (rank 0 under torchrun: `$RANK`).

    Raises:
        labnn.training.checkpoint.CheckpointBusy: another run is writing it.
    """
    if args.resume and args.out.exists() and os.environ.get("RANK", "0") == "0":
        with ckpt.exclusive(args.out):
            yield
    else:
        yield


def check_resume(args: argparse.Namespace, model_cls: type, config, train_config: TrainConfig,
                 names: dict[str, str], chars: list[str]) -> dict | None:
    """Refuse `--resume` from an `--out` that was not written by `train`, or that another
    model, model config, training options or `--iters` than `model_cls(config)` trained
    under `train_config` (`names`: model class -> its `--model` name), or with another
    tokenizer than `chars` (the same size, another order: each id another character);
    nothing is read without `--resume` or when `--out` does not exist.

    Returns:
        The checkpoint as read (for `Trainer.fit(saved=...)`), or None.

    Raises:
        UsageError: the one line naming what differs (`labnn.cli.errors`).
    """
    if not (args.resume and args.out.exists()):
        return None
    try:
        saved = ckpt.load(args.out, map_location="cpu", trusted=args.trust_checkpoint)
    except ckpt.UntrustedCheckpointError as err:
        raise untrusted(err, "--out", TRAINING_STATE) from None
    except ValueError as err:  # empty, damaged, another format: the option, and the way out
        said = str(err).removeprefix(f"checkpoint {args.out}")
        raise UsageError(f"--resume: --out {args.out}{said}; give another --out, or "
                         "--overwrite to start over") from None
    missing = [k for k in TRAINING_STATE if k not in saved]
    if missing:
        raise UsageError(f"--resume: {args.out} was not written by `python -m labnn train` "
                         f"(it has no {', '.join(missing)}); give another --out, or "
                         "--overwrite to replace it")
    if "tokenizer" in saved and saved["tokenizer"] != list(chars):
        raise UsageError(f"--resume: {args.out} was trained with another tokenizer (its "
                         "characters or their ids differ from this corpus's): resume it "
                         "with its own corpus, or start afresh with --overwrite")
    with torch.device("meta"):  # a one-layer stand-in: only its class and config are read
        proxy = model_cls(dataclasses.replace(config, n_layers=1))
    proxy.config = config
    with resume_refused(args, names):
        check_resumable(saved, proxy, train_config, args.out)
    return saved


@contextlib.contextmanager
def resume_refused(args: argparse.Namespace, names: dict[str, str]) -> Iterator[None]:
    """The one line for a checkpoint that does not continue this run (another model, model
    config, training options or `--iters`; `names` as in `check_resume`), wherever it is
    found: here, before the model is built, or when `Trainer.fit` loads a file that appeared
    since.

    Raises:
        UsageError: in place of the trainer's error (`labnn.cli.errors`).
    """
    try:
        yield
    except ckpt.ConfigMismatch as err:
        raise config_changed(err, args.out, names) from None
    except TrainConfigChanged as err:
        raise train_config_changed(err, args.out) from None
    except ScheduleChanged as err:
        raise schedule_changed(err, args) from None


def saved_tokenizer(saved: dict, path: Path) -> CharTokenizer:
    """The tokenizer of a checkpoint of `train` (`saved`, read from `path`), or a
    `UsageError` naming why it does not fit: not distinct single characters, or not one
    per id of its model_config's `vocab_size`."""
    try:
        tokenizer = CharTokenizer(saved["tokenizer"])
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: its tokenizer is no alphabet ({err}): the file was "
                         "changed after training") from None
    vocab = saved["model_config"].get("vocab_size")
    if tokenizer.vocab_size != vocab:
        raise UsageError(f"{path}: its tokenizer holds {tokenizer.vocab_size} characters, "
                         f"its model_config a vocab_size of {vocab!r}: the file was changed "
                         "after training")
    return tokenizer
