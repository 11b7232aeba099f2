"""Files that are never half-written and never written by two runs at once: the
temporaries of an atomic save, the lock of a checkpoint, and checks of a path before
work depends on it. `labnn.training.checkpoint` builds its saves on these.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path


def temporary_name(target: Path) -> Path:
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


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: Path) -> str | None:
    """What is at `path` when it is neither a regular file nor a folder ("a character
    device", "a pipe", ...; "not a file" for anything else), or None: nothing there, a
    file, a folder. Never opens it (a pipe would block).

    Raises:
        NotADirectoryError: a file stands where the path needs a folder, naming it.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a file where the path needs a folder: a.pt/x.pt
        in_the_way = next((p for p in path.parents if p.is_file()), path.parent)
        raise NotADirectoryError(f"{path}: {in_the_way} is a file, not a folder; give "
                                 "another path") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), "not a file")


def check_replaceable(path: Path) -> Path:
    """The file a save to `path` replaces (a symlink's target), refused when it is a
    folder, a device, a pipe or a socket: `os.replace` would put a regular file in its
    place (run as root, `/dev/null` itself).

    Raises:
        IsADirectoryError: a folder. ValueError: a device, pipe or socket.
    """
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise IsADirectoryError(
            f"cannot save a checkpoint to {path}: it is a directory; give a file name"
        )
    kind = special_kind(target)
    if kind is not None:
        raise ValueError(f"{path} is {kind}, not a regular file: a save would replace it; "
                         "give a file name")
    return target


def check_replacing(path: str | os.PathLike | None, resume: bool, overwrite: bool) -> None:
    """Refuse a run that would replace the file at `path` (its checkpoint) unasked: the
    first save of a run started without `resume` would lose it. `overwrite` says to.

    Raises:
        ValueError: both `resume` and `overwrite`.
        FileExistsError: `path` exists, and neither was given.
    """
    if resume and overwrite:
        raise ValueError("resume continues from the checkpoint, overwrite replaces it: "
                         "give one of them")
    if path and not (resume or overwrite) and os.path.lexists(path):
        raise FileExistsError(f"{path} exists: fit(resume=True) continues from it, "
                              "fit(overwrite=True) replaces it; nothing was trained")


def same_file(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """Whether `a` and `b` name one file (None names none)."""
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


class ReadOnlyCheckpoint(PermissionError):
    """The file a save would replace is read-only: its owner may not write it."""


def check_owner_writes(path: str | os.PathLike, target: Path) -> None:
    """Refuse to replace `target` (the file at `path`) when its owner may not write it
    (no `u+w`): `os.replace` would, in a folder that is writable, but a read-only file
    says "keep me".

    Raises:
        ReadOnlyCheckpoint: (a PermissionError) naming its mode and the fix.
    """
    mode = target.stat().st_mode if target.exists() else stat.S_IWUSR
    if not mode & stat.S_IWUSR:
        raise ReadOnlyCheckpoint(f"cannot save checkpoint {path}: the file there is "
                                 f"read-only (mode {stat.S_IMODE(mode):o}); make it writable "
                                 "(chmod u+w) to replace it, or save elsewhere")


def check_writable(path: str | os.PathLike) -> None:
    """Make sure a checkpoint can be saved to `path`, before hours of work depend on it:
    create its folder, then create and remove a file beside where `save_atomic` writes.

    Raises:
        OSError: the folder cannot be created or written (read-only, a file in the way,
            a disk that refuses), naming `path`. IsADirectoryError: `path` is a folder.
            ReadOnlyCheckpoint: the file there is read-only (`check_owner_writes`).
        ValueError: `path` is a device, a pipe or a socket (`check_replaceable`).
    """
    path = Path(path)
    target = check_replaceable(path)
    check_owner_writes(path, target)  # at the door, as save_atomic will
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

    The lock is `flock` on `.<name>.lock` beside the target, holding the writer's pid and
    thread (`<pid>:<thread id>`); the system releases it when the process ends, even by
    `kill -9`, and the file is removed when the block ends. Where `fcntl` is missing
    (Windows) nothing is locked. A block inside another of the same thread for the same
    file holds it already (`train --resume` takes it before reading `--out`, then
    `Trainer.fit` inside): the lock file names that thread, so nothing is kept on the side
    to know it. Another thread of the process is refused, as another process is: a
    notebook training in a background thread would otherwise have a second writer.

    Raises:
        CheckpointBusy: (an OSError) another live process or another thread of this one
            holds it, named by its pid (and thread).
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    target = Path(os.path.realpath(path))
    lock = target.with_name(f".{target.name}.lock")
    me = f"{os.getpid()}:{threading.get_ident()}"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            if holder == me:  # an outer block of this thread holds it
                yield
                return
            pid, _, thread = holder.partition(":")
            who = (f"another thread of this process (thread {thread})"
                   if pid == str(os.getpid()) else f"another run (pid {pid or 'unknown'})")
            raise CheckpointBusy(f"checkpoint {path} is being written by {who}: wait for it "
                                 "to end, or write elsewhere") from None
        try:  # its previous holder may have removed the file before we locked it
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, me.encode())
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


class SavedThenInterrupted(KeyboardInterrupt):
    """Ctrl-C once a save had put its new file in place (while the rename was made
    durable): the checkpoint at `path` is the new one."""

    def __init__(self, path: str | os.PathLike):
        """Name the checkpoint saved."""
        super().__init__(f"{path} was saved, then interrupted")
        self.path = path


@contextlib.contextmanager
def saved_if_interrupted(target: Path, header: bytes, path: str | os.PathLike
                         ) -> Iterator[None]:
    """Turn a Ctrl-C in the block into `SavedThenInterrupted` when the file at `target`
    begins with `header` (the save's own checksum line: its new file is in place)."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            with open(target, "rb") as f:
                done = f.read(len(header)) == header
        except OSError:
            done = False
        if done:
            raise SavedThenInterrupted(path) from None
        raise


def fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; elsewhere a no-op)."""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
    kind = special_kind(path)
    if kind is None:
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    raise ValueError(f"checkpoint {path} is not a regular file ({kind}): not a labnn "
                     "checkpoint")
