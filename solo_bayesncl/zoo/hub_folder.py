"""A checkpoint as a Hugging Face Hub model repository (``model.safetensors``, the artifact's
content; ``config.json``; the ``README.md`` model card), and the manifest entry of its published
weights (:func:`hub_entry`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_bayesncl.config.saved import saved_model
from solo_bayesncl.io.artifact import (
    open_artifact,
    write_safetensors_artifact,
)
from solo_bayesncl.io.files import replacing_folder, require_writable

from .card import model_card
from .errors import ArtifactError

#: Top-level state-dict modules that are training state only (MoCo's negative queue).
from .export import _read_run, build_artifact
from .hashing import sha256_file
from .hub import HUB_CARD, HUB_CONFIG, HUB_WEIGHTS
from .manifest import validate_entry


def hub_name(text: str) -> str:
    """An entry name from a folder or repository name: lowercase, other characters as '-'."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return name[:100] or "model"


@dataclass(frozen=True)
class HubFolder:
    """What :func:`export_hub_folder` wrote."""

    folder: Path
    weights: Path
    config: Path
    card: Path
    sha256: str
    size: int
    name: str


def export_hub_folder(
    ckpt: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    name: str | None = None,
    fp16: bool = False,
    metrics: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    keep_momentum: bool = False,
    description: str | None = None,
    license: str = "mit",
    base_model: str | None = None,
    repo_id: str | None = None,
    overwrite: bool = False,
) -> HubFolder:
    """Write the Hub model repository of a checkpoint into ``folder``: ``model.safetensors`` (every
    module weight, the config and figures in its metadata), ``config.json`` and the ``README.md``
    model card. The checkpoint and ``metrics`` are read as :func:`export_checkpoint` reads them;
    ``name`` (default: the folder's) titles the card; an existing folder needs ``overwrite``."""
    ckpt, folder = Path(ckpt), Path(folder)
    name = hub_name(name or folder.resolve().name)
    taken = [folder / n for n in (HUB_WEIGHTS, HUB_CONFIG, HUB_CARD) if (folder / n).exists()]
    if taken and not overwrite:
        raise ArtifactError(
            f"{taken[0]} exists (an earlier export); pass --overwrite to replace it, or choose "
            "another folder"
        )
    require_writable(folder.parent if not folder.exists() else folder, what="--hub-folder")
    loaded, metrics = _read_run(ckpt, metrics)
    artifact = build_artifact(
        loaded.state_dict, loaded.cfg, loaded.method, fp16, metrics, keep_momentum
    )
    card = model_card(
        name=name,
        spec=loaded.spec,
        cfg=artifact.cfg,
        metrics=artifact.metrics,
        dtype=artifact.dtype,
        small_stem=loaded.spec.method.small_stem,
        license=license,
        base_model=base_model,
        repo_id=repo_id,
        description=description,
    )
    with replacing_folder(folder) as staging:
        write_safetensors_artifact(artifact, staging / HUB_WEIGHTS)
        (staging / HUB_CONFIG).write_text(
            json.dumps(artifact.cfg, indent=2, allow_nan=False) + "\n", encoding="utf-8"
        )
        (staging / HUB_CARD).write_text(card, encoding="utf-8")
    weights = folder / HUB_WEIGHTS
    return HubFolder(
        folder,
        weights,
        folder / HUB_CONFIG,
        folder / HUB_CARD,
        sha256_file(weights),
        weights.stat().st_size,
        name,
    )


def hub_entry(
    weights: str | os.PathLike[str],
    urls: Iterable[str],
    name: str,
    *,
    license: str | None = None,
) -> dict[str, Any]:
    """The manifest entry of a Hub folder's weights file published at ``urls`` (the ``hf://``
    source first, then any URL mirror), checked against the schema."""
    weights = Path(weights)
    art = open_artifact(weights, restore=False)
    entry: dict[str, Any] = {
        "name": hub_name(name),
        "method": art.method,
        "dataset": saved_model(art.cfg)["dataset"],
        "backbone": art.cfg["backbone"]["name"],
        "urls": list(urls),
        "sha256": sha256_file(weights),
        "size": weights.stat().st_size,
        "config": art.cfg,
        "metrics": art.metrics,
        "file": f"{hub_name(name)}.safetensors",
        "dtype": art.dtype,
    }
    if license:
        entry["license"] = license
    validate_entry(entry, source="publish")
    return entry
