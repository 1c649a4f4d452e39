"""Every number the README's Findings and docs/results.md's summary quote is a figure the study's
records give.

The figures are recomputed here from the per-run records (``study/records/<folder>/runs/*/``)
and the folders' ``paired_differences.csv``, with the study's own functions where it has them
(``study.relative``). For each section, every figure it must quote is looked for, then every
recomputed figure, budget and label is struck from its prose: a digit left over is a number
with no record behind it, and the test names it. The tables are checked cell by cell in
``test_findings.py``.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from functools import cache
from pathlib import Path

import pytest

from solo_bayesncl.benchmark.paired import mean_interval
from solo_bayesncl.benchmark.presets import load_preset
from study import RECORDS, preset_file
from study.relative import (
    HEADLINE_COMPARISONS,
    PAPER,
    ROWS,
    Row,
    bonferroni,
    consistency_x100,
    interval,
    per_seed,
    runs,
    t_quantile,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED, PLAIN = "study_budget_200", "study_budget_fmnist_200"
PAPERS, PICK, SPARSE = "bayesncl", "bayesncl_rho0.3_kl1e-4", "bayesncl_rho0.3_kl3e-4"


def _prose(text: str) -> str:
    """``text`` without its table rows and pictures, on one line."""
    kept = [line for line in text.splitlines() if not line.startswith(("|", "!["))]
    return " ".join(" ".join(kept).split())


def _readme_findings() -> str:
    readme = (ROOT / "README.md").read_text()
    return _prose(readme.split("## Findings", 1)[1].split("\n## ", 1)[0])


def _results_summary() -> str:
    """docs/results.md up to its first table: the introduction and the answer."""
    text = (ROOT / "docs/results.md").read_text()
    return _prose(text.split("## The comparison at 200 epochs", 1)[0])


def _row(folder: str, variant: str, seeds: tuple[int, ...] = (1, 2, 3, 4, 5)) -> Row:
    (row,) = [r for r in ROWS if (r.folder, r.variant, r.seeds) == (folder, variant, seeds)]
    return row


def _percent(mean: float, low: float, high: float) -> dict[str, str]:
    """A relative figure as the docs quote it: whole, its mean alone and its interval alone."""
    whole = f"{mean:+.1f}% [{low:+.1f}, {high:+.1f}]"
    return {"whole": whole, "mean": f"{mean:+.1f}%", "interval": whole.split("% ", 1)[1]}


def _relative(row: Row, key: str, corrected: bool = False) -> dict[str, str]:
    values = per_seed(row, key)
    return _percent(*interval(values, bonferroni() if corrected else 0.975))


def _paired(folder: str, method: str, column: str) -> dict[str, float]:
    with open(RECORDS / folder / "paired_differences.csv", newline="") as handle:
        (row,) = [
            r for r in csv.DictReader(handle) if (r["method"], r["column"]) == (method, column)
        ]
    return {key: float(row[key]) for key in ("mean_diff", "std_diff", "n", "ci_low", "ci_high")}


def _difference(mean: float, low: float, high: float, decimals: int = 3) -> str:
    return f"{mean:+.{decimals}f} [{low:+.{decimals}f}, {high:+.{decimals}f}]"


def _paired_cell(folder: str, method: str, column: str, corrected: bool = False) -> str:
    d = _paired(folder, method, column)
    if not corrected:
        return _difference(d["mean_diff"], d["ci_low"], d["ci_high"])
    half = t_quantile(int(d["n"]) - 1, bonferroni()) * d["std_diff"] / math.sqrt(d["n"])
    return _difference(d["mean_diff"], d["mean_diff"] - half, d["mean_diff"] + half)


def _gain_differences(folder: str, variant: str, seeds: tuple[int, ...]) -> list[float]:
    """BayesNCL's consistency gain minus NCL's, seed by seed."""
    records = runs(folder)
    return [
        records[(variant, s)]["metrics"]["semantic_consistency_gain"]
        - records[("ncl", s)]["metrics"]["semantic_consistency_gain"]
        for s in seeds
    ]


def _gate_record(folder: str, variant: str, seed: int) -> dict[str, float]:
    """A gated run's background record with its gate measures kept beside it."""
    (run,) = (RECORDS / folder / "runs").glob(f"{variant}-seed{seed}-*/result.json")
    background = dict(json.loads(run.read_text())["background"])
    kept = run.with_name("gate_measures.json")
    return {**(json.loads(kept.read_text()) if kept.is_file() else {}), **background}


