"""The post-training evaluation report: one command from a checkpoint to a folder of metrics and
pictures.

    python -m solo_bayesncl.evaluation CHECKPOINT --out REPORT_DIR [--dataset fashion-mnist]
        [--batch-size 256] [--max-images N] [--device cpu|cuda] [--top-dims 16] [--overwrite]

``CHECKPOINT`` is any layout :func:`solo_bayesncl.checkpoints.load_checkpoint` reads (solo-learn
``.ckpt`` with its ``args.json``, the official NCL/BayesNCL codes' layout, zoo artifacts) of
``bayesncl``, ``ncl``, ``simclr`` or ``mocov2plus``. ``--dataset`` defaults to the checkpoint's
validation data; it takes a dataset name or an image folder (``class/image`` layout).

The report folder holds:

``metrics.json``
    ``method``, ``checkpoint``, ``dataset``, ``num_images``, ``metrics`` (hard gate; the
    representation of DESIGN section 2) and, for BayesNCL, ``metrics_soft_gate`` and a
    ``gate_open_rate`` summary; ``top_dimensions`` lists the dimensions of the pictures.
``metrics.md``
    the same as readable tables, semantic consistency beside its label-shuffled baseline.
``top_activations.png``, ``class_histograms.png``, ``retrieval_precision.png``,
``active_dims_per_image.png``, ``gate_open_rates.png`` (BayesNCL only)
    see :mod:`solo_bayesncl.evaluation.plots`.
``features.npz``
    the dashboard's input (:mod:`solo_bayesncl.dashboard.bundle`):
    ``python -m solo_bayesncl.dashboard REPORT_DIR --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

__all__ = ["REPORT_FILES", "ReportError", "main", "write_report"]

REPORT_FILES: tuple[str, ...] = (
    "metrics.json",
    "metrics.md",
    "features.npz",
    "top_activations.png",
    "class_histograms.png",
    "retrieval_precision.png",
    "active_dims_per_image.png",
)
"""Files every report holds; BayesNCL reports add ``gate_open_rates.png``."""
GATE_PICTURE = "gate_open_rates.png"
PROTOCOLS: tuple[str, ...] = ("standard", "paper")
"""``standard``: this project's shared metrics, eval-mode BatchNorm. ``paper``: the standard
report plus the official BayesNCL evaluation's figures (``metrics_paper``)."""


class ReportError(ValueError):
    """The report cannot be written (folder not empty, no labelled validation data, bad option)."""


@dataclass
class _Extraction:
    """Everything one pass over the validation set keeps."""

    features: list[torch.Tensor] = field(default_factory=list)
    labels: list[torch.Tensor] = field(default_factory=list)
    thumbnails: list[np.ndarray] = field(default_factory=list)
    gate_open: list[torch.Tensor] = field(default_factory=list)
    seen: int = 0
    non_finite: int = 0


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"report folder {out_dir} exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ReportError(
            f"report folder {out_dir} exists and is not empty; choose another --out or pass "
            "--overwrite to replace its report files"
        )


def _dataset_cfg(cfg, dataset: str | Path | None):
    """The checkpoint's config with its data switched to ``dataset`` (a name or an image folder)."""
    from solo_bayesncl.data.datasets import resolve_dataset_cfg

    cfg = cfg.copy()
    if dataset is None:
        return cfg
    folder = Path(str(dataset))
    cfg.data.pop("offline_dataset", None)
    if folder.is_dir():
        cfg.data.dataset = "custom"
        cfg.data.format = "image_folder"
        cfg.data.val_path = str(folder)
        cfg.data.no_labels = False
    else:
        cfg.data.dataset = str(dataset)
    return resolve_dataset_cfg(cfg)


def _dataset_label(cfg) -> str:
    name = OmegaConf.select(cfg, "data.offline_dataset", default=None) or cfg.data.dataset
    if name == "custom":
        return f"custom ({cfg.data.val_path})"
    return str(name)


def _class_names(dataset, num_classes: int | None) -> list[str]:
    inner = dataset
    while not hasattr(inner, "classes") and hasattr(inner, "dataset"):
        inner = inner.dataset
    names = getattr(inner, "classes", None)
    if names:
        return [str(c) for c in names]
    if not num_classes:
        raise ReportError("the validation dataset names no classes and data.num_classes is unset")
    return [str(i) for i in range(int(num_classes))]


def _limit(dataset, max_images: int | None, seed: int = 0):
    if max_images is None or max_images >= len(dataset):
        return dataset
    if max_images < 1:
        raise ReportError(f"--max-images must be >= 1, got {max_images}")
    from torch.utils.data import Subset

    # a seeded random subset, in dataset order (image folders are sorted by class)
    picks = np.sort(np.random.default_rng(seed).permutation(len(dataset))[:max_images])
    return Subset(dataset, picks.tolist())


