"""The benchmark table: one row per method (or named variant), the mean and the spread over seeds
of each figure of :data:`COLUMNS`, then the paired differences against ``ncl``
(:mod:`solo_bayesncl.benchmark.paired`)."""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from solo_bayesncl.host.registration import SUPPORTED_METHODS

__all__ = [
    "PAIRED_COLUMNS",
    "REFERENCE",
    "aggregate",
    "column_value",
    "figure",
    "machine_line",
    "row_names",
    "run_name",
    "write_csv",
    "write_markdown",
    "write_paired_csv",
]

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (column, where in a run result, format)
    ("linear_top1", "linear_top1", "{:.2f}"),
    ("probe_top1", "probe_top1", "{:.2f}"),
    ("knn_top1", "knn_top1", "{:.2f}"),
    ("semantic_consistency", "metrics.semantic_consistency", "{:.3f}"),
    ("consistency_shuffled", "metrics.semantic_consistency_shuffled", "{:.3f}"),
    ("consistency_gain", "metrics.semantic_consistency_gain", "{:.3f}"),
    ("semantic_entropy", "metrics.semantic_entropy_freq", "{:.3f}"),
    ("active_dims", "metrics.active_dims", "{:.0f}"),
    ("sparsity", "metrics.sparsity", "{:.3f}"),
    ("effective_rank", "metrics.effective_rank", "{:.1f}"),
    ("retrieval_p@1", "metrics.retrieval_p@1", "{:.3f}"),
    ("gates_open", "gate_open_rate.mean", "{:.3f}"),
    ("gates_never_open", "gate_open_rate.dims_never_open", "{:.0f}"),
    # the paper protocol (``--protocol paper``): the official evaluation's figures
    ("paper_consistency_x100", "metrics_paper.paper_semantic_consistency_x100", "{:.2f}"),
    ("paper_active_dims", "metrics_paper.paper_active_dims", "{:.0f}"),
    ("paper_sparsity", "metrics_paper.paper_sparsity", "{:.3f}"),
    ("paper_orthogonality", "metrics_paper.paper_orthogonality_mean", "{:.2e}"),
    ("paper_sv_entropy", "metrics_paper.paper_singular_value_entropy", "{:.3f}"),
    ("paper_p@1_m512", "metrics_paper.paper_retrieval_p@1_m512", "{:.3f}"),
    ("bg_consistency_gain", "background.background_consistency_gain", "{:.3f}"),
    ("bg_dims_share", "background.background_dims_share", "{:.3f}"),
    ("probe_bg_top1", "background.probe_background_top1", "{:.2f}"),
    # what a gate does with the background-dominated dimensions of what it gates
    ("bg_dims_share_ungated", "background.ungated_background_dims_share", "{:.3f}"),
    ("bg_dims_open_rate", "background.open_rate_background_dims", "{:.3f}"),
    ("class_dims_open_rate", "background.open_rate_class_dims", "{:.3f}"),
    ("bg_dims_gate_prob", "background.gate_probability_background_dims", "{:.3f}"),
    ("class_dims_gate_prob", "background.gate_probability_class_dims", "{:.3f}"),
    ("s_per_epoch", "seconds_per_epoch", "{:.1f}"),
    ("cpu_s_per_epoch", "cpu_seconds_per_epoch", "{:.1f}"),
    ("peak_memory_mb", "peak_memory_mb", "{:.0f}"),
)
PAIRED_COLUMNS: tuple[str, ...] = (
    "consistency_gain",
    "semantic_consistency",
    "linear_top1",
    "probe_top1",
    "knn_top1",
    "active_dims",
    "bg_consistency_gain",
    "bg_dims_share",
    "probe_bg_top1",
)
"""Figures whose paired difference against the reference is reported."""
_SOURCES = {column: source for column, source, _ in COLUMNS}
METHOD_ORDER = SUPPORTED_METHODS
REFERENCE = "ncl"
"""The row the paired differences are taken against."""