def _seeds(seeds: list[int]) -> str:
    return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"


@cache
def figures() -> dict[str, str]:
    """Every figure the two summaries quote, by name, as the records give it."""
    out: dict[str, str] = {}

    def put(name: str, parts: dict[str, str]) -> None:
        for part, text in parts.items():
            out[f"{name}.{part}"] = text

    paper_shared, paper_plain = _row(SHARED, PAPERS), _row(PLAIN, PAPERS)
    pick_shared, pick_plain = _row(SHARED, PICK), _row(PLAIN, PICK)
    raw, gain = "semantic_consistency", "semantic_consistency_gain"
    put("raw.paper.shared", _relative(paper_shared, raw))
    put("raw.paper.plain", _relative(paper_plain, raw))
    put("raw_m.paper.shared", _relative(paper_shared, raw, corrected=True))
    put("raw_m.paper.plain", _relative(paper_plain, raw, corrected=True))
    put("gain.paper.shared", _relative(paper_shared, gain))
    put("gain.paper.plain", _relative(paper_plain, gain))
    put("gain_m.paper.shared", _relative(paper_shared, gain, corrected=True))
    put("gain.pick.shared", _relative(pick_shared, gain))
    put("gain_m.pick.plain", _relative(pick_plain, gain, corrected=True))
    put("gain.pick.selection", _relative(_row(PLAIN, PICK, (1, 2, 3)), gain))
    put("gain.pick.held_out", _relative(_row(PLAIN, PICK, (4, 5)), gain))
    concrete = _row(SHARED, "bayesncl_concrete", (1, 2, 3))
    put("raw.concrete", _relative(concrete, raw))
    put("gain.concrete", _relative(concrete, gain))

    # the ratio of the five-seed means beside the mean of the per-seed ratios
    for name, row, key in (
        ("shared.gain", paper_shared, gain),
        ("plain.raw", paper_plain, raw),
        ("plain.gain", paper_plain, gain),
    ):
        records = runs(row.folder)
        ours = statistics.fmean(records[(row.variant, s)]["metrics"][key] for s in row.seeds)
        ncl = statistics.fmean(records[("ncl", s)]["metrics"][key] for s in row.seeds)
        per = statistics.fmean(per_seed(row, key))
        out[f"ratio_of_means.{name}"] = f"{100 * (ours - ncl) / ncl:+.1f}% instead of {per:+.1f}%"

    # the paper's unit: consistency x100, NCL first as the issue and the docs put it
    for name, row in (("shared", paper_shared), ("plain", paper_plain)):
        ours, ncl = consistency_x100(row)
        out[f"x100.{name}"] = f"{ncl:.1f} against BayesNCL {ours:.1f}"
        out[f"x100.{name}.plain"] = f"{ncl:.1f} against {ours:.1f}"
    for dataset, _, ncl, ours in PAPER:
        out[f"paper.{dataset}.relative"] = f"{100 * (ours - ncl) / ncl:+.1f}%"
        out[f"paper.{dataset}.ncl_first"] = f"{ncl:.2f} against {ours:.2f}"
        out[f"paper.{dataset}.ours_first"] = f"{ours:.2f} against {ncl:.2f}"

    # the class gain, paired by seed (paired_differences.csv), and its Bonferroni interval
    cg = "consistency_gain"
    out["class_gain.paper.shared"] = _paired_cell(SHARED, PAPERS, cg)
    out["class_gain_m.paper.shared"] = _paired_cell(SHARED, PAPERS, cg, corrected=True)
    out["class_gain_m.sparse.shared"] = _paired_cell(SHARED, SPARSE, cg, corrected=True)
    out["class_gain.pick.plain"] = _paired_cell(PLAIN, PICK, cg)
    out["class_gain_m.pick.plain"] = _paired_cell(PLAIN, PICK, cg, corrected=True)
    out["class_gain.pick.shared"] = _paired_cell(SHARED, PICK, cg)
    selection = mean_interval(_gain_differences(PLAIN, PICK, (1, 2, 3)))
    out["class_gain.pick.selection"] = _difference(
        selection["mean"], selection["low"], selection["high"]
    )
    held_out = {f"{d:+.3f}" for d in _gain_differences(PLAIN, PICK, (4, 5))}
    assert len(held_out) == 1, f"the held-out seeds differ: {held_out}"
    out["class_gain.pick.held_out"] = f"{held_out.pop()} each"

    # the pick's cost in converged-probe accuracy, plain Fashion-MNIST, seeds 1-5
    probe = _paired(PLAIN, PICK, "probe_top1")
    assert probe["mean_diff"] < 0
    out["probe.pick.plain.cost"] = f"{-probe['mean_diff']:.2f} points"
    out["probe.pick.plain.interval"] = f"[{probe['ci_low']:+.2f}, {probe['ci_high']:+.2f}]"

    # the t quantiles of the intervals: 95% over five seeds, and Bonferroni for six
    out["t.975"] = f"{t_quantile(4, 0.975):.2f}"
    out["t.bonferroni"] = f"{t_quantile(4, bonferroni()):.2f}"
    out["t.bonferroni.level"] = f"1 - 0.05/{2 * HEADLINE_COMPARISONS}"

    # the gate on shared backgrounds: class minus background open rate, seed by seed, and the
    # seeds whose gate probabilities were measured
    records = [_gate_record(SHARED, PAPERS, s) for s in (1, 2, 3, 4, 5)]
    diff = mean_interval(
        [r["open_rate_class_dims"] - r["open_rate_background_dims"] for r in records]
    )
    out["gate.paper.difference"] = _difference(diff["mean"], diff["low"], diff["high"])
    measured = [s for s, r in enumerate(records, 1) if "gate_probability_class_dims" in r]
    out["gate.paper.probability_seeds"] = _seeds(measured) + " only"

    # the chance floors: a dense code's label-shuffled consistency is 1 / classes; NCL's
    with open(RECORDS / SHARED / "results.csv", newline="") as handle:
        ncl = next(r for r in csv.DictReader(handle) if r["method"] == "ncl")
    out["floor.ncl.shared"] = f"{float(ncl['consistency_shuffled']):.2f} for NCL"
    out["floor.dense.10"] = f"{1 / 10:.2f}"
    out["floor.dense.100"] = f"{1 / 100:.2f}"
    return out


