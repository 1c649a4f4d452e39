"""Semantic consistency and semantic entropy of feature dimensions (docs/method.md, "Metrics").

Both read the *row-normalised* features ``Fn = F / ||F_i||`` (a zero row stays zero) and call
sample ``i`` active in dimension ``j`` when ``|Fn_ij| > eps``. A dimension enters the average when
at least one sample is active in it (for unit-norm rows, e.g. the gated representation ``v``, this
is the same set as :func:`~solo_bayesncl.metrics.sparsity.active_dims_mask`). Semantic consistency
follows NCL (Wang et al., ICLR 2024, arXiv 2403.12459) and BayesNCL (arXiv 2605.28441); every
statistic here is a function of three running sums, so it streams over batches:

- ``class_active[c, j]``: number of samples of class ``c`` active in dimension ``j``;
- ``class_abs_sum[c, j]``: sum of ``|Fn_ij|`` over all samples of class ``c``;
- ``class_count[c]``: number of samples of class ``c``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from solo_bayesncl.metrics._validation import (
    EPS,
    ROW_CHUNK,
    as_features,
    as_labels,
    check_eps,
    check_num_classes,
    row_normalize,
)


class ClassStatistics(NamedTuple):
    """Per-class sums over a set of samples (float64, shapes C x k, C x k, C)."""

    class_active: torch.Tensor
    class_abs_sum: torch.Tensor
    class_count: torch.Tensor


def activity_mask(features: torch.Tensor, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(|Fn|, |Fn| > eps)`` for the row-normalised features ``Fn``."""
    normalized = row_normalize(features).abs_()
    return normalized, normalized > eps


def batch_class_sums(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float,
    with_sums: bool,
) -> tuple[ClassStatistics, torch.Tensor]:
    """Class statistics of one batch in the feature dtype (at least float32; counts exact below
    ``2**24`` samples per batch), and its activity mask. Callers add them to float64 totals in
    place, without a float64 copy per batch.

    With ``with_sums=False`` the ``class_abs_sum`` field is an empty tensor (one scatter saved).
    """
    absn, mask = activity_mask(features, eps)
    dtype, device = absn.dtype, features.device
    num_dims = features.shape[1]
    class_active = torch.zeros(num_classes, num_dims, dtype=dtype, device=device)
    class_active.index_add_(0, labels, mask.to(dtype))
    class_abs_sum = torch.zeros(0, dtype=dtype, device=device)
    if with_sums:
        class_abs_sum = torch.zeros(num_classes, num_dims, dtype=dtype, device=device)
        class_abs_sum.index_add_(0, labels, absn)
    class_count = torch.bincount(labels, minlength=num_classes)
    return ClassStatistics(class_active, class_abs_sum, class_count), mask


