"""The post-training evaluation report: from a checkpoint to a folder of metrics and pictures.

    python -m solo_bayesncl.evaluation CHECKPOINT --out REPORT_DIR [--dataset fashion-mnist]
        [--batch-size 256] [--max-images N] [--device cpu|cuda] [--top-dims 16] [--overwrite]

``CHECKPOINT`` is any layout :func:`solo_bayesncl.io.checkpoints.load_checkpoint` reads (solo-learn
``.ckpt`` with its ``args.json``, the official NCL/BayesNCL codes' layout, zoo artifacts) of
``bayesncl``, ``ncl``, ``simclr`` or ``mocov2plus``. ``--dataset`` defaults to the checkpoint's
validation data; it takes a dataset name or an image folder (``class/image`` layout).

The report folder holds:

``metrics.json``
    ``method``, ``checkpoint``, ``dataset``, ``num_images``, ``metrics`` (hard gate; the
    representation of docs/method.md) and, for BayesNCL, ``metrics_soft_gate`` and a
    ``gate_open_rate`` summary; ``top_dimensions`` lists the most selective dimensions (a
    majority class that beats the label-shuffled baseline first, then purity; see
    :func:`solo_bayesncl.metrics.selectivity_order`) and ``least_selective_dimensions`` the
    least selective, each with its majority class, whether that majority is significant, the
    purity of its top images and over all its active images.
``metrics.md``
    the same as readable tables, semantic consistency beside its label-shuffled baseline.
``top_activations.png`` (most selective dimensions), ``least_selective_activations.png``,
``class_histograms.png``, ``retrieval_precision.png``,
``active_dims_per_image.png``, ``gate_open_rates.png`` (BayesNCL only)
    see :mod:`solo_bayesncl.evaluation.plots`.
``features.npz``
    the dashboard's input (:mod:`solo_bayesncl.dashboard.bundle`):
    ``python -m solo_bayesncl.dashboard REPORT_DIR --out DIR``.

``metrics.json`` lists the files the report wrote (``files``). ``--overwrite`` replaces those
files and removes only the files the *previous* report's own list names that the new one does not
write (a BayesNCL picture when an NCL report replaces a BayesNCL one); any other file in the
folder, whatever its name, is never touched.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from solo_bayesncl.core.validation import INPUT_ERRORS, first_line, require_choice, require_int
from solo_bayesncl.dashboard.bundle import write_feature_bundle
from solo_bayesncl.data.resolve import DatasetUnavailableError
from solo_bayesncl.evaluation import plots
from solo_bayesncl.evaluation.markdown import render_markdown
from solo_bayesncl.evaluation.paper import evaluate_ncl_paper_protocol, evaluate_paper_protocol
from solo_bayesncl.evaluation.report_data import (
    ReportData,
    ReportError,
    ReportInputs,
    extract_report_data,
    load_report_inputs,
)
from solo_bayesncl.io.checkpoints import CheckpointError
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
    TOP_IMAGES,
    selectivity_order,
    top_image_purity,
    top_images,
)

__all__ = [
    "GATE_PICTURE",
    "PROTOCOLS",
    "REPORT_FILES",
    "PreparedReport",
    "ReportError",
    "check_report_options",
    "gate_summary",
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
PROTOCOLS: tuple[str, ...] = ("standard", "paper", "ncl-paper")
"""``standard``: this project's shared metrics, eval-mode BatchNorm. ``paper``: the standard
report plus the official BayesNCL evaluation's figures (``metrics_paper``). ``ncl-paper``: the
standard report plus the NCL repository's evaluation figures (``metrics_ncl_paper``)."""
REPRESENTATIONS: dict[str, str] = {
    "bayesncl": "v = normalize(normalize(phi(z)) * m), hard gate m",
    "ncl": "normalize(phi(z))",
}
"""What ``metrics.json`` says the metrics were computed on; other methods: ``z / ||z||``."""


@dataclass(frozen=True)
class PreparedReport:
    """A report's inputs and its one pass over the validation images (:func:`prepare_report`),
    for a caller that reads that pass for something else before :func:`write_report` writes the
    report from it (the benchmark's kNN reads the backbone features of the same pass).

    Attributes:
        inputs: the checkpoint, its model and the validation images.
        data: the pass's figures and arrays (:func:`extract_report_data`).
        settings: the options that decide the pass's result (:func:`_pass_settings`);
            :func:`write_report` refuses a prepared report whose settings are not its own.
    """

    inputs: ReportInputs
    data: ReportData
    settings: dict[str, Any]


