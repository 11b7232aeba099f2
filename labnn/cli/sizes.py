"""Whether a run of `train` fits in memory, told before its model is built, and the one
line naming the options that make it too large.

The parameters of `n_layers` layers are counted from models of one and two layers built
on the meta device (each layer adds the same), so a model of a thousand layers is refused
in a second instead of being built, even on the meta device, for minutes.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from labnn.cli.errors import config_mistake
from labnn.cli.options import OWN_OPTIONS, TRAIN_OPTIONS, UsageError
from labnn.training import distributed
from labnn.training.config import TrainConfig, check_memory
from labnn.training.too_large import TooLarge, gib, listed
from labnn.training.trainer_inputs import rows_fit


def _numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_count(model_cls: type, config) -> int:
    """The parameters of `model_cls(config)`, counted without building its `n_layers`
    layers: $N(L) = N(1) + (L - 1)\\,(N(2) - N(1))$, from models built on the meta device.
    """
    with torch.device("meta"):
        one, two = (_numel(model_cls(dataclasses.replace(config, n_layers=n))) for n in (1, 2))
    return one + (config.n_layers - 1) * (two - one)


def check_size(model_cls: type, config, train_config: TrainConfig,
               device: torch.device, rows: int | None = None) -> None:
    """`check_memory` of `model_cls(config)` (`rows`: as there), without building it: a
    one-layer model on the meta device stands in, with `config` and `parameter_count`
    parameters.

    Raises:
        TooLarge: one training step surely cannot fit on `device`.
    """
    with torch.device("meta"):
        proxy = model_cls(dataclasses.replace(config, n_layers=1))
        more = parameter_count(model_cls, config) - _numel(proxy)
        proxy.more_layers = torch.nn.Parameter(torch.empty(max(more, 0)))
    proxy.config = config  # what `training_terms` reads: L, H, D, F, V, mem_len
    check_memory(proxy, train_config, device, rows)


def check_before_building(args: argparse.Namespace, model_cls: type, config,
                          train_config: TrainConfig, device: torch.device) -> None:
    """The checks of `Trainer` that need no model, before `model_cls(config)` is built:
    the process group that `torchrun` describes is joined (`distributed.setup`: a
    `--batch-size` the processes do not divide is refused), then `check_size` on this
    process's device (`cuda:LOCAL_RANK`) for its share of the rows, as `Trainer` counts.
    In one process, `check_size` alone.

    Raises:
        OptionError: the processes do not divide `--batch-size`, or share one `--device`.
        TooLarge: one training step surely cannot fit on this process's device.
    """
    try:
        ranks, device = distributed.setup(device, train_config.batch_size)
    except ValueError as err:
        given = {"batch_size": f"--batch-size {args.batch_size}"}
        if args.device:
            given["device"] = f"--device {args.device}"
        raise config_mistake(err, given) from None
    rows = distributed.memory_rows(ranks, device, train_config.batch_size)
    check_size(model_cls, config, train_config, device, rows)


def check_splits(args: argparse.Namespace, splits: dict[str, torch.Tensor],
                 stream: bool) -> None:
    """Refuse, before a model is built, rows that a split of the corpus cannot fill:
    `--batch-size` streams of `--seq-len + 1` characters each for a model that carries
    state along the text, else one row of `--seq-len + 1`."""
    b, t = args.batch_size, args.seq_len
    for name, ids in splits.items():
        if not rows_fit(len(ids), b, t, stream):
            rows = f"{b} streams of {t:,} + 1" if stream else f"rows of {t:,} + 1"
            flags = f"--batch-size {b} --seq-len {t}" if stream else f"--seq-len {t}"
            raise UsageError(f"{flags}: the {name} split holds {len(ids):,} characters, too "
                             f"few for {rows}; lower {' or '.join(flags.split()[::2])}")


def too_large(err: TooLarge, args: argparse.Namespace) -> UsageError:
    """The one line for a run that cannot fit in memory, naming the options that give the
    sizes that make its largest term large (`labnn.training.too_large.sized_by`): the
    model's own options, `--batch-size`, `--seq-len`, or `--set FIELD=VALUE`."""
    given = dict(p.partition("=")[::2] for p in args.set)
    named = {}
    for field, value in err.sizes.items():
        option = TRAIN_OPTIONS.get(field) or OWN_OPTIONS.get(field)
        if option:
            named[option] = f"{option} {getattr(args, field)}"
        else:
            named[f"--set {field}"] = f"--set {field}={given.get(field, value)}"
    return UsageError(f"{' '.join(named.values())}: one training step needs at least "
                      f"{gib(err.needed)} ({err.largest}), more than the "
                      f"{gib(err.available)} available on {err.device}; lower "
                      f"{listed(list(named), 'or')}")
