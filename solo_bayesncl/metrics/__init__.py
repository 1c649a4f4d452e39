"""Interpretability metrics shared by every method (docs/method.md, "Metrics"): plain PyTorch and
NumPy, one definition of each, vectorised over dimensions, on any device, streaming::

    acc = InterpretabilityAccumulator(num_classes=100)
    for features, labels in loader:        # features: B x k, labels: B
        acc.update(features, labels)
    metrics = acc.compute()                # {"semantic_consistency": ..., ...}

or ``compute_interpretability_metrics(F, y, num_classes)``; :data:`METRIC_DESCRIPTIONS`
documents every key. A soft gate (``u * alpha``) zeroes no entry, so threshold-based metrics
read it like no gate."""

from solo_bayesncl.metrics._validation import EPS, non_finite_rows, row_normalize
from solo_bayesncl.metrics.accumulator import (
    METRIC_DESCRIPTIONS,
    InterpretabilityAccumulator,
    compute_interpretability_metrics,
    describe_metric,
)
from solo_bayesncl.metrics.baseline import (
    MAJORITY_PERMUTATIONS,
    MIN_SUPPORT,
    SIGNIFICANCE,
    WILSON_Z,
    evidence_order,
    majority_p_values,
    shuffled_semantic_consistency,
    wilson_lower_bound,
)
from solo_bayesncl.metrics.dimension_stats import DimensionStats, per_dimension_stats
from solo_bayesncl.metrics.retrieval import (
    RetrievalBuffer,
    rank_dimensions,
    retrieval_dim_counts,
    retrieval_precision,
)
from solo_bayesncl.metrics.semantics import semantic_consistency, semantic_entropy
from solo_bayesncl.metrics.sparsity import (
    active_dims,
    active_dims_mask,
    active_dims_per_sample,
    sparsity,
)
from solo_bayesncl.metrics.spectral import EffectiveRank, effective_rank, orthogonality_error
from solo_bayesncl.metrics.top_images import TOP_IMAGES, TopImages, top_image_purity, top_images

__all__ = [
    "MAJORITY_PERMUTATIONS",
    "SIGNIFICANCE",
    "TOP_IMAGES",
    "TopImages",
    "majority_p_values",
    "MIN_SUPPORT",
    "WILSON_Z",
    "evidence_order",
    "wilson_lower_bound",
    "EPS",
    "METRIC_DESCRIPTIONS",
    "DimensionStats",
    "EffectiveRank",
    "InterpretabilityAccumulator",
    "RetrievalBuffer",
    "active_dims",
    "active_dims_mask",
    "active_dims_per_sample",
    "compute_interpretability_metrics",
    "describe_metric",
    "effective_rank",
    "non_finite_rows",
    "orthogonality_error",
    "per_dimension_stats",
    "rank_dimensions",
    "retrieval_dim_counts",
    "retrieval_precision",
    "row_normalize",
    "semantic_consistency",
    "semantic_entropy",
    "shuffled_semantic_consistency",
    "sparsity",
    "top_image_purity",
    "top_images",
]
