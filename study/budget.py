"""Where the study's budget curves stop moving: the budget at which a finding is read.

The interpretability callback logs, every few epochs of one long run per setting and seed, the
figures the study compares (:data:`~solo_bayesncl.benchmark.curves.BUDGET_FIGURES`). A figure of a setting has *flattened* at
epoch ``E`` when, at ``E`` and at every later logged epoch ``E'``, the change of its mean over
seeds across the last ``window`` epochs, ``|m(E') - m(E' - window)|``, is smaller than the seeds'
sample standard deviation at ``E'``: from ``E`` on, training longer moves it less than changing
the seed does. The study's budget is the latest such epoch over every figure and setting, the
first epoch by which every curve has stopped moving beyond seed noise; with a figure still
moving at the last epoch there is none, and the runs need to be longer. The rule needs at least
two seeds per setting.

A finding is a difference between settings, so the same rule is also applied to the paired
differences against the reference row (``ncl``): per seed, a setting's figure minus the
reference's on the same seed, at the same epoch. The *comparison's* budget, the one at which a
finding is read, is where every difference has flattened; the figures themselves may still rise
together past it.

A curve read within one run also flattens because the learning rate's cosine reaches zero at
its last epoch. The check of a budget is therefore a longer schedule of the same settings: a
difference found at the shorter budget *holds* when, on the seeds both schedules ran, the longer
one's last epoch moves it by less than its standard deviation over the shorter runs' seeds
(:func:`schedule_checks`).

The window is 10 epochs by default, rounded up to a whole number of the intervals between the
callback's evaluations (20 for a run evaluated every 20 epochs): a change is always measured
between two logged epochs (:func:`change_window`).

    python -m study.budget RESULTS_DIR [--methods ncl,bayesncl] [--window 10]
        [--shorter SHORT_RESULTS_DIR]

reads the finished runs under ``RESULTS_DIR/runs`` (by default the rows and seeds of the
folder's ``results.csv``) and writes ``RESULTS_DIR/budget.md``, with
``--shorter`` also the check of the shorter schedule's differences against these longer runs.
The benchmark draws the same curves in ``budget_curves.png`` beside its table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.curves import BUDGET_FIGURES, epoch_series
from solo_bayesncl.benchmark.table import REFERENCE, run_name
from solo_bayesncl.io.files import replacing
from study.folders import finished_results, folder_rows, results_folder_parser

__all__ = [
    "FigureBudget",
    "ScheduleCheck",
    "budget_curves",
    "difference_curves",
    "figure_budgets",
    "main",
    "schedule_checks",
    "study_budget",
    "write_budget",
]

Curves = dict[str, dict[str, dict[int, dict[int, float]]]]
"""``curves[column][setting][seed][epoch]``: a logged figure of one run at one (1-based) epoch."""


def budget_curves(
    results: Sequence[dict[str, Any]], columns: Sequence[str] = tuple(c for c, _ in BUDGET_FIGURES)
) -> Curves:
    """Every run's logged figures, by column, setting and seed; a column no run logged is
    absent."""
    curves: Curves = {}
    for result in results:
        csv_path = Path(result.get("pretrain_metrics_csv", ""))
        if not csv_path.is_file():
            continue
        for column in columns:
            epochs, values = epoch_series(csv_path, column)
            if epochs:
                setting = curves.setdefault(column, {}).setdefault(run_name(result), {})
                setting[int(result["seed"])] = dict(zip(epochs, values, strict=True))
    return curves


def difference_curves(curves: Curves, reference: str = REFERENCE) -> Curves:
    """``setting - reference`` for every other setting and figure both logged: per seed the
    two runs share, at the epochs both logged (a paired difference, as in the paired table)."""
    differences: Curves = {}
    for column, settings in curves.items():
        base = settings.get(reference)
        if base is None:
            continue
        for setting, seeds in settings.items():
            if setting == reference:
                continue
            paired = {
                seed: {e: points[e] - base[seed][e] for e in points if e in base[seed]}
                for seed, points in seeds.items()
                if seed in base
            }
            paired = {seed: points for seed, points in paired.items() if points}
            if paired:
                differences.setdefault(column, {})[f"{setting} - {reference}"] = paired
    return differences


@dataclass(frozen=True)
class FigureBudget:
    """Where one figure of one setting stops moving.

    Attributes:
        setting: the benchmark row (variant or method).
        column: the ``metrics.csv`` column.
        seeds: how many seeds logged it.
        last_epoch: the last epoch every seed logged.
        mean, std: its mean and sample standard deviation over seeds at ``last_epoch``.
        last_change: ``m(last_epoch) - m(last_epoch - window)`` (NaN without that epoch).
        flat_from: the epoch from which it has flattened, or None: still moving at
            ``last_epoch``, or fewer than two seeds.
    """

    setting: str
    column: str
    seeds: int
    last_epoch: int
    mean: float
    std: float
    last_change: float
    flat_from: int | None


def _flat(change: float, std: float) -> bool:
    # a curve that does not move at all is flat even when the seeds agree exactly
    return change == 0.0 or abs(change) < std


DEFAULT_WINDOW = 10


def evaluation_interval(curves: Curves) -> int | None:
    """The epochs between two evaluations of the callback: the smallest gap between two
    consecutive logged epochs of any curve (None when no curve logged two)."""
    gaps = {
        later - earlier
        for settings in curves.values()
        for seeds in settings.values()
        for points in seeds.values()
        for earlier, later in zip(sorted(points), sorted(points)[1:], strict=False)
    }
    return min(gaps) if gaps else None


def change_window(curves: Curves, window: int | None = None) -> int:
    """The epochs a change is measured over: ``window``, or :data:`DEFAULT_WINDOW` rounded up to
    a whole number of :func:`evaluation_interval`; a ``window`` that is not such a whole number
    is refused, since no change over it could be measured."""
    interval = evaluation_interval(curves)
    if window is None:
        return (
            DEFAULT_WINDOW if interval is None else interval * math.ceil(DEFAULT_WINDOW / interval)
        )
    if window < 1:
        raise ValueError(f"window={window} must be a positive number of epochs")
    if interval is not None and window % interval:
        raise ValueError(
            f"window={window} is not a multiple of the {interval} epochs between two evaluations "
            "of the callback: no change over it can be measured"
        )
    return window


def figure_budgets(curves: Curves, window: int | None = None) -> list[FigureBudget]:
    """:class:`FigureBudget` of every figure and setting in ``curves``, at the epochs every
    seed of the setting logged, a change measured over :func:`change_window` epochs."""
    window = change_window(curves, window)
    budgets = []
    for column, settings in curves.items():
        for setting, seeds in settings.items():
            epochs = sorted(set.intersection(*(set(points) for points in seeds.values())))
            if not epochs:
                continue
            mean = {e: statistics.fmean(s[e] for s in seeds.values()) for e in epochs}
            std = {
                e: statistics.stdev(s[e] for s in seeds.values()) if len(seeds) > 1 else math.nan
                for e in epochs
            }
            change = {e: mean[e] - mean[e - window] for e in epochs if e - window in mean}
            flat_from = None
            if len(seeds) > 1 and change:
                for epoch in reversed(sorted(change)):
                    if not _flat(change[epoch], std[epoch]):
                        break
                    flat_from = epoch
            last = epochs[-1]
            budgets.append(
                FigureBudget(
                    setting=setting,
                    column=column,
                    seeds=len(seeds),
                    last_epoch=last,
                    mean=mean[last],
                    std=std[last],
                    last_change=change.get(last, math.nan),
                    flat_from=flat_from,
                )
            )
    return budgets


@dataclass(frozen=True)
class ScheduleCheck:
    """One difference against the reference, at the end of a shorter and of a longer schedule.

    Attributes:
        setting: ``"<row> - <reference>"``.
        column: the ``metrics.csv`` column.
        seeds: the seeds both schedules ran.
        short_epoch, long_epoch: the last epoch each schedule logged on those seeds.
        short_mean, long_mean: the difference's mean over ``seeds`` there.
        short_std: its sample std over every seed of the shorter schedule (NaN with one): the
            seed noise a change is measured against.
    """

    setting: str
    column: str
    seeds: tuple[int, ...]
    short_epoch: int
    long_epoch: int
    short_mean: float
    long_mean: float
    short_std: float

    @property
    def change(self) -> float:
        return self.long_mean - self.short_mean

    @property
    def holds(self) -> bool | None:
        """Whether the longer schedule moved the difference by less than seed noise (None:
        no seed noise to compare with)."""
        return None if math.isnan(self.short_std) else _flat(self.change, self.short_std)


def _last(points_by_seed: dict[int, dict[int, float]]) -> tuple[int, dict[int, float]]:
    """The last epoch every seed logged, and each seed's value there."""
    epochs = set.intersection(*(set(points) for points in points_by_seed.values()))
    if not epochs:
        return 0, {}
    last = max(epochs)
    return last, {seed: points[last] for seed, points in points_by_seed.items()}


