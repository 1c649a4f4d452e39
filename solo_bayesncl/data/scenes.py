"""``fashion-mnist-scenes``: Fashion-MNIST items composited onto shared background textures.

A testbed for BayesNCL's mechanism (arXiv 2605.28441, section 3: features common to many images,
the "blue sky", should be closed by the gate), which the real data, items on black, lacks. Every
image gets one of ``num_backgrounds`` (4-8) textures, differing in orientation and period and
shifted by a seeded random phase, with the item on top at its own intensity as alpha (``out = a *
item + (1 - a) * texture``, ``a = item / 255``). Background and class are independent
(:func:`assign_backgrounds`). The dataset yields ``(image, class)``; the background labels are in
``backgrounds`` (and ``background_names``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

from solo_bayesncl.data.fashion_mnist import FashionMNIST

__all__ = [
    "DEFAULT_BACKGROUNDS",
    "DEFAULT_BACKGROUND_SEED",
    "TEXTURE_NAMES",
    "FashionMNISTScenes",
    "assign_backgrounds",
    "background_labels",
    "check_scene_args",
    "composite",
    "scenes_mean_std",
    "texture",
]

TEXTURE_NAMES: tuple[str, ...] = (
    "horizontal stripes",
    "vertical stripes",
    "checkerboard",
    "dots",
    "diagonal stripes",
    "grid",
    "noise",
    "flat",
)
"""The textures, in the order they are used: ``num_backgrounds=K`` takes the first K."""
MIN_BACKGROUNDS, MAX_BACKGROUNDS = 4, len(TEXTURE_NAMES)
DEFAULT_BACKGROUNDS = 4
DEFAULT_BACKGROUND_SEED = 0
_LOW, _HIGH = 30.0, 120.0  # texture grey levels: darker than most items, so items stay visible
_SIZE = 28


def check_scene_args(num_backgrounds, seed) -> tuple[int, int]:
    """Returns ``(num_backgrounds, seed)`` as ints; a clear error names the bad one."""
    if isinstance(num_backgrounds, bool) or not isinstance(num_backgrounds, int | np.integer):
        raise ValueError(
            f"num_backgrounds must be an integer from {MIN_BACKGROUNDS} to {MAX_BACKGROUNDS}, "
            f"got {num_backgrounds!r}"
        )
    if not MIN_BACKGROUNDS <= int(num_backgrounds) <= MAX_BACKGROUNDS:
        raise ValueError(
            f"num_backgrounds must be from {MIN_BACKGROUNDS} to {MAX_BACKGROUNDS}, "
            f"got {num_backgrounds}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or int(seed) < 0:
        raise ValueError(f"background seed must be a non-negative integer, got {seed!r}")
    return int(num_backgrounds), int(seed)


def texture(index: int, shifts: np.ndarray) -> np.ndarray:
    """Texture ``index`` (see :data:`TEXTURE_NAMES`) for each ``(dy, dx)`` phase in ``shifts``
    (n x 2 ints): an ``(n, 28, 28)`` float32 array of grey levels."""
    if not 0 <= index < len(TEXTURE_NAMES):
        raise ValueError(f"texture index must be from 0 to {len(TEXTURE_NAMES) - 1}, got {index}")
    y = np.arange(_SIZE)[None, :, None] + shifts[:, 0, None, None]
    x = np.arange(_SIZE)[None, None, :] + shifts[:, 1, None, None]
    name = TEXTURE_NAMES[index]
    if name == "horizontal stripes":  # period 4
        on = np.broadcast_to((y // 2) % 2 == 0, (len(shifts), _SIZE, _SIZE))
    elif name == "vertical stripes":  # period 4
        on = np.broadcast_to((x // 2) % 2 == 0, (len(shifts), _SIZE, _SIZE))
    elif name == "checkerboard":  # 3 px squares
        on = (y // 3 + x // 3) % 2 == 0
    elif name == "dots":  # 2x2 bright dots every 5 px
        on = (y % 5 < 2) & (x % 5 < 2)
    elif name == "diagonal stripes":  # a flip turns them into the other diagonal: same texture
        on = ((y + x) // 3) % 2 == 0
    elif name == "grid":  # 1 px lines every 6 px
        on = (y % 6 == 0) | (x % 6 == 0)
    elif name == "noise":  # a fixed pixel-noise tile, shifted
        tile = np.random.default_rng(12345).random((_SIZE, _SIZE)) < 0.5
        on = tile[y % _SIZE, x % _SIZE]
    else:  # flat mid grey
        return np.full((len(shifts), _SIZE, _SIZE), (_LOW + _HIGH) / 2, dtype=np.float32)
    return np.where(on, _HIGH, _LOW).astype(np.float32)


def assign_backgrounds(labels: np.ndarray, num_backgrounds: int, seed: int) -> np.ndarray:
    """A background per image, independent of the class: within each class the images (in a
    seeded order) are dealt backgrounds 0, 1, ..., K-1, 0, ... from a seeded start."""
    num_backgrounds, seed = check_scene_args(num_backgrounds, seed)
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    backgrounds = np.empty(len(labels), dtype=np.int64)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        order = rng.permutation(len(members))
        start = int(rng.integers(num_backgrounds))
        backgrounds[members[order]] = (np.arange(len(members)) + start) % num_backgrounds
    return backgrounds


def composite(items: np.ndarray, backgrounds: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Pastes each uint8 ``(n, 28, 28)`` item on its texture (``backgrounds``: texture index per
    image, ``shifts``: n x 2 phases) with the item's intensity as alpha; returns uint8."""
    if items.shape[1:] != (_SIZE, _SIZE):
        raise ValueError(f"items must be n x {_SIZE} x {_SIZE}, got {items.shape}")
    out = np.empty(items.shape, dtype=np.uint8)
    for k in np.unique(backgrounds):
        members = np.flatnonzero(backgrounds == k)
        item = items[members].astype(np.float32)
        alpha = item / 255.0
        mixed = alpha * item + (1.0 - alpha) * texture(int(k), shifts[members])
        out[members] = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
    return out


