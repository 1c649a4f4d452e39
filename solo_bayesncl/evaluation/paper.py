"""The ``paper`` evaluation protocol: the official BayesNCL evaluation (arXiv 2605.28441), run on
a checkpoint of any of the four methods, for numbers that read beside the paper's table.

What it does as the official evaluation does, and the ``standard`` protocol does not:

- the model stays in training mode (the official code never calls ``eval()``): BatchNorm
  normalises each batch with its own statistics, over the validation set in dataset order,
  unshuffled (class-sorted for image folders), so the values depend on the batch size;
- the validation images get solo-learn's classification transform of the dataset (CIFAR: its own
  mean/std, not the pretraining views'; ImageNet: 256 px resize, 224 px centre crop);
- the gate is ``1[sigmoid(a / 1.0) > 0.5]``, with the official temperature and threshold;
- the metrics are those of :mod:`solo_bayesncl.metrics.paper_protocol`; the singular-value
  entropy is taken on one training batch of two augmented views (the official code logs it on
  the first training batch of an epoch).

The caller's model is not touched: the pass runs on a copy (training-mode BatchNorm updates its
running statistics).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import DataLoader

from solo_bayesncl.core.gates import BernoulliGate
from solo_bayesncl.core.losses import gated_representation
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.data.datasets import build_train_dataset, validation_transform
from solo_bayesncl.data.names import SOLO_LOADER_DATASETS, dataset_name
from solo_bayesncl.metrics.paper_protocol import paper_metrics, paper_singular_value_entropy

__all__ = [
    "OFFICIAL_GATE_TEMPERATURE",
    "OFFICIAL_GATE_THRESHOLD",
    "evaluate_paper_protocol",
    "paper_representation",
    "paper_val_transform",
]

OFFICIAL_GATE_TEMPERATURE = 1.0
OFFICIAL_GATE_THRESHOLD = 0.5
"""The official evaluation thresholds ``sigmoid(a / 1.0)`` at 0.5 whatever the run trained with."""
_OFFICIAL_GATE = BernoulliGate(
    threshold=OFFICIAL_GATE_THRESHOLD, temperature=OFFICIAL_GATE_TEMPERATURE
).eval()


def paper_representation(model: nn.Module, out: dict[str, Any]) -> torch.Tensor:
    """The official evaluation's features of a forward output: ``normalize(z)`` (SimCLR, MoCo),
    ``normalize(phi(z))`` (NCL) or ``normalize(normalize(phi(z)) * 1[sigmoid(a) > 0.5])``."""
    z = out["z"].float()
    if "gate_logits" in out:
        mask = _OFFICIAL_GATE(out["gate_logits"]).mask
        return gated_representation(z, mask, model.non_neg, getattr(model, "top_k", None))
    if hasattr(model, "representation"):  # NCL: deterministic, no gate
        return model.representation(out)
    return F.normalize(z, dim=-1)


def paper_val_transform(cfg):
    """solo-learn's classification validation transform of the dataset, as the official
    evaluation uses; the plugin's own for datasets solo-learn does not know (offline ones)."""
    name = dataset_name(cfg)
    if name in SOLO_LOADER_DATASETS:
        from solo.data.classification_dataloader import prepare_transforms

        return prepare_transforms(name)[1]
    return validation_transform(cfg)


def _extract(model: nn.Module, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """The official features of every image, BatchNorm on each batch's statistics."""
    batches = list(
        extract_representations(model, loader, represent=paper_representation, train_mode=True)
    )
    return torch.cat([b.features for b in batches]), torch.cat([b.labels for b in batches])


@torch.no_grad()
def _training_batch_entropy(
    model: nn.Module, cfg, batch_size: int, device, seed: int
) -> float | None:
    """Singular-value entropy of the features of one training batch (two augmented views per
    image, the pretraining augmentations), or None when the config has no training data here."""
    pipelines = OmegaConf.select(cfg, "augmentations", default=None)
    if not pipelines:
        return None
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        build_transform_pipeline,
    )

    transform = FullTransformPipeline(
        [
            NCropAugmentation(build_transform_pipeline(cfg.data.dataset, aug), aug.num_crops)
            for aug in pipelines
        ]
    )
    try:
        train = build_train_dataset(cfg, transform)
    except (OSError, RuntimeError, ValueError, AssertionError):
        return None
    if len(train) == 0:
        return None
    picks = np.random.default_rng(seed).permutation(len(train))[: min(batch_size, len(train))]
    with torch.random.fork_rng():  # seeded views, the caller's random state untouched
        torch.manual_seed(seed)
        views = [train[int(i)][1] for i in picks]
    x = torch.cat([torch.stack([v[c] for v in views]) for c in range(len(views[0]))])
    out = model(x.to(device))
    return paper_singular_value_entropy(paper_representation(model, out).float())


def evaluate_paper_protocol(
    model: nn.Module,
    cfg,
    val_dataset_factory,
    *,
    batch_size: int,
    num_workers: int,
    device,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs the official evaluation on ``model`` (left unchanged) and returns its figures.

    Args:
        model: a built method (any of the four).
        cfg: the checkpoint's config with its data resolved.
        val_dataset_factory: ``transform -> dataset``, the validation set (the report's images)
            with that transform.
        batch_size: the evaluation batch (BatchNorm statistics are per batch).
        seed: the seed of the training batch of the singular-value entropy.

    Returns:
        ``{"metrics": {...}, "settings": {...}}``: the figures under ``paper_`` names (see
        :func:`solo_bayesncl.metrics.paper_protocol.paper_metrics`) and how they were obtained.
    """
    val = val_dataset_factory(paper_val_transform(cfg))
    loader = DataLoader(val, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    official = copy.deepcopy(model).to(device).train()
    features, labels = _extract(official, loader)
    metrics = paper_metrics(features, labels)
    entropy = _training_batch_entropy(official, cfg, batch_size, device, seed)
    metrics["paper_singular_value_entropy"] = entropy if entropy is not None else float("nan")
    settings = {
        "batchnorm": "batch statistics (training mode), unshuffled loader in dataset order",
        "batch_size": batch_size,
        "gate": "1[sigmoid(a / 1.0) > 0.5]" if hasattr(model, "gate_output") else None,
        "singular_value_entropy": (
            f"one training batch of {batch_size} images x 2 views"
            if entropy is not None
            else "not computed: no training data for this config here"
        ),
    }
    return {"metrics": metrics, "settings": settings}
