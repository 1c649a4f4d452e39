"""Where downloaded artifacts live and how their bytes are checked.

The cache folder is ``$SOLO_BAYESNCL_CACHE`` when set, else ``~/.cache/solo-bayesncl``. A file
under its final name is always complete and verified: downloads go to a hidden ``.part`` name
and are renamed atomically only after the sha256 matched (see :mod:`.fetch`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .manifest import ZooEntry

CACHE_ENV = "SOLO_BAYESNCL_CACHE"
OFFLINE_ENV = "SOLO_BAYESNCL_OFFLINE"
_CHUNK = 1 << 20


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``path`` if given, else ``$SOLO_BAYESNCL_CACHE``, else the default."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/solo-bayesncl").expanduser()


def is_offline() -> bool:
    """True when ``$SOLO_BAYESNCL_OFFLINE`` is set to 1/true/yes: never touch the network."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes")


def cached_path(entry: ZooEntry, root: str | os.PathLike[str] | None = None) -> Path:
    """Final location of ``entry`` in the cache: ``<cache>/<name>-<sha256[:12]>-<file>``.

    The hash prefix keeps two versions of one name apart when a manifest entry is updated.
    """
    return cache_dir(root) / f"{entry.name}-{entry.sha256[:12]}-{entry.filename}"


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_verified(path: Path, entry: ZooEntry) -> bool:
    """True when ``path`` exists with the entry's size and sha256."""
    return (
        path.is_file() and path.stat().st_size == entry.size and sha256_file(path) == entry.sha256
    )
