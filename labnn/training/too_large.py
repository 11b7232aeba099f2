"""A training step too large for memory: `TooLarge`, and the sizes that make each term of
`labnn.training.config.training_terms` large, which its message names (in the Python API's
names) and the command line's (`labnn.cli.sizes.too_large`, in its options).

Dimension letters (the package legend): `B` batch, `T` tokens per row, `S` keys, `H` heads,
`D` model width, `F` feed-forward width.
"""

from __future__ import annotations

import dataclasses

import torch

# `TrainConfig`'s sizes; the others that `sized_by` names are the model config's
TRAIN_SIZES = ("batch_size", "seq_len")
# the model config fields that add parameters; the last two named only where set away from
# their default (the feed-forward width, the feedback models' relative-bias table)
PARAMETER_FIELDS = ("d_model", "n_layers", "d_ff", "max_distance")


def gib(n: int) -> str:
    """`n` bytes for messages: in GiB, TiB from 1024 GiB, MiB below 1 GiB (where GiB would
    print "0.0")."""
    for unit, shift in (("TiB", 40), ("GiB", 30)):
        if n >= 2**shift:
            return f"{n / 2**shift:.1f} {unit}"
    return f"{n / 2**20:.1f} MiB"


def _set(model_config, name: str) -> bool:
    """Whether the dataclass `model_config` has `name` set away from its default (`d_ff`:
    from `4 * d_model`, which a config fills in for None)."""
    fields = {f.name: f for f in dataclasses.fields(model_config)}
    value = getattr(model_config, name, None)
    if name == "d_ff":
        return value not in (None, 4 * model_config.d_model)
    return name in fields and value != fields[name].default


def sized_by(term: str, model_config, batch_size: int, seq_len: int) -> dict[str, int]:
    """The sizes that make `term` of `training_terms` large, name -> value: the parameters
    grow with `PARAMETER_FIELDS`; the fused kernels' `[T, S]` mask with `seq_len` alone;
    the attention scores `[B, H, T, S]` with `batch_size` and `seq_len`, or with
    Transformer-XL's memory, `S = T + mem_len`, when that is the longer; the activations
    (`[B, T, D]`, `[B, T, F]`) and logits with `batch_size` and `seq_len`, and a `d_ff` set.

    Args:
        term: a key of `training_terms`, e.g. `"attention scores"`.
        model_config: the model's config dataclass, or None (a model without one: its
            parameters are then named by no size).
        batch_size, seq_len: `TrainConfig`'s.
    """
    config = model_config if dataclasses.is_dataclass(model_config) else None
    mem_len = getattr(config, "mem_len", None) or 0
    if term.startswith("parameters"):
        names = [f for f in PARAMETER_FIELDS[:2] if hasattr(config, f)]
        names += [f for f in PARAMETER_FIELDS[2:] if config and _set(config, f)]
        return {f: getattr(config, f) for f in names}
    if term.startswith("attention") and mem_len > seq_len:
        return {"mem_len": mem_len}
    if term == "attention mask":
        return {"seq_len": seq_len}
    sizes = {"batch_size": batch_size, "seq_len": seq_len}
    if term == "activations" and config and _set(config, "d_ff"):
        sizes["d_ff"] = config.d_ff
    return sizes


def listed(names: list[str], last: str = "and") -> str:
    """`["a", "b", "c"]` -> `"a, b and c"` (`last`: the word before the last name)."""
    *most, end = names
    return f"{', '.join(most)} {last} {end}" if most else end


class TooLarge(ValueError):
    """One training step needs more memory than the device has available.

    Attributes:
        needed: `training_bytes`. available: `available_memory`. device: where.
        term: the largest of `training_terms`, e.g. `"attention scores"`; largest: it
            with its size, `"attention scores 8.8 TiB"`.
        sizes: `sized_by` of that term: the sizes that make it large, name -> value.
    """

    def __init__(self, config, terms: dict[str, int], available: int,
                 device: torch.device, model_config=None):
        self.needed, self.available, self.device = sum(terms.values()), available, device
        self.term = max(terms, key=terms.get)
        self.largest = f"{self.term} {gib(terms[self.term])}"
        self.sizes = sized_by(self.term, model_config, config.batch_size, config.seq_len)
        train = [f for f in self.sizes if f in TRAIN_SIZES]
        model = [f for f in self.sizes if f not in TRAIN_SIZES]
        given = [f"{f}={self.sizes[f]}" for f in train]
        lower = train.copy()
        if model:
            given.append("the model config's " + listed([f"{f}={self.sizes[f]}" for f in model]))
            lower.append("the model config's " + listed(model, "or"))
        what = listed(given) if given else "the model's parameters"
        verb = "needs" if len(self.sizes) == 1 else "need"
        super().__init__(
            f"{what} {verb} at least {gib(self.needed)} for one training step "
            f"({self.largest}; see labnn.training.config.training_terms), more than the "
            f"{gib(available)} available on {device}: "
            + (f"lower {listed(lower, 'or')}" if lower else "train a smaller model"))
