"""solo-learn's DALI data modules, made to run on the CPU as well.

solo-learn passes the local rank as DALI's ``device_id``, so DALI asks for CUDA even on the CPU.
With ``dali_device="cpu"`` the subclasses here build the same pipelines with ``device_id=None``;
with ``"gpu"`` ``setup`` is solo-learn's own. Imports solo-learn and NVIDIA DALI.
"""

from __future__ import annotations

import omegaconf
import torch
from nvidia.dali.plugin.pytorch import LastBatchPolicy
from solo.data.dali_dataloader import (
    ClassificationDALIDataModule,
    PretrainDALIDataModule,
    PretrainPipelineBuilder,
    PretrainWrapper,
    Wrapper,
    build_transform_pipeline_dali,
)
from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation

from solo_bayesncl.data.names import DatasetSpec

__all__ = [
    "build_linear_dali_datamodule",
    "build_pretrain_dali_datamodule",
]


def _cpu_pipeline(builder):
    """Builds ``builder``'s pipeline as solo-learn does, but with no CUDA device attached."""
    pipeline = builder.pipeline(
        batch_size=builder.batch_size,
        num_threads=builder.num_threads,
        device_id=None,
        seed=builder.seed,
    )
    pipeline.build()
    return pipeline


def _ranks(module) -> None:
    module.device_id = module.trainer.local_rank
    module.shard_id = module.trainer.global_rank
    module.num_shards = module.trainer.world_size
    module.device = torch.device("cpu")


class PretrainDALIData(PretrainDALIDataModule):
    """solo-learn's pretraining DALI module; no CUDA device on ``dali_device="cpu"``."""

    def setup(self, stage: str | None = None) -> None:
        if self.dali_device != "cpu":
            super().setup(stage)
            return
        _ranks(self)
        builder = PretrainPipelineBuilder(
            self.train_data_path,
            batch_size=self.batch_size,
            transforms=self.transforms,
            device="cpu",
            device_id=self.device_id,  # seeds the pipeline per rank, as in solo-learn
            shard_id=self.shard_id,
            num_shards=self.num_shards,
            num_threads=self.num_workers,
            no_labels=self.no_labels,
            encode_indexes_into_labels=self.encode_indexes_into_labels,
            data_fraction=self.data_fraction,
        )
        pipeline = _cpu_pipeline(builder)
        self.train_loader = PretrainWrapper(
            model_batch_size=self.batch_size,
            model_rank=self.device_id,
            model_device=self.device,
            dataset_size=pipeline.epoch_size("Reader"),
            conversion_map=builder.conversion_map if self.encode_indexes_into_labels else None,
            pipelines=pipeline,
            output_map=[f"large{i}" for i in range(self.num_large_crops)]
            + [f"small{i}" for i in range(self.num_small_crops)]
            + ["label"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )


class ClassificationDALIData(ClassificationDALIDataModule):
    """solo-learn's classification DALI module; without a CUDA device on ``dali_device="cpu"``."""

    def setup(self, stage: str | None = None) -> None:
        if self.dali_device != "cpu":
            super().setup(stage)
            return
        _ranks(self)
        loaders = {}
        for split, path in (("train", self.train_data_path), ("val", self.val_data_path)):
            validation = split == "val"
            builder = self.pipeline_class(
                path,
                validation=validation,
                batch_size=self.batch_size,
                device="cpu",
                device_id=self.device_id,
                shard_id=self.shard_id,
                num_shards=self.num_shards,
                num_threads=self.num_workers,
                **({} if validation else {"data_fraction": self.data_fraction}),
            )
            pipeline = _cpu_pipeline(builder)
            loaders[split] = Wrapper(
                pipelines=pipeline,
                dataset_size=pipeline.epoch_size("Reader"),
                output_map=["x", "label"],
                reader_name="Reader",
                last_batch_policy=LastBatchPolicy.PARTIAL if validation else LastBatchPolicy.DROP,
                auto_reset=True,
            )
        self.train_loader, self.val_loader = loaders["train"], loaders["val"]


def build_pretrain_dali_datamodule(
    data: DatasetSpec, batch_size: int, solo_cfg: omegaconf.DictConfig
) -> PretrainDALIData:
    """The pretraining DALI data module of a run, as ``main_pretrain.py`` builds it."""
    transform = FullTransformPipeline(
        [
            NCropAugmentation(
                build_transform_pipeline_dali(data.loader, aug, dali_device=data.dali_device),
                aug.num_crops,
            )
            for aug in solo_cfg.augmentations
        ]
    )
    return PretrainDALIData(
        dataset=data.loader,
        train_data_path=data.train_path,
        transforms=transform,
        num_large_crops=data.large_crops,
        num_small_crops=data.small_crops,
        num_workers=max(1, data.num_workers),  # DALI threads; 0 is not a thread count
        batch_size=batch_size,
        no_labels=data.no_labels,
        data_fraction=data.fraction,
        dali_device=data.dali_device,
        encode_indexes_into_labels=data.encode_indexes,
    )


def build_linear_dali_datamodule(data: DatasetSpec, batch_size: int) -> ClassificationDALIData:
    """The linear-evaluation data module of a run, as ``main_linear.py`` builds it."""
    return ClassificationDALIData(
        dataset=data.loader,
        train_data_path=data.train_path,
        val_data_path=data.val_path,
        batch_size=batch_size,
        num_workers=max(1, data.num_workers),
        data_fraction=data.fraction,
        dali_device=data.dali_device,
    )
