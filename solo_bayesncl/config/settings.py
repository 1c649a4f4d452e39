"""A config resolved once at the boundary and read once into frozen settings.

:func:`resolve_with_solo` resolves a config before a model is built (run checks, machine, dataset,
then solo-learn's ``parse_cfg``); :func:`run_spec` reads it once into a frozen :class:`RunSpec`,
one sub-spec per section, and each builder takes its own (:func:`saved_run_spec`: a checkpoint's
config). solo-learn's own classes take the config itself, ``RunSpec.solo``, handed on unread.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import check_run_cfg, fit_backbone_to_crops
from solo_bayesncl.config.global_batch import apply_global_batch
from solo_bayesncl.config.runtime import (
    PerformanceSettings,
    job_processes,
    performance_settings,
    resolve_runtime,
)
from solo_bayesncl.core.gates import GATE_MODES
from solo_bayesncl.core.threads import resolve_threads
from solo_bayesncl.core.validation import (
    ConfigError,
    parse_bool,
    require_choice,
    require_int,
    require_known_keys,
)
from solo_bayesncl.data.names import (
    OFFLINE_DATASETS,
    DatasetSpec,
    dataset_run_name,
    dataset_spec,
    small_stem,
)
from solo_bayesncl.data.resolve import (
    check_dataset_available,
    resolve_augment_on,
    resolve_dataset_cfg,
)
from solo_bayesncl.metrics.accumulator import SHUFFLE_PERMUTATIONS, check_shuffle_permutations
from solo_bayesncl.metrics.retrieval import check_retrieval_max_samples

if TYPE_CHECKING:
    from solo_bayesncl.methods.keys import ContrastiveSettings

__all__ = [
    "CheckpointSpec",
    "InterpretabilitySpec",
    "MethodSpec",
    "OptimizerSpec",
    "RunSpec",
    "TrainerSpec",
    "check_interpretability",
    "resolve_with_solo",
    "run_spec",
    "saved_run_spec",
    "with_threads",
]


@dataclass(frozen=True)
class InterpretabilitySpec:
    """The ``interpretability`` section (:mod:`solo_bayesncl.training.callback`), defaults filled
    in; off unless ``enabled``. Rules: :data:`_INTERPRETABILITY_RULES`."""

    enabled: bool = False
    frequency: int = 1
    gate: str = "hard"
    max_samples: int | None = None
    shuffle_permutations: int = SHUFFLE_PERMUTATIONS
    retrieval: bool = True
    probe: bool = False


_INTERPRETABILITY_RULES: dict[str, Callable[[str, Any], Any]] = {
    "enabled": parse_bool,
    "frequency": partial(require_int, low=1),
    "gate": partial(require_choice, allowed=GATE_MODES),
    "max_samples": check_retrieval_max_samples,
    "shuffle_permutations": check_shuffle_permutations,
    "retrieval": parse_bool,
    "probe": parse_bool,
}


def check_interpretability(cfg: omegaconf.DictConfig) -> InterpretabilitySpec:
    """The ``interpretability`` section of ``cfg`` (only read) checked, defaults filled in;
    :class:`~solo_bayesncl.core.validation.ConfigError` naming a bad key or value, ``ValueError``
    for ``enabled`` without labelled validation data."""
    section: Any = OmegaConf.select(cfg, "interpretability", default=None) or {}
    require_known_keys("interpretability", section, list(_INTERPRETABILITY_RULES))
    spec = InterpretabilitySpec(
        **{
            name: _INTERPRETABILITY_RULES[name](f"interpretability.{name}", section[name])
            for name in section
        }
    )
    no_labels = parse_bool("data.no_labels", OmegaConf.select(cfg, "data.no_labels", default=False))
    custom = OmegaConf.select(cfg, "data.dataset", default=None) == "custom"
    has_val = OmegaConf.select(cfg, "data.val_path", default=None) is not None
    if spec.enabled and not (has_val and not (custom and no_labels)):
        raise ValueError(
            "interpretability.enabled=True needs labelled validation data (data.val_path)"
        )
    return spec


@dataclass(frozen=True)
class OptimizerSpec:
    """The ``optimizer`` section: ``batch_size`` per process; ``scheduler``: ``scheduler.name``."""

    name: str | None = None
    lr: float | None = None
    batch_size: int = 0
    scheduler: str | None = None


@dataclass(frozen=True)
class WandbSpec:
    """The ``wandb`` section (its logger: :func:`solo_bayesncl.training.trainer.build_loggers`)."""

    enabled: bool = False
    offline: bool = False
    project: str | None = None
    entity: str | None = None


PEER_TIMEOUT_S = 300.0
"""How long a job's processes wait for each other by default (``distributed.timeout_s``), not
torch's 30 minutes, which a launch whose other node never comes would wait without a word."""


