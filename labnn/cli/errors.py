"""The one line the command line prints for each mistake it catches: what went wrong,
with the options that caused it and the way out (`labnn.cli.commands` raises these; the
options' own checks are `labnn.cli.options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

from labnn.cli.options import OWN_OPTIONS, OptionError, UsageError
from labnn.training import checkpoint as ckpt
from labnn.training.config import ScheduleChanged, TrainConfigChanged
from labnn.training.plain_data import TorchScriptArchive
from labnn.training.too_large import listed
from labnn.training.trainer import Trainer


class Interrupted(UsageError):
    """Ctrl-C during training (exit status 130)."""


def interrupted(trainer: Trainer, args: argparse.Namespace, existed: bool) -> Interrupted:
    """The one line for Ctrl-C during training: what `--out` holds now."""
    if trainer.saved_iter is not None:
        saved = f"{args.out} holds iteration {trainer.saved_iter} (--resume continues from it)"
    elif existed:  # --overwrite, before its first save
        saved = f"{args.out} still holds the earlier run, unchanged"
    else:
        first = min(args.eval_interval, args.iters)
        saved = (f"nothing was saved: the first checkpoint is written at iteration {first} "
                 "(--eval-interval)")
    return Interrupted(f"interrupted at iteration {trainer.iter}; {saved}")


def drop_stdout() -> None:
    """Point stdout at the null device once its reader has closed it (`| head`): later
    lines, and Python's flush at exit, then raise no `BrokenPipeError`."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(text: str, out: Path) -> None:
    """Print a line of `train` on stdout, at once; once its reader has closed it (`train
    ... | head -1`), say so on stderr and go on: the run's product is its checkpoint
    `out`, not these lines (a closed stdout ended runs silently, and the progress bar's
    flush of it was blamed on `--out`)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        drop_stdout()
        print(f"python -m labnn train: stdout was closed (by `| head`?); training goes on, "
              f"into --out {out}", file=sys.stderr, flush=True)


def before_training(args: argparse.Namespace) -> str:
    """The line for Ctrl-C before training (or sampling) began: what `--out` holds."""
    if args.command != "train":
        return "interrupted"
    if not os.path.lexists(args.out):
        return "interrupted before training started; nothing was saved"
    again = " (--resume continues from it)" if args.resume else ""
    return f"interrupted before training started; {args.out} is unchanged{again}"


def schedule_changed(err: ScheduleChanged, args: argparse.Namespace) -> UsageError:
    """The one line for `--resume` with an `--iters` that changes the steps taken."""
    old, it = err.saved_max_iters, err.saved_iter
    reason = (f"it is past iteration {args.iters}" if it > args.iters else
              f"the learning rate's cosine decay ends at iteration {old} there, "
              f"{args.iters} here")
    return UsageError(
        f"--iters {args.iters}: {args.out} holds iteration {it} of a run of --iters {old}; "
        f"resuming it would not train as a fresh run of --iters {args.iters} ({reason}). "
        f"Resume with --iters {old}, or start afresh with --overwrite")


def untrusted(err: ckpt.UntrustedCheckpointError, option: str = "",
              needed: tuple[str, ...] = ()) -> UsageError:
    """The one line for a checkpoint the safe loader refused (`option`: `--out` of `train
    --resume`, or `--checkpoint`; a file without a checksum: `unverified(err.path, option,
    needed)`). `--trust-checkpoint` is offered only when its pickle names nothing but
    labnn's own classes, as an older labnn's did (read without unpickling it): a whole
    `nn.Module`, a NumPy array or `os.system` is no labnn checkpoint."""
    if err.unverified and option:
        return unverified(err.path, option, needed)
    resume = option == "--out"
    names = err.names
    if err.labnn_only:
        return UsageError(f"{err.reason}. It names only labnn's own classes, as a checkpoint of "
                          "an older labnn does: if you wrote it yourself, --trust-checkpoint "
                          f"{'resumes from' if resume else 'loads'} it")
    said = f"{'--resume: ' if resume else ''}{option or 'checkpoint'} {err.path}"
    shown = names or ([err.found] if err.found else [])  # unscanned: the one refused
    if shown:
        held = (f"pickled objects (it names {', '.join(shown[:3])}"
                f"{', ...' * (len(shown) > 3)})")
        nobody = f"no labnn checkpoint names {'it' if len(shown) == 1 else 'them'}"
    else:  # unscanned: another pickle protocol
        held, nobody = "a pickle the safe loader does not read", "labnn never wrote one"
    whole = any(name.startswith("torch.nn.modules.") for name in shown)
    way = ("give another --out, or --overwrite to replace it" if resume else
           "give a file that train wrote" if option else "")
    return UsageError(
        f"{said} holds {held}, so it was not loaded (unpickling could run code); "
        f"{nobody}: do not load this file"
        + (" (a model saved whole by torch.save(model))" if whole else "")
        + (f"; {way}" if way else ""))


def unverified(path: Path, option: str, needed: tuple[str, ...]) -> UsageError:
    """The one line for a file without labnn's checksum line (`option`: `--out` of `train
    --resume`, or `--checkpoint`): a checkpoint of an older labnn if it holds the entries
    `needed`, which `--trust-checkpoint` reads, else a `torch.save` file that `train` did not
    write. The safe loader, which runs no code, reads it to tell them apart."""
    resume = option == "--out"
    said = f"{'--resume: ' if resume else ''}{option} {path}"
    way = ("give another --out, or --overwrite to replace it" if resume else
           "give a file that train wrote")
    try:
        held = ckpt.load(path, verify=False)
    except ckpt.UntrustedCheckpointError as err:  # pickled objects: named
        return untrusted(err, option)
    except TorchScriptArchive as err:  # its code: not run
        return UsageError(f"{said}{str(err).removeprefix(f'checkpoint {path}')}; {way}")
    except ValueError:  # not a dict
        held = None
    missing = [k for k in needed if held is None or k not in held]
    if not missing:
        return UsageError(f"{said} has no checksum: a checkpoint of an older labnn (or a copy "
                          "made with torch.save); if you wrote it yourself, --trust-checkpoint "
                          f"{'resumes from' if resume else 'loads'} it")
    what = ("not a dict of named entries" if held is None else
            f"without {', '.join(missing[:3])}{', ...' * (len(missing) > 3)}")
    return UsageError(f"{said} is not a checkpoint written by `python -m labnn train` (a "
                      f"torch.save file, {what}); {way}")


def compile_too_long(seq_len: int, t0: int) -> UsageError:
    """The one line for `sample --compile` past the `seq_len` positions a transformer
    learned: its ring cannot slide the window (`labnn.compiled.ring_slots`)."""
    most = seq_len - t0 + 1  # the prompt's t0 positions, then all new tokens but the last
    prompt = f"this --prompt of {t0} character{'s' * (t0 != 1)}"
    fits = (f"generates --tokens {most} or fewer after {prompt}" if most > 0
            else f"cannot continue {prompt}")
    return UsageError(f"--compile: this transformer learned {seq_len} positions, so it {fits} "
                      "(its compiled ring cannot slide the window); leave out --compile to "
                      "generate more, recomputing the window")


def check_set_fields(pairs: list[str], model: str, configs: dict[str, type]) -> None:
    """Refuse a `--set FIELD=VALUE` whose field is not the `--model`'s but another
    model's (`configs`: `--model` name -> config class), naming the models that have it
    (else `labnn.cli.options.parse_overrides` lists this model's fields alone)."""
    fields = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in configs.items()}
    for pair in pairs:
        field = pair.partition("=")[0]
        others = [name for name in configs if name != model and field in fields[name]]
        if field not in fields[model] and others:
            raise OptionError(f"--set {pair}: {field} is a field of --model "
                              f"{listed(others, 'or')}, not of --model {model} "
                              f"({configs[model].__name__}); give that --model, or leave "
                              "this --set out")


def config_mistake(err: Exception, given: dict[str, str]) -> UsageError:
    """The one line for a model config that refused its values, naming the options that
    gave the fields its message names: an `OptionError` (status 2) when it names one, as
    for a `--set` that does not parse or a size argparse refuses.

    Args:
        err: the config's error, e.g. `d_model=30 must be divisible by n_heads=4`.
        given: each field set from the command line -> its option, e.g.
            `{"d_model": "--d-model 30", "d_ff": "--set d_ff=-4"}`.
    """
    message = " ".join(str(err).split())
    named = [option for field, option in given.items()
             if re.search(rf"(?<![\w-]){re.escape(field)}(?![\w-])", message)]
    return OptionError(f"{', '.join(named)}: {message}") if named else UsageError(message)


def config_changed(err: ckpt.ConfigMismatch, out: Path,
                   names: dict[str, str]) -> UsageError:
    """The one line for `--resume` with model options other than the checkpoint's: the
    options that give its model and config, each with the value asked for now (`names`:
    model class -> its `--model` name)."""
    def option(field: str, value: object) -> str:
        if field == "model_class":
            return f"--model {names.get(value, value)}"
        if field == "vocab_size":
            return f"a corpus of {value} characters"
        if field in OWN_OPTIONS:
            return f"{OWN_OPTIONS[field]} {value}"
        return f"--set {field}={json.dumps(value)}"

    def asked(field: str, value: object) -> str:
        return names.get(value, value) if field == "model_class" else json.dumps(value)

    diffs = dict(err.diffs)
    d_model = diffs.get("d_model")
    if d_model and diffs.get("d_ff") == tuple(4 * d for d in d_model):
        del diffs["d_ff"]  # followed from --d-model, as its default does (4 D)
    given = ", ".join(f"{option(f, saved)} (not {asked(f, now)})"
                      for f, (saved, now) in diffs.items())
    return UsageError(f"--resume: {out} was trained with other model options: {given}; "
                      "resume with those, or start afresh with --overwrite")


TRAIN_OPTIONS = {"lr": "--lr", "seed": "--seed", "batch_size": "--batch-size",
                 "seq_len": "--seq-len"}


def train_config_changed(err: TrainConfigChanged, out: Path) -> UsageError:
    """The one line for `--resume` with training options other than the checkpoint's
    (those that change the steps: not `--eval-*` or `--device`), each as its option."""
    diffs = dict(err.diffs)
    lr, min_lr = diffs.get("lr"), diffs.get("min_lr")
    if lr and min_lr == tuple(rate / 10 for rate in lr):
        del diffs["min_lr"]  # followed from --lr, as its default does (lr / 10)
    given = ", ".join(f"{TRAIN_OPTIONS.get(f, f)} {json.dumps(saved)} (not {json.dumps(now)})"
                      for f, (saved, now) in diffs.items())
    return UsageError(f"--resume: {out} was trained with other training options: {given}; "
                      "resume with those, or start afresh with --overwrite")
