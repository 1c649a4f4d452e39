"""Resolving the dataset of a config before anything is built: the name checked, the plugin's
datasets mapped onto solo-learn's ``custom``, and the checks (files, downloads, DALI folders)
that fail early naming the key or file.
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

import omegaconf
from omegaconf import OmegaConf
from torchvision import datasets
from torchvision.datasets.folder import IMG_EXTENSIONS

from solo_bayesncl.data import dali
from solo_bayesncl.data.dali import check_dali_folder
from solo_bayesncl.data.datasets import offline_dataset, scene_args
from solo_bayesncl.data.fashion_mnist import MEAN_STD, fashion_mnist_root
from solo_bayesncl.data.names import (
    DALI_DATASETS,
    OFFLINE_DATASETS,
    SCENES,
    SOLO_DATASETS,
    DatasetSpec,
    dataset_name,
    dataset_spec,
)
from solo_bayesncl.data.pipelines import AUGMENT_ON, not_batchable
from solo_bayesncl.data.scenes import scenes_mean_std

__all__ = [
    "DatasetUnavailableError",
    "check_dataset_available",
    "resolve_augment_on",
    "resolve_dali_cfg",
    "resolve_dataset_cfg",
]


class DatasetUnavailableError(RuntimeError):
    """The configured dataset is not on disk and cannot be fetched."""


def resolve_dataset_cfg(cfg: omegaconf.DictConfig) -> DatasetSpec:
    """Validates ``data.dataset``, maps the plugin's datasets onto solo-learn's ``custom`` in
    ``cfg`` and returns the dataset's spec; must run before ``parse_cfg``."""
    name = dataset_name(cfg)
    allowed = (*SOLO_DATASETS, *OFFLINE_DATASETS)
    if name not in allowed:
        raise ValueError(
            f"data.dataset={name!r} is not supported; allowed values: {', '.join(allowed)}"
        )
    if OmegaConf.select(cfg, "data.format", default="image_folder") == "dali":
        if name not in DALI_DATASETS:
            raise ValueError(
                f"data.format=dali is not supported for data.dataset={name}: solo-learn's DALI "
                f"loaders read image folders ({', '.join(DALI_DATASETS)}); use image_folder"
            )
        resolve_dali_cfg(cfg)
    if name in OFFLINE_DATASETS:
        _as_custom(cfg, name)
    return dataset_spec(cfg)


def _as_custom(cfg: omegaconf.DictConfig, name: str) -> None:
    """Presents the plugin's dataset ``name`` to solo-learn as ``custom``, in ``cfg``: its files,
    its normalisation and (scenes) its background settings."""
    root = fashion_mnist_root()
    mean, std = MEAN_STD
    if name == SCENES:
        num, seed = scene_args(
            OmegaConf.select(cfg, "data.num_backgrounds", default=None),
            OmegaConf.select(cfg, "data.background_seed", default=None),
        )
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


