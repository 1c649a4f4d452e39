"""A Lightning callback that computes the interpretability metrics (docs/method.md, "Metrics") on the
whole validation set every ``interpretability.frequency`` epochs, for any of the four methods.

Settings: :class:`~solo_bayesncl.config.settings.InterpretabilitySpec`. Metrics are logged as
``interp/<metric>`` (with ``probe``: ``probe_top1``, ``probe_converged``; on scenes data the
measures of :mod:`solo_bayesncl.metrics.background` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader

from solo_bayesncl.config.settings import InterpretabilitySpec
from solo_bayesncl.core.representations import (
    RepresentationBatch,
    extract_representations,
    representation_batch,
)
from solo_bayesncl.data.datasets import build_labelled_train_dataset, validation_transform
from solo_bayesncl.data.names import SCENES, DatasetSpec
from solo_bayesncl.data.scenes import background_labels
from solo_bayesncl.metrics import InterpretabilityAccumulator
from solo_bayesncl.metrics.background import background_figures
from solo_bayesncl.metrics.probe import logistic_probe

__all__ = [
    "InterpretabilityCallback",
    "build_interpretability_callback",
]


@dataclass(frozen=True)
class Backgrounds:
    """The background labels of a ``fashion-mnist-scenes`` run, in loader order."""

    val: np.ndarray
    train: np.ndarray | None
    num_backgrounds: int


@dataclass(eq=False)
class InterpretabilityCallback(Callback):
    """Evaluates the interpretable representation on ``val_loader`` at the end of training epochs,
    on the global-zero process only. With ``share_validation`` an epoch reads the forward outputs
    of its own validation instead of a pass of its own, when that validation ran after the epoch's
    last optimizer step, without autocast, over every image of ``val_loader``."""

    share_validation: ClassVar[bool] = True

    val_loader: DataLoader
    num_classes: int
    settings: InterpretabilitySpec = InterpretabilitySpec()
    probe_loader: DataLoader | None = None
    backgrounds: Backgrounds | None = None

    def __post_init__(self) -> None:
        self._kept: list[RepresentationBatch] | None = None  # this validation's batches
        self._kept_step: int | None = None  # the optimizer step they were computed after
        self._pending: list[RepresentationBatch] = []  # the current batch's forwards
        self._hook = None

    def _evaluates(self, trainer: Trainer) -> bool:
        epoch = trainer.current_epoch
        last = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        return last or (epoch + 1) % self.settings.frequency == 0

    def _batch_of(self, pl_module: LightningModule, out: dict[str, Any]) -> RepresentationBatch:
        """What the callback's own pass reads from the forward output ``out`` (labels set later)."""
        return representation_batch(
            pl_module,
            out,
            torch.empty(0, dtype=torch.long),
            gate=self.settings.gate,
            with_backbone=self.probe_loader is not None,
        )

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._kept = None
        if (
            not self.share_validation
            or trainer.sanity_checking
            or not trainer.is_global_zero
            or not self._evaluates(trainer)
        ):
            return
        self._kept, self._kept_step, self._pending = [], trainer.global_step, []
        if self._hook is not None:  # a validation that ended without its end hook
            self._hook.remove()

        def keep(module, args, out) -> None:
            # read at once: the validation step may change the output's dict afterwards. A
            # call that gives no features is the validation step itself (under DDP Lightning
            # calls it through the module), not a forward of images.
            if self._kept is None or not isinstance(out, dict) or "feats" not in out:
                return
            if any(torch.is_autocast_enabled(kind) for kind in ("cpu", "cuda")):
                self._kept = None  # another computation than the callback's own pass
                return
            self._pending.append(self._batch_of(module, out))

        self._hook = pl_module.register_forward_hook(keep)

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs,
        batch,
        batch_idx,
        dataloader_idx=0,
    ) -> None:
        if self._kept is None:
            return
        pending, self._pending = self._pending, []
        if len(pending) != 1:  # not the one forward of the batch's images
            self._kept = None
            return
        pending[0].labels = batch[1].long().cpu()
        self._kept.append(pending[0])

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _validation_batches(self, trainer: Trainer) -> list[RepresentationBatch] | None:
        """This epoch's kept validation batches when usable (class docstring), else None."""
        kept, self._kept = self._kept, None
        if kept is None or self._kept_step != trainer.global_step:
            return None
        if sum(b.labels.shape[0] for b in kept) != len(self.val_loader.dataset):
            return None
        # the validation loop ran in inference mode: clones are ordinary tensors
        return [
            RepresentationBatch(**{k: None if v is None else v.clone() for k, v in vars(b).items()})
            for b in kept
        ]

    def evaluate(
        self, pl_module: LightningModule, batches: list[RepresentationBatch] | None = None
    ) -> dict[str, float]:
        """The metrics of the current model on the whole validation set, from ``batches`` (a pass
        over ``val_loader``) or, when None, a pass made here."""
        accumulator = InterpretabilityAccumulator(
            self.num_classes,
            shuffle_permutations=self.settings.shuffle_permutations,
            retrieval=self.settings.retrieval,
            retrieval_max_samples=self.settings.max_samples,
        )
        gate_open_sum, count = None, 0
        reps, feats, labels = [], [], []
        keep = self.backgrounds is not None or self.probe_loader is not None
        if batches is None:
            batches = extract_representations(
                pl_module,
                self.val_loader,
                gate=self.settings.gate,
                with_backbone=self.probe_loader is not None,
            )
        for batch in batches:
            accumulator.update(batch.features, batch.labels)
            if keep:
                reps.append(batch.features)
                labels.append(batch.labels)
            if batch.backbone_features is not None:
                feats.append(batch.backbone_features)
            if batch.gate_open is not None:
                rates = batch.gate_open.float().sum(0)
                gate_open_sum = rates if gate_open_sum is None else gate_open_sum + rates
                count += batch.gate_open.shape[0]
        metrics = accumulator.compute()
        if gate_open_sum is not None:
            metrics["gate_open_ratio"] = float(
                gate_open_sum.sum() / (count * gate_open_sum.numel())
            )
            metrics["gates_never_open"] = float((gate_open_sum == 0).sum())
        if not keep:
            return metrics
        val_y = torch.cat(labels).numpy()
        if self.backgrounds is not None:
            figures = background_figures(
                torch.cat(reps),
                val_y,
                self.backgrounds.val,
                self.num_classes,
                self.backgrounds.num_backgrounds,
            )
            metrics.update({k: v for k, v in figures.items() if k != "active_dims"})
        if self.probe_loader is not None:
            train = list(extract_representations(pl_module, self.probe_loader, feature="backbone"))
            train_x = torch.cat([b.features for b in train]).numpy()
            train_y = torch.cat([b.labels for b in train]).numpy()
            val_x = torch.cat(feats).numpy()
            probe = logistic_probe(train_x, train_y, val_x, val_y)
            metrics["probe_top1"] = probe.top1
            metrics["probe_converged"] = float(probe.converged)
            if self.backgrounds is not None and self.backgrounds.train is not None:
                metrics["probe_background_top1"] = logistic_probe(
                    train_x, self.backgrounds.train, val_x, self.backgrounds.val
                ).top1
        return metrics

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._kept = None

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        batches = self._validation_batches(trainer)
        if trainer.sanity_checking or not self._evaluates(trainer):
            return
        if trainer.is_global_zero:
            metrics = self.evaluate(pl_module, batches)
            pl_module.log_dict(
                {f"interp/{k}": float(v) for k, v in metrics.items()},
                rank_zero_only=True,
                on_epoch=True,
            )


def build_interpretability_callback(
    settings: InterpretabilitySpec, data: DatasetSpec, batch_size: int, val_loader
) -> InterpretabilityCallback | None:
    """The callback ``settings`` configure, or None when off; ``ValueError`` without labels."""
    if not settings.enabled:
        return None
    if val_loader is None:
        raise ValueError(
            "interpretability.enabled=True needs labelled validation data (data.val_path)"
        )
    probe_loader = None
    if settings.probe:
        probe_loader = DataLoader(
            build_labelled_train_dataset(data, validation_transform(data)),
            batch_size=batch_size,
            shuffle=False,
            num_workers=data.num_workers,
        )
    backgrounds = None
    if data.name == SCENES:
        backgrounds = Backgrounds(
            val=background_labels(val_loader.dataset),
            train=background_labels(probe_loader.dataset) if probe_loader is not None else None,
            num_backgrounds=int(data.num_backgrounds),
        )
    return InterpretabilityCallback(
        val_loader,
        num_classes=data.classes,
        settings=settings,
        probe_loader=probe_loader,
        backgrounds=backgrounds,
    )
