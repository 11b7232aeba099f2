"""The command line's options: argparse types, one-line errors, `--set` overrides.

`labnn.cli` builds its two commands from these. Every mistake in an option is a
`UsageError`: one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import types
import typing
from pathlib import Path

from labnn.training import checkpoint as ckpt

# model config fields that `--set` must not name: they have their own option, or come
# from the corpus
OWN_OPTIONS = {"d_model": "--d-model", "n_heads": "--n-heads", "n_layers": "--n-layers",
               "dropout": "--dropout", "seq_len": "--seq-len"}


class UsageError(Exception):
    """A mistake of the user's: reported as one line, without a traceback."""


def _typed(name: str, raw: str, hint: object) -> object:
    """The value of `--set name=raw` as the config field's annotation `hint` expects
    (JSON syntax)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    allowed = typing.get_args(hint) if union else (hint,)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string such as positions=sinusoidal
    if str in allowed:
        return value if isinstance(value, str) else raw
    if value is None and type(None) in allowed:
        return None
    if float in allowed and type(value) is int:
        value = float(value)
    finite = type(value) is not float or math.isfinite(value)
    if any(type(value) is t for t in allowed) and finite:
        return value  # `type(...) is`: JSON true is not an int here
    names = {int: "an int", float: "a finite number", bool: "true or false",
             type(None): "null"}
    expected = " or ".join(names.get(t, getattr(t, "__name__", str(t))) for t in allowed)
    raise UsageError(f"--set {name}={raw}: expected {expected}, got "
                     f"{type(value).__name__} {value!r}")


def parse_overrides(pairs: list[str], config_cls: type) -> dict:
    """`["mem_len=64", "dropout=0.1"]` -> typed values, checked against the config's
    fields."""
    hints = typing.get_type_hints(config_cls)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in fields:
            raise UsageError(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of "
                             f"{sorted(fields)}")
        if key in OWN_OPTIONS:
            raise UsageError(f"--set {pair}: {key} has its own option, "
                             f"{OWN_OPTIONS[key]} {raw}")
        if key == "vocab_size":
            raise UsageError(f"--set {pair}: vocab_size is the corpus's alphabet size, "
                             "it cannot be set")
        out[key] = _typed(key, raw, hints[key])
    return out


def check_out(out: Path, resume: bool, overwrite: bool, trust: bool = False) -> None:
    """Refuse, before any training, an `--out` that would be lost or that cannot be
    written (`trust`: `--trust-checkpoint`, which only `--resume` uses)."""
    if resume and overwrite:
        raise UsageError("--resume continues from --out, --overwrite replaces it: give "
                         "one of them")
    if trust and not resume:
        raise UsageError("--trust-checkpoint loads the --out that --resume continues "
                         "from: give --resume too, or leave it out")
    try:
        is_dir, exists = out.is_dir(), out.exists()
    except OSError as err:  # a name too long, a loop of symlinks
        raise UsageError(f"--out {out}: {err.strerror or err}") from None
    if is_dir:
        raise UsageError(f"--out {out} is a directory; give a file name such as "
                         f"{out / 'model.pt'}")
    if exists and not (resume or overwrite):
        raise UsageError(f"--out {out} exists: --resume continues from it, --overwrite "
                         "replaces it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create {out.parent} "
                         f"({err.strerror})") from None
    try:  # a file beside it, created and removed: not at the first save, hours later
        ckpt.check_writable(out)
    except OSError as err:
        raise UsageError(f"--out {err}; give a folder you can write to") from None


def count(minimum: int, below: int | None = None, why: str = ""):
    """An argparse type: an int >= `minimum` (and < `below`, which `why` explains)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (below is not None and value >= below):
            bound = "" if below is None else f" and < {why or below}"
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}{bound}, got "
                                             f"{text!r}")
        return value

    return parse


# torch's generators take 64-bit seeds
seed_int = count(0, 2**64, "2**64 (torch's seeds are 64-bit)")


def number(low: float, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False, what: str):
    """An argparse type: a finite float within the given bounds, described by `what` in
    errors."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line."""

    def error(self, message: str) -> typing.NoReturn:
        """Exit with status 2 and one line naming the mistake and `--help`."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
