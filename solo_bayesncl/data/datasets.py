"""Dataset resolution for the entry points: the offline ``fashion-mnist`` switch, the checks that
run before any model is built, and validation data at the training resolution.

solo-learn knows ``cifar10``, ``cifar100``, ``stl10``, ``imagenet``, ``imagenet100`` and
``custom`` (an image folder). This module adds ``fashion-mnist`` (offline, from Debian's
package) and ``fashion-mnist-scenes`` (the same items on shared background textures,
:mod:`solo_bayesncl.data.scenes`; ``data.num_backgrounds`` 4-8, ``data.background_seed``) by
presenting them to solo-learn as ``custom`` and remembering the real name in
``data.offline_dataset``. For ``custom`` data, solo-learn validates at 224 px after a 256 px
resize whatever the training crop; here validation uses the training crop size instead.
"""

from __future__ import annotations

import math
import socket
from pathlib import Path

import omegaconf
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import datasets, transforms
from torchvision.datasets import ImageFolder

from solo_bayesncl.data.dali import check_dali_folder, resolve_dali_cfg
from solo_bayesncl.data.fashion_mnist import MEAN_STD, FashionMNIST, fashion_mnist_root
from solo_bayesncl.data.scenes import (
    DEFAULT_BACKGROUND_SEED,
    DEFAULT_BACKGROUNDS,
    FashionMNISTScenes,
    check_scene_args,
    scenes_mean_std,
)
from solo_bayesncl.distributed import whole_set_in_every_process

__all__ = [
    "DALI_DATASETS",
    "DatasetUnavailableError",
    "OFFLINE_DATASETS",
    "SOLO_DATASETS",
    "build_train_dataset",
    "build_labelled_train_dataset",
    "build_val_dataset",
    "build_val_loader",
    "image_params",
    "linear_train_transform",
    "official_transforms",
    "check_dataset_available",
    "check_subset_sizes",
    "offline_dataset",
    "resolve_dataset_cfg",
    "validation_transform",
]

SOLO_DATASETS: tuple[str, ...] = (
    "cifar10",
    "cifar100",
    "stl10",
    "imagenet",
    "imagenet100",
    "custom",
)
DALI_DATASETS: tuple[str, ...] = ("imagenet", "imagenet100", "custom")
"""The datasets solo-learn's DALI loaders read (image folders)."""
OFFLINE_DATASETS: dict[str, int] = {"fashion-mnist": 10, "fashion-mnist-scenes": 10}
"""Datasets added by the plugin, with their number of classes."""
SCENES = "fashion-mnist-scenes"
_ALIASES = {
    "fashion_mnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "fmnist": "fashion-mnist",
    "fashion_mnist_scenes": SCENES,
}
_SOLO_CLASSIFICATION_DATASETS = ("cifar10", "cifar100", "stl10", "imagenet", "imagenet100")
"""Datasets solo-learn's classification loaders know by name (their own transforms)."""
SMALL_IMAGE_DATASETS = ("cifar10", "cifar100")
"""Datasets that get the small-image stem by default (solo-learn does it for CIFAR). Fashion-MNIST
keeps the ImageNet stem unless ``backbone.small_stem=True``: at 32 px the CIFAR stem costs ~14x the
FLOPs, which decides whether a CPU run takes minutes or hours."""


class DatasetUnavailableError(RuntimeError):
    """The configured dataset is not on disk and cannot be fetched."""


def _dataset_name(cfg: omegaconf.DictConfig) -> str:
    return str(OmegaConf.select(cfg, "data.offline_dataset", default=None) or cfg.data.dataset)


def _scene_args(cfg: omegaconf.DictConfig) -> tuple[int, int]:
    """``(data.num_backgrounds, data.background_seed)``; a bad value names its key."""
    num = OmegaConf.select(cfg, "data.num_backgrounds", default=None)
    seed = OmegaConf.select(cfg, "data.background_seed", default=None)
    num = DEFAULT_BACKGROUNDS if num is None else num
    seed = DEFAULT_BACKGROUND_SEED if seed is None else seed
    try:
        check_scene_args(num, DEFAULT_BACKGROUND_SEED)
    except ValueError as err:
        raise ValueError(f"data.num_backgrounds: {err}") from None
    try:
        check_scene_args(DEFAULT_BACKGROUNDS, seed)
    except ValueError as err:
        raise ValueError(f"data.background_seed: {err}") from None
    return int(num), int(seed)


