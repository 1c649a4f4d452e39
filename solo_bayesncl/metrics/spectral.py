"""Effective rank and orthogonality error, both from the k x k Gram matrix ``G = F^T F``.

``G`` is a running sum over batches (``G += F_b^T F_b``, products and sums in float64), so both
metrics stream; its memory cost is ``8 k^2`` bytes (32 MiB for k = 2048, 2 GiB for k = 16384).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from solo_bayesncl.metrics._validation import EPS, as_features, check_eps
from solo_bayesncl.metrics.sparsity import active_dims_mask


class EffectiveRank(NamedTuple):
    """``rank = exp(entropy)``; ``entropy`` is the Shannon entropy (nats) of ``s / sum(s)``."""

    rank: float
    entropy: float


def gram_matrix(features: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """``F^T F`` in float64 (rows processed ``chunk_size`` at a time)."""
    features = as_features(features)
    num_dims = features.shape[1]
    gram = torch.zeros(num_dims, num_dims, dtype=torch.float64, device=features.device)
    for start in range(0, features.shape[0], chunk_size):
        block = features[start : start + chunk_size].double()
        gram.addmm_(block.T, block)
    return gram


def singular_values_from_gram(gram: torch.Tensor) -> torch.Tensor:
    """Singular values of ``F`` (descending) from ``G = F^T F`` via ``eigvalsh``.

    ``s = sqrt(lambda)``. Eigenvalues below ``k * float64_eps * lambda_max`` are the rounding noise
    of the Gram route and are set to 0 (a singular value below ``sqrt(k * 2.2e-16) * s_max``,
    e.g. ``6.7e-7 * s_max`` for k = 2048, counts as 0).
    """
    eigenvalues = torch.linalg.eigvalsh(gram.double())
    if eigenvalues.numel() == 0:
        return eigenvalues
    tolerance = eigenvalues.max().clamp_min(0) * gram.shape[0] * torch.finfo(torch.float64).eps
    eigenvalues = torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))
    return eigenvalues.sqrt().flip(0)


def effective_rank_from_singular_values(singular_values: torch.Tensor) -> EffectiveRank:
    """Effective rank of Roy & Vetterli (EUSIPCO 2007): ``exp(H(p))`` with ``p = s / sum(s)``
    and ``H(p) = -sum p log p`` (nats, ``0 log 0 = 0``). An all-zero matrix gives rank 0 and
    entropy 0.
    """
    s = singular_values.double().clamp_min(0)
    total = s.sum()
    if not bool(total > 0):
        return EffectiveRank(0.0, 0.0)
    p = s / total
    entropy = float(-torch.xlogy(p, p).sum())
    return EffectiveRank(float(torch.exp(torch.tensor(entropy, dtype=torch.float64))), entropy)


def orthogonality_from_gram(gram: torch.Tensor, active: torch.Tensor) -> float:
    """Mean ``|cos|`` between distinct active columns, from ``G = F^T F``.

    ``C_ab = G_ab / sqrt(G_aa G_bb)`` over the active dimensions ``a, b``; the mean of ``|C_ab|``
    over the ``n (n - 1)`` ordered pairs ``a != b``. 0.0 when fewer than two dimensions are
    active.
    """
    index = torch.nonzero(active.to(gram.device), as_tuple=True)[0]
    count = index.numel()
    if count < 2:
        return 0.0
    sub = gram.double()[index][:, index]
    norms = sub.diagonal().clamp_min(torch.finfo(torch.float64).tiny).sqrt()
    cosine = (sub / norms[:, None] / norms[None, :]).abs_()
    off_diagonal = cosine.sum() - cosine.diagonal().sum()
    return float(off_diagonal / (count * (count - 1)))


def effective_rank(features: torch.Tensor) -> EffectiveRank:
    """Effective rank ``exp(H(s / sum s))`` over the singular values ``s`` of ``F`` (Roy &
    Vetterli, 2007) and the entropy ``H`` itself (the figure the official BayesNCL code logs).

    ``F`` is read as given. The singular values come from ``eigvalsh(F^T F)`` (the streaming
    route, see :func:`singular_values_from_gram`).
    """
    return effective_rank_from_singular_values(singular_values_from_gram(gram_matrix(features)))


def orthogonality_error(features: torch.Tensor, eps: float = EPS) -> float:
    """Orthogonality error of the active dimensions.

    Definition: keep the active columns of ``F`` (``|F_ij| > eps`` somewhere), L2-normalise each
    column, and take the mean absolute off-diagonal entry of ``F^T F`` (the mean ``|cos|`` over
    ordered pairs of distinct active dimensions). 0 for orthogonal columns, 1 for identical ones;
    0.0 when fewer than two dimensions are active.
    """
    features = as_features(features)
    active = active_dims_mask(features, check_eps(eps))
    return orthogonality_from_gram(
        gram_matrix(features[:, active]), torch.ones(int(active.sum()), dtype=torch.bool)
    )
