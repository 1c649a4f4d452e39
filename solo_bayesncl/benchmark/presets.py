"""Benchmark presets: YAML files, not code (``--preset NAME`` reads the shipped
``presets/NAME.yaml``, ``--preset PATH.yaml`` any file).

A preset names the config folder, methods and seeds, the overrides of every method (the equal
budget), per-method overrides and the evaluation settings. ``variants`` run a method with
further overrides beside it::

    variants:
      bayesncl_rho0.3: {method: bayesncl, overrides: [method_kwargs.rho=0.3]}
    methods: [ncl, bayesncl, bayesncl_rho0.3]

Every key and value is checked when the preset is read: an unknown key or a wrong type is
refused with the known keys."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from solo_bayesncl.config.shipped import resolve_config_dir
from solo_bayesncl.evaluation.options import ReportError, ReportOptions
from solo_bayesncl.host.registration import SUPPORTED_METHODS

__all__ = ["METHODS", "Preset", "PresetError", "RunOrder", "available_presets", "load_preset"]

PRESET_DIR = Path(__file__).with_name("presets")
METHODS: tuple[str, ...] = SUPPORTED_METHODS
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
#: The keys of each evaluation section and the type of their value.
_SECTION_KEYS: dict[str, dict[str, str]] = {
    "linear": {
        "config": "string",
        "max_epochs": "positive int",
        "batch_size": "positive int",
        "lr": "positive number",
        "overrides": "list of strings",
    },
    "knn": {"k": "positive int", "temperature": "positive number"},
}
"""``report`` is checked as :class:`~solo_bayesncl.evaluation.options.ReportOptions` checks it."""


class PresetError(ValueError):
    """A preset that cannot run; the message names the file and the key."""


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
    """The report options the preset gives (the others: their defaults); checked when read."""
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

    def report_options(self, protocol: str = "standard") -> ReportOptions:
        """The report's options: the preset's ``report`` section and the run's ``protocol``."""
        return ReportOptions(**self.report, protocol=protocol)


@dataclass(frozen=True)
class RunOrder:
    """One run of a preset, as the benchmark hands it to ``run_one`` (``RUN_DIR/spec.json``)."""

    method: str
    variant: str
    seed: int
    run_key: str
    config_dir: str
    linear_config_dir: str
    overrides: list[str]
    linear: dict[str, Any]
    knn: dict[str, Any]
    report: ReportOptions
    threads: int | None = None
    """The benchmark's one thread count (``--threads``, else as a run resolves it)."""

    def to_json(self) -> str:
        """The order as JSON (the report's dataset as a string)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        report = dataclasses.asdict(self.report)
        report["dataset"] = None if self.report.dataset is None else str(self.report.dataset)
        return json.dumps({**data, "report": report}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunOrder:
        """The order :meth:`to_json` wrote."""
        data = json.loads(text)
        return cls(**{**data, "report": ReportOptions(**data["report"])})


def available_presets() -> list[str]:
    """Names of the presets shipped with the package."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "list of strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "positive int":
        return _is_int(value) and value > 0
    if kind == "positive number":
        return (_is_int(value) or isinstance(value, float)) and value > 0
    raise AssertionError(kind)