def _thumbnails(
    images: torch.Tensor, mean: Sequence[float], std: Sequence[float], size: int
) -> np.ndarray:
    """Undo the normalisation, shrink to at most ``size`` px and return (B, h, w, 3) uint8."""
    x = images.float() * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    h, w = x.shape[-2:]
    if max(h, w) > size:
        scale = size / max(h, w)
        x = F.interpolate(
            x,
            size=(max(1, round(h * scale)), max(1, round(w * scale))),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).contiguous().numpy()


@torch.no_grad()
def _extract(
    model, loader, device, gated: bool, accumulators: dict[str, Any], image_stats, progress: bool
) -> _Extraction:
    """One forward pass per batch gives the hard and (BayesNCL) soft representation, the hard
    gate and the thumbnails; both accumulators are updated on the way. Once a batch holds a
    non-finite feature row, the pass only counts such rows (the caller refuses the model)."""
    from tqdm.auto import tqdm

    from solo_bayesncl.metrics import non_finite_rows
    from solo_bayesncl.representations import representation_from_output

    kept = _Extraction()
    mean, std, thumb_size = image_stats
    for images, labels in tqdm(
        loader, desc="extracting features", unit="batch", disable=not progress
    ):
        out = model(images.to(device, non_blocking=True))
        hard = representation_from_output(model, out, gate="hard").float().cpu()
        soft = representation_from_output(model, out, gate="soft").float().cpu() if gated else None
        kept.seen += hard.shape[0]
        kept.non_finite += non_finite_rows(hard if soft is None else torch.cat([hard, soft], 1))
        if kept.non_finite:
            continue
        labels = labels.long().cpu()
        accumulators["hard"].update(hard, labels)
        if gated:
            accumulators["soft"].update(soft, labels)
            kept.gate_open.append((model.gate_output(out["gate_logits"], "hard").mask > 0.5).cpu())
        kept.features.append(hard)
        kept.labels.append(labels)
        kept.thumbnails.append(_thumbnails(images, mean, std, thumb_size))
    if not kept.seen:
        raise ReportError("the validation dataset is empty")
    return kept


def _gate_summary(gate_open: np.ndarray) -> dict[str, float]:
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


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}


