"""Benchmark pictures: accuracy against chance-corrected consistency, metrics over epochs and,
when a preset sweeps BayesNCL's prior, the figures against rho and lambda. With several seeds
every run is drawn and the mean ± standard deviation over seeds is drawn over it."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from solo_bayesncl.benchmark.curves import BUDGET_FIGURES, epoch_series
from solo_bayesncl.benchmark.table import figure, run_name
from solo_bayesncl.config.settings import saved_run_spec
from solo_bayesncl.core.validation import parse_bool
from solo_bayesncl.methods.keys import BayesNCLSettings

__all__ = [
    "plot_accuracy_vs_consistency",
    "plot_budget_curves",
    "plot_metrics_over_epochs",
    "plot_prior_sweep",
    "prior_settings",
]

COLORS = {
    "simclr": "tab:blue",
    "mocov2plus": "tab:orange",
    "ncl": "tab:green",
    "bayesncl": "tab:red",
}
_SPARE = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold")


def _subplots(*grid: int, figsize: tuple[float, float], **kwargs: Any):
    """``(figure, axes)`` like ``pyplot.subplots``, on an own Agg canvas (no global backend)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(*grid, **kwargs)


def _colors(results: Sequence[dict[str, Any]]) -> dict[str, str]:
    """A colour per row: methods keep theirs, variants take the spare ones in order."""
    colors, spare = {}, iter(_SPARE * 4)
    for r in results:
        name = run_name(r)
        if name not in colors:
            colors[name] = COLORS.get(name) or next(spare)
    return colors


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def plot_accuracy_vs_consistency(results: Sequence[dict[str, Any]], path: Path) -> Path:
    """One point per run: linear top-1 against the consistency gain over its shuffled baseline;
    with several seeds, a larger marker with error bars at the mean ± std of each row."""
    colors = _colors(results)
    fig, ax = _subplots(figsize=(6, 4.2))
    for name, color in colors.items():
        runs = [r for r in results if run_name(r) == name]
        x = [figure(r, "metrics.semantic_consistency_gain") for r in runs]
        y = [figure(r, "linear_top1") for r in runs]
        several = len(runs) > 1
        ax.scatter(x, y, color=color, s=18 if several else 50, alpha=0.5 if several else 1.0,
                   label=None if several else name)  # fmt: skip
        if several:
            (mx, sx), (my, sy) = _mean_std(x), _mean_std(y)
            ax.errorbar(mx, my, xerr=sx, yerr=sy, fmt="o", ms=8, color=color, capsize=3,
                        label=f"{name} (n={len(runs)}, mean ± std)")  # fmt: skip
    ax.set_xlabel("semantic consistency - label-shuffled baseline")
    ax.set_ylabel("linear top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _epoch_panels(
    results: Sequence[dict[str, Any]], panels: Sequence[tuple[str, str]], path: Path
) -> Path | None:
    """One panel per ``(metrics.csv column, title)``, a line per run against the epoch (with seeds,
    the row's mean ± std over thin seed lines); panels no run logged are left out, None if all."""
    colors = _colors(results)
    data: dict[str, dict[str, dict[int, dict[int, float]]]] = {}
    for column, _ in panels:
        for name in colors:
            for result in (r for r in results if run_name(r) == name):
                csv_path = Path(result.get("pretrain_metrics_csv", ""))
                if csv_path.is_file():
                    epochs, values = epoch_series(csv_path, column)
                    if epochs:
                        series = data.setdefault(column, {}).setdefault(name, {})
                        series[result["seed"]] = dict(zip(epochs, values, strict=True))
    panels = [(c, t) for c, t in panels if c in data]
    if not panels:
        return None
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = _subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (column, title) in zip(axes.flat, panels, strict=False):
        for name, series in data[column].items():
            color = colors[name]
            several = len(series) > 1
            for seed, points in series.items():
                ax.plot(list(points), list(points.values()), marker="o", ms=2 if several else 3,
                        lw=0.7 if several else 1.5, alpha=0.4 if several else 1.0, color=color,
                        label=None if several else f"{name} s{seed}")  # fmt: skip
            if several:
                epochs = sorted(set().union(*series.values()))
                stats = [_mean_std([s[e] for s in series.values() if e in s]) for e in epochs]
                means = [m for m, _ in stats]
                ax.plot(epochs, means, lw=2.2, color=color, label=f"{name} mean of {len(series)}")
                ax.fill_between(epochs, [m - sd for m, sd in stats], [m + sd for m, sd in stats],
                                color=color, alpha=0.15, lw=0)  # fmt: skip
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_metrics_over_epochs(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Consistency gain, active dims, online linear top-1 and InfoNCE loss over epochs, one line
    per run; with several seeds the row's mean ± std is drawn over its seeds' thin lines."""
    return _epoch_panels(
        results,
        (
            ("interp/semantic_consistency_gain", "consistency gain"),
            ("interp/active_dims", "active dims"),
            ("val_acc1", "online linear top-1 (%)"),
            ("train_nce_loss_epoch", "InfoNCE loss"),
        ),
        path,
    )


def plot_budget_curves(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """The budget curves (:data:`~solo_bayesncl.benchmark.curves.BUDGET_FIGURES`), mean ± std
    over seeds against the epoch; None (nothing drawn) when no run logged the converged probe."""
    if not any(
        epoch_series(Path(r["pretrain_metrics_csv"]), "interp/probe_top1")[0]
        for r in results
        if Path(r.get("pretrain_metrics_csv", "")).is_file()
    ):
        return None
    return _epoch_panels(results, BUDGET_FIGURES, path)


def prior_settings(result: dict[str, Any]) -> tuple[float, float] | None:
    """``(rho, lambda)`` of a BayesNCL run from its saved config; None otherwise."""
    if result.get("method") != "bayesncl" or not result.get("checkpoint"):
        return None
    args = Path(result["checkpoint"]).parent / "args.json"
    if not args.is_file():
        return None
    method = saved_run_spec(json.loads(args.read_text())).method
    if isinstance(method.settings, BayesNCLSettings):
        settings = method.settings
        kl = settings.bayesian_kl_lambda if settings.use_kl else 0.0
        return settings.bayesian_prior_prob, kl
    kwargs = method.kwargs  # a config that names too little to build its method
    try:
        use_kl = parse_bool("method_kwargs.use_kl", kwargs.get("use_kl", True))
        rho, kl = float(kwargs["bayesian_prior_prob"]), float(kwargs["bayesian_kl_lambda"])
    except (KeyError, TypeError, ValueError):
        return None
    return rho, kl if use_kl else 0.0


_SWEEP_PANELS = (
    ("metrics.semantic_consistency_gain", "consistency gain"),
    ("linear_top1", "linear top-1 (%)"),
    ("knn_top1", "kNN top-1 (%)"),
    ("gate_open_rate.mean", "share of open gates"),
)


def plot_prior_sweep(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """BayesNCL's figures against rho and against lambda, mean ± std over seeds with a faint dot per
    seed; NCL's mean ± std as a band. None when the runs sweep neither."""
    settings = [(r, prior_settings(r)) for r in results]
    settings = [(r, s) for r, s in settings if s is not None]
    lambdas = [s[1] for _, s in settings]
    if not settings:
        return None
    main_lambda = max(set(lambdas), key=lambdas.count)
    rho_runs = [(s[0], r) for r, s in settings if s[1] == main_lambda]
    rhos_by_count = {}
    for _, s in settings:
        rhos_by_count.setdefault(s[0], set()).add(s[1])
    lambda_rho = max(rhos_by_count, key=lambda rho: len(rhos_by_count[rho]))
    lambda_runs = [(s[1], r) for r, s in settings if s[0] == lambda_rho]
    sweeps = []
    if len({x for x, _ in rho_runs}) > 1:
        sweeps.append((f"rho (lambda {main_lambda:g})", rho_runs, False))
    if len({x for x, _ in lambda_runs}) > 1:
        sweeps.append((f"lambda (rho {lambda_rho:g})", lambda_runs, True))
    if not sweeps:
        return None
    ncl = [r for r in results if run_name(r) == "ncl"]
    fig, axes = _subplots(
        len(sweeps), len(_SWEEP_PANELS), figsize=(3.6 * len(_SWEEP_PANELS), 3.2 * len(sweeps)),
        squeeze=False,
    )  # fmt: skip
    for row, (xlabel, runs, log) in zip(axes, sweeps, strict=True):
        xs = sorted({x for x, _ in runs})
        for ax, (source, title) in zip(row, _SWEEP_PANELS, strict=True):
            for x, r in runs:
                ax.scatter([x], [figure(r, source)], color="tab:red", s=10, alpha=0.35)
            stats = [_mean_std([figure(r, source) for v, r in runs if v == x]) for x in xs]
            ax.errorbar(xs, [m for m, _ in stats], yerr=[s for _, s in stats], fmt="-o",
                        color="tab:red", capsize=3, label="bayesncl (mean ± std)")  # fmt: skip
            if ncl and source != "gate_open_rate.mean":
                m, s = _mean_std([figure(r, source) for r in ncl])
                ax.axhline(m, color="tab:green", ls="--", label=f"ncl (n={len(ncl)})")
                ax.axhspan(m - s, m + s, color="tab:green", alpha=0.12)
            if log:
                ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_title(title)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
