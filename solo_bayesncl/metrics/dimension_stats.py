"""Per-dimension statistics for pictures and dashboards."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from solo_bayesncl.metrics._validation import EPS, as_inputs
from solo_bayesncl.metrics.semantics import ClassStatistics, class_statistics_chunked


@dataclass(frozen=True)
class DimensionStats:
    """Statistics of each of the k feature dimensions (CPU tensors); activity as in semantic
    consistency, activation sums on the features as given: ``active_count`` (k,),
    ``class_histogram`` (k, C), ``majority_class`` (k,) (lowest on ties, -1 if none active),
    ``purity`` (k,) float64 (0.0 if none), ``class_activation_sum`` (k, C) of ``|Fn_ij|``,
    ``activation_sum`` (k,) of ``|F_ij|`` and ``activation_mean`` (its mean over N)."""

    num_samples: int
    active_count: torch.Tensor
    class_histogram: torch.Tensor
    majority_class: torch.Tensor
    purity: torch.Tensor
    class_activation_sum: torch.Tensor
    activation_sum: torch.Tensor
    activation_mean: torch.Tensor


def dimension_stats_from_sums(
    stats: ClassStatistics, activation_sum: torch.Tensor, num_samples: int
) -> DimensionStats:
    """Build :class:`DimensionStats` from class statistics and ``sum_i |F_ij|``."""
    histogram = stats.class_active.T.cpu().round().long()
    active_count = histogram.sum(dim=1)
    best = histogram.max(dim=1)
    used = active_count > 0
    majority = torch.where(used, best.indices, torch.full_like(best.indices, -1))
    purity = torch.zeros(histogram.shape[0], dtype=torch.float64)
    purity[used] = best.values[used].double() / active_count[used].double()
    activation_sum = activation_sum.double().cpu()
    return DimensionStats(
        num_samples=int(num_samples),
        active_count=active_count,
        class_histogram=histogram,
        majority_class=majority,
        purity=purity,
        class_activation_sum=stats.class_abs_sum.T.cpu().double(),
        activation_sum=activation_sum,
        activation_mean=activation_sum / max(int(num_samples), 1),
    )


def per_dimension_stats(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> DimensionStats:
    """The :class:`DimensionStats` of ``features``, from one pass over them."""
    features, labels, num_classes, eps = as_inputs(features, labels, num_classes, eps)
    activation_sum = torch.zeros(features.shape[1], dtype=torch.float64, device=features.device)
    stats, _ = class_statistics_chunked(
        features, labels, num_classes, eps, raw_abs_sum=activation_sum
    )
    return dimension_stats_from_sums(stats, activation_sum, features.shape[0])
