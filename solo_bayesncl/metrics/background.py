"""The background measures of a representation on ``fashion-mnist-scenes`` (every image carries a
background label independent of its class), from arrays: the measures are defined in
:mod:`solo_bayesncl.evaluation.background`, which computes them for a checkpoint; the training-time
callback computes them every few epochs.
"""

from __future__ import annotations

import numpy as np
import torch

from solo_bayesncl.metrics.accumulator import compute_interpretability_metrics
from solo_bayesncl.metrics.dimension_stats import per_dimension_stats

__all__ = ["background_figures", "background_share"]


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
    lift_class = (np.asarray(class_purity) - 1 / classes) / (1 - 1 / classes)
    lift_background = (np.asarray(background_purity) - 1 / k) / (1 - 1 / k)
    count = int((lift_background[active] > lift_class[active]).sum())
    return count / int(active.sum()), count


def background_figures(
    representation: torch.Tensor,
    classes: np.ndarray,
    backgrounds: np.ndarray,
    num_classes: int,
    num_backgrounds: int,
) -> dict[str, float]:
    """``background_consistency`` (``_shuffled``, ``_gain``), ``background_dims_share``,
    ``background_dims`` and ``active_dims`` of ``representation`` (one row per validation image)
    for its class and background labels (module docstring)."""
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