@dataclass(frozen=True)
class TrainerSpec:
    """The Trainer and the machine: ``processes`` the job's, ``devices`` as Lightning takes them,
    ``peer_timeout_s`` (``distributed.timeout_s``, else :data:`PEER_TIMEOUT_S`), ``threads``
    torch's CPU threads (None in a config without the key), ``arguments`` the whole config."""

    name: str = "run"
    seed: int | None = None
    processes: int = 1
    accelerator: str = ""
    strategy: Any = "auto"
    devices: Any = 1
    peer_timeout_s: float = PEER_TIMEOUT_S
    threads: int | None = None
    max_epochs: int | None = None
    performance: PerformanceSettings = PerformanceSettings()
    wandb: WandbSpec = WandbSpec()
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointSpec:
    """The ``checkpoint`` and ``auto_resume`` sections; ``run_root`` is ``checkpoint.dir/<method>``
    (``checkpoint.dir/linear`` for a linear evaluation)."""

    run_root: Path = Path(".")
    enabled: bool = False
    frequency: int = 1
    keep_prev: bool = False
    time_interval_s: float | None = None
    auto_resume: bool = False
    max_hours: float | None = None
    resume_from: str | None = None


@dataclass(frozen=True)
class MethodSpec:
    """The method, its backbone (name, kwargs, whether a ResNet gets the small-image stem) and its
    ``method_kwargs``; ``settings`` their checked form for the plugin's methods, else None."""

    name: str | None = None
    backbone: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    settings: ContrastiveSettings | None = None
    backbone_kwargs: Mapping[str, Any] = field(default_factory=dict)
    small_stem: bool = False


@dataclass(frozen=True)
class RunSpec:
    """A resolved pretraining or linear-evaluation config (or a checkpoint's), read once into one
    frozen sub-spec per section. ``solo`` is the config as solo-learn takes it: never read here."""

    data: DatasetSpec
    optimizer: OptimizerSpec
    trainer: TrainerSpec
    checkpoint: CheckpointSpec
    interpretability: InterpretabilitySpec
    method: MethodSpec
    solo: omegaconf.DictConfig

    @property
    def fingerprint_source(self) -> dict[str, Any]:
        """The config whose fingerprint names the run (auto-resume matches it whole)."""
        return dict(self.trainer.arguments)


def _peer_timeout_s(value: Any) -> float:
    if value is None:
        return PEER_TIMEOUT_S
    seconds = float(value)
    if not seconds > 0:
        raise ValueError(f"distributed.timeout_s={value!r} must be a number of seconds above 0")
    return seconds


def _thread_count(value: Any) -> int | None:
    """``threads`` once resolved (a count); None before (``auto``) or in a config without it."""
    return int(value) if str(value).isdigit() and not isinstance(value, bool) else None


def _plain(node: Any) -> dict[str, Any]:
    return dict(OmegaConf.to_container(node) if OmegaConf.is_config(node) else node or {})


def _method_spec(cfg: omegaconf.DictConfig, dataset: str, strict: bool) -> MethodSpec:
    """The method of ``cfg``, its settings parsed; a failure raises with ``strict``, else leaves
    them None (a checkpoint of another layout, checked when built)."""
    # the methods package imports solo-learn when it is installed (it defines the method
    # classes): imported here, not at the top, so the commands answer --help and input errors
    # without loading solo-learn, Lightning and timm
    from solo_bayesncl.methods.keys import METHOD_SETTINGS

    name = OmegaConf.select(cfg, "method", default=None)
    kwargs = _plain(OmegaConf.select(cfg, "method_kwargs", default=None))
    declared = METHOD_SETTINGS.get(str(name))
    settings = None
    if declared is not None:
        try:
            settings = declared.from_kwargs(kwargs, _plain(cfg.get("optimizer", None)))
        except ConfigError:
            if strict:
                raise
    backbone = _plain(OmegaConf.select(cfg, "backbone", default=None))
    net = backbone.get("name", None)
    return MethodSpec(
        None if name is None else str(name),
        None if net is None else str(net),
        kwargs,
        settings,
        _plain(backbone.get("kwargs", None)),
        str(net).startswith("resnet") and small_stem(dataset, backbone.get("small_stem", None)),
    )


def _write_back(cfg: omegaconf.DictConfig, interp: InterpretabilitySpec, method: MethodSpec):
    """Writes into a pretraining run's own config (``args.json``) the interpretability keys given,
    the method's settings with defaults and the method it trains (no ``resume_from_checkpoint``);
    returns the spec of the method trained."""
    cfg.pop("resume_from_checkpoint", None)
    section = OmegaConf.select(cfg, "interpretability", default=None)
    if not section:
        OmegaConf.update(cfg, "interpretability", {}, merge=False, force_add=True)
    for name in list(section or ()):
        section[name] = getattr(interp, name)
    if method.settings is None:
        return method
    for key, value in method.settings.written().items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    trained, settings = method.settings.trains(str(method.name))
    cfg.method = trained
    kwargs = _plain(cfg.method_kwargs)
    return dataclasses.replace(method, name=trained, settings=settings, kwargs=kwargs)


