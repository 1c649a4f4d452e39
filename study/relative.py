"""BayesNCL against NCL in the paper's terms: consistency relative to NCL's, in %.

The paper (arXiv 2605.28441, Table 1) reports BayesNCL's semantic consistency beside NCL's:
36.14 against 14.93 on ImageNet-100 (+142.1%), 22.02 against 9.91 on CIFAR-100 (+122%) and
56.50 against 53.82 on CIFAR-10 (+5.0%). This module puts the study's 200-epoch runs in the same
terms, from the kept records alone (``study/records/<folder>/runs/*/result.json``):

- **raw**: ``(c_B - c_N) / c_N``, with ``c`` the semantic consistency (the paper's figure);
- **chance-corrected**: the same ratio of the consistency *gain*, ``g = c - c_shuffled``, where
  ``c_shuffled`` is the consistency the same activity pattern gets with shuffled labels
  (docs/method.md): a dense code's floor is one over the number of classes.

Each ratio is taken seed by seed (BayesNCL's run against NCL's run on the same seed), then
averaged, with a 95% Student-t interval over the seeds (two seeds: their two values). The
chance-corrected measure is the one that compares methods: its headline comparisons (each
five-seed setting on each dataset) also get a Bonferroni interval, the t quantile at
``1 - 0.05 / (2 m)``, ``m`` the number of those comparisons; the raw column is descriptive. A
comparison whose seeds chose its setting is not a test, corrected or not. Beside the ratios,
each row gives the two methods' mean consistency x100 over its seeds, the unit of the paper's
Table 1 (the study's under the ``standard`` protocol, the paper's under its own). ::

    python -m study.relative [--out-md FILE] [--out-png FILE]

writes the Markdown table (default ``study/records/relative.md``) and the figure (default
``docs/img/relative_to_ncl.png``) and prints the table.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from solo_bayesncl.benchmark.records import RecordsError, load_result
from solo_bayesncl.benchmark.table import run_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RECORDS = Path(__file__).resolve().parent / "records"
ROOT = RECORDS.parents[1]

PAPER = [
    # dataset, classes, NCL, BayesNCL (semantic consistency x100, the paper's Table 1)
    ("ImageNet-100", 100, 14.93, 36.14),
    ("CIFAR-100", 100, 9.91, 22.02),
    ("CIFAR-10", 10, 53.82, 56.50),
]


@dataclass(frozen=True)
class Row:
    """One comparison: a BayesNCL variant of one records folder against NCL on ``seeds``;
    ``across``: the seeds whose two runs were trained on either side of ``CODE_CHANGES``."""

    dataset: str
    folder: str
    variant: str
    setting: str
    seeds: tuple[int, ...]
    headline: bool = False
    across: tuple[int, ...] = ()


CODE_CHANGES = ("5dee33e", "11a0729")
"""The commits that changed how the backbone computes (small maps as matrix products,
channels-last max-pooling), equal to the old code only to rounding."""

ROWS = [
    Row("shared backgrounds", "study_budget_200", "bayesncl", "paper's setting (rho 0.8, lambda 3e-5)", (1, 2, 3, 4, 5), True),
    Row("shared backgrounds", "study_budget_200", "bayesncl_rho0.3_kl3e-4", "rho 0.3, lambda 3e-4", (1, 2, 3, 4, 5), True),
    Row("shared backgrounds", "study_budget_200", "bayesncl_rho0.3_kl1e-4", "the sweep's pick (rho 0.3, lambda 1e-4)", (1, 2, 3, 4, 5), True, (1, 2, 3, 4, 5)),
    Row("shared backgrounds", "study_budget_200", "bayesncl_concrete", "binary-concrete gate, paper's setting", (1, 2, 3), across=(3,)),
    Row("plain Fashion-MNIST", "study_budget_fmnist_200", "bayesncl", "paper's setting (rho 0.8, lambda 3e-5)", (1, 2, 3, 4, 5), True),
    Row("plain Fashion-MNIST", "study_budget_fmnist_200", "bayesncl_rho0.3_kl3e-4", "rho 0.3, lambda 3e-4", (1, 2, 3, 4, 5), True, (1, 2)),
    Row("plain Fashion-MNIST", "study_budget_fmnist_200", "bayesncl_rho0.3_kl1e-4", "the sweep's pick (rho 0.3, lambda 1e-4)", (1, 2, 3, 4, 5), True, (1, 2)),
    Row("plain Fashion-MNIST", "study_budget_fmnist_200", "bayesncl_rho0.3_kl1e-4", "the sweep's pick, selection seeds", (1, 2, 3), across=(1, 2)),
    Row("plain Fashion-MNIST", "study_budget_fmnist_200", "bayesncl_rho0.3_kl1e-4", "the sweep's pick, held-out seeds", (4, 5)),
]  # fmt: skip
HEADLINE_COMPARISONS = sum(row.headline for row in ROWS)


def t_quantile(dof: int, p: float) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (scipy's, exact)."""
    from scipy.stats import t

    return float(t.ppf(p, dof))


