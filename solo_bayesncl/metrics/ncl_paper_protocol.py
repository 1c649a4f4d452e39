"""The ``ncl-paper`` evaluation protocol: the metrics as the NCL repository's own evaluation
computes them (Wang et al., "Non-negative Contrastive Learning", arXiv 2403.12459, its
``main_eval.py``), to be put beside the NCL paper's table. They differ from the BayesNCL
evaluation and this project's definitions on purpose (docs/fidelity.md tabulates how); the
features are not row-normalised before sparsity and orthogonality."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NCL_SPARSITY_EPS = 1e-2
"""An entry counts as zero for NCL's sparsity when ``|f| < 1e-2``."""
NCL_ACTIVE_EPS = 1e-5
"""A sample is active on a dimension for NCL's consistency when ``|f| > 1e-5``."""
NCL_ORTHOGONALITY_MIN_SUM = 10.0
"""NCL's orthogonality keeps the dimensions whose column sum is above 10."""
NCL_RETRIEVAL_STEP = 32
"""``m`` runs over ``0, 32, ...`` below the feature dimension."""
NCL_RETRIEVAL_K = 10


def ncl_paper_sparsity(features: torch.Tensor) -> float:
    """Mean over samples of the percentage of entries with ``|f| < 1e-2``."""
    per_sample = (features.float().abs() < NCL_SPARSITY_EPS).float().mean(dim=1) * 100
    return float(per_sample.mean())


def _mean_std(values: torch.Tensor) -> tuple[float, float]:
    if values.numel() == 0:
        return float("nan"), float("nan")
    std = float(values.std()) if values.numel() > 1 else float("nan")
    return float(values.mean()), std


def ncl_paper_semantic_consistency(
    features: torch.Tensor, labels: torch.Tensor
) -> dict[str, float]:
    """NCL's "cluster acc": over dimensions whose ReLU sum is above 0, rows L2-normalised, each
    dimension's class distribution of the samples with ``|f| > 1e-5``; ``{"mean", "std"}`` (sample
    std) over dimensions of its majority-class share x100 and ``{"entropy_mean", "entropy_std"}``
    of its entropy ``-sum p log(p + 1e-5)``; a dimension with no active sample is skipped."""
    f = features.float()
    f = F.normalize(f[:, F.relu(f).sum(dim=0) > 0], dim=1)
    labels = labels.to(f.device).long()
    one_hot = F.one_hot(labels, int(labels.max()) + 1).to(f.dtype) if labels.numel() else None
    if one_hot is None or f.shape[1] == 0:
        nan = float("nan")
        return {"mean": nan, "std": nan, "entropy_mean": nan, "entropy_std": nan}
    counts = (f.abs() > NCL_ACTIVE_EPS).to(f.dtype).T @ one_hot  # (d, C)
    totals = counts.sum(dim=1)
    p = counts[totals > 0] / totals[totals > 0, None]
    share = p.max(dim=1).values * 100
    entropy = -(p * torch.log(p + NCL_ACTIVE_EPS)).sum(dim=1)
    mean, std = _mean_std(share)
    entropy_mean, entropy_std = _mean_std(entropy)
    return {"mean": mean, "std": std, "entropy_mean": entropy_mean, "entropy_std": entropy_std}


def ncl_paper_orthogonality(features: torch.Tensor) -> float:
    """NCL's "disentanglement": the median of all ``d^2`` entries of ``|F^T F - I|`` over the
    column-normalised dimensions whose column sum is above 10; NaN when none is."""
    f = features.float()
    f = F.normalize(f[:, f.sum(dim=0) > NCL_ORTHOGONALITY_MIN_SUM], dim=0)
    d = f.shape[1]
    if d == 0:
        return float("nan")
    return float((f.T @ f - torch.eye(d, device=f.device, dtype=f.dtype)).abs().median())


@torch.no_grad()
def ncl_paper_retrieval(
    features: torch.Tensor, labels: torch.Tensor, chunk_size: int = 512
) -> dict[int, float]:
    """``{m: P@10}``: dimensions ranked by the signed sum of the row-normalised features, the
    first ``m = 0, 32, ..., d - 32`` kept **without** renormalising, neighbours by Euclidean
    distance, the nearest dropped (the query itself unless tied), the query skipped if among the
    next ten (NCL prints it as ``map``); distance ties (``m = 0``) go to the lower index, which
    NCL leaves to ``torch.sort``. Queries in chunks of ``chunk_size``; ValueError below 11 vectors."""
    n, d = features.shape
    if n < NCL_RETRIEVAL_K + 1:
        raise ValueError(f"NCL retrieval needs at least 11 vectors, got {n}")
    f = F.normalize(features.float(), p=2, dim=1)
    _, order = torch.sort(f.sum(dim=0), descending=True, stable=True)
    labels = labels.to(f.device)
    out: dict[int, float] = {}
    for m in range(0, d, NCL_RETRIEVAL_STEP):
        sub = f[:, order[:m]]
        correct = 0.0
        for start in range(0, n, chunk_size):
            queries = torch.arange(start, min(start + chunk_size, n), device=f.device)
            dist = torch.cdist(
                sub[queries], sub, compute_mode="donot_use_mm_for_euclid_dist"
            )  # exact: a vector's distance to itself is 0
            ranked = torch.sort(dist, dim=1, stable=True).indices[:, 1 : NCL_RETRIEVAL_K + 1]
            hits = (labels[ranked] == labels[queries, None]) & (ranked != queries[:, None])
            correct += float(hits.sum())
        out[m] = correct / (n * NCL_RETRIEVAL_K)
    return out


def ncl_paper_metrics(features: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Every figure of the NCL repository's evaluation, flat, under ``ncl_paper_`` names, as the
    NCL code prints them (retrieval as ``ncl_paper_retrieval_p@10_m{M}``)."""
    consistency = ncl_paper_semantic_consistency(features, labels)
    metrics = {
        "ncl_paper_sparsity_x100": ncl_paper_sparsity(features),
        "ncl_paper_semantic_consistency_x100": consistency["mean"],
        "ncl_paper_semantic_consistency_x100_std": consistency["std"],
        "ncl_paper_semantic_entropy": consistency["entropy_mean"],
        "ncl_paper_semantic_entropy_std": consistency["entropy_std"],
        "ncl_paper_orthogonality_median": ncl_paper_orthogonality(features),
    }
    for m, value in ncl_paper_retrieval(features, labels).items():
        metrics[f"ncl_paper_retrieval_p@{NCL_RETRIEVAL_K}_m{m}"] = value
    return metrics