@lru_cache(maxsize=4)
def _scene_arrays(
    root: str | None, split: str, num_backgrounds: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(images, classes, backgrounds)`` of a whole split, composed once per process."""
    plain = FashionMNIST(split, root=root)
    stream = seed * 2 + (split == "val")
    backgrounds = assign_backgrounds(plain.targets, num_backgrounds, stream)
    shifts = np.random.default_rng([stream, 1]).integers(0, 12, size=(len(plain.targets), 2))
    arrays = (composite(plain.images, backgrounds, shifts), plain.targets, backgrounds)
    for array in arrays:
        array.flags.writeable = False
    return arrays


def scenes_mean_std(
    num_backgrounds: int = DEFAULT_BACKGROUNDS,
    seed: int = DEFAULT_BACKGROUND_SEED,
    root: str | Path | None = None,
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Per-channel mean and std (in [0, 1]) of the composed training split."""
    num_backgrounds, seed = check_scene_args(num_backgrounds, seed)
    images = _scene_arrays(None if root is None else str(root), "train", num_backgrounds, seed)[0]
    mean, std = float(images.mean() / 255.0), float(images.std() / 255.0)
    return (mean,) * 3, (std,) * 3


class FashionMNISTScenes(FashionMNIST):
    """Fashion-MNIST on shared background textures (module docstring): ``split``, ``transform``,
    ``root``, ``limit`` as :class:`FashionMNIST`; ``num_backgrounds`` (4-8) textures; ``seed``
    seeds their assignment and phases. ``backgrounds`` (N,) holds the background labels."""

    def __init__(
        self,
        split: str = "train",
        transform: Callable | None = None,
        root: str | Path | None = None,
        limit: int | None = None,
        num_backgrounds: int = DEFAULT_BACKGROUNDS,
        seed: int = DEFAULT_BACKGROUND_SEED,
    ) -> None:
        num_backgrounds, seed = check_scene_args(num_backgrounds, seed)
        if split not in ("train", "val"):
            raise ValueError(f"split={split!r} is not supported; allowed values: train, val")
        self.images, self.targets, self.backgrounds = _scene_arrays(
            None if root is None else str(root), split, num_backgrounds, seed
        )
        self.transform = transform
        if limit is not None and limit > 0:
            self.images, self.targets = self.images[:limit], self.targets[:limit]
            self.backgrounds = self.backgrounds[:limit]
        self.num_backgrounds = num_backgrounds
        self.background_names = list(TEXTURE_NAMES[:num_backgrounds])


def background_labels(dataset) -> np.ndarray:
    """The background label of every item of a scenes ``dataset`` (or ``Subset``), in order."""
    indices = None
    while not hasattr(dataset, "backgrounds"):
        if not hasattr(dataset, "dataset"):
            raise ValueError("the dataset has no background labels (not fashion-mnist-scenes)")
        picked = np.asarray(dataset.indices)
        indices = picked if indices is None else picked[indices]
        dataset = dataset.dataset
    labels = np.asarray(dataset.backgrounds)
    return labels if indices is None else labels[indices]