def resolve_dali_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Checks that DALI is installed and sets ``dali.device`` to ``cpu`` or ``gpu``."""
    if not dali.dali_available():
        raise dali.DaliDataError(
            f"data.format=dali needs NVIDIA DALI, not installed: {dali.INSTALL_DALI}"
        )
    accelerator = str(OmegaConf.select(cfg, "accelerator", default="cpu"))
    on_gpu = accelerator in {"gpu", "cuda"}
    given = OmegaConf.select(cfg, "dali.device", default=None)
    name = "auto" if given is None else str(given).lower()
    if name == "auto":
        name = "gpu" if on_gpu else "cpu"
    if name not in dali.DALI_DEVICES:
        raise dali.DaliDataError(
            f"dali.device={given!r} is not supported; allowed values: auto, "
            f"{', '.join(dali.DALI_DEVICES)}"
        )
    device = dali.DALI_DEVICES[name]
    if device == "gpu" and not on_gpu:
        raise dali.DaliDataError(
            f"dali.device={name} needs training on a GPU (accelerator={accelerator}); "
            "use dali.device=cpu"
        )
    OmegaConf.update(cfg, "dali.device", device, force_add=True)
    return cfg


def resolve_augment_on(cfg: omegaconf.DictConfig, spec: DatasetSpec) -> omegaconf.DictConfig:
    """Validates ``data.augment_on`` against ``spec``: an explicit ``batch`` the data or recipe
    cannot honour fails with the reason; unset, it becomes ``batch`` only where allowed."""
    value = OmegaConf.select(cfg, "data.augment_on", default=None)
    reason = not_batchable(spec, OmegaConf.select(cfg, "augmentations", default=None))
    if value is None:
        value = "per_image" if reason else "batch"
    value = str(value)
    if value not in AUGMENT_ON:
        raise ValueError(
            f"data.augment_on={value!r} is not supported; allowed values: {', '.join(AUGMENT_ON)}"
        )
    if value == "batch" and reason:
        raise ValueError(f"data.augment_on=batch is not available: {reason}; use per_image")
    OmegaConf.update(cfg, "data.augment_on", value, force_add=True)
    return cfg


def _check_folder(path: str | None, key: str) -> None:
    if path is not None and not Path(str(path)).is_dir():
        raise DatasetUnavailableError(f"{key}={path!r} is not a folder")


def _subset_size(key: str, fraction: float, total: int, classes: int, batch: int | None) -> None:
    """Refuses a ``fraction`` whose stratified subset of ``total`` cannot be drawn or, with
    ``batch``, holds less than one batch (loaders drop an incomplete one: no step would run)."""
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


def check_subset_sizes(
    spec: DatasetSpec, batch: int | None, train: int | None, val: int | None
) -> None:
    """``data.fraction`` and ``data.val_fraction`` against the number of training and validation
    images (None: not known) and the global ``batch``: see :func:`_subset_size`."""
    if train is not None:
        _subset_size("data.fraction", spec.fraction, train, spec.classes, batch)
    if val is not None and spec.is_offline:  # the others ignore data.val_fraction
        _subset_size("data.val_fraction", spec.val_fraction, val, spec.classes, None)


def check_dataset_available(
    spec: DatasetSpec,
    batch_size: int | None = None,
    processes: int = 1,
    download_timeout: float = 30.0,
    train: bool = True,
) -> None:
    """Fails early, naming the key or file, when the data is unusable: both splits read
    (``train=False``: validation only), the fractions leaving a stratified subset and a batch per
    process. CIFAR is downloaded when missing, as solo-learn does; a failure states the layout
    torchvision reads and points at the offline ``data.dataset=fashion-mnist``."""
    name = spec.name
    batch = None if batch_size is None else batch_size * processes
    if spec.is_offline:
        roots = {"train": spec.train_path, "val": spec.val_path}
        sizes = [
            len(offline_dataset(spec, split, root=roots[split]))  # clear errors
            if (split == "train" and train) or (split == "val" and spec.val_path is not None)
            else None
            for split in ("train", "val")
        ]
        check_subset_sizes(spec, batch, sizes[0] if train else None, sizes[1])
        return
    if name in ("cifar10", "cifar100"):
        train_set = _check_cifar(spec, download_timeout, train)
        check_subset_sizes(spec, batch, len(train_set) if train_set is not None else None, None)
        return
    if spec.format == "dali" and train:
        check_dali_folder(
            spec.train_path, "data.train_path", no_labels=spec.no_labels, batch_size=batch_size
        )
    if train:
        _check_folder(spec.train_path, "data.train_path")
        if spec.format == "image_folder":
            _check_folder_batch(spec, batch)
    _check_folder(spec.val_path, "data.val_path")


def _count_images(root: str | Path, enough: int) -> int:
    """The images (torchvision's ``IMG_EXTENSIONS``) under ``root``, counted until ``enough``."""
    count = 0
    for _, _, files in os.walk(root, followlinks=True):
        count += sum(name.lower().endswith(IMG_EXTENSIONS) for name in files)
        if count >= enough:
            break
    return count


def _check_folder_batch(spec: DatasetSpec, batch: int | None) -> None:
    """An image folder's ``data.fraction`` must keep one global batch (each process its share of
    the images, at least its batch): counted only as far as that needs."""
    path = spec.train_path
    if batch is None or path is None:
        return
    fraction = spec.fraction
    enough = math.ceil((batch + 1) / fraction) if 0 < fraction < 1 else batch
    count = _count_images(path, enough)
    if count:  # none at all: the dataset builder names what the folder lacks
        _subset_size("data.fraction", fraction, count, 0, batch)


def cifar_layout(name: str, root: str | Path) -> str:
    """Where torchvision's CIFAR-10/100 looks under ``root``: folder, files and archive."""
    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    files = [entry[0] for entry in (*cls.train_list, *cls.test_list)] + [cls.meta["filename"]]
    return (
        f"{Path(root) / cls.base_folder}/ holding {', '.join(files)} (what {cls.url} unpacks into)"
    )


def _new_folders(path: str | Path) -> list[Path]:
    """The folders that creating ``path`` would create, outermost first (none if it exists)."""
    folder = Path(path).expanduser().absolute()
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def _remove_if_empty(folders: list[Path]) -> None:
    """Removes, innermost first, those of ``folders`` that are still empty folders."""
    for folder in reversed(folders):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _check_cifar(
    spec: DatasetSpec, download_timeout: float, train: bool
) -> datasets.VisionDataset | None:
    """Reads (downloading when missing) the CIFAR splits the run needs; returns the training split.
    On failure, folders the attempt created are removed if empty, and the error names the layout."""
    name = spec.name
    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    splits = [("data.train_path", str(spec.train_path), True)] if train else []
    val = spec.val_path
    splits.append(
        ("data.train_path", str(spec.train_path), False)
        if val is None
        else ("data.val_path", str(val), False)
    )
    created = [folder for _, root, _ in splits for folder in _new_folders(root)]
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(download_timeout)
    train_set = None
    try:
        for key, root, is_train in splits:
            try:
                loaded = cls(root, train=is_train, download=True)
            except Exception as err:  # no network, proxy, disk: all end the same way
                raise DatasetUnavailableError(
                    f"{name.upper()} is not in {key}={root!r} and could not be downloaded "
                    f"({type(err).__name__}: {err}). torchvision reads it from "
                    f"{cifar_layout(name, root)}: download that archive where there is internet "
                    "and unpack it there, or train offline with data.dataset=fashion-mnist."
                ) from err
            train_set = loaded if is_train else train_set
    except BaseException:  # an interrupt too: leave no empty folder behind
        _remove_if_empty(created)
        raise
    finally:
        socket.setdefaulttimeout(previous)
    return train_set