@cache
def budget() -> dict[str, str]:
    """The budget both summaries state, as the records and the presets give it."""
    for folder in (SHARED, PLAIN):
        for record in runs(folder).values():
            assert record["epochs"] == 200, (folder, record["variant"], record["seed"])
        (metrics,) = (RECORDS / folder / "runs").glob("ncl-seed1-*/pretrain_metrics.csv")
        with open(metrics, newline="") as handle:
            last = max(int(float(r["step"])) for r in csv.DictReader(handle) if r["step"])
        assert last + 1 == 3800, folder
    overrides = load_preset(preset_file(SHARED)).overrides
    assert "optimizer.batch_size=256" in overrides and "++data.num_backgrounds=4" in overrides
    fraction = float(next(o for o in overrides if o.startswith("data.fraction=")).split("=")[1])
    assert round(fraction * 60_000, -2) == 5000  # of Fashion-MNIST's 60,000 training images
    for variant, rho, kl in ((PICK, "0.3", "1.0e-4"), (SPARSE, "0.3", "3.0e-4")):
        assert load_preset(preset_file(SHARED)).variants[variant]["overrides"] == [
            f"method_kwargs.bayesian_prior_prob={rho}",
            f"method_kwargs.bayesian_kl_lambda={kl}",
        ]
    return {
        "epochs": "200 epochs",
        "steps": "3,800 steps of batch 256",
        "images": "5,000 images",
        "textures": "4 textures",
    }


# Labels that hold digits without being figures: names, units, settings (checked against the
# presets in ``budget``) and the seeds of each row of study.relative.
LABELS = [
    "arXiv 2605.28441",
    "arXiv 2403.12459",
    "ImageNet-100",
    "CIFAR-100",
    "CIFAR-10",
    "ResNet-18",
    "32 px",
    "x100",
    "95%",
    "0.975",  # the upper quantile of a two-sided 95% interval
    "`100 (B - N) / N`",
    "rho 0.8, lambda 3e-5",
    "rho 0.8",
    "lambda 3e-5",
    "3e-5",
    "rho 0.3, lambda 1e-4",
    "rho 0.3 with lambda 3e-4",
    "rho 0.3, lambda 3e-4",
    "seeds 1-5",
    "seeds 1-3",
    "seeds 4-5",
    "10 classes",
    "100 classes",
    "on 100",
    "with 100",
]