def schedule_checks(short: Curves, long: Curves, reference: str = REFERENCE) -> list[ScheduleCheck]:
    """:class:`ScheduleCheck` of every difference against ``reference`` that both the shorter
    (``short``) and the longer (``long``) schedule's curves have, on the seeds both ran."""
    short_diff, long_diff = difference_curves(short, reference), difference_curves(long, reference)
    checks = []
    for column, settings in long_diff.items():
        for setting, long_seeds in settings.items():
            short_seeds = short_diff.get(column, {}).get(setting)
            if not short_seeds:
                continue
            short_epoch, short_last = _last(short_seeds)
            long_epoch, long_last = _last(long_seeds)
            seeds = tuple(sorted(set(short_last) & set(long_last)))
            if not seeds:
                continue
            noise = list(short_last.values())
            checks.append(
                ScheduleCheck(
                    setting=setting,
                    column=column,
                    seeds=seeds,
                    short_epoch=short_epoch,
                    long_epoch=long_epoch,
                    short_mean=statistics.fmean(short_last[s] for s in seeds),
                    long_mean=statistics.fmean(long_last[s] for s in seeds),
                    short_std=statistics.stdev(noise) if len(noise) > 1 else math.nan,
                )
            )
    order = {c: i for i, (c, _) in enumerate(BUDGET_FIGURES)}
    return sorted(checks, key=lambda c: (c.setting, order.get(c.column, len(order))))