def offline_dataset(
    cfg: omegaconf.DictConfig,
    split: str,
    transform=None,
    root: str | Path | None = None,
    with_index: bool = False,
) -> FashionMNIST:
    """The plugin dataset ``cfg`` names (``fashion-mnist`` or ``fashion-mnist-scenes``);
    ``with_index`` yields ``(index, image, target)`` as solo-learn's pretraining expects."""
    cls, kwargs = FashionMNIST, {}
    if _dataset_name(cfg) == SCENES:
        num, seed = _scene_args(cfg)
        cls, kwargs = FashionMNISTScenes, {"num_backgrounds": num, "seed": seed}
    if with_index:
        from solo.data.pretrain_dataloader import dataset_with_index

        cls = dataset_with_index(cls)
    return cls(split, transform=transform, root=root, **kwargs)


def resolve_dataset_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Validates ``data.dataset`` and maps the plugin's datasets onto solo-learn's ``custom``.

    Must run before solo-learn's ``parse_cfg``. Sets ``backbone.small_stem`` (3x3 stride-1 first
    convolution, no max-pool, as solo-learn does for CIFAR) for small-image datasets unless given.
    """
    name = str(OmegaConf.select(cfg, "data.dataset", default=""))
    name = _ALIASES.get(name.lower(), name)
    allowed = (*SOLO_DATASETS, *OFFLINE_DATASETS)
    if name not in allowed:
        raise ValueError(
            f"data.dataset={name!r} is not supported; allowed values: {', '.join(allowed)}"
        )
    small = OmegaConf.select(cfg, "backbone.small_stem", default=None)
    OmegaConf.update(
        cfg,
        "backbone.small_stem",
        name in SMALL_IMAGE_DATASETS if small is None else bool(small),
        force_add=True,
    )
    if OmegaConf.select(cfg, "data.format", default="image_folder") == "dali":
        if name not in DALI_DATASETS:
            raise ValueError(
                f"data.format=dali is not supported for data.dataset={name}: solo-learn's DALI "
                f"loaders read image folders ({', '.join(DALI_DATASETS)}); use image_folder"
            )
        resolve_dali_cfg(cfg)
    if name not in OFFLINE_DATASETS:
        return cfg
    root = fashion_mnist_root()
    mean, std = MEAN_STD
    if name == SCENES:
        num, seed = _scene_args(cfg)
        OmegaConf.update(cfg, "data.num_backgrounds", num, force_add=True)
        OmegaConf.update(cfg, "data.background_seed", seed, force_add=True)
        try:
            mean, std = scenes_mean_std(num, seed, root)
        except FileNotFoundError as err:
            raise DatasetUnavailableError(str(err)) from None
    OmegaConf.update(cfg, "data.offline_dataset", name, force_add=True)
    cfg.data.dataset = "custom"
    cfg.data.format = "image_folder"
    cfg.data.train_path = str(root)
    cfg.data.val_path = str(root)
    for pipeline in OmegaConf.select(cfg, "augmentations", default=None) or []:
        pipeline.mean = list(mean)
        pipeline.std = list(std)
    if OmegaConf.select(cfg, "data.augmentations", default=None) is not None:
        cfg.data.augmentations.mean = list(mean)
        cfg.data.augmentations.std = list(std)
    return cfg


def _check_folder(cfg: omegaconf.DictConfig, key: str) -> None:
    path = OmegaConf.select(cfg, key, default=None)
    if path is not None and not Path(str(path)).is_dir():
        raise DatasetUnavailableError(f"{key}={path!r} is not a folder")


def _subset_size(key: str, fraction: float, total: int, classes: int, batch: int | None) -> None:
    """Refuses a ``fraction`` whose stratified subset of ``total`` images cannot be drawn (fewer
    images than classes kept, or left out) or, with ``batch``, holds fewer images than one batch
    (the training loaders drop the last incomplete batch, so no step would run)."""
    if not 0 < fraction < 1:
        kept = total
    else:  # scikit-learn's train_test_split: floor(f * n) kept, the rest left out
        kept = int(fraction * total)
        if kept < classes or total - kept < classes:
            raise ValueError(
                f"{key}={fraction:g} keeps {kept} of the {total} images; a stratified subset "
                f"keeps and leaves out at least {classes} (one per class): use "
                f"{key} >= {math.ceil(classes / total * 1e6) / 1e6:g}, or -1 for all the data"
            )
    if batch is not None and kept < batch:
        raise ValueError(
            f"{key}={fraction:g} keeps {kept} of the {total} training images, fewer than one "
            f"batch (optimizer.batch_size={batch} over all devices): no training step would run; "
            f"use {key} >= {math.ceil(batch / total * 1e6) / 1e6:g} or a smaller batch"
        )


def _global_batch(cfg: omegaconf.DictConfig) -> int | None:
    batch = OmegaConf.select(cfg, "optimizer.batch_size", default=None)
    if not isinstance(batch, int):
        return None
    devices = OmegaConf.select(cfg, "devices", default=None)
    count = len(devices) if isinstance(devices, list | omegaconf.ListConfig) else 1
    return batch * count * int(OmegaConf.select(cfg, "num_nodes", default=1) or 1)


def check_subset_sizes(cfg: omegaconf.DictConfig, train: int | None, val: int | None) -> None:
    """``data.fraction`` and ``data.val_fraction`` against the number of training and validation
    images (None: not known): see :func:`_subset_size`."""
    classes = int(OmegaConf.select(cfg, "data.num_classes", default=None) or 0)
    name = _dataset_name(cfg)
    classes = classes or OFFLINE_DATASETS.get(name) or {"cifar10": 10, "cifar100": 100}.get(name, 1)
    fraction = float(OmegaConf.select(cfg, "data.fraction", default=-1) or -1)
    val_fraction = float(OmegaConf.select(cfg, "data.val_fraction", default=-1) or -1)
    if train is not None:
        _subset_size("data.fraction", fraction, train, classes, _global_batch(cfg))
    if val is not None and name in OFFLINE_DATASETS:  # the others ignore data.val_fraction
        _subset_size("data.val_fraction", val_fraction, val, classes, None)


def check_dataset_available(
    cfg: omegaconf.DictConfig, download_timeout: float = 30.0, train: bool = True
) -> None:
    """Fails early, with a message naming the key or file, when the data is not usable: both
    splits are read (``train=False``: the validation split only, for evaluations that read no
    training data), and the data fractions must leave a stratified subset and, for training,
    one batch (:func:`check_subset_sizes`).

    CIFAR is downloaded into ``data.train_path`` when missing (as solo-learn does); if that is not
    possible the error says so and points at the offline ``data.dataset=fashion-mnist`` option.
    """
    name = _dataset_name(cfg)
    has_val = OmegaConf.select(cfg, "data.val_path", default=None) is not None
    if name in OFFLINE_DATASETS:
        sizes = [
            len(offline_dataset(cfg, split, root=cfg.data[f"{split}_path"]))  # clear errors
            if (split == "train" and train) or (split == "val" and has_val)
            else None
            for split in ("train", "val")
        ]
        check_subset_sizes(cfg, sizes[0] if train else None, sizes[1])
        return
    if name in ("cifar10", "cifar100"):
        cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
        root = str(cfg.data.train_path)
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(download_timeout)
        try:
            train_set = cls(root, train=True, download=True) if train else None
            cls(
                str(OmegaConf.select(cfg, "data.val_path", default=None) or root),
                train=False,
                download=True,
            )
        except Exception as err:  # no network, proxy, disk: all end the same way for the user
            raise DatasetUnavailableError(
                f"{name.upper()} is not in data.train_path={root!r} and could not be downloaded "
                f"({type(err).__name__}: {err}). Download it where there is internet and copy it "
                "there, or train offline with data.dataset=fashion-mnist."
            ) from err
        finally:
            socket.setdefaulttimeout(previous)
        check_subset_sizes(cfg, len(train_set) if train_set is not None else None, None)
        return
    if OmegaConf.select(cfg, "data.format", default="image_folder") == "dali" and train:
        check_dali_folder(
            cfg.data.train_path,
            "data.train_path",
            no_labels=bool(OmegaConf.select(cfg, "data.no_labels", default=False)),
            batch_size=OmegaConf.select(cfg, "optimizer.batch_size", default=None),
        )
    if train:
        _check_folder(cfg, "data.train_path")
    _check_folder(cfg, "data.val_path")


def _stratified_subset(dataset: Dataset, targets, fraction: float, seed: int = 42) -> Dataset:
    if not 0 < fraction < 1:
        return dataset
    from sklearn.model_selection import train_test_split

    indices = list(range(len(targets)))
    kept, _ = train_test_split(
        indices, train_size=fraction, stratify=list(targets), random_state=seed
    )
    return Subset(dataset, sorted(kept))


def build_train_dataset(cfg: omegaconf.DictConfig, transform) -> Dataset:
    """The pretraining dataset, yielding ``(index, views, target)`` as solo-learn expects."""
    from solo.data.pretrain_dataloader import prepare_datasets

    if _dataset_name(cfg) in OFFLINE_DATASETS:
        dataset = offline_dataset(cfg, "train", transform, cfg.data.train_path, with_index=True)
        return _stratified_subset(dataset, dataset.targets, float(cfg.data.fraction))
    return prepare_datasets(
        cfg.data.dataset,
        transform,
        train_data_path=cfg.data.train_path,
        data_format=cfg.data.format,
        no_labels=cfg.data.no_labels,
        data_fraction=cfg.data.fraction,
    )


def image_params(cfg: omegaconf.DictConfig) -> tuple[int, list[float], list[float]]:
    """``(crop_size, mean, std)`` of a pretraining config (first augmentation pipeline) or of a
    linear-evaluation config (``data.augmentations``): the mean/std are the pretraining views'
    (:func:`~solo_bayesncl.data.pipelines.solo_normalization`, solo-learn's table for CIFAR,
    STL-10 and ImageNet), so that every evaluation feeds what the backbone was trained on."""
    from solo_bayesncl.data.pipelines import solo_normalization

    pipelines = OmegaConf.select(cfg, "augmentations", default=None)
    aug = (
        pipelines[0] if pipelines else OmegaConf.select(cfg, "data.augmentations", default={}) or {}
    )
    crop = int(aug.get("crop_size", 224))
    mean, std = solo_normalization(cfg, aug)
    return crop, mean, std


def official_transforms(
    cfg: omegaconf.DictConfig,
) -> tuple[transforms.Compose, transforms.Compose] | None:
    """solo-learn's classification ``(train, validation)`` transforms of the dataset, which the
    official NCL/BayesNCL probe and evaluation use (CIFAR-100 included: CIFAR-10's mean/std on
    both sides); None for datasets solo-learn does not know by name (image folders and the
    plugin's offline datasets), where the plugin's own transforms are the only ones."""
    name = _dataset_name(cfg)
    if name not in _SOLO_CLASSIFICATION_DATASETS:
        return None
    from solo.data.classification_dataloader import prepare_transforms

    return prepare_transforms(name)


def _normalized_as(transform: transforms.Compose, mean, std) -> transforms.Compose:
    """``transform`` with its ``Normalize`` step replaced by one with ``mean``/``std``."""
    steps = [
        transforms.Normalize(mean, std) if isinstance(t, transforms.Normalize) else t
        for t in transform.transforms
    ]
    return transforms.Compose(steps)


def validation_transform(cfg: omegaconf.DictConfig) -> transforms.Compose:
    """Resize and centre-crop to the training crop size, normalised like the training views.

    Small images (crop <= 64 px) are resized straight to the crop size, larger ones to
    ``crop / 0.875`` first (224 px crops read a 256 px resize, as in solo-learn).
    """
    crop, mean, std = image_params(cfg)
    resize = crop if crop <= 64 else int(round(crop / 0.875))
    return transforms.Compose(
        [
            transforms.Resize(resize, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(crop),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def linear_train_transform(cfg: omegaconf.DictConfig) -> transforms.Compose:
    """Random resized crop and flip at the training crop size (offline linear evaluation)."""
    crop, mean, std = image_params(cfg)
    return transforms.Compose(
        [
            transforms.RandomResizedCrop(
                crop, scale=(0.08, 1.0), interpolation=transforms.InterpolationMode.BICUBIC
            ),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def build_labelled_train_dataset(cfg: omegaconf.DictConfig, transform) -> Dataset:
    """The labelled training set as ``(image, label)`` pairs (linear evaluation, kNN)."""
    name = _dataset_name(cfg)
    if name in OFFLINE_DATASETS:
        dataset = offline_dataset(cfg, "train", transform, cfg.data.train_path)
        return _stratified_subset(
            dataset, dataset.targets, float(OmegaConf.select(cfg, "data.fraction", default=-1))
        )
    if name == "custom":
        return ImageFolder(str(cfg.data.train_path), transform)
    from solo.data.classification_dataloader import prepare_datasets

    train, _ = prepare_datasets(
        name, transform, transform, cfg.data.train_path, cfg.data.val_path, download=False
    )
    return train


def build_val_dataset(cfg: omegaconf.DictConfig, transform=None) -> Dataset | None:
    """The labelled validation dataset, or None when the config has none."""
    name = _dataset_name(cfg)
    transform = transform or validation_transform(cfg)
    if name in OFFLINE_DATASETS:
        dataset = offline_dataset(cfg, "val", transform, cfg.data.val_path)
        fraction = float(OmegaConf.select(cfg, "data.val_fraction", default=-1) or -1)
        return _stratified_subset(dataset, dataset.targets, fraction)
    no_labels = bool(OmegaConf.select(cfg, "data.no_labels", default=False))
    if cfg.data.val_path is None or (name == "custom" and no_labels):
        return None
    if name == "custom":
        return ImageFolder(str(cfg.data.val_path), transform)
    from solo.data.classification_dataloader import prepare_datasets

    fmt = OmegaConf.select(cfg, "data.format", default="image_folder")
    _, val = prepare_datasets(
        name,
        transform,
        transform,
        cfg.data.train_path,
        cfg.data.val_path,
        data_format="image_folder" if fmt == "dali" else fmt,
        download=False,
    )
    return val


def build_val_loader(
    cfg: omegaconf.DictConfig, batch_size: int | None = None, transform=None
) -> DataLoader | None:
    """Validation loader in solo-learn's ``(X, y)`` format, None when there is no labelled data.

    With several processes (``devices`` x ``num_nodes`` > 1) every process reads the whole set
    (:func:`solo_bayesncl.distributed.whole_set_in_every_process`): the validation figures are
    those of the whole set, each image counted once, as with one process.

    ``transform`` defaults to the standard one: for the datasets solo-learn knows by name its
    classification validation transform (CIFAR: none; ImageNet: 256 px resize, 224 px centre
    crop) normalised with the pretraining views' mean/std (:func:`image_params`) in place of its
    own, which is CIFAR-10's for CIFAR-100 too; :func:`validation_transform` for the others.
    """
    if transform is None:
        official = official_transforms(cfg)
        _, mean, std = image_params(cfg)
        transform = (
            validation_transform(cfg)
            if official is None
            else _normalized_as(official[1], mean, std)
        )
    dataset = build_val_dataset(cfg, transform)
    if dataset is None:
        return None
    loader = DataLoader(
        dataset,
        batch_size=batch_size or cfg.optimizer.batch_size,
        shuffle=False,
        num_workers=cfg.data.num_workers,
        pin_memory=torch.cuda.is_available(),
        drop_last=False,
    )
    return _for_every_process(cfg, loader)


def _for_every_process(cfg: omegaconf.DictConfig, loader: DataLoader) -> DataLoader:
    devices = OmegaConf.select(cfg, "devices", default=None)  # a list once resolved
    processes = (len(devices) if OmegaConf.is_list(devices) else 1) * int(
        OmegaConf.select(cfg, "num_nodes", default=1) or 1
    )
    return whole_set_in_every_process(loader) if processes > 1 else loader