def _leftover(text: str, quoted: list[str]) -> list[str]:
    """The words of ``text`` that still hold a digit once ``quoted`` is struck out."""
    for phrase in sorted(set(quoted), key=len, reverse=True):
        text = text.replace(phrase, " ")
    return [word for word in text.split() if re.search(r"\d", word)]


def _check(text: str, required: list[str]) -> None:
    quoted = {**figures(), **budget()}
    missing = [name for name in required if quoted[name] not in text]
    assert not missing, [f"{name}: {quoted[name]!r}" for name in missing]
    leftover = _leftover(text, list(quoted.values()) + LABELS)
    assert not leftover, f"numbers with no record behind them: {leftover}"


README_REQUIRED = [
    "epochs",
    "images",
    "steps",
    "textures",
    "raw_m.paper.shared.whole",
    "raw_m.paper.plain.whole",
    "gain.paper.shared.whole",
    "gain_m.paper.shared.interval",
    "gain.paper.plain.whole",
    "gain_m.pick.plain.whole",
    "gain.pick.selection.mean",
    "gain.pick.held_out.mean",
    "probe.pick.plain.cost",
    "probe.pick.plain.interval",
    "gain.pick.shared.whole",
    "gate.paper.difference",
    "gate.paper.probability_seeds",
    "paper.CIFAR-10.relative",
    "paper.CIFAR-100.relative",
    "paper.ImageNet-100.relative",
    "raw.paper.plain.interval",
    "raw.paper.shared.interval",
    "floor.dense.10",
    "floor.dense.100",
    "floor.ncl.shared",
    "raw.concrete.mean",
    "gain.concrete.mean",
]

RESULTS_REQUIRED = [
    "epochs",
    "images",
    "steps",
    "paper.ImageNet-100.relative",
    "paper.ImageNet-100.ours_first",
    "paper.CIFAR-100.relative",
    "paper.CIFAR-100.ours_first",
    "paper.CIFAR-10.relative",
    "paper.CIFAR-10.ours_first",
    "raw.paper.shared.whole",
    "raw.paper.plain.whole",
    "raw_m.paper.shared.whole",
    "raw_m.paper.plain.whole",
    "gain.paper.shared.whole",
    "class_gain.paper.shared",
    "gain_m.paper.shared.whole",
    "gain.paper.plain.whole",
    "class_gain.pick.plain",
    "probe.pick.plain.cost",
    "probe.pick.plain.interval",
    "class_gain.pick.shared",
    "gate.paper.difference",
    "gate.paper.probability_seeds",
    "ratio_of_means.shared.gain",
    "ratio_of_means.plain.raw",
    "ratio_of_means.plain.gain",
    "t.975",
    "t.bonferroni",
    "t.bonferroni.level",
    "class_gain_m.paper.shared",
    "class_gain_m.sparse.shared",
    "class_gain_m.pick.plain",
    "gain_m.pick.plain.whole",
    "class_gain.pick.held_out",
    "class_gain.pick.selection",
    "floor.dense.10",
    "floor.dense.100",
    "raw.concrete.mean",
    "gain.concrete.mean",
    "x100.shared",
    "x100.plain.plain",
    "paper.ImageNet-100.ncl_first",
    "paper.CIFAR-100.ncl_first",
    "paper.CIFAR-10.ncl_first",
]


def test_every_number_in_the_readme_findings_is_a_figure_of_the_records():
    _check(_readme_findings(), README_REQUIRED)


def test_every_number_in_the_summary_of_docs_results_is_a_figure_of_the_records():
    _check(_results_summary(), RESULTS_REQUIRED)


def test_the_x100_figures_are_the_ones_the_issue_recomputed():
    """NCL 39.2 against BayesNCL 43.1 on shared backgrounds, 55.9 against 60.0 on plain
    Fashion-MNIST: the paper's setting over seeds 1-5."""
    assert figures()["x100.shared"] == "39.2 against BayesNCL 43.1"
    assert figures()["x100.plain.plain"] == "55.9 against 60.0"


