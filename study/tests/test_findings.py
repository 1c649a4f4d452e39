"""The README's and docs/results.md's tables say what the study's records hold.

docs/results.md's comparison tables are written by hand from each folder's
``paired_differences.csv`` (BayesNCL minus NCL, paired by seed) and ``results.csv`` (each
setting's mean and spread over its seeds); the README's four-method table from the ``cpu``
folder's ``results.csv``; the README's findings table by ``python -m study.relative`` from the
runs' ``result.json``. These tests read the tables back and recompute every cell, so a figure
copied wrong, or left behind when a later seed changes the folder, fails here.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A table's title cell names its dataset; its column headers name the setting.
FOLDERS = {
    "shared backgrounds": "study/records/study_budget_200",
    "plain Fashion-MNIST": "study/records/study_budget_fmnist_200",
}
SETTINGS = {
    "official (rho 0.8, lambda 3e-5)": "bayesncl",
    "rho 0.3, lambda 3e-4": "bayesncl_rho0.3_kl3e-4",
    "the sweep's pick (rho 0.3, lambda 1e-4)": "bayesncl_rho0.3_kl1e-4",
}
NUMBER = r"[+-]?\d+(?:\.\d+)?"
CELL = re.compile(
    rf"^(?P<mean>{NUMBER})(?: ± (?P<std>{NUMBER}))? \[(?P<low>{NUMBER}), (?P<high>{NUMBER})\]"
    r"(?P<star> \*)?$"
)


def _tables(document: str, title: str) -> list[list[list[str]]]:
    """Every Markdown table of ``document`` whose title cell starts with ``title``, less its rule."""
    tables, rows = [], []
    for line in (ROOT / document).read_text().splitlines() + [""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        else:
            if rows and rows[0][0].startswith(title):
                tables.append([rows[0]] + rows[2:])
            rows = []
    return tables


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _assert_rounds_to(text: str, value: float, where: str) -> None:
    assert abs(float(text) - value) <= 0.5 * 10 ** -_decimals(text) + 1e-9, (
        f"{where}: the table says {text}, the results give {value:.6g}"
    )


def _paired(folder: str) -> dict[tuple[str, str], dict[str, str]]:
    with open(ROOT / folder / "paired_differences.csv", newline="") as handle:
        return {(row["method"], row["column"]): row for row in csv.DictReader(handle)}


def _means(folder: str) -> dict[str, dict[str, str]]:
    with open(ROOT / folder / "results.csv", newline="") as handle:
        return {row["method"]: row for row in csv.DictReader(handle)}


def _assert_paired_cell(text: str, record: dict[str, str], where: str) -> None:
    """The cell's mean and 95% interval, the interval from the exact t quantile (the csv's
    bounds used a table's three decimals)."""
    from study.relative import t_quantile

    match = CELL.match(text)
    assert match, f"{where}: cannot read {text!r}"
    mean, std, n = (float(record[key]) for key in ("mean_diff", "std_diff", "n"))
    half = t_quantile(int(n) - 1, 0.975) * std / math.sqrt(n)
    _assert_rounds_to(match["mean"], mean, where)
    if match["std"] is not None:
        _assert_rounds_to(match["std"], std, where)
    _assert_rounds_to(match["low"], mean - half, where)
    _assert_rounds_to(match["high"], mean + half, where)
    excludes_zero = mean - half > 0 or mean + half < 0
    assert (match["star"] is not None) == excludes_zero, f"{where}: the star"


# The gate: how much more often it opens u's class-dominated dimensions than its
# background-dominated ones, each setting's own difference over its seeds (``gates.md``), as
# docs/results.md quotes it beside the two open rates.
GATE_QUOTES = {
    "bayesncl": "(open rate {background} and {cls}, difference {difference})",
    "bayesncl_rho0.3_kl1e-4": "({background} against {cls}, {difference})",
}


def test_the_gate_figures_in_docs_results_are_what_gates_md_holds():
    table = _tables("study/records/study_budget_200/gates.md", "row")[0]
    rows = {row[0]: row for row in table[1:]}
    text = " ".join((ROOT / "docs/results.md").read_text().split())
    for method, quote in GATE_QUOTES.items():
        row = rows[method]
        assert row[1] == "5", f"{method}: gates.md has {row[1]} seeds"
        figures = {
            "background": row[4].split(" +- ")[0],
            "cls": row[5].split(" +- ")[0],
            "difference": row[-1],
        }
        assert quote.format(**figures) in text, f"{method}: {quote.format(**figures)}"


# The README's findings: one table of BayesNCL's consistency relative to NCL's, written by
# ``python -m study.relative`` (study/tests/test_relative.py recomputes its cells independently).
README_FINDINGS = _tables("README.md", "dataset (classes), 200 epochs")


