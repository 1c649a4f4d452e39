"""The dataset vocabulary, in one place: which names exist, which solo-learn reads itself, which
the plugin adds, their aliases, and the real name of the dataset a resolved config trains on.

solo-learn knows ``cifar10``, ``cifar100``, ``stl10``, ``imagenet``, ``imagenet100`` and
``custom`` (an image folder). The plugin adds ``fashion-mnist`` and ``fashion-mnist-scenes`` by
presenting them to solo-learn as ``custom`` and remembering the real name in
``data.offline_dataset`` (:func:`solo_bayesncl.data.resolve.resolve_dataset_cfg`); every reader
of a resolved config asks :func:`dataset_name` for it.
"""

from __future__ import annotations

import re

import omegaconf
from omegaconf import OmegaConf

__all__ = [
    "ALIASES",
    "DALI_DATASETS",
    "OFFLINE_DATASETS",
    "SCENES",
    "SMALL_IMAGE_DATASETS",
    "SOLO_DATASETS",
    "SOLO_LOADER_DATASETS",
    "canonical_name",
    "dataset_label",
    "dataset_name",
    "dataset_run_name",
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


def dataset_name(cfg: omegaconf.DictConfig) -> str:
    """The dataset a config trains on: ``data.offline_dataset`` for the plugin's datasets (which
    solo-learn sees as ``custom``), else ``data.dataset``."""
    return str(OmegaConf.select(cfg, "data.offline_dataset", default=None) or cfg.data.dataset)


def dataset_run_name(name: str, dataset: str) -> str:
    """The run name with the dataset actually trained on: the first dataset named in ``name``
    is replaced (``bayesncl-cifar100`` on Fashion-MNIST is ``bayesncl-fashion-mnist``), and a
    name that names none gets ``-<dataset>`` appended. Checkpoint files carry this name."""
    if _DATASET_IN_NAME.search(name):
        return _DATASET_IN_NAME.sub(dataset, name, count=1)
    return f"{name}-{dataset}"


def dataset_label(cfg: omegaconf.DictConfig) -> str:
    """The dataset as the report names it."""
    name = dataset_name(cfg)
    if name == "custom":
        return f"custom ({cfg.data.val_path})"
    return str(name)
