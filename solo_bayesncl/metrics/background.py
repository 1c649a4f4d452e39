"""The background measures of a representation on ``fashion-mnist-scenes`` (every image carries a
background label independent of its class), from arrays: the measures are defined in
:mod:`solo_bayesncl.evaluation.background`, which computes them for a checkpoint; the training-time
callback computes them every few epochs.
"""

from __future__ import annotations

import numpy as np
import torch

from solo_bayesncl.metrics._validation import EPS
from solo_bayesncl.metrics.accumulator import compute_interpretability_metrics
from solo_bayesncl.metrics.dimension_stats import per_dimension_stats

__all__ = ["background_figures", "background_share", "gate_background_selectivity"]


def _lift(purity: np.ndarray, labels: int) -> np.ndarray:
    """Purity above chance, ``(p - 1/L) / (1 - 1/L)``: 0 at chance, 1 for a pure dimension."""
    return (purity - 1 / labels) / (1 - 1 / labels)


def background_share(
    class_purity: np.ndarray,
    background_purity: np.ndarray,
    active: np.ndarray,
    classes: int,
    k: int,
) -> tuple[float, int]:
    """``(share, count)`` of the active dimensions whose above-chance background purity exceeds
    their above-chance class purity (see the module docstring)."""
    active = np.asarray(active, dtype=bool)
    if not active.any():
        return float("nan"), 0
    lift_class = _lift(np.asarray(class_purity), classes)
    lift_background = _lift(np.asarray(background_purity), k)
    count = int((lift_background[active] > lift_class[active]).sum())
    return count / int(active.sum()), count


def background_figures(
    representation: torch.Tensor,
    classes: np.ndarray,
    backgrounds: np.ndarray,
    num_classes: int,
    num_backgrounds: int,
) -> dict[str, float]:
    """The background figures of ``representation`` (module docstring)."""
    bg = torch.as_tensor(np.asarray(backgrounds))
    metrics = compute_interpretability_metrics(
        representation, bg, num_backgrounds, retrieval=False, track_gram=False
    )
    out = {
        key.replace("semantic_consistency", "background_consistency"): float(metrics[key])
        for key in ("semantic_consistency", "semantic_consistency_shuffled")
    }
    out["background_consistency_gain"] = (
        out["background_consistency"] - out["background_consistency_shuffled"]
    )
    class_stats = per_dimension_stats(
        representation, torch.as_tensor(np.asarray(classes)), num_classes
    )
    bg_stats = per_dimension_stats(representation, bg, num_backgrounds)
    active = (class_stats.active_count > 0).numpy()
    share, count = background_share(
        class_stats.purity.numpy(), bg_stats.purity.numpy(), active, num_classes, num_backgrounds
    )
    out.update(background_dims_share=share, background_dims=count, active_dims=int(active.sum()))
    return out


def gate_background_selectivity(
    ungated: torch.Tensor,
    mask: torch.Tensor,
    classes: np.ndarray,
    backgrounds: np.ndarray,
    num_classes: int,
    num_backgrounds: int,
    probs: torch.Tensor | None = None,
) -> dict[str, float]:
    """Whether a gate closes the background-dominated dimensions of what it gates (arXiv 2605.28441,
    section 3). ``ungated`` is ``u = normalize(phi(z))`` per validation image, ``mask`` the hard gate
    on the same images; a dimension active in ``u`` is background- or class-dominated by
    :func:`background_share`'s rule, and its *open rate* is the share of its active images whose
    gate is open. Returns ``ungated_background_dims_share``; ``open_rate_background_dims`` and
    ``open_rate_class_dims`` (NaN for an empty group); ``open_rate_lift_correlation`` (Pearson's,
    over active dimensions, of background lift minus class lift against open rate; NaN when
    either is constant); with ``probs`` (``alpha``), ``gate_probability_background_dims`` and
    ``gate_probability_class_dims``, the same means of ``alpha``, which a noisy gate opens with."""
    u = torch.as_tensor(ungated).detach().double()
    m = torch.as_tensor(mask).detach().double()
    if u.shape != m.shape or u.ndim != 2:
        raise ValueError(
            f"ungated {tuple(u.shape)} and mask {tuple(m.shape)} must be the same (N, k) shape"
        )
    if probs is not None and tuple(probs.shape) != tuple(u.shape):
        raise ValueError(
            f"ungated {tuple(u.shape)} and probs {tuple(probs.shape)} must be the same (N, k) shape"
        )
    active = u.abs() > EPS
    counts = active.sum(dim=0)
    alive = (counts > 0).numpy()

    def rate(values: torch.Tensor) -> np.ndarray:
        """Per dimension, the mean of ``values`` over the images it is active on."""
        return ((values * active).sum(dim=0) / counts.clamp(min=1)).numpy()

    open_rate = rate(m)
    class_stats = per_dimension_stats(u, torch.as_tensor(np.asarray(classes)), num_classes)
    bg_stats = per_dimension_stats(u, torch.as_tensor(np.asarray(backgrounds)), num_backgrounds)
    lift = _lift(bg_stats.purity.numpy(), num_backgrounds) - _lift(
        class_stats.purity.numpy(), num_classes
    )
    background = alive & (lift > 0)
    share, _ = background_share(
        class_stats.purity.numpy(), bg_stats.purity.numpy(), alive, num_classes, num_backgrounds
    )

    def mean(per_dim: np.ndarray, selected: np.ndarray) -> float:
        return float(per_dim[selected].mean()) if selected.any() else float("nan")

    x, y = lift[alive], open_rate[alive]
    constant = x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0
    out = {
        "ungated_background_dims_share": share,
        "open_rate_background_dims": mean(open_rate, background),
        "open_rate_class_dims": mean(open_rate, alive & ~background),
        "open_rate_lift_correlation": float("nan") if constant else float(np.corrcoef(x, y)[0, 1]),
    }
    if probs is not None:
        probability = rate(torch.as_tensor(probs).detach().double())
        out["gate_probability_background_dims"] = mean(probability, background)
        out["gate_probability_class_dims"] = mean(probability, alive & ~background)
    return out
