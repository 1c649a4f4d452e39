"""The dataset vocabulary (names, which solo-learn reads itself, which the plugin adds, aliases)
and :func:`dataset_spec`, the one place a config's dataset is read, into a :class:`DatasetSpec`.
The plugin's datasets are presented to solo-learn as ``custom``, the real name kept in
``data.offline_dataset``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf
from torchvision import transforms

__all__ = [
    "ALIASES",
    "DatasetSpec",
    "DALI_DATASETS",
    "OFFLINE_DATASETS",
    "SCENES",
    "SMALL_IMAGE_DATASETS",
    "SOLO_DATASETS",
    "SOLO_LOADER_DATASETS",
    "canonical_name",
    "dataset_run_name",
    "dataset_spec",
    "small_stem",
    "solo_normalization",
]

SOLO_LOADER_DATASETS: tuple[str, ...] = ("cifar10", "cifar100", "stl10", "imagenet", "imagenet100")
"""The named datasets solo-learn's own loaders build."""
SOLO_DATASETS: tuple[str, ...] = (*SOLO_LOADER_DATASETS, "custom")
"""Every ``data.dataset`` solo-learn reads (``custom``: an image folder)."""
DALI_DATASETS: tuple[str, ...] = ("imagenet", "imagenet100", "custom")
"""The datasets solo-learn's DALI loaders read (image folders)."""
SCENES = "fashion-mnist-scenes"
OFFLINE_DATASETS: dict[str, int] = {"fashion-mnist": 10, SCENES: 10}
"""Datasets added by the plugin, with their number of classes."""
ALIASES: dict[str, str] = {
    "fashion_mnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "fmnist": "fashion-mnist",
    "fashion_mnist_scenes": SCENES,
}
"""Other spellings of the plugin's datasets accepted in ``data.dataset``."""
SMALL_IMAGE_DATASETS: tuple[str, ...] = ("cifar10", "cifar100")
"""Datasets whose ResNets get the small-image stem (solo-learn's rule for CIFAR). Fashion-MNIST
keeps the ImageNet stem unless ``backbone.small_stem=True``: at 32 px the CIFAR stem costs ~14x the
FLOPs, which decides whether a CPU run takes minutes or hours."""


def small_stem(dataset: str | None, given: Any = None) -> bool:
    """Whether a ResNet trained on ``dataset`` gets the small-image stem: always on
    :data:`SMALL_IMAGE_DATASETS`, elsewhere when ``given``. The one place the rule is written."""
    return dataset in SMALL_IMAGE_DATASETS or bool(given)


_RUN_NAME_TOKENS = sorted(
    {*SOLO_DATASETS, *OFFLINE_DATASETS, *ALIASES, "imagenet-100"}, key=len, reverse=True
)
# longest first, so that "fashion-mnist-scenes" is one token and not "fashion-mnist" + "-scenes"
_DATASET_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, _RUN_NAME_TOKENS)) + r")(?![A-Za-z0-9])"
)


def canonical_name(name: str) -> str:
    """``name`` with an alias replaced by the dataset it means (``fmnist`` -> ``fashion-mnist``)."""
    return ALIASES.get(name.lower(), name)


def dataset_run_name(name: str, dataset: str) -> str:
    """The run name with the dataset trained on: the first dataset in ``name`` is replaced
    (``bayesncl-cifar100`` -> ``bayesncl-fashion-mnist``), else ``-<dataset>`` appended."""
    if _DATASET_IN_NAME.search(name):
        return _DATASET_IN_NAME.sub(dataset, name, count=1)
    return f"{name}-{dataset}"


_NO_AUGMENTATION = {
    "crop_size": 1,
    "rrc": {"enabled": False},
    **{
        name: {"prob": 0.0}
        for name in (
            "color_jitter",
            "grayscale",
            "gaussian_blur",
            "solarization",
            "equalization",
            "horizontal_flip",
        )
    },
}


def solo_normalization(
    dataset: str, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
) -> tuple[list[float], list[float]]:
    """The mean and std solo-learn normalises views of ``dataset`` with (its table, else ``mean`` /
    ``std``, None: ImageNet's): the one place every pipeline and evaluation reads it from."""
    from solo.data.pretrain_dataloader import build_transform_pipeline

    node = OmegaConf.create(_NO_AUGMENTATION)
    for key, values in (("mean", mean), ("std", std)):
        if values is not None:
            node[key] = [float(v) for v in values]
    for t in build_transform_pipeline(str(dataset), node).transforms:
        if isinstance(t, transforms.Normalize):
            return [float(v) for v in t.mean], [float(v) for v in t.std]
    raise RuntimeError("solo-learn's augmentation pipeline has no Normalize step")


