"""Background measures for a checkpoint trained on ``fashion-mnist-scenes``.

The paper's mechanism (arXiv 2605.28441, section 3) is that the gate closes dimensions that
encode features common to many images (backgrounds) rather than classes. On
``fashion-mnist-scenes`` every image carries a background label independent of its class, so this
can be measured:

``background_consistency`` (``_shuffled``, ``_gain``)
    semantic consistency of the representation (the same definition and label-shuffled baseline
    as the class figure, :mod:`solo_bayesncl.metrics`) against the background labels.
``background_dims_share``
    the share of active dimensions whose activating images are more background-pure than
    class-pure, purity measured above chance: ``(p_bg - 1/K) / (1 - 1/K)`` against
    ``(p_class - 1/C) / (1 - 1/C)`` (``p``: share of the majority label among the images active
    in the dimension, K backgrounds, C classes), so the two label sets compare on one scale.
``probe_class_top1``, ``probe_background_top1``
    accuracy (%) of the converged linear probe of :mod:`solo_bayesncl.evaluation.probe` on
    frozen backbone features, fitted on the training images and read on the validation images,
    for each label.

:func:`background_figures` computes the representation's measures from arrays (the training-time
callback uses it every few epochs); :func:`background_measures` computes all of them for a
checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from solo_bayesncl.config.runtime import pick_device
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.data.datasets import (
    build_labelled_train_dataset,
    build_val_dataset,
    validation_transform,
)
from solo_bayesncl.data.names import OFFLINE_DATASETS, SCENES, dataset_name
from solo_bayesncl.evaluation.probe import logistic_probe
from solo_bayesncl.io.checkpoints import load_checkpoint, load_method
from solo_bayesncl.metrics import compute_interpretability_metrics, per_dimension_stats

__all__ = ["background_figures", "background_labels", "background_measures", "background_share"]


def background_labels(dataset) -> np.ndarray:
    """The background label of every item of ``dataset`` (a scenes dataset or a ``Subset`` of
    one), in the dataset's order."""
    indices = None
    while not hasattr(dataset, "backgrounds"):
        if not hasattr(dataset, "dataset"):
            raise ValueError("the dataset has no background labels (not fashion-mnist-scenes)")
        picked = np.asarray(dataset.indices)
        indices = picked if indices is None else picked[indices]
        dataset = dataset.dataset
    labels = np.asarray(dataset.backgrounds)
    return labels if indices is None else labels[indices]


def background_share(
    class_purity: np.ndarray,
    background_purity: np.ndarray,
    active: np.ndarray,
    classes: int,
    k: int,
) -> tuple[float, int]:
    """``(share, count)`` of the active dimensions whose above-chance background purity exceeds
    their above-chance class purity (see the module docstring)."""
    active = np.asarray(active, dtype=bool)
    if not active.any():
        return float("nan"), 0
    lift_class = (np.asarray(class_purity) - 1 / classes) / (1 - 1 / classes)
    lift_background = (np.asarray(background_purity) - 1 / k) / (1 - 1 / k)
    count = int((lift_background[active] > lift_class[active]).sum())
    return count / int(active.sum()), count


def _extract(model, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """Backbone features and the hard-gate representation of every image of ``loader``."""
    batches = list(extract_representations(model, loader, with_backbone=True))
    feats = torch.cat([b.backbone_features for b in batches])
    return feats, torch.cat([b.features for b in batches])


def background_figures(
    representation: torch.Tensor,
    classes: np.ndarray,
    backgrounds: np.ndarray,
    num_classes: int,
    num_backgrounds: int,
) -> dict[str, float]:
    """``background_consistency`` (``_shuffled``, ``_gain``), ``background_dims_share``,
    ``background_dims`` and ``active_dims`` of ``representation`` (one row per validation image)
    for its class and background labels (module docstring)."""
    bg = torch.as_tensor(np.asarray(backgrounds))
    metrics = compute_interpretability_metrics(
        representation, bg, num_backgrounds, retrieval=False, track_gram=False
    )
    out = {
        key.replace("semantic_consistency", "background_consistency"): float(metrics[key])
        for key in ("semantic_consistency", "semantic_consistency_shuffled")
    }
    out["background_consistency_gain"] = (
        out["background_consistency"] - out["background_consistency_shuffled"]
    )
    class_stats = per_dimension_stats(
        representation, torch.as_tensor(np.asarray(classes)), num_classes
    )
    bg_stats = per_dimension_stats(representation, bg, num_backgrounds)
    active = (class_stats.active_count > 0).numpy()
    share, count = background_share(
        class_stats.purity.numpy(), bg_stats.purity.numpy(), active, num_classes, num_backgrounds
    )
    out.update(background_dims_share=share, background_dims=count, active_dims=int(active.sum()))
    return out


def background_measures(
    checkpoint: str | Path,
    batch_size: int = 256,
    num_workers: int = 2,
    device: str | None = None,
) -> dict[str, Any]:
    """Every background measure of the module docstring for ``checkpoint`` on the scenes data
    it was trained on (its training subset for the probes, its validation subset otherwise)."""
    loaded = load_checkpoint(checkpoint)
    cfg = loaded.cfg
    name = dataset_name(cfg)
    if name != SCENES:
        raise ValueError(
            f"{loaded.path}: trained on data.dataset={name}; background measures need {SCENES}"
        )
    device = pick_device(device)
    model = load_method(loaded, device=device)
    transform = validation_transform(cfg)
    data = {
        "train": build_labelled_train_dataset(cfg, transform),
        "val": build_val_dataset(cfg, transform),
    }
    feats, reps, classes, backgrounds = {}, {}, {}, {}
    for split, dataset in data.items():
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
        feats[split], reps[split] = _extract(model, loader)
        inner = dataset.dataset if hasattr(dataset, "indices") else dataset
        picks = np.asarray(dataset.indices) if hasattr(dataset, "indices") else slice(None)
        classes[split] = np.asarray(inner.targets)[picks]
        backgrounds[split] = background_labels(dataset)
    k = int(cfg.data.num_backgrounds)
    out = background_figures(
        reps["val"], classes["val"], backgrounds["val"], OFFLINE_DATASETS[SCENES], k
    )
    out.update(
        num_backgrounds=k,
        probe_class_top1=logistic_probe(
            feats["train"].numpy(), classes["train"], feats["val"].numpy(), classes["val"]
        ).top1,
        probe_background_top1=logistic_probe(
            feats["train"].numpy(), backgrounds["train"], feats["val"].numpy(), backgrounds["val"]
        ).top1,
    )
    return out
