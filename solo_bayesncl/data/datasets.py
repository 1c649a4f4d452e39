"""The datasets, loaders and transforms of a resolved config: the plugin's datasets built here,
solo-learn's through its own loaders. Validation runs at the training crop size (solo-learn's
``custom`` data validates at 224 px after a 256 px resize whatever the crop)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from solo_bayesncl.core.distributed import whole_set_in_every_process
from solo_bayesncl.data.fashion_mnist import FashionMNIST
from solo_bayesncl.data.names import SCENES, SOLO_LOADER_DATASETS, DatasetSpec
from solo_bayesncl.data.scenes import (
    DEFAULT_BACKGROUND_SEED,
    DEFAULT_BACKGROUNDS,
    FashionMNISTScenes,
    check_scene_args,
)

__all__ = [
    "LabelledImages",
    "build_labelled_train_dataset",
    "build_train_dataset",
    "build_val_dataset",
    "build_val_loader",
    "class_names",
    "labelled_val_images",
    "linear_train_transform",
    "official_transforms",
    "offline_dataset",
    "scene_args",
    "seeded_subset",
    "stratified_subset",
    "validation_transform",
]


def scene_args(num: Any, seed: Any) -> tuple[int, int]:
    """``(data.num_backgrounds, data.background_seed)`` checked (None: the default)."""
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
    spec: DatasetSpec,
    split: str,
    transform=None,
    root: str | Path | None = None,
    with_index: bool = False,
) -> FashionMNIST:
    """The plugin dataset ``spec`` names (``fashion-mnist`` or ``fashion-mnist-scenes``);
    ``with_index`` yields ``(index, image, target)`` as solo-learn's pretraining expects."""
    cls, kwargs = FashionMNIST, {}
    if spec.name == SCENES:
        num, seed = scene_args(spec.num_backgrounds, spec.background_seed)
        cls, kwargs = FashionMNISTScenes, {"num_backgrounds": num, "seed": seed}
    if with_index:
        from solo.data.pretrain_dataloader import dataset_with_index

        cls = dataset_with_index(cls)
    return cls(split, transform=transform, root=root, **kwargs)


def stratified_subset(dataset: Dataset, targets, fraction: float, seed: int = 42) -> Dataset:
    if not 0 < fraction < 1:
        return dataset
    from sklearn.model_selection import train_test_split

    indices = list(range(len(targets)))
    kept, _ = train_test_split(
        indices, train_size=fraction, stratify=list(targets), random_state=seed
    )
    return Subset(dataset, sorted(kept))


def build_train_dataset(spec: DatasetSpec, transform) -> Dataset:
    """The pretraining dataset, yielding ``(index, views, target)`` as solo-learn expects."""
    from solo.data.pretrain_dataloader import prepare_datasets

    if spec.is_offline:
        dataset = offline_dataset(spec, "train", transform, spec.train_path, with_index=True)
        return stratified_subset(dataset, dataset.targets, spec.fraction)
    return prepare_datasets(
        spec.loader,
        transform,
        train_data_path=spec.train_path,
        data_format=spec.format,
        no_labels=spec.no_labels,
        data_fraction=spec.fraction,
    )


def official_transforms(
    spec: DatasetSpec,
) -> tuple[transforms.Compose, transforms.Compose] | None:
    """solo-learn's classification ``(train, validation)`` transforms, as the official NCL/BayesNCL
    probe and evaluation use them; None for datasets solo-learn does not know by name."""
    name = spec.name
    if name not in SOLO_LOADER_DATASETS:
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


