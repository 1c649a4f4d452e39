"""The zoo artifact: one torch file holding weights, config and evaluation figures (here, not in
:mod:`solo_bayesncl.zoo`, so that loading a checkpoint never imports the zoo).

Format ``solo-bayesncl-zoo/1``: ``torch.save`` of a dict of plain containers and tensors, which
loads with ``torch.load(..., weights_only=True)`` (no pickled code runs)::

    {
      "format": "solo-bayesncl-zoo/1",
      "method": "bayesncl" | "ncl" | "simclr" | "mocov2plus",
      "cfg": {...},            # full training config, plain dict, cfg["method"] == method
      "state_dict": {...},     # module weights and buffers only: no optimizer, no scheduler
      "metrics": {...},        # evaluation figures {name: number}, {} if none
      "dtype": "float32" | "float16",   # dtype of the stored floating tensors
      "omitted": {key: {"shape": [...], "dtype": "float32"}},  # state keys left out
    }

:func:`open_artifact` restores the ``omitted`` keys so the state dict loads strictly: a
``momentum_<part>.*`` key copies the online ``<part>.*`` weight, any other gets zeros.

The same content can be a safetensors file (:func:`write_safetensors_artifact`), ``cfg``,
``metrics`` and ``omitted`` as JSON metadata; every reader here accepts both forms.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from solo_bayesncl.io.files import replacing

__all__ = [
    "ARTIFACT_FORMAT",
    "Artifact",
    "ArtifactError",
    "cast_floating",
    "is_artifact",
    "open_artifact",
    "read_artifact",
    "write_artifact",
    "write_safetensors_artifact",
]

ARTIFACT_FORMAT = "solo-bayesncl-zoo/1"
_KEYS = ("format", "method", "cfg", "state_dict", "metrics", "dtype", "omitted")
_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: Metadata keys of the safetensors form stored as JSON text (the others are plain strings).
_JSON_KEYS = ("cfg", "metrics", "omitted")


class ArtifactError(ValueError):
    """A file that is not a readable zoo artifact, or an artifact that cannot be written."""


@dataclass
class Artifact:
    """The content of a zoo artifact (see the module docstring for the file format)."""

    method: str
    cfg: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    metrics: dict[str, float] = field(default_factory=dict)
    dtype: str = "float32"
    omitted: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_file_dict(self) -> dict[str, Any]:
        """The dict written by :func:`write_artifact`; refuses an unknown ``dtype``."""
        if self.dtype not in _DTYPES:
            raise ArtifactError(f"dtype must be one of {list(_DTYPES)}, got {self.dtype!r}")
        return {"format": ARTIFACT_FORMAT, **vars(self)}


def cast_floating(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict:
    """Copy of ``state_dict`` with floating tensors cast to ``dtype`` (integers untouched)."""
    return {
        k: (v.to(dtype) if torch.is_floating_point(v) else v).detach().clone().contiguous()
        for k, v in state_dict.items()
    }


def write_artifact(artifact: Artifact, path: str | os.PathLike[str]) -> Path:
    """Writes ``artifact`` to ``path`` atomically."""
    fields = artifact.to_file_dict()
    with replacing(path, suffix=".part") as tmp:
        torch.save(fields, tmp)
    return Path(path)


def write_safetensors_artifact(artifact: Artifact, path: str | os.PathLike[str]) -> Path:
    """Writes ``artifact`` as a safetensors file (module docstring), atomically."""
    fields = artifact.to_file_dict()
    metadata = {
        k: json.dumps(fields[k], allow_nan=False) if k in _JSON_KEYS else str(fields[k])
        for k in _KEYS
        if k != "state_dict"
    }
    tensors = {k: v.detach().contiguous() for k, v in artifact.state_dict.items()}
    with replacing(path, suffix=".part") as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
    return Path(path)


def _is_safetensors(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` starts like a safetensors file: an 8-byte little-endian header length
    that fits in the file, then the JSON header's ``{``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return False
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and 8 + length <= size


def _load_safetensors(path: Path, map_location: Any, tensors: bool = True) -> dict[str, Any]:
    """The artifact dict of a safetensors file; ``tensors=False`` reads the metadata only."""
    device = map_location if isinstance(map_location, str) else "cpu"
    try:
        with safe_open(str(path), framework="pt", device=device) as handle:
            metadata = handle.metadata() or {}
            names = list(handle.keys()) if tensors else []
            state = {k: handle.get_tensor(k) for k in names}
    except (SafetensorError, OSError, ValueError) as err:
        detail = (str(err).strip().splitlines() or [""])[0]
        raise ArtifactError(f"{path} is not a readable safetensors file: {detail}") from None
    if metadata.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(
            f"{path}: a safetensors file without this package's metadata (format "
            f"{metadata.get('format')!r}, expected {ARTIFACT_FORMAT!r}); load its tensors with "
            "safetensors.torch.load_file"
        )
    missing = [k for k in _KEYS if k != "state_dict" and k not in metadata]
    if missing:
        raise ArtifactError(f"{path}: zoo artifact lacks metadata key(s) {missing}")
    data: dict[str, Any] = dict(metadata, state_dict=state)
    for key in _JSON_KEYS:
        try:
            data[key] = json.loads(metadata[key])
        except json.JSONDecodeError as err:
            raise ArtifactError(f"{path}: metadata {key!r} is not JSON ({err})") from None
    return data


def _load_dict(path: Path, map_location: Any, mmap: bool = False) -> dict[str, Any]:
    if Path(path).is_dir():
        raise ArtifactError(f"{path} is a folder, not a zoo artifact file")
    if Path(path).is_file() and _is_safetensors(path):
        return _load_safetensors(Path(path), map_location, tensors=not mmap)
    if Path(path).is_file() and not zipfile.is_zipfile(path):
        raise ArtifactError(
            f"{path} is not a zoo artifact ({ARTIFACT_FORMAT}): not a file written by torch.save "
            "(a zip archive)"
        )
    try:
        data = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise ArtifactError(f"zoo artifact {path} does not exist") from None
    except Exception as err:
        detail = (str(err).strip().splitlines() or [""])[0]
        raise ArtifactError(
            f"{path} is not a zoo artifact ({ARTIFACT_FORMAT}) loadable with "
            f"weights_only=True: {type(err).__name__}: {detail}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != ARTIFACT_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ArtifactError(f"{path}: format is {found!r}, expected {ARTIFACT_FORMAT!r}")
    missing = [k for k in _KEYS if k not in data]
    if missing:
        raise ArtifactError(f"{path}: zoo artifact lacks key(s) {missing}")
    return data


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a readable zoo artifact in either form (tensors memory-mapped)."""
    try:
        _load_dict(Path(path), "cpu", mmap=True)
    except ArtifactError:
        return False
    return True


