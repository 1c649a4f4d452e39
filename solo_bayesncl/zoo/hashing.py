"""The sha256 of a file, the one check every zoo download, cache hit and export goes through."""

from __future__ import annotations

import hashlib
import os

#: Bytes per read (1 MiB).
CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
