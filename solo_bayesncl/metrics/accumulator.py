"""Streaming computation of every interpretability metric in one pass over the data.

:class:`InterpretabilityAccumulator` keeps float64 running sums (per-dimension and per-class
counts and sums, the Gram ``F^T F``), bit-packed masks and labels for the label-shuffled baseline
and the vectors retrieval keeps. Under DDP, gather the features and labels before ``update``;
:func:`compute_interpretability_metrics` is the one-shot form."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from solo_bayesncl.core.validation import require_int
from solo_bayesncl.metrics._bitmask import pack_mask, unpack_mask
from solo_bayesncl.metrics._blocks import Workspace, block_rows
from solo_bayesncl.metrics._validation import (
    EPS,
    as_features,
    as_labels,
    check_eps,
    check_num_classes,
)
from solo_bayesncl.metrics.baseline import shuffled_consistencies_from_masks
from solo_bayesncl.metrics.dimension_stats import DimensionStats, dimension_stats_from_sums
from solo_bayesncl.metrics.retrieval import (
    DEFAULT_KS,
    RetrievalBuffer,
    rank_dimensions,
    retrieval_dim_counts,
    retrieval_precision_from_vectors,
)
from solo_bayesncl.metrics.semantics import (
    ClassStatistics,
    batch_class_sums,
    consistency_from_counts,
    entropies_from_statistics,
)
from solo_bayesncl.metrics.spectral import (
    RunningGram,
    effective_rank_from_singular_values,
    orthogonality_from_gram,
    singular_values_from_gram,
)

#: Every key returned by :meth:`InterpretabilityAccumulator.compute`. ``{K}`` is 1, 5 and 10,
#: ``{m}`` each entry of ``retrieval_dim_counts`` below ``k`` (default 32, 64, 128, ...).
METRIC_DESCRIPTIONS: dict[str, str] = {
    "num_samples": "N, samples seen.",
    "num_dims": "k, feature dimensions.",
    "active_dims": "Dimensions whose column has |F_ij| > eps for some sample.",
    "active_dims_fraction": "Share of the k dimensions that are active (active_dims / k).",
    "sparsity": "Share of the N x k entries with |F_ij| <= eps.",
    "semantic_consistency": (
        "Rows L2-normalised; per dim with active samples (|Fn_ij| > eps), share of the most "
        "frequent class among them; mean over those dims."
    ),
    "semantic_consistency_shuffled": (
        "semantic_consistency with the labels randomly permuted (mean over "
        "shuffle_permutations seeded permutations): its chance floor."
    ),
    "semantic_consistency_shuffled_std": "Standard deviation of the shuffled values (0 if one).",
    "semantic_consistency_gain": "semantic_consistency - semantic_consistency_shuffled.",
    "semantic_entropy_freq": (
        "Mean over active dims of the entropy (nats) of the class distribution of the active samples."
    ),
    "semantic_entropy_sum": (
        "Same, with class weights = summed |Fn_ij| over the samples of each class."
    ),
    "semantic_entropy_mean": (
        "Same, with class weights = summed |Fn_ij| / number of samples of that class (all of them)."
    ),
    "effective_rank": "exp(H(s / sum s)) over the singular values s of F (Roy & Vetterli, 2007).",
    "effective_rank_entropy": "H(s / sum s) in nats, the figure the official BayesNCL code logs.",
    "orthogonality_error": (
        "Active columns L2-normalised; mean |off-diagonal| of F^T F (mean |cos| between dims)."
    ),
    "retrieval_samples": "N_r, samples used as queries and gallery for retrieval.",
    "retrieval_p@{K}_m{m}": (
        "Precision@K of cosine retrieval on the m dims with the largest sum_i |F_ij| (query "
        "excluded, ties by lower sample index)."
    ),
    "retrieval_p@{K}": "Precision@K of cosine retrieval on all k dims.",
}

_DESCRIBED = [
    (
        re.compile("^" + re.escape(key).replace(r"\{K\}", r"\d+").replace(r"\{m\}", r"\d+") + "$"),
        text,
    )
    for key, text in METRIC_DESCRIPTIONS.items()
]


def describe_metric(key: str) -> str | None:
    """The one-line description of a key of :meth:`InterpretabilityAccumulator.compute`
    (``retrieval_p@5_m64`` reads ``retrieval_p@{K}_m{m}``), or None for an unknown key."""
    return next((text for pattern, text in _DESCRIBED if pattern.match(key)), None)


SHUFFLE_PERMUTATIONS = 5
"""The permutations of the label-shuffled baseline, unless a setting says otherwise."""


def check_shuffle_permutations(key: str, value: Any) -> int:
    """The label-shuffled baseline's permutations: an integer >= 1, else a ``ConfigError``."""
    return require_int(key, value, low=1)


