"""Plain per-dimension / per-query loop implementations of every metric: the tests' oracle
(and ``microbenchmarks/bench_metrics.py``'s baseline), not part of the package.

Written the way research code usually computes these figures (a Python loop over dimensions,
samples or queries, one metric at a time, on the whole N x k matrix). They define the same
quantities as the vectorised modules and exist to test them and to benchmark against; do not
use them on large sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from solo_bayesncl.metrics._validation import EPS
from solo_bayesncl.metrics.retrieval import DEFAULT_KS, retrieval_dim_counts, retrieval_key


def _normalize_rows(features: torch.Tensor) -> torch.Tensor:
    norms = features.norm(dim=1, keepdim=True)
    return features / norms.clamp_min(torch.finfo(features.dtype).tiny)


def active_dims_loop(features: torch.Tensor, eps: float = EPS) -> int:
    """Count of columns with some ``|F_ij| > eps``."""
    count = 0
    for j in range(features.shape[1]):
        if (features[:, j].abs() > eps).any():
            count += 1
    return count


def sparsity_loop(features: torch.Tensor, eps: float = EPS) -> float:
    """Share of entries with ``|F_ij| <= eps``."""
    zeros = 0
    for j in range(features.shape[1]):
        zeros += int((features[:, j].abs() <= eps).sum())
    return zeros / features.numel()


def semantic_consistency_loop(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> float:
    """Mean over dims with active samples of the majority-class share among them."""
    normalized = _normalize_rows(features)
    scores = []
    for j in range(features.shape[1]):
        active = normalized[:, j].abs() > eps
        if not active.any():
            continue
        counts = torch.bincount(labels[active], minlength=num_classes)
        scores.append(counts.max().item() / active.sum().item())
    return sum(scores) / len(scores) if scores else 0.0


def _entropy(weights: list[float]) -> float:
    total = sum(weights)
    h = 0.0
    for w in weights:
        if w > 0:
            p = w / total
            h -= p * math.log(p)
    return h


def semantic_entropy_loop(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> dict[str, float]:
    """The three semantic entropies (``freq``, ``sum``, ``mean``), one dimension at a time."""
    normalized = _normalize_rows(features).abs()
    class_sizes = torch.bincount(labels, minlength=num_classes).tolist()
    freq, total, mean = [], [], []
    for j in range(features.shape[1]):
        column = normalized[:, j]
        active = column > eps
        if not active.any():
            continue
        counts = torch.bincount(labels[active], minlength=num_classes).double().tolist()
        sums = torch.bincount(labels, weights=column.double(), minlength=num_classes).tolist()
        means = [s / n if n > 0 else 0.0 for s, n in zip(sums, class_sizes, strict=True)]
        freq.append(_entropy(counts))
        total.append(_entropy(sums))
        mean.append(_entropy(means))
    if not freq:
        return {"freq": 0.0, "sum": 0.0, "mean": 0.0}
    return {
        "freq": sum(freq) / len(freq),
        "sum": sum(total) / len(total),
        "mean": sum(mean) / len(mean),
    }


def shuffled_semantic_consistency_loop(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    permutations: int = 5,
    seed: int = 0,
) -> float:
    """Mean consistency over seeded label permutations (same permutations as the vectorised one)."""
    generator = torch.Generator().manual_seed(seed)
    labels = labels.cpu()
    values = []
    for _ in range(permutations):
        permuted = labels[torch.randperm(labels.numel(), generator=generator)]
        values.append(semantic_consistency_loop(features.cpu(), permuted, num_classes, eps))
    return sum(values) / len(values)


def effective_rank_loop(features: torch.Tensor) -> tuple[float, float]:
    """``(exp(H), H)`` from ``torch.linalg.svdvals(F)``, entropy summed one value at a time."""
    singular_values = torch.linalg.svdvals(features).tolist()
    total = sum(singular_values)
    if total <= 0:
        return 0.0, 0.0
    entropy = 0.0
    for s in singular_values:
        if s > 0:
            p = s / total
            entropy -= p * math.log(p)
    return math.exp(entropy), entropy


def orthogonality_error_loop(features: torch.Tensor, eps: float = EPS) -> float:
    """Mean ``|cos|`` between distinct active columns, one column against all at a time."""
    active = [j for j in range(features.shape[1]) if (features[:, j].abs() > eps).any()]
    if len(active) < 2:
        return 0.0
    columns = features[:, active]
    columns = columns / columns.norm(dim=0, keepdim=True)
    total = 0.0
    for a in range(len(active)):
        cosines = (columns[:, a] @ columns).abs()
        total += cosines.sum().item() - cosines[a].item()
    return total / (len(active) * (len(active) - 1))


def retrieval_precision_loop(
    features: torch.Tensor,
    labels: torch.Tensor,
    ks: Sequence[int] = DEFAULT_KS,
    dim_counts: Sequence[int] | None = None,
    query_indices: Sequence[int] | None = None,
) -> dict[str, float]:
    """P@K on the top-m dims, one query at a time (stable sort: ties by lower sample index)."""
    num_samples, num_dims = features.shape
    dim_counts = retrieval_dim_counts(num_dims) if dim_counts is None else list(dim_counts)
    queries = range(num_samples) if query_indices is None else [int(i) for i in query_indices]
    column_sums = [features[:, j].abs().sum().item() for j in range(num_dims)]
    order = sorted(range(num_dims), key=lambda j: -column_sums[j])
    results = {}
    for m in dim_counts:
        selected = _normalize_rows(features[:, order[:m]])
        precision = {k: 0.0 for k in ks}
        for i in queries:
            sims = selected @ selected[i]
            sims[i] = float("-inf")
            ranking = torch.sort(sims, descending=True, stable=True).indices
            for k in ks:
                keff = min(k, num_samples - 1)
                neighbours = ranking[:keff]
                precision[k] += (labels[neighbours] == labels[i]).sum().item() / keff
        for k in ks:
            results[retrieval_key(k, m, num_dims)] = precision[k] / len(queries)
    return results


def per_dimension_stats_loop(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, eps: float = EPS
) -> dict[str, list]:
    """Per-dimension fields of :class:`~solo_bayesncl.metrics.DimensionStats`, as lists."""
    normalized = _normalize_rows(features).abs()
    out: dict[str, list] = {
        "active_count": [],
        "class_histogram": [],
        "majority_class": [],
        "purity": [],
        "activation_sum": [],
    }
    for j in range(features.shape[1]):
        active = normalized[:, j] > eps
        histogram = torch.bincount(labels[active], minlength=num_classes)
        count = int(active.sum())
        out["active_count"].append(count)
        out["class_histogram"].append(histogram.tolist())
        out["majority_class"].append(int(histogram.argmax()) if count else -1)
        out["purity"].append(histogram.max().item() / count if count else 0.0)
        out["activation_sum"].append(features[:, j].abs().sum().item())
    return out


def all_metrics_loop(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eps: float = EPS,
    permutations: int = 5,
    seed: int = 0,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, float]:
    """Every metric of :func:`~solo_bayesncl.metrics.compute_interpretability_metrics` by loops."""
    n, k = features.shape
    consistency = semantic_consistency_loop(features, labels, num_classes, eps)
    shuffled = shuffled_semantic_consistency_loop(
        features, labels, num_classes, eps, permutations, seed
    )
    entropy = semantic_entropy_loop(features, labels, num_classes, eps)
    rank, rank_entropy = effective_rank_loop(features)
    active = active_dims_loop(features, eps)
    out = {
        "num_samples": float(n),
        "num_dims": float(k),
        "active_dims": float(active),
        "active_dims_fraction": active / k,
        "sparsity": sparsity_loop(features, eps),
        "semantic_consistency": consistency,
        "semantic_consistency_shuffled": shuffled,
        "semantic_consistency_gain": consistency - shuffled,
        "semantic_entropy_freq": entropy["freq"],
        "semantic_entropy_sum": entropy["sum"],
        "semantic_entropy_mean": entropy["mean"],
        "effective_rank": rank,
        "effective_rank_entropy": rank_entropy,
        "orthogonality_error": orthogonality_error_loop(features, eps),
        "retrieval_samples": float(n),
    }
    out.update(retrieval_precision_loop(features, labels, ks))
    return out
