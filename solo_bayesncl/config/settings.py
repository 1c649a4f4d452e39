"""A config resolved once at the boundary and read once into frozen settings.

:func:`resolve_with_solo` is the resolution every command's library half runs before a model is
built: the run checks (:mod:`solo_bayesncl.config.checks`), the machine settings, the dataset
mapping and early data checks, then solo-learn's ``parse_cfg``. :func:`run_settings` then reads
the resolved config into a :class:`RunSettings`, which the library halves pass down instead of
the config (its dataset: a :class:`~solo_bayesncl.data.names.DatasetSpec`).

solo-learn's own classes (the method, its ``Checkpointer``, the data modules) still read the
config itself; everything the plugin decides reads these attributes.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.config.global_batch import apply_global_batch
from solo_bayesncl.config.runtime import resolve_runtime
from solo_bayesncl.core.validation import ConfigError, parse_bool
from solo_bayesncl.data.names import OFFLINE_DATASETS, DatasetSpec, dataset_run_name, dataset_spec
from solo_bayesncl.data.resolve import check_dataset_available, resolve_dataset_cfg

__all__ = [
    "PerformanceSettings",
    "RunSettings",
    "cpp_compiler",
    "performance_settings",
    "resolve_with_solo",
    "run_settings",
]


def _inductor_cxx() -> str:
    """The C++ compiler torch inductor calls on the CPU: ``$CXX``, else ``g++`` (``clang++`` on
    macOS), the only one it tries (its ``config.cpp.cxx``)."""
    return os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")


def cpp_compiler() -> str | None:
    """The path of the C++ compiler inductor would call on the CPU (:func:`_inductor_cxx`), or
    None when it is not an executable (inductor would then fail at the first step)."""
    return shutil.which(_inductor_cxx()) if _inductor_cxx() else None


@dataclass(frozen=True)
class PerformanceSettings:
    """The ``performance.*`` switches, decided once.

    ``channels_last``: solo-learn's memory layout (not ``disable_channel_last``).
    ``small_map_convs``: convolutions on maps of a few pixels as matrix products
    (:mod:`solo_bayesncl.training.small_map_convs`; left out: on). ``channels_last_max_pool``:
    max-pooling with the channels-last kernel in a contiguous model
    (:mod:`solo_bayesncl.training.channels_last_max_pool`; left out: on where the model stays
    contiguous). ``compile``: the backbone's training forward compiled
    (:mod:`solo_bayesncl.training.compiled`; left out: off).
    """

    channels_last: bool = True
    small_map_convs: bool = True
    channels_last_max_pool: bool = False
    compile: bool = False


def _flag(section: Mapping[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, None)
    if value is None:
        return default
    # the run checks parsed these strictly; a config that skipped them is read the same way
    return parse_bool(f"performance.{key}", value)


def performance_settings(
    section: Mapping[str, Any] | None, accelerator: str, compiles: bool = True
) -> PerformanceSettings:
    """The ``performance`` section read once (None: every default). ``compile=True`` on the CPU
    without a C++ compiler, which inductor needs there, raises :class:`ConfigError`, before
    training starts; a value that is not a boolean raises :class:`ConfigError` naming its key.
    Without ``compiles`` (a run that never compiles) ``compile`` is not read and is off."""
    section = section or {}
    contiguous = _flag(section, "disable_channel_last", False)
    compile_ = compiles and _flag(section, "compile", False)
    if compile_ and accelerator == "cpu" and cpp_compiler() is None:
        raise ConfigError(
            "performance.compile=True: torch.compile needs a C++ compiler on the CPU and "
            f"{_inductor_cxx()!r} (CXX, else g++) is not one on the path; install g++ or point "
            "CXX at a C++ compiler, or set performance.compile=False"
        )
    return PerformanceSettings(
        channels_last=not contiguous,
        small_map_convs=_flag(section, "small_map_convs", True),
        channels_last_max_pool=_flag(section, "channels_last_max_pool", True) and contiguous,
        compile=compile_,
    )


@dataclass(frozen=True)
class RunSettings:
    """A resolved pretraining or linear-evaluation config, read once.

    ``batch_size`` is the per-process batch (after :mod:`solo_bayesncl.config.global_batch`),
    ``processes`` the job's ``len(devices) * num_nodes``, ``run_root`` the folder of the
    method's runs (``checkpoint.dir/<method>``; a linear evaluation, which names no method:
    ``checkpoint.dir/linear``).
    """

    method: str | None
    seed: int | None
    batch_size: int
    processes: int
    dataset: DatasetSpec
    performance: PerformanceSettings
    run_root: Path
    auto_resume: bool = False
    max_hours: Any = None


def run_settings(cfg: omegaconf.DictConfig, compiles: bool = True) -> RunSettings:
    """The settings of a resolved config (see :class:`RunSettings`). Without ``compiles`` (linear
    evaluation, which never compiles) ``performance.compile`` is not read and is off."""
    devices = OmegaConf.select(cfg, "devices", default=None)
    processes = (len(devices) if OmegaConf.is_list(devices) else 1) * int(
        OmegaConf.select(cfg, "num_nodes", default=1) or 1
    )
    seed = OmegaConf.select(cfg, "seed", default=None)
    method = OmegaConf.select(cfg, "method", default=None)
    return RunSettings(
        method=method,
        seed=None if seed is None else int(seed),
        batch_size=int(cfg.optimizer.batch_size),
        processes=processes,
        dataset=dataset_spec(cfg),
        performance=performance_settings(
            OmegaConf.select(cfg, "performance", default=None),
            str(OmegaConf.select(cfg, "accelerator", default="")),
            compiles,
        ),
        run_root=Path(cfg.checkpoint.dir) / (method if method is not None else "linear"),
        auto_resume=bool(OmegaConf.select(cfg, "auto_resume.enabled", default=False)),
        max_hours=OmegaConf.select(cfg, "auto_resume.max_hours", default=None),
    )


def resolve_with_solo(
    cfg: omegaconf.DictConfig,
    parse_cfg: Callable[[omegaconf.DictConfig], omegaconf.DictConfig],
    check_data: bool = True,
) -> omegaconf.DictConfig:
    """Machine settings, dataset mapping and early data checks, then solo-learn's ``parse_cfg``
    (pretraining's or linear evaluation's), then the plugin datasets' class counts. The run name
    is made to say the dataset (:func:`solo_bayesncl.data.names.dataset_run_name`)."""
    cfg = check_run_cfg(cfg)  # every value read as written, or refused, before anything else
    cfg = apply_global_batch(resolve_runtime(cfg))  # the paper's global batch on any machine
    cfg = resolve_dataset_cfg(cfg)
    name = str(OmegaConf.select(cfg, "name", default=None) or "run")
    dataset = dataset_spec(cfg).name
    cfg.name = dataset_run_name(name, dataset)
    if check_data:
        check_dataset_available(cfg)
    cfg = parse_cfg(cfg)
    if dataset in OFFLINE_DATASETS:
        cfg.data.num_classes = OFFLINE_DATASETS[dataset]
    return cfg
