"""Benchmark presets: YAML files, not code.

A preset names the shipped config folder, the methods and seeds, the overrides applied to every
method (the equal budget), per-method overrides (each method's own recommended settings), and the
evaluation settings. ``--preset NAME`` reads ``presets/NAME.yaml`` shipped with the package;
``--preset PATH.yaml`` reads any file.

``variants`` names settings of a method that run beside it, each with its own overrides (applied
after the method's ``method_overrides``)::

    variants:
      bayesncl_rho0.3: {method: bayesncl, overrides: [method_kwargs.rho=0.3]}
    methods: [ncl, bayesncl, bayesncl_rho0.3]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

__all__ = ["METHODS", "Preset", "available_presets", "load_preset"]

PRESET_DIR = Path(__file__).with_name("presets")
METHODS: tuple[str, ...] = ("simclr", "mocov2plus", "ncl", "bayesncl")
_KEYS = {
    "name",
    "config_dir",
    "methods",
    "seeds",
    "overrides",
    "method_overrides",
    "linear",
    "knn",
    "report",
    "out_dir",
    "variants",
}
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclass
class Preset:
    """A parsed preset (see the files in ``presets/`` for every key, commented)."""

    name: str
    config_dir: Path
    methods: list[str]
    seeds: list[int]
    overrides: list[str]
    method_overrides: dict[str, list[str]] = field(default_factory=dict)
    linear: dict[str, Any] = field(default_factory=dict)
    knn: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    out_dir: Path = Path("results")
    source: Path | None = None
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{name: {"method": base method, "overrides": [...]}}``."""

    def base_method(self, name: str) -> str:
        """The method a name in ``methods`` runs (itself, or a variant's method)."""
        return self.variants[name]["method"] if name in self.variants else name

    def run_overrides(self, name: str) -> list[str]:
        """Every override of a run: the shared budget, the method's own, the variant's."""
        base = self.base_method(name)
        return (
            self.overrides
            + self.method_overrides.get(base, [])
            + list(self.variants.get(name, {}).get("overrides", []))
        )


def available_presets() -> list[str]:
    """Names of the presets shipped with the package."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def load_preset(name_or_path: str | Path) -> Preset:
    """Reads and checks a preset; errors name the file, the key and the allowed values."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PRESET_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ValueError(
                f"preset {name_or_path!r} does not exist; available: {', '.join(available_presets())}"
            )
    if not path.is_file():
        raise ValueError(f"preset file {path} does not exist")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(
            f"{path}: unknown key {sorted(unknown)[0]!r}; allowed keys: {', '.join(sorted(_KEYS))}"
        )
    variants = _variants(path, raw.get("variants"))
    methods = list(raw.get("methods", METHODS))
    bad = [m for m in methods if m not in METHODS and m not in variants]
    if bad:
        raise ValueError(
            f"{path}: methods contains {bad[0]!r}; allowed values: "
            f"{', '.join((*METHODS, *variants))}"
        )
    seeds = [int(s) for s in raw.get("seeds", [5])]
    if not seeds:
        raise ValueError(f"{path}: seeds must list at least one seed")
    config_dir = Path(raw.get("config_dir", "scripts/pretrain/cifar"))
    if not config_dir.is_absolute():
        config_dir = _repo_root() / config_dir
    if not config_dir.is_dir():
        raise ValueError(f"{path}: config_dir {config_dir} is not a folder")
    method_overrides = {k: list(v) for k, v in (raw.get("method_overrides") or {}).items()}
    for key in method_overrides:
        if key not in METHODS:
            raise ValueError(
                f"{path}: method_overrides.{key} is not a method; allowed: {', '.join(METHODS)}"
            )
    return Preset(
        name=str(raw.get("name", path.stem)),
        config_dir=config_dir,
        methods=methods,
        seeds=seeds,
        overrides=[str(o) for o in raw.get("overrides", [])],
        method_overrides=method_overrides,
        linear=dict(raw.get("linear") or {}),
        knn=dict(raw.get("knn") or {}),
        report=dict(raw.get("report") or {}),
        out_dir=Path(raw.get("out_dir", f"results/{path.stem}")),
        source=path,
        variants=variants,
    )


def _variants(path: Path, raw: Any) -> dict[str, dict[str, Any]]:
    """Checks the ``variants`` mapping (see the module docstring)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: variants must map a name to {{method: ..., overrides: [...]}}")
    variants = {}
    for name, spec in raw.items():
        name = str(name)
        if name in METHODS or not _VARIANT_NAME.fullmatch(name):
            raise ValueError(
                f"{path}: variants.{name}: a variant name is letters, digits and _.+- and not "
                f"a method name ({', '.join(METHODS)})"
            )
        if not isinstance(spec, dict) or set(spec) - {"method", "overrides"}:
            raise ValueError(
                f"{path}: variants.{name} must be {{method: ..., overrides: [...]}}, got {spec!r}"
            )
        if spec.get("method") not in METHODS:
            raise ValueError(
                f"{path}: variants.{name}.method must be one of {', '.join(METHODS)}, "
                f"got {spec.get('method')!r}"
            )
        overrides = spec.get("overrides") or []
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ValueError(f"{path}: variants.{name}.overrides must be a list of strings")
        variants[name] = {"method": spec["method"], "overrides": list(overrides)}
    return variants
