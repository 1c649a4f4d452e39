"""A sweep's best setting, chosen by the rule the study fixed before the sweep's runs
(docs/results.md, "The answer at 200 epochs").

Over the seeds the rule names (1-3 by default), each setting of the sweep is compared with the
reference row (NCL) seed by seed, as the benchmark's paired table compares them
(:func:`solo_bayesncl.benchmark.paired.paired_differences`):

- it is *eligible* when its converged probe is not below the reference's beyond seed noise: the
  upper end of the paired 95% t-interval of the probe's difference is above zero;
- it has *collapsed* when its gates keep fewer active dimensions than a tenth of the
  reference's (means over those seeds), or when its converged probe is below the reference's
  beyond seed noise (that upper end is below zero);
- the *best* is the eligible setting with the largest mean paired difference in class
  consistency gain.

The choice is made only once every setting of the sweep has every named seed beside the
reference; until then the table says which runs it waits for. The sweep's settings are the
methods of its preset, so a setting none of whose runs has finished yet is waited for too. ::

    python -m study.best_setting RESULTS_DIR [--seeds 1,2,3] [--methods a,b]
        [--preset NAME_OR_FILE] [--out FILE]

reads the finished runs of ``RESULTS_DIR`` (the rows of its ``results.csv`` unless
``--methods``) and the settings of the preset (``RESULTS_DIR/preset.yaml`` unless
``--preset``), writes ``RESULTS_DIR/best_setting.md`` (the rule's table, each setting's
differences seed by seed, the verdict) and prints the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.paired import paired_differences
from solo_bayesncl.benchmark.presets import PresetError, load_preset
from solo_bayesncl.benchmark.table import REFERENCE, aggregate, column_value, run_name
from solo_bayesncl.io.files import replacing
from study.folders import finished_results, folder_rows, parse_methods, results_folder_parser

__all__ = [
    "DEFAULT_SEEDS",
    "SettingVerdict",
    "best_setting",
    "main",
    "per_seed_differences",
    "setting_verdicts",
]

DEFAULT_SEEDS: tuple[int, ...] = (1, 2, 3)
"""The seeds the study's rule reads (the sweep's; the best setting's seeds 4-5 come after)."""
COLLAPSE_SHARE = 0.1
"""A setting has collapsed below this share of the reference's active dimensions."""


@dataclass(frozen=True)
class SettingVerdict:
    """One setting against the reference over the rule's seeds (module docstring)."""

    setting: str
    pairs: tuple[int, ...]
    """The rule's seeds on which both the setting and the reference finished."""
    missing: tuple[int, ...]
    """The rule's seeds on which one of them has not finished."""
    gain: dict[str, float]
    """Class consistency gain minus the reference's: ``mean``, ``low``, ``high`` (95%)."""
    probe: dict[str, float]
    """Converged probe top-1 minus the reference's (points): ``mean``, ``low``, ``high``."""
    active_dims: float
    reference_active_dims: float

    @property
    def decided(self) -> bool:
        """Every seed is there and gives an interval (two pairs at least)."""
        return not self.missing and len(self.pairs) >= 2

    @property
    def eligible(self) -> bool:
        return self.decided and self.probe["high"] > 0

    @property
    def collapsed(self) -> bool:
        too_few = self.active_dims < COLLAPSE_SHARE * self.reference_active_dims
        return self.decided and (too_few or self.probe["high"] < 0)


def _differences(paired: Sequence[dict[str, Any]], setting: str, column: str) -> dict[str, float]:
    for row in paired:
        if row["method"] == setting and row["column"] == column:
            return {"mean": row["mean_diff"], "low": row["ci_low"], "high": row["ci_high"]}
    return {"mean": math.nan, "low": math.nan, "high": math.nan}


def setting_verdicts(
    results: Sequence[dict[str, Any]],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    planned: Sequence[str] = (),
) -> list[SettingVerdict]:
    """Each setting but the reference, against it over ``seeds``: the ``planned`` ones (a
    sweep's preset's methods) in their order, each waiting for every seed until its runs finish,
    then any other row of ``results`` in the table's order. Raises ValueError when the reference
    has no finished run among ``results``."""
    chosen = [r for r in results if int(r["seed"]) in set(seeds)]
    reference_seeds = {int(r["seed"]) for r in chosen if run_name(r) == REFERENCE}
    if not any(run_name(r) == REFERENCE for r in results):
        raise ValueError(f"no finished run of the reference row {REFERENCE!r}")
    paired = paired_differences(chosen, REFERENCE, ("consistency_gain", "probe_top1"))
    rows = {row["method"]: row for row in aggregate(chosen)}
    reference_dims = rows[REFERENCE]["active_dims"] if REFERENCE in rows else math.nan
    verdicts = []
    names = dict.fromkeys([*planned, *_all_rows(results)])
    for name in (n for n in names if n != REFERENCE):
        setting_seeds = {int(r["seed"]) for r in chosen if run_name(r) == name}
        pairs = tuple(sorted(setting_seeds & reference_seeds))
        verdicts.append(
            SettingVerdict(
                setting=name,
                pairs=pairs,
                missing=tuple(s for s in sorted(set(seeds)) if s not in pairs),
                gain=_differences(paired, name, "consistency_gain"),
                probe=_differences(paired, name, "probe_top1"),
                active_dims=rows[name]["active_dims"] if name in rows else math.nan,
                reference_active_dims=reference_dims,
            )
        )
    return verdicts