@dataclass(frozen=True)
class DatasetSpec:
    """A config's dataset, decoded once by :func:`dataset_spec`, read instead of the config.
    ``name`` is the canonical name trained on; ``loader`` is ``data.dataset`` as solo-learn reads
    it (``custom`` for the plugin's). ``crop_size``, ``mean`` and ``std`` (None when absent) are the
    first pretraining pipeline's, or ``data.augmentations``' of a linear config."""

    name: str
    loader: str
    num_classes: int | None = None
    train_path: str | None = None
    val_path: str | None = None
    format: str = "image_folder"
    no_labels: bool = False
    num_workers: int = 0
    fraction: float = -1.0
    val_fraction: float = -1.0
    num_backgrounds: int | None = None
    background_seed: int | None = None
    crop_size: int = 224
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    augment_on: str = "per_image"
    dali_device: str = "cpu"
    encode_indexes: bool = False
    large_crops: int = 0
    small_crops: int = 0

    @property
    def is_offline(self) -> bool:
        """One of the plugin's datasets (:data:`OFFLINE_DATASETS`)."""
        return self.name in OFFLINE_DATASETS

    @property
    def classes(self) -> int:
        """``data.num_classes``, else the dataset's known class count, else 1."""
        known = OFFLINE_DATASETS.get(self.name) or {"cifar10": 10, "cifar100": 100}.get(self.name)
        return self.num_classes or known or 1

    @property
    def normalization(self) -> tuple[list[float], list[float]]:
        """The mean and std of the views the backbone trains on (:func:`solo_normalization`)."""
        return solo_normalization(self.loader, self.mean, self.std)

    @property
    def label(self) -> str:
        """The dataset as the report names it."""
        return f"custom ({self.val_path})" if self.name == "custom" else self.name


def _numbers(values: Sequence[Any]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def dataset_name(cfg: Mapping[str, Any]) -> str:
    """The canonical dataset name: ``data.offline_dataset`` once resolved, else ``data.dataset``."""
    data = cfg.get("data", None) or {}
    return canonical_name(str(data.get("offline_dataset", None) or data.get("dataset", None) or ""))


def dataset_spec(cfg: Mapping[str, Any]) -> DatasetSpec:
    """The dataset of a config (or a checkpoint's plain mapping) read once into a
    :class:`DatasetSpec`; an absent or null key takes the default. Checks nothing."""
    data = cfg.get("data", None) or {}
    pipelines = cfg.get("augmentations", None)
    sections = {
        "data": data,
        "aug": (pipelines[0] if pipelines else data.get("augmentations", None)) or {},
        "dali": cfg.get("dali", None) or {},
    }
    given = {}
    for name, (section, key, read) in _FIELD_KEYS.items():
        value = sections[section].get(key, None)
        if value is not None:
            given[name] = read(value)
    return DatasetSpec(name=dataset_name(cfg), loader=str(data.get("dataset", None) or ""), **given)


def _as_is(value: Any) -> Any:
    return value


_FIELD_KEYS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "num_classes": ("data", "num_classes", int),
    "train_path": ("data", "train_path", str),
    "val_path": ("data", "val_path", str),
    "format": ("data", "format", str),
    "no_labels": ("data", "no_labels", bool),
    "num_workers": ("data", "num_workers", int),
    "fraction": ("data", "fraction", float),
    "val_fraction": ("data", "val_fraction", float),
    "num_backgrounds": ("data", "num_backgrounds", _as_is),  # checked where the scenes are built
    "background_seed": ("data", "background_seed", _as_is),
    "augment_on": ("data", "augment_on", str),
    "large_crops": ("data", "num_large_crops", int),
    "small_crops": ("data", "num_small_crops", int),
    "crop_size": ("aug", "crop_size", int),
    "mean": ("aug", "mean", _numbers),
    "std": ("aug", "std", _numbers),
    "dali_device": ("dali", "device", str),
    "encode_indexes": ("dali", "encode_indexes_into_labels", bool),
}
"""Where each :class:`DatasetSpec` field is read and its type; absent or null, the default holds."""
