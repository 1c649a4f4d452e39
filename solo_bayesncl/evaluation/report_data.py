"""What the evaluation report reads, in one call (:func:`prepare_report`): the checkpoint's model,
the validation images with their class names (:func:`load_report_inputs`), and one pass of the
model over them (:func:`extract_report_data`) with the metrics of the hard (and, for BayesNCL,
the soft) gate, the per-dimension statistics, the features, thumbnails and gate states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from solo_bayesncl.config.runtime import pick_device
from solo_bayesncl.config.saved import switched_dataset
from solo_bayesncl.config.settings import RunSpec
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.core.validation import INPUT_ERRORS, first_line
from solo_bayesncl.data.datasets import (
    LabelledImages,
    build_val_dataset,
    labelled_val_images,
    seeded_subset,
)
from solo_bayesncl.data.resolve import (
    DatasetUnavailableError,
    check_dataset_available,
)
from solo_bayesncl.evaluation.options import PASS_OPTIONS, ReportError, ReportOptions
from solo_bayesncl.io.checkpoints import (
    CheckpointError,
    LoadedCheckpoint,
    load_checkpoint,
    load_method,
)
from solo_bayesncl.metrics import (
    DimensionStats,
    InterpretabilityAccumulator,
    active_dims_per_sample,
    majority_p_values,
    non_finite_rows,
)

__all__ = ["PreparedReport", "ReportData", "ReportError", "ReportInputs", "prepare_report"]


def thumbnails(
    images: torch.Tensor, mean: Sequence[float], std: Sequence[float], size: int
) -> np.ndarray:
    """Undo the normalisation, shrink to at most ``size`` px and return (B, h, w, 3) uint8."""
    x = images.float() * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    h, w = x.shape[-2:]
    if max(h, w) > size:
        scale = size / max(h, w)
        x = F.interpolate(
            x,
            size=(max(1, round(h * scale)), max(1, round(w * scale))),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).contiguous().numpy()


@dataclass
class ReportInputs:
    """What the report is computed from (:func:`load_report_inputs`): the checkpoint, its spec on
    the report's dataset, the method in eval mode on ``device`` and the validation images."""

    loaded: LoadedCheckpoint
    spec: RunSpec
    model: torch.nn.Module
    device: torch.device
    images: LabelledImages
    max_images: int | None = None

    @property
    def class_names(self) -> list[str]:
        return self.images.class_names

    @property
    def gated(self) -> bool:
        """Whether the model has a gate (BayesNCL)."""
        return hasattr(self.model, "gate_output")

    def val_dataset(self, transform) -> Dataset:
        """The same images with another transform (the paper protocol's)."""
        return seeded_subset(build_val_dataset(self.spec.data, transform), self.max_images)


def load_report_inputs(checkpoint: str | Path, options: ReportOptions) -> ReportInputs:
    """Reads ``checkpoint``, builds its model and the validation set of ``options``; raises as
    :func:`prepare_report`."""
    where, max_images = pick_device(options.device), options.max_images
    loaded = load_checkpoint(checkpoint)
    model = load_method(loaded, device=where)
    spec = switched_dataset(loaded.spec, options.dataset)
    check_dataset_available(spec.data, train=False)
    try:
        images = labelled_val_images(spec.data, max_images)
    except ValueError as err:  # no class names, or a bad subset size
        raise ReportError(f"{loaded.path}: {err}") from None
    if images is None:
        raise ReportError(
            f"{loaded.path}: its config has no labelled validation data (data.val_path is unset "
            "or data.no_labels is set); pass a dataset name or an image folder with --dataset"
        )
    return ReportInputs(loaded, spec, model, where, images, max_images)


@dataclass
class ReportData:
    """Everything the report's files are made of, from one pass over the validation set:
    ``features`` ``(N, k)`` (the hard-gate representation), ``labels``, ``thumbnails``, the
    accumulator's metrics and per-dimension statistics, each dimension's ``p_value``; for BayesNCL
    the hard gate and the soft gate's metrics; the backbone features when asked (None: absent)."""

    features: np.ndarray
    labels: np.ndarray
    thumbnails: np.ndarray
    active_per_image: np.ndarray
    metrics: dict[str, float]
    stats: DimensionStats
    p_value: np.ndarray
    gate_open: np.ndarray | None = None
    metrics_soft_gate: dict[str, float] | None = None
    backbone_features: torch.Tensor | None = None


