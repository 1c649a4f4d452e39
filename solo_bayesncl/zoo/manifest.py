"""The zoo manifest: one JSON file listing published checkpoints.

Format ``solo-bayesncl-zoo-manifest/1``::

    {"format": "solo-bayesncl-zoo-manifest/1", "models": [ENTRY, ...]}

An ENTRY has the fields of :data:`REQUIRED_FIELDS` and may have those of
:data:`OPTIONAL_FIELDS`, documented in :data:`FIELD_DOCS`; :func:`validate_entry` is the schema.
Manifests are read (:func:`manifest_paths`) from the project's ``zoo/manifest.json``, then every
file in ``$SOLO_BAYESNCL_MANIFEST`` (``os.pathsep``-separated): a user's own published weights.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from solo_bayesncl.config.saved import saved_model
from solo_bayesncl.host.registration import SUPPORTED_METHODS

from .errors import ManifestError, UnknownModelError
from .hub import is_hub_url, parse_hub_url

MANIFEST_FORMAT = "solo-bayesncl-zoo-manifest/1"
MANIFEST_ENV = "SOLO_BAYESNCL_MANIFEST"

#: Methods the zoo publishes: every method a checkpoint can be loaded as.
ZOO_METHODS = SUPPORTED_METHODS

REQUIRED_FIELDS = (
    "name",
    "method",
    "dataset",
    "backbone",
    "urls",
    "sha256",
    "size",
    "config",
    "metrics",
)
OPTIONAL_FIELDS = ("file", "dtype", "description", "license", "paper")

FIELD_DOCS: dict[str, str] = {
    "name": "unique id used to download: lowercase letters, digits, '.', '_', '-'",
    "method": "solo-learn method name: one of " + ", ".join(ZOO_METHODS),
    "dataset": "pretraining dataset, as cfg.data.dataset",
    "backbone": "backbone name, as cfg.backbone.name",
    "urls": "sources holding the same bytes: hf://OWNER/REPO/FILE@COMMIT (a Hugging Face Hub "
    "file at a 40-hex commit) and https URLs; Hub sources are tried first, then the URLs, "
    "each in listed order",
    "sha256": "sha256 of the artifact's bytes, 64 lowercase hex digits",
    "size": "artifact size in bytes (> 0)",
    "config": "the full training config (solo-learn's args.json content)",
    "metrics": "evaluation figures, flat {name: number}; {} when none were measured",
    "file": "optional: artifact file name",
    "dtype": "optional: float32 or float16, the dtype of the stored floating tensors",
    "description": "optional: one line of free text",
    "license": "optional: license of the weights",
    "paper": "optional: reference of the method",
}

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ZooEntry:
    """One published checkpoint of the zoo (one manifest entry)."""

    name: str
    method: str
    dataset: str
    backbone: str
    urls: tuple[str, ...]
    sha256: str
    size: int
    config: dict[str, Any] = field(repr=False)
    metrics: dict[str, float] = field(default_factory=dict)
    file: str | None = None
    dtype: str | None = None
    description: str | None = None
    license: str | None = None
    paper: str | None = None

    @property
    def filename(self) -> str:
        """The artifact's file name: ``file`` if given, else ``<name>.pt``."""
        return self.file or f"{self.name}.pt"

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: required fields always, optional ones when set."""
        out: dict[str, Any] = {k: getattr(self, k) for k in REQUIRED_FIELDS}
        out["urls"] = list(self.urls)
        for key in OPTIONAL_FIELDS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], source: str = "<entry>", require_https: bool = True
    ) -> ZooEntry:
        """Validate ``data`` with :func:`validate_entry` and build the entry."""
        validate_entry(data, source=source, require_https=require_https)
        kwargs = {k: data[k] for k in REQUIRED_FIELDS}
        kwargs["urls"] = tuple(data["urls"])
        kwargs["config"] = dict(data["config"])
        kwargs["metrics"] = dict(data["metrics"])
        kwargs.update({k: data[k] for k in OPTIONAL_FIELDS if k in data})
        return cls(**kwargs)


def _check_url(url: Any, where: str, require_https: bool) -> None:
    if not isinstance(url, str):
        raise ManifestError(f"{where}: every URL must be a string, got {url!r}")
    if is_hub_url(url):
        try:
            parse_hub_url(url)
        except ValueError as err:
            raise ManifestError(f"{where}: {err}") from None
        return
    parsed = urlparse(url)
    if parsed.scheme == "https" and parsed.netloc:
        return
    loopback = parsed.scheme == "http" and parsed.hostname in _LOOPBACK_HOSTS
    if not require_https and loopback:
        return
    raise ManifestError(f"{where}: URL {url!r} is not an https URL (nor an hf:// source)")


def validate_entry(
    data: Mapping[str, Any], source: str = "<entry>", require_https: bool = True
) -> None:
    """Check one manifest entry against the schema (:class:`ManifestError`); ``require_https=False``
    also accepts loopback ``http://`` URLs (tests, local mirrors)."""
    if not isinstance(data, Mapping):
        raise ManifestError(f"{source}: an entry must be a JSON object, got {type(data).__name__}")
    where = f"{source}: entry {data.get('name', '<unnamed>')!r}"
    missing = [k for k in REQUIRED_FIELDS if k not in data]
    if missing:
        raise ManifestError(f"{where} lacks required field(s) {missing}")
    unknown = sorted(set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        allowed = list(REQUIRED_FIELDS + OPTIONAL_FIELDS)
        raise ManifestError(f"{where} has unknown field(s) {unknown}; allowed: {allowed}")

    name = data["name"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ManifestError(f"{where}: name must match {_NAME_RE.pattern}")
    if data["method"] not in ZOO_METHODS:
        raise ManifestError(f"{where}: method {data['method']!r} is not one of {ZOO_METHODS}")
    for key in ("dataset", "backbone"):
        if not isinstance(data[key], str) or not data[key]:
            raise ManifestError(f"{where}: {key} must be a non-empty string")
    urls = data["urls"]
    if isinstance(urls, str) or not isinstance(urls, Iterable) or not list(urls):
        raise ManifestError(f"{where}: urls must be a non-empty list of https or hf:// sources")
    for url in urls:
        _check_url(url, where, require_https)
    sha = data["sha256"]
    if not isinstance(sha, str) or not _SHA256_RE.match(sha):
        raise ManifestError(f"{where}: sha256 must be 64 lowercase hex digits, got {sha!r}")
    size = data["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ManifestError(f"{where}: size must be a positive integer (bytes), got {size!r}")

    config = data["config"]
    if not isinstance(config, Mapping) or not config:
        raise ManifestError(f"{where}: config must be the non-empty training config")
    _check_config_agrees(config, data, where)

    metrics = data["metrics"]
    if not isinstance(metrics, Mapping):
        raise ManifestError(f"{where}: metrics must be an object {{name: number}}")
    for key, value in metrics.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ManifestError(f"{where}: metric {key!r} must be a finite number, got {value!r}")
    if data.get("dtype") not in (None, "float32", "float16"):
        raise ManifestError(f"{where}: dtype must be 'float32' or 'float16', got {data['dtype']!r}")
    if "file" in data and (not isinstance(data["file"], str) or "/" in data["file"]):
        raise ManifestError(f"{where}: file must be a bare file name, got {data['file']!r}")


def _check_config_agrees(config: Mapping[str, Any], data: Mapping[str, Any], where: str) -> None:
    """The entry's method/backbone/dataset must be the ones its config trained."""
    for key, from_cfg in saved_model(config).items():
        if from_cfg != data[key]:
            raise ManifestError(
                f"{where}: {key} {data[key]!r} disagrees with its config ({from_cfg!r})"
            )


PROJECT_MANIFEST = Path(__file__).resolve().with_name("manifest.json")
"""The project's manifest, shipped beside this module (linked as ``zoo/manifest.json``)."""


def manifest_paths() -> list[Path]:
    """The project's manifest followed by the files in ``$SOLO_BAYESNCL_MANIFEST``."""
    paths = [PROJECT_MANIFEST]
    extra = os.environ.get(MANIFEST_ENV, "")
    paths += [Path(p).expanduser() for p in extra.split(os.pathsep) if p]
    return paths


def read_manifest(path: str | os.PathLike[str], require_https: bool = True) -> list[ZooEntry]:
    """Read and validate one manifest file; names must be unique within it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"manifest {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise ManifestError(f"manifest {path} is not valid JSON: {err}") from None
    except UnicodeDecodeError:
        raise ManifestError(
            f"manifest {path} is not a text file (not UTF-8); a manifest is JSON"
        ) from None
    except OSError as err:
        raise ManifestError(f"manifest {path} cannot be read ({err.strerror or err})") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"manifest {path}: 'format' must be {MANIFEST_FORMAT!r}")
    models = data.get("models")
    if not isinstance(models, list):
        raise ManifestError(f"manifest {path}: 'models' must be a list of entries")
    entries = [ZooEntry.from_dict(m, str(path), require_https) for m in models]
    _check_unique(entries, str(path))
    return entries


def _check_unique(entries: list[ZooEntry], where: str) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ManifestError(f"{where}: the name {entry.name!r} is listed twice")
        seen.add(entry.name)


def load_manifests(paths: Iterable[str | os.PathLike[str]] | None = None) -> list[ZooEntry]:
    """All entries of ``paths`` (default :func:`manifest_paths`); names must be unique."""
    paths = manifest_paths() if paths is None else [Path(p) for p in paths]
    entries = [e for p in paths for e in read_manifest(p)]
    _check_unique(entries, " + ".join(str(p) for p in paths))
    return entries


def find_entry(name: str, entries: Iterable[ZooEntry] | None = None) -> ZooEntry:
    """The entry called ``name``; :class:`UnknownModelError` lists the known names otherwise."""
    entries = load_manifests() if entries is None else list(entries)
    for entry in entries:
        if entry.name == name:
            return entry
    raise UnknownModelError(name, sorted(e.name for e in entries))
