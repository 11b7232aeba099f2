"""The command line's options: argparse types, `--set` overrides, the checks of `--out`.

`labnn.cli.commands` builds its two commands from these. Every mistake in an option is a
`UsageError`: one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import tempfile
import types
import typing
from pathlib import Path

from labnn.data.shakespeare import FILENAME, data_dir
from labnn.training import checkpoint as ckpt
from labnn.training.safe_files import ReadOnlyCheckpoint, same_file, special_kind

# model config fields that `--set` must not name: they have their own option, or come
# from the corpus
OWN_OPTIONS = {"d_model": "--d-model", "n_heads": "--n-heads", "n_layers": "--n-layers",
               "dropout": "--dropout", "seq_len": "--seq-len"}
# `TrainConfig` fields that `train` sets, and their options (no option sets the others,
# `grad_clip` among them: a message offers only these)
TRAIN_OPTIONS = {"max_iters": "--iters", "batch_size": "--batch-size", "seq_len": "--seq-len",
                 "lr": "--lr", "eval_interval": "--eval-interval",
                 "eval_iters": "--eval-iters", "seed": "--seed", "device": "--device",
                 "checkpoint": "--out"}


# the memory a feedback model carries from batch to batch when `--set attn_len=...` does
# not say: its relative bias's default reach (`max_distance`), as XL's default `mem_len`.
# Unbounded (attn_len null) it keeps every step of a pass over the text, each iteration
# slower than the last and each checkpoint larger.
FEEDBACK_ATTN_LEN = 64


class UsageError(Exception):
    """A mistake of the user's: reported as one line, without a traceback."""


class OptionError(UsageError):
    """A malformed option (a `--set` that does not parse, options that exclude each
    other, values the model config refuses): exit status 2, as argparse gives for its
    own."""


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
    if type(value) is int and int in allowed and abs(value) >= SET_INT_BOUND:
        raise OptionError(f"--set {name}={raw}: expected an int < 2**31 (a size that large "
                          "cannot fit in memory)")
    if any(type(value) is t for t in allowed) and finite:
        return value  # `type(...) is`: JSON true is not an int here
    names = {int: "an int", float: "a finite number", bool: "true or false",
             type(None): "null"}
    expected = " or ".join(names.get(t, getattr(t, "__name__", str(t))) for t in allowed)
    raise OptionError(f"--set {name}={raw}: expected {expected}, got "
                     f"{type(value).__name__} {value!r}")


def settable(config_cls: type) -> list[str]:
    """The fields of a model config that `--set` sets: those without an option of their
    own, less `vocab_size` (the corpus's)."""
    return sorted(f.name for f in dataclasses.fields(config_cls)
                  if f.name not in OWN_OPTIONS and f.name != "vocab_size")


def parse_overrides(pairs: list[str], config_cls: type) -> dict:
    """`["mem_len=64", "dropout=0.1"]` -> typed values, checked against the config's
    fields."""
    hints = typing.get_type_hints(config_cls)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in fields:
            raise OptionError(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of "
                             f"{settable(config_cls)} (the other sizes have options)")
        if key in OWN_OPTIONS:
            raise OptionError(f"--set {pair}: {key} has its own option, "
                             f"{OWN_OPTIONS[key]} {raw}")
        if key == "vocab_size":
            raise OptionError(f"--set {pair}: vocab_size is the corpus's alphabet size, "
                             "it cannot be set")
        out[key] = _typed(key, raw, hints[key])
    return out


