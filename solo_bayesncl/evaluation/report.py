"""The post-training evaluation report: from a checkpoint to a folder of metrics and pictures
(``python -m solo_bayesncl.evaluation CHECKPOINT --out REPORT_DIR``, flags in
:mod:`solo_bayesncl.cli.evaluate`).

:func:`write_report` makes one pass over the validation images and writes the folder that
docs/evaluation.md describes. ``metrics.json`` lists the files written; ``--overwrite`` removes
only the files the previous report listed that the new one does not write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from solo_bayesncl.dashboard.bundle import write_feature_bundle
from solo_bayesncl.evaluation import plots
from solo_bayesncl.evaluation.markdown import render_markdown
from solo_bayesncl.evaluation.options import PROTOCOLS, ReportError, ReportOptions
from solo_bayesncl.evaluation.paper import evaluate_ncl_paper_protocol, evaluate_paper_protocol
from solo_bayesncl.evaluation.report_data import (
    PreparedReport,
    ReportData,
    ReportInputs,
    prepare_report,
)
from solo_bayesncl.io.files import (
    NotWritableError,
    remove_stale_temporaries,
    replacing_folder,
    require_writable,
)
from solo_bayesncl.io.json_text import finite_or_null
from solo_bayesncl.metrics import (
    MAJORITY_PERMUTATIONS,
    SIGNIFICANCE,
    TopImages,
    evidence_order,
    top_image_purity,
    top_images,
)

__all__ = [
    "GATE_PICTURE",
    "PROTOCOLS",
    "REPORT_FILES",
    "PreparedReport",
    "ReportError",
    "ReportOptions",
    "prepare_report",
    "write_report",
]

REPORT_FILES: tuple[str, ...] = (
    "metrics.json",
    "metrics.md",
    "features.npz",
    "top_activations.png",
    "least_selective_activations.png",
    "class_histograms.png",
    "retrieval_precision.png",
    "active_dims_per_image.png",
)
"""Files every report holds; BayesNCL reports add ``gate_open_rates.png``."""
GATE_PICTURE = "gate_open_rates.png"
PARTIAL_SUFFIX = ".partial"
REPRESENTATIONS: dict[str, str] = {
    "bayesncl": "v = normalize(normalize(phi(z)) * m), hard gate m",
    "ncl": "normalize(phi(z))",
}
"""What ``metrics.json`` says the metrics were computed on; other methods: ``z / ||z||``."""
PAPER_PROTOCOLS = {
    "paper": (evaluate_paper_protocol, "paper"),
    "ncl-paper": (evaluate_ncl_paper_protocol, "ncl_paper"),
}
"""Each protocol beside the standard one: its evaluation and the key its figures go under."""


def write_report(
    checkpoint: str | Path,
    out_dir: str | Path,
    options: ReportOptions | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    prepared: PreparedReport | None = None,
) -> dict[str, Any]:
    """Evaluates ``checkpoint`` with ``options`` (None: defaults), writes the report folder
    ``out_dir`` (empty or ``overwrite``, writable; moved in when complete) and returns the content
    of ``metrics.json``; ``prepared``: a pass :func:`prepare_report` made. Raises
    ``CheckpointError`` or :class:`ReportError` (one line)."""
    out_dir = Path(out_dir)
    options = ReportOptions() if options is None else options
    _check_out_dir(out_dir, overwrite)
    if prepared is not None:
        prepared.check_made_for(checkpoint, options)
    remove_stale_temporaries(out_dir, PARTIAL_SUFFIX)
    if prepared is None:
        prepared = prepare_report(checkpoint, options, progress=progress)
    inputs, data = prepared.inputs, prepared.data
    stats = data.stats
    order = evidence_order(stats.active_count.numpy(), stats.purity.numpy(), stats.num_samples)
    most, least = order[: options.top_dims], order[::-1][: options.top_dims]
    shown = [shown_images(dims, data, options.images_per_dim) for dims in (most, least)]
    report = report_content(inputs, data, order, shown, options.images_per_dim)
    if options.protocol in PAPER_PROTOCOLS:
        evaluate, key = PAPER_PROTOCOLS[options.protocol]
        official = evaluate(
            inputs.model,
            inputs.spec,
            inputs.val_dataset,
            batch_size=options.batch_size,
            num_workers=options.num_workers,
            device=inputs.device,
        )
        report["protocol"] = options.protocol
        report[f"metrics_{key}"] = finite_or_null(official["metrics"])
        report[f"{key}_protocol"] = official["settings"]
    report["files"] = sorted(report_files(inputs.gated))
    # the previous report's own files that the new one does not write are removed
    stale = tuple(sorted(_previous_files(out_dir) - set(report["files"])))
    with replacing_folder(
        out_dir, PARTIAL_SUFFIX, stale, last=("metrics.md", "metrics.json")
    ) as staging:
        write_report_files(staging, report, inputs, data, shown)
    return report


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """The report folder: free, or ``overwrite``, and writable (checked before any work)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"report folder {out_dir} exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ReportError(
            f"report folder {out_dir} exists and is not empty; choose another --out or pass "
            "--overwrite to replace its report files"
        )
    try:
        require_writable(out_dir)
    except NotWritableError as err:
        raise ReportError(str(err)) from None


def report_files(gated: bool) -> list[str]:
    """The files a report writes: :data:`REPORT_FILES`, and the gate picture for BayesNCL."""
    return [*REPORT_FILES, *([GATE_PICTURE] if gated else [])]