def _pass_settings(
    checkpoint: str | Path,
    dataset: str | Path | None,
    *,
    batch_size: int,
    max_images: int | None,
    device: str | None,
    thumbnail_size: int,
    shuffle_permutations: int,
    retrieval_max_samples: int | None,
) -> dict[str, Any]:
    """What a report's pass gives depends on: the checkpoint, the images, the batches and the
    device they run on, the thumbnails' size and the metrics' options (the loader's workers
    and the progress bar change nothing of it)."""
    return {
        "checkpoint": str(Path(checkpoint)),
        "dataset": None if dataset is None else str(dataset),
        "batch_size": batch_size,
        "max_images": max_images,
        "device": device,
        "thumbnail_size": thumbnail_size,
        "shuffle_permutations": shuffle_permutations,
        "retrieval_max_samples": retrieval_max_samples,
    }


def prepare_report(
    checkpoint: str | Path,
    dataset: str | Path | None = None,
    *,
    batch_size: int = 256,
    max_images: int | None = None,
    device: str | None = None,
    num_workers: int = 2,
    thumbnail_size: int = 64,
    shuffle_permutations: int = 5,
    retrieval_max_samples: int | None = None,
    progress: bool = True,
    with_backbone: bool = False,
) -> PreparedReport:
    """Loads the checkpoint and makes the report's one pass over the validation images, with the
    options of :func:`write_report` of the same names; ``with_backbone`` keeps the backbone
    features of that pass (``data.backbone_features``). Raises as :func:`write_report` does for
    a bad option or input."""
    check_report_options(
        batch_size=batch_size,
        max_images=max_images,
        top_dims=1,
        images_per_dim=1,
        num_workers=num_workers,
        thumbnail_size=thumbnail_size,
        shuffle_permutations=shuffle_permutations,
        retrieval_max_samples=retrieval_max_samples,
        protocol="standard",
        device=device,
    )
    with _reading_inputs():
        inputs = load_report_inputs(checkpoint, dataset, max_images, device)
    data = extract_report_data(
        inputs,
        batch_size=batch_size,
        num_workers=num_workers,
        thumbnail_size=thumbnail_size,
        accumulator_options={
            "shuffle_permutations": shuffle_permutations,
            "retrieval_max_samples": retrieval_max_samples,
        },
        progress=progress,
        with_backbone=with_backbone,
    )
    settings = _pass_settings(
        checkpoint,
        dataset,
        batch_size=batch_size,
        max_images=max_images,
        device=device,
        thumbnail_size=thumbnail_size,
        shuffle_permutations=shuffle_permutations,
        retrieval_max_samples=retrieval_max_samples,
    )
    return PreparedReport(inputs, data, settings)


