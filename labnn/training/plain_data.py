"""Checkpoint payloads as plain data: what `torch.load(weights_only=True)` reads back.

A checkpoint holds tensors, dicts, lists, tuples, str, int, float, bool, None and
labnn's data classes of these (`PAYLOAD`: configs, states, task data). `to_plain` writes
each as a dict naming its class; `from_plain` builds it again, and builds no other class:
a shared file cannot make the loader construct anything else (not even another of labnn's
dataclasses, such as `Trainer`, whose construction has effects).
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import re
import sys
import warnings
import zipfile
from collections import OrderedDict
from dataclasses import is_dataclass
from typing import Any

import torch

# the key naming a dataclass's class in its plain form; the other keys are its fields
DATACLASS = "__dataclass__"
# what `torch.load(weights_only=True)` builds, on every torch this package supports
PLAIN = (
    str, int, float, bool, type(None), torch.Tensor, torch.nn.Parameter, torch.Size
)
# how a checkpoint names a class: a top-level class of one of labnn's own modules
LABNN_CLASS = re.compile(r"(labnn(?:\.[a-z][a-z0-9_]*)*)\.([A-Za-z][A-Za-z0-9_]*)")
# the only classes it may name: labnn's dataclasses of plain data, built with no effect
# beyond checking their fields (never `Trainer`: building one picks a device)
PAYLOAD = frozenset({
    "labnn.training.config.TrainConfig", "labnn.transformer.TransformerConfig",
    "labnn.xl.model.XLConfig", "labnn.feedback.model.FeedbackConfig",
    "labnn.feedback.model.FeedbackState", "labnn.feedback.kv.FeedbackKVConfig",
    "labnn.feedback.kv.KVState", "labnn.data.recall.RecallVocab",
    "labnn.data.programs.ProgramData",
})



def to_plain(value: Any, where: str = "payload") -> Any:
    """`value` as data `torch.load(weights_only=True)` reads: each dataclass of labnn
    becomes a dict of its fields plus `DATACLASS: "module.Class"`; the rest is kept as
    it is.

    Containers are copied only where something inside them changed (a `state_dict`
    keeps its `_metadata`).

    Args:
        value: tensors, dicts, lists, tuples, str, int, float, bool, None, labnn's
            dataclasses.
        where: how error messages name `value`.

    Raises:
        TypeError: something else (a set, a numpy scalar, a function, another
            package's dataclass), named by its place, e.g.
            `payload['history']['loss'][3] is a numpy.float64`.
    """
    kind = type(value)
    if kind in PLAIN:
        return value
    if kind in (dict, OrderedDict):
        items = {k: to_plain(v, f"{where}[{k!r}]") for k, v in value.items()}
        for k in items:
            to_plain(k, f"{where} key {k!r}")
        return _rebuilt(value, items)
    if kind in (list, tuple):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        changed = any(a is not b for a, b in zip(items, value))
        return kind(items) if changed else value
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", None):
        name = f"{kind.__module__}.{name}"
    if is_dataclass(value) and _labnn_dataclass(name) is kind:
        fields = {f.name: to_plain(getattr(value, f.name), f"{where}.{f.name}")
                  for f in dataclasses.fields(value)}
        return {DATACLASS: name, **fields}
    if is_dataclass(value) and not isinstance(value, type):
        outside = "from outside labnn" if not name.startswith("labnn.") else (
            "not among labnn's checkpoint data (plain_data.PAYLOAD)")
        raise TypeError(f"{where} is a {name}, a dataclass {outside}, which load would "
                        "not build: give it as a dict (dataclasses.asdict)")
    raise TypeError(
        f"{where} is a {name}: a checkpoint holds only tensors, dicts, lists, tuples, "
        "str, int, float, bool, None and labnn's dataclasses of these, so that loading "
        "it runs no code"
    )


def _rebuilt(container: dict, items: dict) -> dict:
    """`container` itself when `items` holds its own values, else a copy holding
    `items`."""
    if all(items[k] is v for k, v in container.items()):
        return container
    copy = container.copy()  # an OrderedDict's copy keeps `_metadata`
    copy.update(items)
    return copy


def from_plain(value: Any, where: str = "") -> Any:
    """Undo `to_plain`: each dict naming a dataclass becomes that dataclass again.

    Only the classes of `PAYLOAD` are built; a module not yet imported is imported only
    when it is one of labnn's (never `labnn.__main__`).

    Raises:
        ValueError: a dict names anything else (a forged file), or the fields do not
            fit the class.
    """
    kind = type(value)
    if kind in (dict, OrderedDict):
        items = {k: from_plain(v, f"{where}[{k!r}]") for k, v in value.items()}
        if DATACLASS not in items:
            return _rebuilt(value, items)
        name = items.pop(DATACLASS)
        cls = _labnn_dataclass(name)
        if cls is None:
            raise ValueError(f"{where or 'it'} names {name!r}, which is not a dataclass of "
                             "labnn's checkpoint data (plain_data.PAYLOAD); a checkpoint "
                             "builds no other class")
        try:
            return cls(**items)
        except Exception as err:  # noqa: BLE001 (the class's own checks, or forged fields)
            raise ValueError(f"{where}: fields {sorted(items)} do not make a "
                             f"{name} ({type(err).__name__}: {err})") from None
    if kind in (list, tuple):
        items = [from_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return kind(items) if any(a is not b for a, b in zip(items, value)) else value
    return value

# modules whose dataclasses checkpoints of labnn 0.1 name, and where those live now
MOVED = {
    "labnn.train_config": "labnn.training.config",
    "labnn.train": "labnn.training.trainer",
    "labnn.distributed": "labnn.training.distributed",
    "labnn.feedback_kv": "labnn.feedback.kv",
    "labnn.feedback_loop": "labnn.feedback.fused.loop",
}


def _labnn_dataclass(name: Any) -> type | None:
    """The dataclass `name` (`"labnn.feedback.model.FeedbackState"`) names, or None when
    it is not one of `PAYLOAD`.

    A name written before labnn's modules moved into sub-packages
    (`"labnn.feedback_kv.KVState"`) is read at the module's new place (`MOVED`).
    """
    match = LABNN_CLASS.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        return None
    module_name = MOVED.get(match[1], match[1])
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    cls = getattr(module, match[2], None)
    if (isinstance(cls, type) and is_dataclass(cls)
            and f"{cls.__module__}.{cls.__qualname__}" in PAYLOAD):
        return cls
    return None


def pickled_names(data: bytes) -> list[str] | None:
    """The classes and functions the pickle of a `torch.save` file (`data`) names that the
    safe loader refuses to build, read without unpickling it; None when they cannot all be
    read: not a zip archive of `torch.save`, or a pickle protocol that torch does not scan
    (`torch.save` writes protocol 2)."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)))
    except Exception:  # noqa: BLE001 (torch raises several types for what it cannot scan)
        return None


def older_labnn_names(names: list[str] | None) -> bool:
    """Whether `names` (`pickled_names`) are what a checkpoint of an older labnn pickled:
    labnn's dataclasses of `PAYLOAD` alone (under their names then, `MOVED`), nothing else."""
    return bool(names) and all(_labnn_dataclass(name) is not None for name in names)


class TorchScriptArchive(ValueError):
    """A TorchScript archive (`torch.jit.save`) read as a checkpoint: refused, not loaded
    (`is_torchscript`)."""

    def __init__(self, path: Any):
        """Name the file."""
        super().__init__(f"checkpoint {path} is a TorchScript archive (torch.jit.save), not a "
                         "labnn checkpoint, so it was not loaded (that runs its code)")


def is_torchscript(data: bytes | memoryview) -> bool:
    """Whether `data` is a TorchScript archive (`torch.jit.save`: a zip that holds
    `constants.pkl`), which `torch.load` hands to `torch.jit.load`, even with
    `weights_only`: that builds its modules, running their code (`__setstate__`)."""
    if bytes(data[:4]) != b"PK\x03\x04":
        return False
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return any(name.rpartition("/")[2] == "constants.pkl" for name in archive.namelist())
    except (zipfile.BadZipFile, ValueError):
        return False


# what `torch.save` writes in its zip archive, under one folder (`archive/` by default)
SAVED_MEMBER = re.compile(r"[^/]+/(data\.pkl|version|byteorder|\.format_version|"
                          r"\.storage_alignment|data/\d+|\.data/(version|serialization_id))")


def check_archive(data: bytes | memoryview, path: Any) -> None:
    """Refuse a zip archive (`data`, the file at `path`) that is not what `torch.save`
    writes: a TorchScript archive (`is_torchscript`), or members `torch.save` never
    writes, or under several folders (added by hand: nothing labnn wrote).

    Raises:
        TorchScriptArchive: (a ValueError). ValueError: naming the members.
    """
    if is_torchscript(data):  # torch.load would build its modules (torch.jit.load)
        raise TorchScriptArchive(path)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, ValueError):
        return  # not a zip: a legacy pickle, or damaged (torch.load says which)
    other = [n for n in names if not SAVED_MEMBER.fullmatch(n)]
    if not other and len({n.partition("/")[0] for n in names}) > 1:
        other = names
    if other:
        raise ValueError(f"checkpoint {path} holds zip members that torch.save never writes "
                         f"({', '.join(other[:3])}{', ...' * (len(other) > 3)}): it was "
                         "changed after it was saved, so it was not loaded")


def torch_load(data: bytes | memoryview, map_location: Any, *, weights_only: bool) -> Any:
    """`torch.load` of a file's `data`, torch's warnings kept back (a pickle protocol the
    safe loader does not expect: the error raised says what the file is, in one line)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(data), map_location=map_location,
                          weights_only=weights_only)
