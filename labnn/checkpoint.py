"""Atomic checkpoints: written to a temporary file in the same folder, flushed, then renamed into place.

A crash mid-save leaves the previous checkpoint intact; a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch


def save_atomic(payload: dict[str, Any], path: str | os.PathLike) -> Path:
    """`torch.save(payload)` to `path` without ever exposing a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load(path: str | os.PathLike, map_location: str | torch.device | None = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic`, with a clear error when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ValueError(f"checkpoint {path} could not be read ({type(err).__name__}: {err})") from err


def config_dict(config: Any) -> dict[str, Any]:
    """A model config as a plain dict (dataclasses are converted)."""
    return asdict(config) if is_dataclass(config) else dict(config)


def check_compatible(saved: dict[str, Any], model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Raise `ValueError` listing every field where the checkpoint's model differs from `model`."""
    kind = type(model).__name__
    if saved.get("model_class") != kind:
        raise ValueError(f"checkpoint {path} holds a {saved.get('model_class')}, but the model is a {kind}")
    mine = config_dict(model.config)
    diffs = [
        f"{k}: checkpoint {saved['model_config'].get(k)!r} vs model {mine.get(k)!r}"
        for k in sorted(set(mine) | set(saved["model_config"]))
        if saved["model_config"].get(k) != mine.get(k)
    ]
    if diffs:
        raise ValueError(f"checkpoint {path} was saved from another {kind} config — " + "; ".join(diffs))