def check_out(out: Path, resume: bool, overwrite: bool, trust: bool = False) -> None:
    """Refuse, before any training, an `--out` that would be lost or that cannot be
    written (`trust`: `--trust-checkpoint`, which only `--resume` uses)."""
    if resume and overwrite:
        raise OptionError("--resume continues from --out, --overwrite replaces it: give "
                         "one of them")
    if trust and not resume:
        raise OptionError("--trust-checkpoint loads the --out that --resume continues "
                         "from: give --resume too, or leave it out")
    try:  # a symlink to nothing exists too: a save would write where it points
        is_dir, exists = out.is_dir(), os.path.lexists(out)
    except OSError as err:  # a name too long, a loop of symlinks
        raise UsageError(f"--out {out}: {err.strerror or err}") from None
    if is_dir:
        raise UsageError(f"--out {out} is a directory; give a file name such as "
                         f"{out / 'model.pt'}")
    if same_file(out, corpus := data_dir() / FILENAME):
        raise UsageError(f"--out {out} is the corpus the model trains on ({corpus}); give "
                         "another file name")
    if exists and (kind := special_kind(Path(os.path.realpath(out)))):  # /dev/null
        raise UsageError(f"--out {out} is {kind}, not a regular file; give a file name")
    if exists and not (resume or overwrite):
        raise UsageError(f"--out {out} exists: --resume continues from it, --overwrite "
                         "replaces it")
    try:  # made when training starts: a command refused before leaves nothing behind
        if not folder_exists(out):
            return  # it can be made there (and nothing is in it to write over)
    except OSError as err:
        raise UsageError(f"--out {out}: {err}") from None
    try:  # a file beside it, created and removed: not at the first save, hours later
        ckpt.check_writable(out)
    except (ValueError, ReadOnlyCheckpoint) as err:  # a device or a pipe (as /dev/null)
        raise UsageError(f"--out {err}") from None
    except OSError as err:
        raise UsageError(f"--out {err}; give a folder you can write to") from None


def folder_exists(out: Path) -> bool:
    """Whether the folder of `out` exists; refuse one that is missing and cannot be made,
    making nothing: a folder is made in its nearest existing one and removed
    (`Trainer.fit` makes it, when training starts).

    Raises:
        OSError: the message names the file in the way or the folder that cannot be made.
    """
    folder = Path(os.path.realpath(out)).parent
    if folder.is_dir():
        return True
    existing = next(p for p in (folder, *folder.parents) if os.path.lexists(p))
    if not existing.is_dir():
        raise NotADirectoryError(f"{existing} is a file, not a folder; give another path")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".labnn-probe.", dir=existing))
    except OSError as err:
        raise type(err)(f"cannot create {out.parent} ({err.strerror or err})") from None
    return False


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


# the sizes' bounds (each exclusive), far above what fits in memory but low enough that a
# model is never built for minutes nor a size overflows torch's 64-bit shapes; the memory
# check (`labnn.training.config.check_memory`) refuses what is too large below them
SIZE_BOUNDS = {
    "--batch-size": (2**20, "2**20"),
    "--seq-len": (2**20, "2**20 (the corpus has 1.1 million characters)"),
    "--d-model": (2**16, "2**16 (GPT-3's is 12,288)"),
    "--n-heads": (2**16, "2**16"),
    "--n-layers": (1024, "1024 (GPT-3 has 96)"),
    # each evaluation reads this many batches of both splits, at every --eval-interval
    "--eval-iters": (2**16, "2**16 (nanoGPT averages 200)"),
}
# an int given by `--set` (d_ff, mem_len, attn_len, ...): below what overflows a shape
SET_INT_BOUND = 2**31

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


# names of a process's standard streams: a checkpoint is written and read whole, by name
STREAMS = re.compile(r"-|/dev/std(in|out|err)|/dev/fd/\d+|/proc/(self|\d+)/fd/\d+")


def out_file(text: str) -> Path:
    """An argparse type for `--out` and `--checkpoint`: a file name, not an empty one
    (which is `.`), nor `-` or another name of a standard stream (`-` was a file named
    `-`, written after training)."""
    if not text.strip() or STREAMS.fullmatch(text):
        why = (": a checkpoint is a file, not standard input or standard output"
               if text.strip() else "")
        raise argparse.ArgumentTypeError(f"expected a file name such as "
                                         f"checkpoints/model.pt, got {text!r}{why}")
    return Path(text)


