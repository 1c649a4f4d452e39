"""Active dimensions and sparsity (docs/method.md, "Metrics").

Both read the features ``F`` exactly as given (no row normalisation).
"""

from __future__ import annotations

import torch

from solo_bayesncl.metrics._validation import EPS, ROW_CHUNK, as_features, check_eps, nonzero_mask


def active_dims_mask(features: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Boolean mask (k,) of the active dimensions.

    Definition: dimension ``j`` is active when its column has ``|F_ij| > eps`` for at least one
    sample ``i``.
    """
    features = as_features(features)
    eps = check_eps(eps)
    mask = torch.zeros(features.shape[1], dtype=torch.bool, device=features.device)
    for start in range(0, features.shape[0], ROW_CHUNK):
        mask |= nonzero_mask(features[start : start + ROW_CHUNK], eps).any(dim=0)
    return mask


def active_dims(features: torch.Tensor, eps: float = EPS) -> int:
    """Number of active dimensions: columns of ``F`` with ``|F_ij| > eps`` somewhere."""
    return int(active_dims_mask(features, eps).sum())


def sparsity(features: torch.Tensor, eps: float = EPS) -> float:
    """Share of the N x k entries of ``F`` with ``|F_ij| <= eps`` (0 = dense, 1 = all zero)."""
    features = as_features(features)
    if features.numel() == 0:
        raise ValueError("features is empty; sparsity needs at least one entry")
    eps = check_eps(eps)
    active = 0
    for start in range(0, features.shape[0], ROW_CHUNK):
        active += int(torch.count_nonzero(nonzero_mask(features[start : start + ROW_CHUNK], eps)))
    return 1.0 - active / features.numel()


def active_dims_per_sample(features: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Number of active entries (``|F_ij| > eps``) of each row, an ``(N,)`` int64 tensor; its
    mean over rows is ``k * (1 - sparsity)``."""
    features = as_features(features)
    eps = check_eps(eps)
    counts = [
        nonzero_mask(features[start : start + ROW_CHUNK], eps).sum(dim=1)
        for start in range(0, features.shape[0], ROW_CHUNK)
    ]
    if not counts:
        return torch.zeros(0, dtype=torch.int64, device=features.device)
    return torch.cat(counts).long()
