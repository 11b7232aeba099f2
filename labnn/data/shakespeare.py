"""Tiny Shakespeare (Karpathy's char-rnn corpus): download once, verify, cache.

The file is looked for in `$LABNN_DATA_DIR` when set, else in `~/.cache/labnn`. A
missing file is downloaded from its public URL into a temporary file, checked against
its SHA-256 and only then renamed into place, so an interrupted download never leaves a
truncated corpus behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import urllib.request
from pathlib import Path

URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
       "tinyshakespeare/input.txt")
FILENAME = "tiny_shakespeare.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SIZE = 1_115_394


def data_dir() -> Path:
    """Where data files live: `$LABNN_DATA_DIR`, else `~/.cache/labnn`."""
    env = os.environ.get("LABNN_DATA_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "labnn"


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path) -> None:
    """Raise `ValueError` when the file at `path` is not the expected corpus (corrupted
    or truncated)."""
    got = sha256_of(path)
    if got != SHA256:
        raise ValueError(
            f"{path} has sha256 {got} ({path.stat().st_size} bytes), expected {SHA256} "
            f"({SIZE} bytes): "
            "the file is corrupted or truncated. Delete it to download it again, or "
            f"replace it with a copy of {URL}"
        )


def download(path: Path, url: str = URL, timeout: float = 60.0) -> None:
    """Download `url` to `path` atomically, verifying the checksum before the file
    appears."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with (
            os.fdopen(fd, "wb") as f,
            urllib.request.urlopen(url, timeout=timeout) as response,
        ):
            f.write(response.read())
        verify(Path(tmp))
        os.replace(tmp, path)
    except OSError as err:
        raise RuntimeError(
            f"could not download Tiny Shakespeare from {url} ({err}). Offline? Copy "
            f"the file to {path} "
            f"yourself, or set LABNN_DATA_DIR to a folder holding {FILENAME}"
        ) from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def check_corpus_path(path: Path) -> None:
    """Refuse what a user put at the corpus's path that is not a regular file, never
    opening it (a pipe would block) nor downloading over it.

    Raises:
        FileNotFoundError: a symlink to nothing. IsADirectoryError: a folder.
        ValueError: a pipe, a device or a socket.
    """
    way = f"or set LABNN_DATA_DIR to another folder (it holds {FILENAME})"
    if path.is_symlink() and not path.exists():
        raise FileNotFoundError(f"{path} is a symlink to {os.readlink(path)}, which does not "
                                f"exist: point it at a copy of {URL}, remove it to download "
                                f"the corpus there, {way}")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not the corpus file: move it away to "
                                f"download the corpus there, {way}")
    if path.exists() and not path.is_file():
        kind = {stat.S_IFIFO: "a pipe", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
                stat.S_IFBLK: "a device"}.get(stat.S_IFMT(path.stat().st_mode), "special")
        raise ValueError(f"{path} is {kind}, not a regular file: replace it with a copy of "
                         f"{URL}, {way}")


def load_tiny_shakespeare(
    directory: str | os.PathLike | None = None, *, download_missing: bool = True
) -> str:
    """The corpus as one string, downloaded and cached on first use.

    Args:
        directory: folder to read from / cache into (default `data_dir()`).
        download_missing: fetch the file when it is not there (otherwise raise
            `FileNotFoundError`).

    Returns:
        The 1,115,394-character text.
    """
    folder = Path(directory).expanduser() if directory is not None else data_dir()
    if folder.is_symlink() and not folder.exists():  # else mkdir's bare "File exists"
        named = f"LABNN_DATA_DIR={folder}" if directory is None else str(folder)
        raise FileNotFoundError(f"{named} is a symlink to {os.readlink(folder)}, which does "
                                "not exist: create that folder, or give another one")
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(
            f"{folder} is a file; the data directory must be a folder (to hold "
            f"{FILENAME})"
        )
    path = folder / FILENAME
    check_corpus_path(path)
    if not path.exists():
        if not download_missing:
            raise FileNotFoundError(
                f"{path} does not exist; download {URL} there or set LABNN_DATA_DIR"
            )
        missing = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
        try:
            download(path)
        except RuntimeError as err:
            for made in missing:  # the folders the download made, if still empty
                with contextlib.suppress(OSError):
                    made.rmdir()
            if missing and directory is None and os.environ.get("LABNN_DATA_DIR"):
                raise RuntimeError(f"LABNN_DATA_DIR={folder} does not exist (a typo?); "
                                   f"{err}") from err.__cause__
            raise
    verify(path)
    return path.read_text(encoding="utf-8")