def run_spec(cfg: omegaconf.DictConfig, pretraining: bool = False, saved: bool = False) -> RunSpec:
    """The spec of a resolved config (see :class:`RunSpec`); ``cfg`` is only read. A
    ``pretraining`` config also has its settings checked and written into the spec's ``solo``
    copy (:func:`_write_back`), and only there is ``performance.compile`` read."""
    resume_from = OmegaConf.select(cfg, "resume_from_checkpoint", default=None)
    cfg = copy.deepcopy(cfg)
    select = partial(OmegaConf.select, cfg)
    compiles = pretraining
    interp = InterpretabilitySpec()
    if pretraining or saved:
        try:
            interp = check_interpretability(cfg)
        except ValueError:
            if not saved:
                raise  # a saved config's section is its run's; another layout's: off
    data = dataset_spec(cfg)
    method_spec = _method_spec(cfg, data.loader, strict=pretraining)
    if pretraining:
        method_spec = _write_back(cfg, interp, method_spec)
    devices = select("devices", default=None)
    method = method_spec.name
    seed = select("seed", default=None)
    accelerator = str(select("accelerator", default="") or "")
    timeout = select("distributed.timeout_s", default=None)
    spec = RunSpec(
        data=data,
        optimizer=OptimizerSpec(
            name=select("optimizer.name", default=None),
            lr=select("optimizer.lr", default=None),
            batch_size=int(select("optimizer.batch_size", default=0) or 0),
            scheduler=select("scheduler.name", default=None),
        ),
        trainer=TrainerSpec(
            name=str(select("name", default=None) or "run"),
            seed=None if seed is None else int(seed),
            processes=job_processes(cfg),
            accelerator=accelerator,
            strategy=select("strategy", default="auto"),
            devices=(len(devices) if accelerator == "cpu" else list(devices))
            if OmegaConf.is_list(devices)
            else devices,
            peer_timeout_s=_peer_timeout_s(timeout),
            threads=_thread_count(select("threads", default=None)),
            max_epochs=select("max_epochs", default=None),
            performance=performance_settings(
                select("performance", default=None), accelerator, compiles
            ),
            wandb=WandbSpec(
                enabled=bool(select("wandb.enabled", default=False)),
                offline=bool(select("wandb.offline", default=False)),
                project=select("wandb.project", default=None),
                entity=select("wandb.entity", default=None),
            ),
            arguments=OmegaConf.to_container(cfg),
        ),
        checkpoint=CheckpointSpec(
            run_root=Path(str(select("checkpoint.dir", default=".")))
            / (method if method is not None else "linear"),
            enabled=bool(select("checkpoint.enabled", default=False)),
            frequency=int(select("checkpoint.frequency", default=1) or 1),
            keep_prev=bool(select("checkpoint.keep_prev", default=False)),
            time_interval_s=select("checkpoint.time_interval_s", default=None),
            auto_resume=bool(select("auto_resume.enabled", default=False)),
            max_hours=select("auto_resume.max_hours", default=None),
            resume_from=resume_from,
        ),
        interpretability=interp,
        method=method_spec,
        solo=cfg,
    )
    return spec


def saved_run_spec(saved: Mapping[str, Any]) -> RunSpec:
    """The spec of a checkpoint's saved config (``args.json``, a zoo artifact's ``cfg``): the one
    reader of a checkpoint's config; nothing is checked or compiled."""
    return run_spec(OmegaConf.create(dict(saved)), saved=True)


def with_threads(spec: RunSpec, threads: int) -> RunSpec:
    """``spec`` training on ``threads`` (a resumed run's recorded count): its trainer settings and
    its config (which solo-learn writes into ``args.json``) say that count."""
    if spec.trainer.threads == threads:
        return spec
    spec.solo.threads = threads
    arguments = {**spec.trainer.arguments, "threads": threads}
    trainer = dataclasses.replace(spec.trainer, threads=threads, arguments=arguments)
    return dataclasses.replace(spec, trainer=trainer)


def resolve_with_solo(
    cfg: omegaconf.DictConfig,
    parse_cfg: Callable[[omegaconf.DictConfig], omegaconf.DictConfig],
    check_data: bool = True,
    pretraining: bool = False,
) -> omegaconf.DictConfig:
    """Machine settings, dataset mapping and early data checks, solo-learn's ``parse_cfg``, then
    class counts and, for ``pretraining``, a ViT's input size and ``data.augment_on``."""
    cfg = check_run_cfg(cfg)  # every value read as written, or refused, before anything else
    cfg.threads = resolve_threads(OmegaConf.select(cfg, "threads", default=None))  # core.threads
    cfg = apply_global_batch(resolve_runtime(cfg))  # the paper's global batch on any machine
    data = resolve_dataset_cfg(cfg)  # the one decoding of the dataset while resolving
    cfg.name = dataset_run_name(
        str(OmegaConf.select(cfg, "name", default=None) or "run"), data.name
    )
    if check_data:
        batch = OmegaConf.select(cfg, "optimizer.batch_size", default=None)
        check_dataset_available(data, batch, job_processes(cfg))
    cfg = parse_cfg(cfg)
    if data.name in OFFLINE_DATASETS:
        cfg.data.num_classes = OFFLINE_DATASETS[data.name]
    if not pretraining:
        return cfg
    fit_backbone_to_crops(cfg)
    return resolve_augment_on(cfg, data)
