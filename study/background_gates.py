"""What the gate does with background dimensions, over the finished runs of a results folder.

On ``fashion-mnist-scenes`` a gated method's background stage records the gate's measures of
:func:`solo_bayesncl.evaluation.background.gate_selectivity`: the background-dominated share of
``u = normalize(phi(z))``, the representation the gate reads off, and the open rates of u's
background- and class-dominated dimensions. The paper's mechanism (arXiv 2605.28441, section 3)
predicts that the gate opens the background-dominated ones less often.

    python -m study.background_gates RESULTS_DIR [--methods ncl,bayesncl] [--out FILE]

writes ``RESULTS_DIR/gates.md``: per row, mean +- std over seeds of those figures beside the
background-dominated share of the gated representation, and the paired difference *class open
rate minus background open rate* within each run, with its 95% Student-t interval over seeds.
A run recorded before these measures existed gets them from its final checkpoint, once: they
are kept beside it in ``runs/<run>/gate_measures.json`` and the run's own records are left as
they are. The gate probabilities of the two groups (:data:`PROBABILITY_KEYS`, what a noisy gate
opens with in training) came later still: a run without them gets them from its checkpoint
when the checkpoint is at hand, and shows ``-`` when it is not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.machine import git_state
from solo_bayesncl.benchmark.paired import mean_interval
from solo_bayesncl.benchmark.records import RecordsError, load_gate_measures, located
from solo_bayesncl.benchmark.table import aggregate, run_name
from solo_bayesncl.host.availability import quiet_third_party_warnings
from solo_bayesncl.io.files import replacing, write_text_replacing
from solo_bayesncl.io.json_text import finite_or_null, json_text
from study.folders import finished_runs, folder_rows, results_folder_parser

__all__ = [
    "GATE_KEYS",
    "gate_measures",
    "MEASURES_FILE",
    "PROBABILITY_KEYS",
    "main",
    "open_rate_differences",
    "with_gate_measures",
]

GATE_KEYS = (
    "ungated_background_dims_share",
    "open_rate_background_dims",
    "open_rate_class_dims",
    "open_rate_lift_correlation",
)
"""The keys :func:`gate_measures` returns that every gated scenes run has (recorded, kept or
measured)."""
PROBABILITY_KEYS = ("gate_probability_background_dims", "gate_probability_class_dims")
"""The keys it returns besides, taken from a run's checkpoint only while the checkpoint exists."""
MEASURES_FILE = "gate_measures.json"
MEASURED_AT = "gate_measured_at_commit"
"""Where a run measured afterwards records the commit of the code that measured it."""


def gate_measures(
    checkpoint: str | Path,
    batch_size: int = 256,
    num_workers: int = 2,
    device: str | None = None,
) -> dict[str, float]:
    """Only the gate's measures (``ungated_background_dims_share``, ``open_rate_*``,
    ``gate_probability_*``: :func:`solo_bayesncl.evaluation.background.gate_selectivity`) for a
    gated ``checkpoint`` on its scenes validation images: a forward pass, no probe, for runs
    recorded before these measures existed."""
    from solo_bayesncl.evaluation import background

    spec, model = background.scenes_checkpoint(checkpoint, device)
    if not hasattr(model, "gate_output"):
        raise ValueError(f"{checkpoint}: method {spec.method.name} has no gate to measure")
    val_data = background.build_val_dataset(spec.data, background.validation_transform(spec.data))
    k = int(spec.data.num_backgrounds)
    return background.gate_selectivity(model, k, val_data, batch_size, num_workers)


Measure = Callable[[Path], dict[str, float]]


def _gated(result: dict[str, Any]) -> bool:
    return result.get("gate_open_rate") is not None


def _checkpoint(run_dir: Path, result: dict[str, Any]) -> Path | None:
    """The run's final checkpoint (found inside ``run_dir`` when the folder has moved since), or
    None when it is gone."""
    recorded = result.get("checkpoint") or ""
    found = located(run_dir, recorded) if recorded else None
    return found if found is not None and found.is_file() else None


def _kept_measures(kept: Path) -> dict[str, Any]:
    """The measures kept in ``kept``; exits with one line naming it when it is not a JSON
    object (cut short, edited)."""
    try:
        return load_gate_measures(kept)
    except RecordsError as err:
        raise SystemExit(f"error: {err}") from None


