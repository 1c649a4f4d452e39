"""The ``paper`` evaluation protocol: the metrics exactly as the official BayesNCL evaluation
computes them (arXiv 2605.28441, its ``main_eval.py`` and evaluation helpers), so that numbers can
be put beside the paper's table; docs/fidelity.md tabulates how they differ from this project's
definitions (:mod:`solo_bayesncl.metrics`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from solo_bayesncl.metrics._validation import EPS

PAPER_EPS = EPS
"""The activity threshold of the official evaluation: the same 1e-5 as the project's metrics."""
CONSISTENCY_SCALE = 100.0
"""The paper prints semantic consistency x100 (22.02 is a share of 0.2202)."""
RETRIEVAL_DIMS: tuple[int, ...] = tuple(range(0, 512 + 32, 32))
"""``m``: the numbers of top-ranked dimensions the official retrieval table reads."""
RETRIEVAL_KS: tuple[int, ...] = (1, 3, 5, 10)


def paper_active_dims(features: torch.Tensor) -> float:
    """Dimensions whose mean absolute value over the set is above 0."""
    return float((features.abs().mean(dim=0) > 0).sum())


def paper_sparsity(features: torch.Tensor) -> float:
    """Share of entries with ``|f| <= 1e-5``."""
    return float(1.0 - (features.abs() > PAPER_EPS).float().mean())


def _one_hot_present(labels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(n, C)`` one-hot over the classes present in ``labels`` (their sorted unique values)."""
    _, inverse = torch.unique(labels, return_inverse=True)
    return F.one_hot(inverse, int(inverse.max()) + 1).to(dtype)


def paper_semantic_consistency(features: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over active dimensions (absolute sum above 0) of the majority-class share of the
    samples active on it (``|f| > 1e-5``, rows L2-normalised): a share in [0, 1], x
    :data:`CONSISTENCY_SCALE` for the paper's figure; NaN when no dimension has an active sample."""
    f = features.float()
    f = F.normalize(f[:, f.abs().sum(dim=0) > 0], dim=1)
    active = (f.abs() > PAPER_EPS).float()
    counts = active.T @ _one_hot_present(labels, active.dtype)  # (d, C)
    totals = counts.sum(dim=1)
    keep = totals > 0
    if not keep.any():
        return float("nan")
    return float((counts[keep].max(dim=1).values / totals[keep]).mean())


def _entropy_rows(mass: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of non-negative ``mass`` normalised to sum 1, terms with p <= 1e-5
    dropped; rows whose total is below 1e-5 are removed."""
    totals = mass.sum(dim=1, keepdim=True)
    mass, totals = mass[totals[:, 0] >= PAPER_EPS], totals[totals[:, 0] >= PAPER_EPS]
    p = mass / totals
    terms = torch.where(p > PAPER_EPS, p * torch.log(p.clamp_min(PAPER_EPS)), torch.zeros_like(p))
    return -terms.sum(dim=1)


def paper_semantic_entropies(features: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The official evaluation's three semantic entropies over dimensions with absolute sum above
    1e-5: of each one's per-class activation sum (``sum_activation``), class-mean activation
    (``mean_activation``) and active count (``frequency``); 0 when none qualifies, as officially."""
    f = features.float()
    f = f[:, f.abs().sum(dim=0) > PAPER_EPS].abs()
    one_hot = _one_hot_present(labels, f.dtype)
    sums = f.T @ one_hot  # (d, C)
    class_counts = one_hot.sum(dim=0) + PAPER_EPS
    frequency = (f > PAPER_EPS).to(f.dtype).T @ one_hot
    out = {}
    for name, mass in (
        ("sum_activation", sums),
        ("mean_activation", sums / class_counts),
        ("frequency", frequency),
    ):
        entropies = _entropy_rows(mass)
        out[name] = float(entropies.mean()) if entropies.numel() else 0.0
    return out


def paper_orthogonality(features: torch.Tensor) -> dict[str, float]:
    """``|C - I| / (d (d - 1))`` of the column-normalised active features (``C = F^T F``): its
    mean (the paper's figure, so the sum is divided by ``d^2`` once more) and median."""
    f = features.float()
    f = F.normalize(f[:, f.abs().sum(dim=0) > 0], dim=0)
    d = f.shape[1]
    if d < 2:
        return {"mean": float("nan"), "median": float("nan")}
    err = (f.T @ f - torch.eye(d, device=f.device, dtype=f.dtype)).abs() / (d * (d - 1))
    return {"mean": float(err.mean()), "median": float(err.median())}


@torch.no_grad()
def paper_retrieval(
    features: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int = 1024,
) -> dict[int, dict[int, float]]:
    """Retrieval precision ``{m: {k: P@k}}`` of the official evaluation: dimensions ranked by the
    signed sum of the row-normalised features, the top ``m`` kept and rows renormalised, the 11 most
    cosine-similar vectors taken and the first dropped (the query itself unless tied); queries in
    chunks of ``chunk_size``. ValueError for fewer than 11 vectors (the official code reads 11)."""
    n = features.shape[0]
    if n < 11:
        raise ValueError(f"paper retrieval needs at least 11 vectors, got {n}")
    f = F.normalize(features.float(), p=2, dim=1)
    _, order = torch.sort(f.sum(dim=0), descending=True)
    labels = labels.to(f.device)
    out: dict[int, dict[int, float]] = {}
    for m in RETRIEVAL_DIMS:
        sub = F.normalize(f[:, order[:m]], p=2, dim=1)
        hits = torch.zeros(max(RETRIEVAL_KS), device=f.device, dtype=torch.float64)
        for start in range(0, n, chunk_size):
            sim = sub[start : start + chunk_size] @ sub.T
            neighbours = torch.topk(sim, k=11, dim=1).indices[:, 1:]
            correct = labels[neighbours] == labels[start : start + chunk_size, None]
            hits += correct.double().sum(dim=0)
        cumulative = hits.cumsum(dim=0)
        out[m] = {k: float(cumulative[k - 1] / (n * k)) for k in RETRIEVAL_KS}
    return out


def paper_singular_value_entropy(features: torch.Tensor) -> float:
    """``-sum s log(s + 1e-6)`` of the singular values normalised to sum 1: the official
    "effective rank", the entropy itself (``exp`` of it is the Roy-Vetterli effective rank)."""
    s = torch.linalg.svdvals(features.float())
    s = s / s.sum()
    return float(-(s * torch.log(s + 1e-6)).sum())


def paper_metrics(features: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Every official evaluation figure of a validation set, flat, under ``paper_`` names:
    consistency both as a share and x100, retrieval as ``paper_retrieval_p@K_m{M}``."""
    orthogonality = paper_orthogonality(features)
    metrics = {
        "paper_active_dims": paper_active_dims(features),
        "paper_sparsity": paper_sparsity(features),
        "paper_semantic_consistency": paper_semantic_consistency(features, labels),
    }
    metrics["paper_semantic_consistency_x100"] = (
        metrics["paper_semantic_consistency"] * CONSISTENCY_SCALE
    )
    for name, value in paper_semantic_entropies(features, labels).items():
        metrics[f"paper_semantic_entropy_{name}"] = value
    metrics["paper_orthogonality_mean"] = orthogonality["mean"]
    metrics["paper_orthogonality_median"] = orthogonality["median"]
    for m, precisions in paper_retrieval(features, labels).items():
        for k, value in precisions.items():
            metrics[f"paper_retrieval_p@{k}_m{m}"] = value
    return metrics
