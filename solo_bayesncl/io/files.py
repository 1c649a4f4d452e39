"""Writing output without losing what a user wrote: an early write check, per-process temporary
names beside the final path, the one way a file is replaced (:func:`replacing`: write a
temporary, then one atomic rename), the removal of temporaries a killed process left behind, and
lock files that keep two processes from writing the same output at once.

A temporary is a hidden sibling of its final path, ``.<name>.<pid>.<random><suffix>``, so a later
run can tell a temporary of a live process (kept) from one whose process is gone (removed).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "STALE_AFTER_S",
    "LockedError",
    "NotWritableError",
    "hold_lock",
    "make_temporary",
    "process_alive",
    "remove_stale_temporaries",
    "replacing",
    "replacing_folder",
    "require_writable",
    "write_text_replacing",
]

STALE_AFTER_S: float = 24 * 3600.0
"""A temporary older than this is removed even when its process id is in use (ids are reused)."""


class NotWritableError(PermissionError):
    """An output path cannot be written; raised before any work starts."""


class LockedError(RuntimeError):
    """Another live process holds the lock (its id is ``pid``, None when unreadable)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path, self.pid = path, pid
        who = f"process {pid}" if pid is not None else "another process"
        super().__init__(f"{path} is held by {who}")


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the lock file ``path`` (created, with this process's id in it) for the block.

    The lock is the kernel's (``flock``) on that file, so it ends with its process, however the
    process ends: the lock file of a process that died is taken over by the next one. Raises
    :class:`LockedError` at once, with the holder's id, while a live process holds it.
    """
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise LockedError(path, int(text) if text.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """True when a process with this id exists (on this machine)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def require_writable(path: str | os.PathLike[str], what: str = "--out") -> None:
    """Raises :class:`NotWritableError` unless files can be created at ``path`` (a folder that
    exists or would be created): a probe file is created and removed in ``path`` or, when it does
    not exist yet, in its nearest existing parent. Nothing else is created."""
    path = Path(path)
    where = _nearest_existing(path)
    if not where.is_dir():
        raise NotWritableError(f"{what} {path}: {where} exists and is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=where)
    except OSError as err:
        raise NotWritableError(
            f"{what} {path}: cannot write in {where} ({err.strerror or err}); "
            "choose a writable folder"
        ) from None
    os.close(fd)
    os.unlink(probe)


def make_temporary(final: Path, suffix: str, folder: bool = False) -> Path:
    """A new hidden temporary file (or folder) beside ``final``, named for this process."""
    prefix = f".{final.name}.{os.getpid()}."
    if folder:  # mkdtemp's 0o700 would stay on the folder once renamed into place
        path = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=final.parent))
        path.chmod(0o777 & ~_umask())
        return path
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=final.parent)
    os.close(fd)
    path = Path(name)
    path.chmod(0o666 & ~_umask())  # mkstemp's 0o600 would stay on the file once renamed
    return path


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def replacing(final: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """Yields a new temporary path beside ``final`` (:func:`make_temporary`); when the block
    ends, the temporary replaces ``final`` in one atomic rename, so a reader sees the old file or
    the whole new one, never part of it. On an error, or when the block removed the temporary
    (nothing to write after all), ``final`` is left as it was. The folder of ``final`` is created
    when missing; ``suffix`` ends the temporary's name (a plotting library reads the format
    from it)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temporary(final, suffix)
    try:
        yield tmp
        if tmp.exists():
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing_folder(
    final: str | os.PathLike[str],
    suffix: str = ".partial",
    stale: tuple[str, ...] = (),
    last: tuple[str, ...] = (),
) -> Iterator[Path]:
    """Yields a new hidden temporary folder beside ``final`` (:func:`make_temporary`); when the
    block ends, what it holds moves into ``final``: one rename when ``final`` does not exist,
    else one atomic replace per file (the names in ``last`` last, in that order), keeping any
    other file ``final`` holds and removing the ``stale`` names first. On an error, ``final`` is
    left as it was; the temporary folder is always removed."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = make_temporary(final, suffix, folder=True)
    try:
        yield staging
        if not final.exists():
            os.rename(staging, final)
            return
        for name in stale:
            (final / name).unlink(missing_ok=True)
        names = sorted(p.name for p in staging.iterdir())
        names.sort(key=lambda name: last.index(name) + 1 if name in last else 0)
        for name in names:
            os.replace(staging / name, final / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_text_replacing(final: str | os.PathLike[str], text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``final`` through :func:`replacing`; returns ``final``."""
    with replacing(final) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(final)


def remove_stale_temporaries(
    final: Path, suffix: str, max_age_s: float = STALE_AFTER_S
) -> list[Path]:
    """Removes the temporaries of ``final`` (see :func:`make_temporary`) whose process is gone
    or that are older than ``max_age_s``; returns what was removed."""
    removed = []
    if not final.parent.is_dir():
        return removed
    now = time.time()
    for path in final.parent.glob(f".{final.name}.*{suffix}"):
        middle = path.name[len(final.name) + 2 : len(path.name) - len(suffix)]
        pid = middle.split(".", 1)[0]
        try:
            age = now - path.lstat().st_mtime
        except FileNotFoundError:
            continue
        alive = pid.isdigit() and process_alive(int(pid))
        if alive and age <= max_age_s:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(path)
    return removed