def _strings(path: Path, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PresetError(
            f"{path}: {key} must be a list of strings (Hydra overrides), got {value!r}"
        )
    return list(value)


def _section(path: Path, name: str, value: Any, known: dict[str, str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PresetError(f"{path}: {name} must be a mapping, got {value!r}")
    for key, item in value.items():
        if key not in known:
            raise PresetError(
                f"{path}: unknown key {name}.{key}; known keys of {name}: {', '.join(known)}"
            )
        if known[key] and not _type_ok(item, known[key]):
            raise PresetError(f"{path}: {name}.{key} must be a {known[key]}, got {item!r}")
    return dict(value)


def _report(path: Path, value: Any) -> dict[str, Any]:
    """The ``report`` section, checked as the report's options are."""
    known = {f.name: "" for f in dataclasses.fields(ReportOptions) if f.name != "protocol"}
    report = _section(path, "report", value, known)
    try:
        ReportOptions(**report)
    except ReportError as err:
        raise PresetError(f"{path}: report: {err}") from None
    return report


def load_preset(name_or_path: str | Path) -> Preset:
    """Reads and checks a preset (errors name the file, key and allowed values); a relative
    ``out_dir`` is resolved against the preset file's folder (shipped: the current folder)."""
    path = Path(name_or_path)
    shipped = not path.suffix
    if shipped:
        path = PRESET_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise PresetError(
                f"preset {name_or_path!r} does not exist; available: {', '.join(available_presets())}"
            )
    if not path.is_file():
        raise PresetError(f"preset file {path} does not exist")
    path = path.resolve()
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as err:  # noqa: BLE001 - YAML and interpolation errors alike
        raise PresetError(f"{path}: not a readable preset: {err}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PresetError(f"{path}: a preset is a mapping of keys, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise PresetError(
            f"{path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(_KEYS))}"
        )
    variants = _variants(path, raw.get("variants"))
    methods = raw.get("methods", list(METHODS))
    if not isinstance(methods, list) or not methods:
        raise PresetError(f"{path}: methods must be a non-empty list of {', '.join(METHODS)}")
    bad = [m for m in methods if m not in METHODS and m not in variants]
    if bad:
        raise PresetError(
            f"{path}: methods contains {bad[0]!r}; allowed values: "
            f"{', '.join((*METHODS, *variants))}"
        )
    if len(set(methods)) != len(methods):
        raise PresetError(f"{path}: methods lists a method twice: {methods}")
    seeds = raw.get("seeds", [5])
    if not isinstance(seeds, list) or not seeds:
        raise PresetError(f"{path}: seeds must list at least one seed (integers), got {seeds!r}")
    if not all(_is_int(s) and s >= 0 for s in seeds):
        raise PresetError(f"{path}: seeds must be integers >= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise PresetError(f"{path}: seeds lists a seed twice: {seeds}")
    for key in ("name", "config_dir", "out_dir"):
        if key in raw and not isinstance(raw[key], str):
            raise PresetError(f"{path}: {key} must be a string, got {raw[key]!r}")
    try:  # relative: the current folder, else the shipped configs (installed package included)
        config_dir = resolve_config_dir(raw.get("config_dir", "scripts/pretrain/cifar"))
    except FileNotFoundError as err:
        raise PresetError(f"{path}: config_dir: {err}") from None
    if not config_dir.is_dir():
        raise PresetError(f"{path}: config_dir {config_dir} is not a folder")
    method_overrides_raw = raw.get("method_overrides") or {}
    if not isinstance(method_overrides_raw, dict):
        raise PresetError(f"{path}: method_overrides must map a method to a list of overrides")
    method_overrides = {}
    for key, value in method_overrides_raw.items():
        if key not in METHODS:
            raise PresetError(
                f"{path}: method_overrides.{key} is not a method; allowed: {', '.join(METHODS)}"
            )
        method_overrides[key] = _strings(path, f"method_overrides.{key}", value)
    out_dir = Path(raw.get("out_dir", f"results/{path.stem}")).expanduser()
    if not out_dir.is_absolute():
        out_dir = (Path.cwd() if shipped else path.parent) / out_dir
    return Preset(
        name=str(raw.get("name", path.stem)),
        config_dir=config_dir,
        methods=list(methods),
        seeds=list(seeds),
        overrides=_strings(path, "overrides", raw.get("overrides")),
        method_overrides=method_overrides,
        linear=_section(path, "linear", raw.get("linear"), _SECTION_KEYS["linear"]),
        knn=_section(path, "knn", raw.get("knn"), _SECTION_KEYS["knn"]),
        report=_report(path, raw.get("report")),
        out_dir=out_dir,
        source=path,
        variants=variants,
    )


def _variants(path: Path, raw: Any) -> dict[str, dict[str, Any]]:
    """Checks the ``variants`` mapping (see the module docstring)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise PresetError(f"{path}: variants must map a name to {{method: ..., overrides: [...]}}")
    variants = {}
    for name, spec in raw.items():
        name = str(name)
        if name in METHODS or not _VARIANT_NAME.fullmatch(name):
            raise PresetError(
                f"{path}: variants.{name}: a variant name is letters, digits and _.+- and not "
                f"a method name ({', '.join(METHODS)})"
            )
        if not isinstance(spec, dict) or set(spec) - {"method", "overrides"}:
            raise PresetError(
                f"{path}: variants.{name} must be {{method: ..., overrides: [...]}}, got {spec!r}"
            )
        if spec.get("method") not in METHODS:
            raise PresetError(
                f"{path}: variants.{name}.method must be one of {', '.join(METHODS)}, "
                f"got {spec.get('method')!r}"
            )
        overrides = spec.get("overrides") or []
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise PresetError(f"{path}: variants.{name}.overrides must be a list of strings")
        variants[name] = {"method": spec["method"], "overrides": list(overrides)}
    return variants
