"""The feature bundle: what an evaluation report folder holds for the dashboard.

``features.npz``: ``features`` (N, k) float16/float32, the representation the metrics read;
``labels`` (N,) in ``[0, C)``; ``class_names`` (C,); ``thumbnails`` (N, h, w, 3) uint8; optional
``gate_open_rate`` (k,), BayesNCL's hard-gate open share per dimension. Optional
``metrics.json``: ``{"method", "checkpoint", "dataset", "metrics": {name: float}}``.
:func:`write_feature_bundle` writes, :func:`load_feature_bundle` reads and checks."""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FEATURES_FILE = "features.npz"
METRICS_FILE = "metrics.json"
REQUIRED_KEYS = ("features", "labels", "class_names", "thumbnails")
OPTIONAL_KEYS = ("gate_open_rate",)


@dataclass
class FeatureBundle:
    """In-memory view of a report folder (see the module docstring for the meaning of each field)."""

    features: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    thumbnails: np.ndarray
    gate_open_rate: np.ndarray | None = None
    method: str = "unknown"
    checkpoint: str = ""
    dataset: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    top_images: int | None = None
    """The report's count of top images (``selectivity.top_images``), None when not a report's."""

    @property
    def num_images(self) -> int:
        return int(self.features.shape[0])

    @property
    def num_dims(self) -> int:
        return int(self.features.shape[1])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def _as_thumbnails(thumbnails: Any, source: str) -> np.ndarray:
    """Return thumbnails as (N, h, w, 3) uint8; grey (N, h, w) or (N, h, w, 1) are expanded."""
    thumbs = np.asarray(thumbnails)
    if thumbs.dtype != np.uint8:
        raise ValueError(
            f"{source}: 'thumbnails' must have dtype uint8 (values 0..255), got {thumbs.dtype}"
        )
    if thumbs.ndim == 3:
        thumbs = thumbs[..., None]
    if thumbs.ndim != 4 or thumbs.shape[-1] not in (1, 3):
        raise ValueError(
            f"{source}: 'thumbnails' must have shape (N, h, w, 3) (or grey (N, h, w)), "
            f"got {thumbs.shape}"
        )
    if thumbs.shape[-1] == 1:
        thumbs = np.repeat(thumbs, 3, axis=-1)
    return thumbs


def _validate(
    features: Any,
    labels: Any,
    class_names: Any,
    thumbnails: Any,
    gate_open_rate: Any,
    source: str,
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray, np.ndarray | None]:
    """Check shapes, dtypes and ranges; return normalised arrays or raise a ValueError naming the key."""
    feats = np.asarray(features)
    if feats.ndim != 2:
        raise ValueError(f"{source}: 'features' must be 2-D (N, k), got shape {feats.shape}")
    if feats.dtype not in (np.float16, np.float32):
        if not np.issubdtype(feats.dtype, np.floating) and not np.issubdtype(
            feats.dtype, np.integer
        ):
            raise ValueError(
                f"{source}: 'features' must be float16 or float32, got dtype {feats.dtype}"
            )
        feats = feats.astype(np.float32)
    if not np.isfinite(feats).all():
        raise ValueError(f"{source}: 'features' contains NaN or Inf")
    n = feats.shape[0]

    labs = np.asarray(labels)
    if labs.shape != (n,) or not np.issubdtype(labs.dtype, np.integer):
        raise ValueError(
            f"{source}: 'labels' must be an integer array of shape ({n},), "
            f"got dtype {labs.dtype} shape {labs.shape}"
        )
    labs = labs.astype(np.int64)

    names = [str(c) for c in np.asarray(class_names).reshape(-1).tolist()]
    if not names:
        raise ValueError(f"{source}: 'class_names' is empty")
    if n and (labs.min() < 0 or labs.max() >= len(names)):
        raise ValueError(
            f"{source}: 'labels' must lie in [0, {len(names) - 1}] (len(class_names) = "
            f"{len(names)}), got range [{labs.min()}, {labs.max()}]"
        )

    thumbs = _as_thumbnails(thumbnails, source)
    if thumbs.shape[0] != n:
        raise ValueError(
            f"{source}: 'thumbnails' has {thumbs.shape[0]} images but 'features' has {n} rows"
        )

    gate = None
    if gate_open_rate is not None:
        gate = np.asarray(gate_open_rate, dtype=np.float32).reshape(-1)
        if gate.shape != (feats.shape[1],):
            raise ValueError(
                f"{source}: 'gate_open_rate' must have shape ({feats.shape[1]},) (one value per "
                f"dimension), got {gate.shape}"
            )
        if np.any((gate < 0) | (gate > 1)) or not np.isfinite(gate).all():
            raise ValueError(f"{source}: 'gate_open_rate' values must lie in [0, 1]")
    return feats, labs, names, thumbs, gate


