"""The benchmark table: one row per method, the mean (and spread over seeds) of each figure.

Columns follow the issue: linear top-1, kNN top-1, semantic consistency (with its label-shuffled
baseline and the gain, which is what separates methods; DESIGN section 3), semantic entropy,
active dims, sparsity, effective rank, retrieval P@1, time per epoch, peak memory.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "aggregate", "write_csv", "write_markdown"]

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (column, where in a run result, format)
    ("linear_top1", "linear_top1", "{:.2f}"),
    ("knn_top1", "knn_top1", "{:.2f}"),
    ("semantic_consistency", "metrics.semantic_consistency", "{:.3f}"),
    ("consistency_shuffled", "metrics.semantic_consistency_shuffled", "{:.3f}"),
    ("consistency_gain", "metrics.semantic_consistency_gain", "{:.3f}"),
    ("semantic_entropy", "metrics.semantic_entropy_freq", "{:.3f}"),
    ("active_dims", "metrics.active_dims", "{:.0f}"),
    ("sparsity", "metrics.sparsity", "{:.3f}"),
    ("effective_rank", "metrics.effective_rank", "{:.1f}"),
    ("retrieval_p@1", "metrics.retrieval_p@1", "{:.3f}"),
    ("s_per_epoch", "seconds_per_epoch", "{:.1f}"),
    ("peak_memory_mb", "peak_memory_mb", "{:.0f}"),
)
METHOD_ORDER = ("simclr", "mocov2plus", "ncl", "bayesncl")


def _get(result: dict[str, Any], dotted: str) -> float:
    value: Any = result
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if value is not None else math.nan


def aggregate(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method: ``{column: mean, column + "_std": std over seeds, "seeds": n}``."""
    rows = []
    methods = sorted({r["method"] for r in results}, key=lambda m: (METHOD_ORDER + (m,)).index(m))
    for method in methods:
        runs = [r for r in results if r["method"] == method]
        row: dict[str, Any] = {"method": method, "seeds": len(runs)}
        for column, source, _ in COLUMNS:
            values = [_get(r, source) for r in runs]
            values = [v for v in values if not math.isnan(v)]
            row[column] = statistics.fmean(values) if values else math.nan
            row[f"{column}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
        rows.append(row)
    return rows


def write_csv(rows: Sequence[dict[str, Any]], path: Path, commit: str, date: str) -> Path:
    """The table as CSV: method, seeds, every column and its ``_std``, commit, date."""
    fields = (
        ["method", "seeds"]
        + [c for col, _, _ in COLUMNS for c in (col, f"{col}_std")]
        + ["commit", "date"]
    )
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({**{k: row.get(k) for k in fields}, "commit": commit, "date": date})
    return path


def write_markdown(
    rows: Sequence[dict[str, Any]], path: Path, preset: str, commit: str, date: str
) -> Path:
    """The table as Markdown; with several seeds, cells read ``mean ± std``."""
    header = ["method", "seeds"] + [c for c, _, _ in COLUMNS]
    lines = [
        f"Benchmark preset `{preset}`, commit `{commit}`, {date}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells = [row["method"], str(row["seeds"])]
        for column, _, fmt in COLUMNS:
            value = row[column]
            cell = "n/a" if math.isnan(value) else fmt.format(value)
            if row["seeds"] > 1 and not math.isnan(value):
                cell += " ± " + fmt.format(row[f"{column}_std"])
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Linear and kNN top-1 in %, on backbone features (solo-learn's LinearModel and "
        "WeightedKNNClassifier). Consistency is read beside its label-shuffled baseline: "
        "`consistency_gain` = consistency - shuffled, which is what compares methods.",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
