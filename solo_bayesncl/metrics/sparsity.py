"""Active dimensions and sparsity (docs/method.md, "Metrics").

Both read the features ``F`` exactly as given (no row normalisation).
"""

from __future__ import annotations

import torch

from solo_bayesncl.metrics._blocks import Workspace, above, magnitudes_of, row_blocks
from solo_bayesncl.metrics._validation import (
    EPS,
    as_features,
    as_features_and_sign,
    check_eps,
)


def active_dims_mask(features: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Boolean mask (k,) of the active dimensions: ``max_i |F_ij| > eps``."""
    features, nonnegative = as_features_and_sign(features)
    eps = check_eps(eps)
    peak = torch.zeros(features.shape[1], dtype=features.dtype, device=features.device)
    workspace = Workspace()
    for _, block in row_blocks(features):
        magnitudes = block if nonnegative else magnitudes_of(block, workspace)
        torch.maximum(peak, magnitudes.amax(dim=0), out=peak)
    return peak > eps


def active_dims(features: torch.Tensor, eps: float = EPS) -> int:
    """Number of active dimensions: columns of ``F`` with ``|F_ij| > eps`` somewhere."""
    return int(active_dims_mask(features, eps).sum())


def sparsity(features: torch.Tensor, eps: float = EPS) -> float:
    """Share of the N x k entries of ``F`` with ``|F_ij| <= eps`` (0 = dense, 1 = all zero)."""
    features, nonnegative = as_features_and_sign(features)
    if features.numel() == 0:
        raise ValueError("features is empty; sparsity needs at least one entry")
    eps = check_eps(eps)
    active = torch.zeros((), dtype=torch.float64, device=features.device)
    workspace = Workspace()
    for _, block in row_blocks(features):
        magnitudes = block if nonnegative else magnitudes_of(block, workspace)
        # a block has fewer than 2**24 entries, so its count is exact in float32
        active += above(magnitudes, eps, workspace).sum()
    return 1.0 - float(active) / features.numel()


def active_dims_per_sample(features: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Number of active entries of each row, ``(N,)`` int64; mean ``k * (1 - sparsity)``."""
    features = as_features(features)
    eps = check_eps(eps)
    counts = [(block.abs() > eps).sum(dim=1) for _, block in row_blocks(features)]
    if not counts:
        return torch.zeros(0, dtype=torch.int64, device=features.device)
    return torch.cat(counts).long()
