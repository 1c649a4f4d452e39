"""Per-dimension summaries of a feature matrix for the dashboard, per block of columns.

Dimension ``j`` *fires* on image ``i`` when ``|Fn_ij| > eps`` on the row-normalised features, as
in semantic consistency. Counts, majority class, purity, its significance and the top images
come from :mod:`solo_bayesncl.metrics`; this module adds what only the pages show: random
images, activation histograms and means."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from solo_bayesncl.metrics import (
    EPS,
    SIGNIFICANCE,
    TOP_IMAGES,
    majority_p_values,
    per_dimension_stats,
    top_image_purity,
    top_images,
)


@dataclass
class DimensionSummaries:
    """Summaries of the k dimensions of an (N, k) feature matrix: ``active_count``, ``class_counts``
    (k,), (k, C) of the images each fires on; ``majority`` (-1 if none) and ``purity`` (0 if none);
    ``p_value`` (:func:`solo_bayesncl.metrics.majority_p_values`); ``top_purity`` of the first
    ``top_purity_images`` top images; ``mean_active`` |activation|; ``top_index``/``top_value`` and
    ``random_index``/``random_value`` (k, K), (k, R), padded with -1 / 0; ``hist_counts`` (k, B)
    over ``[hist_low, hist_high]``."""

    active_count: np.ndarray
    class_counts: np.ndarray
    majority: np.ndarray
    purity: np.ndarray
    p_value: np.ndarray
    top_purity: np.ndarray
    top_purity_images: int
    mean_active: np.ndarray
    top_index: np.ndarray
    top_value: np.ndarray
    random_index: np.ndarray
    random_value: np.ndarray
    hist_counts: np.ndarray
    hist_low: np.ndarray
    hist_high: np.ndarray

    @property
    def active_dims(self) -> np.ndarray:
        """Indices of the dimensions that fire on at least one image."""
        return np.flatnonzero(self.active_count > 0)

    @property
    def significant(self) -> np.ndarray:
        """(k,) bool: the majority class beats the label-shuffled baseline (p <= SIGNIFICANCE)."""
        return self.p_value <= SIGNIFICANCE


def _top_rows(score: np.ndarray, count: int) -> np.ndarray:
    """Row indices of the ``count`` largest entries of each column, largest first."""
    part = np.argpartition(-score, count - 1, axis=0)[:count]
    order = np.argsort(-np.take_along_axis(score, part, axis=0), axis=0, kind="stable")
    return np.take_along_axis(part, order, axis=0)


def summarize_dimensions(
    features: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    *,
    top_k: int = 16,
    top_purity_images: int = TOP_IMAGES,
    n_random: int = 8,
    n_bins: int = 20,
    seed: int = 0,
    block: int = 256,
) -> DimensionSummaries:
    """The :class:`DimensionSummaries` of every column of ``features`` (N, k) given integer
    ``labels`` (N,); memory O(N * block), the random samples set by ``seed`` and ``block``."""
    if top_k < 1 or top_purity_images < 1 or n_random < 0 or n_bins < 1:
        raise ValueError(
            "top_k and top_purity_images must be >= 1, n_random >= 0, n_bins >= 1; got "
            f"{top_k}, {top_purity_images}, {n_random}, {n_bins}"
        )
    n, k = features.shape
    if n == 0:
        raise ValueError("features has no rows (N = 0)")
    labels = np.asarray(labels, dtype=np.int64)
    rr = min(n_random, n)
    rng = np.random.default_rng(seed)
    sq_norm = np.zeros(n, np.float64)
    for start in range(0, k, block):
        part = np.asarray(features[:, start : start + block], dtype=np.float64)
        sq_norm += np.einsum("ij,ij->i", part, part)
    norm = np.sqrt(sq_norm)
    inv_norm = np.where(norm > 0, 1.0 / np.maximum(norm, 1e-300), 0.0)

    feats_t = torch.as_tensor(np.asarray(features, dtype=np.float32))
    labels_t = torch.as_tensor(labels)
    stats = per_dimension_stats(feats_t, labels_t, num_classes)
    p_value = majority_p_values(feats_t, labels_t, num_classes, seed=seed).numpy()
    top = top_images(feats_t, max(top_k, top_purity_images), block=block)
    top_index = top.index[:, :top_k].numpy()
    top_value = top.value[:, :top_k].numpy()
    majority = stats.majority_class.numpy()
    top_purity = top_image_purity(
        top.index[:, :top_purity_images], labels_t, stats.majority_class
    ).numpy()
    mean_active = np.zeros(k, np.float64)
    random_index = np.full((k, n_random), -1, np.int64)
    random_value = np.zeros((k, n_random), np.float32)
    hist_counts = np.zeros((k, n_bins), np.int64)
    hist_low = np.zeros(k, np.float64)
    hist_high = np.zeros(k, np.float64)

    for start in range(0, k, block):
        stop = min(start + block, k)
        width = stop - start
        feats = np.asarray(features[:, start:stop], dtype=np.float32)
        mag = np.abs(feats)
        act = mag * inv_norm[:, None] > EPS
        count = act.sum(axis=0)
        mean_active[start:stop] = np.where(act, mag, 0).sum(axis=0) / np.maximum(count, 1)

        if rr:
            keys = rng.random((n, width), dtype=np.float32)
            keys[~act] = 2.0  # inactive images sort last
            rows = _top_rows(-keys, rr)
            ok = np.take_along_axis(keys, rows, axis=0) <= 1.0
            random_index[start:stop, :rr] = np.where(ok, rows, -1).T
            random_value[start:stop, :rr] = np.where(ok, np.take_along_axis(feats, rows, 0), 0).T

        low = np.where(act, feats, np.inf).min(axis=0)
        high = np.where(act, feats, -np.inf).max(axis=0)
        fired = count > 0
        low = np.where(fired, low, 0.0)
        high = np.where(fired, high, 0.0)
        span = np.where(high > low, high - low, 1.0)
        bins = np.clip(((feats - low) / span * n_bins).astype(np.int64), 0, n_bins - 1)
        flat = (bins + n_bins * np.arange(width))[act]
        hist_counts[start:stop] = np.bincount(flat, minlength=n_bins * width).reshape(width, n_bins)
        hist_low[start:stop] = low
        hist_high[start:stop] = high

    return DimensionSummaries(
        active_count=stats.active_count.numpy(),
        class_counts=stats.class_histogram.numpy(),
        majority=majority,
        purity=stats.purity.numpy(),
        p_value=p_value,
        top_purity=top_purity,
        top_purity_images=int(top_purity_images),
        mean_active=mean_active,
        top_index=top_index,
        top_value=top_value,
        random_index=random_index,
        random_value=random_value,
        hist_counts=hist_counts,
        hist_low=hist_low,
        hist_high=hist_high,
    )


def class_specificity(class_counts: np.ndarray, class_sizes: np.ndarray) -> np.ndarray:
    """Specificity of every dimension to every class, (k, C) in [0, 1]: ``score[j, c] =
    purity_c(j) * coverage_c(j)``, ``purity_c(j) = n_jc / sum_c' n_jc'``, ``coverage_c(j) = n_jc /
    |c|`` (``n_jc``: images of class c that j fires on); 1 only if j fires on all of c alone."""
    counts = np.asarray(class_counts, dtype=np.float64)
    sizes = np.asarray(class_sizes, dtype=np.float64)
    purity = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    coverage = counts / np.maximum(sizes[None, :], 1.0)
    return purity * coverage


def most_specific_dims(score: np.ndarray, top: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """``(dims, values)`` (C, top): for each class the ``top`` dimensions with the highest positive
    specificity ``score``, best first, padded with -1 / 0."""
    k, _ = score.shape
    top_eff = min(top, k)
    rows = _top_rows(score, top_eff).T  # (C, top_eff)
    vals = np.take_along_axis(score.T, rows, axis=1)
    dims = np.full((score.shape[1], top), -1, np.int64)
    values = np.zeros((score.shape[1], top), np.float64)
    dims[:, :top_eff] = np.where(vals > 0, rows, -1)
    values[:, :top_eff] = np.where(vals > 0, vals, 0)
    return dims, values
