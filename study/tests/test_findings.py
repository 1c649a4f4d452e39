"""The README's and docs/results.md's comparison tables say what the results folders hold.

The findings' tables are written by hand from each folder's ``paired_differences.csv`` (BayesNCL
minus NCL, paired by seed) and ``results.csv`` (each setting's mean and spread over its seeds).
These tests read the tables back and recompute every cell from the CSVs, so a figure copied
wrong, or left behind when a later seed changes the folder, fails here.
"""

from __future__ import annotations

import csv
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
# Row labels (their start) and the CSV columns their cells hold, in order.
ROWS = {
    "class consistency gain": ["consistency_gain"],
    "background consistency gain": ["bg_consistency_gain"],
    "background-dominated share": ["bg_dims_share"],
    "converged class probe": ["probe_top1"],
    "solo-learn's probe / kNN": ["linear_top1", "knn_top1"],
    "solo-learn's probe": ["linear_top1"],
    "kNN": ["knn_top1"],
    "active dimensions": ["active_dims"],
}
NUMBER = r"[+-]?\d+(?:\.\d+)?"
CELL = re.compile(
    rf"^(?P<mean>{NUMBER})(?: ± (?P<std>{NUMBER}))? \[(?P<low>{NUMBER}), (?P<high>{NUMBER})\]"
    r"(?P<star> \*)?$"
)
REFERENCE = re.compile(rf"\(NCL (?P<mean>{NUMBER}) ± (?P<std>{NUMBER})%?\)")


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


def _gate_differences(folder: str) -> dict[str, tuple[str, str]]:
    """Each row of ``gates.md``: its seeds and its class - background open-rate difference."""
    table = _tables(f"{folder}/gates.md", "row")[0]
    return {row[0]: (row[1], row[-1]) for row in table[1:]}


def _means(folder: str) -> dict[str, dict[str, str]]:
    with open(ROOT / folder / "results.csv", newline="") as handle:
        return {row["method"]: row for row in csv.DictReader(handle)}


def _assert_paired_cell(text: str, record: dict[str, str], where: str) -> None:
    match = CELL.match(text)
    assert match, f"{where}: cannot read {text!r}"
    _assert_rounds_to(match["mean"], float(record["mean_diff"]), where)
    if match["std"] is not None:
        _assert_rounds_to(match["std"], float(record["std_diff"]), where)
    _assert_rounds_to(match["low"], float(record["ci_low"]), where)
    _assert_rounds_to(match["high"], float(record["ci_high"]), where)
    excludes_zero = float(record["ci_low"]) > 0 or float(record["ci_high"]) < 0
    assert (match["star"] is not None) == excludes_zero, f"{where}: the star"


# The gate's row: how much more often the gate opens u's class-dominated dimensions than its
# background-dominated ones, each setting's own difference over its seeds (``gates.md``).
GATE_ROW = "gate: open rate of class- minus background-dominated dims"
GATE_CELL = re.compile(
    rf"^(?P<mean>{NUMBER}) \[(?P<low>{NUMBER}), (?P<high>{NUMBER})\](?P<star> \*)?$"
)


def _assert_gate_cell(text: str, gates: tuple[str, str], seeds: str, setting: str) -> None:
    where = f"shared backgrounds, {setting}, gate"
    cell, held = GATE_CELL.match(text), GATE_CELL.match(gates[1])
    assert cell and held, f"{where}: cannot read {text!r} or gates.md's {gates[1]!r}"
    assert gates[0] == seeds[-1], f"{where}: gates.md has {gates[0]} seeds"
    for part in ("mean", "low", "high"):
        _assert_rounds_to(cell[part], float(held[part]), f"{where}, {part}")
    excludes_zero = float(held["low"]) > 0 or float(held["high"]) < 0
    assert (cell["star"] is not None) == excludes_zero, f"{where}: the star"


TABLES = _tables("README.md", "BayesNCL - NCL")


def test_the_readme_has_a_comparison_table_for_each_dataset():
    titles = [table[0][0] for table in TABLES]
    for dataset in FOLDERS:
        assert any(dataset in title for title in titles), f"no README table for {dataset}"


@pytest.mark.parametrize("table", TABLES, ids=[table[0][0] for table in TABLES])
def test_every_cell_of_the_readme_comparison_is_the_paired_difference_the_results_hold(table):
    header, body = table[0], table[1:]
    dataset = next(name for name in FOLDERS if name in header[0])
    folder = FOLDERS[dataset]
    paired, means = _paired(folder), _means(folder)
    checked = 0
    for column, title in enumerate(header[1:], start=1):
        setting, _, seeds = title.rpartition(", seeds ")
        method = SETTINGS[setting]
        for row in body:
            if row[0].startswith(GATE_ROW):
                _assert_gate_cell(row[column], _gate_differences(folder)[method], seeds, setting)
                checked += 1
                continue
            label = next((key for key in ROWS if row[0].startswith(key)), None)
            assert label is not None, f"{dataset}: no results column for the row {row[0]!r}"
            for part, name in zip(row[column].split(" / "), ROWS[label], strict=True):
                where = f"{dataset}, {setting}, {name}"
                record = paired[(method, name)]
                assert record["seeds"].split() == [
                    str(seed) for seed in range(int(seeds[0]), int(seeds[-1]) + 1)
                ], where
                _assert_paired_cell(part, record, where)
                checked += 1
            reference = REFERENCE.search(row[0])
            if reference and column == 1:
                name = ROWS[label][0]
                ncl = means["ncl"]
                _assert_rounds_to(reference["mean"], float(ncl[name]), f"{dataset}, NCL {name}")
                _assert_rounds_to(reference["std"], float(ncl[f"{name}_std"]), f"{dataset}, NCL")
    assert checked >= 5 * (len(header) - 1)


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


@pytest.mark.parametrize("table", DOC_TABLES, ids=[table[0][0] for table in DOC_TABLES])
def test_every_cell_of_the_answer_in_docs_results_is_what_the_results_hold(table):
    header, body = table[0], table[1:]
    dataset = header[0].removesuffix(", 200 epochs")
    folder = FOLDERS[dataset]
    paired, means = _paired(folder), _means(folder)
    checked = 0
    for column, title in enumerate(header[1:], start=1):
        method = DOC_SETTINGS[title.removesuffix(" - NCL")]
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
