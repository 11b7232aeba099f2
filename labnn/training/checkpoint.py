"""Checkpoints that are never half-written, never silently corrupted, never leave litter
behind, and never run code when read.

A checkpoint file is one header line, then the bytes of `torch.save(payload)`:

    LABNN-CHECKPOINT 1 sha256=<64 hex digits of everything after this line>\\n

`save_atomic` writes it to a temporary file beside the target, syncs it and reads it back
(through the system's cache: a short write shows, a disk that loses bytes later does not),
then renames it into place: a crash mid-save leaves the previous checkpoint intact and a
reader never sees half a file. `load` recomputes the SHA-256 and refuses a file whose
bytes changed. Read one with `labnn.training.checkpoint.load` (`torch.load` stops at the
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
import hashlib
import io
import os
import pickle
import re
import stat
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

from labnn.nn.arguments import check_bool
from labnn.training.plain_data import (check_archive, from_plain, older_labnn_names,
                                      pickled_names, to_plain, torch_load)
from labnn.training.safe_files import (CheckpointBusy, SavedThenInterrupted, check_file,
                                       check_owner_writes, check_replaceable, check_writable,
                                       exclusive, fsync_dir, remove_stale_temporaries,
                                       saved_if_interrupted, temporary_name)

__all__ = ["CheckpointBusy", "SavedThenInterrupted", "UntrustedCheckpointError",
           "check_compatible", "check_file", "check_weights", "check_writable", "config_dict",
           "exclusive", "load", "save_atomic"]

MAGIC = b"LABNN-CHECKPOINT 1 sha256="
HEADER_LEN = len(MAGIC) + 64 + 1  # magic, hex digest, newline
# how a `torch.save` file starts: a zip archive (torch >= 1.6), or a bare pickle
TORCH_STARTS = (b"PK\x03\x04", b"\x80")
class UntrustedCheckpointError(ValueError):
    """A checkpoint holds pickled objects, which the safe loader does not build, or (with
    `unverified`) has no checksum to verify it by. `trusted=True` is offered only for a
    pickle that names labnn's own checkpoint classes alone, as an older labnn wrote them.

    Attributes:
        path: the file.
        found: the name the loader refused (e.g. `"posix.system"`), or `""`.
        names: every class or function the pickle names that the safe loader refuses,
            read without unpickling it (`plain_data.pickled_names`); None if unread.
        labnn_only: `names` are labnn's own checkpoint classes alone.
        reason: the message without the advice on `trusted=True`.
        unverified: it has no checksum (a `torch.save` file); what it holds was not read.
    """

    def __init__(self, path: str | os.PathLike, found: str = "", *,
                 unverified: bool = False, names: list[str] | None = None):
        self.path, self.found, self.unverified = Path(path), found, unverified
        self.names, self.labnn_only = names, older_labnn_names(names)
        shown = names or ([found] if found else [])
        what = (f"holds Python objects, not only tensors and plain data (it names "
                f"{', '.join(shown[:3])}{', ...' * (len(shown) > 3)})"
                if shown else "is not plain data that the safe loader reads")
        self.reason = (f"checkpoint {path} {what}: loading it could run any code, so it "
                       "was not loaded")
        load = "labnn.training.checkpoint.load(path,"
        if unverified:
            self.reason = (f"checkpoint {path} has no checksum: it was written by "
                           "torch.save or an older labnn, or its header is damaged")
            advice = ("A checkpoint of an older labnn that you wrote yourself loads with "
                      f"{load} verify=False) (without verification) or trusted=True")
        elif self.labnn_only:
            advice = ("It names only labnn's own classes, as a checkpoint of an older labnn "
                      f"does: if you wrote it yourself, {load} trusted=True) loads it")
        else:
            advice = (f"No labnn checkpoint names {'it' if len(shown) == 1 else 'them'}: "
                      "do not load this file")
        super().__init__(f"{self.reason}. {advice}")


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
        OSError: it cannot be written (a read-only folder, a full disk, an immutable
            file in the way), naming `path`; a file already there is left unchanged.
            PermissionError: the file there is read-only (its owner may not write it):
            someone protected it, and it stays.
        IsADirectoryError, ValueError: `path` is a folder, or a device, pipe or socket
            (`check_replaceable`), which a save would replace.
        SavedThenInterrupted: (a KeyboardInterrupt) Ctrl-C came once the new file was in
            place; an earlier one is a plain KeyboardInterrupt, the file there unchanged.
    """
    path = Path(path)
    if not isinstance(payload, dict):
        raise TypeError(f"cannot save {path}: the payload must be a dict of named "
                        f"entries, got {type(payload).__name__}")
    try:
        payload = to_plain(payload)
    except TypeError as err:
        raise TypeError(f"cannot save {path}: {err}") from None
    target = check_replaceable(path)
    check_owner_writes(path, target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise type(err)(f"cannot save checkpoint {path}: cannot create {target.parent} "
                        f"({err.strerror or err})") from None
    remove_stale_temporaries(target)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getbuffer()  # the one copy of the checkpoint held in memory
    header = MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n"
    tmp = temporary_name(target)
    with saved_if_interrupted(target, header, path):  # Ctrl-C once the file is in place
        try:
            _write_then_rename(tmp, target, header, data, path)
        except OSError as err:  # read-only, full, or an immutable file in the way
            if not err.strerror:
                raise
            raise type(err)(f"cannot save checkpoint {path} ({err.strerror}); the file "
                            "there, if any, is unchanged") from None
        finally:  # a read-only folder refuses even this unlink: a leftover goes later
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        fsync_dir(target.parent)
    return path


def _write_then_rename(tmp: Path, target: Path, header: bytes, data: memoryview,
                       path: Path) -> None:
    """Write `header + data` to `tmp`, sync it, read it back in chunks (no second copy of
    `data`) to check it against `header`'s sha256, rename it to `target` (keeping its mode)."""
    # the umask applies, as for any new file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(header)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    with open(tmp, "rb") as f:
        head, digest = f.read(len(header)), hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        size = f.tell()
    if (head, size, digest.hexdigest().encode()) != (header, len(header) + len(data),
                                                    header[len(MAGIC):-1]):
        raise OSError(f"checkpoint {path}: the bytes read back differ from those written "
                      "(disk error?)")
    if target.exists():
        os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
    os.replace(tmp, target)


def check_map_location(map_location) -> None:
    """Raise a clear error unless `map_location` is a device this machine has (a GPU's
    backend reports it available; the CPU and `meta` always), a dict or a function (what
    `torch.load` takes), so that a bad one is not blamed on the file."""
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    try:
        device = torch.device(map_location)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"map_location must be a device ('cpu', 'cuda', ...), a dict or a "
                         f"function, got {map_location!r}") from None
    backend = getattr(torch, device.type, None)  # torch.cuda, torch.mps, torch.xpu, ...
    if device.type not in ("cpu", "meta") and not (backend and backend.is_available()):
        raise ValueError(f"map_location={map_location!r}: this machine has no "
                         f"{device.type} device; use 'cpu'")