def _all_rows(results: Sequence[dict[str, Any]]) -> list[str]:
    """Every row of ``results`` in the table's order, seeds aside."""
    return [row["method"] for row in aggregate(results)]


def best_setting(verdicts: Sequence[SettingVerdict]) -> SettingVerdict | None:
    """The eligible setting with the largest mean class-gain difference; None until every
    setting is decided, and when none is eligible."""
    if not verdicts or not all(v.decided for v in verdicts):
        return None
    eligible = [v for v in verdicts if v.eligible]
    return max(eligible, key=lambda v: v.gain["mean"], default=None)


def _interval(values: dict[str, float], fmt: str) -> str:
    if math.isnan(values["mean"]):
        return "-"
    mean = format(values["mean"], fmt)
    if math.isnan(values["low"]):
        return mean
    return f"{mean} [{format(values['low'], fmt)}, {format(values['high'], fmt)}]"


def _yes_no(verdict: SettingVerdict, value: bool) -> str:
    return ("yes" if value else "no") if verdict.decided else "not yet"


def verdict_line(verdicts: Sequence[SettingVerdict], seeds: Sequence[int]) -> str:
    """The choice in one line: the best setting, what the choice waits for, or none eligible."""
    waiting = [
        f"{v.setting} (seed{'s' * (len(v.missing) != 1)} {', '.join(map(str, v.missing))})"
        for v in verdicts
        if v.missing
    ]
    if not verdicts:
        return f"**Nothing to choose**: no setting beside {REFERENCE}."
    if waiting:
        return f"**Not decided yet**: waiting for {'; '.join(waiting)} beside {REFERENCE}."
    if not all(v.decided for v in verdicts):
        return (
            f"**Not decided**: one pair per setting gives no interval; the rule needs two seeds "
            f"at least (got {', '.join(map(str, seeds))})."
        )
    best = best_setting(verdicts)
    if best is None:
        return (
            f"**No setting is eligible**: every converged probe is below {REFERENCE}'s beyond "
            f"seed noise over seeds {', '.join(map(str, seeds))}."
        )
    return (
        f"**Best: {best.setting}**, class gain {best.gain['mean']:+.3f} against {REFERENCE} "
        f"(95% {best.gain['low']:+.3f} to {best.gain['high']:+.3f}), converged probe "
        f"{best.probe['mean']:+.2f} points, {best.active_dims:.0f} active dimensions against "
        f"{best.reference_active_dims:.0f}"
        + (" (collapsed by the rule)" if best.collapsed else "")
        + "."
    )


PER_SEED_COLUMNS: tuple[tuple[str, str], ...] = (
    # (column, format) of each seed's difference against the reference
    ("consistency_gain", "+.3f"),
    ("probe_top1", "+.2f"),
    ("linear_top1", "+.2f"),
    ("knn_top1", "+.2f"),
)
"""The figures whose difference :func:`per_seed_differences` gives, beside active dimensions."""


def per_seed_differences(
    results: Sequence[dict[str, Any]], setting: str, seeds: Sequence[int]
) -> list[dict[str, float]]:
    """``setting`` minus the reference on each of ``seeds`` both finished: ``seed``, each
    :data:`PER_SEED_COLUMNS` difference (``nan`` where a run lacks the figure) and the setting's
    own ``active_dims``; the rule reads their means, a reader wants to see whether one seed makes
    them."""

    def by_seed(name: str) -> dict[int, dict[str, Any]]:
        return {int(r["seed"]): r for r in results if run_name(r) == name}

    own, reference = by_seed(setting), by_seed(REFERENCE)
    rows = []
    for seed in sorted(set(own) & set(reference) & set(seeds)):
        row = {"seed": float(seed), "active_dims": column_value(own[seed], "active_dims")}
        for column, _ in PER_SEED_COLUMNS:
            row[column] = column_value(own[seed], column) - column_value(reference[seed], column)
        rows.append(row)
    return rows


