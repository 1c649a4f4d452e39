"""Pretraining from a read-only current folder (the default ``checkpoint.dir``) is refused before
training, in one line naming the folder and ``checkpoint.dir``. The folder is a real read-only
mount (root writes through chmod; needs root to mount, skipped otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, image_folder_overrides

pytestmark = pytest.mark.solo


@pytest.fixture
def read_only_folder(tmp_path) -> Path:
    mount = tmp_path / "read-only"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_pretraining_in_a_read_only_current_folder_is_refused_before_training(
    read_only_folder, image_folder
):
    overrides = [
        *image_folder_overrides(image_folder),
        "data.num_workers=0",
        "optimizer.batch_size=8",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "max_epochs=1",
        "accelerator=cpu",
        "wandb.enabled=False",
    ]
    done = subprocess.run(
        [sys.executable, str(REPO / "main_pretrain.py"), "--config-name", "ncl.yaml", *overrides],
        cwd=read_only_folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"main_pretrain.py: error: checkpoint.dir trained_models/ncl: cannot write in "
        f"{read_only_folder} (Read-only file system); choose a writable folder"
    ]
    assert "Epoch" not in done.stdout + done.stderr
