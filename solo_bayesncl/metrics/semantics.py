"""Semantic consistency and semantic entropy of feature dimensions (docs/method.md, "Metrics"; NCL,
arXiv 2403.12459, and BayesNCL, arXiv 2605.28441).

Both read the row-normalised ``Fn = F / ||F_i||`` (a zero row stays zero); sample ``i`` is active
in dimension ``j`` when ``|Fn_ij| > eps``, and a dimension with an active sample enters the
average. Every statistic is a function of three running sums, so it streams over batches:

- ``class_active[c, j]``: number of samples of class ``c`` active in dimension ``j``;
- ``class_abs_sum[c, j]``: sum of ``|Fn_ij|`` over all samples of class ``c``;
- ``class_count[c]``: number of samples of class ``c``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch

from solo_bayesncl.metrics._blocks import Workspace, above, magnitudes_of, row_blocks
from solo_bayesncl.metrics._validation import EPS, as_inputs, normalize_abs_rows_


class ClassStatistics(NamedTuple):
    """Per-class sums over a set of samples (float64, shapes C x k, C x k, C)."""

    class_active: torch.Tensor
    class_abs_sum: torch.Tensor
    class_count: torch.Tensor


class BlockSums(NamedTuple):
    """What one pass over a block of rows yields (see :func:`batch_class_sums`)."""

    stats: ClassStatistics
    active: torch.Tensor
    raw_active: torch.Tensor
    raw_abs_sum: torch.Tensor
    peak: torch.Tensor


def activity_masks(features: torch.Tensor, eps: float = EPS) -> Iterator[torch.Tensor]:
    """The activity ``|Fn| > eps`` of consecutive blocks of rows as zeros and ones of the feature
    dtype, computed as they are read; each block is overwritten by the next (copy it to keep it)."""
    workspace = Workspace()
    for _, block in row_blocks(features):
        magnitudes = magnitudes_of(block, workspace)
        normalize_abs_rows_(magnitudes)
        yield above(magnitudes, eps, workspace)


def batch_class_sums(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float,
    with_sums: bool,
    with_raw_counts: bool = False,
    with_raw_sums: bool = False,
    workspace: Workspace | None = None,
) -> BlockSums:
    """Class statistics of one block of rows in the feature dtype (at least float32; counts exact
    below ``2**24`` rows), its activity ``|Fn| > eps`` as 0/1, ``peak`` (``max |F_ij|``) and, when
    asked, ``raw_active`` and ``raw_abs_sum`` of the features as given (else empty); class sums are
    ``index_add_`` scatter-adds. A ``workspace`` holds the temporaries, reused by the next block."""
    magnitudes = magnitudes_of(features, workspace)
    dtype, device = magnitudes.dtype, features.device
    empty = torch.zeros(0, dtype=dtype, device=device)
    raw_active = raw_abs_sum = class_abs_sum = empty
    if with_raw_counts:
        raw_active = above(magnitudes, eps, workspace).sum(dim=0)
    if with_raw_sums:
        raw_abs_sum = magnitudes.sum(dim=0)
    peaks = normalize_abs_rows_(magnitudes)
    peak = peaks.amax() if peaks.numel() else torch.zeros((), dtype=dtype, device=device)
    active = above(magnitudes, eps, workspace)
    num_dims = features.shape[1]
    class_active = torch.zeros(num_classes, num_dims, dtype=dtype, device=device)
    class_active.index_add_(0, labels, active)
    if with_sums:
        class_abs_sum = torch.zeros(num_classes, num_dims, dtype=dtype, device=device)
        class_abs_sum.index_add_(0, labels, magnitudes)
    class_count = torch.bincount(labels, minlength=num_classes)
    stats = ClassStatistics(class_active, class_abs_sum, class_count)
    return BlockSums(stats, active, raw_active, raw_abs_sum, peak)


def class_statistics_chunked(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    with_sums: bool = True,
    keep_masks: bool = False,
    raw_abs_sum: torch.Tensor | None = None,
) -> tuple[ClassStatistics, list[torch.Tensor]]:
    """:func:`batch_class_sums` over a whole matrix in blocks of rows, summed in float64 (with
    ``keep_masks`` each block's activity; ``raw_abs_sum`` receives ``sum_i |F_ij|``)."""
    if features.shape[0] == 0:
        raise ValueError("features has no rows; the metrics need at least one sample")
    shape = (num_classes, features.shape[1])
    total = ClassStatistics(
        *(
            torch.zeros(size, dtype=torch.float64, device=features.device)
            for size in (shape, shape if with_sums else 0, num_classes)
        )
    )
    masks = []
    with_raw_sums = raw_abs_sum is not None
    workspace = None if keep_masks else Workspace()
    for start, block in row_blocks(features):
        rows = labels[start : start + block.shape[0]]
        sums = batch_class_sums(
            block, rows, num_classes, eps, with_sums, False, with_raw_sums, workspace
        )
        for running, batch in zip(total, sums.stats, strict=True):
            running += batch
        if raw_abs_sum is not None:
            raw_abs_sum += sums.raw_abs_sum
        if keep_masks:
            masks.append(sums.active)
    return total, masks


def consistency_from_counts(class_active: torch.Tensor) -> float:
    """:func:`semantic_consistency` from the C x k activity counts: the mean over dimensions with
    an active sample of ``max_c class_active[c, j] / sum_c class_active[c, j]``; 0.0 if none."""
    totals = class_active.sum(dim=0)
    used = totals > 0
    if not bool(used.any()):
        return 0.0
    purity = class_active.max(dim=0).values[used] / totals[used]
    return float(purity.mean())


def entropy_from_class_weights(weights: torch.Tensor, dims: torch.Tensor) -> float:
    """Mean over the dimensions ``dims`` of the entropy (nats, ``0 log 0 = 0``) of the non-negative
    C x k ``weights[:, j]`` normalised (0 for a zero column); 0.0 when ``dims`` selects nothing."""
    if not bool(dims.any()):
        return 0.0
    w = weights[:, dims]
    p = w / w.sum(dim=0, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    entropy = -torch.xlogy(p, p).sum(dim=0)
    return float(entropy.mean())


def entropies_from_statistics(stats: ClassStatistics) -> dict[str, float]:
    """The three entropies of :func:`semantic_entropy` from :class:`ClassStatistics`."""
    dims = stats.class_active.sum(dim=0) > 0
    present = stats.class_count > 0
    mean_weights = torch.zeros_like(stats.class_abs_sum)
    mean_weights[present] = stats.class_abs_sum[present] / stats.class_count[present, None]
    return {
        "freq": entropy_from_class_weights(stats.class_active, dims),
        "sum": entropy_from_class_weights(stats.class_abs_sum, dims),
        "mean": entropy_from_class_weights(mean_weights, dims),
    }


def semantic_consistency(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> float:
    """Semantic consistency: for each dimension with an active sample (``|Fn_ij| > eps``, rows
    L2-normalised), the majority class's share of its active samples, averaged; 0.0 if none.
    Dense features sit at chance (about 1/C): read it beside the shuffled baseline."""
    features, labels, num_classes, eps = as_inputs(features, labels, num_classes, eps)
    stats, _ = class_statistics_chunked(features, labels, num_classes, eps, with_sums=False)
    return consistency_from_counts(stats.class_active)


def semantic_entropy(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> dict[str, float]:
    """Three semantic entropies (nats, lower = more class-selective, at most ``log C``), averaged over
    the dimensions with an active sample. For such a dimension ``j``, the entropy of
    ``p_c = w_c / sum_c' w_c'`` with weights

    - ``freq``: ``w_c`` = number of samples of class ``c`` with ``|Fn_ij| > eps``;
    - ``sum``: ``w_c`` = sum of ``|Fn_ij|`` over the samples of class ``c``;
    - ``mean``: ``w_c`` = that sum divided by the number of samples of class ``c`` in the whole set.

    Returns ``{"freq": ..., "sum": ..., "mean": ...}``; all 0.0 if no dimension is active."""
    features, labels, num_classes, eps = as_inputs(features, labels, num_classes, eps)
    stats, _ = class_statistics_chunked(features, labels, num_classes, eps)
    return entropies_from_statistics(stats)
