"""A manifest named in ``SOLO_BAYESNCL_MANIFEST`` that is not text (random bytes) or cannot be
read (a folder) is one line naming the file, from any command that reads the manifests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO


def _zoo_list(manifest) -> subprocess.CompletedProcess:
    env = {**os.environ, "SOLO_BAYESNCL_MANIFEST": str(manifest)}
    return subprocess.run(
        [sys.executable, "-m", "solo_bayesncl.zoo", "list"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_manifest_of_random_bytes_is_one_line_naming_it(tmp_path):
    manifest = tmp_path / "mine.json"
    manifest.write_bytes(bytes(range(128, 256)) * 8)  # not UTF-8
    done = _zoo_list(manifest)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: manifest {manifest} is not a text file (not UTF-8); a manifest is JSON"
    ]


@pytest.mark.parametrize("make", ["folder", "binary"])
def test_read_manifest_names_the_file(tmp_path, make):
    from solo_bayesncl.zoo import ManifestError
    from solo_bayesncl.zoo.manifest import read_manifest

    path = tmp_path / "m.json"
    if make == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ManifestError, match=f"^manifest {path} "):
        read_manifest(path)
