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


# Student's t at 1 - 0.05 / 12 with 4 degrees of freedom, as tables give it: the Bonferroni
# quantile of six two-sided 95% comparisons over five paired seeds.
T_BONFERRONI_4 = 4.8509


def _cell(ratio: np.ndarray, quantile: float) -> str:
    half = quantile * ratio.std(ddof=1) / math.sqrt(len(ratio))
    return f"{ratio.mean():+.1f}% [{ratio.mean() - half:+.1f}, {ratio.mean() + half:+.1f}]"


def test_one_row_recomputed_independently():
    """The paper's setting on shared backgrounds, seeds 1-5: the x100 means, raw and
    chance-corrected, each with its 95% and its Bonferroni interval."""
    cells = [cell.strip() for cell in table().splitlines()[2].split("|")]
    ours, ncl = _relative("study_budget_200", "bayesncl", "semantic_consistency")
    assert cells[4] == f"{100 * ours.mean():.1f} vs {100 * ncl.mean():.1f}" == "43.1 vs 39.2"
    for key, column in (("semantic_consistency", 5), ("semantic_consistency_gain", 7)):
        ours, ncl = _relative("study_budget_200", "bayesncl", key)
        ratio = 100 * (ours - ncl) / ncl
        assert cells[column] == _cell(ratio, t_quantile_975(4)), key
        assert cells[column + 1] == _cell(ratio, T_BONFERRONI_4), key


def test_the_x100_columns_give_the_papers_table_and_the_studys_means():
    rows = [[cell.strip() for cell in line.split("|")] for line in table().splitlines()[2:]]
    x100 = {(row[1], row[2]): row[4] for row in rows}
    assert x100[("paper: ImageNet-100 (100)", "paper's setting")] == "36.14 vs 14.93"
    assert x100[("paper: CIFAR-100 (100)", "paper's setting")] == "22.02 vs 9.91"
    assert x100[("paper: CIFAR-10 (10)", "paper's setting")] == "56.50 vs 53.82"
    paper = "paper's setting (rho 0.8, lambda 3e-5)"
    assert x100[("plain Fashion-MNIST (10)", paper)] == "60.0 vs 55.9"
    for row in ROWS:
        ours, ncl = _relative(row.folder, row.variant, "semantic_consistency", row.seeds)
        cell = x100[(f"{row.dataset} (10)", row.setting)]
        assert cell == f"{100 * ours.mean():.1f} vs {100 * ncl.mean():.1f}", row


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


def test_the_figures_legend_is_clear_of_every_row():
    """The legend sits outside the study's axes, so it hides no interval."""
    import matplotlib.pyplot as plt

    from study.relative import draw

    fig = draw()
    try:
        renderer = fig.canvas.get_renderer()
        left = fig.axes[0]
        legend = left.get_legend()
        assert legend is not None
        box, axes = legend.get_window_extent(renderer), left.get_window_extent(renderer)
        assert not box.overlaps(axes), (box, axes)
        assert box.y1 < axes.y0  # below the axes, the rows' labels on the left untouched
    finally:
        plt.close(fig)


def test_the_command_writes_the_table_and_the_figure_into_folders_it_makes(tmp_path):
    md, png = tmp_path / "new" / "r.md", tmp_path / "figures" / "r.png"
    main(["--out-md", str(md), "--out-png", str(png)])
    assert md.read_text().endswith(table())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