def device_name(text: str) -> str:
    """An argparse type for `--device`: a name; an empty one would pick a device unseen."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a device such as cpu, cuda or cuda:1 "
                                         f"(leave --device out to pick one), got {text!r}")
    return text


DEVICE_HELP = ("cpu, cuda, cuda:N or mps (default: $LABNN_DEVICE if set, else cuda, then "
               "mps, then cpu)")


def add_train_options(t: argparse.ArgumentParser, models: dict[str, type],
                      run: dict[str, object]) -> None:
    """`train`'s options: `models` maps `--model` names to config classes, `run` holds
    `TrainConfig`'s defaults."""
    t.add_argument("--model", choices=sorted(models), default="transformer",
                   help="the model to train (default: %(default)s)")
    t.add_argument("--iters", type=count(1), default=run["max_iters"],
                   help="optimisation steps; the learning rate's cosine decay ends there "
                   "(default: %(default)s)")
    t.add_argument("--batch-size", type=count(1, *SIZE_BOUNDS["--batch-size"]),
                   default=run["batch_size"],
                   help="rows per step, over all processes (default: %(default)s)")
    t.add_argument("--seq-len", type=count(1, *SIZE_BOUNDS["--seq-len"]),
                   default=run["seq_len"], help="characters per row (default: %(default)s)")
    t.add_argument("--d-model", type=count(1, *SIZE_BOUNDS["--d-model"]), default=128,
                   help="model width; a multiple of --n-heads (default: %(default)s)")
    t.add_argument("--n-heads", type=count(1, *SIZE_BOUNDS["--n-heads"]), default=4,
                   help="attention heads (default: %(default)s)")
    t.add_argument("--n-layers", type=count(1, *SIZE_BOUNDS["--n-layers"]), default=4,
                   help="layers (default: %(default)s)")
    t.add_argument("--dropout", default=0.0,
                   type=number(0, 1, high_open=True, what="a number in [0, 1)"),
                   help="dropout probability (default: %(default)s)")
    t.add_argument("--lr", default=run["lr"],
                   type=number(0, low_open=True, what="a finite number > 0"),
                   help="peak learning rate, after a linear warm-up (default: %(default)s)")
    t.add_argument("--eval-interval", type=count(1), default=run["eval_interval"],
                   help="evaluate and save --out every this many steps, and at the end "
                   "(default: %(default)s)")
    t.add_argument("--eval-iters", type=count(1, *SIZE_BOUNDS["--eval-iters"]),
                   default=run["eval_iters"],
                   help="batches of each split averaged at each --eval-interval to give "
                   "the val loss (default: %(default)s)")
    fields = "; ".join(f"{name}: {', '.join(settable(cls))}" for name, cls in models.items())
    t.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="another model config field, repeatable; VALUE in JSON (4, 0.5, "
                   f"true, null) or a bare word. Fields by --model: {fields}. The feedback "
                   f"models attend to the last attn_len={FEEDBACK_ATTN_LEN} steps unless set "
                   "(null: every step since the start of the pass over the text, slower and "
                   "slower)")
    t.add_argument("--seed", type=seed_int, default=run["seed"],
                   help="seed of the weights and batches (default: %(default)s)")
    t.add_argument("--device", type=device_name, default=None, help=DEVICE_HELP)
    t.add_argument("--out", type=out_file, default=Path("checkpoints/model.pt"),
                   help="the checkpoint file to write; a missing folder is created "
                   "(default: %(default)s)")


def add_sample_options(s: argparse.ArgumentParser) -> None:
    """`sample`'s options, but for `--checkpoint`, `--trust-checkpoint` and `--compile`."""
    s.add_argument("--prompt", default="\n",
                   help="text to continue, in the corpus's characters (default: a newline)")
    s.add_argument("--tokens", type=count(0, 2**31, "2**31"), default=300,
                   help="characters to generate (default: %(default)s)")
    s.add_argument("--temperature", default=0.8,
                   type=number(0, what="a finite number >= 0 (0 = greedy)"),
                   help="lower is more predictable, 0 is greedy (default: %(default)s)")
    s.add_argument("--top-k", type=count(1), default=None,
                   help="draw from the k likeliest characters only (default: all; k of "
                   "the vocabulary size or more keeps all, as generate(top_k=...) does)")
    s.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the sampling (default: %(default)s)")
    s.add_argument("--device", type=device_name, default=None, help=DEVICE_HELP)
