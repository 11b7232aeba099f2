"""Checkpoints that are never half-written, never silently corrupted, never leave litter
behind, and never run code when read.

A checkpoint file is one header line, then the bytes of `torch.save(payload)`:

    LABNN-CHECKPOINT 1 sha256=<64 hex digits of everything after this line>\\n

`save_atomic` writes it to a temporary file beside the target, checks what reached the
disk, then renames it into place: a crash mid-save leaves the previous checkpoint intact
and a reader never sees half a file. `load` recomputes the SHA-256 and refuses a file
whose bytes changed. Read one with `labnn.training.checkpoint.load` (`torch.load` stops at the
header line). `exclusive` keeps a second run from writing the same checkpoint meanwhile.

A payload is plain data: tensors, dicts, lists, tuples, str, int, float, bool, None, and
dataclasses of these (written as dicts naming their class, see `to_plain`). `load` reads
it with `torch.load(weights_only=True)`, which builds nothing else, so a shared file
cannot run code (a pickle may call any function, `os.system` included). Checkpoints of
an older labnn may hold pickled objects (a `FeedbackState`): `load(path, trusted=True)`
reads such a file, and must be given only files one wrote oneself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import importlib
import io
import os
import pickle
import re
import secrets
import stat
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

MAGIC = b"LABNN-CHECKPOINT 1 sha256="
HEADER_LEN = len(MAGIC) + 64 + 1  # magic, hex digest, newline
# how a `torch.save` file starts: a zip archive (torch >= 1.6), or a bare pickle
TORCH_STARTS = (b"PK\x03\x04", b"\x80")
# the key naming a dataclass's class in its plain form; the other keys are its fields
DATACLASS = "__dataclass__"
# what `torch.load(weights_only=True)` builds, on every torch this package supports
PLAIN = (
    str, int, float, bool, type(None), torch.Tensor, torch.nn.Parameter, torch.Size
)
# the classes a checkpoint may name: top-level dataclasses of labnn's own modules
LABNN_CLASS = re.compile(r"(labnn(?:\.[a-z][a-z0-9_]*)*)\.([A-Za-z][A-Za-z0-9_]*)")


class UntrustedCheckpointError(ValueError):
    """A checkpoint holds pickled objects, which the safe loader does not build.

    Attributes:
        path: the file.
        found: the name the loader refused (e.g. `"posix.system"`), or `""`.
        reason: the message without the advice on `trusted=True`.
    """

    def __init__(self, path: str | os.PathLike, found: str):
        self.path, self.found = Path(path), found
        what = (f"holds Python objects, not only tensors and plain data (it names "
                f"{found})"
                if found else "is not plain data that the safe loader reads")
        self.reason = (
            f"checkpoint {path} {what}: loading it could run any code, so it was not "
            "loaded"
        )
        super().__init__(
            f"{self.reason}. A checkpoint of an older labnn that you wrote yourself "
            "loads with labnn.training.checkpoint.load(path, trusted=True)"
        )


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
        raise TypeError(f"{where} is a {name}, a dataclass from outside labnn, which "
                        "load would not build: give it as a dict (dataclasses.asdict)")
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

    Only top-level dataclasses of labnn's modules are built; a module not yet imported
    is imported only when it is one of labnn's (never `labnn.__main__`).

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
            raise ValueError(f"{where or 'it'} names {name!r}, which is not a dataclass "
                             "of labnn; a checkpoint builds no other class")
        try:
            return cls(**items)
        except TypeError as err:
            raise ValueError(f"{where}: fields {sorted(items)} do not make a "
                             f"{name} ({err})") from None
    if kind in (list, tuple):
        items = [from_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return kind(items) if any(a is not b for a, b in zip(items, value)) else value
    return value


def _labnn_dataclass(name: Any) -> type | None:
    """The dataclass `name` (`"labnn.feedback.model.FeedbackState"`) names, or None when it is
    not a top-level dataclass of a labnn module."""
    match = LABNN_CLASS.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        return None
    module = sys.modules.get(match[1])
    if module is None:
        try:
            module = importlib.import_module(match[1])
        except ImportError:
            return None
    cls = getattr(module, match[2], None)
    if isinstance(cls, type) and is_dataclass(cls) and cls.__module__ == match[1]:
        return cls
    return None


def _temporary_name(target: Path) -> Path:
    """`.<name>.<pid>.<random>.tmp` beside `target`: the pid tells a later save whether
    its writer is gone."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _alive(pid: int) -> bool:
    """Whether process `pid` may still be running (True when this cannot be told)."""
    if os.name != "posix":
        return True  # no cheap, safe check: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Delete temporaries of `target` left by saves whose process died (e.g. killed with
    `kill -9`).

    A temporary whose writer is still running (this process, or any live pid) is left
    alone.
    """
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    removed = []
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        match = pattern.fullmatch(tmp.name)
        if match and int(match[1]) != os.getpid() and not _alive(int(match[1])):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def check_writable(path: str | os.PathLike) -> None:
    """Make sure a checkpoint can be saved to `path`, before hours of work depend on it:
    create its folder, then create and remove a file beside where `save_atomic` writes.

    Raises:
        OSError: the folder cannot be created or written (read-only, a file in the way,
            a disk that refuses), naming `path`. IsADirectoryError: `path` is a folder.
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise IsADirectoryError(
            f"cannot save a checkpoint to {path}: it is a directory; give a file name"
        )
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".probe", dir=folder
        )
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise type(err)(
            f"{path}: cannot write a checkpoint in {folder} ({err.strerror or err})"
        ) from None


