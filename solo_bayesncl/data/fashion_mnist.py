"""Fashion-MNIST read offline from Debian's ``dataset-fashion-mnist`` package.

The package ships the original IDX files (70,000 real 28x28 grayscale images, 10 classes, MIT
licence) under ``/usr/share/datasets/fashion-mnist/``; ``SOLO_BAYESNCL_FASHION_MNIST`` points
elsewhere. Images are served as RGB PIL images so every torchvision/solo-learn transform applies.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

__all__ = [
    "CLASS_NAMES",
    "FashionMNIST",
    "fashion_mnist_root",
    "read_idx",
    "read_split",
]

DEFAULT_ROOT = Path("/usr/share/datasets/fashion-mnist")
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
IMAGE_SHAPE = (28, 28)
MEAN_STD = ((0.2860, 0.2860, 0.2860), (0.3530, 0.3530, 0.3530))

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def fashion_mnist_root() -> Path:
    """The folder holding the IDX files (``SOLO_BAYESNCL_FASHION_MNIST`` or Debian's path)."""
    return Path(os.environ.get("SOLO_BAYESNCL_FASHION_MNIST", DEFAULT_ROOT))


def _find(root: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(
        f"Fashion-MNIST file {stem}(.gz) not found in {root}. Install Debian's package "
        "(apt-get install dataset-fashion-mnist) or set SOLO_BAYESNCL_FASHION_MNIST to the "
        "folder holding the IDX files."
    )


def read_idx(path: str | Path, ndim: int | None = None) -> np.ndarray:
    """Reads an IDX file (optionally gzipped), checking the magic number, ``ndim`` when given and
    the byte count; ``ValueError`` naming a truncated or corrupt file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, OSError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(
            f"{path}: cannot be read ({type(err).__name__}: {err}); the file is truncated or "
            "corrupt, reinstall or download it again"
        ) from None
    if not data:
        raise ValueError(
            f"{path}: holds no data (an empty file{' once decompressed' if opener is gzip.open else ''}); "
            "reinstall or download it again"
        )
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (bad magic number)")
    dims = data[3]
    if ndim is not None and dims != ndim:
        raise ValueError(f"{path}: an IDX file of {dims} dimension(s), expected {ndim}")
    if len(data) < 4 + 4 * dims:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    values = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape} but holds {values.size} bytes")
    return values.reshape(shape)


def read_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of one split, checked to belong together."""
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(
            f"{images_path}: images of {images.shape[1]}x{images.shape[2]} pixels, expected "
            f"{IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]}"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{labels_path} holds {len(labels)} labels but {images_path} holds {len(images)} "
            "images; the two files are not one split"
        )
    if labels.size and int(labels.max()) >= len(CLASS_NAMES):
        raise ValueError(
            f"{labels_path}: label {int(labels.max())} outside 0..{len(CLASS_NAMES) - 1}"
        )
    return images, labels.astype(np.int64)


class FashionMNIST(Dataset):
    """Fashion-MNIST split ``train`` (60,000) or ``val`` (the 10,000 test images); ``transform`` is
    applied to the RGB PIL image, ``root`` defaults to :func:`fashion_mnist_root`, ``limit`` keeps
    only the first images."""

    classes = list(CLASS_NAMES)

    def __init__(
        self,
        split: str = "train",
        transform: Callable | None = None,
        root: str | Path | None = None,
        limit: int | None = None,
    ) -> None:
        if split not in _FILES:
            raise ValueError(f"split={split!r} is not supported; allowed values: train, val")
        root = Path(root) if root is not None else fashion_mnist_root()
        images, labels = (_find(root, stem) for stem in _FILES[split])
        self.images, self.targets = read_split(images, labels)
        if limit is not None and limit > 0:
            self.images, self.targets = self.images[:limit], self.targets[:limit]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = Image.fromarray(self.images[index], mode="L").convert("RGB")
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])