def _format(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if key.startswith("num_") or key in ("active_dims", "retrieval_samples"):
        return f"{int(round(value))}"
    return f"{value:+.4f}" if key.endswith("_gain") else f"{value:.4f}"


def _markdown(report: dict[str, Any], pictures: list[str], skipped: list[str]) -> str:
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
            "(± {:.4f}): gain **{:+.4f}**. Sparser features have a higher chance floor, so "
            "compare methods by the gain.".format(
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
            lines.append(f"| {key} | {_format(key, value)} | {_format(key, soft.get(key))} |")
        lines += [
            "",
            "The soft gate (`u * alpha`) zeroes no entry (alpha never reaches 0), so on the "
            "threshold-based metrics (active dims, sparsity, semantic consistency and entropies) "
            "it reads exactly like no gate at all, i.e. like NCL's `normalize(phi(z))`: only the "
            "zeros of `phi` remain. The hard gate is the representation BayesNCL is judged on.",
        ]
    else:
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {key} | {_format(key, value)} |" for key, value in metrics.items()]
    lines += _paper_markdown(report)
    gate = report.get("gate_open_rate")
    if gate is not None:
        lines += ["", "## Hard gate", "", "| statistic | value |", "|---|---:|"]
        lines += [f"| {k} | {v if isinstance(v, int) else f'{v:.4f}'} |" for k, v in gate.items()]
    lines += [
        "",
        "## Most used dimensions",
        "",
        "| dim | majority class | purity | active images |",
    ]
    lines.append("|---:|---|---:|---:|")
    lines += [
        f"| {d['dim']} | {d['majority_class']} | {d['purity']:.3f} | {d['active_images']} |"
        for d in report["top_dimensions"]
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
    """The paper-protocol section of ``metrics.md``: its main figures beside the standard ones,
    then every official figure."""
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
        lines.append(f"| {key} | {cell} | {std_key} | {_format(std_key, std)} |")
    lines += ["", "| every paper figure | value |", "|---|---:|"]
    lines += [f"| {k} | {'n/a' if v is None else f'{v:.6g}'} |" for k, v in paper.items()]
    return lines


def write_report(
    checkpoint: str | Path,
    out_dir: str | Path,
    dataset: str | Path | None = None,
    *,
    batch_size: int = 256,
    max_images: int | None = None,
    device: str | None = None,
    top_dims: int = 16,
    images_per_dim: int = 8,
    num_workers: int = 2,
    thumbnail_size: int = 64,
    shuffle_permutations: int = 5,
    retrieval_max_samples: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    protocol: str = "standard",
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` on the validation set of ``dataset`` and write the report folder.

    Args:
        checkpoint: a checkpoint file (see the module docstring).
        out_dir: the report folder; created, and refused when it exists non-empty unless
            ``overwrite``.
        dataset: a dataset name (``fashion-mnist``, ``cifar10``, ...) or an image folder; None
            reads the checkpoint's own validation data.
        batch_size, num_workers: the validation loader's.
        max_images: evaluate a seeded random subset of this many images.
        device: ``cpu`` or ``cuda`` (default: cuda when available).
        top_dims: dimensions shown in the top-activation grid and class histograms.
        images_per_dim: images per row of the top-activation grid.
        thumbnail_size: longest side of the stored thumbnails, in pixels.
        shuffle_permutations: permutations of the label-shuffled consistency baseline.
        retrieval_max_samples: cap on the vectors used for retrieval precision.
        overwrite: replace the report files in a non-empty ``out_dir``.
        progress: show a progress bar while extracting features.
        protocol: ``standard`` (eval-mode BatchNorm, the shared metric definitions) or
            ``paper``, which adds ``metrics_paper``: the official BayesNCL evaluation
            (:mod:`solo_bayesncl.evaluation.paper`), beside the standard figures.

    Returns:
        The content of ``metrics.json``.

    Raises:
        CheckpointError: missing or unreadable checkpoint, unknown method.
        ReportError: non-empty ``out_dir`` without ``overwrite``, no labelled validation data.
    """
    from torch.utils.data import DataLoader

    from solo_bayesncl.checkpoints import load_checkpoint, load_method
    from solo_bayesncl.dashboard.bundle import write_feature_bundle
    from solo_bayesncl.data.datasets import build_val_dataset, image_params, validation_transform
    from solo_bayesncl.evaluation import plots
    from solo_bayesncl.metrics import InterpretabilityAccumulator

    out_dir = Path(out_dir)
    _check_out_dir(out_dir, overwrite)
    if protocol not in PROTOCOLS:
        raise ReportError(
            f"protocol={protocol!r} is not supported; allowed values: {', '.join(PROTOCOLS)}"
        )
    for name, value in (("batch_size", batch_size), ("top_dims", top_dims)):
        if value < 1:
            raise ReportError(f"{name} must be >= 1, got {value}")
    loaded = load_checkpoint(checkpoint)
    cfg = _dataset_cfg(loaded.cfg, dataset)
    val = build_val_dataset(cfg, validation_transform(cfg))
    if val is None:
        raise ReportError(
            f"{loaded.path}: its config has no labelled validation data (data.val_path is unset "
            "or data.no_labels is set); pass a dataset name or an image folder with --dataset"
        )
    class_names = _class_names(val, OmegaConf.select(cfg, "data.num_classes", default=None))
    val = _limit(val, max_images)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = load_method(loaded, device=device)
    gated = hasattr(model, "gate_output")
    options = {
        "shuffle_permutations": shuffle_permutations,
        "retrieval_max_samples": retrieval_max_samples,
    }
    accumulators = {"hard": InterpretabilityAccumulator(len(class_names), **options)}
    if gated:
        accumulators["soft"] = InterpretabilityAccumulator(len(class_names), **options)
    loader = DataLoader(
        val,
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
    )
    _, mean, std = image_params(cfg)
    kept = _extract(
        model, loader, device, gated, accumulators, (mean, std, thumbnail_size), progress
    )
    if kept.non_finite:
        raise ReportError(
            f"{loaded.path}: the model gives NaN or Inf features for {kept.non_finite} of "
            f"{kept.seen} images (broken weights, e.g. a diverged run); no report written"
        )

    features = torch.cat(kept.features).numpy()
    labels = torch.cat(kept.labels).numpy()
    thumbnails = np.concatenate(kept.thumbnails)
    gate_open = torch.cat(kept.gate_open).numpy() if gated else None
    metrics = accumulators["hard"].compute()
    stats = accumulators["hard"].per_dimension_stats()
    dims = plots.select_top_dimensions(stats, top_dims)

    out_dir.mkdir(parents=True, exist_ok=True)
    stale = out_dir / GATE_PICTURE
    if overwrite and stale.is_file() and not gated:
        stale.unlink()
    report: dict[str, Any] = {
        "method": loaded.method,
        "checkpoint": str(loaded.path),
        "dataset": _dataset_label(cfg),
        "num_images": int(features.shape[0]),
        "representation": {
            "bayesncl": "v = normalize(normalize(phi(z)) * m), hard gate m",
            "ncl": "normalize(phi(z))",
        }.get(loaded.method, "normalized projection z / ||z||"),
        "metrics": _finite(metrics),
    }
    if gated:
        report["metrics_soft_gate"] = _finite(accumulators["soft"].compute())
        report["gate_open_rate"] = _gate_summary(gate_open)
    if protocol == "paper":
        from solo_bayesncl.evaluation.paper import evaluate_paper_protocol

        paper = evaluate_paper_protocol(
            model,
            cfg,
            lambda transform: build_val_dataset(cfg, transform),
            batch_size=batch_size,
            num_workers=num_workers,
            device=device,
            max_images_subset=lambda d: _limit(d, max_images),
        )
        report["protocol"] = "paper"
        report["metrics_paper"] = _finite(paper["metrics"])
        report["paper_protocol"] = paper["settings"]
    report["top_dimensions"] = [
        {
            "dim": int(d),
            "majority_class": class_names[int(stats.majority_class[d])],
            "purity": float(stats.purity[d]),
            "active_images": int(stats.active_count[d]),
        }
        for d in dims
    ]
    write_feature_bundle(
        out_dir,
        features=features,
        labels=labels,
        class_names=class_names,
        thumbnails=thumbnails,
        gate_open_rate=gate_open.mean(axis=0) if gated else None,
    )

    plots.plot_top_activations(
        out_dir / "top_activations.png",
        features,
        labels,
        thumbnails,
        dims,
        stats,
        class_names,
        per_dim=images_per_dim,
    )
    plots.plot_class_histograms(out_dir / "class_histograms.png", dims, stats, class_names)
    settings = {"hard gate": metrics}
    if gated:
        settings["soft gate"] = report["metrics_soft_gate"]
    plots.plot_retrieval_precision(out_dir / "retrieval_precision.png", settings)
    from solo_bayesncl.metrics import EPS

    normalised = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
    active_per_image = (np.abs(normalised) > EPS).sum(axis=1)
    plots.plot_active_dims_per_image(
        out_dir / "active_dims_per_image.png", active_per_image, features.shape[1]
    )
    pictures = [name for name in REPORT_FILES if name.endswith(".png")]
    skipped = []
    if gated:
        plots.plot_gate_open_rates(out_dir / GATE_PICTURE, gate_open)
        pictures.append(GATE_PICTURE)
    else:
        skipped.append(f"{GATE_PICTURE}: not drawn, {loaded.method} has no gate")

    (out_dir / "metrics.json").write_text(
        json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    (out_dir / "metrics.md").write_text(_markdown(report, pictures, skipped), encoding="utf-8")
    return report


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solo_bayesncl.evaluation",
        description="Evaluate a pretrained checkpoint (bayesncl, ncl, simclr, mocov2plus) on a "
        "validation set and write a report folder: metrics.json, metrics.md, PNG pictures and "
        "features.npz (the dashboard's input).",
    )
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt beside its args.json, or zoo)")
    parser.add_argument("--out", required=True, type=Path, help="report folder to write")
    parser.add_argument(
        "--dataset",
        default=None,
        help="dataset name (e.g. fashion-mnist) or image folder; default: the checkpoint's",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--max-images", type=int, default=None, help="evaluate a random subset")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--top-dims", type=int, default=16, help="dimensions in the pictures")
    parser.add_argument("--images-per-dim", type=int, default=8)
    parser.add_argument("--shuffle-permutations", type=int, default=5)
    parser.add_argument("--retrieval-max-samples", type=int, default=None)
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="standard",
        help="paper: add the official BayesNCL evaluation's figures (training-mode BatchNorm, "
        "consistency x100, ...) beside the standard ones; see docs/fidelity.md",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0, or 2 with a one-line error on bad input."""
    from solo_bayesncl.registration import require_solo_learn

    args = parse_args(argv)
    require_solo_learn("python -m solo_bayesncl.evaluation")
    from solo_bayesncl.checkpoints import CheckpointError
    from solo_bayesncl.data.datasets import DatasetUnavailableError

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("error: --device cuda was given but no CUDA GPU is available\n")
        return 2
    try:
        report = write_report(
            args.checkpoint,
            args.out,
            args.dataset,
            batch_size=args.batch_size,
            max_images=args.max_images,
            device=args.device,
            top_dims=args.top_dims,
            images_per_dim=args.images_per_dim,
            num_workers=args.num_workers,
            shuffle_permutations=args.shuffle_permutations,
            retrieval_max_samples=args.retrieval_max_samples,
            protocol=args.protocol,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except (CheckpointError, ReportError, DatasetUnavailableError, FileNotFoundError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    m = report["metrics"]
    print(
        f"{report['method']} on {report['dataset']} ({report['num_images']} images): "
        f"consistency {m['semantic_consistency']:.4f}"
        + (
            f" (shuffled {m['semantic_consistency_shuffled']:.4f})"
            if "semantic_consistency_shuffled" in m
            else ""
        )
        + f", sparsity {m['sparsity']:.4f}, active dims {int(m['active_dims'])}"
    )
    print(f"report written to {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