def _previous_files(out_dir: Path) -> set[str]:
    """The files the report already in ``out_dir`` lists in its ``metrics.json`` (else none)."""
    try:
        listed = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(listed, list):
        return set()
    known = set(report_files(gated=True))
    return {name for name in listed if isinstance(name, str) and name in known}


def gate_summary(gate_open: np.ndarray) -> dict[str, float]:
    """Open rates of the hard gate ``(N, k)``: per dimension and per image."""
    rates = gate_open.mean(axis=0)
    per_image = gate_open.sum(axis=1)
    return {
        "mean": float(rates.mean()),
        "median": float(np.median(rates)),
        "min": float(rates.min()),
        "max": float(rates.max()),
        "dims_never_open": int((rates == 0).sum()),
        "dims_always_open": int((rates == 1).sum()),
        "open_gates_per_image_mean": float(per_image.mean()),
        "images_with_no_open_gate": int((per_image == 0).sum()),
    }


def shown_images(dims: np.ndarray, data: ReportData, count: int) -> tuple[TopImages, torch.Tensor]:
    """The top ``count`` images of each dimension of ``dims`` and their purity."""
    top = top_images(data.features, count, dims=dims)
    return top, top_image_purity(top.index, data.labels, data.stats.majority_class[top.dims])


def report_content(
    inputs: ReportInputs,
    data: ReportData,
    order: np.ndarray,
    shown: list[tuple[TopImages, torch.Tensor]],
    images_per_dim: int,
) -> dict[str, Any]:
    """The content of ``metrics.json``; ``shown``: the most and least selective dims' top images."""
    method = inputs.loaded.method
    report: dict[str, Any] = {
        "method": method,
        "checkpoint": str(inputs.loaded.path),
        "dataset": inputs.images.label,
        "num_images": int(data.features.shape[0]),
        "representation": REPRESENTATIONS.get(method, "normalized projection z / ||z||"),
        "metrics": finite_or_null(data.metrics),
    }
    if inputs.gated:
        report["metrics_soft_gate"] = finite_or_null(data.metrics_soft_gate)
        report["gate_open_rate"] = gate_summary(data.gate_open)
    significant = data.p_value <= SIGNIFICANCE
    report["selectivity"] = {
        "permutations": MAJORITY_PERMUTATIONS,
        "significance": SIGNIFICANCE,
        "significant_dims": int(significant[order].sum()),
        "top_images": images_per_dim,
    }
    most, least = (describe_dimensions(*pair, data, inputs.class_names) for pair in shown)
    report["top_dimensions"], report["least_selective_dimensions"] = most, least
    return report


def describe_dimensions(
    top: TopImages, purity_top: torch.Tensor, data: ReportData, names: list[str]
) -> list[dict[str, Any]]:
    """One row per dimension of ``top``: majority class, significance, top-image and all purity."""
    majority = data.stats.majority_class[top.dims]
    return [
        {
            "dim": d,
            "majority_class": names[int(majority[row])],
            "majority_significant": bool(data.p_value[d] <= SIGNIFICANCE),
            "p_value": float(data.p_value[d]),
            "purity_top": float(purity_top[row]),
            "purity": float(data.stats.purity[d]),
            "active_images": int(data.stats.active_count[d]),
        }
        for row, d in enumerate(top.dims.tolist())
    ]


def write_report_files(
    folder: Path,
    report: dict[str, Any],
    inputs: ReportInputs,
    data: ReportData,
    shown: list[tuple[TopImages, torch.Tensor]],
) -> None:
    """Writes the bundle, the pictures, ``metrics.json`` and ``metrics.md`` into ``folder``."""
    names, gated = inputs.class_names, inputs.gated
    significant = data.p_value <= SIGNIFICANCE
    write_feature_bundle(
        folder,
        features=data.features,
        labels=data.labels,
        class_names=names,
        thumbnails=data.thumbnails,
        gate_open_rate=data.gate_open.mean(axis=0) if gated else None,
    )
    for name, (top, purity_top), title in zip(
        ("top_activations.png", "least_selective_activations.png"),
        shown,
        ("most selective", "least selective"),
        strict=True,
    ):
        plots.plot_top_activations(
            folder / name,
            top,
            purity_top.numpy(),
            data.labels,
            data.thumbnails,
            data.stats,
            names,
            significant=significant[top.dims.numpy()],
            title=title,
        )
    most = shown[0][0].dims.numpy()
    plots.plot_class_histograms(folder / "class_histograms.png", most, data.stats, names)
    settings = {"hard gate": data.metrics}
    if gated:
        settings["soft gate"] = report["metrics_soft_gate"]
    plots.plot_retrieval_precision(folder / "retrieval_precision.png", settings)
    plots.plot_active_dims_per_image(
        folder / "active_dims_per_image.png", data.active_per_image, data.features.shape[1]
    )
    pictures = [name for name in REPORT_FILES if name.endswith(".png")]
    skipped = []
    if gated:
        plots.plot_gate_open_rates(folder / GATE_PICTURE, data.gate_open)
        pictures.append(GATE_PICTURE)
    else:
        skipped.append(f"{GATE_PICTURE}: not drawn, {inputs.loaded.method} has no gate")
    (folder / "metrics.json").write_text(
        json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    (folder / "metrics.md").write_text(render_markdown(report, pictures, skipped), encoding="utf-8")
