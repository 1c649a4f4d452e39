"""BayesNCL against NCL in the paper's terms (study.relative), recomputed from the records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from solo_bayesncl.benchmark.paired import t_quantile_975
from study.relative import ROWS, main, t_quantile, table

RECORDS = Path(__file__).resolve().parents[1] / "records"


def _metric(folder: str, variant: str, seed: int, key: str) -> float:
    (path,) = (RECORDS / folder / "runs").glob(f"{variant}-seed{seed}-*/result.json")
    return json.loads(path.read_text())["metrics"][key]


def _relative(folder: str, variant: str, key: str, seeds=(1, 2, 3, 4, 5)) -> np.ndarray:
    ours = np.array([_metric(folder, variant, s, key) for s in seeds])
    ncl = np.array([_metric(folder, "ncl", s, key) for s in seeds])
    return ours, ncl


def test_one_cell_recomputed_independently():
    """The paper's setting on shared backgrounds, raw and chance-corrected, seeds 1-5."""
    row = table().splitlines()[2]
    for key, column in (("semantic_consistency", 4), ("semantic_consistency_gain", 5)):
        ours, ncl = _relative("study_budget_200", "bayesncl", key)
        ratio = 100 * (ours - ncl) / ncl
        half = t_quantile_975(4) * ratio.std(ddof=1) / math.sqrt(5)
        cell = f"{ratio.mean():+.1f}% [{ratio.mean() - half:+.1f}, {ratio.mean() + half:+.1f}]"
        assert row.split("|")[column].strip() == cell


@pytest.mark.parametrize(
    ("folder", "variant", "raw", "corrected", "seeds"),
    [
        ("study_budget_200", "bayesncl", 9.9, 5.7, (1, 2, 3, 4, 5)),
        ("study_budget_fmnist_200", "bayesncl", 7.2, 4.2, (1, 2, 3, 4, 5)),
        ("study_budget_200", "bayesncl_concrete", 27.1, -9.3, (1, 2, 3)),
    ],
)
def test_the_ratio_of_the_means_gives_the_figures_the_issue_checked(
    folder, variant, raw, corrected, seeds
):
    for key, expected in (("semantic_consistency", raw), ("semantic_consistency_gain", corrected)):
        ours, ncl = _relative(folder, variant, key, seeds)
        assert round(100 * (ours.mean() - ncl.mean()) / ncl.mean(), 1) == expected


def test_the_t_quantile_agrees_with_the_benchmarks_table_and_gives_the_bonferroni_one():
    for dof in range(1, 11):
        assert t_quantile(dof, 0.975) == pytest.approx(t_quantile_975(dof), abs=2e-3)
    assert t_quantile(4, 1 - 0.05 / 12) == pytest.approx(4.851, abs=2e-3)


def test_the_pick_is_reported_on_its_held_out_seeds_apart_from_its_selection_seeds():
    pick = [
        row for row in ROWS if row.variant == "bayesncl_rho0.3_kl1e-4" and "fmnist" in row.folder
    ]
    assert {row.seeds for row in pick} == {(1, 2, 3, 4, 5), (1, 2, 3), (4, 5)}
    gain, ncl = _relative("study_budget_fmnist_200", "bayesncl_rho0.3_kl1e-4",
                          "semantic_consistency_gain", (4, 5))  # fmt: skip
    assert np.round(gain - ncl, 3).tolist() == [0.021, 0.021]


def test_the_command_writes_the_table_and_the_figure_into_folders_it_makes(tmp_path):
    md, png = tmp_path / "new" / "r.md", tmp_path / "figures" / "r.png"
    main(["--out-md", str(md), "--out-png", str(png)])
    assert md.read_text().endswith(table())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
