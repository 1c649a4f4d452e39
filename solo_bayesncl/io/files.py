"""Writing output without losing what a user wrote: an early write check, atomic replacement
through a temporary, the removal of temporaries a killed process left behind, and lock files. A
temporary is a hidden sibling ``.<name>.<pid>.<random><suffix>`` of its final path, so a later
run can tell one of a live process (kept) from one whose process is gone (removed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "LockedError",
    "NoSpaceError",
    "NotWritableError",
    "hold_lock",
    "remove_stale_temporaries",
    "replacing",
    "replacing_folder",
    "require_writable",
    "write_text_replacing",
]

#: A temporary older than this is removed even when its process id is in use (ids are reused).
_STALE_AFTER_S: float = 24 * 3600.0


class NotWritableError(PermissionError):
    """An output path cannot be written; raised before any work starts."""


class NoSpaceError(OSError):
    """The disk (or the quota) of ``folder`` filled up while a file was written there; what was
    being written is removed, the final paths are as they were."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        super().__init__(
            f"{self.folder}: no space left on the device; nothing was written there (free some "
            "space or choose another folder)"
        )


#: Free bytes below which a write error of a disk is taken for a full disk (torch.save's
#: error does not say why it failed).
_NEARLY_FULL: int = 1 << 20
_NO_SPACE_WORDS = ("No space left", "os error 28", "Disk quota exceeded")


def _is_no_space(err: BaseException, folder: Path) -> bool:
    """True when ``err`` (or what caused it) is a full disk or quota, or a write error raised
    while ``folder``'s disk has under :data:`_NEARLY_FULL` bytes free."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(words in str(seen) for words in _NO_SPACE_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    if not isinstance(err, (OSError, RuntimeError)):
        return False
    while not folder.exists() and folder != folder.parent:  # a folder not made yet: its disk
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free < _NEARLY_FULL
    except OSError:
        return False


@contextlib.contextmanager
def no_space_named(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Turns a full disk inside the block into :class:`NoSpaceError` naming ``folder``."""
    try:
        yield
    except NoSpaceError as err:
        raise NoSpaceError(folder) from err.__cause__
    except Exception as err:
        if _is_no_space(err, Path(folder)):
            raise NoSpaceError(folder) from err
        raise


class LockedError(RuntimeError):
    """Another live process holds the lock (its id is ``pid``, None when unreadable)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path, self.pid = path, pid
        who = f"process {pid}" if pid is not None else "another process"
        super().__init__(f"{path} is held by {who}")


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the lock file ``path`` (holding this process's id) for the block; :class:`LockedError`
    at once while a live process holds it. The lock is ``flock``'s, so it ends with its process."""
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


def _process_alive(pid: int) -> bool:
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


def require_writable(path: str | os.PathLike[str], what: str = "--out") -> None:
    """Raises :class:`NotWritableError` unless files can be created in the folder ``path`` (or,
    when it does not exist yet, its nearest existing parent), tried with a probe file."""
    path = Path(path)
    where = path.absolute()  # the nearest folder that exists
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise NotWritableError(f"{what} {path}: {where} exists and is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=where)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(where) from None
        raise NotWritableError(
            f"{what} {path}: cannot write in {where} ({err.strerror or err}); "
            "choose a writable folder"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _make_temporary(final: Path, suffix: str, folder: bool = False) -> Path:
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
    """Yields a temporary path beside ``final`` (ending in ``suffix``) that replaces it in one
    atomic rename when the block ends; on an error, or without the temporary, ``final`` stays."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    with no_space_named(final.parent):
        tmp = _make_temporary(final, suffix)
    try:
        with no_space_named(final.parent):  # before the temporary's removal frees its space
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
    """Yields a new temporary folder beside ``final`` whose files move into ``final`` when the block
    ends (one rename, or one atomic replace per file, the ``last`` paths last), after removing
    the ``stale`` paths; other files are kept. On an error ``final`` is left as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    with no_space_named(final):
        staging = _make_temporary(final, suffix, folder=True)
    try:
        with no_space_named(final):  # before the staging's removal frees its space
            yield staging
        if not final.exists():
            os.rename(staging, final)
            return
        for name in stale:
            (final / name).unlink(missing_ok=True)
        names = sorted(
            p.relative_to(staging).as_posix() for p in staging.rglob("*") if not p.is_dir()
        )
        names.sort(key=lambda name: last.index(name) + 1 if name in last else 0)
        for name in names:
            (final / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, final / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_text_replacing(final: str | os.PathLike[str], text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``final`` atomically; returns ``final``."""
    with replacing(final) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(final)


def remove_stale_temporaries(
    final: Path, suffix: str, max_age_s: float = _STALE_AFTER_S
) -> list[Path]:
    """Removes ``final``'s temporaries whose process is gone or older than ``max_age_s``."""
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
        alive = pid.isdigit() and _process_alive(int(pid))
        if alive and age <= max_age_s:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