def run_name(result: dict[str, Any]) -> str:
    """The row a run belongs to: its variant name, or its method."""
    return str(result.get("variant") or result["method"])


def figure(result: dict[str, Any], dotted: str) -> float:
    """The figure at ``dotted`` (``metrics.active_dims``) of a run's result, ``nan`` if absent."""
    value: Any = result
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if value is not None else math.nan


def column_value(result: dict[str, Any], column: str) -> float:
    """A run's figure for one of :data:`COLUMNS` (``nan`` where the run lacks it)."""
    return figure(result, _SOURCES[column])


def row_names(results: Sequence[dict[str, Any]]) -> list[str]:
    """Row order: methods in :data:`METHOD_ORDER`, each followed by its variants as first met."""
    first: dict[str, int] = {}
    for i, r in enumerate(results):
        first.setdefault(run_name(r), i)
    base = {run_name(r): r["method"] for r in results}

    def order(name: str) -> tuple[int, int, int]:
        method = base[name]
        rank = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
        return rank, name != method, first[name]

    return sorted(first, key=order)


def aggregate(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method or variant: ``{column: mean, column + "_std": sample std over seeds
    (0 for one seed), column + "_n": how many seeds have the figure, "seeds": n, "method": name,
    "base_method": method}``."""
    rows = []
    for name in row_names(results):
        runs = [r for r in results if run_name(r) == name]
        row: dict[str, Any] = {
            "method": name,
            "base_method": runs[0]["method"],
            "seeds": len(runs),
            "seed_list": sorted(int(r["seed"]) for r in runs),
            "linear_probe": "; ".join(sorted({str(r.get("linear_probe")) for r in runs})),
        }
        for column, source, _ in COLUMNS:
            values = [v for v in (figure(r, source) for r in runs) if not math.isnan(v)]
            row[column] = statistics.fmean(values) if values else math.nan
            row[f"{column}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
            row[f"{column}_n"] = len(values)
        # wall times taken while other work loaded the machine (see benchmark.machine)
        row["wall_unreliable"] = any(r.get("wall_unreliable") for r in runs)
        loads = [r["epoch_load_mean"] for r in runs if r.get("epoch_load_mean") is not None]
        row["load_max"] = max(loads) if loads else math.nan
        row["cpu_count"] = max((r.get("cpu_count") or 0 for r in runs), default=0)
        row["threads"] = " ".join(sorted({str(r["threads"]) for r in runs if r.get("threads")}))
        rows.append(row)
    return rows


def _write_rows(path: Path, fields: Sequence[str], lines: Sequence[dict[str, Any]]) -> Path:
    """``lines`` as CSV with the columns ``fields``; a NaN is written as an empty cell."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for line in lines:
            writer.writerow(
                {k: "" if isinstance(v, float) and math.isnan(v) else v for k, v in line.items()}
            )
    return path


def write_csv(rows: Sequence[dict[str, Any]], path: Path, commit: str, date: str) -> Path:
    """The table as CSV: every column and its ``_std``; seeds space-separated."""
    fields = (
        ["method", "base_method", "seeds", "seed_list"]
        + [c for col, _, _ in COLUMNS for c in (col, f"{col}_std")]
        + ["linear_probe", "threads", "wall_unreliable", "commit", "date"]
    )
    lines = [
        {
            **{k: row.get(k) for k in fields},
            "seed_list": " ".join(map(str, row.get("seed_list", []))),
            "commit": commit,
            "date": date,
        }
        for row in rows
    ]
    return _write_rows(path, fields, lines)


def write_paired_csv(paired: Sequence[dict[str, Any]], path: Path, commit: str) -> Path:
    """The paired differences as CSV, one line per (method, column)."""
    fields = ["method", "reference", "column", "n", "seeds", "mean_diff", "std_diff"]
    fields += ["ci_low", "ci_high", "commit"]
    return _write_rows(path, fields, [{**line, "commit": commit} for line in paired])


def _number(fmt: str, value: float) -> str:
    """A figure written with ``fmt``, no sign on one that rounds to zero (-1e-17 reads 0.000);
    paired intervals keep it (``_signed``), to say on which side of zero an end lies."""
    return fmt.replace("{:", "{:z", 1).format(value)


def _signed(fmt: str, value: float) -> str:
    text = fmt.format(value)
    return text if text.startswith("-") else "+" + text


def paired_markdown(paired: Sequence[dict[str, Any]]) -> list[str]:
    """The paired differences as Markdown, ``mean [95% CI]``, ``*`` when the interval excludes
    0; a difference the same on every pair is ``(no spread)``, unmarked."""
    if not paired:
        return []
    fmts = {c: f for c, _, f in COLUMNS}
    columns = [c for c in PAIRED_COLUMNS if any(p["column"] == c for p in paired)]
    names = list(dict.fromkeys(p["method"] for p in paired))
    reference = paired[0]["reference"]
    lines = [
        f"Paired differences against `{reference}` on the same seeds: mean [95% t-interval]; "
        "`*` when the interval excludes 0; `(no spread)`: the same on every pair, so no interval.",
        "",
        "| method - " + reference + " | pairs | " + " | ".join(columns) + " |",
        "|" + "---|" * (len(columns) + 2),
    ]
    for name in names:
        cells, pairs = [], 0
        for column in columns:
            line = next((p for p in paired if p["method"] == name and p["column"] == column), None)
            if line is None:
                cells.append("n/a")
                continue
            pairs = max(pairs, line["n"])
            fmt = fmts[column]
            cell = _signed(fmt, line["mean_diff"])
            if line["n"] >= 2 and line["std_diff"] <= 1e-9 * max(1.0, abs(line["mean_diff"])):
                cell += " (no spread)"
            elif not math.isnan(line["ci_low"]):
                cell += f" [{_signed(fmt, line['ci_low'])}, {_signed(fmt, line['ci_high'])}]"
                if line["ci_low"] > 0 or line["ci_high"] < 0:
                    cell += " *"
            cells.append(cell)
        lines.append(f"| {name} | {pairs} | " + " | ".join(cells) + " |")
    return lines


_COLUMN_NOTES: tuple[tuple[Callable[[str], bool], str], ...] = (
    # (which columns bring the note, the note), in the order written under the table
    (
        lambda c: c.startswith("paper_"),
        "`paper_*` columns: the official BayesNCL evaluation (`--protocol paper`: BatchNorm "
        "in training mode over the unshuffled validation set, consistency x100, "
        "orthogonality divided by d twice, singular-value entropy on one training batch, "
        "P@1 of the signed-sum ranking with m = 512 dimensions); the other columns are the "
        "standard protocol (eval-mode BatchNorm). See docs/fidelity.md.",
    ),
    (
        lambda c: c.startswith(("bg_", "probe_")),
        "Background measures (fashion-mnist-scenes): `bg_consistency_gain` is the "
        "consistency gain against the background labels, `bg_dims_share` the share of "
        "active dimensions more background-pure than class-pure (above chance), "
        "`probe_bg_top1` the converged linear probe on frozen backbone features for the "
        "background label (`probe_top1` is the same probe for the class).",
    ),
    (
        lambda c: c.endswith(("_ungated", "_open_rate", "_gate_prob")),
        "The gate (gated methods on fashion-mnist-scenes): `bg_dims_share_ungated` is "
        "`bg_dims_share` read on `u = normalize(phi(z))`, what the gate reads off; "
        "`bg_dims_open_rate` and `class_dims_open_rate` the mean share of open gates of "
        "u's background- and class-dominated dimensions on the images each is active on, "
        "`bg_dims_gate_prob` and `class_dims_gate_prob` the mean gate probability alpha "
        "there (a noisy gate opens with it in training). A gate that closes background "
        "features opens the first less often.",
    ),
    (
        lambda c: c == "probe_top1",
        "`probe_top1`: a logistic regression fitted to convergence (L-BFGS) on the frozen "
        "backbone features of the un-augmented training images, read on the validation "
        "images (`interpretability.probe`); `linear_top1` is solo-learn's offline probe "
        "with the preset's epochs.",
    ),
)


def machine_line(rows: Sequence[dict[str, Any]]) -> str:
    """The threads every run trained with and the machine's cores."""
    counts = sorted({c for row in rows for c in str(row.get("threads") or "").split()}, key=int)
    cores = max((row.get("cpu_count") or 0 for row in rows), default=0)
    on = f" on a machine of {cores} cores" if cores else ""
    if not counts:
        return f"Machine: the runs recorded no thread count{on}."
    if len(counts) == 1:
        plural = "s" * (counts[0] != "1")
        return f"Machine: every run trained on {counts[0]} CPU thread{plural} (`threads`){on}."
    return (
        f"Machine: the runs trained on {' and '.join(counts)} CPU threads (`threads`){on}; "
        "figures of different counts differ by more than rounding."
    )


def write_markdown(
    rows: Sequence[dict[str, Any]],
    path: Path,
    preset: str,
    commit: str,
    date: str,
    paired: Sequence[dict[str, Any]] = (),
    missing: Sequence[str] = (),
    unreadable: Sequence[str] = (),
) -> Path:
    """The table as Markdown (``mean ± std`` over seeds), the runs not finished or ``unreadable``,
    then the paired differences."""
    columns = [c for c in COLUMNS if any(not math.isnan(row[c[0]]) for row in rows)]
    header = ["method", "seeds"] + [c for c, _, _ in columns]
    lines = [
        f"Benchmark preset `{preset}`, commit `{commit}`, {date}.",
        "",
        machine_line(rows),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells = [row["method"], str(row["seeds"])]
        for column, _, fmt in columns:
            value = row[column]
            cell = "n/a" if math.isnan(value) else _number(fmt, value)
            n = row.get(f"{column}_n", row["seeds"])
            if n > 1 and not math.isnan(value):
                cell += " ± " + _number(fmt, row[f"{column}_std"])
            if 0 < n < row["seeds"]:
                cell += f" (n={n})"
            if column == "s_per_epoch" and row.get("wall_unreliable"):
                cell += " †"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Linear and kNN top-1 in %, on backbone features (solo-learn's LinearModel and "
        "WeightedKNNClassifier). Consistency is read beside its label-shuffled baseline: "
        "`consistency_gain` = consistency - shuffled, which is what compares methods. "
        "With several seeds a cell is mean ± sample standard deviation over the seeds "
        "(over n of them where only n have the figure). "
        "`s_per_epoch` is wall time, `cpu_s_per_epoch` the CPU time of the run's process and "
        "its data workers.",
    ]
    if any(c[0] == "gates_open" for c in columns):
        lines += [
            "",
            "`gates_open`: share of (image, dimension) gates open on the validation set; "
            "`gates_never_open`: dimensions whose gate is closed on every validation image.",
        ]
    flagged = [row for row in rows if row.get("wall_unreliable")]
    if flagged:
        load = max(row["load_max"] for row in flagged)
        lines.append(
            f"† wall time measured while other work loaded the machine (mean 1-minute load up "
            f"to {load:.1f} on {max(row['cpu_count'] for row in flagged)} cores): compare "
            "`cpu_s_per_epoch` instead."
        )
    probes = sorted({row.get("linear_probe") or "None" for row in rows})
    lines += ["", "Linear probe: " + "; ".join(f"`{p}`" for p in probes) + "."]
    for applies, note in _COLUMN_NOTES:
        if any(applies(c[0]) for c in columns):
            lines += ["", note]
    if missing:
        lines += [
            "",
            f"Not finished yet, so in no figure above ({len(missing)} run{'s' * (len(missing) != 1)}): "
            + ", ".join(missing)
            + ". The same benchmark command resumes them.",
        ]
    if unreadable:
        lines += ["", f"Unreadable, so in no figure above: {'; '.join(unreadable)}."]
    paired_lines = paired_markdown(paired)
    if paired_lines:
        lines += ["", *paired_lines]
    path.write_text("\n".join(lines) + "\n")
    return path
