"""Retrieval precision on the most activated dimensions (docs/method.md, "Metrics").

Each sample queries all the others by cosine similarity on the ``m`` most activated dimensions
(ranked by ``sum_i |F_ij|``; ``m`` = 32, 64, 128, ... below k, and k); P@K is the share of the K
nearest neighbours with the query's label, averaged over queries. Ties go to the lower index; a
zero row has cosine 0 with everything. Below ``K + 1`` samples P@K uses the ``N - 1`` neighbours;
below 2 it is NaN."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from solo_bayesncl.core.validation import require_int
from solo_bayesncl.metrics._validation import (
    absolute_column_sums,
    as_features,
    as_labels,
    row_normalize,
)

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
SMALLEST_DIM_COUNT: int = 32


def retrieval_dim_counts(num_dims: int, smallest: int = SMALLEST_DIM_COUNT) -> list[int]:
    """``[32, 64, 128, ...]`` (doubling, strictly below ``num_dims``) followed by ``num_dims``."""
    if num_dims < 1:
        raise ValueError(f"num_dims must be >= 1, got {num_dims}")
    counts = []
    m = smallest
    while m < num_dims:
        counts.append(m)
        m *= 2
    return [*counts, num_dims]


def rank_dimensions(activation_sum: torch.Tensor) -> torch.Tensor:
    """Dimension indices sorted by summed activation, largest first (stable: ties by index)."""
    return torch.sort(activation_sum, descending=True, stable=True).indices


def retrieval_key(k: int, m: int, num_dims: int) -> str:
    """Metric key: ``retrieval_p@{k}`` when all dims are used, else ``retrieval_p@{k}_m{m}``."""
    return f"retrieval_p@{k}" if m == num_dims else f"retrieval_p@{k}_m{m}"


def _check_ks(ks: Sequence[int]) -> list[int]:
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be a non-empty list of ints >= 1, got {ks}")
    return sorted(set(ks))


def _hits_in_chunk(
    sims: torch.Tensor,
    labels: torch.Tensor,
    query_labels: torch.Tensor,
    ks: list[int],
) -> dict[int, torch.Tensor]:
    """Number of same-label neighbours among the top-K of each row of ``sims`` (self = -inf)."""
    num_gallery = sims.shape[1]
    available = num_gallery - 1
    depth = min(max(ks) + 1, num_gallery)
    top = sims.topk(depth, dim=1)
    same = labels[top.indices] == query_labels[:, None]
    hits = {}
    for k in ks:
        keff = min(k, available)
        count = same[:, :keff].sum(dim=1)
        if keff < depth:
            # rows where the K-th and (K+1)-th similarities tie: topk's choice among equal
            # values is arbitrary, so recount with ties broken by lower sample index.
            ambiguous = top.values[:, keff - 1] == top.values[:, keff]
            if bool(ambiguous.any()):
                rows = torch.nonzero(ambiguous, as_tuple=True)[0]
                block = sims[rows]
                threshold = top.values[rows, keff - 1 : keff]
                greater = block > threshold
                equal = block == threshold
                need = keff - greater.sum(dim=1, keepdim=True)
                take = equal & (equal.cumsum(dim=1) <= need)
                chosen = greater | take
                match = labels[None, :] == query_labels[rows, None]
                count[rows] = (chosen & match).sum(dim=1)
        hits[k] = count.double() / keff
    return hits


def retrieval_precision_from_vectors(
    features: torch.Tensor,
    labels: torch.Tensor,
    dim_order: torch.Tensor,
    ks: Sequence[int] = DEFAULT_KS,
    dim_counts: Sequence[int] | None = None,
    query_indices: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """P@K on kept vectors for each ``m`` in ``dim_counts`` (dims from ``dim_order``); the queries
    are all rows or ``query_indices``."""
    ks = _check_ks(ks)
    num_samples, num_dims = features.shape
    dim_counts = retrieval_dim_counts(num_dims) if dim_counts is None else list(dim_counts)
    for m in dim_counts:
        if not 1 <= m <= num_dims:
            raise ValueError(f"dim_counts entries must lie in 1..{num_dims}, got {m}")
    labels = labels.to(features.device)
    if query_indices is None:
        query_indices = torch.arange(num_samples, device=features.device)
    query_indices = query_indices.to(device=features.device, dtype=torch.long)
    results: dict[str, float] = {}
    if num_samples < 2 or query_indices.numel() == 0:
        for m in dim_counts:
            for k in ks:
                results[retrieval_key(k, m, num_dims)] = float("nan")
        return results
    dim_order = dim_order.to(features.device)
    for m in dim_counts:
        gallery = row_normalize(features[:, dim_order[:m]])
        totals = {k: torch.zeros((), dtype=torch.float64) for k in ks}
        for start in range(0, query_indices.numel(), chunk_size):
            rows = query_indices[start : start + chunk_size]
            sims = gallery[rows] @ gallery.T
            sims[torch.arange(rows.numel(), device=sims.device), rows] = float("-inf")
            hits = _hits_in_chunk(sims, labels, labels[rows], ks)
            for k in ks:
                totals[k] += hits[k].sum().cpu()
        for k in ks:
            results[retrieval_key(k, m, num_dims)] = float(totals[k] / query_indices.numel())
    return results


def retrieval_precision(
    features: torch.Tensor,
    labels: torch.Tensor,
    ks: Sequence[int] = DEFAULT_KS,
    dim_counts: Sequence[int] | None = None,
    query_indices: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """Retrieval precision P@K on the ``m`` most activated dimensions (module docstring), under
    ``retrieval_p@{K}_m{m}`` (``retrieval_p@{K}`` for ``m = k``); the gallery is every sample."""
    features = as_features(features)
    num_samples = features.shape[0]
    labels = torch.as_tensor(np.asarray(labels)) if not isinstance(labels, torch.Tensor) else labels
    num_classes = int(labels.max()) + 1 if labels.numel() else 1
    labels = as_labels(labels, num_samples, num_classes, features.device)
    order = rank_dimensions(absolute_column_sums(features))
    return retrieval_precision_from_vectors(
        features, labels, order, ks, dim_counts, query_indices, chunk_size
    )


def check_retrieval_max_samples(key: str, value: Any) -> int | None:
    """The retrieval cap: None (all) or an integer >= 2, else a ``ConfigError`` naming ``key``."""
    return None if value is None else require_int(key, value, low=2)


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 hash of uint64 values (wrapping arithmetic)."""
    z = values + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class RetrievalBuffer:
    """Keeps the vectors retrieval needs, optionally a uniform random subset of ``max_samples`` by
    bottom-k sampling (key ``splitmix64(i + seed * 2**32)``, independent of batching), in stream
    order on ``device``."""

    def __init__(
        self,
        max_samples: int | None = None,
        device: str | torch.device | None = "cpu",
        seed: int = 0,
    ) -> None:
        self.max_samples = check_retrieval_max_samples("retrieval_max_samples", max_samples)
        self.device = None if device is None else torch.device(device)
        self.seed = int(seed)
        self._features: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self._positions: list[torch.Tensor] = []
        self._keys: list[np.ndarray] = []
        self._seen = 0

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Append a batch (rows beyond the cap are dropped lazily)."""
        rows = features.shape[0]
        device = self.device or features.device
        positions = torch.arange(self._seen, self._seen + rows, dtype=torch.long)
        self._seen += rows
        self._features.append(features.detach().to(device))
        self._labels.append(labels.detach().to(device))
        self._positions.append(positions)
        if self.max_samples is not None:
            offset = np.uint64(self.seed % 2**32) << np.uint64(32)
            self._keys.append(_splitmix64(positions.numpy().astype(np.uint64) + offset))
            if sum(k.size for k in self._keys) > 2 * self.max_samples:
                self._compact()

    def _compact(self) -> None:
        features, labels = torch.cat(self._features), torch.cat(self._labels)
        positions = torch.cat(self._positions)
        if self.max_samples is not None and positions.numel() > self.max_samples:
            keys = np.concatenate(self._keys)
            keep = np.sort(np.argpartition(keys, self.max_samples - 1)[: self.max_samples])
            keep_t = torch.from_numpy(keep)
            features = features[keep_t.to(features.device)]
            labels = labels[keep_t.to(labels.device)]
            positions = positions[keep_t]
            self._keys = [keys[keep]]
        elif self.max_samples is not None:
            self._keys = [np.concatenate(self._keys)]
        self._features, self._labels, self._positions = [features], [labels], [positions]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The kept ``(features, labels)``, in stream order."""
        if not self._features:
            raise ValueError("no samples kept for retrieval")
        self._compact()
        return self._features[0], self._labels[0]

    @property
    def positions(self) -> torch.Tensor:
        """Stream positions of the kept rows (ascending)."""
        self._compact()
        return self._positions[0]
