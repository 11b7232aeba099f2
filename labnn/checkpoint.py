"""Checkpoints that are never half-written, never silently corrupted, and never leave
litter behind.

A checkpoint file is one header line, then the bytes of `torch.save(payload)`:

    LABNN-CHECKPOINT 1 sha256=<64 hex digits of everything after this line>\\n

`save_atomic` writes it to a temporary file beside the target, checks what reached the
disk, then renames it into place: a crash mid-save leaves the previous checkpoint intact
and a reader never sees half a file. `load` recomputes the SHA-256 and refuses a file
whose bytes changed. Read one with `labnn.checkpoint.load` (`torch.load` stops at the
header line).
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import re
import secrets
import stat
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

MAGIC = b"LABNN-CHECKPOINT 1 sha256="
HEADER_LEN = len(MAGIC) + 64 + 1  # magic, hex digest, newline


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


def save_atomic(payload: dict[str, Any], path: str | os.PathLike) -> Path:
    """`torch.save(payload)` to `path` with a checksum, without ever exposing a partial
    file.

    A symlink at `path` is kept and its target written. A new file gets the default mode
    of the umask, an existing one keeps its mode. Temporaries of earlier saves killed
    mid-way are removed.

    Returns:
        `path`.
    """
    path = Path(path)
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
) -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic`, refusing it when its bytes do not
    match their checksum.

    Args:
        path: the file.
        map_location: where tensors go (as in `torch.load`).
        verify: False also reads a plain `torch.save` file (no checksum, nothing
            verified).

    Raises:
        FileNotFoundError: `path` does not exist. IsADirectoryError: it is a directory.
        ValueError: the file is damaged, truncated, or (with `verify`) not a labnn
            checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"checkpoint {path} is a directory, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    raw = path.read_bytes()
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
            "header is damaged. labnn.checkpoint.load(path, verify=False) reads it "
            "without verification"
        )
    else:
        data = raw
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ValueError(
            f"checkpoint {path} could not be read ({type(err).__name__}: {err})"
        ) from err


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