def validation_transform(spec: DatasetSpec) -> transforms.Compose:
    """Resize and centre-crop to the training crop size, normalised like the training views; crops
    above 64 px read a ``crop / 0.875`` resize first (224 px crops a 256 px one, as solo-learn)."""
    crop, (mean, std) = spec.crop_size, spec.normalization
    resize = crop if crop <= 64 else int(round(crop / 0.875))
    return transforms.Compose(
        [
            transforms.Resize(resize, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(crop),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def linear_train_transform(spec: DatasetSpec) -> transforms.Compose:
    """Random resized crop and flip at the training crop size (offline linear evaluation)."""
    crop, (mean, std) = spec.crop_size, spec.normalization
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


def build_labelled_train_dataset(spec: DatasetSpec, transform) -> Dataset:
    """The labelled training set as ``(image, label)`` pairs (linear evaluation, kNN)."""
    if spec.is_offline:
        dataset = offline_dataset(spec, "train", transform, spec.train_path)
        return stratified_subset(dataset, dataset.targets, spec.fraction)
    if spec.name == "custom":
        return ImageFolder(str(spec.train_path), transform)
    from solo.data.classification_dataloader import prepare_datasets

    train, _ = prepare_datasets(
        spec.name, transform, transform, spec.train_path, spec.val_path, download=False
    )
    return train


def build_val_dataset(spec: DatasetSpec, transform=None) -> Dataset | None:
    """The labelled validation dataset, or None when the config has none."""
    transform = transform or validation_transform(spec)
    if spec.is_offline:
        dataset = offline_dataset(spec, "val", transform, spec.val_path)
        return stratified_subset(dataset, dataset.targets, spec.val_fraction)
    if spec.val_path is None or (spec.name == "custom" and spec.no_labels):
        return None
    if spec.name == "custom":
        return ImageFolder(str(spec.val_path), transform)
    from solo.data.classification_dataloader import prepare_datasets

    _, val = prepare_datasets(
        spec.name,
        transform,
        transform,
        spec.train_path,
        spec.val_path,
        data_format="image_folder" if spec.format == "dali" else spec.format,
        download=False,
    )
    return val


def build_val_loader(
    spec: DatasetSpec, batch_size: int, transform=None, processes: int = 1
) -> DataLoader | None:
    """Validation loader in solo-learn's ``(X, y)`` format, None without labelled data; with several
    ``processes`` each reads the whole set. ``transform`` defaults to solo-learn's classification
    transform (with the pretraining views' mean/std), else :func:`validation_transform`."""
    if transform is None:
        official = official_transforms(spec)
        mean, std = spec.normalization
        transform = (
            validation_transform(spec)
            if official is None
            else _normalized_as(official[1], mean, std)
        )
    dataset = build_val_dataset(spec, transform)
    if dataset is None:
        return None
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=spec.num_workers,
        pin_memory=torch.cuda.is_available(),
        drop_last=False,
    )
    return whole_set_in_every_process(loader) if processes > 1 else loader


def class_names(dataset, num_classes: int | None) -> list[str]:
    """The class names of a (possibly wrapped) dataset, else ``0 .. num_classes - 1``."""
    inner = dataset
    while not hasattr(inner, "classes") and hasattr(inner, "dataset"):
        inner = inner.dataset
    names = getattr(inner, "classes", None)
    if names:
        return [str(c) for c in names]
    if not num_classes:
        raise ValueError("the validation dataset names no classes and data.num_classes is unset")
    return [str(i) for i in range(int(num_classes))]


def seeded_subset(dataset, max_images: int | None, seed: int = 0):
    """A seeded random subset of ``max_images`` images, in dataset order; all when None."""
    if max_images is None or max_images >= len(dataset):
        return dataset
    if max_images < 1:
        raise ValueError(f"max_images must be >= 1, got {max_images}")
    picks = np.sort(np.random.default_rng(seed).permutation(len(dataset))[:max_images])
    return Subset(dataset, picks.tolist())


@dataclass
class LabelledImages:
    """Labelled validation images: the dataset, class names, its name and its normalisation."""

    dataset: Dataset
    class_names: list[str]
    label: str
    mean: list[float]
    std: list[float]


def labelled_val_images(spec: DatasetSpec, max_images: int | None = None) -> LabelledImages | None:
    """The labelled validation images of ``spec`` at the training resolution (a seeded subset of
    ``max_images``), or None; ValueError without class names and ``data.num_classes``."""
    val = build_val_dataset(spec, validation_transform(spec))
    if val is None:
        return None
    names = class_names(val, spec.num_classes)
    mean, std = spec.normalization
    return LabelledImages(seeded_subset(val, max_images), names, spec.label, mean, std)