def extract_report_data(
    inputs: ReportInputs,
    options: ReportOptions,
    *,
    progress: bool = True,
    with_backbone: bool = False,
) -> ReportData:
    """One pass of the model over the report's images in order (``with_backbone``: the backbone
    features too). :class:`ReportError` for an empty dataset or NaN or Inf features."""
    num_classes, model, source = len(inputs.class_names), inputs.model, inputs.loaded.path
    figures = {
        "shuffle_permutations": options.shuffle_permutations,
        "retrieval_max_samples": options.retrieval_max_samples,
    }
    hard = InterpretabilityAccumulator(num_classes, **figures)
    soft = InterpretabilityAccumulator(num_classes, **figures) if inputs.gated else None
    mean, std, size = inputs.images.mean, inputs.images.std, options.thumbnail_size
    loader = DataLoader(
        inputs.images.dataset,
        batch_size=options.batch_size,
        shuffle=False,
        num_workers=options.num_workers,
        pin_memory=inputs.device.type == "cuda",
    )
    features, labels, thumbs, gate_open, active, backbone = [], [], [], [], [], []
    seen = non_finite = 0
    for batch in extract_representations(
        model,
        loader,
        with_soft=inputs.gated,
        with_backbone=with_backbone,
        keep_images=True,
        progress=progress,
    ):
        rows = (
            batch.features
            if batch.soft_features is None
            else torch.cat([batch.features, batch.soft_features], 1)
        )
        seen += rows.shape[0]
        non_finite += non_finite_rows(rows)
        if non_finite:
            continue
        hard.update(batch.features, batch.labels)
        if soft is not None:
            soft.update(batch.soft_features, batch.labels)
            gate_open.append(batch.gate_open)
        features.append(batch.features)
        labels.append(batch.labels)
        active.append(active_dims_per_sample(batch.features))
        thumbs.append(thumbnails(batch.images, mean, std, size))
        if with_backbone:
            backbone.append(batch.backbone_features)
    if not seen:
        raise ReportError("the validation dataset is empty")
    if non_finite:
        raise ReportError(
            f"{source}: the model gives NaN or Inf features for {non_finite} of "
            f"{seen} images (broken weights, e.g. a diverged run); no report written"
        )
    all_features, all_labels = torch.cat(features), torch.cat(labels)
    return ReportData(
        features=all_features.numpy(),
        labels=all_labels.numpy(),
        thumbnails=np.concatenate(thumbs),
        active_per_image=torch.cat(active).numpy(),
        metrics=hard.compute(),
        stats=hard.per_dimension_stats(),
        p_value=majority_p_values(all_features, all_labels, num_classes).numpy(),
        gate_open=torch.cat(gate_open).numpy() if soft is not None else None,
        metrics_soft_gate=soft.compute() if soft is not None else None,
        backbone_features=torch.cat(backbone) if with_backbone else None,
    )


@dataclass(frozen=True)
class PreparedReport:
    """What the report needs, from :func:`prepare_report`: the checkpoint, the pass's options, the
    model with the validation images, and the pass (which the benchmark's kNN also reads)."""

    checkpoint: str
    options: ReportOptions
    inputs: ReportInputs
    data: ReportData

    def check_made_for(self, checkpoint: str | Path, options: ReportOptions) -> None:
        """Raises :class:`ReportError` unless this pass is ``checkpoint``'s with ``options``."""
        mine = {"checkpoint": self.checkpoint, **self.options.pass_settings()}
        asked = {"checkpoint": str(Path(checkpoint)), **options.pass_settings()}
        for key in ("checkpoint", *PASS_OPTIONS):
            if mine[key] != asked[key]:
                raise ReportError(
                    f"the prepared report was made with {key}={mine[key]!r}, this report asks "
                    f"for {key}={asked[key]!r}; prepare it with the report's options"
                )


def prepare_report(
    checkpoint: str | Path,
    options: ReportOptions | None = None,
    *,
    progress: bool = True,
    with_backbone: bool = False,
) -> PreparedReport:
    """Loads ``checkpoint`` (its model, validation images and class names) and makes the one pass
    over the images (``with_backbone``: backbone features too). ``CheckpointError``,
    ``DatasetUnavailableError`` or :class:`ReportError` (one line, before the pass)."""
    options = ReportOptions() if options is None else options
    try:
        inputs = load_report_inputs(checkpoint, options)
    except (ReportError, CheckpointError, DatasetUnavailableError):
        raise  # already one line, and the callers tell them apart
    except INPUT_ERRORS as err:  # any other: one line for the command, before any work
        raise ReportError(first_line(err)) from None
    data = extract_report_data(inputs, options, progress=progress, with_backbone=with_backbone)
    return PreparedReport(str(Path(checkpoint)), options, inputs, data)