def write_report(
    checkpoint: str | Path,
    out_dir: str | Path,
    dataset: str | Path | None = None,
    *,
    batch_size: int = 256,
    max_images: int | None = None,
    device: str | None = None,
    top_dims: int = 16,
    images_per_dim: int = TOP_IMAGES,
    num_workers: int = 2,
    thumbnail_size: int = 64,
    shuffle_permutations: int = 5,
    retrieval_max_samples: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    protocol: str = "standard",
    prepared: PreparedReport | None = None,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` on the validation set of ``dataset`` and write the report folder.

    Args:
        checkpoint: a checkpoint file (see the module docstring).
        out_dir: the report folder; created, and refused when it exists non-empty unless
            ``overwrite`` or cannot be written (checked first). The report is written into a
            hidden sibling folder and moved in when complete, so an interrupted run leaves an
            earlier report intact.
        dataset: a dataset name (``fashion-mnist``, ``cifar10``, ...) or an image folder; None
            reads the checkpoint's own validation data.
        batch_size, num_workers: the validation loader's.
        max_images: evaluate a seeded random subset of this many images.
        device: ``cpu`` or ``cuda`` (default: cuda when available).
        top_dims: dimensions shown in the top-activation grid and class histograms.
        images_per_dim: top images per dimension: the row of the top-activation grid and the
            images its purity of the top images is taken over (the dashboard's count by
            default, :data:`solo_bayesncl.metrics.TOP_IMAGES`).
        thumbnail_size: longest side of the stored thumbnails, in pixels.
        shuffle_permutations: permutations of the label-shuffled consistency baseline.
        retrieval_max_samples: cap on the vectors used for retrieval precision.
        overwrite: replace the report files in a non-empty ``out_dir``.
        progress: show a progress bar while extracting features.
        protocol: ``standard`` (eval-mode BatchNorm, the shared metric definitions),
            ``paper``, which adds ``metrics_paper``: the official BayesNCL evaluation
            (:mod:`solo_bayesncl.evaluation.paper`), beside the standard figures, or
            ``ncl-paper``, which adds ``metrics_ncl_paper``: the NCL repository's evaluation.
        prepared: the pass :func:`prepare_report` made with these options (the same
            ``checkpoint``, ``dataset``, ``batch_size``, ``max_images``, ``device``,
            ``thumbnail_size``, ``shuffle_permutations`` and ``retrieval_max_samples``), written
            as it is instead of a pass of its own; the report is the one that pass gives.

    Returns:
        The content of ``metrics.json``.

    Raises:
        CheckpointError: missing or unreadable checkpoint, unknown method.
        ReportError: an option out of range, non-empty ``out_dir`` without ``overwrite``, no
            labelled validation data, or any other bad input (one line, before any work), or a
            ``prepared`` pass made with other options.
    """
    out_dir = Path(out_dir)
    check_report_options(
        batch_size=batch_size,
        max_images=max_images,
        top_dims=top_dims,
        images_per_dim=images_per_dim,
        num_workers=num_workers,
        thumbnail_size=thumbnail_size,
        shuffle_permutations=shuffle_permutations,
        retrieval_max_samples=retrieval_max_samples,
        protocol=protocol,
        device=device,
    )
    _check_out_dir(out_dir, overwrite)
    if prepared is not None:
        _check_prepared(
            prepared,
            _pass_settings(
                checkpoint,
                dataset,
                batch_size=batch_size,
                max_images=max_images,
                device=device,
                thumbnail_size=thumbnail_size,
                shuffle_permutations=shuffle_permutations,
                retrieval_max_samples=retrieval_max_samples,
            ),
        )
    remove_stale_temporaries(out_dir, PARTIAL_SUFFIX)
    if prepared is None:
        prepared = prepare_report(
            checkpoint,
            dataset,
            batch_size=batch_size,
            max_images=max_images,
            device=device,
            num_workers=num_workers,
            thumbnail_size=thumbnail_size,
            shuffle_permutations=shuffle_permutations,
            retrieval_max_samples=retrieval_max_samples,
            progress=progress,
        )
    inputs, data = prepared.inputs, prepared.data
    order = selectivity_order(
        data.stats.active_count, data.stats.purity, torch.from_numpy(data.p_value)
    ).numpy()
    most, least = order[:top_dims], order[::-1][:top_dims]
    report = report_content(inputs, data, order, most, least, images_per_dim)
    if protocol != "standard":
        evaluate, key = {
            "paper": (evaluate_paper_protocol, "paper"),
            "ncl-paper": (evaluate_ncl_paper_protocol, "ncl_paper"),
        }[protocol]
        official = evaluate(
            inputs.model,
            inputs.cfg,
            inputs.val_dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            device=inputs.device,
        )
        report["protocol"] = protocol
        report[f"metrics_{key}"] = finite_or_null(official["metrics"])
        report[f"{key}_protocol"] = official["settings"]
    report["files"] = sorted(report_files(inputs.gated))
    # written into a hidden sibling folder, moved into out_dir only when complete: a killed
    # run leaves an earlier report as it was (and its own folder is removed by the next run);
    # of the previous report's own files, those the new one does not write are removed
    stale = tuple(sorted(_previous_files(out_dir) - set(report["files"])))
    with replacing_folder(
        out_dir, PARTIAL_SUFFIX, stale, last=("metrics.md", "metrics.json")
    ) as staging:
        write_report_files(staging, report, inputs, data, most, least, images_per_dim)
    return report


def _check_prepared(prepared: PreparedReport, settings: dict[str, Any]) -> None:
    """A prepared pass is written only by a report of the options it was made with."""
    differ = [k for k in settings if prepared.settings.get(k) != settings[k]]
    if differ:
        key = differ[0]
        raise ReportError(
            f"the prepared report was made with {key}={prepared.settings.get(key)!r}, this "
            f"report asks for {key}={settings[key]!r}; prepare it with the report's options"
        )


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


def check_report_options(
    *,
    batch_size: int,
    max_images: int | None,
    top_dims: int,
    images_per_dim: int,
    num_workers: int,
    thumbnail_size: int,
    shuffle_permutations: int,
    retrieval_max_samples: int | None,
    protocol: str,
    device: str | None,
) -> None:
    """Every option of :func:`write_report` in range, named as the command spells it; raises
    :class:`ReportError` before anything is read."""
    ints = [
        ("--batch-size", batch_size, 1),
        ("--top-dims", top_dims, 1),
        ("--images-per-dim", images_per_dim, 1),
        ("--num-workers", num_workers, 0),
        ("thumbnail_size", thumbnail_size, 1),
        # the baseline the consistency gain is measured against needs a permutation
        ("--shuffle-permutations", shuffle_permutations, 1),
    ]
    if max_images is not None:
        ints.append(("--max-images", max_images, 1))
    if retrieval_max_samples is not None:  # a query needs one other sample
        ints.append(("--retrieval-max-samples", retrieval_max_samples, 2))
    try:
        for name, value, low in ints:
            require_int(name, value, low=low)
        require_choice("--protocol", protocol, PROTOCOLS)
        if device is not None:
            require_choice("--device", device, ("cpu", "cuda"))
    except ValueError as err:
        raise ReportError(str(err)) from None


@contextlib.contextmanager
def _reading_inputs() -> Iterator[None]:
    """Errors raised while the report reads its inputs (checkpoint, dataset files, options)
    become :class:`ReportError`: one line for the command, before any work is done."""
    try:
        yield
    except (ReportError, CheckpointError, DatasetUnavailableError):
        raise  # already one line, and the callers tell them apart
    except INPUT_ERRORS as err:
        raise ReportError(first_line(err)) from None


def report_files(gated: bool) -> list[str]:
    """The files a report writes: :data:`REPORT_FILES`, and the gate picture for BayesNCL."""
    return [*REPORT_FILES, *([GATE_PICTURE] if gated else [])]


def _previous_files(out_dir: Path) -> set[str]:
    """The files the report already in ``out_dir`` says it wrote (its ``metrics.json``'s
    ``files``); empty when there is none, or it predates that list."""
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


def report_content(
    inputs: ReportInputs,
    data: ReportData,
    order: np.ndarray,
    most: np.ndarray,
    least: np.ndarray,
    images_per_dim: int,
) -> dict[str, Any]:
    """The content of ``metrics.json`` (without the paper protocol's figures)."""
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
    report["top_dimensions"] = describe_dimensions(most, data, inputs.class_names, images_per_dim)
    report["least_selective_dimensions"] = describe_dimensions(
        least, data, inputs.class_names, images_per_dim
    )
    return report


def describe_dimensions(
    dims: np.ndarray, data: ReportData, names: list[str], images_per_dim: int
) -> list[dict[str, Any]]:
    """One row per dimension: its majority class, whether that majority beats the label-shuffled
    baseline, the purity of its top ``images_per_dim`` images (``purity_top``,
    :func:`solo_bayesncl.metrics.top_image_purity`, the dashboard's figure) and of all its
    active images."""
    top = top_images(data.features, images_per_dim, dims=dims)
    majority = data.stats.majority_class[top.dims]
    purity_top = top_image_purity(top.index, data.labels, majority)
    rows = []
    for row, d in enumerate(top.dims.tolist()):
        rows.append(
            {
                "dim": d,
                "majority_class": names[int(majority[row])],
                "majority_significant": bool(data.p_value[d] <= SIGNIFICANCE),
                "p_value": float(data.p_value[d]),
                "purity_top": float(purity_top[row]),
                "purity": float(data.stats.purity[d]),
                "active_images": int(data.stats.active_count[d]),
            }
        )
    return rows


def write_report_files(
    folder: Path,
    report: dict[str, Any],
    inputs: ReportInputs,
    data: ReportData,
    most: np.ndarray,
    least: np.ndarray,
    images_per_dim: int,
) -> None:
    """Writes the report's files into ``folder``: the dashboard bundle, the pictures, then
    ``metrics.json`` and ``metrics.md``."""
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
    for name, dims, title in (
        ("top_activations.png", most, "most selective"),
        ("least_selective_activations.png", least, "least selective"),
    ):
        plots.plot_top_activations(
            folder / name,
            data.features,
            data.labels,
            data.thumbnails,
            dims,
            data.stats,
            names,
            per_dim=images_per_dim,
            significant=significant[dims],
            title=title,
        )
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