def test_a_number_without_a_record_is_caught():
    text = _readme_findings()
    _check(text, README_REQUIRED)  # as it stands
    with pytest.raises(AssertionError, match="no record"):
        _check(text + " The probe moves by about 10 points between seeds.", README_REQUIRED)
    wrong = text.replace(figures()["gate.paper.difference"], "-0.008 [-0.047, +0.033]")
    with pytest.raises(AssertionError):
        _check(wrong, README_REQUIRED)


# Around the four-method table: the time and the commit the cpu preset's kept runs carry.


def _cpu_runs() -> list[dict]:
    return [json.loads(p.read_text()) for p in (RECORDS / "cpu" / "runs").glob("*/result.json")]


def test_the_cpu_tables_time_commit_and_seed_are_its_runs():
    found = _cpu_runs()
    assert sorted(r["method"] for r in found) == ["bayesncl", "mocov2plus", "ncl", "simclr"]
    minutes = sum(stage["wall_s"] for r in found for stage in r["timing"].values()) / 60
    per_epoch = sorted(r["seconds_per_epoch"] for r in found)
    commits = {r["commit"][:7] for r in found}
    assert commits == {"a6d9872"} and {r["seed"] for r in found} == {5}
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"evaluated in {minutes:.1f} min on two cores" in readme
    assert "commit `a6d9872`" in readme and "seed 5;" in readme
    comment = " ".join(
        line.lstrip("# ").strip()
        for line in (RECORDS / "cpu" / "preset.yaml").read_text().splitlines()
        if line.lstrip().startswith("#")
    )
    assert f"(seed 5, commit a6d9872) trained and were evaluated in {minutes:.1f} minutes" in (
        comment
    )
    assert f"in {per_epoch[0]:.1f}-{per_epoch[-1]:.1f} s" in comment
    assert _paired_cell(SHARED, PICK, "consistency_gain") in comment
    assert "no setting has beaten NCL" not in comment


# The rest of docs/results.md that the findings issue touched: the mechanism, the sweep, the
# budget checks and the 3-epoch study, each sentence's figures recomputed from the records.


def _results_text() -> str:
    return " ".join((ROOT / "docs/results.md").read_text().split())


def _curve(variant: str, seed: int, column: str) -> dict[int, float]:
    """A run's figure at each evaluated epoch (counted from 1), from its pretrain_metrics.csv."""
    (path,) = (RECORDS / SHARED / "runs").glob(f"{variant}-seed{seed}-*/pretrain_metrics.csv")
    with open(path, newline="") as handle:
        return {
            int(float(row["epoch"])) + 1: float(row[column])
            for row in csv.DictReader(handle)
            if row.get(column)
        }


def _results_csv(folder: str) -> dict[str, dict[str, str]]:
    with open(RECORDS / folder / "results.csv", newline="") as handle:
        return {row["method"]: row for row in csv.DictReader(handle)}


def test_the_binary_concrete_gates_figures_are_its_records():
    text = _results_text()
    gates = [_gate_record(SHARED, "bayesncl_concrete", s) for s in (1, 2, 3)]
    background = statistics.fmean(g["gate_probability_background_dims"] for g in gates)
    cls = statistics.fmean(g["gate_probability_class_dims"] for g in gates)
    assert (
        f"its gate probability is {background:.3f} on u's background-dominated dimensions and {cls:.3f}"
        in text
    )
    assert f"({1 - cls:.3f} against {1 - background:.3f})" in text
    assert 2.5 < (1 - cls) / (1 - background) < 3.5 and "about three times as often" in text
    assert "closures were not counted during training" in text
    dims = {
        variant: {
            epoch: statistics.fmean(
                _curve(variant, s, "interp/background_dims")[epoch] for s in (1, 2, 3)
            )
            for epoch in (60, 140, 200)
        }
        for variant in ("bayesncl_concrete", "ncl")
    }
    concrete, ncl = dims["bayesncl_concrete"], dims["ncl"]
    assert (
        f"go from {concrete[60]:.0f} at epoch 60 to {concrete[140]:.0f} at epoch 140 and end at "
        f"{concrete[200]:.0f}, against NCL's {ncl[200]:.0f} (means of seeds 1-3)"
    ) in text


