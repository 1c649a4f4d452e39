"""The pretraining data pipeline picked by ``data.augment_on`` (docs/training.md): ``per_image``
is solo-learn's path (one PIL image at a time in the loader); ``batch`` augments whole in-memory
uint8 batches on the training device
(:class:`~solo_bayesncl.data.batch_augment.MultiViewAugmentation`). Both shuffle with
:class:`~solo_bayesncl.data.sampler.EpochSampler`, so a run resumed within an epoch continues
with the batches not yet trained.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import omegaconf
import torch
from torch.utils.data import DataLoader, Dataset, default_collate
from torchvision import datasets
from torchvision.transforms import Normalize

from solo_bayesncl.data.batch_augment import MultiViewAugmentation, Recipe, unsupported_reason
from solo_bayesncl.data.datasets import build_train_dataset, offline_dataset, stratified_subset
from solo_bayesncl.data.names import OFFLINE_DATASETS, DatasetSpec, solo_normalization
from solo_bayesncl.data.sampler import EpochSampler

__all__ = [
    "AUGMENT_ON",
    "augmentations",
    "InMemoryImages",
    "batch_datamodule",
    "collate_batch",
    "load_in_memory",
    "not_batchable",
    "per_image_datamodule",
    "per_image_transform",
    "pretrain_fit_data",
    "recipes",
]

AUGMENT_ON = ("batch", "per_image")
IN_MEMORY_DATASETS: dict[str, int] = {
    **dict.fromkeys(OFFLINE_DATASETS, 28),
    "cifar10": 32,
    "cifar100": 32,
}
"""Datasets the batched path serves, with their image side in pixels."""


def not_batchable(spec: DatasetSpec, pipelines: Any) -> str | None:
    """Why ``spec`` with the augmentation ``pipelines`` cannot use the batched path, or None."""
    name = spec.name
    if name not in IN_MEMORY_DATASETS:
        return (
            f"data.dataset={name} is not held in memory (the batched path serves "
            f"{', '.join(IN_MEMORY_DATASETS)})"
        )
    if spec.format != "image_folder":
        return f"data.format={spec.format} (the batched path reads the in-memory arrays)"
    for i, aug in enumerate(pipelines or []):
        reason = unsupported_reason(Recipe.from_cfg(aug, (0.0,), (1.0,)), IN_MEMORY_DATASETS[name])
        if reason:
            return f"augmentations[{i}]: {reason}"
    return None


class InMemoryImages(Dataset):
    """uint8 images ``(N, C, H, W)`` and labels, served as ``(index, image, label)``;
    ``__getitems__`` returns a batch as three tensors (``collate_fn``: :func:`collate_batch`)."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"images must be uint8 (N, C, H, W), got {images.dtype} {tuple(images.shape)}"
            )
        if len(targets) != len(images):
            raise ValueError(f"{len(images)} images but {len(targets)} labels")
        self.images = images
        self.targets = targets.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, int]:
        return index, self.images[index], int(self.targets[index])

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return idx, self.images[idx], self.targets[idx]


def collate_batch(batch: Any) -> list:
    """``[indexes, images, labels]``: a batch from :meth:`InMemoryImages.__getitems__` as is, or
    a list of single items (a plain ``Dataset`` wrapper without ``__getitems__``) stacked."""
    if isinstance(batch, tuple) and len(batch) == 3 and isinstance(batch[0], torch.Tensor):
        return list(batch)
    return default_collate(batch)


def load_in_memory(spec: DatasetSpec) -> Dataset:
    """The training split as uint8 tensors, ``data.fraction`` applied as on the per-image path."""
    name = spec.name
    if name in OFFLINE_DATASETS:
        source = offline_dataset(spec, "train", root=spec.train_path)
        images = torch.from_numpy(source.images.copy())[:, None]
        targets = torch.from_numpy(source.targets.copy())
    elif name in ("cifar10", "cifar100"):
        cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
        source = cls(str(spec.train_path), train=True, download=False)
        images = torch.from_numpy(source.data).permute(0, 3, 1, 2).contiguous()
        targets = torch.as_tensor(source.targets)
    else:
        raise ValueError(
            f"data.dataset={name} has no in-memory loader; allowed: {', '.join(IN_MEMORY_DATASETS)}"
        )
    dataset = InMemoryImages(images, targets)
    return stratified_subset(dataset, dataset.targets.tolist(), spec.fraction)


def augmentations(solo_cfg: omegaconf.DictConfig) -> list:
    """solo-learn's augmentation pipelines (``augmentations``) of its config, as it takes them."""
    return list(solo_cfg.get("augmentations", None) or [])


def recipes(data: DatasetSpec, solo_cfg: omegaconf.DictConfig) -> list[Recipe]:
    """The run's augmentation pipelines, read as solo-learn reads them."""
    return [
        Recipe.from_cfg(aug, *solo_normalization(data.loader, aug.get("mean"), aug.get("std")))
        for aug in augmentations(solo_cfg)
    ]


