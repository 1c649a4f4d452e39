"""Curves against the epoch, read back from a run's ``metrics.csv``: :data:`BUDGET_FIGURES` (drawn
in ``budget_curves.png``) or any logged column (:func:`epoch_series`)."""

from __future__ import annotations

from pathlib import Path

from solo_bayesncl.benchmark.records import epoch_metrics

__all__ = ["BUDGET_FIGURES", "epoch_series"]

BUDGET_FIGURES: tuple[tuple[str, str], ...] = (
    ("interp/semantic_consistency_gain", "class consistency gain"),
    ("interp/background_consistency_gain", "background consistency gain"),
    ("interp/background_dims_share", "background-dominated share of active dims"),
    ("interp/active_dims", "active dims"),
    ("interp/gate_open_ratio", "share of open gates"),
    ("interp/probe_top1", "converged probe top-1, class (%)"),
    ("interp/probe_background_top1", "converged probe top-1, background (%)"),
)
"""The figures of the budget curve, as ``(metrics.csv column, title)``."""


def epoch_series(metrics_csv: Path, column: str) -> tuple[list[int], list[float]]:
    """The epochs (1-based) at which ``column`` was logged in a run's ``metrics.csv``, and its
    values there (read by :func:`~solo_bayesncl.benchmark.records.epoch_metrics`)."""
    points = epoch_metrics(metrics_csv).get(column, {})
    return list(points), list(points.values())
