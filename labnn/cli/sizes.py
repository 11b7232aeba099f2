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

from labnn.cli.options import UsageError
from labnn.training.config import TooLarge, TrainConfig, check_memory, gib

# the model config fields given by `--set` that add parameters
PARAMETER_FIELDS = ("d_ff", "max_distance")


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
               device: torch.device) -> None:
    """`check_memory` of `model_cls(config)`, without building it: a one-layer model on
    the meta device stands in, with `config` and `parameter_count` parameters.

    Raises:
        TooLarge: one training step surely cannot fit on `device`.
    """
    with torch.device("meta"):
        proxy = model_cls(dataclasses.replace(config, n_layers=1))
        more = parameter_count(model_cls, config) - _numel(proxy)
        proxy.more_layers = torch.nn.Parameter(torch.empty(max(more, 0)))
    proxy.config = config  # what `training_terms` reads: L, H, D, F, V, mem_len
    check_memory(proxy, train_config, device)


def check_splits(args: argparse.Namespace, splits: dict[str, torch.Tensor],
                 stream: bool) -> None:
    """Refuse, before a model is built, rows that a split of the corpus cannot fill:
    `--batch-size` streams of `--seq-len + 1` characters each for a model that carries
    state along the text, else one row of `--seq-len + 1`."""
    b, t = args.batch_size, args.seq_len
    for name, ids in splits.items():
        if (len(ids) - 1) // b < t if stream else len(ids) <= t:
            rows = f"{b} streams of {t:,} + 1" if stream else f"rows of {t:,} + 1"
            flags = f"--batch-size {b} --seq-len {t}" if stream else f"--seq-len {t}"
            raise UsageError(f"{flags}: the {name} split holds {len(ids):,} characters, too "
                             f"few for {rows}; lower {' or '.join(flags.split()[::2])}")


def too_large(err: TooLarge, args: argparse.Namespace, config) -> UsageError:
    """The one line for a run that cannot fit in memory, naming the options that size
    its largest term (`labnn.training.config.training_terms`): the parameters grow with
    --d-model, --n-layers and `PARAMETER_FIELDS`; the fused kernels' `[T, S]` mask with
    --seq-len alone; the attention scores `[B, H, T, S]` with --batch-size and --seq-len,
    or with Transformer-XL's memory, `S = T + mem_len`, when that is the longer; the
    activations with --batch-size, --seq-len and a `--set d_ff`."""
    mem_len = getattr(config, "mem_len", None) or 0
    given = dict(p.partition("=")[::2] for p in args.set)
    if err.term.startswith("parameters"):
        named = {"--d-model": args.d_model, "--n-layers": args.n_layers}
        named.update((f"--set {f}", given[f]) for f in PARAMETER_FIELDS if f in given)
    elif err.term.startswith("attention") and mem_len > args.seq_len:
        named = {"--set mem_len": mem_len}
    elif err.term == "attention mask":
        named = {"--seq-len": args.seq_len}
    else:  # the activations [B, T, D] and [B, T, F], or the logits [B, T, V]
        named = {"--batch-size": args.batch_size, "--seq-len": args.seq_len}
        if err.term == "activations" and "d_ff" in given:
            named["--set d_ff"] = given["d_ff"]
    flags = " ".join(f"{k}={v}" if k.startswith("--set") else f"{k} {v}"
                     for k, v in named.items())
    *most, last = named
    lower = f"{', '.join(most)} or {last}" if most else last
    return UsageError(f"{flags}: one training step needs at least {gib(err.needed)} "
                      f"({err.largest}), more than the {gib(err.available)} available on "
                      f"{err.device}; lower {lower}")
