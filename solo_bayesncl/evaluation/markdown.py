"""``metrics.md``: the evaluation report as readable tables (Markdown)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_value", "render_markdown"]


def format_value(key: str, value: float | None) -> str:
    """A metric as the tables print it: counts as integers, gains signed, ``n/a`` for None."""
    if value is None:
        return "n/a"
    if key.startswith("num_") or key in ("active_dims", "retrieval_samples"):
        return f"{int(round(value))}"
    return f"{value:+.4f}" if key.endswith("_gain") else f"{value:.4f}"


_PAPER_BESIDE_STANDARD = (
    # (paper figure, standard figure it is read against, format)
    ("paper_semantic_consistency_x100", "semantic_consistency", "{:.2f}"),
    ("paper_active_dims", "active_dims", "{:.0f}"),
    ("paper_sparsity", "sparsity", "{:.4f}"),
    ("paper_orthogonality_mean", "orthogonality_error", "{:.3e}"),
    ("paper_singular_value_entropy", "effective_rank_entropy", "{:.4f}"),
    ("paper_retrieval_p@1_m512", "retrieval_p@1", "{:.4f}"),
)


def _paper_markdown(report: dict[str, Any]) -> list[str]:
    """The paper-protocol section of ``metrics.md``: main figures beside the standard, then all."""
    paper = report.get("metrics_paper")
    if paper is None:
        return []
    standard = report["metrics"]
    lines = [
        "",
        "## Paper protocol (the official BayesNCL evaluation)",
        "",
        "BatchNorm in training mode over the unshuffled validation set (batch "
        f"{report['paper_protocol']['batch_size']}); consistency x100; orthogonality divided by "
        "d twice; singular-value entropy (not its exponential) on one training batch; retrieval "
        "by the signed-sum ranking, m dimensions, top hit dropped. See docs/fidelity.md.",
        "",
        "| paper figure | paper protocol | standard figure | standard protocol |",
        "|---|---:|---|---:|",
    ]
    for key, std_key, fmt in _PAPER_BESIDE_STANDARD:
        value, std = paper.get(key), standard.get(std_key)
        cell = "n/a" if value is None else fmt.format(value)
        lines.append(f"| {key} | {cell} | {std_key} | {format_value(std_key, std)} |")
    lines += ["", "| every paper figure | value |", "|---|---:|"]
    lines += [f"| {k} | {'n/a' if v is None else f'{v:.6g}'} |" for k, v in paper.items()]
    return lines


def _ncl_paper_markdown(report: dict[str, Any]) -> list[str]:
    """The ncl-paper section of ``metrics.md``: every figure of the NCL repository's evaluation."""
    figures = report.get("metrics_ncl_paper")
    if figures is None:
        return []
    return [
        "",
        "## NCL paper protocol (the NCL repository's evaluation)",
        "",
        "BatchNorm in training mode over the unshuffled validation set (batch "
        f"{report['ncl_paper_protocol']['batch_size']}); features not normalised; sparsity and "
        "consistency in percent; orthogonality the median of |C - I| over dimensions summing "
        "above 10; retrieval P@10 by Euclidean distance. See docs/fidelity.md.",
        "",
        "| NCL figure | value |",
        "|---|---:|",
        *(f"| {k} | {'n/a' if v is None else f'{v:.6g}'} |" for k, v in figures.items()),
    ]


def _dimension_table(rows: list[dict[str, Any]], top_images: int) -> list[str]:
    """The table of some dimensions, the purity of the top images labelled with their count."""
    lines = [
        f"| dim | majority class | purity (top {top_images} images) | purity (all active) | "
        "active images |",
        "|---:|---|---:|---:|---:|",
    ]
    for d in rows:
        mark = "" if d["majority_significant"] else " (n.s.)"
        lines.append(
            f"| {d['dim']} | {d['majority_class']}{mark} | {d['purity_top']:.3f} | "
            f"{d['purity']:.3f} | {d['active_images']} |"
        )
    return lines


def render_markdown(report: dict[str, Any], pictures: list[str], skipped: list[str]) -> str:
    """The content of ``metrics.md`` for the content of ``metrics.json``."""
    metrics = report["metrics"]
    soft = report.get("metrics_soft_gate")
    lines = [
        f"# Evaluation report: {report['method']}",
        "",
        f"- checkpoint: `{report['checkpoint']}`",
        f"- dataset: {report['dataset']} ({report['num_images']} validation images)",
        f"- representation: {report['representation']}",
        "",
    ]
    if all(
        metrics.get(k) is not None
        for k in ("semantic_consistency", "semantic_consistency_shuffled")
    ):
        lines += [
            "Semantic consistency **{:.4f}** against its label-shuffled baseline {:.4f} "
            "(± {:.4f}): gain **{:+.4f}**. The chance floor rises as each dimension fires on "
            "fewer images, so compare methods by the gain.".format(
                metrics["semantic_consistency"],
                metrics["semantic_consistency_shuffled"],
                metrics.get("semantic_consistency_shuffled_std") or 0.0,
                metrics["semantic_consistency_gain"],
            ),
            "",
        ]
    lines += ["## Metrics", ""]
    if soft is not None:
        lines += ["| metric | hard gate | soft gate |", "|---|---:|---:|"]
        for key, value in metrics.items():
            lines.append(
                f"| {key} | {format_value(key, value)} | {format_value(key, soft.get(key))} |"
            )
        lines += [
            "",
            "The soft gate (`u * alpha`) zeroes no entry (alpha never reaches 0), so on the "
            "threshold-based metrics (active dims, sparsity, semantic consistency and entropies) "
            "it reads exactly like no gate at all, i.e. like NCL's `normalize(phi(z))`: only the "
            "zeros of `phi` remain. The hard gate is the representation BayesNCL is judged on.",
        ]
    else:
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {key} | {format_value(key, value)} |" for key, value in metrics.items()]
    lines += _paper_markdown(report)
    lines += _ncl_paper_markdown(report)
    gate = report.get("gate_open_rate")
    if gate is not None:
        lines += ["", "## Hard gate", "", "| statistic | value |", "|---|---:|"]
        lines += [f"| {k} | {v if isinstance(v, int) else f'{v:.4f}'} |" for k, v in gate.items()]
    sel = report["selectivity"]
    lines += [
        "",
        "## Most selective dimensions",
        "",
        f"A majority class is significant when label shuffling ({sel['permutations']} "
        f"permutations) never reaches the dimension's purity (p <= {sel['significance']}); "
        f"{sel['significant_dims']} active dimensions have one. n.s. marks the others. Purity "
        f"is the majority's share among the top {sel['top_images']} images (those it fires on "
        "with the largest |activation|, as the dashboard's cards) and among all images the "
        "dimension is active on.",
        "",
        *_dimension_table(report["top_dimensions"], sel["top_images"]),
        "",
        "## Least selective dimensions",
        "",
        *_dimension_table(report["least_selective_dimensions"], sel["top_images"]),
    ]
    lines += ["", "## Pictures", ""]
    lines += [f"- [{name}]({name})" for name in pictures]
    lines += [f"- {note}" for note in skipped]
    lines += [
        "",
        "Browse the features with `python -m solo_bayesncl.dashboard REPORT_DIR --out DIR` "
        "(`features.npz` is its input).",
        "",
    ]
    return "\n".join(lines)