def class_statistics(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> ClassStatistics:
    """Per-class activity counts and summed ``|Fn|`` for one batch (see the module docstring).

    The batch sums are taken in the feature dtype (at least float32; counts are exact below
    2**24 samples per batch) and returned as float64, ready to be added to running sums.
    """
    stats, _ = batch_class_sums(features, labels, num_classes, eps, with_sums=True)
    return ClassStatistics(*(field.double() for field in stats))


def class_statistics_chunked(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    with_sums: bool = True,
    keep_masks: bool = False,
) -> tuple[ClassStatistics, list[torch.Tensor]]:
    """:func:`class_statistics` over a whole matrix, ``ROW_CHUNK`` rows at a time (each block's
    sums in the feature dtype, added to float64 totals).

    Returns the summed statistics and, with ``keep_masks``, the per-block activity masks.
    """
    if features.shape[0] == 0:
        raise ValueError("features has no rows; the metrics need at least one sample")
    shape = (num_classes, features.shape[1])
    total = ClassStatistics(
        *(
            torch.zeros(size, dtype=torch.float64, device=features.device)
            for size in (shape, shape, num_classes)
        )
    )
    masks = []
    for start in range(0, features.shape[0], ROW_CHUNK):
        stop = start + ROW_CHUNK
        stats, mask = batch_class_sums(
            features[start:stop], labels[start:stop], num_classes, eps, with_sums
        )
        for running, batch, wanted in zip(total, stats, (True, with_sums, True), strict=True):
            if wanted:
                running += batch
        if keep_masks:
            masks.append(mask)
    return total, masks


def consistency_from_counts(class_active: torch.Tensor) -> float:
    """Semantic consistency from the C x k activity counts.

    For each dimension with at least one active sample: ``max_c class_active[c, j] /
    sum_c class_active[c, j]`` (the share of the most frequent class among its active samples);
    the mean over those dimensions. Returns 0.0 when no dimension is active.
    """
    totals = class_active.sum(dim=0)
    used = totals > 0
    if not bool(used.any()):
        return 0.0
    purity = class_active.max(dim=0).values[used] / totals[used]
    return float(purity.mean())


def entropy_from_class_weights(weights: torch.Tensor, dims: torch.Tensor) -> float:
    """Mean over the dimensions ``dims`` of the entropy (nats) of ``weights[:, j]`` normalised.

    ``weights`` is C x k and non-negative; ``0 log 0 = 0``. Columns of ``dims`` whose weights sum
    to zero contribute entropy 0. Returns 0.0 when ``dims`` selects nothing.
    """
    if not bool(dims.any()):
        return 0.0
    w = weights[:, dims]
    p = w / w.sum(dim=0, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    entropy = -torch.xlogy(p, p).sum(dim=0)
    return float(entropy.mean())


def entropies_from_statistics(stats: ClassStatistics) -> dict[str, float]:
    """The three semantic entropies (``freq``, ``sum``, ``mean``) from :class:`ClassStatistics`."""
    dims = stats.class_active.sum(dim=0) > 0
    present = stats.class_count > 0
    mean_weights = torch.zeros_like(stats.class_abs_sum)
    mean_weights[present] = stats.class_abs_sum[present] / stats.class_count[present, None]
    return {
        "freq": entropy_from_class_weights(stats.class_active, dims),
        "sum": entropy_from_class_weights(stats.class_abs_sum, dims),
        "mean": entropy_from_class_weights(mean_weights, dims),
    }


def _prepare(features, labels, num_classes, eps):
    features = as_features(features)
    num_classes = check_num_classes(num_classes)
    labels = as_labels(labels, features.shape[0], num_classes, features.device)
    return features, labels, num_classes, check_eps(eps)


def semantic_consistency(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> float:
    """Semantic consistency of the feature dimensions.

    Definition: rows of ``F`` are L2-normalised (``Fn``); for each dimension ``j`` with at least
    one sample ``|Fn_ij| > eps``, take those active samples and the share of the most frequent
    class among them; average over those dimensions. Dense features sit at chance (about 1/C for
    balanced labels), so read it beside :func:`shuffled_semantic_consistency`. 0.0 if no
    dimension is active.
    """
    features, labels, num_classes, eps = _prepare(features, labels, num_classes, eps)
    stats, _ = class_statistics_chunked(features, labels, num_classes, eps, with_sums=False)
    return consistency_from_counts(stats.class_active)


def semantic_entropy(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> dict[str, float]:
    """Three semantic entropies (nats, lower = more class-selective), averaged over dimensions.

    Rows are L2-normalised (``Fn``) and the average runs over the dimensions with at least one
    sample ``|Fn_ij| > eps``. For such a dimension ``j``, the entropy of the class distribution
    ``p_c = w_c / sum_c' w_c'`` with weights

    - ``freq``: ``w_c`` = number of samples of class ``c`` with ``|Fn_ij| > eps``;
    - ``sum``: ``w_c`` = sum of ``|Fn_ij|`` over the samples of class ``c``;
    - ``mean``: ``w_c`` = that sum divided by the number of samples of class ``c`` in the whole
      set (all of them, active or not), so the class sizes do not bias it; classes with no
      sample get weight 0.

    Sub-threshold entries (``|Fn_ij| <= eps``) add at most ``eps`` each to the ``sum``/``mean``
    weights. Returns ``{"freq": ..., "sum": ..., "mean": ...}``; all 0.0 if no dimension is
    active. The maximum is ``log C``.
    """
    features, labels, num_classes, eps = _prepare(features, labels, num_classes, eps)
    stats, _ = class_statistics_chunked(features, labels, num_classes, eps)
    return entropies_from_statistics(stats)