def _per_seed_lines(
    results: Sequence[dict[str, Any]], verdicts: Sequence[SettingVerdict], seeds: Sequence[int]
) -> list[str]:
    lines = [
        f"Seed by seed, minus `{REFERENCE}` on the same seed (solo-learn's probe and kNN, which "
        "the rule does not read, beside):",
        "",
        "| setting | seed | class gain | converged probe (points) | solo-learn's probe (points) "
        "| kNN (points) | active dims |",
        "|---|---|---|---|---|---|---|",
    ]
    for verdict in verdicts:
        for row in per_seed_differences(results, verdict.setting, seeds):
            cells = [
                "-" if math.isnan(row[column]) else format(row[column], fmt)
                for column, fmt in PER_SEED_COLUMNS
            ]
            dims = "-" if math.isnan(row["active_dims"]) else f"{row['active_dims']:.0f}"
            lines.append(
                f"| {verdict.setting} | {row['seed']:.0f} | {' | '.join(cells)} | {dims} |"
            )
    return lines


def write_best_setting(
    verdicts: Sequence[SettingVerdict],
    seeds: Sequence[int],
    path: Path,
    results: Sequence[dict[str, Any]] = (),
) -> Path:
    """The rule, one row per setting, each setting's differences seed by seed (from
    ``results``, when given) and the verdict, as markdown at ``path``."""
    seed_text = ", ".join(map(str, seeds))
    lines = [
        "# The sweep's best setting",
        "",
        f"The rule, fixed before the runs, over seeds {seed_text}, each setting paired with "
        f"`{REFERENCE}` by seed (95% t-intervals): a setting is *eligible* when the upper end "
        "of its converged probe's interval is above zero (not below the reference beyond seed "
        "noise); it has *collapsed* when its mean active dimensions are fewer than a tenth of "
        "the reference's or that upper end is below zero; the *best* is the eligible setting "
        "with the largest mean class-gain difference. Written by "
        "`python -m study.best_setting`.",
        "",
        f"| setting | pairs | class gain - {REFERENCE} | converged probe - {REFERENCE} "
        f"(points) | active dims ({REFERENCE}'s) | eligible | collapsed |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        own = "-" if math.isnan(v.active_dims) else f"{v.active_dims:.0f}"
        dims = f"{own} ({v.reference_active_dims:.0f})"
        lines.append(
            f"| {v.setting} | {len(v.pairs)} | {_interval(v.gain, '+.3f')} | "
            f"{_interval(v.probe, '+.2f')} | {dims} | {_yes_no(v, v.eligible)} | "
            f"{_yes_no(v, v.collapsed)} |"
        )
    if results:
        lines += ["", *_per_seed_lines(results, verdicts, seeds)]
    lines += ["", verdict_line(verdicts, seeds)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _seeds(value: str) -> tuple[int, ...]:
    try:
        seeds = tuple(sorted({int(part) for part in value.split(",") if part.strip()}))
    except ValueError:
        seeds = ()
    if not seeds:
        raise ValueError(f"--seeds {value!r}: give comma-separated seed numbers, e.g. 1,2,3")
    return seeds


def _planned_settings(preset: Path | None, results_dir: Path) -> tuple[str, ...]:
    """The methods of ``preset``, else of the preset copied beside the results, else none."""
    if preset is None:
        beside = results_dir / "preset.yaml"
        if not beside.is_file():
            return ()
        preset = beside
    return tuple(load_preset(str(preset)).methods)


def main(argv: Sequence[str] | None = None) -> int:
    parser = results_folder_parser(
        "python -m study.best_setting",
        "A sweep's best setting against ncl, by the study's rule, from a results folder.",
        "best_setting.md",
    )
    parser.add_argument(
        "--preset",
        type=Path,
        help="the sweep's preset (name or file), whose methods are the settings the rule waits "
        "for (default: RESULTS_DIR/preset.yaml when it exists, else the settings with a "
        "finished run)",
    )
    parser.add_argument(
        "--seeds",
        default=",".join(map(str, DEFAULT_SEEDS)),
        help="comma-separated seeds the rule reads (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        seeds = _seeds(args.seeds)
    except ValueError as error:
        parser.error(str(error))
    try:
        planned = _planned_settings(args.preset, args.results_dir)
    except PresetError as error:
        parser.error(f"--preset: {error}")
    if args.methods:  # the rows asked for, in the preset's order where it plans them
        planned = tuple(m for m in planned if m in parse_methods(args.methods))
    results = finished_results(args.results_dir, folder_rows(args.results_dir, args.methods))
    try:
        verdicts = setting_verdicts(results, seeds, planned)
    except ValueError as error:
        raise SystemExit(f"error: {args.results_dir / 'runs'}: {error}") from None
    out = args.out or args.results_dir / "best_setting.md"
    with replacing(out, suffix=".md") as tmp:
        write_best_setting(verdicts, seeds, tmp, results)
    print(verdict_line(verdicts, seeds))
    print(f"[out]  {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