def test_the_dropout_controls_are_one_seed_each_and_catch_up_as_quoted():
    text = _results_text()
    ncl = _curve("ncl", 1, "interp/background_consistency_gain")
    late = []
    for control in ("ncl_dimdrop", "ncl_dimdrop_early"):
        runs_kept = list((RECORDS / SHARED / "runs").glob(f"{control}-seed*-*/result.json"))
        assert [p.parent.name.split("-")[1] for p in runs_kept] == ["seed1"], control
        curve = _curve(control, 1, "interp/background_consistency_gain")
        assert curve[min(curve)] < ncl[min(curve)], f"{control} is not behind NCL early"
        late += [abs(curve[e] - ncl[e]) for e in curve if e >= 120]
    assert f"within ± {max(late):.3f} of it from epoch 120" in text
    concrete = _curve("bayesncl_concrete", 1, "interp/background_consistency_gain")
    deficit = {e: concrete[e] - ncl[e] for e in concrete}
    assert deficit[max(deficit)] < deficit[min(deficit)] < 0  # it grows
    assert "**The random-dropout controls** (seed 1 each)" in text


def test_the_sweeps_gate_figures_are_its_records():
    sweep = _results_csv("study_budget_sweep_200")
    high, paper = sweep["bayesncl_rho0.8_kl3e-4"], sweep["bayesncl"]
    opened = float(high["gates_open"])
    assert (
        f"At rho 0.8, lambda 3e-4 opens {100 * opened:.0f}% of the gates ({opened:.3f} ± "
        f"{float(high['gates_open_std']):.3f}) against {100 * float(paper['gates_open']):.0f}% at "
        "the paper's 3e-5"
    ) in _results_text()
    assert "pulls them" not in _results_text()  # an explanation no record measures


def _shorter_checks(folder: str) -> dict[str, list[str]]:
    """``budget.md``'s rows against the shorter schedule, for the paper's setting minus NCL."""
    text = (RECORDS / folder / "budget.md").read_text().split("## Against the shorter", 1)[1]
    rows = {}
    for line in text.split("## The figures themselves", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| bayesncl - ncl |"):
            rows[cells[1]] = cells
    return rows


@pytest.mark.parametrize(
    ("folder", "figures_quoted"),
    [
        (
            SHARED,
            {
                "background-dominated share of active dims": "background-dominated share",
                "active dims": "active dims",
                "converged probe top-1, class (%)": "converged probe",
                "class consistency gain": "class gain",
            },
        ),
        (PLAIN, {"class consistency gain": "class gain"}),
    ],
)
def test_the_budget_rows_quote_budget_md_over_its_two_seeds(folder, figures_quoted):
    rows = _shorter_checks(folder)
    table = _tables_of_results("check")
    (row,) = [r for r in table if f"`{folder}/budget.md`" in r[1]]
    assert row[1].startswith("seeds 1-2")
    for figure, name in figures_quoted.items():
        cells = rows[figure]
        assert cells[2] == "1 2", figure
        shorter, longer = cells[3].split(": ")[1], cells[4].split(": ")[1]
        assert f"{name} {shorter} to {longer}" in row[2], (figure, row[2])
        assert cells[6] in row[2], (figure, cells[6])
        holds = cells[7] == "yes"
        assert (f"({cells[6]}) holds" in row[2]) == holds, figure
    assert row[3] == "100 does not hold"
    assert "std 0.000" not in row[2]


def _tables_of_results(title: str) -> list[list[str]]:
    rows = []
    for line in (ROOT / "docs/results.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and (rows or cells[0] == title):
            rows.append(cells)
        elif rows:
            break
    return rows[2:]


def test_the_three_epoch_figures_are_the_first_studys_records():
    text = _results_text()
    for folder in ("study_seeds", "study_prior", "study_scenes"):
        results = _results_csv(folder)
        ncl = float(results["ncl"]["consistency_gain"])
        for method, row in results.items():
            if row["base_method"] == "bayesncl":
                assert float(row["consistency_gain"]) > ncl, (folder, method)
    scenes = _results_csv("study_scenes")
    sparse, ncl = (float(scenes[m]["consistency_gain"]) for m in (SPARSE, "ncl"))
    assert (
        f"{sparse / ncl:.1f} times NCL's on shared backgrounds ({sparse:.3f} against {ncl:.3f}"
        in text
    )
    assert "up to twice" not in text
    assert _paired_cell(SHARED, SPARSE, "consistency_gain") in text
    late = float(_results_csv(SHARED)["ncl"]["bg_consistency_gain"])
    early = float(scenes["ncl"]["bg_consistency_gain"])
    assert f"{early:.3f} after 3 epochs, {late:.3f} after 200" in text