def runs(folder: str) -> dict[tuple[str, int], dict]:
    """The finished runs of a records folder, by (row, seed); exits with one line naming the
    file and the field when a ``result.json`` is not a result."""
    found = {}
    for path in sorted((RECORDS / folder / "runs").glob("*/result.json")):
        try:
            record = load_result(path)
        except RecordsError as err:
            raise SystemExit(f"error: {err}") from None
        found[(run_name(record), record["seed"])] = record
    return found


def per_seed(row: Row, key: str) -> list[float]:
    """``100 (B - N) / N`` for each seed of ``row``, with ``key`` a field of ``metrics``."""
    records = runs(row.folder)
    values = []
    for seed in row.seeds:
        ours = records[(row.variant, seed)]["metrics"][key]
        ncl = records[("ncl", seed)]["metrics"][key]
        values.append(100 * (ours - ncl) / ncl)
    return values


def interval(values: list[float], p: float = 0.975) -> tuple[float, float, float]:
    """Mean and the two-sided t-interval (``p`` its upper quantile) over ``values``."""
    mean = statistics.fmean(values)
    half = t_quantile(len(values) - 1, p) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def consistency_x100(row: Row) -> tuple[float, float]:
    """BayesNCL's and NCL's mean semantic consistency x100 over the seeds of ``row``."""
    records = runs(row.folder)
    ours = [records[(row.variant, seed)]["metrics"]["semantic_consistency"] for seed in row.seeds]
    ncl = [records[("ncl", seed)]["metrics"]["semantic_consistency"] for seed in row.seeds]
    return 100 * statistics.fmean(ours), 100 * statistics.fmean(ncl)


def bonferroni() -> float:
    """The upper quantile of a two-sided 95% interval corrected for the headline's comparisons."""
    return 1 - 0.05 / (2 * HEADLINE_COMPARISONS)


def _seeds(seeds: tuple[int, ...]) -> str:
    if len(seeds) == 1:
        return str(seeds[0])
    return (
        f"{seeds[0]}-{seeds[-1]}"
        if seeds == tuple(range(seeds[0], seeds[-1] + 1))
        else ",".join(map(str, seeds))
    )


def _cell(mean: float, low: float, high: float) -> str:
    return f"{mean:+.1f}% [{low:+.1f}, {high:+.1f}]"


def _summary(values: list[float], p: float = 0.975) -> str:
    """Mean and t-interval over three seeds or more; two seeds' values as they are (a
    t-interval on one degree of freedom only says whether the two happen to agree)."""
    if len(values) < 3:
        return ", ".join(f"{value:+.2f}%" for value in values)
    return _cell(*interval(values, p))


NOTE = (
    f"† these seeds pair runs of the code before and after commits `{CODE_CHANGES[0]}` and "
    f"`{CODE_CHANGES[1]}` (equal to rounding); NCL was not rerun at the later commit (over the "
    "study's budget)."
)


