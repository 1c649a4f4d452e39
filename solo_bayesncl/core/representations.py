"""The representation the interpretability metrics read (docs/method.md): ``bayesncl``
``v = normalize(normalize(phi(z)) * m)`` (or the soft gate ``normalize(u * alpha)``), ``ncl``
``normalize(phi(z))``, any other method with a projector the normalised projection. The linear
probe and kNN read the backbone features."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from solo_bayesncl.core.gates import GATE_MODES

__all__ = [
    "FEATURES",
    "RepresentationBatch",
    "extract_representations",
    "representation_batch",
]


def representation_from_output(
    model: nn.Module, out: dict[str, Any], gate: str = "hard"
) -> torch.Tensor:
    """The interpretable representation of a forward output ``out`` of ``model``."""
    if gate not in GATE_MODES:
        raise ValueError(f"gate={gate!r} is not supported; allowed values: {', '.join(GATE_MODES)}")
    if hasattr(model, "representation"):
        return model.representation(out, gate=gate)
    if "z" in out:
        return F.normalize(out["z"].float(), dim=-1)
    raise ValueError(
        f"{type(model).__name__} has no projector output 'z'; the interpretability metrics read "
        "the projection of SimCLR, MoCo v2+, NCL or BayesNCL"
    )


FEATURES: tuple[str, ...] = ("representation", "backbone")
"""What :func:`extract_representations` reads: the interpretable representation or the backbone."""


@dataclass
class RepresentationBatch:
    """One batch of extracted features, on CPU: ``features`` ``(n, k)`` float32, ``labels``; when
    asked ``soft_features``, ``backbone_features``, ``images``; ``gate_open`` (BayesNCL) or None."""

    features: torch.Tensor
    labels: torch.Tensor
    soft_features: torch.Tensor | None = None
    backbone_features: torch.Tensor | None = None
    gate_open: torch.Tensor | None = None
    images: torch.Tensor | None = None


@torch.no_grad()
def extract_representations(
    model: nn.Module,
    loader,
    *,
    feature: str = "representation",
    gate: str = "hard",
    with_soft: bool = False,
    with_backbone: bool = False,
    keep_images: bool = False,
    progress: bool = False,
    represent: Callable[[nn.Module, dict[str, Any]], torch.Tensor] | None = None,
    train_mode: bool = False,
) -> Iterator[RepresentationBatch]:
    """Yields the features of every ``(images, labels)`` batch of ``loader`` in eval mode (or
    training mode with ``train_mode``), the mode restored afterwards; ``represent(model, out)``
    replaces :func:`representation_from_output` for ``feature="representation"``."""
    if feature not in FEATURES:
        raise ValueError(
            f"feature={feature!r} is not supported; allowed values: {', '.join(FEATURES)}"
        )
    device = next(model.parameters()).device
    was_training = model.training
    model.train(train_mode)
    try:
        for images, labels in tqdm(
            loader, desc="extracting features", unit="batch", disable=not progress
        ):
            out = model(images.to(device, non_blocking=True))
            yield representation_batch(
                model,
                out,
                labels,
                feature=feature,
                gate=gate,
                with_soft=with_soft,
                with_backbone=with_backbone,
                images=images if keep_images else None,
                represent=represent,
            )
    finally:
        model.train(was_training)


def representation_batch(
    model: nn.Module,
    out: dict[str, Any],
    labels: torch.Tensor,
    *,
    feature: str = "representation",
    gate: str = "hard",
    with_soft: bool = False,
    with_backbone: bool = False,
    images: torch.Tensor | None = None,
    represent: Callable[[nn.Module, dict[str, Any]], torch.Tensor] | None = None,
) -> RepresentationBatch:
    """The batch :func:`extract_representations` yields for the forward output ``out``."""
    if feature == "backbone":
        features = out["feats"]
    elif represent is not None:
        features = represent(model, out)
    else:
        features = representation_from_output(model, out, gate=gate)
    batch = RepresentationBatch(
        features=features.float().cpu(),
        labels=labels.long().cpu(),
        backbone_features=out["feats"].float().cpu() if with_backbone else None,
        images=images.cpu() if images is not None else None,
    )
    if hasattr(model, "gate_output") and "gate_logits" in out:
        batch.gate_open = (model.gate_output(out["gate_logits"], "hard").mask > 0.5).cpu()
        if with_soft:
            batch.soft_features = representation_from_output(model, out, gate="soft").float().cpu()
    return batch
