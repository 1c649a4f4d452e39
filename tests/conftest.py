"""Shared fixtures (a small real-image folder) and the ``solo`` marker, which skips by itself
when upstream solo-learn is not installed. The shared helpers are in ``helpers.py``."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import FASHION_MNIST

from solo_bayesncl.host.availability import solo_learn_available

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest worker per core (pytest-xdist): each, and every process a test
    # starts, computes on one thread, instead of each worker's thread pool spinning on every core
    # (set before torch is first imported, which reads it; a value the user set is kept)
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")


def pytest_collection_modifyitems(config, items) -> None:
    """``@pytest.mark.solo`` skips, with the reason, when solo-learn cannot be imported."""
    if solo_learn_available():
        return
    skip = pytest.mark.skip(reason="needs upstream solo-learn installed")
    for item in items:
        if "solo" in item.keywords:
            item.add_marker(skip)


def _fashion_images(n: int) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(FASHION_MNIST / "t10k-images-idx3-ubyte.gz", "rb") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(FASHION_MNIST / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images[:n], labels[:n]


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """``root/{train,val}/<class>/<i>.png``: 6 classes of real images (solo-learn's linear probe reports top-5) (Fashion-MNIST when the
    Debian package is installed, otherwise seeded class-dependent patterns), 32x32 RGB."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    if (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        images, labels = _fashion_images(2000)
    else:
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 10, 2000).astype(np.uint8)
        images = (rng.random((2000, 28, 28)) * 60 + labels[:, None, None] * 19).astype(np.uint8)
    per_class = {"train": 12, "val": 6}
    for split, count in per_class.items():
        for cls in range(6):
            folder = root / split / f"class{cls}"
            folder.mkdir(parents=True)
            picks = np.flatnonzero(labels == cls)
            picks = picks[:count] if split == "train" else picks[-count:]
            for i, idx in enumerate(picks):
                Image.fromarray(images[idx]).convert("RGB").resize((32, 32)).save(
                    folder / f"{i}.png"
                )
    return root
