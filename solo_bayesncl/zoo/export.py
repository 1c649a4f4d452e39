"""Turn a trained checkpoint into a zoo artifact, its sha256 and its manifest entry.

``export_checkpoint`` reads a checkpoint and calls :func:`export_state_dict` (torch only), which
keeps the module weights, optionally in float16, without MoCo's momentum copies and queue unless
asked, and writes three files into ``out_dir``::

    <name>.pt          the artifact (format in :mod:`.artifact`)
    <name>.pt.sha256   "<hex>  <name>.pt", checkable with ``sha256sum -c``
    <name>.entry.json  the manifest entry to add to a manifest once the file is uploaded

The entry's ``sha256`` and ``size`` are those of the bytes written. :mod:`.hub_folder` writes the
same content as a Hugging Face Hub model repository.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from solo_bayesncl.config.saved import saved_model
from solo_bayesncl.host.availability import solo_learn_available
from solo_bayesncl.io.artifact import (
    Artifact,
    cast_floating,
    write_artifact,
)
from solo_bayesncl.io.checkpoints import (
    CheckpointError,
    check_finite_weights,
    load_checkpoint,
    load_method,
)
from solo_bayesncl.io.files import replacing, require_writable

from .errors import ArtifactError
from .hashing import sha256_file
from .manifest import ZOO_METHODS, validate_entry

#: Top-level state-dict modules that are training state only (MoCo's negative queue).
TRAINING_ONLY_STATE = ("queue", "queue_ptr")
#: File looked for beside a checkpoint when no metrics are given.
METRICS_FILE = "metrics.json"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_state_dict` wrote."""

    path: Path
    sha256: str
    size: int
    entry: dict[str, Any]
    sha256_path: Path
    entry_path: Path


def _is_momentum_state(key: str) -> bool:
    top = key.split(".", 1)[0]
    return top.startswith("momentum_") or top in TRAINING_ONLY_STATE