class InterpretabilityAccumulator:
    """Accumulates batches and computes every interpretability metric (docs/method.md, "Metrics").
    ``num_classes``: C (labels in ``0..C-1``); ``eps``: activity threshold (``|F_ij| > eps``);
    ``seed``: of the permutations and of the retrieval cap's sample; ``track_gram``: keep the
    k x k Gram (effective rank, orthogonality); ``retrieval_max_samples``: cap on the kept
    vectors (None = all); ``chunk_size``: rows processed at a time inside ``update``."""

    def __init__(
        self,
        num_classes: int,
        *,
        eps: float = EPS,
        shuffle_permutations: int = SHUFFLE_PERMUTATIONS,
        seed: int = 0,
        track_gram: bool = True,
        retrieval: bool = True,
        retrieval_dim_counts: Sequence[int] | None = None,
        retrieval_max_samples: int | None = None,
        retrieval_device: str | torch.device | None = "cpu",
        chunk_size: int = 1024,
    ) -> None:
        self.num_classes = check_num_classes(num_classes)
        self.eps = check_eps(eps)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.shuffle_permutations = check_shuffle_permutations(
            "shuffle_permutations", shuffle_permutations
        )
        self.seed = int(seed)
        self.track_gram = bool(track_gram)
        self.retrieval = bool(retrieval)
        self.retrieval_dim_counts = (
            None if retrieval_dim_counts is None else list(retrieval_dim_counts)
        )
        self.retrieval_max_samples = retrieval_max_samples
        self.retrieval_device = retrieval_device
        self.chunk_size = int(chunk_size)
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self.num_samples = 0
        self.num_dims: int | None = None
        self.device: torch.device | None = None
        self._raw_active = None
        self._abs_sum = None
        self._class_active = None
        self._class_abs_sum = None
        self._class_count = None
        self._gram: RunningGram | None = None
        self._workspace = Workspace()
        self._masks: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self._buffer = (
            RetrievalBuffer(self.retrieval_max_samples, self.retrieval_device, self.seed)
            if self.retrieval
            else None
        )

    def _allocate(self, num_dims: int, device: torch.device) -> None:
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self.num_dims, self.device = num_dims, device
        self._raw_active = zeros(num_dims)
        self._abs_sum = zeros(num_dims)
        self._class_active = zeros(self.num_classes, num_dims)
        self._class_abs_sum = zeros(self.num_classes, num_dims)
        self._class_count = zeros(self.num_classes)
        if self.track_gram:
            self._gram = RunningGram(num_dims, device)

    @torch.no_grad()
    def update(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Add a batch: ``features`` (B x k, float, any device) and ``labels`` (B,) ints."""
        features = as_features(features)
        if self.num_dims is None:
            self._allocate(features.shape[1], features.device)
        elif features.shape[1] != self.num_dims:
            raise ValueError(
                f"features has {features.shape[1]} dims but earlier batches had {self.num_dims}"
            )
        features = features.detach().to(self.device)
        labels = as_labels(labels, features.shape[0], self.num_classes, self.device)
        for start in range(0, features.shape[0], self.chunk_size):
            self._update_chunk(
                features[start : start + self.chunk_size], labels[start : start + self.chunk_size]
            )

    def _update_chunk(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        # one |F| pass serves the raw counts and sums, the class sums and the activity mask that
        # the shuffled baseline keeps; the Gram reuses its peak
        sums = batch_class_sums(
            features, labels, self.num_classes, self.eps, True, True, True, self._workspace
        )
        self._raw_active += sums.raw_active
        self._abs_sum += sums.raw_abs_sum
        self._class_active += sums.stats.class_active
        self._class_abs_sum += sums.stats.class_abs_sum
        self._class_count += sums.stats.class_count
        if self._gram is not None:
            self._gram.add(features, sums.peak)
        if self.shuffle_permutations:
            self._masks.append(pack_mask(sums.active))
            self._labels.append(labels)
        if self._buffer is not None:
            self._buffer.add(features, labels)
        self.num_samples += features.shape[0]

    def _unpacked_masks(self) -> Iterator[torch.Tensor]:
        packed = torch.cat(self._masks)
        rows = block_rows(self.num_dims)
        for start in range(0, packed.shape[0], rows):
            yield unpack_mask(packed[start : start + rows], self.num_dims, torch.float32)

    def _class_stats(self) -> ClassStatistics:
        return ClassStatistics(self._class_active, self._class_abs_sum, self._class_count)

    def _require_samples(self) -> None:
        if self.num_samples == 0:
            raise ValueError("no samples: call update(features, labels) before compute()")

    @torch.no_grad()
    def compute(self) -> dict[str, float]:
        """Every metric as a flat ``{key: float}`` dict (keys: :data:`METRIC_DESCRIPTIONS`)."""
        self._require_samples()
        n, k = self.num_samples, self.num_dims
        active = int((self._raw_active > 0).sum())
        out: dict[str, float] = {
            "num_samples": float(n),
            "num_dims": float(k),
            "active_dims": float(active),
            "active_dims_fraction": active / k,
            "sparsity": float(1.0 - self._raw_active.sum() / (n * k)),
        }
        stats = self._class_stats()
        out["semantic_consistency"] = consistency_from_counts(stats.class_active)
        if self.shuffle_permutations:
            shuffled = shuffled_consistencies_from_masks(
                self._unpacked_masks(),
                torch.cat(self._labels),
                self.num_classes,
                self.shuffle_permutations,
                self.seed,
            )
            out["semantic_consistency_shuffled"] = float(shuffled.mean())
            out["semantic_consistency_shuffled_std"] = (
                float(shuffled.std()) if shuffled.numel() > 1 else 0.0
            )
            out["semantic_consistency_gain"] = (
                out["semantic_consistency"] - out["semantic_consistency_shuffled"]
            )
        for name, value in entropies_from_statistics(stats).items():
            out[f"semantic_entropy_{name}"] = value
        if self._gram is not None:
            gram = self._gram.gram
            rank = effective_rank_from_singular_values(singular_values_from_gram(gram))
            out["effective_rank"] = rank.rank
            out["effective_rank_entropy"] = rank.entropy
            out["orthogonality_error"] = orthogonality_from_gram(gram, self._raw_active > 0)
        if self._buffer is not None:
            vectors, labels = self._buffer.tensors()
            out["retrieval_samples"] = float(vectors.shape[0])
            out.update(
                retrieval_precision_from_vectors(
                    vectors,
                    labels,
                    rank_dimensions(self._abs_sum),
                    DEFAULT_KS,
                    self.retrieval_dim_counts or retrieval_dim_counts(k),
                )
            )
        return out

    def per_dimension_stats(self) -> DimensionStats:
        """Per-dimension statistics (see :class:`DimensionStats`)."""
        self._require_samples()
        return dimension_stats_from_sums(self._class_stats(), self._abs_sum, self.num_samples)


def compute_interpretability_metrics(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    *,
    batch_size: int = 1024,
    **options,
) -> dict[str, float]:
    """:meth:`InterpretabilityAccumulator.compute` over ``features`` (N x k) and ``labels`` fed in
    batches of ``batch_size``; ``options`` are the accumulator's keyword arguments."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    features = as_features(features)
    accumulator = InterpretabilityAccumulator(num_classes, **options)
    labels_t = as_labels(labels, features.shape[0], accumulator.num_classes, features.device)
    for start in range(0, features.shape[0], batch_size):
        accumulator.update(
            features[start : start + batch_size], labels_t[start : start + batch_size]
        )
    return accumulator.compute()