def test_the_readme_has_one_findings_table_with_both_datasets_and_the_papers_figures():
    assert len(README_FINDINGS) == 1, "the README's Findings are one table"
    datasets = {row[0] for row in README_FINDINGS[0][1:]}
    for dataset in FOLDERS:
        assert f"{dataset} (10)" in datasets, f"no README findings row for {dataset}"
    for paper in ("ImageNet-100", "CIFAR-100", "CIFAR-10"):
        assert any(paper in name for name in datasets), paper


def test_every_cell_of_the_readme_findings_is_what_the_records_give():
    from study.relative import table

    lines = [line for line in table().splitlines() if line.startswith("|")]
    written = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    expected = [written[0]] + written[2:]
    assert README_FINDINGS[0] == expected


def test_the_kept_relative_table_is_what_the_records_give():
    from study.relative import table

    kept = (ROOT / "study/records/relative.md").read_text()
    assert kept.endswith(table()), "rerun python -m study.relative"


# The README's side-by-side table of the four methods: the cpu preset's kept results.
CPU_COLUMNS = {
    "linear top-1": "linear_top1",
    "kNN top-1": "knn_top1",
    "semantic consistency": "semantic_consistency",
    "label-shuffled": "consistency_shuffled",
    "consistency gain": "consistency_gain",
    "active dims (of 256)": "active_dims",
    "s per epoch": "s_per_epoch",
}


def test_the_readme_four_method_table_is_the_cpu_presets_kept_table():
    (four,) = _tables("README.md", "method")[:1]
    header, body = four[0], four[1:]
    assert [row[0] for row in body] == ["simclr", "mocov2plus", "ncl", "bayesncl"]
    means = _means("study/records/cpu")
    checked = 0
    for row in body:
        for column, title in enumerate(header[1:], start=1):
            name = CPU_COLUMNS[title]
            _assert_rounds_to(row[column], float(means[row[0]][name]), f"cpu, {row[0]}, {name}")
            checked += 1
    assert checked == 4 * len(CPU_COLUMNS)


# docs/results.md's tables: one row per figure, a column of mean ± std per setting (NCL's first)
# and a "... - NCL" column of paired differences after each BayesNCL setting.
DOC_ROWS = {
    "class gain": "consistency_gain",
    "raw consistency": "semantic_consistency",
    "background gain": "bg_consistency_gain",
    "background-dominated share": "bg_dims_share",
    "converged probe, background": "probe_bg_top1",
    "converged probe": "probe_top1",
    "solo-learn's probe": "linear_top1",
    "kNN": "knn_top1",
    "active dimensions": "active_dims",
    "gates open": "gates_open",
}
DOC_SETTINGS = {
    **SETTINGS,
    "NCL": "ncl",
    "official": "bayesncl",
    "pick": "bayesncl_rho0.3_kl1e-4",
}
DOC_TABLES = [
    table for dataset in FOLDERS for table in _tables("docs/results.md", f"{dataset}, 200 epochs")
]


def test_docs_results_has_the_answer_table_for_each_dataset():
    assert sorted(table[0][0] for table in DOC_TABLES) == sorted(
        f"{dataset}, 200 epochs" for dataset in FOLDERS
    )


def _across(folder: str, method: str) -> tuple[int, ...]:
    from study.relative import ROWS

    (row,) = [
        r
        for r in ROWS
        if r.headline and (f"study/records/{r.folder}", r.variant) == (folder, method)
    ]
    return row.across


@pytest.mark.parametrize("table", DOC_TABLES, ids=[table[0][0] for table in DOC_TABLES])
def test_every_cell_of_the_answer_in_docs_results_is_what_the_results_hold(table):
    header, body = table[0], table[1:]
    dataset = header[0].removesuffix(", 200 epochs")
    folder = FOLDERS[dataset]
    paired, means = _paired(folder), _means(folder)
    checked = 0
    for column, title in enumerate(header[1:], start=1):
        marked, title = title.endswith(" †"), title.removesuffix(" †")
        method = DOC_SETTINGS[title.removesuffix(" - NCL")]
        if title.endswith(" - NCL"):  # † where some of its pairs straddle a code change
            assert marked == bool(_across(folder, method)), f"{dataset}, {title}: the †"
        for row in body:
            label = next(key for key in DOC_ROWS if row[0].startswith(key))
            name, cell = DOC_ROWS[label], row[column]
            where = f"{dataset}, {title}, {name}"
            if title.endswith(" - NCL"):
                if name == "gates_open":
                    assert cell == "", where
                    continue
                _assert_paired_cell(cell, paired[(method, name)], where)
            elif cell == "n/a":
                assert means[method][name] in ("", "nan"), where
                continue
            else:
                mean, std = cell.split(" ± ")
                _assert_rounds_to(mean, float(means[method][name]), where)
                _assert_rounds_to(std, float(means[method][f"{name}_std"]), where)
            checked += 1
    assert checked >= 5 * (len(header) - 1)