def _restore_omitted(
    state_dict: dict[str, torch.Tensor], omitted: Mapping[str, Mapping[str, Any]]
) -> None:
    """Fills the keys left out at export (module docstring)."""
    for key, spec in omitted.items():
        shape = tuple(spec["shape"])
        dtype = getattr(torch, spec["dtype"])
        online = key.removeprefix("momentum_") if key.startswith("momentum_") else None
        source = state_dict.get(online) if online else None
        if source is not None and tuple(source.shape) == shape:
            state_dict[key] = source.detach().clone().to(dtype)
        else:
            state_dict[key] = torch.zeros(shape, dtype=dtype)


def open_artifact(
    path: str | os.PathLike[str], map_location: Any = "cpu", restore: bool = True
) -> Artifact:
    """Reads a zoo artifact with ``weights_only=True``; with ``restore`` cast back to float32 and
    the omitted keys filled, so the state dict loads strictly."""
    path = Path(path)
    data = _load_dict(path, map_location)
    if data["dtype"] not in _DTYPES:
        raise ArtifactError(f"{path}: dtype {data['dtype']!r} is not one of {list(_DTYPES)}")
    if not isinstance(data["cfg"], dict) or data["cfg"].get("method") != data["method"]:
        raise ArtifactError(f"{path}: cfg['method'] does not equal method {data['method']!r}")
    state_dict = dict(data["state_dict"])
    if restore:
        state_dict = cast_floating(state_dict, torch.float32)
        _restore_omitted(state_dict, data["omitted"])
    return Artifact(
        method=data["method"],
        cfg=data["cfg"],
        state_dict=state_dict,
        metrics=dict(data["metrics"]),
        dtype=data["dtype"],
        omitted=dict(data["omitted"]),
    )


def read_artifact(
    path: str | os.PathLike[str], map_location: Any = "cpu"
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, float]]:
    """``(cfg, state_dict, metrics)`` of a zoo artifact, ready for strict loading."""
    art = open_artifact(path, map_location=map_location)
    return art.cfg, art.state_dict, art.metrics
