"""The tiles of a dashboard's header: the figures that compare methods lead (the consistency gain,
active dimensions, gates open, accuracies), every other one is folded away, each with a
one-line explanation (:func:`solo_bayesncl.metrics.describe_metric`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from solo_bayesncl.metrics import EPS, describe_metric

from .bundle import FeatureBundle

__all__ = ["ACCURACY_METRICS", "LEAD_METRICS", "Tile", "header_tiles"]


@dataclass(frozen=True)
class Tile:
    """One figure of the header: its ``key`` in ``metrics.json`` (or the fact's), its ``label``, its
    ``value`` as shown (``"-"`` when not finite) and its one-line ``explanation`` (the tooltip)."""

    key: str
    label: str
    value: str
    explanation: str


_ONLINE_LINEAR = (
    "online linear top-1 (%)",
    "Top-1 accuracy of the linear classifier trained alongside pretraining (last logged).",
)
ACCURACY_METRICS: dict[str, tuple[str, str]] = {
    "linear_top1": (
        "linear top-1 (%)",
        "Top-1 accuracy of a linear classifier trained on the frozen backbone features.",
    ),
    "knn_top1": (
        "kNN top-1 (%)",
        "Top-1 accuracy of a k-nearest-neighbour vote on the frozen backbone features.",
    ),
    "online_linear_top1": _ONLINE_LINEAR,
    "val_acc1": _ONLINE_LINEAR,
}
"""The accuracies that lead when ``metrics.json`` holds them: label and explanation."""

LEAD_METRICS: dict[str, tuple[str, str]] = {
    "semantic_consistency_gain": (
        "consistency gain",
        "Semantic consistency minus its label-shuffled baseline: how much more often the "
        "images a dimension fires on share its majority class than chance gives. Compare "
        "methods by this.",
    ),
    **ACCURACY_METRICS,
}
"""The metrics of ``metrics.json`` that lead the header: label and explanation."""

_KNN_K = re.compile(r"^knn_top1_k(\d+)$")
_COUNTS = ("active_dims", "retrieval_samples")


def _number(key: str, value: float | None) -> str:
    """A metric as a tile shows it: counts whole, gains signed, 4 significant digits else."""
    if value is None or not math.isfinite(value):
        return "-"
    if key.startswith("num_") or key in _COUNTS:
        return f"{int(round(value))}"
    return f"{value:+.3f}" if key.endswith("_gain") else f"{value:.4g}"


def _lead_metric(key: str) -> tuple[str, str] | None:
    """Label and explanation of a metric that leads, or None."""
    if key in LEAD_METRICS:
        return LEAD_METRICS[key]
    match = _KNN_K.match(key)
    if match:
        return (
            f"kNN top-1, k={match.group(1)} (%)",
            f"Top-1 accuracy of a {match.group(1)}-nearest-neighbour vote on the frozen "
            "backbone features.",
        )
    return None


def header_tiles(
    bundle: FeatureBundle, n_active: int, skip: frozenset[str] = frozenset()
) -> tuple[list[Tile], list[Tile]]:
    """The ``(leading, folded)`` tiles of one model's header (see the module docstring);
    metrics named in ``skip`` are left out (figures the page shows otherwise)."""
    metrics = {k: v for k, v in bundle.metrics.items() if k not in skip}
    lead: list[Tile] = []
    folded: list[Tile] = [
        Tile(
            "images",
            "images",
            str(bundle.num_images),
            "Validation images the features were computed on.",
        )
    ]
    gain = "semantic_consistency_gain"
    if gain in metrics:
        label, explanation = LEAD_METRICS[gain]
        lead.append(Tile(gain, label, _number(gain, metrics[gain]), explanation))
    lead.append(
        Tile(
            "active_dims",
            "active dimensions",
            f"{n_active} of {bundle.num_dims}",
            f"Dimensions that fire (|activation| > {EPS:g} on a row-normalised image) on at "
            "least one image: the cards below.",
        )
    )
    gate = bundle.gate_open_rate
    if gate is not None:
        lead.append(
            Tile(
                "gate_open_rate",
                "gates open",
                f"{100 * float(gate.mean()):.1f}%",
                "BayesNCL's hard gate: the share of images whose gate is open on a dimension, "
                "averaged over the dimensions.",
            )
        )
        folded.append(
            Tile(
                "gates_never_open",
                "gates never open",
                str(int((gate <= 0).sum())),
                "Dimensions whose hard gate is closed on every image.",
            )
        )
    for key, value in metrics.items():
        if key == gain:
            continue
        leading = _lead_metric(key)
        if leading is not None:
            lead.append(Tile(key, leading[0], _number(key, value), leading[1]))
            continue
        explanation = describe_metric(key) or (
            "A figure of this report's metrics.json that the dashboard has no description of."
        )
        folded.append(Tile(key, key.replace("_", " "), _number(key, value), explanation))
    return lead, folded