def with_gate_measures(
    run_dir: Path,
    result: dict[str, Any],
    measure: Measure | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``result`` with the gate's measures in its ``background`` record: as recorded, else kept
    in ``run_dir/gate_measures.json``, else computed by ``measure`` (default
    :func:`gate_measures`) from the final checkpoint and
    kept there (``log`` says so); recorded figures win over kept ones. :data:`PROBABILITY_KEYS`
    missing from both are measured while the checkpoint exists and left out once it is gone; a
    missing checkpoint is an error only for :data:`GATE_KEYS`. Runs without a gate or off the
    scenes data are returned unchanged."""
    background = result.get("background")
    if not _gated(result) or not isinstance(background, dict):
        return result
    wanted = GATE_KEYS + PROBABILITY_KEYS
    kept = run_dir / MEASURES_FILE
    measures = _kept_measures(kept) if kept.is_file() else {}
    if not all(key in {**measures, **background} for key in wanted):
        checkpoint = _checkpoint(run_dir, result)
        if checkpoint is not None:
            if measure is None:
                measure = gate_measures
            log(f"[gate] {run_dir.name}: measuring its final checkpoint")
            measures = finite_or_null(dict(measure(checkpoint)))
            measures[MEASURED_AT] = git_state()["commit"]
            write_text_replacing(kept, json_text(measures))
    missing = [key for key in GATE_KEYS if key not in {**measures, **background}]
    if missing and not kept.is_file():
        raise SystemExit(
            f"error: {run_dir / 'result.json'}: its checkpoint {result.get('checkpoint')} is "
            "missing, so its gate measures cannot be computed"
        )
    if missing:
        raise SystemExit(f"error: {kept}: lacks {', '.join(missing)}; delete it to recompute")
    gate = {key: measures[key] for key in wanted if key in measures and key not in background}
    if not gate:
        return result
    return {**result, "background": {**background, **gate}, MEASURED_AT: measures.get(MEASURED_AT)}


def open_rate_differences(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per row, the within-run difference class open rate minus background open rate: ``mean``,
    ``std``, ``n`` and the 95% t-interval ``low``/``high`` over its seeds (NaN bounds with one)."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(run_name(r) for r in results):
        diffs = []
        for r in results:
            bg = r.get("background") or {}
            rates = (bg.get("open_rate_class_dims"), bg.get("open_rate_background_dims"))
            if run_name(r) == name and None not in rates:  # None: a group with no dimension
                diff = float(rates[0]) - float(rates[1])
                if not math.isnan(diff):
                    diffs.append(diff)
        if diffs:
            out[name] = mean_interval(diffs)
    return out


_TABLE = (
    ("bg_dims_share", "background-dominated share of v"),
    ("bg_dims_share_ungated", "... of u"),
    ("bg_dims_open_rate", "open rate, background dims"),
    ("class_dims_open_rate", "open rate, class dims"),
    ("bg_dims_gate_prob", "gate probability, background dims"),
    ("class_dims_gate_prob", "gate probability, class dims"),
)


def _cell(row: dict[str, Any], column: str) -> str:
    mean, std, n = row[column], row[f"{column}_std"], row[f"{column}_n"]
    if math.isnan(mean):
        return "-"
    cell = f"{mean:.3f} +- {std:.3f}" if n > 1 else f"{mean:.3f}"
    return cell + (f" (n={n})" if n < row["seeds"] else "")


def gates_markdown(results: Sequence[dict[str, Any]]) -> str:
    """The ``gates.md`` text for finished scenes runs carrying the gate's measures."""
    scenes = [r for r in results if isinstance(r.get("background"), dict)]
    if not scenes:
        raise SystemExit("error: no finished run on fashion-mnist-scenes: nothing to measure")
    rows = aggregate(scenes)
    differences = open_rate_differences(scenes)
    commits = sorted({str(r.get("commit", "unknown"))[:12] for r in scenes})
    later = sorted({str(r[MEASURED_AT])[:12] for r in scenes if r.get(MEASURED_AT)})
    afterwards = (
        f"; the gate measured afterwards, from the final checkpoints, at {', '.join(later)}"
        if later
        else ""
    )
    lines = [
        f"What the gate does with background dimensions: {len(scenes)} finished runs on "
        f"fashion-mnist-scenes (commits {', '.join(commits)}{afterwards}), mean +- std over "
        "seeds (`study.background_gates`).",
        "",
        "| row | seeds | " + " | ".join(title for _, title in _TABLE) + " | class - background "
        "open rate [95% interval] |",
        "|---|---:|" + "---:|" * (len(_TABLE) + 1),
    ]
    for row in rows:
        diff = differences.get(row["method"])
        if diff is None:
            paired = "-"
        elif diff["n"] > 1:
            paired = f"{diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]"
        else:
            paired = f"{diff['mean']:+.3f} (one seed)"
        cells = " | ".join(_cell(row, column) for column, _ in _TABLE)
        lines.append(f"| {row['method']} | {row['seeds']} | {cells} | {paired} |")
    lines += [
        "",
        "v is the representation the method outputs (gated for BayesNCL), u = normalize(phi(z)) "
        "what its gate reads off. A dimension is background-dominated when its above-chance "
        "background purity exceeds its above-chance class purity; its open rate is the share "
        "of the images it is active on (in u) whose gate is open, its gate probability the mean "
        "of alpha on those images (what a noisy gate opens with in training; taken from the "
        "final checkpoint, so `-` where the runs' checkpoints are gone, and `(n=...)` where "
        "only n of a row's seeds have it). A gate that closes background features, as "
        "arXiv 2605.28441 describes, has a positive class - background difference.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = results_folder_parser(
        "python -m study.background_gates",
        "What the gate does with background dimensions, from a results folder's finished "
        "fashion-mnist-scenes runs.",
        "gates.md",
    ).parse_args(argv)
    quiet_third_party_warnings()
    methods = folder_rows(args.results_dir, args.methods)
    results = []
    for run_dir, result in finished_runs(args.results_dir, methods):
        results.append(with_gate_measures(run_dir, result))
    text = gates_markdown(results)
    out = args.out or args.results_dir / "gates.md"
    with replacing(out, suffix=".md") as tmp:
        tmp.write_text(text)
    print(f"[out]  {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
