"""The ``paper`` evaluation protocol: the official BayesNCL evaluation (arXiv 2605.28441), run on
a checkpoint of any of the four methods; and the ``ncl-paper`` protocol: the NCL repository's
evaluation (arXiv 2403.12459), the same pass with NCL's features and formulas.

Both pass over the validation set as the official code does: a copy of the model in training
mode (BatchNorm on each batch's statistics, so the values depend on the batch size), unshuffled,
solo-learn's classification transform, the gate ``1[sigmoid(a / 1.0) > 0.5]``. docs/fidelity.md
lists every difference from the ``standard`` protocol.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from solo_bayesncl.config.settings import RunSpec
from solo_bayesncl.core.gates import BernoulliGate
from solo_bayesncl.core.losses import gated_representation, keep_top_k
from solo_bayesncl.core.nonneg import non_negative
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.data.datasets import (
    build_train_dataset,
    official_transforms,
    validation_transform,
)
from solo_bayesncl.data.names import DatasetSpec
from solo_bayesncl.data.pipelines import augmentations, per_image_transform
from solo_bayesncl.metrics.ncl_paper_protocol import ncl_paper_metrics
from solo_bayesncl.metrics.paper_protocol import paper_metrics, paper_singular_value_entropy

__all__ = ["evaluate_ncl_paper_protocol", "evaluate_paper_protocol"]

OFFICIAL_GATE_TEMPERATURE = 1.0
OFFICIAL_GATE_THRESHOLD = 0.5
"""The official evaluation thresholds ``sigmoid(a / 1.0)`` at 0.5 whatever the run trained with."""
_OFFICIAL_GATE = BernoulliGate(
    "ste", gate_threshold=OFFICIAL_GATE_THRESHOLD, sigmoid_temperature=OFFICIAL_GATE_TEMPERATURE
).eval()


def paper_representation(model: nn.Module, out: dict[str, Any]) -> torch.Tensor:
    """The official evaluation's features of a forward output: ``normalize(z)`` (SimCLR, MoCo),
    ``normalize(phi(z))`` (NCL) or ``normalize(normalize(phi(z)) * 1[sigmoid(a) > 0.5])``."""
    z = out["z"].float()
    if "gate_logits" in out:
        mask = _official_mask(out)
        return gated_representation(z, mask, model.non_neg, getattr(model, "top_k", None))
    if hasattr(model, "representation"):  # NCL: deterministic, no gate
        return model.representation(out)
    return F.normalize(z, dim=-1)


def _official_mask(out: dict[str, Any]) -> torch.Tensor:
    """``1[sigmoid(a / 1.0) > 0.5]``, the official evaluation's gate."""
    return _OFFICIAL_GATE(out["gate_logits"].float()).mask


def ncl_paper_representation(model: nn.Module, out: dict[str, Any]) -> torch.Tensor:
    """The NCL evaluation's features, not normalised: ``z`` (SimCLR, MoCo), ``phi(z)`` (NCL) and,
    for BayesNCL, which the NCL code does not know, ``phi(z) * 1[sigmoid(a) > 0.5]``."""
    z = out["z"].float()
    non_neg = getattr(model, "non_neg", None)
    if non_neg is None:
        return z
    u = non_negative(z, non_neg)
    top_k = getattr(model, "top_k", None)
    if top_k is not None:
        u = keep_top_k(u, top_k)
    return u * _official_mask(out) if "gate_logits" in out else u


def paper_val_transform(data: DatasetSpec):
    """solo-learn's classification validation transform of the dataset, as the official
    evaluation uses; the plugin's own for datasets solo-learn does not know (offline ones)."""
    official = official_transforms(data)
    return validation_transform(data) if official is None else official[1]


def _official_pass(
    model: nn.Module,
    spec: RunSpec,
    val_dataset_factory,
    represent,
    batch_size: int,
    num_workers: int,
    device,
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """``(model copy, features, labels)``: the ``represent`` features of every validation image
    through the official pass, on a training-mode copy of ``model``."""
    val = val_dataset_factory(paper_val_transform(spec.data))
    loader = DataLoader(val, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    official = copy.deepcopy(model).to(device).train()
    batches = list(extract_representations(official, loader, represent=represent, train_mode=True))
    features = torch.cat([b.features for b in batches])
    return official, features, torch.cat([b.labels for b in batches])


@torch.no_grad()
def _training_batch_entropy(
    model: nn.Module, spec: RunSpec, batch_size: int, device, seed: int
) -> float | None:
    """Singular-value entropy of one training batch's features (two views), or None without data."""
    if not augmentations(spec.solo):
        return None
    transform = per_image_transform(spec.data, spec.solo)  # solo-learn's views
    try:
        train = build_train_dataset(spec.data, transform)
    except (OSError, RuntimeError, ValueError, AssertionError):
        return None
    if len(train) == 0:
        return None
    picks = np.random.default_rng(seed).permutation(len(train))[: min(batch_size, len(train))]
    with torch.random.fork_rng():  # seeded views, the caller's random state untouched
        torch.manual_seed(seed)
        views = [train[int(i)][1] for i in picks]
    features = []
    for c in range(len(views[0])):  # one forward per view, as solo-learn's training step
        out = model(torch.stack([v[c] for v in views]).to(device))
        features.append(paper_representation(model, out).float())
    return paper_singular_value_entropy(torch.cat(features))


def evaluate_paper_protocol(
    model: nn.Module,
    spec: RunSpec,
    val_dataset_factory,
    *,
    batch_size: int,
    num_workers: int,
    device,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs the official evaluation on ``model`` (left unchanged): ``{"metrics": {...},
    "settings": {...}}``, the figures under ``paper_`` names and how they were obtained.
    ``val_dataset_factory``: ``transform -> dataset``; ``batch_size``: the evaluation batch
    (BatchNorm statistics are per batch); ``seed``: the singular-value entropy's training batch."""
    official, features, labels = _official_pass(
        model, spec, val_dataset_factory, paper_representation, batch_size, num_workers, device
    )
    metrics = paper_metrics(features, labels)
    entropy = _training_batch_entropy(official, spec, batch_size, device, seed)
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


def evaluate_ncl_paper_protocol(
    model: nn.Module,
    spec: RunSpec,
    val_dataset_factory,
    *,
    batch_size: int,
    num_workers: int,
    device,
) -> dict[str, Any]:
    """Runs the NCL repository's evaluation on ``model``: the pass of
    :func:`evaluate_paper_protocol` on :func:`ncl_paper_representation` (``ncl_paper_`` names)."""
    _, features, labels = _official_pass(
        model, spec, val_dataset_factory, ncl_paper_representation, batch_size, num_workers, device
    )
    settings = {
        "batchnorm": "batch statistics (training mode), unshuffled loader in dataset order",
        "batch_size": batch_size,
        "features": "z, phi(z) for non-negative runs, times 1[sigmoid(a) > 0.5] for BayesNCL; "
        "not normalised",
    }
    return {"metrics": ncl_paper_metrics(features, labels), "settings": settings}