def _plain_config(cfg: Any) -> dict[str, Any]:
    """A JSON-serialisable plain dict from a DictConfig or a mapping."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise ArtifactError(f"cfg must be a mapping or a DictConfig, got {type(cfg).__name__}")
    plain = json.loads(json.dumps(cfg, default=lambda o: "<not serializable>"))
    for path in (("backbone", "name"), ("data", "dataset")):
        node: Any = plain
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if not isinstance(node, str) or not node:
            raise ArtifactError(f"cfg lacks {'.'.join(path)}, which the manifest entry needs")
    return plain


def report_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """The figures of an evaluation report's ``metrics.json``, its soft-gate ones as
    ``soft_gate/<name>``; a figure the report could not compute (``null``) is left out."""
    figures = {k: v for k, v in report["metrics"].items() if v is not None}
    soft = report.get("metrics_soft_gate") or {}
    figures.update({f"soft_gate/{k}": v for k, v in soft.items() if v is not None})
    return figures


def _is_report(metrics: Any) -> bool:
    return (
        isinstance(metrics, Mapping)
        and isinstance(metrics.get("metrics"), Mapping)
        and "method" in metrics
        and "num_images" in metrics
    )


def _plain_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """Flat ``{name: number}``, nested mappings flattened with '/' (``knn/top1``)."""
    flat: dict[str, float] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(f"{name}/", value)
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ArtifactError(f"metric {name!r} must be a number, got {value!r}")
            elif not math.isfinite(value):
                raise ArtifactError(
                    f"metric {name!r} is {value!r}; a manifest holds finite numbers only "
                    "(strict JSON has no NaN or Infinity)"
                )
            else:
                flat[name] = value

    walk("", metrics or {})
    return flat


def build_artifact(
    state_dict: Mapping[str, torch.Tensor],
    cfg: Any,
    method: str | None,
    fp16: bool,
    metrics: Mapping[str, Any] | None,
    keep_momentum: bool,
) -> Artifact:
    """The artifact content of a model's weights (arguments as in :func:`export_state_dict`):
    momentum copies and MoCo's queue listed in ``omitted`` unless ``keep_momentum``."""
    saved = _plain_config(cfg)
    method = method or saved_model(saved)["method"]
    if method not in ZOO_METHODS:
        raise ArtifactError(f"method {method!r} is not one of the zoo's methods {ZOO_METHODS}")
    bad = [k for k, v in state_dict.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ArtifactError(f"state_dict values must be tensors; not tensors: {bad[:5]}")

    kept = {k: v for k, v in state_dict.items() if keep_momentum or not _is_momentum_state(k)}
    omitted = {
        k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
        for k, v in state_dict.items()
        if k not in kept
    }
    return Artifact(
        method=method,
        cfg={**saved, "method": method},
        state_dict=cast_floating(kept, torch.float16 if fp16 else torch.float32),
        metrics=_plain_metrics(metrics),
        dtype="float16" if fp16 else "float32",
        omitted=omitted,
    )


def export_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    cfg: Any,
    name: str,
    out_dir: str | os.PathLike[str] = ".",
    *,
    method: str | None = None,
    fp16: bool = False,
    metrics: Mapping[str, Any] | None = None,
    urls: Iterable[str] = (),
    keep_momentum: bool = False,
    description: str | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write the zoo artifact of a model's weights, its sha256 file and its manifest entry.

    Args:
        state_dict: the module state (non-tensor values are rejected).
        cfg: the training config (DictConfig or mapping, solo-learn's args.json content).
        name: the entry name (lowercase letters, digits, '.', '_', '-').
        out_dir: folder for the three files.
        method: method name; default ``cfg["method"]``.
        fp16: store floating tensors as float16 (loading casts back).
        metrics: evaluation figures; nested mappings are flattened with '/'.
        urls: where the file will be uploaded (https); a URL ending in '/' gets the file name.
        keep_momentum: keep ``momentum_*`` copies and MoCo's queue (training state).
        description: optional one-line description.
        overwrite: replace an earlier export of ``name`` in ``out_dir`` (else refused).
    """
    artifact = build_artifact(state_dict, cfg, method, fp16, metrics, keep_momentum)
    method, plain, dtype = artifact.method, artifact.cfg, artifact.dtype
    out_dir = Path(out_dir)
    filename = f"{name}.pt"
    entry = {
        "name": name,
        "method": method,
        "dataset": saved_model(plain)["dataset"],
        "backbone": saved_model(plain)["backbone"],
        "urls": [u + filename if u.endswith("/") else u for u in urls],  # '/': a folder
        "sha256": "0" * 64,  # placeholder while validating the rest before writing
        "size": 1,
        "config": plain,
        "metrics": artifact.metrics,
        "file": filename,
        "dtype": dtype,
    }
    if description:
        entry["description"] = description
    _validate_before_upload(entry)
    if not overwrite:
        _refuse_existing(out_dir, name)

    path, sha_path, entry_path = _export_paths(out_dir, name)
    made = not out_dir.exists()  # a folder this export makes goes again if it fails
    # the three files appear together once all are written (renamed in this order on leaving)
    with _removed_on_error(out_dir if made else None), contextlib.ExitStack() as stack:
        tmp_entry, tmp_sha, tmp_path = (
            stack.enter_context(replacing(p, suffix=".part")) for p in (entry_path, sha_path, path)
        )
        write_artifact(artifact, tmp_path)
        entry["sha256"] = sha256_file(tmp_path)
        entry["size"] = tmp_path.stat().st_size
        tmp_sha.write_text(f"{entry['sha256']}  {filename}\n")
        tmp_entry.write_text(json.dumps(entry, indent=2, allow_nan=False) + "\n")
    return ExportResult(path, entry["sha256"], entry["size"], entry, sha_path, entry_path)


@contextlib.contextmanager
def _removed_on_error(folder: Path | None) -> Iterator[None]:
    """Removes ``folder`` (when given and left empty) if the block fails."""
    try:
        yield
    except BaseException:
        if folder is not None:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _export_paths(out_dir: Path, name: str) -> list[Path]:
    return [out_dir / f"{name}.pt", out_dir / f"{name}.pt.sha256", out_dir / f"{name}.entry.json"]


def _refuse_existing(out_dir: Path, name: str) -> None:
    existing = [p for p in _export_paths(out_dir, name) if p.exists()]
    if existing:
        raise ArtifactError(
            f"{existing[0]} exists (an earlier export named {name!r}); pass --overwrite to "
            "replace it, or choose another --name"
        )


def _validate_before_upload(entry: dict[str, Any]) -> None:
    """Schema check of everything but the URLs when none are known yet."""
    probe = dict(entry)
    if not probe["urls"]:
        probe["urls"] = ["https://example.invalid/" + entry["file"]]
    validate_entry(probe, source="export")


def export_checkpoint(
    ckpt: str | os.PathLike[str],
    name: str,
    out_dir: str | os.PathLike[str] = ".",
    *,
    fp16: bool = False,
    metrics: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    urls: Iterable[str] = (),
    keep_momentum: bool = False,
    description: str | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Export a trained checkpoint of bayesncl, ncl, simclr or mocov2plus (see
    :func:`export_state_dict`) or a zoo artifact (re-export, e.g. to fp16). ``metrics``: a mapping
    or a JSON file (figures, or a report's ``metrics.json``); by default an artifact's own figures,
    else ``metrics.json`` beside the checkpoint when it exists."""
    ckpt = Path(ckpt)
    require_writable(out_dir)  # before any work
    if not overwrite:
        _refuse_existing(Path(out_dir), name)
    loaded, metrics = _read_run(ckpt, metrics)
    return export_state_dict(
        loaded.state_dict,
        loaded.cfg,
        name,
        out_dir,
        method=loaded.method,
        fp16=fp16,
        metrics=metrics,
        urls=urls,
        keep_momentum=keep_momentum,
        description=description,
        overwrite=overwrite,
    )


def _read_run(
    ckpt: Path, metrics: Mapping[str, Any] | str | os.PathLike[str] | None
) -> tuple[Any, Mapping[str, Any] | None]:
    """The checkpoint, checked as every reader checks it, and its figures."""
    try:
        loaded = load_checkpoint(ckpt)
        if solo_learn_available():  # the checks linear evaluation and the report run
            load_method(loaded)
        else:  # without solo-learn no model can be built: the weights alone
            check_finite_weights(loaded)
    except CheckpointError as err:
        raise ArtifactError(str(err)) from None
    if metrics is None and getattr(loaded, "metrics", None):
        metrics = loaded.metrics  # re-export of a zoo artifact keeps its figures
    elif metrics is None and (ckpt.parent / METRICS_FILE).is_file():
        metrics = ckpt.parent / METRICS_FILE
    if isinstance(metrics, str | os.PathLike):
        try:
            metrics = json.loads(Path(metrics).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ArtifactError(f"cannot read metrics file {metrics}: {err}") from None
    if _is_report(metrics):
        metrics = report_metrics(metrics)
    return loaded, metrics
