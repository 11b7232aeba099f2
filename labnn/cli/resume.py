"""What `train --resume` checks of its `--out` before a model is built: that the
checkpoint holds the model the options describe. Else the line naming the model's size,
printed before training, would count a model that is then refused.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from labnn.cli.errors import config_changed, untrusted
from labnn.cli.options import UsageError
from labnn.training import checkpoint as ckpt
from labnn.training.trainer_inputs import TRAINING_STATE


def check_resume(args: argparse.Namespace, model_cls: type, config, names: dict[str, str]
                 ) -> None:
    """Refuse `--resume` from an `--out` that was not written by `train`, or that holds
    another model or model config than `model_cls(config)` (`names`: model class -> its
    `--model` name); nothing is checked without `--resume` or when `--out` does not exist.

    Raises:
        UsageError: the one line naming what differs (`labnn.cli.errors.config_changed`).
    """
    if not (args.resume and args.out.exists()):
        return
    try:
        saved = ckpt.load(args.out, trusted=args.trust_checkpoint)
    except ckpt.UntrustedCheckpointError as err:
        raise untrusted(err) from None
    missing = [k for k in TRAINING_STATE if k not in saved]
    if missing:
        raise UsageError(f"--resume: {args.out} was not written by `python -m labnn train` "
                         f"(it has no {', '.join(missing)}); give another --out, or "
                         "--overwrite to replace it")
    with torch.device("meta"):  # a one-layer stand-in: only its class and config are read
        proxy = model_cls(dataclasses.replace(config, n_layers=1))
    proxy.config = config
    try:
        ckpt.check_compatible(saved, proxy, args.out)
    except ckpt.ConfigMismatch as err:
        raise config_changed(err, args.out, names) from None