def _schedule_section(checks: Sequence[ScheduleCheck], shorter: str) -> list[str]:
    moved = [c for c in checks if c.holds is False]
    unjudged = [c for c in checks if c.holds is None]
    if moved:
        listed = ", ".join(f"{_title(c.column)} of {c.setting}" for c in moved)
        verdict = f"**The shorter budget does not hold**: the longer schedule moved {listed}."
    elif unjudged:
        verdict = "**Not judged**: the shorter schedule needs two seeds or more for seed noise."
    else:
        verdict = (
            "**The shorter budget holds**: the longer schedule moved every difference by less "
            "than its seed noise."
        )
    lines = [
        f"## Against the shorter schedule ({shorter})",
        "",
        verdict,
        "",
        "| setting | figure | seeds | shorter: epoch, mean | longer: epoch, mean | change | "
        "seed std, shorter | holds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        std = "n/a" if math.isnan(c.short_std) else _number(c.short_std, c.column)
        holds = {True: "yes", False: "**no**", None: "n/a"}[c.holds]
        lines.append(
            f"| {c.setting} | {_title(c.column)} | {' '.join(map(str, c.seeds))} | "
            f"{c.short_epoch}: {_number(c.short_mean, c.column)} | "
            f"{c.long_epoch}: {_number(c.long_mean, c.column)} | {c.change:+.4f} | {std} | "
            f"{holds} |"
        )
    return lines


def study_budget(budgets: Sequence[FigureBudget]) -> int | None:
    """The first epoch by which every figure of every setting has flattened; None when one is
    still moving or has fewer than two seeds (or there is nothing to judge)."""
    if not budgets or any(b.flat_from is None for b in budgets):
        return None
    return max(b.flat_from for b in budgets)  # type: ignore[type-var]


def _title(column: str) -> str:
    return dict(BUDGET_FIGURES).get(column, column)


def _verdict(budgets: Sequence[FigureBudget], window: int, what: str = "figure") -> str:
    """One line: the budget at which every ``what`` has flattened, or what is missing."""
    budget = study_budget(budgets)
    if budget is not None:
        return (
            f"**Budget: epoch {budget}.** From there on every {what} moves less over {window} "
            "epochs than between seeds."
        )
    few = sorted({b.setting for b in budgets if b.seeds < 2})
    moving = [b for b in budgets if b.seeds >= 2 and b.flat_from is None]
    parts = []
    if few:
        parts.append(f"fewer than two seeds: {', '.join(few)}")
    if moving:
        listed = ", ".join(f"{_title(b.column)} of {b.setting}" for b in moving)
        parts.append(f"still moving at the last epoch: {listed}")
    return "**No budget yet** (" + "; ".join(parts) + ")."


def _number(value: float, column: str) -> str:
    if math.isnan(value):
        return "n/a"
    if "top1" in column:
        return f"{value:.2f}"
    if column.endswith("active_dims"):
        return f"{value:.1f}"
    return f"{value:.4f}"


def _rows(budgets: Sequence[FigureBudget], window: int) -> list[str]:
    lines = [
        f"| setting | figure | seeds | last epoch | mean ± std there | change over the last "
        f"{window} epochs | flattened from |",
        "|---|---|---|---|---|---|---|",
    ]
    order = {c: i for i, (c, _) in enumerate(BUDGET_FIGURES)}
    for b in sorted(budgets, key=lambda b: (b.setting, order.get(b.column, len(order)))):
        flat = (
            f"epoch {b.flat_from}"
            if b.flat_from is not None
            else ("1 seed" if b.seeds < 2 else "still moving")
        )
        change = "n/a" if math.isnan(b.last_change) else f"{b.last_change:+.4f}"
        spread = "" if math.isnan(b.std) else f" ± {_number(b.std, b.column)}"
        lines.append(
            f"| {b.setting} | {_title(b.column)} | {b.seeds} | {b.last_epoch} | "
            f"{_number(b.mean, b.column)}{spread} | {change} | {flat} |"
        )
    return lines


def write_budget(
    results: Sequence[dict[str, Any]],
    path: Path,
    window: int | None = None,
    reference: str = REFERENCE,
    shorter: tuple[str, Sequence[dict[str, Any]]] | None = None,
) -> Path | None:
    """``budget.md``: where each paired difference against ``reference`` and each figure of each
    setting flattened, and the budgets that follow; with ``shorter`` (a name and the results of
    a shorter schedule of the same settings) also :func:`schedule_checks` against it. None
    (nothing written) when no run logged a budget figure."""
    curves = budget_curves(results)
    window = change_window(curves, window)
    budgets = figure_budgets(curves, window)
    if not budgets:
        return None
    differences = figure_budgets(difference_curves(curves, reference), window)
    commits = sorted({str(r.get("commit", "unknown"))[:12] for r in results})
    lines = [
        f"Budget curves of {len({(run_name(r), r['seed']) for r in results})} finished runs "
        f"(commits {', '.join(commits)}): a curve has flattened at epoch E when, from E on, its "
        f"mean over seeds changes over {window} epochs by less than the seeds' standard "
        "deviation (`study.budget`).",
        "",
    ]
    if differences:
        lines += [
            f"## The comparison: paired differences against {reference}",
            "",
            _verdict(differences, window, f"difference against {reference}"),
            "",
            *_rows(differences, window),
            "",
        ]
    if shorter is not None:
        checks = schedule_checks(budget_curves(shorter[1]), curves, reference)
        lines += [*_schedule_section(checks, shorter[0]), ""]
    lines += [
        "## The figures themselves",
        "",
        _verdict(budgets, window),
        "",
        *_rows(budgets, window),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = results_folder_parser(
        "python -m study.budget",
        "Where a study's budget curves stop moving, from a results folder's finished runs.",
        "budget.md",
    )
    parser.add_argument(
        "--window",
        type=int,
        help=f"epochs of a change, a multiple of the interval between the callback's evaluations "
        f"(default {DEFAULT_WINDOW}, rounded up to such a multiple)",
    )
    parser.add_argument(
        "--shorter",
        type=Path,
        help="the results folder of a shorter schedule of the same settings: check that its "
        "differences against ncl hold in these longer runs",
    )
    args = parser.parse_args(argv)
    methods = folder_rows(args.results_dir, args.methods)
    results = finished_results(args.results_dir, methods)
    curves = budget_curves(results)
    try:
        window = change_window(curves, args.window)
    except ValueError as error:
        parser.error(f"--{error}")
    budgets = figure_budgets(curves, window)
    if not budgets:
        raise SystemExit(
            f"error: no finished run in {args.results_dir / 'runs'} logged a budget figure "
            "(the interpretability callback with interpretability.probe=True logs them)"
        )
    shorter = None
    if args.shorter is not None:
        shorter_rows = folder_rows(args.shorter, args.methods)
        shorter = (args.shorter.name, finished_results(args.shorter, shorter_rows))
        if not schedule_checks(budget_curves(shorter[1]), curves):
            raise SystemExit(
                f"error: --shorter {args.shorter}: no difference against {REFERENCE} on a seed "
                f"that {args.results_dir} also ran"
            )
    out = args.out or args.results_dir / "budget.md"
    with replacing(out, suffix=".md") as tmp:
        write_budget(results, tmp, window, shorter=shorter)
    differences = figure_budgets(difference_curves(curves), window)
    if differences:
        print("comparison: " + _verdict(differences, window, f"difference against {REFERENCE}"))
    if shorter is not None:
        checks = schedule_checks(budget_curves(shorter[1]), curves)
        print("shorter schedule: " + _schedule_section(checks, shorter[0])[2])
    print("figures: " + _verdict(budgets, window))
    print(f"[out]  {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