class CheckpointBusy(OSError):
    """Another process holds `exclusive(path)`: it is writing that checkpoint."""


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[None]:
    """Hold checkpoint `path` for this process alone while the block runs: a second run
    writing the same file (whose saves would silently replace this run's) is refused.

    The lock is `flock` on `.<name>.lock` beside the target, holding the writer's pid;
    the system releases it when the process ends, even by `kill -9`, and the file is
    removed when the block ends. Where `fcntl` is missing (Windows) nothing is locked.

    Raises:
        CheckpointBusy: (an OSError) another live process holds it, named by its pid.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    target = Path(os.path.realpath(path))
    lock = target.with_name(f".{target.name}.lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointBusy(f"checkpoint {path} is being written by another run (pid "
                                 f"{pid}): wait for it to end, or write elsewhere") from None
        try:  # its previous holder may have removed the file before we locked it
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def save_atomic(payload: dict[str, Any], path: str | os.PathLike) -> Path:
    """`torch.save(payload)` to `path` with a checksum, without ever exposing a partial
    file.

    A symlink at `path` is kept and its target written. A new file gets the default mode
    of the umask, an existing one keeps its mode. Temporaries of earlier saves killed
    mid-way are removed. Dataclasses are written as plain dicts (`to_plain`), which
    `load` turns back into them.

    Returns:
        `path`.

    Raises:
        TypeError: the payload is not a dict, or holds something `load` would refuse to
            build (`to_plain`); nothing is written.
    """
    path = Path(path)
    if not isinstance(payload, dict):
        raise TypeError(f"cannot save {path}: the payload must be a dict of named "
                        f"entries, got {type(payload).__name__}")
    try:
        payload = to_plain(payload)
    except TypeError as err:
        raise TypeError(f"cannot save {path}: {err}") from None
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise IsADirectoryError(
            f"cannot save a checkpoint to {path}: it is a directory; give a file name"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getbuffer()
    header = MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n"
    tmp = _temporary_name(target)
    # the umask applies, as for any new file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if tmp.read_bytes() != header + data:
            raise OSError(
                f"checkpoint {path}: the bytes read back differ from those written "
                "(disk error?)"
            )
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)
    return path


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; elsewhere a no-op)."""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def load(
    path: str | os.PathLike,
    map_location: str | torch.device | None = "cpu",
    *,
    verify: bool = True,
    trusted: bool = False,
) -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic`, refusing it when its bytes do not
    match their checksum, or when it holds anything but plain data.

    Args:
        path: the file.
        map_location: where tensors go (as in `torch.load`).
        verify: False also reads a plain `torch.save` file (no checksum, nothing
            verified).
        trusted: True unpickles whatever the file holds (`weights_only=False`), as
            labnn did before: for a checkpoint of an older labnn that you wrote
            yourself, never for a file from elsewhere (its pickle may run any code).

    Raises:
        FileNotFoundError: `path` does not exist. IsADirectoryError: it is a directory.
        UntrustedCheckpointError: (a ValueError) the file holds pickled objects and
            `trusted` is False; nothing in it was run.
        ValueError: the file is not a regular file, is empty, damaged, truncated, of
            another format version, holds something else than a dict, or (with
            `verify`) is not a labnn checkpoint.
    """
    path = Path(path)
    check_file(path)
    raw = path.read_bytes()
    if not raw:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): not a labnn checkpoint")
    version = re.match(rb"LABNN-CHECKPOINT (\d+) ", raw)
    if version and not raw.startswith(MAGIC):
        raise ValueError(
            f"checkpoint {path} is a labnn checkpoint of format "
            f"{version[1].decode(errors='replace')}; this labnn reads format "
            f"{MAGIC.split()[1].decode()}: read it with the labnn that wrote it"
        )
    if verify and not raw.startswith((MAGIC, *TORCH_STARTS)):
        raise ValueError(f"checkpoint {path} is not a labnn checkpoint: it starts with "
                         f"{raw[:16]!r}, not {MAGIC[:16]!r} (or its header is "
                         "damaged)")
    if raw.startswith(MAGIC):
        expected, data = raw[len(MAGIC) : HEADER_LEN - 1], memoryview(raw)[HEADER_LEN:]
        got = hashlib.sha256(data).hexdigest().encode()
        if raw[HEADER_LEN - 1 : HEADER_LEN] != b"\n" or got != expected:
            raise ValueError(
                f"checkpoint {path} is corrupted: its sha256 is {got.decode()}, the "
                "header says "
                f"{expected.decode(errors='replace')} ({len(raw)} bytes; truncated or "
                "changed on disk)"
            )
    elif verify:
        raise ValueError(
            f"checkpoint {path} has no checksum: it was written by torch.save or an "
            "older labnn, or its "
            "header is damaged. labnn.training.checkpoint.load(path, verify=False) reads it "
            "without verification"
        )
    else:
        data = raw
    try:
        payload = torch.load(
            io.BytesIO(data), map_location=map_location, weights_only=not trusted
        )
    except Exception as err:  # torch raises several types for a damaged file
        if isinstance(err, pickle.UnpicklingError) and not trusted:
            # the safe loader names what it refused "GLOBAL module.name" (torch >= 2.3)
            found = re.search(r"GLOBAL ([\w.]+)", str(err))
            raise UntrustedCheckpointError(path, found[1] if found else "") from None
        message = " ".join(str(err).split())
        raise ValueError(
            f"checkpoint {path} could not be read ({type(err).__name__}: {message})"
        ) from err
    if not isinstance(payload, dict):
        raise ValueError(f"checkpoint {path} holds a {type(payload).__name__}, not a dict "
                         "of named entries: it is not a labnn checkpoint")
    return from_plain(payload, f"checkpoint {path}: ")


def check_file(path: Path) -> None:
    """Raise an error naming what `path` is unless it is a regular file (never opening
    it: a pipe would block).

    Raises:
        FileNotFoundError: nothing is there (or a symlink points nowhere).
        IsADirectoryError: a directory. ValueError: a device, pipe or socket.
    """
    if path.is_dir():
        raise IsADirectoryError(f"checkpoint {path} is a directory, not a file")
    if path.is_file():
        return
    if path.is_symlink() and not path.exists():
        raise FileNotFoundError(f"checkpoint {path} is a symlink to {os.readlink(path)}, "
                                "which does not exist")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path} does not exist") from None
    kinds = [(stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")]
    kind = next((name for test, name in kinds if test(mode)), "not a file")
    raise ValueError(f"checkpoint {path} is not a regular file ({kind}): not a labnn "
                     "checkpoint")


def config_dict(config: Any) -> dict[str, Any]:
    """A model config as a plain dict (dataclasses are converted)."""
    return asdict(config) if is_dataclass(config) else dict(config)


def check_compatible(
    saved: dict[str, Any], model: torch.nn.Module, path: str | os.PathLike
) -> None:
    """Raise `ValueError` listing every field where the checkpoint's model differs from
    `model`."""
    kind = type(model).__name__
    if saved.get("model_class") != kind:
        raise ValueError(
            f"checkpoint {path} holds a {saved.get('model_class')}, but the model is a "
            f"{kind}"
        )
    mine = config_dict(model.config)
    diffs = [
        f"{k}: checkpoint {saved['model_config'].get(k)!r} vs model {mine.get(k)!r}"
        for k in sorted(set(mine) | set(saved["model_config"]))
        if saved["model_config"].get(k) != mine.get(k)
    ]
    if diffs:
        raise ValueError(
            f"checkpoint {path} was saved from another {kind} config — "
            + "; ".join(diffs)
        )


def check_weights(
    weights: Any, model: torch.nn.Module, path: str | os.PathLike
) -> None:
    """Raise `ValueError` listing where the checkpoint's `weights` (a `state_dict`) do
    not fit `model`: missing or unknown names, other shapes."""
    kind = type(model).__name__
    if not isinstance(weights, dict):
        raise ValueError(f"checkpoint {path}: its weights are a {type(weights).__name__}, "
                         f"not the state_dict of a {kind}")
    mine = model.state_dict()

    def shape(value: Any) -> Any:
        return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__

    problems = [f"{k}: missing" for k in mine if k not in weights]
    problems += [f"{k}: not in the model" for k in weights if k not in mine]
    problems += [f"{k}: checkpoint {shape(weights[k])} vs model {shape(mine[k])}"
                 for k in mine if k in weights and shape(weights[k]) != shape(mine[k])]
    if problems:
        more = f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise ValueError(f"checkpoint {path}: its weights do not fit a {kind} of its "
                         "model_config — " + "; ".join(problems[:4]) + more)
