"""Background measures for a checkpoint trained on ``fashion-mnist-scenes``, whose background label
is independent of the class: the paper's gate should close dimensions that encode backgrounds
(arXiv 2605.28441, section 3).

``background_consistency`` (``_shuffled``, ``_gain``)
    semantic consistency (:mod:`solo_bayesncl.metrics`) against the background labels.
``background_dims_share``
    the share of active dimensions more background-pure than class-pure, purity above chance:
    ``(p_bg - 1/K) / (1 - 1/K)`` against ``(p_class - 1/C) / (1 - 1/C)`` (``p``: share of the
    majority label among the images active in the dimension, K backgrounds, C classes).
``ungated_background_dims_share``, ``open_rate_*``, ``gate_probability_*``
    gated methods: the gate on the background-dominated dimensions of ``u``
    (:func:`solo_bayesncl.metrics.background.gate_background_selectivity`).
``probe_class_top1``, ``probe_background_top1``
    the converged linear probe (:mod:`solo_bayesncl.metrics.probe`) for each label, in %."""

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
from solo_bayesncl.data.names import OFFLINE_DATASETS, SCENES
from solo_bayesncl.data.scenes import background_labels
from solo_bayesncl.io.checkpoints import load_checkpoint, load_method
from solo_bayesncl.metrics.background import background_figures, gate_background_selectivity
from solo_bayesncl.metrics.probe import logistic_probe

__all__ = ["background_measures", "gate_selectivity", "scenes_checkpoint"]


def _ungated_and_gate(model, loader) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``u = normalize(phi(z))``, the hard gate and ``alpha`` of every image, in eval mode."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    ungated, masks, probs = [], [], []
    try:
        with torch.no_grad():
            for images, _ in loader:
                out = model(images.to(device, non_blocking=True))
                ungated.append(model.objective.representation(out["z"]).cpu())
                gate = model.gate_output(out["gate_logits"], "hard")
                masks.append(gate.mask.cpu())
                probs.append(gate.probs.cpu())
    finally:
        model.train(was_training)
    return torch.cat(ungated), torch.cat(masks), torch.cat(probs)


def scenes_checkpoint(checkpoint: str | Path, device: str | None):
    """The checkpoint's spec and method on ``device``; a clear error for other data."""
    loaded = load_checkpoint(checkpoint)
    name = loaded.spec.data.name
    if name != SCENES:
        raise ValueError(
            f"{loaded.path}: trained on data.dataset={name}; background measures need {SCENES}"
        )
    return loaded.spec, load_method(loaded, device=pick_device(device))


def gate_selectivity(
    model, num_backgrounds: int, val_data, batch_size: int, num_workers: int
) -> dict[str, float]:
    """The gate's measures (module docstring) of a gated ``model`` on ``val_data``."""
    loader = DataLoader(val_data, batch_size=batch_size, num_workers=num_workers)
    ungated, mask, probs = _ungated_and_gate(model, loader)
    return gate_background_selectivity(
        ungated,
        mask,
        _class_labels(val_data),
        background_labels(val_data),
        OFFLINE_DATASETS[SCENES],
        num_backgrounds,
        probs=probs,
    )


def _class_labels(dataset) -> np.ndarray:
    """The class label of every item of ``dataset`` (a scenes dataset or a ``Subset`` of one)."""
    if hasattr(dataset, "indices"):
        return np.asarray(dataset.dataset.targets)[np.asarray(dataset.indices)]
    return np.asarray(dataset.targets)


def background_measures(
    checkpoint: str | Path,
    batch_size: int = 256,
    num_workers: int = 2,
    device: str | None = None,
) -> dict[str, Any]:
    """Every background measure of the module docstring for ``checkpoint`` on the scenes data
    it was trained on (its training subset for the probes, its validation subset otherwise)."""
    spec, model = scenes_checkpoint(checkpoint, device)
    transform = validation_transform(spec.data)
    data = {
        "train": build_labelled_train_dataset(spec.data, transform),
        "val": build_val_dataset(spec.data, transform),
    }
    feats, reps, classes, backgrounds = {}, {}, {}, {}
    for split, dataset in data.items():
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
        batches = list(extract_representations(model, loader, with_backbone=True))
        feats[split] = torch.cat([b.backbone_features for b in batches])
        reps[split] = torch.cat([b.features for b in batches])
        classes[split] = _class_labels(dataset)
        backgrounds[split] = background_labels(dataset)
    k = int(spec.data.num_backgrounds)
    out = background_figures(
        reps["val"], classes["val"], backgrounds["val"], OFFLINE_DATASETS[SCENES], k
    )
    if hasattr(model, "gate_output"):
        out.update(gate_selectivity(model, k, data["val"], batch_size, num_workers))
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
