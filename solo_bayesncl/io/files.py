"""Writing output without losing what a user wrote: an early write check, per-process temporary
names beside the final path, and the removal of temporaries a killed process left behind.

A temporary is a hidden sibling of its final path, ``.<name>.<pid>.<random><suffix>``, so a later
run can tell a temporary of a live process (kept) from one whose process is gone (removed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

__all__ = [
    "STALE_AFTER_S",
    "NotWritableError",
    "make_temporary",
    "process_alive",
    "remove_stale_temporaries",
    "require_writable",
]

STALE_AFTER_S: float = 24 * 3600.0
"""A temporary older than this is removed even when its process id is in use (ids are reused)."""


class NotWritableError(PermissionError):
    """An output path cannot be written; raised before any work starts."""


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
        umask = os.umask(0o022)
        os.umask(umask)
        path.chmod(0o777 & ~umask)
        return path
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=final.parent)
    os.close(fd)
    return Path(name)


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
