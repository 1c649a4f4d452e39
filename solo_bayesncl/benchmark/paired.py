"""Paired differences over seeds: a row's figure minus the reference row's (``ncl``) seed by seed
(same seed, same data order and initialisation where the methods allow), summarised by its mean
and a two-sided 95% Student-t interval over the seeds both rows have.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from scipy.stats import t as student_t  # scikit-learn's dependency

from solo_bayesncl.benchmark.table import (
    PAIRED_COLUMNS,
    REFERENCE,
    column_value,
    row_names,
    run_name,
)

__all__ = ["mean_interval", "paired_differences", "t_quantile_975"]


def t_quantile_975(dof: int) -> float:
    """The 0.975 quantile of Student's t with ``dof`` degrees of freedom (scipy's, exact)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    return float(student_t.ppf(0.975, dof))


def mean_interval(values: Sequence[float]) -> dict[str, float]:
    """``mean``, ``std``, ``n`` and the 95% Student-t interval ``low``/``high`` of ``values``."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval needs at least one value")
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else math.nan
    half = t_quantile_975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
    return {"mean": mean, "std": std, "n": n, "low": mean - half, "high": mean + half}


def paired_differences(
    results: Sequence[dict[str, Any]],
    reference: str = REFERENCE,
    columns: Sequence[str] = PAIRED_COLUMNS,
) -> list[dict[str, Any]]:
    """``row - reference`` per seed both have, for each column: mean, std, n and the 95% t-interval
    of the mean difference (``nan`` bounds below two pairs); empty without the reference."""
    ref = {int(r["seed"]): r for r in results if run_name(r) == reference}
    if not ref:
        return []
    out = []
    for name in row_names(results):
        if name == reference:
            continue
        runs = {int(r["seed"]): r for r in results if run_name(r) == name}
        seeds = sorted(set(runs) & set(ref))
        for column in columns:
            diffs = [column_value(runs[s], column) - column_value(ref[s], column) for s in seeds]
            diffs = [d for d in diffs if not math.isnan(d)]
            if not diffs:
                continue
            summary = mean_interval(diffs)
            out.append(
                {
                    "method": name,
                    "reference": reference,
                    "column": column,
                    "n": summary["n"],
                    "seeds": " ".join(str(s) for s in seeds),
                    "mean_diff": summary["mean"],
                    "std_diff": summary["std"],
                    "ci_low": summary["low"],
                    "ci_high": summary["high"],
                }
            )
    return out
