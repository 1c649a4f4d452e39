"""The top images of a dimension and the purity of its top images, for the evaluation report and
the dashboard: the images it fires on (rows L2-normalised, ``|Fn_ij| > eps``) with the largest
``|F_ij|``, ties by lower index; the purity of the top ``n`` (:data:`TOP_IMAGES` by default) is
the share among them of the dimension's majority class over *all* the images it fires on::

    top = top_images(features, TOP_IMAGES)                    # (k, 8) indices, -1 padded
    purity = top_image_purity(top.index, labels, stats.majority_class)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from solo_bayesncl.metrics._validation import EPS, as_features, check_eps
from solo_bayesncl.metrics.semantics import activity_masks

__all__ = ["TOP_IMAGES", "TopImages", "top_image_purity", "top_images"]

TOP_IMAGES: int = 8
"""Top images per dimension the purity of the top images is taken over, by default (report and
dashboard alike)."""


@dataclass(frozen=True)
class TopImages:
    """The top images of some dimensions: ``dims`` ``(d,)``; ``index`` ``(d, count)`` image indices,
    largest ``|F_ij|`` first, -1 padded; ``value`` the signed ``F_ij`` of each, 0 where padded."""

    dims: torch.Tensor
    index: torch.Tensor
    value: torch.Tensor


def top_images(
    features: Any,
    count: int = TOP_IMAGES,
    *,
    dims: Any = None,
    eps: float = EPS,
    block: int = 256,
) -> TopImages:
    """The ``count`` top images of each dimension of ``dims`` (default: every column) of the
    ``(N, k)`` ``features``. Memory: an ``(N, k)`` bool activity mask and ``(N, block)`` floats."""
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise ValueError(f"count must be an int >= 1 (images per dimension), got {count!r}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    features = as_features(features)
    eps = check_eps(eps)
    n, k = features.shape
    chosen = torch.arange(k) if dims is None else torch.from_numpy(np.array(dims, dtype=np.int64))
    if chosen.ndim != 1 or (chosen.numel() and (chosen.min() < 0 or chosen.max() >= k)):
        raise ValueError(f"dims must be a 1-D list of dimensions in 0..{k - 1}, got {dims!r}")
    mask = torch.zeros((n, k), dtype=torch.bool, device=features.device)
    start = 0
    for rows in activity_masks(features, eps):
        mask[start : start + rows.shape[0]] = rows
        start += rows.shape[0]
    kept = min(int(count), n)
    index = torch.full((chosen.numel(), int(count)), -1, dtype=torch.int64)
    value = torch.zeros((chosen.numel(), int(count)), dtype=torch.float32)
    for start in range(0, chosen.numel(), block):
        cols = chosen[start : start + block].to(features.device)
        part = features[:, cols]
        fires = mask[:, cols]
        score = torch.where(fires, part.abs(), torch.full_like(part, -1.0))
        rows = torch.sort(score, dim=0, descending=True, stable=True).indices[:kept]
        shown = torch.gather(fires, 0, rows)
        index[start : start + cols.numel(), :kept] = torch.where(shown, rows, -1).T.cpu()
        picked = torch.gather(part, 0, rows).float()
        value[start : start + cols.numel(), :kept] = torch.where(shown, picked, 0.0).T.cpu()
    return TopImages(dims=chosen.cpu(), index=index, value=value)


def top_image_purity(index: Any, labels: Any, majority: Any) -> torch.Tensor:
    """``(d,)`` float64: for each row of ``index`` (as in :class:`TopImages`), the share of its
    images whose label is that row's ``majority`` class; 0 for a row with no image."""
    index = torch.from_numpy(np.array(index, dtype=np.int64))
    labels = torch.from_numpy(np.array(labels, dtype=np.int64))
    majority = torch.from_numpy(np.array(majority, dtype=np.int64)).reshape(-1)
    if index.ndim != 2 or majority.numel() != index.shape[0]:
        raise ValueError(
            f"index must be (d, count) and majority (d,); got {tuple(index.shape)} and "
            f"{tuple(majority.shape)}"
        )
    shown = index >= 0
    hits = (labels[index.clamp_min(0)] == majority[:, None]) & shown
    return hits.sum(dim=1).double() / shown.sum(dim=1).clamp_min(1).double()