def _datamodule_class():
    """The Lightning data module both pretraining paths share (:class:`EpochSampler`, and
    ``continue_epoch`` to skip what a checkpoint saved within an epoch already trained)."""
    import lightning.pytorch as pl

    class PretrainDataModule(pl.LightningDataModule):
        def __init__(
            self,
            seed: int,
            batch_size: int,
            dataset: Dataset,
            val_loader: DataLoader | None,
            num_workers: int,
            collate_fn: Callable | None = None,
        ) -> None:
            super().__init__()
            self.dataset = dataset
            self.val_loader = val_loader
            self.seed = seed
            self.batch_size = batch_size
            self.num_workers = num_workers
            self.collate_fn = collate_fn
            self._sampler: EpochSampler | None = None

        @property
        def sampler(self) -> EpochSampler:
            """This process's sampler, made once the job's processes are known."""
            trainer = self.trainer
            if trainer is None:
                return EpochSampler(self.dataset, seed=self.seed)
            if self._sampler is None:
                self._sampler = EpochSampler(
                    self.dataset,
                    seed=self.seed,
                    num_replicas=trainer.world_size,
                    rank=trainer.global_rank,
                )
            return self._sampler

        def continue_epoch(self, epoch: int, batches_done: int) -> None:
            """The next pass over ``epoch`` starts after its first ``batches_done`` batches."""
            self.sampler.continue_epoch(epoch, batches_done * self.batch_size)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(
                self.dataset,
                batch_size=self.batch_size,
                sampler=self.sampler,
                num_workers=self.num_workers,
                pin_memory=torch.cuda.is_available(),
                drop_last=True,
                collate_fn=self.collate_fn,
            )

        def val_dataloader(self):
            return self.val_loader if self.val_loader is not None else []

    return PretrainDataModule


def batch_datamodule(
    data: DatasetSpec,
    solo_cfg: omegaconf.DictConfig,
    seed: int,
    batch_size: int,
    val_loader: DataLoader | None = None,
    num_workers: int = 0,
):
    """The ``batch`` path as a Lightning data module: in-memory uint8 batches, augmented on the
    training device in ``on_after_batch_transfer``; no training loader workers (they were slower,
    ``microbenchmarks/bench_pipeline.py``)."""
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    # Lightning advises workers for any loader without them; here that advice is measured wrong
    warnings.filterwarnings(
        "ignore",
        message="The 'train_dataloader' does not have many workers",
        category=PossibleUserWarning,
    )

    class InMemoryPretrainDataModule(_datamodule_class()):
        def __init__(self) -> None:
            super().__init__(
                seed, batch_size, load_in_memory(data), val_loader, num_workers, collate_batch
            )
            self.augmentation = MultiViewAugmentation(recipes(data, solo_cfg))

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            if self.trainer is not None and not self.trainer.training:
                return batch
            indexes, images, targets = batch
            # draws from torch's global generator, which the training seeds at every batch
            # (solo_bayesncl.training.resumable: from the seed, epoch, batch and rank)
            with torch.no_grad():
                views = self.augmentation(images)
            return [indexes, views, targets]

    return InMemoryPretrainDataModule()


def per_image_transform(data: DatasetSpec, solo_cfg: omegaconf.DictConfig):
    """solo-learn's per-image views: ``build_transform_pipeline`` per pipeline and crop, with
    ``Normalize``'s mean and std as tuples. Given the config's lists, torch's C code would ask
    them for attributes at every image through OmegaConf's Python ``__getattr__``, where the
    KeyboardInterrupt of a Ctrl-C can land: the probe then swallows it, or fails with "could not
    determine the shape of object type 'ListConfig'"."""
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        build_transform_pipeline,
    )

    views = []
    for aug in augmentations(solo_cfg):
        pipeline = build_transform_pipeline(data.loader, aug)
        for step in pipeline.transforms:
            if isinstance(step, Normalize):
                step.mean, step.std = tuple(step.mean), tuple(step.std)
        views.append(NCropAugmentation(pipeline, aug.num_crops))
    return FullTransformPipeline(views)


def per_image_datamodule(
    data: DatasetSpec,
    solo_cfg: omegaconf.DictConfig,
    seed: int,
    batch_size: int,
    val_loader: DataLoader | None = None,
):
    """solo-learn's path as a Lightning data module: per-image views in the loader's workers, the
    last partial batch dropped as ``prepare_dataloader`` does, in the plugin sampler's order."""

    class PerImagePretrainDataModule(_datamodule_class()):
        pass

    dataset = build_train_dataset(data, per_image_transform(data, solo_cfg))
    return PerImagePretrainDataModule(seed, batch_size, dataset, val_loader, data.num_workers)


def pretrain_fit_data(
    data: DatasetSpec,
    solo_cfg: omegaconf.DictConfig,
    seed: int,
    batch_size: int,
    val_loader: DataLoader | None,
) -> dict[str, Any]:
    """``Trainer.fit`` keyword arguments for the non-DALI pipelines, by ``data.augment_on``."""
    build = batch_datamodule if data.augment_on == "batch" else per_image_datamodule
    return {"datamodule": build(data, solo_cfg, seed, batch_size, val_loader)}
