"""Label-shuffled baseline for semantic consistency (docs/method.md, "Metrics").

A dimension with few active samples has a high majority share by luck, so consistency has a
chance floor that rises with sparsity: the baseline recomputes it with the labels permuted, and
methods compare on the gain. :func:`evidence_order` ranks dimensions for display by a lower
confidence bound of their purity. Permutation ``p`` is the ``p``-th ``torch.randperm(N,
generator=torch.Generator().manual_seed(seed))``, applied in sample order, so it is reproducible
and independent of batching."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from solo_bayesncl.metrics._validation import EPS, as_inputs
from solo_bayesncl.metrics.semantics import activity_masks, class_statistics_chunked

#: Rows of float32 counts summed before they are added to the float64 totals: below 2**24 every
#: count is an integer that float32 holds exactly.
EXACT_FLOAT32_ROWS: int = 2**24 - 1


def _shuffled_class_counts(
    mask_chunks: Iterable[torch.Tensor],
    labels: torch.Tensor,
    num_classes: int,
    permutations: int,
    seed: int,
) -> torch.Tensor:
    """``(P, C, k)`` float64: active samples of each class per dimension under each permutation,
    scattered into float32 counts (``index_add_``) and moved to float64 while still exact."""
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    generator = torch.Generator().manual_seed(int(seed))
    order = [torch.randperm(labels.numel(), generator=generator) for _ in range(permutations)]
    permuted = labels.cpu()[torch.stack(order)]  # row p: the labels under permutation p
    counts: torch.Tensor | None = None
    exact: torch.Tensor | None = None
    start = pending = 0
    for mask in mask_chunks:
        rows = mask.shape[0]
        if counts is None or exact is None:
            shape = (permutations, num_classes, mask.shape[1])
            counts = torch.zeros(shape, dtype=torch.float64, device=mask.device)
            exact = torch.zeros(shape, dtype=torch.float32, device=mask.device)
            permuted = permuted.to(mask.device)
        if pending + rows > EXACT_FLOAT32_ROWS:
            counts += exact
            exact.zero_()
            pending = 0
        weights = mask.to(torch.float32)
        chunk_labels = permuted[:, start : start + rows]
        for p in range(permutations):
            exact[p].index_add_(0, chunk_labels[p], weights)
        start += rows
        pending += rows
    if start != labels.numel():
        raise ValueError(f"masks cover {start} samples but there are {labels.numel()} labels")
    if counts is None or exact is None:
        raise ValueError("no samples: the shuffled baseline needs at least one sample")
    return counts.add_(exact)


def consistencies_from_counts(class_active: torch.Tensor) -> torch.Tensor:
    """:func:`~solo_bayesncl.metrics.semantics.consistency_from_counts` of each ``(C, k)`` slice
    of a ``(P, C, k)`` tensor at once: a float64 ``(P,)`` tensor on its device."""
    counts = class_active.double()
    totals = counts.sum(dim=1)
    used = totals > 0
    purity = torch.where(used, counts.amax(dim=1) / totals.clamp_min(1), torch.zeros_like(totals))
    dims = used.sum(dim=1)
    return torch.where(
        dims > 0, purity.sum(dim=1) / dims.clamp_min(1), torch.zeros_like(totals[:, 0])
    )


def shuffled_consistencies_from_masks(
    mask_chunks: Iterable[torch.Tensor],
    labels: torch.Tensor,
    num_classes: int,
    permutations: int = 5,
    seed: int = 0,
) -> torch.Tensor:
    """Float64 ``(permutations,)`` semantic consistencies under the label permutations;
    ``mask_chunks`` yields the activity ``|Fn_ij| > eps`` of consecutive samples."""
    counts = _shuffled_class_counts(mask_chunks, labels, num_classes, permutations, seed)
    return consistencies_from_counts(counts)


MAJORITY_PERMUTATIONS = 19
"""Label permutations behind :func:`majority_p_values`: the smallest p-value is 1/20 = 0.05."""

SIGNIFICANCE = 0.05
"""A dimension's majority class is significant when its p-value is at most this."""


def majority_p_values(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    permutations: int = MAJORITY_PERMUTATIONS,
    seed: int = 0,
) -> torch.Tensor:
    """Per-dimension permutation p-value of its purity against the label-shuffled baseline (a
    dimension active on few samples looks pure by luck): ``(1 + #{p : purity_p >= purity}) / (1 +
    permutations)``, a ``(k,)`` float64 tensor; 1 for a dimension with no active sample."""
    features, labels, num_classes, eps = as_inputs(features, labels, num_classes, eps)
    stats, masks = class_statistics_chunked(
        features, labels, num_classes, eps, with_sums=False, keep_masks=True
    )
    counts = stats.class_active.T.cpu().double()  # (k, C)
    active = counts.sum(dim=1)
    purity = counts.max(dim=1).values / active.clamp_min(1)
    shuffled = _shuffled_class_counts(masks, labels, num_classes, permutations, seed).cpu()
    shuffled_purity = shuffled.max(dim=1).values / active.clamp_min(1)  # (P, k)
    p = (1 + (shuffled_purity >= purity - 1e-12).sum(dim=0)).double() / (1 + permutations)
    return torch.where(active > 0, p, torch.ones_like(p))


MIN_SUPPORT = 0.01
"""Share of the images a dimension must fire on to lead the default order (1%)."""
WILSON_Z = 1.96
"""Normal quantile of the Wilson bound: a 95% two-sided interval, hence a 97.5% lower bound."""


def wilson_lower_bound(share: np.ndarray, trials: np.ndarray, z: float = WILSON_Z) -> np.ndarray:
    """Lower end of the Wilson score interval (Wilson 1927) of a proportion ``share`` observed
    over ``trials`` draws, ``(p + z^2 / 2n - z * sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 /
    n)``: 5 of 5 gives 0.57, 50 of 100 gives 0.40; 0 where ``trials`` is 0."""
    p = np.asarray(share, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    safe = np.maximum(n, 1.0)
    z2 = z * z
    centre = p + z2 / (2 * safe)
    spread = z * np.sqrt(np.clip(p * (1 - p), 0, None) / safe + z2 / (4 * safe * safe))
    return np.where(n > 0, np.clip((centre - spread) / (1 + z2 / safe), 0.0, 1.0), 0.0)


def evidence_order(
    active_count: np.ndarray,
    purity: np.ndarray,
    n_images: int,
    *,
    min_support: float = MIN_SUPPORT,
) -> np.ndarray:
    """The dimensions that fire on an image, best-evidenced first: by :func:`wilson_lower_bound` of
    their purity (then more images, then lower index), those under ``min_support`` last; int64."""
    count = np.asarray(active_count, dtype=np.int64)
    active = np.flatnonzero(count > 0)
    evidence = wilson_lower_bound(np.asarray(purity)[active], count[active])
    supported = count[active] >= min_support * n_images
    # np.lexsort sorts by the last key first
    return active[np.lexsort((active, -count[active], -evidence, ~supported))].astype(np.int64)


def shuffled_semantic_consistency(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    permutations: int = 5,
    seed: int = 0,
) -> float:
    """Label-shuffled semantic consistency: the mean of :func:`semantic_consistency` over
    ``permutations`` seeded permutations of the labels (module docstring)."""
    features, labels, num_classes, eps = as_inputs(features, labels, num_classes, eps)
    masks = activity_masks(features, eps)
    values = shuffled_consistencies_from_masks(masks, labels, num_classes, permutations, seed)
    return float(values.mean())
