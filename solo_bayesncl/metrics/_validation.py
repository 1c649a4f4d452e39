"""Input checks shared by the metric functions (clear errors naming the argument)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from solo_bayesncl.metrics._blocks import Workspace, magnitudes_of, row_blocks

#: Threshold below which an entry counts as zero (``|F_ij| <= EPS``), docs/method.md "Metrics".
EPS: float = 1e-5


def as_features(features: Any, name: str = "features") -> torch.Tensor:
    """``features`` (a tensor or array) as a 2-D floating tensor, half precision promoted to
    float32; ValueError for a wrong shape, non-float data or non-finite values."""
    return as_features_and_sign(features, name)[0]


def as_features_and_sign(features: Any, name: str = "features") -> tuple[torch.Tensor, bool]:
    """:func:`as_features` and whether every entry is ``>= 0`` (then ``|F| = F`` and the
    threshold metrics skip the ``abs`` pass); the check reads the range it computes anyway."""
    if not isinstance(features, torch.Tensor):
        features = torch.as_tensor(np.asarray(features))
    if features.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D tensor (samples x dims), got shape {tuple(features.shape)}"
        )
    if not features.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {features.dtype}")
    if features.dtype in (torch.float16, torch.bfloat16):
        features = features.float()
    if not features.numel():
        return features, True
    low, high = torch.aminmax(features)  # NaN propagates; one cheap pass
    finite, nonnegative = torch.stack(
        [torch.isfinite(low) & torch.isfinite(high), low >= 0]
    ).tolist()
    if not finite:
        raise ValueError(
            f"{name} has {non_finite_rows(features)} of {features.shape[0]} rows with NaN "
            "or Inf values"
        )
    return features, bool(nonnegative)


def non_finite_rows(features: torch.Tensor) -> int:
    """How many rows of a 2-D tensor hold at least one NaN or Inf."""
    return int((~torch.isfinite(features)).any(dim=-1).sum())


def as_labels(
    labels: Any, num_samples: int, num_classes: int, device: torch.device
) -> torch.Tensor:
    """Return ``labels`` as a 1-D int64 tensor on ``device`` with values in ``0..num_classes-1``."""
    if not isinstance(labels, torch.Tensor):
        labels = torch.as_tensor(np.asarray(labels))
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D tensor, got shape {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got dtype {labels.dtype}")
    if labels.numel() != num_samples:
        raise ValueError(
            f"labels has {labels.numel()} entries but features has {num_samples} rows; "
            "they must match"
        )
    labels = labels.to(device=device, dtype=torch.long)
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"labels must lie in 0..{num_classes - 1} (num_classes={num_classes}), "
            f"got values in {int(labels.min())}..{int(labels.max())}"
        )
    return labels


def check_num_classes(num_classes: int) -> int:
    """Validate ``num_classes`` (an int >= 1)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
        raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be an int >= 1, got {num_classes}")
    return int(num_classes)


def check_eps(eps: float) -> float:
    """Validate the activity threshold ``eps`` (a finite float >= 0)."""
    eps = float(eps)
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite float >= 0, got {eps}")
    return eps


def as_inputs(
    features: Any, labels: Any, num_classes: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor, int, float]:
    """``(features, labels, num_classes, eps)`` of a metric over labelled features, checked."""
    features = as_features(features)
    num_classes = check_num_classes(num_classes)
    labels = as_labels(labels, features.shape[0], num_classes, features.device)
    return features, labels, num_classes, check_eps(eps)


def absolute_column_sums(features: torch.Tensor) -> torch.Tensor:
    """``sum_i |F_ij|`` as float64 (sums in the feature dtype within blocks, added in float64)."""
    total = torch.zeros(features.shape[1], dtype=torch.float64, device=features.device)
    workspace = Workspace()
    for _, block in row_blocks(features):
        total += magnitudes_of(block, workspace).sum(dim=0)
    return total


def normalize_abs_rows_(magnitudes: torch.Tensor) -> torch.Tensor:
    """In place: divide each row of the non-negative ``magnitudes`` (``|F|``) by its L2 norm;
    returns the rows' largest entries. Equals ``row_normalize(F).abs()`` bit for bit."""
    tiny = torch.finfo(magnitudes.dtype).tiny
    peaks = magnitudes.amax(dim=1, keepdim=True)
    magnitudes.div_(peaks.clamp_min(tiny))
    norms = torch.linalg.vector_norm(magnitudes, dim=1, keepdim=True)
    magnitudes.div_(norms.clamp_min(tiny))
    return peaks


def row_normalize(features: torch.Tensor) -> torch.Tensor:
    """Divide each row by its L2 norm (an all-zero row stays zero), after its largest absolute
    value, so the norm cannot overflow or underflow."""
    tiny = torch.finfo(features.dtype).tiny
    scaled = features / features.abs().amax(dim=1, keepdim=True).clamp_min(tiny)
    norms = torch.linalg.vector_norm(scaled, dim=1, keepdim=True)
    return scaled.div_(norms.clamp_min(tiny))