def load(path: str | os.PathLike, map_location: str | torch.device | None = "cpu", *,
         verify: bool = True, trusted: bool = False) -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic`, refusing it when its bytes do not
    match their checksum, or when it holds anything but plain data.

    Args:
        path: the file.
        map_location: where tensors go (as in `torch.load`: a device, dict or function).
        verify: False also reads a plain `torch.save` file, which has no checksum to
            verify; a labnn checkpoint's checksum is verified either way (a damaged one
            is refused).
        trusted: True unpickles whatever the file holds (`weights_only=False`), with
            or without a checksum, as labnn did before: for a checkpoint of an older
            labnn that you wrote yourself, never for a file from elsewhere (its pickle
            may run any code).

    Raises:
        FileNotFoundError: `path` does not exist. IsADirectoryError: it is a directory.
        UntrustedCheckpointError: (a ValueError) the file holds pickled objects, or
            (with `verify`) has no checksum, and `trusted` is False; nothing was run.
        ValueError: the file is not a regular file, is empty, damaged, truncated, of
            another format version, a zip with members `torch.save` never writes,
            holds no dict, or (with `verify`) is not a labnn checkpoint.
    """
    check_bool("verify", verify), check_bool("trusted", trusted)  # "no" was true: it ran
    path = Path(path)
    check_map_location(map_location)
    check_file(path)
    raw = path.read_bytes()
    if not raw:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): not a labnn checkpoint")
    version = re.match(rb"LABNN-CHECKPOINT (\d+) ", raw)
    if version and not raw.startswith(MAGIC):
        raise ValueError(f"checkpoint {path} is a labnn checkpoint of format "
                         f"{version[1].decode(errors='replace')}; this labnn reads format "
                         f"{MAGIC.split()[1].decode()}: read it with the labnn that wrote it")
    if verify and not raw.startswith((MAGIC, *TORCH_STARTS)):
        raise ValueError(f"checkpoint {path} is not a labnn checkpoint: it starts with "
                         f"{raw[:16]!r}, not {MAGIC[:16]!r} (or its header is damaged)")
    if raw.startswith(MAGIC):
        expected, data = raw[len(MAGIC) : HEADER_LEN - 1], memoryview(raw)[HEADER_LEN:]
        got = hashlib.sha256(data).hexdigest().encode()
        if raw[HEADER_LEN - 1 : HEADER_LEN] != b"\n" or got != expected:
            raise ValueError(f"checkpoint {path} is corrupted: its sha256 is {got.decode()}, "
                             f"the header says {expected.decode(errors='replace')} "
                             f"({len(raw)} bytes; truncated or changed on disk)")
    elif verify and not trusted:
        raise UntrustedCheckpointError(path, unverified=True)
    else:
        data = raw
    check_archive(data, path)  # a TorchScript archive, or members torch.save never writes
    try:
        payload = torch_load(data, map_location, weights_only=not trusted)
    except Exception as err:  # torch raises several types for a damaged file
        if isinstance(err, pickle.UnpicklingError) and not trusted:
            # the safe loader names what it refused: "GLOBAL module.name"
            found = re.search(r"GLOBAL ([\w.]+)", str(err))
            raise UntrustedCheckpointError(path, found[1] if found else "",
                                           names=pickled_names(bytes(data))) from None
        message = " ".join(str(err).split())
        raise ValueError(f"checkpoint {path} could not be read ({type(err).__name__}: "
                         f"{message})") from err
    if not isinstance(payload, dict):
        raise ValueError(f"checkpoint {path} holds a {type(payload).__name__}, not a dict "
                         "of named entries: it is not a labnn checkpoint")
    return from_plain(payload, f"checkpoint {path}: ")


def config_dict(config: Any) -> dict[str, Any]:
    """A model config as a plain dict (dataclasses are converted)."""
    return asdict(config) if is_dataclass(config) else dict(config)


class ConfigMismatch(ValueError):
    """A checkpoint saved from another model, or another config of it; `diffs` maps each
    field that differs (`model_class` for another model) to `(the checkpoint's value, the
    model's)`."""

    def __init__(self, message: str, diffs: dict[str, tuple[Any, Any]]):
        super().__init__(message)
        self.diffs = diffs


def check_compatible(saved: dict[str, Any], model: torch.nn.Module,
                     path: str | os.PathLike) -> None:
    """Raise `ConfigMismatch` (a ValueError) when the checkpoint holds another model class
    than `model`'s, or listing every field where its config differs from `model`'s."""
    kind = type(model).__name__
    if saved.get("model_class") != kind:
        raise ConfigMismatch(
            f"checkpoint {path} holds a {saved.get('model_class')}, but the model is a "
            f"{kind}", {"model_class": (saved.get("model_class"), kind)})
    mine, theirs = config_dict(model.config), saved["model_config"]
    diffs = {k: (theirs.get(k), mine.get(k)) for k in sorted(set(mine) | set(theirs))
             if theirs.get(k) != mine.get(k)}
    if diffs:
        raise ConfigMismatch(
            f"checkpoint {path} was saved from another {kind} config — "
            + "; ".join(f"{k}: checkpoint {a!r} vs model {b!r}" for k, (a, b) in diffs.items()),
            diffs)


def check_weights(weights: Any, model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Raise `ValueError` listing where the checkpoint's `weights` (a `state_dict`) do
    not fit `model`: missing or unknown names, other shapes, other dtypes."""
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
    problems += [f"{k}: checkpoint {str(weights[k].dtype)[6:]} vs model {str(mine[k].dtype)[6:]}"
                 for k in mine if k in weights and shape(weights[k]) == shape(mine[k])  # dtype:
                 and weights[k].dtype != mine[k].dtype]  # load_state_dict casts it silently
    if problems:
        more = f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise ValueError(f"checkpoint {path}: its weights do not fit a {kind} of its "
                         "model_config — " + "; ".join(problems[:4]) + more)