def table() -> str:
    """The Markdown table (the study's rows, then the paper's) and its note."""
    m = HEADLINE_COMPARISONS
    lines = [
        "| dataset (classes), 200 epochs | BayesNCL setting | seeds | consistency x100, BayesNCL vs "
        "NCL | raw consistency vs NCL (descriptive) | chance-corrected vs NCL | "
        f"chance-corrected, Bonferroni (m = {m}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        raw = per_seed(row, "semantic_consistency")
        gain = per_seed(row, "semantic_consistency_gain")
        ours, ncl = consistency_x100(row)
        gain_m = _cell(*interval(gain, bonferroni())) if row.headline else ""
        seeds = _seeds(row.seeds)
        if row.across:
            seeds += " †" if row.across == row.seeds else f" († {_seeds(row.across)})"
        lines.append(
            f"| {row.dataset} (10) | {row.setting} | {seeds} | {ours:.1f} vs {ncl:.1f} | "
            f"{_summary(raw)} | {_summary(gain)} | {gain_m} |"
        )
    for dataset, classes, ncl, ours in PAPER:
        lines.append(
            f"| paper: {dataset} ({classes}) | paper's setting | not reported | {ours:.2f} vs "
            f"{ncl:.2f} | {100 * (ours - ncl) / ncl:+.1f}% | not reported | |"
        )
    return "\n".join(lines) + "\n\n" + NOTE + "\n"


def draw() -> Figure:
    """The table as one picture: each comparison's mean and 95% interval (two seeds: their
    values), the paper's beside. The legend sits below the study's axes, clear of every row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, raws, gains = [], [], []
    for row in ROWS:
        labels.append(
            f"{row.dataset}: {row.setting}, seeds {_seeds(row.seeds)}" + " †" * bool(row.across)
        )
        raws.append(per_seed(row, "semantic_consistency"))
        gains.append(per_seed(row, "semantic_consistency_gain"))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 5.8), gridspec_kw={"width_ratios": [3, 1.1]}, sharey=False
    )
    ys = list(range(len(labels)))[::-1]
    for offset, values, colour, name in (
        (0.15, raws, "tab:orange", "raw consistency"),
        (-0.15, gains, "tab:blue", "chance-corrected (consistency - shuffled)"),
    ):
        for y, seeds in zip(ys, values, strict=True):
            if len(seeds) < 3:
                left.plot(seeds, [y + offset] * len(seeds), "x", color=colour)
                continue
            mean, low, high = interval(seeds)
            left.errorbar(mean, y + offset, xerr=[[mean - low], [high - mean]], fmt="o",
                          color=colour, capsize=3, label=name)  # fmt: skip
            name = None
    left.axvline(0, color="grey", lw=0.8)
    left.set_yticks(ys, labels, fontsize=8)
    left.set_xlabel(
        "BayesNCL relative to NCL, % (mean and 95% interval over paired seeds; x: one seed)"
    )
    left.set_title("This study: 5,000 images, 32 px, ResNet-18, 200 epochs (CPU)", fontsize=10)
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    names = [f"{dataset}\n({classes} classes)" for dataset, classes, _, _ in PAPER]
    values = [100 * (ours - ncl) / ncl for _, _, ncl, ours in PAPER]
    right.barh(names[::-1], values[::-1], color="tab:orange")
    for y, value in enumerate(values[::-1]):
        right.text(value + 2, y, f"+{value:.1f}%", va="center", fontsize=9)
    right.set_xlim(0, 200)
    right.set_title("The paper: raw, vs NCL", fontsize=10)
    right.set_xlabel("%")
    fig.tight_layout()
    return fig


def figure(path: Path) -> None:
    """Draw the picture (``draw``) into ``path``."""
    import matplotlib.pyplot as plt

    fig = draw()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m study.relative", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out-md", type=Path, default=RECORDS / "relative.md")
    parser.add_argument(
        "--out-png", type=Path, default=ROOT / "docs" / "img" / "relative_to_ncl.png"
    )
    args = parser.parse_args(argv)
    text = table()
    for path in (args.out_md, args.out_png):  # the folders asked for are made, as a user expects
        path.parent.mkdir(parents=True, exist_ok=True)
    args.out_md.write_text(
        "BayesNCL against NCL in the paper's terms, written by `python -m study.relative` from "
        "`study/records/*/runs/*/result.json`: each method's mean consistency x100 over the "
        "seeds (the paper's unit; the study's under the `standard` protocol), and per seed "
        "`100 (B - N) / N`, mean and 95% t-interval over the paired seeds (two seeds: their "
        "values), with the Bonferroni interval of the headline's chance-corrected comparisons.\n\n"
        + text
    )
    figure(args.out_png)
    print(text, end="")


if __name__ == "__main__":
    main()