def _clean_metrics(metrics: Mapping[str, Any] | None, source: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in (metrics or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: metric {name!r} must be a number, got {value!r}") from None
        out[str(name)] = number if math.isfinite(number) else float("nan")
    return out


def write_feature_bundle(
    path: str | Path,
    *,
    features: Any,
    labels: Any,
    class_names: Sequence[str],
    thumbnails: Any,
    gate_open_rate: Any | None = None,
    method: str | None = None,
    checkpoint: str = "",
    dataset: str = "",
    metrics: Mapping[str, float] | None = None,
) -> Path:
    """Write ``features.npz`` (and ``metrics.json`` when ``method`` is given) into ``path``; return
    the folder. ``features`` keeps float16/float32, other floats are stored as float32."""
    out = Path(path)
    feats, labs, names, thumbs, gate = _validate(
        features, labels, class_names, thumbnails, gate_open_rate, source=str(out)
    )
    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {
        "features": feats,
        "labels": labs,
        "class_names": np.asarray(names, dtype=str),
        "thumbnails": thumbs,
    }
    if gate is not None:
        arrays["gate_open_rate"] = gate
    np.savez_compressed(out / FEATURES_FILE, **arrays)
    if method is not None:
        payload = {
            "method": str(method),
            "checkpoint": str(checkpoint),
            "dataset": str(dataset),
            "metrics": _clean_metrics(metrics, str(out / METRICS_FILE)),
        }
        (out / METRICS_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return out


def load_feature_bundle(path: str | Path) -> FeatureBundle:
    """Read and check a report folder; errors name the file and key at fault."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"report folder not found: {folder}")
    npz_path = folder / FEATURES_FILE
    if not npz_path.is_file():
        raise FileNotFoundError(
            f"{npz_path} not found: a report folder must contain {FEATURES_FILE} with the arrays "
            f"{', '.join(REQUIRED_KEYS)} (optional: {', '.join(OPTIONAL_KEYS)})"
        )
    if not zipfile.is_zipfile(npz_path):  # np.load would read it as a pickle
        raise ValueError(
            f"{npz_path}: truncated or corrupt (not a zip archive); write the report again"
        )
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            missing = [k for k in REQUIRED_KEYS if k not in npz.files]
            if missing:
                raise KeyError(
                    f"{npz_path}: missing array(s) {', '.join(missing)}; required: "
                    f"{', '.join(REQUIRED_KEYS)} (optional: {', '.join(OPTIONAL_KEYS)})"
                )
            raw = {k: npz[k] for k in (*REQUIRED_KEYS, *OPTIONAL_KEYS) if k in npz.files}
    except ValueError as err:  # object arrays need pickle, which we refuse
        raise ValueError(
            f"{npz_path}: could not read ({err}); store 'class_names' as a str array, not objects"
        ) from None
    except (EOFError, OSError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(
            f"{npz_path}: truncated or corrupt ({type(err).__name__}: {err}); write the report "
            "again"
        ) from None
    feats, labs, names, thumbs, gate = _validate(
        raw["features"],
        raw["labels"],
        raw["class_names"],
        raw["thumbnails"],
        raw.get("gate_open_rate"),
        source=str(npz_path),
    )
    bundle = FeatureBundle(feats, labs, names, thumbs, gate, method=folder.resolve().name)
    metrics_path = folder / METRICS_FILE
    if metrics_path.is_file():
        try:
            meta = json.loads(metrics_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{metrics_path}: not valid JSON ({err})") from err
        if not isinstance(meta, dict):
            raise ValueError(f"{metrics_path}: must hold a JSON object, got {type(meta).__name__}")
        bundle.method = str(meta.get("method") or bundle.method)
        bundle.checkpoint = str(meta.get("checkpoint") or "")
        bundle.dataset = str(meta.get("dataset") or "")
        metrics = meta.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise ValueError(f"{metrics_path}: 'metrics' must be an object of name -> number")
        top = (meta.get("selectivity") or {}).get("top_images")
        if top is not None:
            if isinstance(top, bool) or not isinstance(top, int) or top < 1:
                raise ValueError(
                    f"{metrics_path}: 'selectivity.top_images' must be an integer >= 1, got {top!r}"
                )
            bundle.top_images = top
        # Keep only scalar numbers; nested entries (if any) are not headline metrics.
        scalars = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        bundle.metrics = _clean_metrics(scalars, str(metrics_path))
    return bundle
