"""Effective rank and orthogonality error, both from the k x k Gram matrix ``G = F^T F``, a
running sum over batches (:class:`RunningGram`), so both metrics stream."""

from __future__ import annotations

from typing import NamedTuple

import torch

from solo_bayesncl.metrics._blocks import Workspace, row_blocks
from solo_bayesncl.metrics._validation import EPS, as_features, check_eps
from solo_bayesncl.metrics.sparsity import active_dims_mask


class EffectiveRank(NamedTuple):
    """``rank = exp(entropy)``; ``entropy`` is the Shannon entropy (nats) of ``s / sum(s)``."""

    rank: float
    entropy: float


class RunningGram:
    """``G = F^T F`` summed over blocks of rows in float64, up to a positive scale factor (both
    metrics are scale-invariant): once a float64 block arrives, ``G / s^2`` is kept, ``s`` the
    largest ``|F_ij|`` so far, so squares cannot overflow. Memory ``8 k^2`` bytes."""

    def __init__(self, num_dims: int, device: torch.device | str | None = None) -> None:
        self.gram = torch.zeros(num_dims, num_dims, dtype=torch.float64, device=device)
        self._scale = torch.zeros((), dtype=torch.float64, device=device)
        self._scaled = False
        self._rows = 0
        self._workspace = Workspace()

    def add(self, block: torch.Tensor, peak: torch.Tensor | None = None) -> None:
        """Add ``block^T block``; ``peak`` (``max |block_ij|``) saves a pass when given."""
        values = self._workspace.take("float64", block, torch.float64)
        if block.dtype == torch.float64 or self._scaled:
            if not self._scaled:
                # float32 blocks added so far are in the units of scale 1
                self._scale.fill_(1.0 if self._rows else 0.0)
                self._scaled = True
            if peak is None:
                peak = block.abs().amax() if block.numel() else self._scale
            scale = torch.maximum(self._scale, peak.to(torch.float64))
            safe = torch.where(scale > 0, scale, torch.ones_like(scale))
            self.gram.mul_((self._scale / safe) ** 2)
            torch.div(block, safe, out=values)
            self._scale = scale
        else:
            values.copy_(block)
        self.gram.addmm_(values.T, values)
        self._rows += block.shape[0]


def gram_matrix(features: torch.Tensor, columns: torch.Tensor | None = None) -> torch.Tensor:
    """``F^T F`` of the checked ``features`` (of its ``columns`` only, when given) in float64 up to
    a positive scale (:class:`RunningGram` over blocks of rows)."""
    width = features.shape[1] if columns is None else columns.numel()
    running = RunningGram(width, features.device)
    for _, block in row_blocks(features):
        running.add(block if columns is None else block[:, columns])
    return running.gram


def singular_values_from_gram(gram: torch.Tensor) -> torch.Tensor:
    """Singular values of ``F`` (descending) from ``eigvalsh(F^T F)``; eigenvalues below
    ``k * float64_eps * lambda_max`` are the Gram route's rounding noise, set to 0."""
    eigenvalues = torch.linalg.eigvalsh(gram.double())
    if eigenvalues.numel() == 0:
        return eigenvalues
    tolerance = eigenvalues.max().clamp_min(0) * gram.shape[0] * torch.finfo(torch.float64).eps
    eigenvalues = torch.where(eigenvalues > tolerance, eigenvalues, torch.zeros_like(eigenvalues))
    return eigenvalues.sqrt().flip(0)


def effective_rank_from_singular_values(singular_values: torch.Tensor) -> EffectiveRank:
    """Effective rank of Roy & Vetterli (EUSIPCO 2007): ``exp(H(p))`` with ``p = s / sum(s)``
    and ``H(p) = -sum p log p`` (nats, ``0 log 0 = 0``); rank and entropy 0 for a zero matrix."""
    s = singular_values.double().clamp_min(0)
    total = s.sum()
    if not bool(total > 0):
        return EffectiveRank(0.0, 0.0)
    p = s / total
    entropy = float(-torch.xlogy(p, p).sum())
    return EffectiveRank(float(torch.exp(torch.tensor(entropy, dtype=torch.float64))), entropy)


def orthogonality_from_gram(gram: torch.Tensor, active: torch.Tensor) -> float:
    """Mean ``|cos|`` between distinct active columns, from ``G = F^T F``: ``C_ab = G_ab /
    sqrt(G_aa G_bb)`` averaged over the ``n (n - 1)`` ordered pairs ``a != b`` of active
    dimensions; 0.0 when fewer than two are active."""
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
    """Effective rank ``exp(H(s / sum s))`` over the singular values ``s`` of ``F`` as given (Roy &
    Vetterli, 2007), with ``H`` itself (the official BayesNCL code's figure), from ``eigvalsh(F^T F)``."""
    gram = gram_matrix(as_features(features))
    return effective_rank_from_singular_values(singular_values_from_gram(gram))


def orthogonality_error(features: torch.Tensor, eps: float = EPS) -> float:
    """The mean ``|cos|`` between distinct active columns of ``F`` (``|F_ij| > eps`` somewhere):
    :func:`orthogonality_from_gram`; 0 for orthogonal columns, 1 for identical ones."""
    features = as_features(features)
    active = active_dims_mask(features, check_eps(eps))
    count = int(active.sum())
    if count < 2:
        return 0.0
    columns = None if count == features.shape[1] else torch.nonzero(active, as_tuple=True)[0]
    return orthogonality_from_gram(
        gram_matrix(features, columns), torch.ones(count, dtype=torch.bool)
    )
