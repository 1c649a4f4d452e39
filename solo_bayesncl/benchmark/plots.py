"""Benchmark pictures: accuracy against chance-corrected consistency, and metrics over epochs."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_accuracy_vs_consistency", "plot_metrics_over_epochs"]

COLORS = {
    "simclr": "tab:blue",
    "mocov2plus": "tab:orange",
    "ncl": "tab:green",
    "bayesncl": "tab:red",
}


def plot_accuracy_vs_consistency(results: Sequence[dict[str, Any]], path: Path) -> Path:
    """One point per run: linear top-1 against the consistency gain over its shuffled baseline."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in COLORS:
        runs = [r for r in results if r["method"] == method]
        if runs:
            ax.scatter(
                [r["metrics"].get("semantic_consistency_gain", float("nan")) for r in runs],
                [r.get("linear_top1") or float("nan") for r in runs],
                label=method,
                color=COLORS[method],
                s=50,
            )
    ax.set_xlabel("semantic consistency - label-shuffled baseline")
    ax.set_ylabel("linear top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _epoch_series(metrics_csv: Path, column: str) -> tuple[list[int], list[float]]:
    epochs, values = [], []
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                epochs.append(int(float(row["epoch"])) + 1)
                values.append(float(row[column]))
    return epochs, values


def plot_metrics_over_epochs(results: Sequence[dict[str, Any]], path: Path) -> Path:
    """Consistency gain, active dims, online linear top-1 and InfoNCE loss over epochs."""
    panels = (
        ("interp/semantic_consistency_gain", "consistency gain"),
        ("interp/active_dims", "active dims"),
        ("val_acc1", "online linear top-1 (%)"),
        ("train_nce_loss_epoch", "InfoNCE loss"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (column, title) in zip(axes, panels, strict=True):
        for result in results:
            csv_path = Path(result.get("pretrain_metrics_csv", ""))
            if not csv_path.is_file():
                continue
            epochs, values = _epoch_series(csv_path, column)
            if epochs:
                ax.plot(
                    epochs,
                    values,
                    marker="o",
                    ms=3,
                    color=COLORS.get(result["method"]),
                    label=f"{result['method']} s{result['seed']}",
                )
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
